"""The GPUs' SM clock and power while bench train's timed steps run, sampled through NVML.

A GPU sets its own SM clock: under a long run of large matmuls an H200 reaches its power limit
(700 W) and the driver lowers the clock to stay under it (the "SW power cap" clock event reason),
so the same kernel runs faster or slower with what ran before it, with the board and with its
temperature. A step time is only comparable with another, or with a prediction, beside the clock
it ran at; each bench train record says what that was (`gpu_clocks`).

The parent process samples (it only waits for torchrun meanwhile), so the ranks' timing is not
touched; the ranks say when their timed steps ran (host unix time) and on which GPUs (UUIDs), and
the parent keeps the samples of that window. Without NVML (no driver, no GPU) nothing is recorded.
The NVML module is a parameter so that tests run without GPUs.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

# nvml.h, nvmlClocksEventReasons: why the clock is below its maximum right now
SW_POWER_CAP = 0x4  # the board's power limit
HW_SLOWDOWN = 0x8  # hardware slowdown (temperature or power brake), clock cut by half or more
SW_THERMAL = 0x20  # the driver keeps the GPU under its maximum temperature
HW_THERMAL = 0x40
HW_POWER_BRAKE = 0x80  # an external power brake (the power supply)
THERMAL_OR_HARDWARE = HW_SLOWDOWN | SW_THERMAL | HW_THERMAL | HW_POWER_BRAKE

# One sample costs a few NVML calls (tens of microseconds); 20 ms gives 10 or more per step of a
# 200 ms step, and the parent has nothing else to do.
INTERVAL_S = 0.02


@dataclass(frozen=True)
class Sample:
    time_s: float  # host unix time
    uuid: str
    sm_mhz: float
    power_w: float
    reasons: int  # clock event reason bits


@dataclass(frozen=True)
class Board:
    """What does not change during a run."""

    uuid: str
    max_sm_mhz: float
    power_limit_w: float


@dataclass(frozen=True)
class Clocks:
    """One GPU during the timed steps."""

    uuid: str
    samples: int
    sm_mhz_mean: float
    sm_mhz_min: float
    max_sm_mhz: float
    power_w_mean: float
    power_limit_w: float
    power_capped_share: float  # of the samples, those whose clock the power limit held down
    thermal_share: float  # those held down by temperature or a hardware slowdown

    def to_dict(self) -> dict:
        return asdict(self)


def normalize_uuid(text: str) -> str:
    """NVML says GPU-3c7a..., torch's device properties say 3c7a...: compare without the prefix."""
    text = str(text).strip().lower()
    return text[4:] if text.startswith("gpu-") else text


def clocks_during(samples: list[Sample], board: Board, window: tuple[float, float]) -> Clocks | None:
    """The board's samples inside the window (host unix seconds, both ends kept); None if none."""
    mine = [s for s in samples if s.uuid == board.uuid and window[0] <= s.time_s <= window[1]]
    if not mine:
        return None
    n = len(mine)
    return Clocks(board.uuid, n, sum(s.sm_mhz for s in mine) / n, min(s.sm_mhz for s in mine), board.max_sm_mhz,
                  sum(s.power_w for s in mine) / n, board.power_limit_w,
                  sum(bool(s.reasons & SW_POWER_CAP) for s in mine) / n,
                  sum(bool(s.reasons & THERMAL_OR_HARDWARE) for s in mine) / n)


def summarize(samples: list[Sample], boards: list[Board], uuids: list[str] | None,
              window: list[float] | None) -> list[dict] | None:
    """Each rank's GPU (in rank order) over the timed steps, as dicts for the record; None when the
    ranks did not say where and when they ran, or NVML saw none of their GPUs."""
    if not uuids or not window or len(window) != 2:
        return None
    by_uuid = {b.uuid: b for b in boards}
    found = [clocks_during(samples, by_uuid[u], (window[0], window[1])) for u in map(normalize_uuid, uuids)
             if u in by_uuid]
    found = [c.to_dict() for c in found if c is not None]
    return found or None


def slowest(clocks: list[dict] | None) -> dict | None:
    """Of a record's GPUs, the one with the lowest mean SM clock (a synchronous step waits for it)."""
    return min(clocks, key=lambda c: c["sm_mhz_mean"]) if clocks else None


def clocks_over(records: list[dict]) -> dict | None:
    """Of the records that have clocks, the range of each run's slowest GPU's mean SM clock, the rated
    clock and the range of the power-capped share; None where no record has them."""
    seen = [slowest(r.get("gpu_clocks")) for r in records]
    seen = [c for c in seen if c]
    if not seen:
        return None
    mhz, capped = [c["sm_mhz_mean"] for c in seen], [c["power_capped_share"] for c in seen]
    return {"runs": len(seen), "sm_mhz_mean_min": min(mhz), "sm_mhz_mean_max": max(mhz),
            "max_sm_mhz": seen[0]["max_sm_mhz"], "power_limit_w": seen[0]["power_limit_w"],
            "power_capped_share_min": min(capped),
            "power_capped_share_max": max(capped), "thermal_share_max": max(c["thermal_share"] for c in seen)}


def describe_clocks(clocks: dict) -> str:
    """clocks_over's dict in words: "SM 1681-1980 MHz mean per run (rated 1980); the power limit held
    them down in 0-100% of the samples"."""
    heat = clocks["thermal_share_max"]
    return (f"SM {clocks['sm_mhz_mean_min']:.0f}-{clocks['sm_mhz_mean_max']:.0f} MHz mean per run (rated "
            f"{clocks['max_sm_mhz']:.0f}); the power limit held them down in {capped_span(clocks)} of the samples"
            + (f", temperature or a hardware slowdown in up to {100 * heat:.0f}%" if heat else ""))


