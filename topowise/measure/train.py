"""`bench train`: real training steps of each strategy, one fresh torchrun launch per strategy.

Parent side (`bench_train`): validates the request once, launches `run_case` on every rank under
torchrun for one strategy at a time (fresh processes and process group each, so one failure cannot
poison the next), reads what rank 0 (or a failing rank) wrote, adds the cost model's prediction,
appends one JSONL record per strategy and checks that the losses agree across strategies.

Rank side (`run_case`): builds the same model from the same seed on every strategy, wraps it
(topowise.measure.strategies), runs warm-up + timed steps on synthetic tokens seeded by
(seed, step, rank), and reports step times from CUDA events read once after the loop, the loss of
every step (kept on the GPU until the loop ends), and peak allocated / reserved memory.

The step loop never waits for the GPU: no .item(), no synchronize, no printing of tensors.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable

from topowise.costmodel.profile import HOST_PHASES  # forward, backward, optimizer: the cost model's phases
from topowise.errors import UsageError
from topowise.measure import launcher
from topowise.measure.records import relative_error
from topowise.models.spec import ModelSpec, load_model

STRATEGIES = ("ddp", "zero1", "zero2", "zero3", "hsdp")
ALIASES = {"fsdp": "zero3"}
ENTRY = "topowise.measure.train:run_case"
FAIL_ENV = "TOPOWISE_TEST_FAIL"  # test hook: "zero1:oom,zero2:error,zero3:crash,hsdp:hang,ddp:diverge"
# oom / error: raise after wrapping; crash: exit with no result; hang: sleep past --timeout;
# diverge: never step the optimizer (a strategy that does not train like the others).

# Losses of strategies that start from the same weights and data agree to within this relative
# difference at every step. bf16 keeps 8 significant bits (unit roundoff 2^-8 = 0.39%); the
# strategies differ in summation order (bucketed all-reduce vs reduce-scatter), in where the
# casts happen (autocast per matmul vs FSDP's bf16 all-gather; an fp32 vs a bf16 residual stream)
# and Adam amplifies early differences a little over the steps. A few bf16 roundings: 2%.
# A wrong wrap (different weights, missing gradient averaging, a stale shard) moves the loss by
# far more than that within a step or two.
LOSS_RTOL = 0.02
MATMUL_N = 8192  # the bf16 matmul used to measure the achievable peak (facts.md: ~790 TFLOP/s on H200)


@dataclass(frozen=True)
class TrainCase:
    """One strategy's run: everything a rank needs, plain values, round-trips through JSON."""

    model: str
    strategy: str
    micro_batch: int = 1
    seq_len: int = 4096
    steps: int = 10
    warmup: int = 3
    activation_checkpointing: bool = False
    compile: bool = False
    fabric: str = "nvlink"
    device: str = "cuda"
    shard_group_size: int | None = None  # hsdp only
    seed: int = 0
    # Small enough that one AdamW step (about lr per weight, against init std 0.02) does not throw
    # the loss around: at 3e-4 the loss jumped 12.2 -> 14.2 after step 1 on llama3.2-1b and the
    # strategies' bf16 rounding differences grew to 10% by step 8, hiding any real wrapping bug.
    lr: float = 1e-5
    weight_decay: float = 0.1
    engine: str = "pytorch"  # or "deepspeed" (topowise.measure.deepspeed_engine)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "TrainCase":
        return cls(**data)


# ------------------------------------------------------------------------------------------------
# Validation and decisions made once, in the parent (pure functions: tested)


def normalize_strategies(text: str | list[str]) -> tuple[str, ...]:
    names = text.split(",") if isinstance(text, str) else list(text)
    out: list[str] = []
    for raw in names:
        name = ALIASES.get(raw.strip().lower(), raw.strip().lower())
        if not name:
            continue
        if name not in STRATEGIES:
            raise UsageError(f"unknown strategy {raw.strip()!r}: choose from {', '.join(STRATEGIES)} "
                             "(fsdp is an alias of zero3), comma-separated")
        if name not in out:
            out.append(name)
    if not out:
        raise UsageError(f"--strategies is empty: give one or more of {', '.join(STRATEGIES)}")
    return tuple(out)


def validate_sizes(spec: ModelSpec, *, micro_batch: int, seq_len: int, steps: int, warmup: int, nproc: int,
                   timeout_s: float) -> None:
    for flag, value, least in (("--micro-batch", micro_batch, 1), ("--seq-len", seq_len, 2),
                               ("--steps", steps, 1), ("--warmup", warmup, 0), ("--nproc", nproc, 1)):
        if value < least:
            raise UsageError(f"{flag} must be at least {least}, not {value}")
    if timeout_s <= 0:
        raise UsageError(f"--timeout must be a positive number of seconds, not {timeout_s:g}")
    if spec.max_positions and seq_len > spec.max_positions:
        raise UsageError(f"{spec.name} has {spec.max_positions} learned positions: use --seq-len "
                         f"{spec.max_positions} or less, not {seq_len}")
    if spec.family not in ("llama", "gpt2"):
        raise UsageError(f"model family {spec.family!r} is not built by bench train; llama and gpt2 are")


