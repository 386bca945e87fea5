"""`topowise monitor summarize RUN_DIR`, the part without torch: read what StepMonitor wrote
(RUN_DIR/monitor.rank<R>.jsonl), per rank and per step: which rank was slow, which collective the
others waited in, how often; a PNG of step time and wait per rank over the steps."""

from __future__ import annotations

import json
import math
import re
import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from topowise.errors import UsageError
from topowise.measure.gpu_clocks import THERMAL_OR_HARDWARE
from topowise.measure.records import checked_record
from topowise.monitor.rules import SLOW_CLOCK

FILE = re.compile(r"monitor\.rank(\d+)\.jsonl$")


@dataclass
class RankStats:
    rank: int
    steps: int
    median_step_s: float
    p90_step_s: float
    median_wait_s: float
    max_wait_s: float
    step_spikes: int
    wait_spikes: int
    slowest_at_spikes: int  # spike steps at which this rank was the one the others waited for
    late_total_s: float  # over those steps, how late it was in all
    median_sm_mhz: float = math.nan  # its GPU's SM clock as its steps ended (NaN: no NVML, e.g. CPU)
    held_share: float = 0.0  # of its steps, those whose clock temperature or a hardware slowdown held down


@dataclass
class Summary:
    run_dir: str
    world_size: int
    collective: str
    predicted_step_s: float | None
    ranks: list[RankStats]
    spike_steps: list[dict]  # one per step where any rank flagged a spike: the step's cross-rank view
    steps: list[dict] = field(default_factory=list)  # every step's cross-rank view
    missing_ranks: list[int] = field(default_factory=list)  # ranks of the world with no monitor file here

    def to_dict(self) -> dict:
        return {"run_dir": self.run_dir, "world_size": self.world_size, "collective": self.collective,
                "predicted_step_s": self.predicted_step_s, "ranks": [vars(r) for r in self.ranks],
                "spike_steps": self.spike_steps, "missing_ranks": self.missing_ranks}


def read_run(run_dir: str) -> dict[int, list[dict]]:
    """rank -> its records ("start" first, then one "step" per step), from RUN_DIR/monitor.rank<R>.jsonl."""
    folder = Path(run_dir)
    if not folder.is_dir():
        raise UsageError(f"{run_dir}: no such folder (give the folder StepMonitor wrote, e.g. runs/exp1)")
    files = {int(m.group(1)): p for p in folder.iterdir() if (m := FILE.match(p.name))}
    if not files:
        raise UsageError(f"{run_dir}: no monitor.rank<R>.jsonl files here (StepMonitor(RUN_DIR) writes them)")
    out = {}
    for rank, path in sorted(files.items()):
        try:
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError as exc:
            raise UsageError(f"{path}: cannot read ({exc.strerror or exc})") from None
        records = []
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except json.JSONDecodeError:
                if number == len(lines):
                    continue  # a last line cut short by a killed run
                raise UsageError(f"{path}: line {number} is not JSON") from None
            except RecursionError:  # the parser recurses per level: no monitor record nests that deep
                raise UsageError(f"{path}: line {number} is not a monitor record (JSON nested too deeply)") from None
            if not isinstance(data, dict):
                raise UsageError(f"{path}: line {number} is a JSON {type(data).__name__}, not a monitor record")
            try:
                records.append(_checked_values(checked_record(data)))  # types through MonitorStart/MonitorStep
            except UsageError as exc:
                raise UsageError(f"{path}: line {number}: {exc}") from None
        out[rank] = records
    return out


# StepMonitor writes null where a time is unknown and never a negative one: a NaN, an infinity or a negative
# time is not its record (a hand-edited or corrupted file), so it is refused rather than averaged in
_TIMES = ("time", "step_time_s", "ready_to_end_s", "wait_s", "slow_by_s", "predicted_step_s", "step_median_s",
          "wait_median_s")
_PER_RANK = ("step_times_s", "waits_s", "sm_mhz", "clock_reasons")


def _checked_values(rec: dict) -> dict:
    """A start or step record whose numbers can be true: finite and not negative, ranks within the world,
    one entry per rank in the per-rank lists (UsageError naming the field)."""
    if rec.get("kind") not in ("start", "step"):
        return rec
    kind = rec["kind"]
    for name in _TIMES:
        value = rec.get(name)
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise UsageError(f"a {kind!r} record's {name} is {value!r}, not a time (a finite number >= 0, "
                             "or null where unknown)")
    world = rec.get("world_size")
    if world is not None and world < 1:
        raise UsageError(f"a {kind!r} record's world_size is {world}, not a number of ranks (1 or more)")
    for name in ("rank", "slowest_rank", "step"):
        value = rec.get(name)
        if value is not None and (value < 0 or (name != "step" and world is not None and value >= world)):
            raise UsageError(f"a {kind!r} record's {name} is {value}, not "
                             + ("a step number (0 or more)" if name == "step" else
                                f"a rank of the {world} ranks (0 to {world - 1})" if world else "a rank (0 or more)"))
    for name in _PER_RANK:
        values = rec.get(name)
        if values is None:
            continue
        if world is not None and len(values) != world:
            raise UsageError(f"a {kind!r} record's {name} has {len(values)} entries for {world} ranks")
        bad = next((v for v in values if v is not None and not (math.isfinite(v) and v >= 0)), None)
        if bad is not None:
            raise UsageError(f"a {kind!r} record's {name} holds {bad!r}, not a finite number >= 0 (or null)")
    return rec


