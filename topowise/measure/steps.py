"""`bench train`, rank side: the step loop every engine shares (PyTorch: topowise.measure.train_rank,
DeepSpeed: deepspeed_engine, a module:function model: model_profile).

The model built from the same seed on every strategy, synthetic tokens seeded by (seed, step, rank),
warm-up + timed steps with step times from CUDA events read once after the loop, the loss of every
step (kept on the GPU until the loop ends), peak allocated / reserved memory, and the result dict
each rank writes.

The step loop never waits for the GPU: no .item(), no synchronize, no printing of tensors.
"""

from __future__ import annotations

import os
import re
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from topowise.measure import strategies as S
from topowise.measure.train import TrainCase
from topowise.run import STEP_PHASES
from topowise.units import GIB, KIB, MIB

# the bf16 matmul whose rate is the achievable peak: about 790 TFLOP/s on an H200
# (peak_flops_measured in research/2026-11-30-h200x2/run1/train.jsonl)
MATMUL_N = 8192


def prepare_case(case: TrainCase, rank):
    """What both engines do first: (measured matmul rate, the model built from the run's ModelSpec
    with the case's seed, checkpointing and compile applied). Unwrapped."""
    import torch

    from topowise.models.transformer import build_model

    measured_peak = None
    if case.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True  # fp32 matmuls (none in the hot path) may use TF32
        torch.backends.cudnn.allow_tf32 = True
        measured_peak = measure_matmul_flops()
    model = build_model(case.run.model, case.run.seq_len, rank.device, case.seed)
    S.apply_checkpointing(model, case.run.checkpointing, case.run.selective_ac_option)
    if case.run.compile:
        S.apply_compile(model)
    return measured_peak, model


def phased_step(host: list, forward: Callable, backward: Callable, optimizer: Callable):
    """One training step in its three phases, each a named range of the profiler's timeline (--trace; a
    flag check when it is off) and timed on the host: (forward, backward, optimizer) seconds appended to
    `host`. Every engine's step goes through here, so the phases mean the same thing for each. `forward()`
    returns the loss, `backward(loss)` and `optimizer()` return nothing; returns the loss."""
    from torch.profiler import record_function

    t0 = time.perf_counter()
    with record_function("topowise.forward"):
        loss = forward()
    t1 = time.perf_counter()
    with record_function("topowise.backward"):
        backward(loss)
    t2 = time.perf_counter()
    with record_function("topowise.optimizer"):
        optimizer()
    host.append((t1 - t0, t2 - t1, time.perf_counter() - t2))
    return loss


def host_phases(per_step: list[tuple[float, float, float]], rank) -> dict[str, float]:
    """Median host (Python) seconds per phase over the timed steps, the slowest rank's.

    The step loop never waits for the GPU, so where the GPU keeps up (few tokens), this is what the
    host needs to issue each phase: the floor the cost model's host term describes. Where the GPU is
    the bottleneck, the host blocks on a full launch queue and these times include that wait."""
    import torch
    import torch.distributed as dist

    medians = [statistics.median(col) for col in zip(*per_step)] if per_step else [0.0] * len(STEP_PHASES)
    t = torch.tensor(medians, dtype=torch.float64, device=rank.device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return dict(zip(STEP_PHASES, t.tolist()))


def timed_steps(total: int, one_step: Callable, cuda: bool, peaks: list | None = None,
                trace_dir: str | None = None, marks: list | None = None,
                probe: Callable[[], None] | None = None) -> tuple[list[float], list]:
    """Run `one_step(step)` (returns the loss tensor) `total` times: per-step seconds and losses.

    On CUDA: events around each step, read after one synchronize at the end; the peak-memory
    counters start here; with `peaks`, each step's peak allocated bytes is appended to it (the
    allocator's counters are host-side: reading them does not wait for the GPU); with `marks`, the
    host's unix time as each step is issued and once more when the GPU has finished the last (the
    window whose GPU clocks the parent keeps: topowise.measure.gpu_clocks). Losses stay tensors
    (no .item() inside the loop). With `trace_dir`, the steps run under torch.profiler (`_profiled_steps`), after
    `probe()` (inside the profiler, before the first step: what the trace reader needs to name things)."""
    import gc

    import torch

    # As torchtitan's training loop does (GarbageCollection, tools/utils.py): collect once, then no
    # automatic collection during the steps, whose pauses land on random steps of the host's time.
    gc.collect()
    gc.disable()
    try:
        if not trace_dir:
            return _timed_steps(total, one_step, cuda, peaks, torch, marks)
        return _profiled_steps(trace_dir, total, one_step, cuda, peaks, torch, marks, probe)
    finally:
        gc.enable()


def _profiled_steps(trace_dir: str, total: int, one_step: Callable, cuda: bool, peaks, torch, marks=None,
                    probe: Callable[[], None] | None = None):
    """`bench train --trace DIR` (a diagnostic): the steps under torch.profiler; each rank writes its
    operators and CUDA runtime calls by host time to DIR/rank<R>.txt (where the host waits, if it does)
    and the timeline of host calls and GPU kernels to DIR/rank<R>.trace.json.gz (DIR is the
    strategy's folder: the parent's topowise.measure.timeline reads it phase by phase)."""
    from torch.profiler import ProfilerActivity, profile, record_function

    def annotated_step(step: int):
        with record_function(f"topowise.step.{step}"):
            return one_step(step)

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        if probe is not None:
            probe()
        result = _timed_steps(total, annotated_step, cuda, peaks, torch, marks)
    base = Path(trace_dir) / f"rank{os.environ.get('RANK', '0')}"
    base.parent.mkdir(parents=True, exist_ok=True)
    base.with_suffix(".txt").write_text(
        prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=40, max_name_column_width=60))
    prof.export_chrome_trace(str(base.with_suffix(".trace.json.gz")))  # torch gzips a .gz path
    return result