def hsdp_layout(world_size: int, requested: int | None = None,
                islands: tuple[tuple[int, ...], ...] | None = None) -> tuple[int, int, str]:
    """(shard group size, replicas, note). An explicit request wins, then NVLink islands, then
    world // 2 (world >= 4 and even), else the whole world (one shard group: HSDP degenerates to ZeRO-3)."""
    if requested is not None:
        if requested < 1 or world_size % requested:
            raise UsageError(f"--shard-group-size {requested} must divide the {world_size} processes "
                             f"({world_size} = replicas x shard group size); try "
                             + ", ".join(str(d) for d in range(1, world_size + 1) if world_size % d == 0))
        shard, why = requested, "from --shard-group-size"
    elif islands and len({len(i) for i in islands}) == 1 and world_size % len(islands[0]) == 0:
        shard, why = len(islands[0]), f"one shard group per NVLink island of {len(islands[0])} GPUs"
    elif world_size >= 4 and world_size % 2 == 0:
        shard, why = world_size // 2, "no NVLink islands known: half the processes per shard group"
    else:
        shard, why = world_size, "no NVLink islands known"
    replicas = world_size // shard
    if replicas == 1:
        why += f"; with one shard group of {shard}, hsdp is the same as zero3 (replicate 1)"
    elif shard == 1:
        why += "; with a shard group of 1, hsdp is the same as ddp over FSDP (no sharding)"
    return shard, replicas, why


def live_islands(num_gpus: int) -> tuple[tuple[int, ...], ...] | None:
    """NVLink islands of the first `num_gpus` GPUs of this machine, when live discovery is there."""
    topo = live_topology()
    if topo is None or topo.num_gpus < num_gpus:
        return None
    try:
        return topo.restricted_to(range(num_gpus)).islands()
    except Exception:  # a topology module still settling: fall back to the default grouping
        return None


def live_topology():
    """This machine's Topology from NVML, or None (no GPUs, no NVML, or no live discovery yet)."""
    try:
        from topowise.topology import nvml
    except ImportError:
        return None
    for name in ("live_topology", "load_live", "discover", "read_topology"):
        func = getattr(nvml, name, None)
        if callable(func):
            try:
                return func()
            except Exception:
                return None
    return None


# ------------------------------------------------------------------------------------------------
# Rank side


def run_case(config: dict) -> dict | None:
    """Entry point on every rank. Rank 0 writes the result; a failing rank writes its failure.

    Self-launched, a failing rank exits at once (torchrun then stops the others). Joined to a
    running job, it returns the failure so the next strategy can run (that works when every rank
    failed alike, as with OOM; a failure on one rank alone leaves the others waiting until the
    process-group timeout).
    """
    import torch.distributed as dist

    case = TrainCase.from_dict(config["case"])
    _inject_before_join(injected_failure(case.strategy), Path(config["result_dir"]))
    launcher.pin_to_cores()
    rank = launcher.init_distributed("nccl" if case.device == "cuda" else "gloo",
                                     timeout_s=float(config.get("timeout_s", 600)))
    result_dir = Path(config["result_dir"])
    (result_dir / f"rank{rank.rank}.started").touch()  # joined the group: what follows is the case's doing
    try:
        if case.engine == "deepspeed":
            from topowise.measure.deepspeed_engine import train_deepspeed

            result = train_deepspeed(case, rank)
        else:
            result = _train(case, rank)
    except BaseException as exc:  # noqa: BLE001 - every failure is recorded, then the run goes on
        failure = describe_failure(exc)
        _write_json(result_dir / f"rank{rank.rank}.failed.json", dict(failure, rank=rank.rank))
        if config.get("self_launched", True):
            sys.stderr.write(f"rank {rank.rank}: {failure['status']}: {failure['error']}\n")
            sys.stderr.flush()
            os._exit(1)
        _release_memory()
        return failure
    if rank.is_main:
        _write_json(result_dir / "rank0.json", result)
    if config.get("self_launched", True):
        dist.destroy_process_group()
    _release_memory()
    return result


def prepare_case(case: TrainCase, rank):
    """What both engines do first: (injected failure, measured matmul rate, spec, the model built
    from the spec with the case's seed, checkpointing and compile applied). Unwrapped."""
    import torch

    from topowise.measure import strategies as S
    from topowise.models.transformer import build_model

    fail = injected_failure(case.strategy)
    measured_peak = None
    if case.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True  # fp32 matmuls (none in the hot path) may use TF32
        torch.backends.cudnn.allow_tf32 = True
        measured_peak = measure_matmul_flops()
    spec = load_model(case.model)
    model = build_model(spec, case.seq_len, rank.device, case.seed)
    if case.activation_checkpointing:
        S.apply_activation_checkpointing(model)
    if case.compile:
        S.apply_compile(model)
    return fail, measured_peak, spec, model


