"""Of a predicted step, the exposed communication of the collectives a rule picks (across nodes, across regions).

The cost model exposes communication per phase (costmodel/overlap.py): what runs before any compute or
after the last gradient is exposed whole; what hides behind a phase's compute leaves an exposed
remainder, shared here among that phase's hideable collectives in proportion to their time (they queue
on one communication stream, so each is a share of what is not hidden).
"""

from __future__ import annotations

from collections.abc import Callable

from topowise.costmodel import comm
from topowise.costmodel.comm import CollectiveCost
from topowise.costmodel.prediction import Prediction

_WHOLE = {comm.FORWARD_FIRST: "forward", comm.BACKWARD_LAST: "backward", comm.AFTER_STEP: "optimizer"}
_HIDEABLE = {comm.FORWARD: "forward", comm.BACKWARD: "backward"}


def exposed_s(pred: Prediction, which: Callable[[CollectiveCost], bool]) -> float:
    """Of the predicted step, the exposed communication of the collectives `which(c)` picks (module docstring)."""
    t = pred.time
    colls = [c for c in t.collectives if c.time_s > 0]
    if not colls:
        return 0.0
    if not t.phases:  # an engine without per-phase times: share the exposed total by time
        picked = sum(c.time_s for c in colls if which(c))
        return t.exposed_comm_s * picked / t.comm_s if t.comm_s > 0 else 0.0
    out = 0.0
    for phase in t.phases:
        whole = [c for c in colls if _WHOLE.get(c.phase) == phase.phase]
        hideable = [c for c in colls if _HIDEABLE.get(c.phase) == phase.phase]
        out += sum(c.time_s for c in whole if which(c))
        rest = max(phase.exposed_comm_s - sum(c.time_s for c in whole), 0.0)
        total = sum(c.time_s for c in hideable)
        if total > 0:
            out += rest * sum(c.time_s for c in hideable if which(c)) / total
    return out