def _timed_steps(total: int, one_step: Callable, cuda: bool, peaks: list | None, torch,
                 marks: list | None = None) -> tuple[list[float], list]:
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(total)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(total)]
    wall, losses = [], []
    for step in range(total):
        if marks is not None:
            marks.append(time.time())
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
    if marks is not None:
        marks.append(time.time())
    if cuda:
        return [s.elapsed_time(e) / 1e3 for s, e in zip(starts, ends)], losses
    return wall, losses


def step_result(case: TrainCase, rank, times: list[float], losses: list, measured_peak: float | None,
                extra: dict | None = None, step_peaks: list | None = None, marks: list | None = None) -> dict:
    """Across ranks: the slowest rank's time for each step, the mean loss, the largest memory; on
    GPUs with `marks` (timed_steps'), when the timed steps ran and every rank's GPU, by UUID."""
    import torch
    import torch.distributed as dist

    cuda = case.device == "cuda"
    if cuda:
        step_peaks = step_peaks or [torch.cuda.max_memory_allocated()] * len(times)
        steady = step_peaks[-1]  # the last timed step's (measure.records.steady_peak_bytes says why)
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
    where = {}
    if cuda and marks and len(marks) == len(times) + 1:
        uuids = [None] * rank.world_size
        dist.all_gather_object(uuids, str(getattr(torch.cuda.get_device_properties(rank.device), "uuid", "")))
        where = {"gpu_uuids": uuids, "timed_window_unix_s": [marks[case.warmup], marks[-1]]}
    return {
        "status": "ok",
        "step_time_s": statistics.median(timed),
        "step_times_s": timed,
        "warmup_step_times_s": times_t.tolist()[:case.warmup],
        "losses": loss_t.tolist(),
        "peak_memory_bytes": int(memory[0]) if cuda else None,  # whole run, warm-up included
        "reserved_bytes": int(memory[1]) if cuda else None,
        # the last timed step: what the cost model's steady-state step describes
        "steady_peak_memory_bytes": int(memory[2]) if cuda else None,
        "step_peak_memory_bytes": [int(x) for x in memory[3:].tolist()] if cuda else None,
        "measured_peak_flops": measured_peak,
        "gpu_name": torch.cuda.get_device_name() if cuda else None,
        "torch_version": torch.__version__,
        "nccl_version": _nccl_version() if cuda else None,
        **where,
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
        u = torch.rand((case.run.micro_batch, case.run.seq_len + 1), generator=g)
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


_OOM_ASKED = re.compile(r"Tried to allocate ([\d.]+) ?(B|KiB|MiB|GiB|TiB)")
_UNITS = {"B": 1, "KiB": KIB, "MiB": MIB, "GiB": GIB, "TiB": 1024 * GIB}


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
