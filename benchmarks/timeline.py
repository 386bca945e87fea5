"""Where a training step's time goes, phase by phase, from one rank's profiler timeline.

`bench train --trace DIR` writes DIR/rank<R>.trace.json.gz (torch.profiler's
Chrome trace; steps and phases are named ranges: topowise.step.N, topowise.forward / backward /
optimizer). This reads it and says, per phase, how long the host took to issue the work, how long
the GPU's compute streams were busy, and why they sat idle:

- host: the next kernel's launch call had not returned yet (the GPU waited for Python);
- comm: it was launched, NCCL was running, the compute stream waited on it (an exposed collective);
- other: launched, no NCCL kernel running (a wait on another stream, a memcpy, the profiler).

`lead` is the median time from a compute kernel's launch call to its start: near zero where the
GPU waits for the host, large where the host runs ahead.

    python3 benchmarks/timeline.py DIR/rank0.trace.json.gz [--skip 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import bisect
import gzip
import json
import re
import statistics
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

PHASES = ("forward", "backward", "optimizer")
GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
LAUNCH_CATS = {"cuda_runtime", "cuda_driver"}
NCCL = re.compile(r"^nccl", re.IGNORECASE)
STEP = re.compile(r"^topowise\.step\.(\d+)$")


@dataclass(frozen=True)
class Interval:
    start: float  # microseconds
    end: float


@dataclass(frozen=True)
class Kernel:
    start: float
    end: float
    nccl: bool
    launch_start: float | None  # the host call that launched it, when the trace links them
    launch_end: float | None


@dataclass(frozen=True)
class PhaseTime:
    """One phase of one step, milliseconds."""
    phase: str
    host_ms: float        # the host's time in the phase's named range
    blocked_ms: float     # of it, in launch calls that waited for room in the launch queue
    gpu_ms: float         # from the phase's first kernel to the next phase's first kernel
    compute_ms: float     # compute streams busy (union)
    nccl_ms: float        # NCCL kernels running (union)
    idle_host_ms: float   # compute idle, next kernel not launched yet
    idle_comm_ms: float   # compute idle, launched, NCCL running
    idle_other_ms: float  # compute idle, launched, no NCCL running
    lead_ms: float        # median launch-to-start of the phase's compute kernels


def load_events(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        doc = json.load(f)
    return [e for e in (doc["traceEvents"] if isinstance(doc, dict) else doc) if e.get("ph") == "X"]


def ranges(events: list[dict]) -> tuple[dict[int, Interval], dict[str, list[Interval]]]:
    """The host's named ranges: step number -> interval, phase -> intervals."""
    steps, phases = {}, {p: [] for p in PHASES}
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


def kernels(events: list[dict]) -> list[Kernel]:
    launches = {}
    for e in events:
        if e.get("cat") in LAUNCH_CATS and "correlation" in e.get("args", {}):
            launches[e["args"]["correlation"]] = (float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)))
    out = []
    for e in events:
        if e.get("cat") not in GPU_CATS:
            continue
        start = float(e["ts"])
        launch = launches.get(e.get("args", {}).get("correlation"))
        out.append(Kernel(start, start + float(e.get("dur", 0)), bool(NCCL.match(e["name"])),
                          launch[0] if launch else None, launch[1] if launch else None))
    return sorted(out, key=lambda k: k.start)


def blocked_calls(events: list[dict]) -> list[Interval]:
    """Host calls that waited for room in the launch queue: the profiler's 'Command Buffer Full'
    markers, and launch calls of over 1 ms (a launch costs microseconds unless it waits)."""
    out = []
    for e in events:
        dur = float(e.get("dur", 0))
        if e.get("name") == "Command Buffer Full" or (e.get("cat") in LAUNCH_CATS and dur > 1000):
            out.append(Interval(float(e["ts"]), float(e["ts"]) + dur))
    return out


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


def phase_of(k: Kernel, phases: dict[str, list[Interval]]) -> str | None:
    """The phase whose host range holds the kernel's launch (the autograd thread's launches fall
    inside the main thread's backward range)."""
    t = k.launch_start if k.launch_start is not None else k.start
    for name, ivs in phases.items():
        if any(iv.start <= t < iv.end for iv in ivs):
            return name
    return None


