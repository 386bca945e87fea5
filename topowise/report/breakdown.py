"""Where the measured step goes, per strategy, for the study: read from `bench train --trace`'s breakdown.json.

`bench train --trace DIR` writes DIR/<strategy>/breakdown.json (topowise/measure/timeline.py): per rank
every timed step split into compute, exposed communication by collective, host wait and other, per
phase; `median_step` (the slowest rank's median step, a real step, so its pieces add up); and
`predicted` (the cost model's per-phase gpu_s, host_s, exposed_comm_s, host_wait_s). This module
keeps, per phase, the median step's pieces beside the predicted ones (no torch, no matplotlib).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from topowise.run import STEP_PHASES as PHASES

OK, HOST_ONLY, MISSING = "ok", "host_only", "missing"
MEASURED_KEYS = ("compute_s", "exposed_comm_s", "host_wait_s", "other_s")
PREDICTED_KEYS = ("gpu_s", "host_s", "exposed_comm_s", "host_wait_s")


@dataclass(frozen=True)
class StepBreakdown:
    """One strategy's measured median step, per phase, beside the cost model's prediction (seconds).

    phases[phase]: compute_s, exposed_comm_s, exposed_comm_by_collective {collective: s}, host_wait_s,
    other_s, window_s (measured; they add up to window_s), and predicted_gpu_s, predicted_host_s,
    predicted_exposed_comm_s, predicted_host_wait_s (None where the record had no prediction).
    A status other than "ok" has no phases and says why in `note`.
    """

    strategy: str
    status: str  # "ok", "host_only" (a CPU/gloo trace: no GPU timeline) or "missing"
    note: str = ""
    path: str = ""  # the breakdown.json read
    rank: int | None = None  # whose median step (the slowest rank's)
    step: int | None = None
    window_s: float | None = None  # the step's window on the GPU timeline (= the sum of the pieces)
    measured_s: float | None = None  # the step time the ranks measured (CUDA events, slowest rank)
    predicted_step_time_s: float | None = None
    phases: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def ok(self) -> bool:
        return self.status == OK

    def to_dict(self) -> dict:
        return {"strategy": self.strategy, "status": self.status, "note": self.note, "path": self.path,
                "rank": self.rank, "step": self.step, "window_s": self.window_s, "measured_s": self.measured_s,
                "predicted_step_time_s": self.predicted_step_time_s, "phases": self.phases}

    @classmethod
    def from_dict(cls, d: dict) -> StepBreakdown:
        return cls(d["strategy"], d["status"], d.get("note", ""), d.get("path", ""), d.get("rank"), d.get("step"),
                   d.get("window_s"), d.get("measured_s"), d.get("predicted_step_time_s"), d.get("phases") or {})


def missing(strategy: str, note: str, path: str = "") -> StepBreakdown:
    return StepBreakdown(strategy, MISSING, note, path)


def from_document(doc: dict, strategy: str | None = None, path: str = "") -> StepBreakdown:
    """The StepBreakdown of one breakdown.json document."""
    strategy = strategy or str(doc.get("strategy"))
    if doc.get("mode") == "host_only":
        return StepBreakdown(strategy, HOST_ONLY, "host-only trace (a CPU/gloo run has no GPU timeline to split)",
                             path)
    step = doc.get("median_step")
    if doc.get("mode") != "gpu" or not step:
        return missing(strategy, f"no step read from the traces ({doc.get('note') or 'mode ' + str(doc.get('mode'))})",
                       path)
    predicted = doc.get("predicted") or {}
    pred_phases = predicted.get("phases") or {}
    phases = {}
    for p in PHASES:
        ph = (step.get("phases") or {}).get(p) or {}
        pieces = ph.get("pieces") or {}
        comm = {k.removeprefix("comm:"): v for k, v in pieces.items() if k.startswith("comm:")}
        pred = pred_phases.get(p) or {}
        phases[p] = {"compute_s": pieces.get("compute", 0.0), "exposed_comm_s": sum(comm.values()),
                     "exposed_comm_by_collective": comm, "host_wait_s": pieces.get("host_wait", 0.0),
                     "other_s": pieces.get("other", 0.0), "window_s": ph.get("wall_s"),
                     **{f"predicted_{k}": pred.get(k) for k in PREDICTED_KEYS}}
    return StepBreakdown(strategy, OK, "", path, step.get("rank"), step.get("step"), step.get("wall_s"),
                         step.get("measured_s"), predicted.get("step_time_s"), phases)


def read_breakdown(folder: str, strategy: str) -> StepBreakdown:
    """folder/breakdown.json (one strategy's `bench train --trace` folder) as a StepBreakdown; a
    missing or unreadable file is a "missing" one that says so."""
    path = os.path.join(folder, "breakdown.json")
    try:
        with open(path) as fh:
            doc = json.load(fh)
    except FileNotFoundError:
        return missing(strategy, f"no breakdown.json in {folder}", path)
    except (OSError, ValueError) as exc:
        return missing(strategy, f"{path} could not be read ({type(exc).__name__}: {exc})", path)
    if not isinstance(doc, dict):
        return missing(strategy, f"{path} is not a breakdown document", path)
    return from_document(doc, strategy, path)


def read_breakdowns(trace_dir: str, records: dict[str, dict | None], strategies) -> tuple[StepBreakdown, ...]:
    """Per strategy, its breakdown under trace_dir/<strategy>/ (bench train's layout). `records` maps a
    strategy to its latest bench train record: a strategy with no record or one that failed has no
    breakdown (bench train writes one only for an ok run; an old file there would be stale)."""
    out = []
    for strategy in strategies:
        rec = records.get(strategy)
        if rec is None:
            out.append(missing(strategy, "no bench train record, so no trace"))
        elif rec.get("status") != "ok":
            out.append(missing(strategy, f"{rec.get('status')}: the strategy did not run to the end, so no trace"))
        else:
            out.append(read_breakdown(os.path.join(trace_dir, strategy), strategy))
    return tuple(out)
