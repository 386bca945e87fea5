"""`topowise monitor summarize RUN_DIR`: the per-rank and per-step tables and a plot from what
StepMonitor (topowise.monitor) wrote. Needs no torch."""

from __future__ import annotations

import argparse
import json
import math

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

    summary = summarize(args.run_dir)
    png = None
    if not args.no_plot and summary.steps:
        png = plot(summary, args.plot or f"{args.run_dir.rstrip('/')}/monitor.png")
    if args.json:
        print(json.dumps(dict(summary.to_dict(), plot=png, verdict=verdict(summary)), indent=2, default=str))
        return 0
    from rich.table import Table

    from topowise.cli.console import column, console, print_whole

    out = console()
    ranks = Table(title=f"{summary.run_dir}: {summary.world_size} ranks, waits in {summary.collective}")
    clocks = any(not math.isnan(r.median_sm_mhz) for r in summary.ranks)
    for header in ("rank", "steps", "median\nstep ms", "p90\nstep ms", "median\nwait ms", "max\nwait ms",
                   "long\nsteps", "wait\nspikes", "slow rank at\nspike steps", "late in\nall ms") \
            + (("SM\nMHz",) if clocks else ()):
        column(ranks, header, justify="right")
    for r in summary.ranks:
        ranks.add_row(str(r.rank), str(r.steps), _ms(r.median_step_s), _ms(r.p90_step_s), _ms(r.median_wait_s),
                      _ms(r.max_wait_s), str(r.step_spikes), str(r.wait_spikes), str(r.slowest_at_spikes),
                      _ms(r.late_total_s), *((f"{r.median_sm_mhz:.0f}" if not math.isnan(r.median_sm_mhz) else "-",)
                                             if clocks else ()))
    print_whole(out, ranks)

    rows = summary.steps if args.all_steps else [v for v in summary.steps
                                                 if v["step"] in {s["step"] for s in summary.spike_steps}]
    spikes = {s["step"]: s for s in summary.spike_steps}
    per_step = Table(title="every step" if args.all_steps else "spike steps")
    for header in ("step", "slow\nrank", "late at", "late\nby ms", "waited", "long\nstep"):
        column(per_step, header, justify="right" if header != "late at" else "left")
    for rank in range(summary.world_size):
        column(per_step, f"rank {rank}\nstep / wait ms", justify="right")
    if summary.predicted_step_s:
        column(per_step, "predicted\nstep ms", justify="right")
    for view in rows:
        spike = spikes.get(view["step"])
        waited = spike and spike["waited"]
        times = view.get("step_times_s") or []
        waits = view.get("waits_s") or []
        cells = [str(view["step"]), str(view["slowest_rank"]) if waited or args.all_steps else "-",
                 (view.get("late_at") or "-") if waited or args.all_steps else "-",
                 _ms(view.get("slow_by_s")),
                 ",".join(map(str, spike["waited"])) if waited else "-",
                 ",".join(map(str, spike["long_step"])) if spike and spike["long_step"] else "-"]
        cells += [f"{_ms(t)} / {_ms(w)}" for t, w in zip(times, waits)]
        if summary.predicted_step_s:
            cells.append(_ms(summary.predicted_step_s))
        per_step.add_row(*cells)
    if rows:
        print_whole(out, per_step)
    for line in verdict(summary):
        out.print(line, soft_wrap=True)
    if png:
        out.print(f"Plot: {png}", soft_wrap=True)
    return 0


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