def capped_span(clocks: dict) -> str:
    """clocks_over's power-capped shares as "97%" or "90-97%"."""
    low, high = (f"{100 * clocks[k]:.0f}" for k in ("power_capped_share_min", "power_capped_share_max"))
    return f"{low}%" if low == high else f"{low}-{high}%"


class ClockSampler:
    """`with ClockSampler() as sampler:` samples every GPU NVML sees, every `interval_s`, on a
    thread, until the block ends; then `sampler.summary(uuids, window)`. Quietly off without NVML."""

    def __init__(self, interval_s: float | None = None, nvml=None):
        self.interval_s = interval_s or INTERVAL_S
        self._nvml = nvml
        self.samples: list[Sample] = []
        self.boards: list[Board] = []
        self._handles: list = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> ClockSampler:
        try:
            nvml = self._nvml if self._nvml is not None else _import_pynvml()
            nvml.nvmlInit()
        except Exception:  # no package, no driver, no GPU: a run without clocks
            return self
        self._nvml = nvml
        try:
            for i in range(nvml.nvmlDeviceGetCount()):
                h = nvml.nvmlDeviceGetHandleByIndex(i)
                self._handles.append(h)
                self.boards.append(Board(normalize_uuid(_text(nvml.nvmlDeviceGetUUID(h))),
                                         float(nvml.nvmlDeviceGetMaxClockInfo(h, nvml.NVML_CLOCK_SM)),
                                         nvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0))
        except Exception:
            self._handles, self.boards = [], []
            self._shutdown()
            return self
        self._thread = threading.Thread(target=self._run, name="topowise-gpu-clocks", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            self._shutdown()

    def summary(self, uuids: list[str] | None, window: list[float] | None) -> list[dict] | None:
        return summarize(self.samples, self.boards, uuids, window)

    def _run(self) -> None:
        nvml = self._nvml
        reasons = _reasons_call(nvml)
        while not self._stop.is_set():
            now = time.time()
            try:
                for board, h in zip(self.boards, self._handles):
                    sm = float(nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM))
                    self.samples.append(Sample(now, board.uuid, sm, nvml.nvmlDeviceGetPowerUsage(h) / 1000.0,
                                               int(reasons(h))))
            except Exception:  # a GPU that stops answering ends the sampling, not the run
                return
            self._stop.wait(self.interval_s)

    def _shutdown(self) -> None:
        _shutdown(self._nvml)


def add_clocks_to_records(path, sampler: ClockSampler) -> int:
    """Give the train records in the JSONL file at `path` that say where and when their timed steps ran,
    and have no clocks yet, the sampler's clocks of that window; rewrite the file whole (a temporary file
    renamed over it, so an interruption leaves the old one). The records added to."""
    path = Path(path)
    if not path.is_file() or not sampler.samples:
        return 0
    lines, added = [], 0
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line) if line.strip() else None
        except json.JSONDecodeError:  # a line cut short by a killed rank stays as it is
            record = None
        if isinstance(record, dict) and record.get("kind") == "train" and not record.get("gpu_clocks"):
            seen = sampler.summary(record.get("gpu_uuids"), record.get("timed_window_unix_s"))
            if seen:
                record["gpu_clocks"], added = seen, added + 1
                line = json.dumps(record)
        lines.append(line)
    if added:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text("\n".join(lines) + "\n")
        os.replace(tmp, path)
    return added


def reason_words(bits: int) -> list[str]:
    """What held a clock down, in words, from its event reason bits."""
    names = ((SW_POWER_CAP, "the power limit"), (SW_THERMAL | HW_THERMAL, "temperature"),
             (HW_SLOWDOWN, "a hardware slowdown"), (HW_POWER_BRAKE, "the power brake"))
    return [word for bit, word in names if bits & bit]


class DeviceClock:
    """One GPU's SM clock and clock event reasons, read on demand (a few NVML calls, tens of
    microseconds, no GPU synchronisation): StepMonitor reads it once per step."""

    def __init__(self, nvml, handle):
        self._nvml, self._handle = nvml, handle
        self._reasons = _reasons_call(nvml)

    @classmethod
    def open(cls, uuid: str, nvml=None) -> DeviceClock | None:
        """The GPU with this UUID (torch's or NVML's form), or None where NVML cannot say."""
        try:
            nvml = nvml if nvml is not None else _import_pynvml()
            nvml.nvmlInit()
        except Exception:
            return None
        try:
            for i in range(nvml.nvmlDeviceGetCount()):
                handle = nvml.nvmlDeviceGetHandleByIndex(i)
                if normalize_uuid(_text(nvml.nvmlDeviceGetUUID(handle))) == normalize_uuid(uuid):
                    return cls(nvml, handle)
        except Exception:
            pass
        _shutdown(nvml)
        return None

    def read(self) -> tuple[float, int]:
        """(SM MHz, reason bits); (NaN, 0) if NVML stops answering."""
        try:
            return (float(self._nvml.nvmlDeviceGetClockInfo(self._handle, self._nvml.NVML_CLOCK_SM)),
                    int(self._reasons(self._handle)))
        except Exception:
            return float("nan"), 0

    def close(self) -> None:
        _shutdown(self._nvml)


def _reasons_call(nvml):
    """NVML's clock event reasons call (named ...ThrottleReasons before NVML 12.2); one that says 0 if
    neither is there."""
    return (getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
            or getattr(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None) or (lambda _handle: 0))


def _shutdown(nvml) -> None:
    try:
        nvml.nvmlShutdown()
    except Exception:
        pass


def _import_pynvml():
    import pynvml

    return pynvml


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
