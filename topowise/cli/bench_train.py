"""`topowise bench train`: real training steps of each strategy: step time, MFU, memory, losses.

The measuring is topowise.measure.train (parent) and topowise.measure.steps (ranks); the cost model's
prediction and FLOPs count join each record here (topowise.expectations)."""

from __future__ import annotations

import argparse
import json

from topowise.cli.flags import add_checkpointing_arguments, add_mesh_arguments, checkpointing_from_args, mesh_from_args
from topowise.run import ENGINES, FABRICS, STRATEGY_NAMES
from topowise.units import GIB


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from topowise.measure.train import DEEPSPEED_STRATEGIES, TrainCase  # torch-free: torch loads on the ranks

    parser.add_argument("--model", default="llama3.2-1b",
                        help="model preset or path to a config.json (default llama3.2-1b)")
    parser.add_argument("--strategies", default=None,
                        help=f"comma-separated: {', '.join(STRATEGY_NAMES).replace('zero3', 'zero3 (fsdp)')} "
                             f"(default all; with --engine deepspeed {','.join(DEEPSPEED_STRATEGIES)})")
    parser.add_argument("--micro-batch", type=int, default=1, help="sequences per GPU per step (default 1)")
    parser.add_argument("--seq-len", type=int, default=4096, help="tokens per sequence (default 4096)")
    parser.add_argument("--steps", type=int, default=10, help="timed steps (default 10)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first (default 3)")
    parser.add_argument("--activation-checkpointing", action="store_true",
                        help="recompute each block in the backward (= --checkpointing full)")
    add_checkpointing_arguments(parser)
    parser.add_argument("--compile", action="store_true", help="torch.compile each transformer block")
    parser.add_argument("--fabric", choices=FABRICS, default="nvlink",
                        help="pcie: NCCL_P2P_DISABLE=1 in the ranks, as if NVLink were not there")
    parser.add_argument("--device", choices=("cuda", "cpu"), default=None, help="default cuda when a GPU is visible")
    parser.add_argument("--nproc", type=int, default=None, help="processes (default: every visible GPU; 2 on cpu)")
    parser.add_argument("--shard-group-size", type=int, default=None,
                        help="hsdp shard group (default: NVLink island size, else nproc/2 from 4 up, else nproc)")
    parser.add_argument("--topology", default=None,
                        help="preset or file for the cost model's prediction (default: this machine, if readable)")
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="seconds per strategy before it is stopped (default 600)")
    parser.add_argument("--seed", type=int, default=0, help="weights and data seed (default 0)")
    parser.add_argument("--lr", type=float, default=TrainCase.lr,
                        help=f"AdamW learning rate (default {TrainCase.lr:g}: small, so the loss check compares "
                             "strategies rather than an unstable run)")
    parser.add_argument("--engine", choices=ENGINES, default="pytorch",
                        help="deepspeed: zero1/zero2/zero3 through DeepSpeed (pip install 'topowise[deepspeed]')")
    parser.add_argument("--out", default=None, help="append one JSON line per strategy to this file")
    parser.add_argument("--trace", default=None, metavar="DIR",
                        help="run the steps under torch.profiler: per strategy and rank, the operator table "
                             "(DIR/<strategy>/rank<R>.txt) and timeline (rank<R>.trace.json.gz, for Perfetto or "
                             "TensorBoard), read into breakdown.json and breakdown.png (compute, exposed "
                             "communication by collective, host wait per phase; on a mesh, exposed communication by "
                             "mesh dimension and each pipeline stage's idle time); nsys or nsys:DIR: the ranks under "
                             "Nsight Systems instead; a diagnostic, it slows every step")
    parser.add_argument("--no-memory-check", dest="check_memory", action="store_false",
                        help="launch even a strategy the cost model says cannot fit (by default it is not launched: "
                             "on a CPU, the processes x their estimated memory against what this machine has "
                             "available; on a GPU, the heaviest rank against one GPU's memory)")
    parser.add_argument("--pin-cpus", action="store_true",
                        help="put every thread of each rank on its own equal slice of the CPUs")
    parser.add_argument("--json", action="store_true", help="print the records and the loss check as JSON")
    add_mesh_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from topowise.expectations import train_expected
    from topowise.measure import train

    every = train.DEEPSPEED_STRATEGIES if args.engine == "deepspeed" else STRATEGY_NAMES
    mode, option = checkpointing_from_args(args)  # --activation-checkpointing is --checkpointing full
    request = train.make_request(
        model=args.model, strategies=args.strategies or ",".join(every), micro_batch=args.micro_batch,
        seq_len=args.seq_len, steps=args.steps, warmup=args.warmup, checkpointing=mode, selective_ac_option=option,
        compile=args.compile, fabric=args.fabric, device=args.device, nproc=args.nproc,
        shard_group_size=args.shard_group_size, timeout_s=args.timeout, out=args.out, seed=args.seed, lr=args.lr,
        engine=args.engine, trace=args.trace, pin_cpus=args.pin_cpus, mesh=mesh_from_args(args),
        check_memory=args.check_memory)
    train.refuse_if_none_fits(request)  # before any launch: each strategy's memory arithmetic
    topology = _topology(args.topology, request)

    def expect(case):
        return train_expected(case, topology)

    quiet = args.json or not train.is_reporting_rank()
    if quiet:
        records, agreement = train.bench_train(request, expect)
    else:
        records, agreement = _run_with_progress(train, request, expect)
    if not train.is_reporting_rank():
        return 0
    if args.json:
        print(json.dumps({"records": records, "losses_check": agreement.to_dict()}, indent=2))
    return exit_status(records, agreement)


