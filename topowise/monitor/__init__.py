"""A monitor for the user's own training loop (DDP, FSDP2, DeepSpeed, accelerate): step time, the
time each rank waits for the slowest one, spikes, the predicted step beside the measured one.

    from topowise.monitor import StepMonitor
    mon = StepMonitor("runs/exp1", model=model)
    with mon.step(): ...

`StepMonitor` imports torch when first used, so `topowise monitor summarize` (topowise/monitor/summary.py)
runs where torch is not installed. docs/monitor.md says what is measured and what cannot be seen.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from topowise.monitor.step import StepMonitor

__all__ = ["StepMonitor"]


def __getattr__(name: str):
    if name == "StepMonitor":
        from topowise.monitor.step import StepMonitor

        return StepMonitor
    raise AttributeError(f"module 'topowise.monitor' has no attribute {name!r}")
