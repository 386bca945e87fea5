"""The monitor's arithmetic, without torch: running medians, the spike rule, and who waited for whom.

Both the ranks (topowise/monitor/step.py) and `topowise monitor summarize` use it, and the unit tests
check it on plain numbers.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import dataclass

FACTOR = 2.0  # a step or a wait above FACTOR x its running median is a spike
WINDOW = 20  # the running median is over the last WINDOW judged steps
WARMUP = 3  # the first WARMUP steps are neither judged nor part of any median (allocator, autotuning, compile)
# A wait spike must also be at least this fraction of the rank's median step: a 0.2 ms wait is "3x" a
# 0.07 ms median but is noise, not a straggler (on 2 CPU cores, 10 ms steps jitter by a few ms).
MIN_WAIT_FRACTION = 0.25
# Which rank was late is read where the ranks' arrival times spread the most; the step's start wins a
# tie within this share (a rank that started late is also ready late: the start is the cause).
START_TIE = 0.8


class RunningMedian:
    """The median of the last `window` values added (NaN before any)."""

    def __init__(self, window: int = WINDOW):
        if window < 1:
            raise ValueError(f"window must be at least 1, not {window}")
        self.values: deque[float] = deque(maxlen=window)

    def add(self, value: float) -> None:
        if not math.isnan(value):
            self.values.append(value)

    @property
    def median(self) -> float:
        return statistics.median(self.values) if self.values else math.nan

    def __len__(self) -> int:
        return len(self.values)


def is_spike(value: float, median: float, factor: float = FACTOR, floor: float = 0.0) -> bool:
    """value > factor x median and value > floor. No median yet (NaN) or no value: not a spike."""
    if math.isnan(value) or math.isnan(median):
        return False
    return value > factor * median and value > floor


def is_wait_spike(wait: float, wait_median: float, step_time: float, step_median: float,
                  factor: float = FACTOR) -> bool:
    """A wait that made the step long: above factor x its running median, above MIN_WAIT_FRACTION of the
    median step, and the rank's step above (1 + MIN_WAIT_FRACTION) x the median step (waits are often ~0,
    so the step rules usually decide; a wait inside an ordinary-length step is jitter). No median yet:
    not judged."""
    if any(math.isnan(v) for v in (wait, step_time, step_median)):
        return False
    floor = MIN_WAIT_FRACTION * step_median
    return (wait > floor and step_time > step_median + floor
            and (math.isnan(wait_median) or wait > factor * wait_median))


@dataclass(frozen=True)
class Arrival:
    """One step of every rank, as each rank measured it on its own clock, against the step's end (the
    point the step's last collective makes common to all ranks): `since_start` = end - start (the step
    time) and `since_ready` = end - the moment the rank's own compute was done (NaN where unknown)."""

    since_start: tuple[float, ...]
    since_ready: tuple[float, ...]


@dataclass(frozen=True)
class Waits:
    wait_s: tuple[float, ...]  # per rank: how long it waited for the slowest rank in this step
    slowest_rank: int
    slow_by_s: float  # how much later the slowest rank arrived than the earliest one
    late_at: str  # "start": the slowest rank began the step late; "compute": it finished its compute late


def waits(arrival: Arrival) -> Waits:
    """Who was late and who waited. The ranks share no clock, but the collective that ends the step
    (DDP's gradient all-reduce, FSDP2's reduce-scatter) releases them together, so times measured back
    from the end are comparable: the rank that started (or became ready) last is the slowest one, and
    every other rank waited the difference, max(arrival) - own arrival."""
    start = arrival.since_start
    start_spread = max(start) - min(start)
    ready = arrival.since_ready
    have_ready = not any(math.isnan(v) for v in ready)
    ready_spread = max(ready) - min(ready) if have_ready else -1.0
    if start_spread >= START_TIE * ready_spread:
        anchor, late_at = start, "start"
    else:
        anchor, late_at = ready, "compute"
    last = min(anchor)
    slowest = anchor.index(last)
    per_rank = [a - last for a in anchor]
    if have_ready:  # a rank waited at least as long as it was ahead at either point
        per_rank = [max(w, r - min(ready), s - min(start)) for w, r, s in zip(per_rank, ready, start)]
    per_rank[slowest] = 0.0  # the rank the others waited for did not wait
    return Waits(tuple(per_rank), slowest, max(anchor) - last, late_at)


# A rank whose GPU ran under this fraction of the median SM clock of the ranks is named as slowed by it.
SLOW_CLOCK = 0.95


def clock_cause(sm_mhz: list[float], reasons: list[int], rank: int, words) -> str | None:
    """Why `rank` may have been slow: "its GPU's SM clock was 1320 MHz, the ranks' median 1755 (held down
    by temperature)", when its clock was under SLOW_CLOCK x the median of the ranks' known clocks; else
    None. `words(bits)` names what held a clock down (topowise.measure.gpu_clocks.reason_words)."""
    known = [m for m in sm_mhz if not math.isnan(m)]
    if len(known) < 2 or math.isnan(sm_mhz[rank]):
        return None
    median = statistics.median(known)
    if sm_mhz[rank] >= SLOW_CLOCK * median:
        return None
    held = words(int(reasons[rank]))
    return (f"its GPU's SM clock was {sm_mhz[rank]:.0f} MHz, the ranks' median {median:.0f}"
            + (f" (held down by {' and '.join(held)})" if held else ""))

