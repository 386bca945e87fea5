"""Where a training step's time goes, phase by phase, read from the ranks' profiler timelines (no torch).

`bench train --trace DIR` runs each strategy's steps under torch.profiler; every rank writes
DIR/<strategy>/rank<R>.trace.json.gz (Chrome trace: Perfetto and TensorBoard open it), with named
ranges topowise.step.N and topowise.forward / backward / optimizer. This module reads those files
and partitions each step's GPU time, so that the pieces add up to the step exactly:

- the step's window on the GPU runs from its first kernel (any stream) to the next step's first
  kernel (the last step: to its last kernel's end); inside it, phase P's window runs from P's first
  kernel to the next phase's first one (a kernel belongs to the phase whose host range holds its
  launch call: the autograd thread's launches fall inside the main thread's backward range);
- inside a phase's window, every instant is exactly one of: `compute` (a non-NCCL kernel, memcpy
  or memset is running), `host_wait` (nothing runs and the next kernel's launch call has not
  returned: the GPU waits for Python), `comm:<collective>` (nothing else runs, the next kernel was
  launched, an NCCL kernel runs: exposed communication, named by the NCCL kernel, the one that
  started first where two overlap), or `other` (launched, nothing runs: a wait on another
  stream, the profiler's own gaps).

So compute + exposed comm + host wait + other = the phase's window, the phases' windows = the
step's window, exactly (up to float rounding). The step's window is compared with the step time
the ranks measured with CUDA events (the record's step_times_s, the slowest rank's): `residual_s`
= measured - window says how far the timeline's step is from the measured one.

A CPU (gloo) trace has no GPU activity: the reading is host only (`mode: host_only`): each phase's
window is its host range up to the next phase's start, split into `host` (inside the named range)
and `other`.

`write_breakdown` writes DIR/<strategy>/breakdown.json (per rank, per step, per phase, per
collective, the median step, the cost model's prediction beside it) and breakdown.png (stacked bars).
"""

from __future__ import annotations

import bisect
import gzip
import json
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from topowise.run import STEP_PHASES

PHASES = STEP_PHASES  # the named ranges the ranks record (topowise.forward / backward / optimizer)
GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
LAUNCH_CATS = {"cuda_runtime", "cuda_driver"}
STEP = re.compile(r"^topowise\.step\.(\d+)$")
RANK_FILE = re.compile(r"^rank(\d+)\.trace\.json(\.gz)?$")
# NCCL kernel names (ncclDevKernel_AllGather_RING_LL, ncclKernel_AllReduce_RING_LL_Sum_float, ...)
# -> the collective; checked in order on the lower-cased name without underscores
COLLECTIVES = (("allreduce", "all_reduce"), ("allgather", "all_gather"), ("reducescatter", "reduce_scatter"),
               ("broadcast", "broadcast"), ("alltoall", "all_to_all"), ("sendrecv", "sendrecv"),
               ("send", "sendrecv"), ("recv", "sendrecv"), ("reduce", "reduce"))
PARTITION = ("each step's window on the GPU (its first kernel to the next step's first kernel; the last step: "
             "to its last kernel's end) is split into phase windows (a phase's first kernel to the next "
             "phase's first), and each instant of a phase window into exactly one piece: compute (a non-NCCL "
             "kernel, memcpy or memset runs), host_wait (nothing runs, the next kernel's launch call has not "
             "returned), comm:<collective> (nothing else runs, the next kernel was launched, an NCCL kernel "
             "runs: exposed communication; where two overlap, the one that started first), other (the rest). "
             "The pieces add up to the window; residual_s = measured step (CUDA events, slowest rank) - window")
HOST_ONLY_NOTE = ("host only: the trace has no GPU activity (a CPU/gloo run), so the phases are the host's "
                  "named ranges: host (inside the range) and other (to the next phase's start)")


def collective_of(name: str) -> str | None:
    """The collective an NCCL kernel runs, 'nccl' when the name says no more; None: not NCCL."""
    low = name.lower().replace("_", "")
    if not low.startswith("nccl"):
        return None
    for key, op in COLLECTIVES:
        if key in low:
            return op
    return "nccl"


@dataclass(frozen=True)
class Interval:
    start: float  # microseconds
    end: float


@dataclass(frozen=True)
class Kernel:
    start: float
    end: float
    collective: str | None  # None: compute (or a copy); else the NCCL collective
    launch_start: float | None  # the host call that launched it, when the trace links them
    launch_end: float | None
    dim: str | None = None  # a collective's mesh dimension (tp, pp, ...), when its process group is known