def _num(value) -> float:
    return math.nan if value is None else float(value)


def _p90(values: list[float]) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.9 * len(ordered)) - 1)]


def summarize(run_dir: str) -> Summary:
    by_rank = read_run(run_dir)
    starts = {r: next((x for x in recs if x.get("kind") == "start"), {}) for r, recs in by_rank.items()}
    steps = {r: [x for x in recs if x.get("kind") == "step"] for r, recs in by_rank.items()}
    if not any(steps.values()):
        raise UsageError(f"{run_dir}: the monitor files hold no steps yet")
    first = next(iter(starts.values()))
    world = max([int(s.get("world_size") or 0) for s in starts.values()] + [max(by_rank) + 1])
    # the cross-rank view of a step is in every rank's line; take it from the lowest rank that has the step
    view: dict[int, dict] = {}
    flagged: dict[int, dict[int, dict]] = {}
    for rank in sorted(steps):
        for rec in steps[rank]:
            view.setdefault(rec["step"], rec)
            spike = rec.get("spike") or {}
            if spike.get("step_time") or spike.get("wait"):
                flagged.setdefault(rec["step"], {})[rank] = spike
    spike_steps = []
    slowest = Counter()
    late = Counter()
    for step in sorted(flagged):
        rec = view[step]
        waited = sorted(r for r, s in flagged[step].items() if s.get("wait"))
        if waited:
            slowest[rec["slowest_rank"]] += 1
            late_by = _num(rec.get("slow_by_s"))
            late[rec["slowest_rank"]] += 0.0 if math.isnan(late_by) else late_by  # unknown: not counted
        spike_steps.append({"step": step, "slowest_rank": rec["slowest_rank"] if waited else None,
                            "late_at": rec.get("late_at") if waited else None, "slow_by_s": rec.get("slow_by_s"),
                            "waited": waited, "long_step": sorted(r for r, s in flagged[step].items()
                                                                  if s.get("step_time")),
                            "collective": rec.get("collective"), "step_times_s": rec.get("step_times_s"),
                            "waits_s": rec.get("waits_s")})
    ordered = [view[s] for s in sorted(view)]
    ranks = []
    for rank in range(world):
        own = steps.get(rank, [])
        judged = [r for r in own if r.get("judged", True)]
        times = [_num(r["step_time_s"]) for r in judged if r.get("step_time_s") is not None]
        waits = [_num(r["wait_s"]) for r in judged if r.get("wait_s") is not None]
        ranks.append(RankStats(
            rank=rank, steps=len(own),
            median_step_s=statistics.median(times) if times else math.nan, p90_step_s=_p90(times),
            median_wait_s=statistics.median(waits) if waits else math.nan, max_wait_s=max(waits, default=math.nan),
            step_spikes=sum(1 for r in own if (r.get("spike") or {}).get("step_time")),
            wait_spikes=sum(1 for r in own if (r.get("spike") or {}).get("wait")),
            slowest_at_spikes=slowest[rank], late_total_s=late[rank], **_clock_stats(ordered, rank)))
    return Summary(run_dir=str(run_dir), world_size=world, collective=first.get("collective") or "the collectives",
                   predicted_step_s=first.get("predicted_step_s"), ranks=ranks, spike_steps=spike_steps,
                   steps=ordered, missing_ranks=[r for r in range(world) if r not in by_rank])


def _clock_stats(views: list[dict], rank: int) -> dict:
    """The rank's median SM clock over the steps, and how often heat or a hardware slowdown held it down."""
    mhz = [_num(v["sm_mhz"][rank]) for v in views if len(v.get("sm_mhz") or []) > rank]
    mhz = [m for m in mhz if not math.isnan(m)]
    bits = [int(v["clock_reasons"][rank]) for v in views if len(v.get("clock_reasons") or []) > rank]
    held = sum(1 for b in bits if b & THERMAL_OR_HARDWARE)
    return {"median_sm_mhz": statistics.median(mhz) if mhz else math.nan,
            "held_share": held / len(bits) if bits else 0.0}


