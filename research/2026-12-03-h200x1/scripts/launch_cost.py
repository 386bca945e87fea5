"""What the host's launch calls cost as the GPU's queue fills, from a `bench train --trace` timeline (no torch).

    python research/2026-12-03-h200x1/scripts/launch_cost.py DIR/<strategy>/rank0.trace.json.gz [--skip 2] [--json OUT.json]

For every kernel launch the profiler links to its kernel (the correlation id), the queue depth at the call
is the number of kernels launched before it that have not finished (running or waiting). Per phase of the
steps from `--skip` on: the host's time in the phase's named range, the part spent in calls that waited for
room in the launch queue (the profiler's "Command Buffer Full" markers and launch calls over 1 ms:
topowise.measure.timeline.blocked_calls), and the launch calls' own time by queue depth. A host phase of a
step whose GPU lags measures its own work plus those waits; the question this answers is whether the calls
themselves get slower when the GPU is busy.
"""

from __future__ import annotations

import argparse
import bisect
import heapq
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from topowise.measure.timeline import LAUNCH_CATS, PHASES, blocked_calls, load_events, overlap, ranges  # noqa: E402

DEPTHS = ((0, 0), (1, 8), (9, 64), (65, 512), (513, 10**9))  # queue depth bins, kernels


def launches_with_depth(events: list[dict]) -> list[tuple[float, float, int]]:
    """(call start, call duration, queue depth at the call) for every launch linked to a GPU event, µs."""
    ends = {e["args"]["correlation"]: float(e["ts"]) + float(e.get("dur", 0)) for e in events
            if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and "correlation" in e.get("args", {})}
    calls = sorted((float(e["ts"]), float(e.get("dur", 0)), ends[e["args"]["correlation"]]) for e in events
                   if e.get("cat") in LAUNCH_CATS and e.get("args", {}).get("correlation") in ends)
    pending: list[float] = []  # end times of kernels launched so far
    out = []
    for start, dur, end in calls:
        while pending and pending[0] <= start:
            heapq.heappop(pending)
        out.append((start, dur, len(pending)))
        heapq.heappush(pending, end)
    return out


def read(path: Path, skip: int) -> dict:
    events = load_events(path)
    steps, phases = ranges(events)
    kept = [iv for n, iv in sorted(steps.items()) if n >= skip]
    blocked = blocked_calls(events)
    calls = launches_with_depth(events)
    starts = [c[0] for c in calls]
    doc = {"trace": str(path), "steps": len(kept), "phases": {}}
    for phase in PHASES:
        ivs = [iv for iv in phases[phase] if any(s.start <= iv.start < s.end for s in kept)]
        host = sum(iv.end - iv.start for iv in ivs)
        waited = sum(overlap(blocked, iv.start, iv.end) for iv in ivs)
        inside = [c for iv in ivs for c in calls[bisect.bisect_left(starts, iv.start):
                                                 bisect.bisect_left(starts, iv.end)]]
        by_depth = {}
        for lo, hi in DEPTHS:
            durs = [d for _, d, depth in inside if lo <= depth <= hi and d <= 1000]
            if durs:
                by_depth[f"{lo}-{hi}" if hi < 10**9 else f"{lo}+"] = {
                    "calls": len(durs), "median_us": statistics.median(durs), "mean_us": statistics.fmean(durs)}
        n = max(len(kept), 1)
        doc["phases"][phase] = {"host_ms_per_step": host / 1e3 / n, "queue_full_ms_per_step": waited / 1e3 / n,
                                "launches_per_step": len(inside) / n,
                                "launch_calls_ms_per_step": sum(min(d, 1000) for _, d, _ in inside) / 1e3 / n,
                                "by_queue_depth": by_depth}
    return doc


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("traces", nargs="+")
    p.add_argument("--skip", type=int, default=2, help="steps left out at the start (warm-up)")
    p.add_argument("--json")
    a = p.parse_args(argv)
    docs = [read(Path(t), a.skip) for t in a.traces]
    for doc in docs:
        print(doc["trace"])
        for phase, r in doc["phases"].items():
            depth = "  ".join(f"depth {k}: {v['median_us']:.1f} us x{v['calls'] / doc['steps']:.0f}"
                              for k, v in r["by_queue_depth"].items())
            print(f"  {phase:9s} host {r['host_ms_per_step']:7.2f} ms, queue full "
                  f"{r['queue_full_ms_per_step']:6.2f} ms, {r['launches_per_step']:5.0f} launches in "
                  f"{r['launch_calls_ms_per_step']:6.2f} ms | {depth}")
    if a.json:
        Path(a.json).write_text(json.dumps(docs, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