@dataclass
class PhaseReading:
    """One phase of one step, seconds. `pieces` add up to `wall_s`."""
    phase: str
    wall_s: float
    pieces: dict[str, float]
    host_s: float = 0.0  # the host's named range
    nccl_s: float = 0.0  # NCCL kernels running in the window, hidden or not
    lead_s: float = 0.0  # median launch-to-start of the phase's compute kernels
    blocked_s: float = 0.0  # of host_s, in launch calls that waited for room in the launch queue

    def to_dict(self) -> dict:
        return {"wall_s": self.wall_s, "pieces": self.pieces, "host_s": self.host_s, "nccl_s": self.nccl_s,
                "lead_s": self.lead_s, "blocked_s": self.blocked_s}


@dataclass
class StepReading:
    step: int
    wall_s: float
    phases: list[PhaseReading]
    measured_s: float | None = None  # CUDA events (or the host's clock on CPU), the slowest rank
    # exposed communication by mesh dimension, then collective: {"tp": {"all_reduce": s}, ...}
    by_dim: dict[str, dict[str, float]] = field(default_factory=dict)
    idle_s: float | None = None  # a pipeline stage's wait on its neighbours (pipeline_idle_s), mesh runs with pp

    @property
    def pieces(self) -> dict[str, float]:
        total: dict[str, float] = {}
        for p in self.phases:
            for k, v in p.pieces.items():
                total[k] = total.get(k, 0.0) + v
        return total

    @property
    def exposed_comm_s(self) -> float:
        return sum(v for k, v in self.pieces.items() if k.startswith("comm:"))

    def to_dict(self) -> dict:
        pieces = self.pieces
        d = {"step": self.step, "wall_s": self.wall_s, "pieces_sum_s": sum(pieces.values()), "pieces": pieces,
             "exposed_comm_s": self.exposed_comm_s, "phases": {p.phase: p.to_dict() for p in self.phases}}
        if self.measured_s is not None:
            d["measured_s"] = self.measured_s
            d["residual_s"] = self.measured_s - self.wall_s
            d["residual_pct"] = 100 * (self.measured_s - self.wall_s) / self.measured_s if self.measured_s else None
        if self.by_dim:
            d["exposed_comm_by_dim"] = self.by_dim
            d["exposed_comm_by_dim_s"] = {dim: sum(ops.values()) for dim, ops in self.by_dim.items()}
        if self.idle_s is not None:
            d["idle_s"] = self.idle_s
        return d


@dataclass
class TraceReading:
    mode: str  # "gpu" or "host_only"
    steps: list[StepReading] = field(default_factory=list)

    def median_step(self) -> StepReading | None:
        """The step whose window is the median one (the lower of the two middle ones): a real step,
        so its pieces still add up."""
        if not self.steps:
            return None
        ordered = sorted(self.steps, key=lambda s: s.wall_s)
        return ordered[(len(ordered) - 1) // 2]


# ------------------------------------------------------------------------------------------------
# Reading a trace


def load_events(path: str | Path) -> list[dict]:
    """The complete ("X") events of a Chrome trace, gzipped or not."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        doc = json.load(f)
    return [e for e in (doc["traceEvents"] if isinstance(doc, dict) else doc) if e.get("ph") == "X"]


def ranges(events: list[dict]) -> tuple[dict[int, Interval], dict[str, list[Interval]]]:
    """The host's named ranges: step number -> interval, phase -> intervals."""
    steps: dict[int, Interval] = {}
    phases: dict[str, list[Interval]] = {p: [] for p in PHASES}
    for e in events:
        if e.get("cat") != "user_annotation":
            continue
        iv = Interval(float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)))
        m = STEP.match(e["name"])
        if m:
            steps[int(m.group(1))] = iv
        elif e["name"].startswith("topowise.") and e["name"][9:] in phases:
            phases[e["name"][9:]].append(iv)
    return steps, phases


def group_dim(args: dict, process_groups: dict[str, str]) -> str | None:
    """The mesh dimension of a collective's process group, from the profiler's record_param_comms arguments:
    the group's name looked up in the run's map (the record's process_groups), else DeviceMesh's description
    of its groups, mesh_<dimension>."""
    name = str(args.get("Process Group Name", ""))
    if name in process_groups:
        return process_groups[name]
    desc = str(args.get("Process Group Description", ""))
    return desc[len("mesh_"):] if desc.startswith("mesh_") else None


def comm_calls(events: list[dict], process_groups: dict[str, str]) -> dict[object, list[tuple[Interval, str]]]:
    """Per host thread, sorted: the host calls that issue a collective (record_param_comms) whose group's mesh
    dimension is known, with that dimension."""
    out: dict[object, list[tuple[Interval, str]]] = {}
    for e in events:
        if e.get("name") != "record_param_comms":
            continue
        dim = group_dim(e.get("args", {}), process_groups)
        if dim is not None:
            out.setdefault(e.get("tid"), []).append((Interval(float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))),
                                                     dim))
    return {tid: sorted(calls, key=lambda c: c[0].start) for tid, calls in out.items()}