def verdict(summary: Summary) -> list[str]:
    """Prose under the tables: which rank is slow, where the others wait, how often."""
    lines = []
    judged = len(summary.steps)
    missing = summary.missing_ranks
    if missing:  # their own steps, and the spikes only they flagged, are not in these tables
        files = ", ".join(f"monitor.rank{r}.jsonl" for r in missing)
        lines.append(f"Missing: {files} (rank{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} of "
                     f"{summary.world_size}): {'their' if len(missing) > 1 else 'its'} steps are not counted, and a "
                     "wait only it flagged is not seen; copy every rank's file into the folder.")
    waited = [s for s in summary.spike_steps if s["waited"]]
    named = [r for r in summary.ranks if r.slowest_at_spikes]  # a rank the others' records say they waited for
    if not waited or not named:
        lines.append(f"No rank waited for another beyond the spike rule in {judged} steps"
                     + (" of the ranks whose files are here." if missing else "."))
    else:
        # the rank that cost the others the most waiting: one 500 ms stall outweighs a few late milliseconds of noise
        worst = max(named, key=lambda r: (r.late_total_s, r.slowest_at_spikes))
        said = (f"Rank {worst.rank} is the slow one: the others" if worst.rank not in missing else
                f"The ranks whose files are here say rank {worst.rank} (its own file is missing) was late: they")
        lines.append(f"{said} waited for it in {summary.collective} at "
                     f"{worst.slowest_at_spikes} of {len(waited)} wait spike steps ({worst.late_total_s * 1e3:.0f} ms "
                     f"late in all), out of {judged} steps.")
        others = [r for r in summary.ranks if r.slowest_at_spikes and r.rank != worst.rank]
        if others:
            lines.append("Also late at a spike: " + ", ".join(f"rank {r.rank} {r.slowest_at_spikes}x" for r in others)
                         + ".")
    long_only = [s for s in summary.spike_steps if not s["waited"]]
    if long_only:
        lines.append(f"{len(long_only)} step(s) were long on a rank with no rank waiting for another (compute, "
                     f"the host, or the collective itself): steps {', '.join(str(s['step']) for s in long_only[:10])}"
                     + (" ..." if len(long_only) > 10 else "") + ".")
    clocks = {r.rank: r.median_sm_mhz for r in summary.ranks if not math.isnan(r.median_sm_mhz)}
    if len(clocks) > 1:
        typical = statistics.median(clocks.values())
        for r in summary.ranks:
            if r.rank in clocks and clocks[r.rank] < SLOW_CLOCK * typical:
                lines.append(f"Rank {r.rank}'s GPU ran at {clocks[r.rank]:.0f} MHz (median SM clock as its steps "
                             f"ended) against the ranks' {typical:.0f}"
                             + (f"; temperature or a hardware slowdown held it down in {100 * r.held_share:.0f}% "
                                "of its steps" if r.held_share else "") + ".")
    if summary.predicted_step_s:
        medians = [r.median_step_s for r in summary.ranks if not math.isnan(r.median_step_s)]
        if medians:
            measured = max(medians)
            lines.append(f"Predicted step {summary.predicted_step_s * 1e3:.1f} ms, measured median "
                         f"{measured * 1e3:.1f} ms ({100 * (measured / summary.predicted_step_s - 1):+.1f}%).")
    return lines


def plot(summary: Summary, path: str) -> str:
    """Step time and wait of every rank over the steps, spikes marked, the prediction as a line."""
    check_plot_path(path)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    steps = [s["step"] for s in summary.steps]
    for rank in range(summary.world_size):
        times = [_num((s.get("step_times_s") or [None] * summary.world_size)[rank]) * 1e3 for s in summary.steps]
        waits = [_num((s.get("waits_s") or [None] * summary.world_size)[rank]) * 1e3 for s in summary.steps]
        top.plot(steps, times, label=f"rank {rank}", lw=1)
        bottom.plot(steps, waits, label=f"rank {rank}", lw=1)
    if summary.predicted_step_s:
        top.axhline(summary.predicted_step_s * 1e3, color="k", ls="--", lw=1, label="predicted")
    for spike in summary.spike_steps:
        for axis in (top, bottom):
            axis.axvline(spike["step"], color="r", alpha=0.25, lw=2)
    top.set_ylabel("step time (ms)")
    bottom.set_ylabel(f"wait (ms)\nin {summary.collective}")
    bottom.set_xlabel("step (red: a spike)")
    top.set_title(f"{summary.run_dir}: {summary.world_size} ranks")
    top.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=110)
    except OSError as exc:
        raise UsageError(f"--plot {path}: cannot write ({exc.strerror or exc})") from None
    finally:
        plt.close(fig)
    return path


def check_plot_path(path: str) -> None:
    """--plot names a PNG file in a folder that exists: a folder or a missing folder is refused, not
    written beside (matplotlib adds ".png" to a name without one: --plot runs/ would become runs.png)."""
    target = Path(path)
    if target.is_dir():
        raise UsageError(f"--plot {path} is a folder: give the PNG's file name, e.g. {target / 'monitor.png'}")
    folder = target.parent
    if not folder.is_dir():
        raise UsageError(f"--plot {path}: no folder {folder} (create it first, or give a PNG in a folder that "
                         "exists)")
    if target.suffix.lower() != ".png":
        raise UsageError(f"--plot {path}: give a .png file name (the plot is a PNG)")