CRASHED = ("error", "timeout")  # statuses of a strategy that left no numbers; "oom" is an answer


def exit_status(records: list[dict], agreement) -> int:
    """1 when a strategy crashed or hung (its numbers are missing) or the losses diverge; an OOM is a
    result (that strategy does not fit at this size), and a check with one strategy compares nothing."""
    crashed = any(r["status"] in CRASHED for r in records)
    return 1 if crashed or agreement.agree is False else 0


def _topology(name: str | None, request):
    if request.cases[0].device != "cuda":
        return None
    if name:
        from topowise.topology import load_topology

        return load_topology(name)
    from topowise.measure.machine import live_topology

    return live_topology()


def _run_with_progress(train, request, expect):
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from topowise.cli.console import console as make_console
    from topowise.planner.explain import param_count

    console = make_console()
    first, run = request.cases[0], request.cases[0].run
    console.print(f"[bold]bench train[/] {request.spec.name} ({param_count(request.spec.params)} parameters) on "
                  f"{request.nproc} x {first.device}, micro-batch {run.micro_batch} x seq {run.seq_len}, "
                  f"{first.warmup} warm-up + {first.steps} timed steps, {_fabric_words(run.fabric, first.device)}"
                  + (f", engine {run.engine}" if run.engine != "pytorch" else "")
                  + (f", checkpointing {run.checkpoint_words}" if run.activation_checkpointing else "")
                  + (", compiled" if run.compile else ""), highlight=False)
    if request.hsdp_note:
        console.print(f"hsdp: {request.hsdp_note}", highlight=False)
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), console=console, transient=True, disable=not console.is_terminal) as progress:
        task = progress.add_task("starting", total=len(request.cases))

        def on_event(event, case, record):
            if event == "start":
                progress.update(task, description=f"{case.run.strategy}: running")
            else:
                progress.advance(task)
                progress.console.print(_one_line(record), highlight=False)
                for line in trace_lines(record):
                    progress.console.print(line, highlight=False, markup=False)

        records, agreement = train.bench_train(request, expect, on_event)
    print_tables(console, records)
    style = {True: "green", False: "bold red", None: "yellow"}[agreement.agree]
    console.print(f"[{style}]{agreement.message()}[/]", highlight=False)
    crashed = [f"{r['strategy']} ({r['status']})" for r in records if r["status"] in CRASHED]
    if crashed:
        console.print(f"[bold red]not measured: {', '.join(crashed)}: see the error above (exit status 1)[/]",
                      highlight=False)
    if request.out:
        console.print(f"records appended to {request.out}", highlight=False)
    return records, agreement