def _train(case: TrainCase, rank) -> dict:
    import torch
    import torch.nn.functional as F

    from topowise.measure import strategies as S

    device_type = "cuda" if case.device == "cuda" else "cpu"
    fail, measured_peak, spec, model = prepare_case(case, rank)

    from topowise.measure.collectives import node_labels, ranks_by_node

    layout = node_labels(ranks_by_node(rank.world_size))  # which node holds which ranks (multi-node jobs)
    if case.strategy in ("ddp", "zero1"):
        if case.strategy == "ddp":
            wrapped = S.apply_ddp(model, device_type=device_type)
            optimizer = S.make_optimizer(wrapped.parameters(), lr=case.lr, weight_decay=case.weight_decay,
                                         device_type=device_type)
        else:
            wrapped, optimizer = S.apply_zero1(model, device_type=device_type, lr=case.lr,
                                               weight_decay=case.weight_decay)
    else:
        from torch.distributed.device_mesh import init_device_mesh

        if case.strategy == "hsdp":
            shard, replicas, _note = hsdp_layout(rank.world_size, case.shard_group_size)
            mesh = init_device_mesh(device_type, (replicas, shard), mesh_dim_names=("replicate", "shard"))
            wrapped = S.apply_hsdp(model, mesh)
            layout.update(shard_group_size=shard, replicas=replicas)
        else:
            mesh = init_device_mesh(device_type, (rank.world_size,), mesh_dim_names=("shard",))
            wrapped = S.apply_fsdp(model, mesh, reshard_after_forward=case.strategy == "zero3")
        optimizer = S.make_optimizer(wrapped.parameters(), lr=case.lr, weight_decay=case.weight_decay,
                                     device_type=device_type)
    _inject(fail)

    inputs, targets = synthetic_batches(case, rank.rank, spec.vocab_size, rank.device)
    autocast = torch.autocast(device_type, dtype=torch.bfloat16) if S.uses_autocast(case.strategy) else nullcontext()

    host: list[tuple[float, float, float]] = []  # per step: host seconds in forward, backward, optimizer

    # Named ranges for the profiler's timeline (TOPOWISE_BENCH_PROFILE); a flag check when it is off.
    from torch.profiler import record_function

    def one_step(step: int):
        t0 = time.perf_counter()
        with record_function("topowise.forward"):
            with autocast:
                logits = wrapped(inputs[step])
            # float32 log-softmax of the bf16 logits: the same loss arithmetic on every strategy
            loss = F.cross_entropy(logits.flatten(0, 1).float(), targets[step].flatten())
            del logits
        t1 = time.perf_counter()
        with record_function("topowise.backward"):
            loss.backward()
        t2 = time.perf_counter()
        with record_function("topowise.optimizer"):
            if fail != "diverge":
                optimizer.step()
            wrapped.zero_grad(set_to_none=True)
        host.append((t1 - t0, t2 - t1, time.perf_counter() - t2))
        return loss

    peaks: list[int] = []
    times, losses = timed_steps(case.warmup + case.steps, one_step, device_type == "cuda", peaks)
    layout["host_phase_s"] = host_phases(host[case.warmup:], rank)
    return step_result(case, rank, times, losses, measured_peak, layout, step_peaks=peaks)


