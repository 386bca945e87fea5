"""Pipeline schedules: each rank's order of work, its time (the bubble) and the activations it holds.

Three schedules, each as the engines run it:
- `1f1b`: PipeDream-flush / Megatron's non-interleaved schedule (Narayanan et al. SC'21, section 2.2.1).
- `interleaved-1f1b`: Megatron's interleaved schedule, v model chunks per rank (SC'21 section 2.2.2).
- `zb-h1`: zero bubble H1 (Qi et al. 2023, arXiv 2401.10241, section 3.1): backward split into B (input
  gradient, on the critical path) and W (weight gradient, deferred into the bubble); same peak as 1F1B.

Stages are virtual stages s = 0 .. pp*v - 1; stage s runs on rank s % pp (Megatron's and torchtitan's
looped placement). Times are per micro-batch and per stage, so stages may be uneven: `simulate` replays the
orders exactly; `pipeline_time` gives the closed forms where stages are equal and the replay otherwise.
Derivations and the hand-worked schedules: docs/parallelism.md. No torch here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from topowise.errors import UsageError
from topowise.parallel_dims import SCHEDULES, LayerSplit, split_layers, validate_schedule  # noqa: F401 (re-exported)


@dataclass(frozen=True)
class Op:
    """One unit of work: F (forward), B (backward; with W fused unless zb-h1), W (weight gradient)."""

    kind: str
    microbatch: int
    stage: int


@dataclass(frozen=True)
class Interval:
    start_s: float
    end_s: float
    op: Op


@dataclass(frozen=True)
class Timeline:
    """What one rank did: its busy intervals in order, and its idle time within the step."""

    rank: int
    busy: tuple[Interval, ...]
    busy_s: float
    idle_s: float


@dataclass(frozen=True)
class Simulation:
    """An exact replay of a schedule's dependencies; step_s is when the last rank finishes."""

    schedule: str
    step_s: float
    timelines: tuple[Timeline, ...]


@dataclass(frozen=True)
class PipelineTime:
    """Time of one optimizer step's pipeline: compute_s is the busiest rank's own work, the bubble the rest;
    method says whether a closed form or the replay gave it (both exact)."""

    schedule: str
    step_s: float
    compute_s: float
    bubble_s: float
    bubble_fraction: float
    method: str





def _warmup(schedule: str, pp: int, microbatches: int, virtual_stages: int, rank: int) -> int:
    """Forwards a rank runs before its first backward (Megatron schedules.py; zb-h1 keeps 1F1B's)."""
    total = microbatches * virtual_stages
    if schedule == "interleaved-1f1b":
        if microbatches == pp:
            return total  # Megatron: all warm-up when m == p
        return min((pp - rank - 1) * 2 + (virtual_stages - 1) * pp, total)
    return min(pp - rank - 1, microbatches)


