"""A model profile, measured: any `module:function` model trained for a few steps on one device, as
each strategy runs it there (`topowise profile`), and the same model in `bench train` (`train_callable`).

One process, a process group of one (so DDP, ZeroRedundancyOptimizer and FSDP2 run their real code,
with nothing to send). Per strategy:

1. warm-up steps, then timed steps: the step time (CUDA events), the host's time per phase, the
   allocator's peak (steady, and with the warm-up's);
2. two queued steps: a sleep kernel holds the GPU while the host issues the whole step, so CUDA
   events around each phase and each block (module hooks) time the GPU's own work, not its waits
   for the host; the host's time per phase here is its time to issue (never blocked by the GPU);
   memory allocated across the forward is the activation memory, per block too.

On the CPU (tests) the GPU times are the host's wall times. The profile is JSON in seconds and bytes
(format "topowise.model_profile", read by topowise.costmodel.profiled).
"""

from __future__ import annotations

import datetime
import gc
import statistics
import time
from contextlib import nullcontext

import torch
import torch.nn as nn

from topowise.errors import UsageError
from topowise.measure import strategies as S
from topowise.models import callable as C
from topowise.run import STEP_PHASES, STRATEGIES

FORMAT = "topowise.model_profile"
VERSION = 1
QUEUED_STEPS = 3
CPU_MATMUL_N = 512
HBM_COPY_BYTES = 1 << 30  # one 1 GiB device-to-device copy: reads and writes 2 GiB


def init_single_process(device: str):
    """A process group of one (gloo on CPU, NCCL on a GPU), unless one exists: (was it ours, backend)."""
    import torch.distributed as dist

    if dist.is_initialized():
        return False
    backend = "nccl" if device == "cuda" else "gloo"
    kwargs = {"device_id": torch.device("cuda", torch.cuda.current_device())} if device == "cuda" else {}
    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1, **kwargs)
    return True


def build_on(reference: str, *, micro_batch: int, seq_len: int | None, device: str, seed: int):
    """The user's model and batch on `device`, from `seed` (the same weights for every strategy)."""
    torch.manual_seed(seed)
    if device == "cuda":
        torch.cuda.manual_seed(seed)
    built = C.build(reference, micro_batch=micro_batch, seq_len=seq_len, device=device)
    built.model.to(device)
    built.batch = C.to_device(built.batch, device)
    return built