def host_phases(per_step: list[tuple[float, float, float]], rank) -> dict[str, float]:
    """Median host (Python) seconds per phase over the timed steps, the slowest rank's.

    The step loop never waits for the GPU, so where the GPU keeps up (few tokens), this is what the
    host needs to issue each phase: the floor the cost model's host term describes. Where the GPU is
    the bottleneck, the host blocks on a full launch queue and these times include that wait."""
    import torch
    import torch.distributed as dist

    medians = [statistics.median(col) for col in zip(*per_step)] if per_step else [0.0] * len(HOST_PHASES)
    t = torch.tensor(medians, dtype=torch.float64, device=rank.device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return dict(zip(HOST_PHASES, t.tolist()))


def timed_steps(total: int, one_step: Callable, cuda: bool, peaks: list | None = None) -> tuple[list[float], list]:
    """Run `one_step(step)` (returns the loss tensor) `total` times: per-step seconds and losses.

    On CUDA: events around each step, read after one synchronize at the end; the peak-memory
    counters start here; with `peaks`, each step's peak allocated bytes is appended to it (the
    allocator's counters are host-side: reading them does not wait for the GPU). Losses stay tensors
    (no .item() inside the loop)."""
    import gc

    import torch

    # As torchtitan's training loop does (GarbageCollection, tools/utils.py): collect once, then no
    # automatic collection during the steps, whose pauses land on random steps of the host's time.
    # TOPOWISE_BENCH_GC=on keeps Python's automatic collection (to measure what it costs).
    gc.collect()
    if os.environ.get("TOPOWISE_BENCH_GC") != "on":
        gc.disable()
    try:
        trace_dir = os.environ.get("TOPOWISE_BENCH_PROFILE")
        if not trace_dir:
            return _timed_steps(total, one_step, cuda, peaks, torch)
        return _profiled_steps(trace_dir, total, one_step, cuda, peaks, torch)
    finally:
        gc.enable()


def _profiled_steps(trace_dir: str, total: int, one_step: Callable, cuda: bool, peaks, torch):
    """TOPOWISE_BENCH_PROFILE=DIR (a diagnostic): the steps under torch.profiler; each rank writes its
    operators and CUDA runtime calls by host time to DIR/rank<R>.txt (where the host waits, if it does)
    and the timeline of host calls and GPU kernels to DIR/rank<R>.trace.json.gz
    (benchmarks/timeline.py says, phase by phase, whether the GPU waited for the host or for NCCL)."""
    from torch.profiler import ProfilerActivity, profile, record_function

    def annotated_step(step: int):
        with record_function(f"topowise.step.{step}"):
            return one_step(step)

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        result = _timed_steps(total, annotated_step, cuda, peaks, torch)
    base = Path(trace_dir) / f"rank{os.environ.get('RANK', '0')}"
    base.parent.mkdir(parents=True, exist_ok=True)
    base.with_suffix(".txt").write_text(
        prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=40, max_name_column_width=60))
    prof.export_chrome_trace(str(base.with_suffix(".trace.json.gz")))  # torch gzips a .gz path
    return result


def _timed_steps(total: int, one_step: Callable, cuda: bool, peaks: list | None, torch) -> tuple[list[float], list]:
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(total)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(total)]
    wall, losses = [], []
    for step in range(total):
        if cuda:
            starts[step].record()
        else:
            t0 = time.perf_counter()
        losses.append(one_step(step).detach())
        if cuda:
            ends[step].record()
            if peaks is not None:
                peaks.append(torch.cuda.max_memory_allocated())
                torch.cuda.reset_peak_memory_stats()
        else:
            wall.append(time.perf_counter() - t0)
    if cuda:
        torch.cuda.synchronize()  # the one wait: after the last step
        return [s.elapsed_time(e) / 1e3 for s, e in zip(starts, ends)], losses
    return wall, losses


def step_result(case: TrainCase, rank, times: list[float], losses: list, measured_peak: float | None,
                extra: dict | None = None, step_peaks: list | None = None) -> dict:
    """Across ranks: the slowest rank's time for each step, the mean loss, the largest memory."""
    import torch
    import torch.distributed as dist

    cuda = case.device == "cuda"
    if cuda:
        step_peaks = step_peaks or [torch.cuda.max_memory_allocated()] * len(times)
        steady = max(step_peaks[case.warmup:] or step_peaks)
        memory = torch.tensor([max(step_peaks + [torch.cuda.max_memory_allocated()]),
                               torch.cuda.max_memory_reserved(), steady, *step_peaks],
                              dtype=torch.float64, device=rank.device)
    else:
        memory = torch.zeros(3 + len(times), dtype=torch.float64)
    times_t = torch.tensor(times, dtype=torch.float64, device=rank.device)
    dist.all_reduce(times_t, op=dist.ReduceOp.MAX)
    loss_t = torch.stack(losses).double()
    dist.all_reduce(loss_t, op=dist.ReduceOp.SUM)
    dist.all_reduce(memory, op=dist.ReduceOp.MAX)
    loss_t /= rank.world_size
    timed = times_t.tolist()[case.warmup:]
    return {
        "status": "ok",
        "step_time_s": statistics.median(timed),
        "step_times_s": timed,
        "warmup_step_times_s": times_t.tolist()[:case.warmup],
        "losses": loss_t.tolist(),
        "peak_memory_bytes": int(memory[0]) if cuda else None,  # whole run, warm-up included
        "reserved_bytes": int(memory[1]) if cuda else None,
        # the timed steps alone: what the cost model's steady-state step describes
        "steady_peak_memory_bytes": int(memory[2]) if cuda else None,
        "step_peak_memory_bytes": [int(x) for x in memory[3:].tolist()] if cuda else None,
        "measured_peak_flops": measured_peak,
        "gpu_name": torch.cuda.get_device_name() if cuda else None,
        "torch_version": torch.__version__,
        "nccl_version": _nccl_version() if cuda else None,
        **(extra or {}),
    }


def _nccl_version() -> str:
    import torch

    version = torch.cuda.nccl.version()  # a tuple in recent releases, an int in older ones
    return ".".join(map(str, version)) if isinstance(version, tuple) else str(version)