def trace_lines(record: dict) -> list[str]:
    """Under --trace: the short table of the strategy's breakdown (or where nsys put its reports)."""
    folder = record.get("trace_dir")
    if not folder:
        return []
    from pathlib import Path

    from topowise.measure.timeline import summary_lines

    path = Path(folder) / "breakdown.json"
    if not path.is_file():
        reports = ", ".join(p.name for p in sorted(Path(folder).glob("*.nsys-rep")))
        return [f"{record['strategy']}: nsys reports in {folder}: {reports}"] if reports else []
    return [*summary_lines(json.loads(path.read_text())), f"  {path} and breakdown.png"]


def _fabric_words(fabric: str, device: str) -> str:
    from topowise.measure.records import fabric_label

    label = fabric_label(fabric, device)
    return "gloo" if label == "gloo" else f"fabric {label}"


def _one_line(record: dict) -> str:
    if record["status"] != "ok":
        return f"{record['strategy']}: [red]{record['status']}[/]: {record.get('error', '')}"
    mfu = record.get("mfu_measured_peak")
    return (f"{record['strategy']}: ok, {record['step_time_s'] * 1e3:.1f} ms/step"
            + (f", MFU {100 * mfu:.1f}% of measured peak" if mfu else ""))


def _fmt(value, scale: float = 1.0, spec: str = "{:.1f}") -> str:
    return "-" if value is None else spec.format(value * scale)


def _pct(error) -> str:
    return "-" if error is None else f"{100 * error:+.1f}%"


def print_tables(console, records: list[dict]) -> None:
    """The measured table, then predicted vs measured when the cost model had a prediction; what
    the cells do not say (MFU's peaks, why there is no prediction) goes under them, not into a column."""
    console.print(train_table(records))
    for line in failure_lines(records):
        console.print(line, highlight=False, markup=False)
    peaks = [r for r in records if r.get("peak_flops_measured")]
    if peaks:
        r = peaks[0]
        console.print(f"MFU: model FLOPs (6N + 12LHQT) x tokens/s over the bf16 8192^3 matmul rate measured on "
                      f"rank 0, {r['peak_flops_measured'] / 1e12:.0f} TFLOP/s; MFU sheet: over the datasheet peak, "
                      f"{(r.get('peak_flops_datasheet') or 0) / 1e12:.0f} TFLOP/s", highlight=False)
    clocks = clock_note(records)
    if clocks:
        console.print(clocks, highlight=False)
    compared = prediction_table(records)
    if compared is not None:
        console.print(compared)
    notes = sorted({(r.get("predicted") or {}).get("note") for r in records} - {None})
    for note in notes:
        console.print(f"no prediction: {note}", highlight=False)


def clock_note(records: list[dict]) -> str | None:
    """What the SM MHz column means, and how often the clock was held down (None without clocks)."""
    from topowise.measure.gpu_clocks import capped_span, clocks_over

    c = clocks_over(records)
    if not c:
        return None
    return (f"SM MHz: mean SM clock over the timed steps, the slowest GPU's (rated {c['max_sm_mhz']:.0f} MHz, "
            f"power limit {c['power_limit_w']:.0f} W); the power limit held it down in {capped_span(c)} of the samples"
            + (f"; temperature or a hardware slowdown in up to {100 * c['thermal_share_max']:.0f}%"
               if c["thermal_share_max"] else ""))


def _table(title: str):
    from rich import box
    from rich.table import Table

    return Table(title=title, box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0), pad_edge=False, show_edge=False)