def idle_split(window: Interval, compute: list[Kernel], starts: list[float],
               nccl: list[Interval]) -> tuple[float, float, float, float]:
    """Compute busy time in the window and its idle time split into host / comm / other.
    `compute` is sorted by start; `starts` are their start times."""
    busy = union([Interval(max(k.start, window.start), min(k.end, window.end))
                  for k in compute if k.end > window.start and k.start < window.end])
    host = comm = other = 0.0
    cursor = window.start
    for iv in busy + [Interval(window.end, window.end)]:
        if iv.start > cursor:  # a gap [cursor, iv.start): why did the next kernel not start sooner?
            i = bisect.bisect_left(starts, iv.start - 1e-3)
            nxt = compute[i] if i < len(compute) else None
            ready = nxt.launch_end if nxt is not None and nxt.launch_end is not None else cursor
            host_part = min(max(0.0, ready - cursor), iv.start - cursor)
            c = overlap(nccl, cursor + host_part, iv.start)
            host += host_part
            comm += c
            other += (iv.start - cursor - host_part) - c
        cursor = max(cursor, iv.end)
    return sum(iv.end - iv.start for iv in busy), host, comm, other


def step_phases(events: list[dict], skip: int) -> list[list[PhaseTime]]:
    steps, phases = ranges(events)
    ks = kernels(events)
    blocked = blocked_calls(events)
    nccl = union([Interval(k.start, k.end) for k in ks if k.nccl])
    by_phase: dict[tuple[int, str], list[Kernel]] = {}
    for k in ks:
        t = k.launch_start if k.launch_start is not None else k.start
        step = next((n for n, iv in steps.items() if iv.start <= t < iv.end), None)
        phase = phase_of(k, phases)
        if step is not None and phase is not None:
            by_phase.setdefault((step, phase), []).append(k)
    order = [(n, p) for n in sorted(steps) for p in PHASES if (n, p) in by_phase]
    firsts = [min(k.start for k in by_phase[key]) for key in order]
    compute = [k for k in ks if not k.nccl]
    starts = [k.start for k in compute]
    out: dict[int, list[PhaseTime]] = {}
    for i, (n, p) in enumerate(order):
        if n < skip or i + 1 >= len(order):
            continue  # warm-up steps; the last phase has no next start to end its window
        window = Interval(firsts[i], firsts[i + 1])
        busy, h, c, o = idle_split(window, compute, starts, nccl)
        host_iv = next(iv for iv in phases[p] if steps[n].start <= iv.start < steps[n].end)
        leads = [k.start - k.launch_start for k in by_phase[(n, p)] if not k.nccl and k.launch_start is not None]
        row = PhaseTime(p, (host_iv.end - host_iv.start) / 1e3,
                        overlap(blocked, host_iv.start, host_iv.end) / 1e3,
                        (window.end - window.start) / 1e3, busy / 1e3,
                        overlap(nccl, window.start, window.end) / 1e3, h / 1e3, c / 1e3, o / 1e3,
                        (statistics.median(leads) if leads else 0.0) / 1e3)
        out.setdefault(n, []).append(row)
    return [rows for rows in out.values() if len(rows) == len(PHASES)]  # whole steps only


def median_rows(steps: list[list[PhaseTime]]) -> list[PhaseTime]:
    rows = []
    for p in PHASES:
        mine = [r for s in steps for r in s if r.phase == p]
        if mine:
            rows.append(PhaseTime(p, *(statistics.median(getattr(r, f) for r in mine)
                                       for f in list(PhaseTime.__dataclass_fields__)[1:])))
    return rows


def format_rows(rows: list[PhaseTime]) -> str:
    head = ("phase", "host", "blocked", "gpu", "compute", "nccl", "idle:host", "idle:comm", "idle:other", "lead")
    lines = ["  ".join(f"{h:>10}" for h in head)]
    for r in rows:
        vals = list(asdict(r).values())
        lines.append("  ".join([f"{vals[0]:>10}"] + [f"{v:10.2f}" for v in vals[1:]]))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace", type=Path, nargs="+")
    ap.add_argument("--skip", type=int, default=2, help="warm-up steps to leave out (default 2)")
    ap.add_argument("--json", type=Path, help="write the per-step rows here")
    args = ap.parse_args(argv)
    report = {}
    for path in args.trace:
        if not path.is_file():
            print(f"timeline: no such file: {path}", file=sys.stderr)
            return 2
        try:
            events = load_events(path)
        except (OSError, EOFError, ValueError, KeyError, TypeError) as exc:
            print(f"timeline: {path} is not a profiler trace ({type(exc).__name__}: {exc})", file=sys.stderr)
            return 2
        steps = step_phases(events, args.skip)
        print(f"{path}: {len(steps)} steps, medians in ms")
        print(format_rows(median_rows(steps)))
        report[str(path)] = [[asdict(r) for r in s] for s in steps]
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