def kernels(events: list[dict], process_groups: dict[str, str] | None = None) -> list[Kernel]:
    """The GPU's kernels, copies and memsets, sorted by start; with `process_groups` (a mesh run's), each NCCL
    kernel's mesh dimension: that of the record_param_comms call around the host call that launched it."""
    launches = {}
    for e in events:
        if e.get("cat") in LAUNCH_CATS and "correlation" in e.get("args", {}):
            launches[e["args"]["correlation"]] = (float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)), e.get("tid"))
    calls = comm_calls(events, process_groups) if process_groups is not None else {}
    out = []
    for e in events:
        if e.get("cat") not in GPU_CATS:
            continue
        start = float(e["ts"])
        launch = launches.get(e.get("args", {}).get("correlation"))
        op = collective_of(e["name"]) if e.get("cat") == "kernel" else None
        dim = _find(launch[0], calls.get(launch[2], [])) if op and launch else None
        out.append(Kernel(start, start + float(e.get("dur", 0)), op,
                          launch[0] if launch else None, launch[1] if launch else None, dim))
    return sorted(out, key=lambda k: k.start)


def blocked_calls(events: list[dict]) -> list[Interval]:
    """Host calls that waited for room in the launch queue: the profiler's 'Command Buffer Full'
    markers, and launch calls of over 1 ms (a launch costs microseconds unless it waits)."""
    out = []
    for e in events:
        dur = float(e.get("dur", 0))
        if e.get("name") == "Command Buffer Full" or (e.get("cat") in LAUNCH_CATS and dur > 1000):
            out.append(Interval(float(e["ts"]), float(e["ts"]) + dur))
    return union(out)


def union(intervals: list[Interval]) -> list[Interval]:
    merged: list[Interval] = []
    for iv in sorted(intervals, key=lambda i: i.start):
        if merged and iv.start <= merged[-1].end:
            merged[-1] = Interval(merged[-1].start, max(merged[-1].end, iv.end))
        else:
            merged.append(iv)
    return merged


def overlap(intervals: list[Interval], lo: float, hi: float) -> float:
    return sum(max(0.0, min(iv.end, hi) - max(iv.start, lo)) for iv in intervals)


def labelled_segments(ks: list[Kernel]) -> list[tuple[Interval, str]]:
    """Disjoint (interval, collective) covering every NCCL kernel's time; where two overlap, the
    instant goes to the one that started first (it was already running)."""
    return [(iv, op) for iv, op, _ in disjoint([(Interval(k.start, k.end), k.collective, k.dim) for k in ks
                                                 if k.collective])]


def disjoint(spans: list[tuple[Interval, str, str | None]]) -> list[tuple[Interval, str, str | None]]:
    """(interval, collective, mesh dimension) made disjoint, sorted: where two overlap, the instant goes to
    the one that started first (it was already running)."""
    out: list[tuple[Interval, str, str | None]] = []
    covered = float("-inf")
    for iv, op, dim in sorted(spans, key=lambda s: (s[0].start, s[0].end)):
        if iv.end > covered:
            out.append((Interval(max(iv.start, covered), iv.end), op, dim))
            covered = iv.end
    return out


def _add(by_dim: dict[str, dict[str, float]], dim: str | None, op: str, seconds: float) -> None:
    ops = by_dim.setdefault(dim or "unknown", {})
    ops[op] = ops.get(op, 0.0) + seconds


def _find(t: float, labelled: list[tuple[Interval, object]]):
    """The label of the interval holding t, of `labelled` sorted and not overlapping; None if none."""
    i = bisect.bisect_right(labelled, t, key=lambda x: x[0].start) - 1
    return labelled[i][1] if i >= 0 and t < labelled[i][0].end else None


def split_window(window: Interval, compute: list[Kernel], starts: list[float],
                 comm: list[tuple[Interval, str, str | None]],
                 by_dim: dict[str, dict[str, float]] | None = None) -> dict[str, float]:
    """The window's pieces in microseconds: compute, host_wait, comm:<collective>, other (see the
    module docstring); `compute` sorted by start, `starts` their start times, `comm` disjoint(). With
    `by_dim`, the exposed communication is also added there by mesh dimension and collective (microseconds)."""
    busy = union([Interval(max(k.start, window.start), min(k.end, window.end))
                  for k in compute if k.end > window.start and k.start < window.end])
    pieces = {"compute": sum(iv.end - iv.start for iv in busy), "host_wait": 0.0}
    comm_ends = [seg.end for seg, _, _ in comm]  # disjoint and sorted: the ends are sorted too
    other = 0.0
    cursor = window.start
    for iv in busy + [Interval(window.end, window.end)]:
        if iv.start > cursor:  # a gap [cursor, iv.start): why did the next kernel not start sooner?
            i = bisect.bisect_left(starts, iv.start - 1e-3)
            nxt = compute[i] if i < len(compute) else None
            ready = nxt.launch_end if nxt is not None and nxt.launch_end is not None else cursor
            host = min(max(0.0, ready - cursor), iv.start - cursor)
            pieces["host_wait"] += host
            lo = cursor + host
            rest = iv.start - lo
            j = bisect.bisect_right(comm_ends, lo)  # the first segment still running after lo
            while j < len(comm) and comm[j][0].start < iv.start:
                seg, op, dim = comm[j]
                c = max(0.0, min(seg.end, iv.start) - max(seg.start, lo))
                if c > 0:
                    pieces[f"comm:{op}"] = pieces.get(f"comm:{op}", 0.0) + c
                    rest -= c
                    if by_dim is not None:
                        _add(by_dim, dim, op, c)
                j += 1
            other += rest
        cursor = max(cursor, iv.end)
    pieces["other"] = other
    return pieces