def wrap(model: nn.Module, blocks: list[tuple[str, nn.Module]], strategy: str, world_size: int, *,
         device_type: str, lr: float = 1e-5, weight_decay: float = 0.1, shard_group_size: int | None = None):
    """`model` as `strategy` runs it (topowise.measure.strategies for ddp/zero1; FSDP2 on the found
    blocks, then the root, for zero2/zero3/hsdp): (wrapped, optimizer, autocast?)."""
    spec = STRATEGIES[strategy]
    if not spec.fsdp:
        if "optimizer" in spec.sharded:
            wrapped, optimizer = S.apply_zero1(model, device_type=device_type, lr=lr, weight_decay=weight_decay)
        else:
            wrapped = S.apply_ddp(model, device_type=device_type)
            optimizer = S.make_optimizer(wrapped.parameters(), lr=lr, weight_decay=weight_decay,
                                         device_type=device_type)
        return wrapped, optimizer, True
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    if spec.replicated:
        shard = shard_group_size or world_size
        mesh = init_device_mesh(device_type, (world_size // shard, shard), mesh_dim_names=("replicate", "shard"))
    else:
        mesh = init_device_mesh(device_type, (world_size,), mesh_dim_names=("shard",))
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for _name, block in blocks:
        fully_shard(block, mesh=mesh, mp_policy=policy, reshard_after_forward=spec.reshard_after_forward)
    fully_shard(model, mesh=mesh, mp_policy=policy, reshard_after_forward=spec.reshard_after_forward)
    optimizer = S.make_optimizer(model.parameters(), lr=lr, weight_decay=weight_decay, device_type=device_type)
    return model, optimizer, False


def compile_blocks(model: nn.Module, blocks: list[tuple[str, nn.Module]]) -> None:
    """torch.compile each block in place (the module's forward; hooks and FSDP2 still see the module)."""
    for _name, block in blocks:
        block.compile()


class Step:
    """One training step of a wrapped model: forward (with the loss), backward, optimizer; the host's
    seconds per phase, and optional CUDA events at the phase boundaries."""

    def __init__(self, wrapped, optimizer, batch, loss_fn, autocast: bool, device_type: str):
        self.wrapped, self.optimizer, self.batch, self.loss_fn = wrapped, optimizer, batch, loss_fn
        self.autocast = torch.autocast(device_type, dtype=torch.bfloat16) if autocast else nullcontext()
        self.cuda = device_type == "cuda"

    def __call__(self, events: list | None = None, marks: dict | None = None, pause=None):
        """The loss (a tensor) and the host's seconds per phase. With `events` (6 CUDA events): recorded at
        the start and end of each phase; `pause(i)` runs before phase i starts (the queued steps' wait and
        sleep; not counted in the host's time); with `marks`, the memory allocated around the forward."""
        host = [0.0, 0.0, 0.0]

        def phase(i: int, work):
            if pause is not None:
                pause(i)
            t0 = time.perf_counter()
            if events:
                events[2 * i].record()
            out = work()
            if events:
                events[2 * i + 1].record()
            host[i] = time.perf_counter() - t0
            return out

        def forward():
            with self.autocast:
                return C.forward_loss(self.wrapped, self.batch, self.loss_fn)

        def optimizer_step():
            self.optimizer.step()
            self.wrapped.zero_grad(set_to_none=True)

        if marks is not None and self.cuda:
            marks["before_forward"] = torch.cuda.memory_allocated()
        loss = phase(0, forward)
        if marks is not None and self.cuda:
            marks["after_forward"] = torch.cuda.memory_allocated()
        phase(1, loss.backward)
        phase(2, optimizer_step)
        return loss.detach(), tuple(host)


class BlockTimer:
    """CUDA events (or host clocks on the CPU) around each block's forward and backward, and the
    memory each block's forward leaves allocated; hooks removed by `close`."""

    def __init__(self, blocks: list[tuple[str, nn.Module]], cuda: bool):
        self.cuda, self.handles = cuda, []
        self.names = [n for n, _ in blocks]
        self.marks: dict[tuple[str, str], list] = {}
        self.memory: dict[str, list[int]] = {}
        self.inputs: dict[str, int] = {}
        for name, block in blocks:
            self.handles += [
                block.register_forward_pre_hook(self._hook(name, "fwd0", pre=True)),
                block.register_forward_hook(self._hook(name, "fwd1")),
                block.register_full_backward_pre_hook(self._hook(name, "bwd0")),
                block.register_full_backward_hook(self._hook(name, "bwd1")),
            ]

    def _mark(self):
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def _hook(self, name: str, what: str, pre: bool = False):
        def hook(module, *args):
            self.marks.setdefault((name, what), []).append(self._mark())
            if what == "fwd0" and self.cuda:
                self.memory.setdefault(name, []).append(torch.cuda.memory_allocated())
                self.inputs[name] = sum(t.numel() * t.element_size() for t in C._tensors(args[0]))
            elif what == "fwd1" and self.cuda:
                self.memory[name].append(torch.cuda.memory_allocated())
        return hook

    def _span(self, a, b) -> float:
        return a.elapsed_time(b) / 1e3 if self.cuda else b - a

    def result(self) -> list[dict]:
        out = []
        for name in self.names:
            row = {"name": name}
            for phase, (a, b) in (("forward_s", ("fwd0", "fwd1")), ("backward_s", ("bwd0", "bwd1"))):
                starts, ends = self.marks.get((name, a), []), self.marks.get((name, b), [])
                spans = [self._span(x, y) for x, y in zip(starts, ends)]
                row[phase] = statistics.median(spans) if spans else None
            mem = self.memory.get(name, [])
            deltas = [mem[i + 1] - mem[i] for i in range(0, len(mem) - 1, 2)]
            row["activation_bytes"] = max(deltas) if deltas else None
            row["input_bytes"] = self.inputs.get(name)
            out.append(row)
        return out

    def close(self) -> None:
        for h in self.handles:
            h.remove()


def sleep_cycles_per_s() -> float:
    """Clock cycles per second of torch.cuda._sleep, timed once."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(1000)
    start.record()
    torch.cuda._sleep(10_000_000)
    end.record()
    end.synchronize()
    return 10_000_000 / (start.elapsed_time(end) / 1e3)


def measure_rates(device: str) -> dict:
    """The measured bf16 matmul rate (FLOP/s) and device-memory copy rate (bytes/s) of this device:
    what a profile is scaled by for another GPU (topowise.costmodel.profiled)."""
    if device != "cuda":
        n = CPU_MATMUL_N
        a = torch.randn(n, n)
        t0 = time.perf_counter()
        for _ in range(5):
            a @ a
        flops = 2 * n**3 * 5 / (time.perf_counter() - t0)
        x = torch.empty(64 << 20, dtype=torch.uint8)
        t0 = time.perf_counter()
        x.clone()
        return {"matmul_flops": flops, "memory_bytes_per_s": 2 * x.numel() / (time.perf_counter() - t0)}
    from topowise.measure.steps import measure_matmul_flops

    flops = measure_matmul_flops()
    src = torch.empty(HBM_COPY_BYTES, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    dst.copy_(src)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(10):
        dst.copy_(src)
    end.record()
    end.synchronize()
    rate = 2 * HBM_COPY_BYTES * 10 / (start.elapsed_time(end) / 1e3)
    del src, dst
    torch.cuda.empty_cache()
    return {"matmul_flops": flops, "memory_bytes_per_s": rate}


def _state_bytes(model: nn.Module, optimizer) -> dict:
    def nbytes(t) -> int:
        local = getattr(t, "to_local", None)  # FSDP2's DTensor: this rank's shard
        t = local() if local else t
        return t.numel() * t.element_size()

    params = sum(nbytes(p) for p in model.parameters())
    states = getattr(optimizer, "optim", optimizer).state  # ZeroRedundancyOptimizer wraps its AdamW
    opt = sum(nbytes(v) for s in states.values() for v in s.values() if isinstance(v, torch.Tensor) and v.dim())
    return {"params_bytes": params, "optimizer_bytes": opt}


def profile_strategy(reference: str, strategy: str, *, micro_batch: int, seq_len: int | None, device: str,
                     steps: int, warmup: int, compile: bool, wrap_class: str | None, seed: int,
                     progress=None) -> dict:
    """One strategy of the profile (see the module docstring). `progress(line)`, if given, hears of each
    step as it ends (a CPU step can take seconds)."""
    cuda = device == "cuda"
    total = warmup + steps + (QUEUED_STEPS if cuda else 0) + 1
    done = [0]
    began = time.perf_counter()

    def stepped(what: str) -> None:
        done[0] += 1
        if progress is not None:
            progress(f"{strategy}: step {done[0]} of {total} ({what}), {time.perf_counter() - began:.1f} s")

    gc.collect()  # the previous strategy's model (DDP's reducer holds reference cycles) must be gone
    if cuda:
        torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated() if cuda else 0  # anything still allocated is not this strategy's
    built = build_on(reference, micro_batch=micro_batch, seq_len=seq_len, device=device, seed=seed)
    _name, blocks = C.find_blocks(built.model, wrap_class)
    if compile:
        compile_blocks(built.model, blocks)
    wrapped, optimizer, autocast = wrap(built.model, blocks, strategy, 1, device_type=device)
    step = Step(wrapped, optimizer, built.batch, built.loss_fn, autocast, device)
    gc.disable()  # as bench train: no collector pauses inside the timed steps (collected at the start)
    try:
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        for _ in range(warmup):
            step()
            stepped("warm-up")
        if cuda:
            torch.cuda.synchronize()
            first_peak = torch.cuda.max_memory_allocated() - base
            torch.cuda.reset_peak_memory_stats()
        step_s, host, losses, step_peaks = [], [], [], []
        for _ in range(steps):
            if cuda:
                events = [torch.cuda.Event(enable_timing=True) for _ in range(6)]
                loss, h = step(events)
                step_s.append(events)
            else:
                t0 = time.perf_counter()
                loss, h = step()
                step_s.append(time.perf_counter() - t0)
            host.append(h)
            losses.append(loss)
            stepped("timed")
            if cuda:  # host-side counters: no wait for the GPU
                step_peaks.append(torch.cuda.max_memory_allocated())
                torch.cuda.reset_peak_memory_stats()
        if cuda:
            torch.cuda.synchronize()
            step_peaks = [x - base for x in step_peaks]
            steady_peak = max(step_peaks)
            step_s = [e[0].elapsed_time(e[5]) / 1e3 for e in step_s]
        states = _state_bytes(wrapped, optimizer)
        # the queued steps: before each phase a sleep kernel holds the GPU while the host issues the phase
        gpu, issue, marks_all = [], [], []
        cycles = sleep_cycles_per_s() if cuda else 0.0
        # hold each phase's GPU twice as long as the host took to issue it (the timed steps' time at first,
        # an upper bound; then the last queued step's), after the previous phase has finished
        hold_s = [2.0 * statistics.median(h[i] for h in host) + 0.002 for i in range(len(STEP_PHASES))]

        def pause(i: int) -> None:
            torch.cuda.synchronize()
            torch.cuda._sleep(int(cycles * hold_s[i]))

        timer = None
        queued = QUEUED_STEPS if cuda else 0  # on the CPU the host does the work: the timed steps' times are it
        for k in range(queued + 1):
            if k == queued:  # one more, with the per-block hooks (their own cost kept out of the phases)
                timer = BlockTimer([] if compile else blocks, cuda)  # hooks in a compiled block break its graph
            marks: dict = {}
            if cuda:
                torch.cuda.synchronize()
                events = [torch.cuda.Event(enable_timing=True) for _ in range(6)]
                _loss, h = step(events, marks, pause)
                gpu.append(events)
            else:
                _loss, h = step(marks=marks)
                gpu.append(h)
            issue.append(h)
            hold_s = [2.0 * x + 0.002 for x in h]
            marks_all.append(marks)
            stepped("per block" if k == queued else "queued")
        if cuda:
            torch.cuda.synchronize()
            gpu = [tuple(e[2 * i].elapsed_time(e[2 * i + 1]) / 1e3 for i in range(3)) for e in gpu]
        gpu, issue = (gpu[:queued], issue[:queued]) if cuda else (host, host)
        blocks_out = timer.result()
        timer.close()
    finally:
        gc.enable()
    phase_gpu = {p: statistics.median(g[i] for g in gpu) for i, p in enumerate(STEP_PHASES)}
    # each is an upper bound of the host's time to issue the phase: the timed steps' where the GPU is the
    # bottleneck (the host waits for a full launch queue), the queued steps' where one phase overflows it
    phase_host = {p: min(statistics.median(h[i] for h in issue), statistics.median(h[i] for h in host))
                  for i, p in enumerate(STEP_PHASES)}
    activation = [m["after_forward"] - m["before_forward"] for m in marks_all if "after_forward" in m]
    out = {
        "step_s": statistics.median(step_s),
        "step_times_s": step_s,
        "gpu_s": phase_gpu,
        "host_s": phase_host,
        "host_s_timed_steps": {p: statistics.median(h[i] for h in host) for i, p in enumerate(STEP_PHASES)},
        "peak_allocated_bytes": steady_peak if cuda else None,
        "first_steps_peak_bytes": max(first_peak, steady_peak) if cuda else None,
        "step_peak_bytes": step_peaks,
        "baseline_bytes": base,
        "activation_bytes": max(activation) if activation else None,
        **states,
        "losses": [float(x) for x in torch.stack(losses).tolist()],
        "blocks": blocks_out,
    }
    return out  # the next strategy's start collects this one's model


def profile_model(reference: str, *, micro_batch: int, seq_len: int | None, device: str = "cuda",
                  strategies: tuple[str, ...] = ("ddp", "zero1", "zero2", "zero3"), steps: int = 5,
                  warmup: int = 3, compile: bool = False, wrap_class: str | None = None, seed: int = 0,
                  progress=None) -> dict:
    """The profile of `reference` on this process's device (CUDA device 0 or the CPU), as a dict; `progress`
    (a function of one line) hears of every step. A model no strategy could train is refused (UsageError,
    its first error's first line): there is nothing to write."""
    started = time.perf_counter()
    if device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda but no CUDA GPU is visible here: use --device cpu, or a GPU machine")
    spec = C.describe_callable(reference, wrap_class=wrap_class, micro_batch=micro_batch, seq_len=seq_len)
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    ours = init_single_process(device)
    try:
        rates = measure_rates(device)
        results = {}
        for name in strategies:
            try:
                results[name] = profile_strategy(reference, name, micro_batch=micro_batch, seq_len=seq_len,
                                                 device=device, steps=steps, warmup=warmup, compile=compile,
                                                 wrap_class=wrap_class, seed=seed, progress=progress)
            except UsageError:
                raise
            except Exception as exc:  # noqa: BLE001 - one strategy's failure (OOM, an unsupported op) is its record
                oom = isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc).lower()
                results[name] = {"status": "oom" if oom else "error",
                                 "error": f"{type(exc).__name__}: {C._first_line(exc)}"}
                gc.collect()
                if device == "cuda":
                    torch.cuda.empty_cache()
    finally:
        if ours:
            import torch.distributed as dist

            dist.destroy_process_group()
    if not any(r.get("status", "ok") == "ok" for r in results.values()):
        name, failed = next(iter(results.items()))
        raise UsageError(f"--model {reference}: the training step failed under every strategy profiled, so no "
                         f"profile is written; {name}: {failed['status']}, {failed['error']}")
    return {
        "format": FORMAT, "version": VERSION,
        "model": spec.to_dict(),
        "micro_batch": micro_batch,
        "seq_len": seq_len,
        "device": device,
        "device_name": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "torch_version": torch.__version__,
        "compile": compile,
        "steps": steps, "warmup": warmup, "queued_steps": QUEUED_STEPS,
        **rates,
        "strategies": results,
        "wall_s": time.perf_counter() - started,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def checkpoint_blocks(model: nn.Module, blocks: list[tuple[str, nn.Module]], mode: str):
    """Full activation checkpointing of every block (each replaced in its parent by a non-reentrant
    checkpoint wrapper, as bench train does for its transformer): the blocks as they now stand."""
    if mode == "none" or not blocks:
        return blocks
    if mode != "full":
        raise UsageError(f"{mode} checkpointing is not applied to module:function models; use full or none")
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        apply_activation_checkpointing,
        checkpoint_wrapper,
    )

    ids = {id(b) for _, b in blocks}
    apply_activation_checkpointing(model, check_fn=lambda m: id(m) in ids,
                                   checkpoint_wrapper_fn=lambda m: checkpoint_wrapper(m, preserve_rng_state=False))
    return [(name, model.get_submodule(name)) for name, _ in blocks]


def train_callable(case, rank, trace_dir: str | None = None) -> dict:
    """`bench train` of a `module:function` model on this rank (train_rank.train_pytorch for a CallableSpec):
    the same build, wrap and step as the profile, timed as bench train times every model."""
    from topowise.measure import steps as T

    run = case.run
    device_type = "cuda" if case.device == "cuda" else "cpu"
    measured_peak = None
    if device_type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        measured_peak = T.measure_matmul_flops()
    seq_len = run.seq_len if "seq_len" in run.model.accepts else None
    built = build_on(run.model.reference, micro_batch=run.micro_batch, seq_len=seq_len, device=rank.device,
                     seed=case.seed)
    _name, blocks = C.find_blocks(built.model, run.model.wrap_class or None)
    blocks = checkpoint_blocks(built.model, blocks, getattr(run, "checkpointing", "none"))
    if run.compile:
        compile_blocks(built.model, blocks)
    wrapped, optimizer, autocast = wrap(built.model, blocks, run.strategy, rank.world_size, device_type=device_type,
                                        lr=case.lr, weight_decay=case.weight_decay,
                                        shard_group_size=run.shard_group_size)
    step = Step(wrapped, optimizer, built.batch, built.loss_fn, autocast, device_type)
    host: list = []

    def one_step(_step: int):
        loss, h = step()
        host.append(h)
        return loss

    peaks: list[int] = []
    marks: list[float] = []
    total = case.warmup + case.steps
    times, losses = T.timed_steps(total, one_step, device_type == "cuda", peaks, trace_dir, marks)
    extra = {"host_phase_s": T.host_phases(host[case.warmup:], rank)}
    return T.step_result(case, rank, times, losses, measured_peak, extra, step_peaks=peaks, marks=marks)