def train_table(records: list[dict]):
    """What was measured, one row per strategy. Two-line headers keep it inside 80 columns."""
    from topowise.cli.console import column
    from topowise.measure.gpu_clocks import slowest

    first = records[0] if records else {}
    world = first.get("world_size", "")
    table = _table(f"bench train: {first.get('model', '')}, {world} process{'' if world == 1 else 'es'}, "
                   f"{first.get('device', '')}, {_fabric_words(first.get('fabric', ''), first.get('device'))}"
                   + (f", engine {first['engine']}" if first.get("engine", "pytorch") != "pytorch" else ""))
    for header in ("strategy", "status"):
        column(table, header)
    clocks = any(r.get("gpu_clocks") for r in records)
    for header in ("ms/step", "tok/s\n/GPU", "MFU", "MFU\nsheet", "peak\nGiB", "resv\nGiB", "loss") \
            + (("SM\nMHz",) if clocks else ()):
        column(table, header, justify="right")
    for r in records:
        status = r["status"] if r["status"] == "ok" else f"[red]{status_words(r)}[/]"
        table.add_row(
            r["strategy"], status, _fmt(r["step_time_s"], 1e3), _fmt(r["tokens_per_s_per_gpu"], 1, "{:,.0f}"),
            _fmt(r.get("mfu_measured_peak"), 100, "{:.1f}%"), _fmt(r["mfu"], 100, "{:.1f}%"),
            _fmt(r["peak_memory_bytes"], 1 / GIB, "{:.2f}"), _fmt(r.get("reserved_bytes"), 1 / GIB, "{:.2f}"),
            _fmt(r["losses"][-1] if r["losses"] else None, 1, "{:.4f}"),
            *((_fmt((slowest(r.get("gpu_clocks")) or {}).get("sm_mhz_mean"), 1, "{:.0f}"),) if clocks else ()))
    return table


def status_words(record: dict) -> str:
    """A record's status cell: killed (by a signal) or refused before launch, and which rank failed."""
    status = record["status"]
    if record.get("refused_before_launch"):
        status = "refused"
    elif record.get("exit_signal"):
        status = "killed"
    return status + (f" r{record['failed_rank']}" if record.get("failed_rank") is not None else "")


def failure_lines(records: list[dict], tail: int = 3) -> list[str]:
    """Under the table, each strategy that did not finish: what happened, on which rank and stage; where the
    ranks left no message of their own, the last lines of their output (the record's log_tail)."""
    lines = []
    for r in records:
        if r["status"] == "ok":
            continue
        lines.append(f"{r['strategy']}: {status_words(r)}: {r.get('error') or 'no error message'}")
        if not r.get("failed_rank") and r.get("log_tail") and "log_tail" in (r.get("error") or "log_tail"):
            lines += [f"    {line}" for line in r["log_tail"].splitlines()[-tail:]]
    return lines


def prediction_table(records: list[dict]):
    """The cost model's step time and allocated memory beside the measured ones (the memory measured
    in the last timed step, the one the error is of); None when no record has a prediction."""
    from topowise.cli.console import column
    from topowise.measure.records import steady_peak_bytes

    rows = [r for r in records if "step_time_s" in (r.get("predicted") or {})]
    if not rows:
        return None
    table = _table("predicted vs measured")
    column(table, "strategy")
    for header in ("pred ms", "meas ms", "error", "pred GiB", "meas GiB", "error"):
        column(table, header, justify="right")
    for r in rows:
        pred = r["predicted"]
        measured_mem = steady_peak_bytes(r)
        table.add_row(r["strategy"], _fmt(pred["step_time_s"], 1e3), _fmt(r["step_time_s"], 1e3),
                      _pct(pred.get("step_time_error")),
                      _fmt(pred.get("allocated_bytes", pred.get("peak_memory_bytes")), 1 / GIB, "{:.2f}"),
                      _fmt(measured_mem, 1 / GIB, "{:.2f}"), _pct(pred.get("peak_memory_error")))
    return table