def _bounds(firsts: list[float | None], start: float, end: float) -> list[float]:
    """Phase window edges, len(PHASES) + 1 of them, from `start` to `end`: each phase opens at its
    first activity (never before the previous edge nor after `end`); a phase with none gets an empty
    window (it opens where the next one does); the first opens at `start`."""
    edges: list[float | None] = []
    last = start
    for first in firsts:
        if first is not None:
            last = min(max(last, first), end)
        edges.append(last if first is not None else None)
    nxt = end
    for j in range(len(edges) - 1, -1, -1):
        if edges[j] is None:
            edges[j] = nxt
        nxt = edges[j]
    edges[0] = start
    return [*edges, end]


def read_trace(events: list[dict], skip: int = 0, process_groups: dict[str, str] | None = None,
               pipelined: bool = False) -> TraceReading:
    """Every step from `skip` on (the warm-up steps left out), partitioned as the module docstring says.
    A mesh run's (`process_groups`: its map of group name to mesh dimension, possibly empty): each step's
    exposed communication by mesh dimension too; `pipelined` (pp > 1): each step's idle time on the pipeline."""
    steps, phases = ranges(events)
    ks = kernels(events, process_groups)
    if not ks:
        reading = _read_host_only(steps, phases, skip)
        if process_groups is not None:
            host_comm_by_dim(events, reading, pipelined)
        return reading
    by_step: dict[int, dict[str, list[Kernel]]] = {}
    step_ivs = sorted(((iv, n) for n, iv in steps.items()), key=lambda x: x[0].start)
    phase_ivs = sorted(((iv, p) for p, ivs in phases.items() for iv in ivs), key=lambda x: x[0].start)
    for k in ks:
        t = k.launch_start if k.launch_start is not None else k.start
        n = _find(t, step_ivs)
        p = _find(t, phase_ivs)
        if n is not None and p is not None:
            by_step.setdefault(n, {}).setdefault(p, []).append(k)
    order = sorted(by_step)
    firsts = {n: min(k.start for mine in by_step[n].values() for k in mine) for n in order}
    compute = [k for k in ks if k.collective is None]
    starts = [k.start for k in compute]
    comm = disjoint([(Interval(k.start, k.end), k.collective, k.dim) for k in ks if k.collective])
    blocked = blocked_calls(events)
    reading = TraceReading("gpu")
    for i, n in enumerate(order):
        if n < skip:
            continue
        mine = by_step[n]
        end = firsts[order[i + 1]] if i + 1 < len(order) else max(k.end for ps in mine.values() for k in ps)
        bounds = _bounds([min((k.start for k in mine.get(p, [])), default=None) for p in PHASES], firsts[n], end)
        rows = []
        by_dim: dict[str, dict[str, float]] | None = {} if process_groups is not None else None
        for j, p in enumerate(PHASES):
            lo, hi = bounds[j], bounds[j + 1]
            window = Interval(lo, hi)
            pieces = split_window(window, compute, starts, comm, by_dim)
            host_iv = next((iv for iv in phases[p] if steps[n].start <= iv.start < steps[n].end), None)
            leads = [k.start - k.launch_start for k in mine.get(p, [])
                     if k.collective is None and k.launch_start is not None]
            rows.append(PhaseReading(
                p, (hi - lo) / 1e6, {k: v / 1e6 for k, v in pieces.items()},
                host_s=(host_iv.end - host_iv.start) / 1e6 if host_iv else 0.0,
                nccl_s=sum(max(0.0, min(s.end, hi) - max(s.start, lo)) for s, _, _ in comm) / 1e6,
                lead_s=(statistics.median(leads) if leads else 0.0) / 1e6,
                blocked_s=overlap(blocked, host_iv.start, host_iv.end) / 1e6 if host_iv else 0.0))
        step = StepReading(n, (end - firsts[n]) / 1e6, rows)
        if by_dim is not None:
            step.by_dim = {d: {op: v / 1e6 for op, v in ops.items()} for d, ops in by_dim.items()}
        if pipelined:  # not computing, nor exposed in another dimension's collectives: waiting on the pipeline
            step.idle_s = step.wall_s - step.pieces.get("compute", 0.0) - sum(
                sum(ops.values()) for d, ops in step.by_dim.items() if d != "pp")
        reading.steps.append(step)
    return reading