def schedule_order(schedule: str, pp: int, microbatches: int, virtual_stages: int, rank: int) -> tuple[Op, ...]:
    """The order in which one rank runs its work, as the engine issues it."""
    validate_schedule(schedule, pp, microbatches, virtual_stages)
    m, v, p = microbatches, virtual_stages, pp
    w = _warmup(schedule, p, m, v, rank)
    if schedule == "interleaved-1f1b":
        def forward(k: int) -> Op:
            return Op(kind="F", microbatch=(k // (p * v)) * p + k % p, stage=((k // p) % v) * p + rank)

        def backward(k: int) -> Op:
            return Op(kind="B", microbatch=(k // (p * v)) * p + k % p, stage=(v - 1 - (k // p) % v) * p + rank)

        total = m * v
        ops = [forward(k) for k in range(w)]
        for k in range(total - w):
            ops += [forward(w + k), backward(k)]
        return tuple(ops + [backward(k) for k in range(total - w, total)])
    ops = [Op(kind="F", microbatch=k, stage=rank) for k in range(w)]
    if schedule == "1f1b":
        for k in range(m - w):
            ops += [Op(kind="F", microbatch=w + k, stage=rank), Op(kind="B", microbatch=k, stage=rank)]
        return tuple(ops + [Op(kind="B", microbatch=k, stage=rank) for k in range(m - w, m)])
    # zb-h1: rank i holds back i weight gradients (so every rank keeps pp micro-batches, as 1F1B's first) and
    # spends them in the drain, one after each late backward, the rest at the end; an order built to meet the
    # paper's bubble and memory, checked against its closed form (docs/parallelism.md)
    done_w = 0
    for k in range(m - w):
        ops += [Op(kind="F", microbatch=w + k, stage=rank), Op(kind="B", microbatch=k, stage=rank)]
        if k >= rank:
            ops.append(Op(kind="W", microbatch=done_w, stage=rank))
            done_w += 1
    for k in range(m - w, m):
        ops.append(Op(kind="B", microbatch=k, stage=rank))
        if done_w <= k - rank:
            ops.append(Op(kind="W", microbatch=done_w, stage=rank))
            done_w += 1
    return tuple(ops + [Op(kind="W", microbatch=j, stage=rank) for j in range(done_w, m)])


def _per_stage(name: str, value: float | Sequence[float], stages: int) -> tuple[float, ...]:
    if isinstance(value, (int, float)):
        return (float(value),) * stages
    if len(value) != stages:
        raise UsageError(f"{name} gives {len(value)} stage times for {stages} stages (pp x virtual stages)")
    return tuple(float(x) for x in value)


@lru_cache(maxsize=256)
def _orders(schedule: str, pp: int, microbatches: int, virtual_stages: int) -> tuple[tuple[Op, ...], ...]:
    return tuple(schedule_order(schedule, pp, microbatches, virtual_stages, r) for r in range(pp))


Times = tuple[float, ...]


def _replay(schedule: str, pp: int, microbatches: int, virtual_stages: int, f: Times, b: Times, w: Times,
            record: bool, send_s: float = 0.0) -> tuple[float, list[float], list[list[Interval]]]:
    """Earliest start of every op given its rank's order and its data dependency (plus send_s where the
    dependency crosses to another rank): (step, busy per rank, intervals per rank when record)."""
    stages = pp * virtual_stages
    if schedule != "zb-h1":
        b, w = tuple(x + y for x, y in zip(b, w)), (0.0,) * stages
    cost = {"F": f, "B": b, "W": w}
    hop = send_s if pp > 1 else 0.0  # neighbouring stages sit on neighbouring ranks
    orders = _orders(schedule, pp, microbatches, virtual_stages)
    done: dict[tuple[str, int, int], float] = {}
    pos, free, work = [0] * pp, [0.0] * pp, [0.0] * pp
    busy: list[list[Interval]] = [[] for _ in range(pp)]
    left = sum(len(o) for o in orders)
    while left:
        moved = False
        for r, order in enumerate(orders):
            while pos[r] < len(order):
                op = order[pos[r]]
                ready: float | None
                if op.kind == "F" and op.stage == 0:
                    ready = 0.0
                elif op.kind == "F":
                    ready = _arrival(done.get(("F", op.microbatch, op.stage - 1)), hop)
                elif op.kind == "B" and op.stage < stages - 1:
                    ready = _arrival(done.get(("B", op.microbatch, op.stage + 1)), hop)
                elif op.kind == "B":
                    ready = done.get(("F", op.microbatch, op.stage))
                else:
                    ready = done.get(("B", op.microbatch, op.stage))
                if ready is None:
                    break
                start = max(free[r], ready)
                took = cost[op.kind][op.stage]
                done[(op.kind, op.microbatch, op.stage)] = free[r] = start + took
                work[r] += took
                if record:
                    busy[r].append(Interval(start_s=start, end_s=start + took, op=op))
                pos[r] += 1
                left -= 1
                moved = True
        if not moved:  # a wrong order would wait forever; the schedules above never do
            raise RuntimeError(f"{schedule} deadlocks at pp {pp}, m {microbatches}, v {virtual_stages}")
    return max(free), work, busy


def _arrival(done_at: float | None, hop: float) -> float | None:
    return None if done_at is None else done_at + hop


def _times(pp: int, virtual_stages: int, forward_s, backward_s, weight_s) -> tuple[tuple[float, ...], ...]:
    stages = pp * virtual_stages
    return (_per_stage("forward_s", forward_s, stages), _per_stage("backward_s", backward_s, stages),
            _per_stage("weight_s", weight_s, stages))


def simulate(schedule: str, pp: int, microbatches: int, virtual_stages: int = 1,
             forward_s: float | Sequence[float] = 1.0, backward_s: float | Sequence[float] = 2.0,
             weight_s: float | Sequence[float] = 0.0, send_s: float = 0.0) -> Simulation:
    """Replay each rank's order against the data dependencies (a forward needs the previous stage's forward
    of that micro-batch; a backward the next stage's backward; W its own B), what crosses to another rank
    arrives send_s after it was computed (the sender goes on at once: sends overlap compute). backward_s is
    the input-gradient part when weight_s is given separately; 1F1B and interleaved run B and W together."""
    validate_schedule(schedule, pp, microbatches, virtual_stages)
    f, b, w = _times(pp, virtual_stages, forward_s, backward_s, weight_s)
    step, work, busy = _replay(schedule, pp, microbatches, virtual_stages, f, b, w, record=True, send_s=send_s)
    timelines = tuple(Timeline(rank=r, busy=tuple(busy[r]), busy_s=work[r], idle_s=step - work[r])
                      for r in range(pp))
    return Simulation(schedule=schedule, step_s=step, timelines=timelines)


def pipeline_time(schedule: str, pp: int, microbatches: int, virtual_stages: int = 1,
                  forward_s: float | Sequence[float] = 1.0, backward_s: float | Sequence[float] = 2.0,
                  weight_s: float | Sequence[float] = 0.0, send_s: float = 0.0) -> PipelineTime:
    """One step's pipeline time. Equal stages: the closed forms, with c = f + b + w per (virtual) stage:
    1f1b (m + p - 1) c, bubble (p - 1)/m of the ideal (SC'21 section 2.2.1);
    interleaved-1f1b (m v + p - 1) c, bubble (p - 1)/(v m) of the ideal (SC'21 section 2.2.2);
    zb-h1 m c + (p - 1)(f + b - w) for m >= p and w <= min(f, b) (Qi et al. 2023 section 3.1).
    Otherwise (uneven stages, sends that take time, zb-h1 outside those bounds) the replay, which is exact:
    "the slowest stage sets the pace" as sum(c) + (m - 1) max(c) misses it by -2% to +26% (docs/parallelism.md)."""
    validate_schedule(schedule, pp, microbatches, virtual_stages)
    f, b, w = _times(pp, virtual_stages, forward_s, backward_s, weight_s)
    m, p, v = microbatches, pp, virtual_stages
    c = f[0] + b[0] + w[0]
    equal = len(set(zip(f, b, w))) == 1 and (send_s == 0 or p == 1)
    if equal and schedule == "1f1b":
        step, work, method = (m + p - 1) * c, m * c, "closed form"
    elif equal and schedule == "interleaved-1f1b":
        step, work, method = (m * v + p - 1) * c, m * v * c, "closed form"
    elif equal and m >= p and w[0] <= min(f[0], b[0]):
        step, work, method = m * c + (p - 1) * (f[0] + b[0] - w[0]), m * c, "closed form"
    else:
        step, busy, _ = _replay(schedule, p, m, v, f, b, w, record=False, send_s=send_s)
        work, method = max(busy), "replay"
    bubble = step - work
    return PipelineTime(schedule=schedule, step_s=step, compute_s=work, bubble_s=bubble,
                        bubble_fraction=bubble / step if step else 0.0, method=method)


def in_flight(schedule: str, pp: int, microbatches: int, virtual_stages: int = 1, rank: int = 0) -> int:
    """Peak number of (micro-batch, stage) activations a rank holds: 1F1B's stage i of p holds
    min(p - i, m) (SC'21 2.2.1); interleaved its warm-up + 1 chunks, 2(p - i - 1) + (v - 1)p + 1, which on
    rank 0 is L(1 + (p - 1)/(p v)) layers' worth (Korthikanti et al. 2022, section 4.2.3); zb-h1 holds each
    until its W: p on every rank (Qi et al. 2023 section 3.1: the same peak as 1F1B's first stage)."""
    validate_schedule(schedule, pp, microbatches, virtual_stages)
    if not 0 <= rank < pp:
        raise UsageError(f"rank {rank} is outside pp {pp} (ranks 0 to {pp - 1})")
    w = _warmup(schedule, pp, microbatches, virtual_stages, rank)
    total = microbatches * virtual_stages
    if schedule == "zb-h1":
        return min(pp, microbatches)
    return min(w + 1, total)


def peak_activation_layers(schedule: str, split: LayerSplit, microbatches: int, rank: int) -> int:
    """Peak layers' worth of one micro-batch's activations alive on a rank, walking its order (uneven
    virtual stages hold different layer counts, so the peak is not in_flight x one size)."""
    validate_schedule(schedule, split.pp, microbatches, split.virtual_stages)
    alive = peak = 0
    for op in _orders(schedule, split.pp, microbatches, split.virtual_stages)[rank]:
        freed_by = "W" if schedule == "zb-h1" else "B"
        if op.kind == "F":
            alive += split.layers[op.stage]
            peak = max(peak, alive)
        elif op.kind == freed_by:
            alive -= split.layers[op.stage]
    return peak