def synthetic_batches(case: TrainCase, rank: int, vocab_size: int, device: str):
    """Token ids for every step of this rank, made on the CPU before the loop and moved once.

    Step s of rank r draws from a generator seeded by (seed, step, rank): the same batches for every
    strategy. Ids follow a skewed (u^3) distribution, so the model has something to learn and the
    loss falls from ln(vocab) within a few steps; a strategy that trains wrongly shows in the curve.
    """
    import torch

    total = case.warmup + case.steps
    rows = []
    for step in range(total):
        g = torch.Generator().manual_seed(case.seed * 1_000_003 + step * 10_007 + rank)
        u = torch.rand((case.micro_batch, case.seq_len + 1), generator=g)
        rows.append((u.pow(3) * vocab_size).long().clamp_(max=vocab_size - 1))
    tokens = torch.stack(rows).to(device)
    return tokens[:, :, :-1].contiguous(), tokens[:, :, 1:].contiguous()


def measure_matmul_flops(n: int = MATMUL_N, reps: int = 20) -> float:
    """bf16 n x n x n matmul rate on this GPU, FLOP/s (every rank at once, so clocks match the run)."""
    import torch

    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(5):
        torch.mm(a, b, out=c)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        torch.mm(a, b, out=c)
    end.record()
    end.synchronize()
    seconds = start.elapsed_time(end) / 1e3
    del a, b, c
    torch.cuda.empty_cache()
    return 2.0 * n**3 * reps / seconds


def injected_failure(strategy: str) -> str | None:
    """The test hook's action for this strategy, e.g. TOPOWISE_TEST_FAIL=zero1:oom,zero2:error."""
    for item in os.environ.get(FAIL_ENV, "").split(","):
        name, _, action = item.partition(":")
        if ALIASES.get(name.strip(), name.strip()) == strategy:
            return action.strip()
    return None


def _inject_before_join(action: str | None, result_dir: Path) -> None:
    """`join_fails_once`: the first launch dies before joining the group, as a lost rendezvous would."""
    if action == "join_fails_once" and not (result_dir / "join_failed").exists():
        (result_dir / "join_failed").touch()
        os._exit(4)


def _inject(action: str | None) -> None:
    if action == "oom":
        import torch

        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 3.50 GiB. GPU 0 has a total "
                                     f"capacity of 139.81 GiB (injected by {FAIL_ENV})")
    if action == "error":
        raise RuntimeError(f"injected failure ({FAIL_ENV})")
    if action == "crash":
        os._exit(3)  # no result file, no message: as a segfault or a killed process would leave it
    if action == "hang":
        time.sleep(3600)