COMM_PREFIXES = ("c10d::", "_c10d_functional::", "gloo:", "nccl:", "record_param_comms")
PROBE = re.compile(r"^topowise\.probe\.(\w+)$")
P2P_OPS = ("send", "recv")


def host_comm_by_dim(events: list[dict], reading: TraceReading, pipelined: bool) -> None:
    """A CPU (gloo) trace's exposed communication by mesh dimension, into each step of `reading`.

    A gloo collective is a gloo:<op> range on one of its group's worker threads (a send or receive: on the
    calling thread); it is exposed where the main thread runs no operator other than a communication one (it
    waits). Its dimension: that of the topowise.probe.<dimension> range during which its thread first ran
    (topowise.measure.model_parallel.probe_groups; a thread no probe ran is the other thread of the one dimension
    with a single thread found, when there is one such thread and dimension), and a send or receive on the main
    thread is the pipeline's
    (the only point-to-point user of the mesh); anything else is "unknown". With `pipelined`, a stage's idle
    time is its exposed pipeline communication: the main thread blocked on its neighbours."""
    steps, _ = ranges(events)
    main = next((e.get("tid") for e in events if e.get("cat") == "user_annotation" and STEP.match(e["name"])), None)
    probes = sorted(((Interval(float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))), m.group(1))
                     for e in events if e.get("tid") == main and (m := PROBE.match(e.get("name", "")))),
                    key=lambda p: p[0].start)
    gloo = [e for e in events if e.get("name", "").startswith("gloo:")]
    thread_dim: dict[object, str] = {}
    for e in sorted(gloo, key=lambda e: float(e["ts"])):
        dim = _find(float(e["ts"]), probes)
        if e.get("tid") != main and dim is not None:
            thread_dim.setdefault(e.get("tid"), dim)
    # a group has two worker threads: where the probes found one thread of a single dimension only, a worker
    # thread no probe ran is that dimension's other one
    unmapped = {e.get("tid") for e in gloo if e.get("tid") != main} - set(thread_dim)
    short = [d for d in {d for _, d in probes} if list(thread_dim.values()).count(d) == 1]
    if len(unmapped) == 1 and len(short) == 1:
        thread_dim[unmapped.pop()] = short[0]
    spans = []
    for e in gloo:
        op = e["name"][len("gloo:"):]
        dim = thread_dim.get(e.get("tid")) if e.get("tid") != main else ("pp" if op in P2P_OPS else None)
        spans.append((Interval(float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))), op, dim))
    comm = disjoint(spans)
    busy = union([iv for iv, name in _leaves([e for e in events if e.get("tid") == main and e.get("cat") == "cpu_op"])
                  if not name.startswith(COMM_PREFIXES)])
    for step in reading.steps:
        window = steps[step.step]
        by_dim: dict[str, dict[str, float]] = {}
        for seg, op, dim in comm:
            lo, hi = max(seg.start, window.start), min(seg.end, window.end)
            if hi > lo:
                exposed = (hi - lo) - overlap(busy, lo, hi)
                if exposed > 0:
                    _add(by_dim, dim, op, exposed / 1e6)
        step.by_dim = by_dim
        if pipelined:
            step.idle_s = sum(by_dim.get("pp", {}).values())


def _leaves(ops: list[dict]) -> list[tuple[Interval, str]]:
    """(interval, name) of the operators that hold no other (on one thread, ranges nest): where work runs, or
    where a wrapper (a DTensor redistribution) waits inside its collective."""
    ivs = sorted(((Interval(float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))), e["name"]) for e in ops),
                 key=lambda x: (x[0].start, -x[0].end))
    return [x for i, x in enumerate(ivs) if i + 1 == len(ivs) or ivs[i + 1][0].start >= x[0].end]


def _read_host_only(steps: dict[int, Interval], phases: dict[str, list[Interval]], skip: int) -> TraceReading:
    reading = TraceReading("host_only")
    for n in sorted(steps):
        if n < skip:
            continue
        step = steps[n]
        mine = {p: next((iv for iv in phases[p] if step.start <= iv.start < step.end), None) for p in PHASES}
        bounds = _bounds([mine[p].start if mine[p] else None for p in PHASES], step.start, step.end)
        rows = []
        for j, p in enumerate(PHASES):
            lo, hi = bounds[j], bounds[j + 1]
            host = max(0.0, min(mine[p].end, hi) - max(mine[p].start, lo)) if mine[p] else 0.0
            rows.append(PhaseReading(p, (hi - lo) / 1e6, {"host": host / 1e6, "other": (hi - lo - host) / 1e6},
                                     host_s=(mine[p].end - mine[p].start) / 1e6 if mine[p] else 0.0))
        reading.steps.append(StepReading(n, (step.end - step.start) / 1e6, rows))
    return reading


# ------------------------------------------------------------------------------------------------
# Writing a strategy's breakdown


