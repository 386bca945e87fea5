"""`topowise monitor summarize RUN_DIR`: the per-rank and per-step tables and a plot from what
StepMonitor (topowise.monitor) wrote. Needs no torch."""

from __future__ import annotations

import argparse
import json
import math

from topowise.cli.flags import add_wide_argument
from topowise.errors import UsageError

SUBVERBS = {
    "summarize": "per-rank and per-step tables and a plot from a StepMonitor run folder: which rank is slow, "
                 "which collective waits, how often",
    "hang": "which ranks never entered the collective the others wait in, from PyTorch's flight-recorder dumps",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    subs = parser.add_subparsers(dest="monitor_verb", metavar="WHAT", required=True, parser_class=type(parser))
    sub = subs.add_parser("summarize", help=SUBVERBS["summarize"], description=SUBVERBS["summarize"])
    sub.add_argument("run_dir", metavar="RUN_DIR", help="the folder StepMonitor(RUN_DIR) wrote")
    sub.add_argument("--all-steps", action="store_true", help="one row per step (default: the spike steps)")
    sub.add_argument("--plot", metavar="PNG", default=None, help="where the plot goes (default: RUN_DIR/monitor.png)")
    sub.add_argument("--no-plot", action="store_true", help="no plot")
    sub.add_argument("--json", action="store_true", help="print JSON")
    add_wide_argument(sub)
    hang = subs.add_parser("hang", help=SUBVERBS["hang"], description=SUBVERBS["hang"])
    hang.add_argument("dump_dir", metavar="DIR", help="the folder of the dumps, one file <prefix><rank> per rank")
    hang.add_argument("--json", action="store_true", help="print JSON")


def _ms(seconds) -> str:
    if seconds is None or (isinstance(seconds, float) and math.isnan(seconds)):
        return "-"
    return f"{seconds * 1e3:.1f}"


def run(args: argparse.Namespace) -> int:
    if args.monitor_verb == "hang":
        return _hang(args)
    from topowise.monitor.summary import plot, summarize, verdict

    if args.no_plot and args.plot:
        raise UsageError("--plot names where the plot goes and --no-plot asks for none: give one of them")
    summary = summarize(args.run_dir)
    png = None
    if not args.no_plot and summary.steps:
        png = plot(summary, args.plot or f"{args.run_dir.rstrip('/')}/monitor.png")
    if args.json:
        print(json.dumps(dict(summary.to_dict(), plot=png, verdict=verdict(summary)), indent=2, default=str))
        return 0
    show_summary(summary, verdict(summary), png, all_steps=args.all_steps, wide=args.wide)
    return 0


# which rank is slow and how much it costs the others: kept at any width
RANK_COLUMNS = (("rank", True), ("steps", True), ("median\nstep ms", True), ("p90\nstep ms", False),
                ("median\nwait ms", False), ("max\nwait ms", True), ("long\nsteps", False), ("wait\nspikes", True),
                ("slow rank at\nspike steps", True), ("late in\nall ms", True))


def rank_rows(summary) -> tuple[list[tuple[str, bool]], list[list[str]]]:
    """The per-rank table: (header, key) per column and the rows; SM MHz where clocks were recorded."""
    clocks = any(not math.isnan(r.median_sm_mhz) for r in summary.ranks)
    cols = [*RANK_COLUMNS, *((("SM\nMHz", True),) if clocks else ())]
    rows = [[str(r.rank), str(r.steps), _ms(r.median_step_s), _ms(r.p90_step_s), _ms(r.median_wait_s),
             _ms(r.max_wait_s), str(r.step_spikes), str(r.wait_spikes), str(r.slowest_at_spikes), _ms(r.late_total_s),
             *((f"{r.median_sm_mhz:.0f}" if not math.isnan(r.median_sm_mhz) else "-",) if clocks else ())]
            for r in summary.ranks]
    return cols, rows


# who was slow at a step, where, by how much: kept at any width; each rank's times follow
STEP_COLUMNS = (("step", True), ("slow\nrank", True), ("late at", True), ("late\nby ms", True), ("waited", True),
                ("long\nstep", True))


def step_rows(summary, all_steps: bool) -> tuple[list[tuple[str, bool]], list[list[str]]]:
    """The per-step table (the spike steps, or every step): who was slow, where, by how much; each rank's
    step and wait times after (left out first on a narrow screen)."""
    cols = [*STEP_COLUMNS, *((f"rank {rank}\nstep / wait ms", False) for rank in range(summary.world_size)),
            *((("predicted\nstep ms", False),) if summary.predicted_step_s else ())]
    spikes = {s["step"]: s for s in summary.spike_steps}
    rows = []
    for view in shown_steps(summary, all_steps):
        spike = spikes.get(view["step"])
        rows.append(step_row(summary, view, spike, names_slow_rank(spike, all_steps)))
    return cols, rows


def shown_steps(summary, all_steps: bool) -> list[dict]:
    """Every step, or the spike steps."""
    if all_steps:
        return list(summary.steps)
    spiked = {s["step"] for s in summary.spike_steps}
    return [v for v in summary.steps if v["step"] in spiked]


def names_slow_rank(spike: dict | None, all_steps: bool) -> bool:
    """Whether a step's row names its slowest rank and where it was late: at a step where some rank waited for
    it, or in the table of every step."""
    return bool(spike and spike["waited"]) or all_steps


def step_row(summary, view: dict, spike: dict | None, said: bool) -> list[str]:
    """One step: the slow rank and where it was late (where `said`), by how much, who waited, whose step was
    long, then each rank's step / wait ms ("" for a rank with no record of the step)."""
    slow = [str(view["slowest_rank"]), view.get("late_at") or "-"] if said else ["-", "-"]
    cells = [str(view["step"]), *slow, _ms(view.get("slow_by_s")), _ranks(spike, "waited"), _ranks(spike, "long_step")]
    cells += [f"{_ms(t)} / {_ms(w)}" for t, w in zip(view.get("step_times_s") or [], view.get("waits_s") or [])]
    cells += [""] * (6 + summary.world_size - len(cells))
    return cells + ([_ms(summary.predicted_step_s)] if summary.predicted_step_s else [])


def _ranks(spike: dict | None, key: str) -> str:
    return ",".join(map(str, spike[key])) if spike and spike[key] else "-"


def show_summary(summary, lines: list[str], png: str | None, all_steps: bool = False, wide: bool = False) -> None:
    """The two tables fitted to the screen, the verdict under them, where the plot went."""
    from rich import box

    from topowise.cli.console import Col, print_table, prose, screen_console

    out = screen_console()
    style = {"box": box.SIMPLE_HEAD, "show_edge": False, "collapse_padding": True, "title_justify": "left"}
    cols, rows = rank_rows(summary)
    print_table(out, [Col(h, "right", key=k) for h, k in cols], rows, wide=wide,
                title=f"{summary.run_dir}: {summary.world_size} ranks, waits in {summary.collective}", **style)
    cols, rows = step_rows(summary, all_steps)
    if rows:
        print_table(out, [Col(h, "left" if h == "late at" else "right", key=k) for h, k in cols], rows, wide=wide,
                    title="every step" if all_steps else "spike steps", **style)
    for line in lines:
        prose(out, line)
    if png:
        out.print(f"Plot: {png}", soft_wrap=True, markup=False, highlight=False)  # a path whole


def _hang(args: argparse.Namespace) -> int:
    from topowise.monitor import hang

    dumps, prefix = hang.read_dumps(args.dump_dir)
    groups = hang.analyze(dumps)
    lines = hang.verdict(groups)
    if args.json:
        print(json.dumps({"dumps": sorted(dumps), "prefix": prefix, "groups": [g.to_dict() for g in groups],
                          "verdict": lines}, indent=2))
        return 0
    print(f"{args.dump_dir}: dumps of rank(s) {','.join(map(str, sorted(dumps)))} ({prefix}<rank>)")
    for line in lines:
        print(line)
    return 0