_OOM_ASKED = re.compile(r"Tried to allocate ([\d.]+) ?(B|KiB|MiB|GiB|TiB)")
_UNITS = {"B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3, "TiB": 1024**4}


def describe_failure(exc: BaseException) -> dict:
    """status oom (with the bytes the allocation asked for) or error, and a one-line message."""
    text = f"{type(exc).__name__}: {exc}".strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    oom = type(exc).__name__ in ("OutOfMemoryError",) or "out of memory" in text.lower()
    out = {"status": "oom" if oom else "error", "error": first[:500]}
    if oom:
        out["oom_requested_bytes"] = oom_requested_bytes(text)
    return out


def oom_requested_bytes(message: str) -> int | None:
    match = _OOM_ASKED.search(message)
    return int(float(match.group(1)) * _UNITS[match.group(2)]) if match else None


def _release_memory() -> None:
    import gc

    gc.collect()
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except Exception:
        pass


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    tmp.replace(path)  # whole or absent: the parent never reads half a result


# ------------------------------------------------------------------------------------------------
# Parent side


@dataclass(frozen=True)
class LossAgreement:
    agree: bool
    reference: str | None
    compared: tuple[str, ...]
    max_rel_diff: float
    diverging: tuple[str, ...]
    rtol: float

    def message(self) -> str:
        if len(self.compared) < 2:
            return "losses: fewer than two strategies finished, nothing to compare"
        worst = f"max relative difference {100 * self.max_rel_diff:.2f}%"
        if self.agree:
            return f"losses agree across {', '.join(self.compared)}: {worst} (tolerance {100 * self.rtol:g}%)"
        return (f"losses DIVERGE: {', '.join(self.diverging)} differ from {self.reference} by more than "
                f"{100 * self.rtol:g}% ({worst}): a wrong wrap or different starting weights")

    def to_dict(self) -> dict:
        return dict(asdict(self), message=self.message())


def _max_rel_diff(a: list[float], b: list[float]) -> float:
    if len(a) != len(b) or not all(map(math.isfinite, a + b)):
        return math.inf
    return max((abs(x - y) / max(abs(y), 1e-12) for x, y in zip(a, b)), default=0.0)


def compare_losses(records: list[dict], rtol: float = LOSS_RTOL) -> LossAgreement:
    """Step-by-step relative difference of every finished strategy's losses against a reference.

    The reference is the strategy that agrees with the most others (the first one on a tie), so a
    single wrong strategy is the one named, even when it ran first.
    """
    done = [r for r in records if r.get("status") == "ok" and r.get("losses")]
    if not done:
        return LossAgreement(True, None, (), 0.0, (), rtol)
    diffs = {(i, j): _max_rel_diff(a["losses"], b["losses"]) for i, a in enumerate(done) for j, b in enumerate(done)}
    votes = [sum(diffs[i, j] <= rtol for j in range(len(done)) if j != i) for i in range(len(done))]
    ref = votes.index(max(votes))
    others = [j for j in range(len(done)) if j != ref]
    worst = max((diffs[j, ref] for j in others), default=0.0)
    diverging = tuple(done[j]["strategy"] for j in others if diffs[j, ref] > rtol)
    return LossAgreement(not diverging, done[ref]["strategy"], tuple(r["strategy"] for r in done), worst,
                         diverging, rtol)


def flops_per_token(spec: ModelSpec, seq_len: int, activation_checkpointing: bool) -> float:
    """Model FLOPs per token from the cost model (6N + 12 L H Q T, PaLM appendix B)."""
    try:
        from topowise.costmodel.flops import training_flops_per_token
    except ImportError:  # the cost model not there: the same count (N without the embedding lookup)
        lookup = spec.max_positions * spec.hidden_size + (0 if spec.tied_embeddings else spec.vocab_size * spec.hidden_size)
        return 6.0 * (spec.params - lookup) + 12.0 * spec.num_layers * spec.num_heads * spec.head_dim * seq_len
    return training_flops_per_token(spec, seq_len, activation_checkpointing)


def datasheet_peak(gpu_name: str | None) -> float | None:
    if not gpu_name:
        return None
    from topowise.hardware import gpu_spec

    return gpu_spec(gpu_name).bf16_dense_flops or None


def prediction_for(case: TrainCase, spec: ModelSpec, world_size: int, topology, shard: int | None) -> dict:
    """The cost model's step time and peak memory for this case, or {} with the reason."""
    if topology is None:
        return {"note": "no topology (CPU run, or no --topology and no live discovery): no prediction"}
    try:
        from topowise.costmodel.step import predict
    except ImportError:
        return {"note": "topowise.costmodel.step is not available: no prediction"}
    try:
        gpus = tuple(topology.indices[:world_size]) if hasattr(topology, "indices") else tuple(range(world_size))
        engine = {} if case.engine == "pytorch" else {"engine": case.engine}
        pred = predict(spec, topology, gpus, case.strategy, micro_batch=case.micro_batch, seq_len=case.seq_len,
                       activation_checkpointing=case.activation_checkpointing, fabric=case.fabric,
                       shard_group_size=shard, **engine)
    except Exception as exc:  # noqa: BLE001 - the measurement stands even if the prediction fails
        return {"note": f"prediction failed: {type(exc).__name__}: {exc}"}
    out = {"step_time_s": pred.step_time_s, "peak_memory_bytes": pred.memory.peak_bytes,
           "tokens_per_s_per_gpu": pred.tokens_per_s_per_gpu, "fits": pred.fits}
    # peak_bytes adds the CUDA context and allocator slack; allocated_bytes is what
    # torch.cuda.max_memory_allocated measures, so that is the one compared
    if getattr(pred.memory, "allocated_bytes", 0):
        out["allocated_bytes"] = pred.memory.allocated_bytes
    return out


def make_record(case: TrainCase, spec: ModelSpec, world_size: int, result: dict, predicted: dict) -> dict:
    """One JSONL row (DESIGN.md keys first)."""
    ok = result.get("status") == "ok"
    tokens = case.micro_batch * case.seq_len
    step = result.get("step_time_s") if ok else None
    tps = tokens / step if step else None
    fpt = flops_per_token(spec, case.seq_len, case.activation_checkpointing)
    sheet = datasheet_peak(result.get("gpu_name"))
    measured_peak = result.get("measured_peak_flops")
    predicted = dict(predicted)
    if ok and "step_time_s" in predicted:
        predicted["step_time_error"] = relative_error(predicted["step_time_s"], step)
        # the cost model describes a steady-state step, so it is compared with the timed steps' peak
        predicted["peak_memory_error"] = relative_error(
            predicted.get("allocated_bytes", predicted.get("peak_memory_bytes")),
            result.get("steady_peak_memory_bytes") or result.get("peak_memory_bytes"))
    record = {
        "kind": "train",
        "strategy": case.strategy,
        "engine": case.engine,
        "model": spec.name,
        "world_size": world_size,
        "status": result.get("status", "error"),
        "step_time_s": step,
        "tokens_per_s_per_gpu": tps,
        "mfu": fpt * tps / sheet if tps and sheet else None,
        "peak_memory_bytes": result.get("peak_memory_bytes") if ok else None,
        "steady_peak_memory_bytes": result.get("steady_peak_memory_bytes") if ok else None,
        "step_peak_memory_bytes": result.get("step_peak_memory_bytes") if ok else None,
        "losses": result.get("losses", []) if ok else [],
        "predicted": predicted,
        "mfu_measured_peak": fpt * tps / measured_peak if tps and measured_peak else None,
        "peak_flops_datasheet": sheet,
        "peak_flops_measured": measured_peak,
        "flops_per_token": fpt,
        "reserved_bytes": result.get("reserved_bytes") if ok else None,
        "step_times_s": result.get("step_times_s", []) if ok else [],
        "params": spec.params,
        "micro_batch": case.micro_batch,
        "seq_len": case.seq_len,
        "tokens_per_step_per_gpu": tokens,
        "steps": case.steps,
        "warmup": case.warmup,
        "fabric": case.fabric,
        "device": case.device,
        "activation_checkpointing": case.activation_checkpointing,
        "compile": case.compile,
        "gpu_name": result.get("gpu_name"),
        "torch_version": result.get("torch_version"),
        "nccl_version": result.get("nccl_version"),
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    if case.strategy == "hsdp":
        record["shard_group_size"] = result.get("shard_group_size", case.shard_group_size)
        record["replicas"] = result.get("replicas", world_size // (case.shard_group_size or world_size))
    for key in ("error", "oom_requested_bytes", "log_tail", "note", "launch_note", "deepspeed_version",
                "deepspeed_config", "nodes", "ranks_per_node", "scope", "host_phase_s"):
        if result.get(key) is not None:
            record[key] = result[key]
    return record


def _append(path, record: dict) -> None:
    try:
        from topowise.measure.records import append_record
    except ImportError:  # the shared writer not there: one line, flushed, as it would
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        return
    append_record(path, record)


def child_env(fabric: str) -> dict[str, str]:
    """What the ranks get on top of this environment (NCCL_NVLS_ENABLE and friends pass through)."""
    env = {"PYTORCH_CUDA_ALLOC_CONF": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")}
    if fabric == "pcie":
        env["NCCL_P2P_DISABLE"] = "1"  # no NVLink (nor PCIe peer-to-peer): traffic goes through host memory
    return env


def _run_torchrun(config: dict, nproc: int, env: dict[str, str], timeout_s: float, log_path: Path) -> int | None:
    """Start torchrun in its own process group; on timeout stop the whole group. None = timed out."""
    config_path = log_path.with_name("config.json")
    config_path.write_text(json.dumps(config))
    full_env = dict(os.environ, **env)
    full_env.setdefault("OMP_NUM_THREADS", "1")
    full_env.setdefault("PYTHONUNBUFFERED", "1")
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(launcher.torchrun_command(ENTRY, str(config_path), nproc), env=full_env,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            return proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _stop_group(proc)
            return None
        except BaseException:
            _stop_group(proc)
            raise


def _stop_group(proc: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    noise = ("W1", "I1", "[W", "*****", "Setting OMP_NUM_THREADS")
    kept = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith(noise)]
    return "\n".join(kept[-lines:])


def run_one(case: TrainCase, nproc: int, timeout_s: float) -> dict:
    """Launch one strategy on fresh processes (or run it in the job we are part of); the rank result."""
    with tempfile.TemporaryDirectory(prefix="topowise-train-") as tmp:
        tmp_path = Path(tmp)
        config = {"case": case.to_dict(), "result_dir": tmp, "timeout_s": timeout_s,
                  "self_launched": not launcher.in_job()}
        if launcher.in_job():
            os.environ.update(child_env(case.fabric))  # read when this strategy's NCCL communicators start
            return run_case(config) or {"status": "ok"}
        log = tmp_path / "log.txt"
        started = time.monotonic()
        rc = _run_torchrun(config, nproc, child_env(case.fabric), timeout_s, log)
        relaunched = rc not in (0, None) and len(list(tmp_path.glob("rank*.started"))) < nproc
        if relaunched:  # a rank never joined the process group (rendezvous, ports): the launch failed, not the case
            rc = _run_torchrun(config, nproc, child_env(case.fabric), timeout_s, log)
        ok = tmp_path / "rank0.json"
        failures = sorted(tmp_path.glob("rank*.failed.json"))
        if rc is None:
            return {"status": "timeout", "log_tail": _tail(log),
                    "error": f"did not finish within {timeout_s:g} s (--timeout); stopped after "
                             f"{time.monotonic() - started:.0f} s"}
        if failures:  # oom on any rank makes the case oom
            found = [json.loads(f.read_text()) for f in failures]
            worst = next((f for f in found if f["status"] == "oom"), found[0])
            return dict(worst, log_tail=_tail(log))
        note = {"launch_note": "relaunched once: a rank failed to join the process group"} if relaunched else {}
        if rc == 0 and ok.is_file():
            return dict(json.loads(ok.read_text()), **note)
        return {"status": "error", "log_tail": _tail(log), **note,
                "error": f"the ranks exited with status {rc} and left no result (a crash: see log_tail)"}


@dataclass(frozen=True)
class TrainRequest:
    """What `bench train` was asked to do, validated."""

    cases: tuple[TrainCase, ...]
    spec: ModelSpec
    nproc: int
    timeout_s: float
    out: str | None
    hsdp_note: str | None


def make_request(*, model: str, strategies: str, micro_batch: int = 1, seq_len: int = 4096, steps: int = 10,
                 warmup: int = 3, activation_checkpointing: bool = False, compile: bool = False,
                 fabric: str = "nvlink", device: str | None = None, nproc: int | None = None,
                 shard_group_size: int | None = None, timeout_s: float = 600.0, out: str | None = None,
                 seed: int = 0, lr: float = 1e-5, engine: str = "pytorch") -> TrainRequest:
    """Validate every flag once, with the arithmetic in the message; decide devices and hsdp groups."""
    names = normalize_strategies(strategies)
    if engine != "pytorch":
        from topowise.measure.deepspeed_engine import check_request

        check_request(engine, names)  # a clear error: unknown engine, strategy it lacks, DeepSpeed missing
    spec = load_model(model)
    if fabric not in ("nvlink", "pcie"):
        raise UsageError(f"--fabric must be nvlink or pcie, not {fabric!r}")
    device = device or _default_device()
    if device not in ("cuda", "cpu"):
        raise UsageError(f"--device must be cuda or cpu, not {device!r}")
    if device == "cuda":
        gpus = _cuda_count()
        if gpus == 0:
            raise UsageError("--device cuda but no CUDA GPU is visible here: use --device cpu (gloo) or a GPU machine")
        nproc = gpus if nproc is None else nproc
        if nproc > gpus and not launcher.in_job():
            raise UsageError(f"--nproc {nproc} asks for more processes than the {gpus} visible GPUs")
    nproc = 2 if nproc is None else nproc
    validate_sizes(spec, micro_batch=micro_batch, seq_len=seq_len, steps=steps, warmup=warmup, nproc=nproc,
                   timeout_s=timeout_s)
    world = _job_world_size() or nproc
    note = None
    shard = None
    if "hsdp" in names:
        islands = live_islands(world) if device == "cuda" and fabric == "nvlink" else None
        shard, _replicas, note = hsdp_layout(world, shard_group_size, islands)
    elif shard_group_size is not None:
        hsdp_layout(world, shard_group_size)  # still a clear error for a bad value
    base = TrainCase(model=model, strategy=names[0], micro_batch=micro_batch, seq_len=seq_len, steps=steps,
                     warmup=warmup, activation_checkpointing=activation_checkpointing, compile=compile,
                     fabric=fabric, device=device, seed=seed, lr=lr, engine=engine)
    cases = tuple(replace(base, strategy=n, shard_group_size=shard if n == "hsdp" else None) for n in names)
    return TrainRequest(cases, spec, nproc, timeout_s, out, note)


def _default_device() -> str:
    return "cuda" if _cuda_count() > 0 else "cpu"


def _cuda_count() -> int:
    try:
        import torch
    except ImportError:
        raise UsageError("bench train needs PyTorch: pip install 'topowise[bench]'") from None
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _job_world_size() -> int | None:
    return int(os.environ["WORLD_SIZE"]) if launcher.in_job() and "WORLD_SIZE" in os.environ else None


def is_reporting_rank() -> bool:
    """Inside a job every rank runs the bench; only global rank 0 writes files and prints."""
    return os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")) == "0"


def bench_train(request: TrainRequest, topology=None,
                on_event: Callable[[str, TrainCase, dict | None], None] | None = None) -> tuple[list[dict], LossAgreement]:
    """Run every strategy in turn; append each record as it finishes; compare the losses."""
    world = _job_world_size() or request.nproc
    records = []
    for case in request.cases:
        if on_event:
            on_event("start", case, None)
        result = run_one(case, request.nproc, request.timeout_s)
        if case.strategy == "hsdp" and request.hsdp_note:
            result = dict(result, note=request.hsdp_note)
        shard = case.shard_group_size if case.strategy == "hsdp" else None
        predicted = prediction_for(case, request.spec, world, topology, shard) if case.device == "cuda" else {
            "note": "CPU run: the cost model predicts GPUs only"}
        record = make_record(case, request.spec, world, result, predicted)
        if request.out and is_reporting_rank():
            _append(request.out, record)
        records.append(record)
        if on_event:
            on_event("done", case, record)
    return records, compare_losses(records)