def rank_traces(folder: str | Path) -> dict[int, Path]:
    """rank -> its trace file in `folder`."""
    out = {}
    for path in Path(folder).iterdir():
        m = RANK_FILE.match(path.name)
        if m:
            out[int(m.group(1))] = path
    return dict(sorted(out.items()))


def _predicted(predicted: dict) -> dict | None:
    """The cost model's exposed communication and host wait (step and per phase) from a record's prediction."""
    if "exposed_comm_s" not in predicted:
        return None
    out = {"step_time_s": predicted.get("step_time_s"), "exposed_comm_s": predicted["exposed_comm_s"],
           "host_wait_s": predicted.get("host_wait_s")}
    if predicted.get("phases"):
        out["phases"] = predicted["phases"]
    return out


def breakdown(folder: str | Path, record: dict) -> dict:
    """The breakdown.json document of one strategy's run, from the rank traces in `folder` and its
    bench train record (warm-up steps, measured step times, the prediction)."""
    warmup = int(record.get("warmup", 0))
    measured = record.get("step_times_s") or []
    mesh = record.get("mesh")
    groups = dict(record.get("process_groups") or {}) if mesh else None
    pipelined = bool(mesh and mesh.get("pp", 1) > 1)
    ranks, mode = {}, None
    for rank, path in rank_traces(folder).items():
        try:
            reading = read_trace(load_events(path), skip=warmup, process_groups=groups, pipelined=pipelined)
        except (OSError, EOFError, ValueError, KeyError, TypeError) as exc:
            ranks[str(rank)] = {"trace": path.name, "error": f"not a profiler trace ({type(exc).__name__}: {exc})"}
            continue
        for s in reading.steps:
            i = s.step - warmup
            s.measured_s = measured[i] if 0 <= i < len(measured) else None
        mode = mode or reading.mode
        median = reading.median_step()
        ranks[str(rank)] = {"trace": path.name, "mode": reading.mode, "steps": [s.to_dict() for s in reading.steps],
                            "median_step": median.to_dict() if median else None}
    doc = {"strategy": record.get("strategy"), "model": record.get("model"), "device": record.get("device"),
           "world_size": record.get("world_size"), "warmup_steps_left_out": warmup,
           "measured_step_time_s": record.get("step_time_s"), "mode": mode or "none",
           "partition": HOST_ONLY_NOTE if mode == "host_only" else PARTITION, "ranks": ranks}
    if not ranks:
        doc["note"] = f"no rank<R>.trace.json.gz in {folder}"
    medians = {r: d["median_step"] for r, d in ranks.items() if d.get("median_step")}
    if medians:  # the slowest rank's median step: the measured step is the slowest rank's too
        rank, step = max(medians.items(), key=lambda kv: kv[1]["wall_s"])
        doc["median_step"] = dict(step, rank=int(rank))
    if mesh and medians:
        doc["exposed_comm_by_dim_s"] = {r: m.get("exposed_comm_by_dim_s", {}) for r, m in medians.items()}
        bubble = pipeline_bubble(medians, record)
        if bubble:
            doc["pipeline_bubble"] = bubble
    pred = _predicted(record.get("predicted") or {})
    if pred:
        doc["predicted"] = pred
        if "median_step" in doc and mode == "gpu":
            doc["compared"] = compare(doc["median_step"], pred)
    elif (record.get("predicted") or {}).get("note"):
        doc["predicted"] = {"note": record["predicted"]["note"]}
    return doc


BUBBLE_NOTE = ("measured: a stage's idle time in its ranks' median step (the step's window less compute and less the "
               "other dimensions' exposed communication; on a CPU trace, its exposed pipeline sends and receives), "
               "the median over the stage's ranks; predicted: the cost model's replay of the same schedule "
               "(topowise.costmodel.pipeline.simulate) with each stage's measured busy time per micro-batch, split "
               "forward 1 : backward 2, sends free; closed form: the bubble fraction of equal stages")


def pipeline_bubble(medians: dict[str, dict], record: dict) -> dict | None:
    """Per pipeline stage (pp rank): the idle time measured in the median step beside the cost model's replay of
    the same schedule on the measured busy times (BUBBLE_NOTE); None without a stage's reading."""
    from topowise.costmodel.pipeline import pipeline_time, simulate

    pp, m = int(record["mesh"]["pp"]), int(record.get("grad_accum", 1))
    v = max(1, len(record["layer_split"]) // pp) if record.get("layer_split") else 1
    schedule = record.get("pp_schedule") or "1f1b"
    stage_of = {str(r["rank"]): r["mesh"]["pp"] for r in record.get("ranks") or []}
    idle: dict[int, list[float]] = {}
    wall: dict[int, list[float]] = {}
    for rank, step in medians.items():
        if rank in stage_of and step.get("idle_s") is not None:
            idle.setdefault(stage_of[rank], []).append(step["idle_s"])
            wall.setdefault(stage_of[rank], []).append(step["wall_s"])
    if sorted(idle) != list(range(pp)):
        return None
    measured = [statistics.median(idle[s]) for s in range(pp)]
    walls = [statistics.median(wall[s]) for s in range(pp)]
    busy = [max(0.0, w - i) for w, i in zip(walls, measured)]
    per_chunk = [busy[s % pp] / (m * v) for s in range(pp * v)]  # virtual stage s sits on pp rank s % pp
    sim = simulate(schedule, pp, m, v, forward_s=[c / 3 for c in per_chunk], backward_s=[2 * c / 3 for c in per_chunk])
    closed = pipeline_time(schedule, pp, m, v)
    stages = [{"stage": s, "ranks": sorted(int(r) for r, st in stage_of.items() if st == s),
               "step_s": walls[s], "busy_s": busy[s], "idle_s": measured[s],
               "idle_fraction": measured[s] / walls[s] if walls[s] else None,
               "predicted_idle_s": sim.timelines[s].idle_s,
               "predicted_idle_fraction": sim.timelines[s].idle_s / sim.step_s if sim.step_s else None}
              for s in range(pp)]
    return {"schedule": schedule, "pp": pp, "microbatches": m, "virtual_stages": v, "stages": stages,
            "predicted_step_s": sim.step_s, "closed_form_bubble_fraction": closed.bubble_fraction,
            "note": BUBBLE_NOTE}


def compare(step: dict, pred: dict) -> dict:
    """Predicted beside measured, per phase and for the step: exposed communication and host wait (s)."""
    out = {}
    for p in PHASES:
        measured = step["phases"].get(p, {}).get("pieces", {})
        predicted = (pred.get("phases") or {}).get(p, {})
        out[p] = {"exposed_comm_s": {"predicted": predicted.get("exposed_comm_s"),
                                     "measured": sum(v for k, v in measured.items() if k.startswith("comm:"))},
                  "host_wait_s": {"predicted": predicted.get("host_wait_s"),
                                  "measured": measured.get("host_wait", 0.0)}}
    out["step"] = {"exposed_comm_s": {"predicted": pred.get("exposed_comm_s"), "measured": step["exposed_comm_s"]},
                   "host_wait_s": {"predicted": pred.get("host_wait_s"),
                                   "measured": step["pieces"].get("host_wait", 0.0)},
                   "step_time_s": {"predicted": pred.get("step_time_s"), "measured": step.get("measured_s")}}
    return out


def write_breakdown(folder: str | Path, record: dict) -> dict:
    """Write folder/breakdown.json and folder/breakdown.png (when there is a step to draw); the document."""
    folder = Path(folder)
    doc = breakdown(folder, record)
    (folder / "breakdown.json").write_text(json.dumps(doc, indent=1))
    if any(d.get("median_step") for d in doc["ranks"].values()):
        plot_breakdown(doc, folder / "breakdown.png")
        doc["png"] = str(folder / "breakdown.png")
    return doc


PIECE_COLORS = {"compute": "#4c72b0", "host": "#4c72b0", "host_wait": "#dd8452", "other": "#bbbbbb",
                "comm:all_reduce": "#c44e52", "comm:all_gather": "#55a868", "comm:reduce_scatter": "#8172b2",
                "comm:broadcast": "#ccb974", "comm:sendrecv": "#64b5cd", "comm": "#c44e52"}


def _piece_order(pieces: set[str]) -> list[str]:
    head = [p for p in ("compute", "host") if p in pieces]
    comm = sorted(p for p in pieces if p.startswith("comm"))
    return head + comm + [p for p in ("host_wait", "other") if p in pieces]


def plot_breakdown(doc: dict, path: str | Path) -> Path:
    """Stacked bars, ms: one group per rank (its median step), one bar per phase; a last group with
    the cost model's prediction (compute = its GPU time less the exposed communication)."""
    import matplotlib

    matplotlib.use("Agg")  # files only
    import matplotlib.pyplot as plt

    groups: list[tuple[str, dict[str, dict[str, float]]]] = []
    for rank, d in doc["ranks"].items():
        step = d.get("median_step")
        if step:
            groups.append((f"rank {rank}\nstep {step['step']}", {p: step["phases"][p]["pieces"] for p in PHASES}))
    pred_phases = (doc.get("predicted") or {}).get("phases")
    if pred_phases and doc.get("mode") == "gpu":
        groups.append(("predicted", {p: {"compute": v["gpu_s"] - v["exposed_comm_s"], "comm": v["exposed_comm_s"],
                                         "host_wait": v["host_wait_s"]} for p, v in pred_phases.items()}))
    names = _piece_order({k for _, g in groups for pieces in g.values() for k in pieces})
    fig, ax = plt.subplots(figsize=(max(5.0, 1.9 * len(groups) + 1.5), 4.2))
    width = 0.8 / len(PHASES)
    seen = set()
    for gi, (_label, phases) in enumerate(groups):
        for pj, p in enumerate(PHASES):
            x = gi + (pj - (len(PHASES) - 1) / 2) * width
            bottom = 0.0
            for name in names:
                value = 1e3 * phases.get(p, {}).get(name, 0.0)
                if value <= 0:
                    continue
                ax.bar(x, value, width * 0.92, bottom=bottom, color=PIECE_COLORS.get(name, "#937860"),
                       label=None if name in seen else name.replace("comm:", "comm ").replace("comm", "exposed comm", 1)
                       if name.startswith("comm") else name.replace("_", " "))
                seen.add(name)
                bottom += value
            ax.text(x, bottom, p[0].upper(), ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(groups)), [g[0] for g in groups], fontsize=8)
    ax.set_ylabel("ms (median step)")
    title = f"{doc.get('strategy')}: {doc.get('model')}, where a step goes (F, B, O: forward, backward, optimizer)"
    if doc.get("mode") == "host_only":
        title += "\nhost only: a CPU trace has no GPU timeline"
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def summary_lines(doc: dict) -> list[str]:
    """A short table of the median step (the slowest rank's), ms, with the prediction where there is one."""
    step = doc.get("median_step")
    if not step:
        return [f"{doc.get('strategy')}: no step read from the traces ({doc.get('note', 'see breakdown.json')})"]
    names = _piece_order(set(step["pieces"]))
    head = f"{doc['strategy']}: rank {step['rank']}'s median step {step['step']}, ms"
    if doc["mode"] == "host_only":
        head += " (host only: CPU trace, no GPU timeline)"
    columns = "".join(f"{n.replace('comm:', ''):>15}" for n in names)
    lines = [head, "  " + f"{'phase':<10}" + columns + f"{'window':>10}"]
    for p in PHASES:
        ph = step["phases"][p]
        lines.append("  " + f"{p:<10}" + "".join(f"{1e3 * ph['pieces'].get(n, 0.0):15.2f}" for n in names)
                     + f"{1e3 * ph['wall_s']:10.2f}")
    if step.get("measured_s"):
        lines.append(f"  step {1e3 * step['wall_s']:.2f} ms from the trace, {1e3 * step['measured_s']:.2f} measured "
                     f"(residual {step['residual_pct']:+.1f}%)")
    lines += dim_lines(doc)
    cmp = (doc.get("compared") or {}).get("step")
    if cmp and cmp["exposed_comm_s"]["predicted"] is not None:
        lines.append(f"  exposed comm {1e3 * cmp['exposed_comm_s']['measured']:.2f} ms measured, "
                     f"{1e3 * cmp['exposed_comm_s']['predicted']:.2f} predicted; host wait "
                     f"{1e3 * cmp['host_wait_s']['measured']:.2f} measured, "
                     f"{1e3 * (cmp['host_wait_s']['predicted'] or 0):.2f} predicted")
    return lines


DIM_ORDER = ("tp", "cp", "pp", "dp_shard", "dp_replicate")  # printed in this order; others after, sorted


def dim_lines(doc: dict) -> list[str]:
    """A mesh run's exposed communication by mesh dimension, ms, one row per rank (its median step), and the
    pipeline's idle time per stage, measured beside predicted."""
    by_rank = doc.get("exposed_comm_by_dim_s")
    if not by_rank:
        return []
    seen = {d for dims in by_rank.values() for d in dims}
    dims = [d for d in DIM_ORDER if d in seen] + sorted(seen - set(DIM_ORDER))
    lines = ["  exposed communication by mesh dimension, ms (each rank's median step)",
             "  " + f"{'rank':<6}" + "".join(f"{d:>13}" for d in dims) + f"{'step':>10}"]
    for rank, values in sorted(by_rank.items(), key=lambda kv: int(kv[0])):
        wall = doc["ranks"][rank]["median_step"]["wall_s"]
        lines.append("  " + f"{rank:<6}" + "".join(f"{1e3 * values.get(d, 0.0):13.2f}" for d in dims)
                     + f"{1e3 * wall:10.2f}")
    if not dims:
        lines.append("  (none exposed)")
    bubble = doc.get("pipeline_bubble")
    if bubble:
        lines.append(f"  pipeline bubble ({bubble['schedule']}, pp {bubble['pp']}, {bubble['microbatches']} "
                     f"micro-batches): idle ms per stage, measured vs the schedule's replay on the measured busy "
                     f"times (closed form {100 * bubble['closed_form_bubble_fraction']:.1f}% for equal stages)")
        for st in bubble["stages"]:
            lines.append(f"    stage {st['stage']} (ranks {','.join(map(str, st['ranks']))}): idle "
                         f"{1e3 * st['idle_s']:.2f} ms measured ({100 * (st['idle_fraction'] or 0):.1f}% of "
                         f"{1e3 * st['step_s']:.2f}), {1e3 * st['predicted_idle_s']:.2f} predicted "
                         f"({100 * (st['predicted_idle_fraction'] or 0):.1f}%)")
    return lines
