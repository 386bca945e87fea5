"""`topowise bench train`: real training steps of each strategy: step time, MFU, memory, losses.

The measuring is topowise.measure.train (parent) and topowise.measure.steps (ranks); the cost model's
prediction and FLOPs count join each record here (topowise.expectations)."""

from __future__ import annotations

import argparse
import json

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
    parser.add_argument("--activation-checkpointing", action="store_true", help="recompute each block in the backward")
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
                        help="run the steps under torch.profiler: each rank's operator table (DIR/rank<R>.txt) and "
                             "timeline (DIR/rank<R>.trace.json.gz); a diagnostic, it slows every step")
    parser.add_argument("--pin-cpus", action="store_true",
                        help="put every thread of each rank on its own equal slice of the CPUs")
    parser.add_argument("--json", action="store_true", help="print the records and the loss check as JSON")


def run(args: argparse.Namespace) -> int:
    from topowise.expectations import train_expected
    from topowise.measure import train

    every = train.DEEPSPEED_STRATEGIES if args.engine == "deepspeed" else STRATEGY_NAMES
    request = train.make_request(
        model=args.model, strategies=args.strategies or ",".join(every), micro_batch=args.micro_batch,
        seq_len=args.seq_len,
        steps=args.steps, warmup=args.warmup, activation_checkpointing=args.activation_checkpointing,
        compile=args.compile, fabric=args.fabric, device=args.device, nproc=args.nproc,
        shard_group_size=args.shard_group_size, timeout_s=args.timeout, out=args.out, seed=args.seed, lr=args.lr,
        engine=args.engine, trace=args.trace, pin_cpus=args.pin_cpus)
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
    return 0 if agreement.agree else 1


def _topology(name: str | None, request):
    if request.cases[0].device != "cuda":
        return None
    if name:
        from topowise.topology import load_topology

        return load_topology(name)
    from topowise.measure.machine import live_topology

    return live_topology()


def _run_with_progress(train, request, expect):
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console()
    first, run = request.cases[0], request.cases[0].run
    console.print(f"[bold]bench train[/] {request.spec.name} ({request.spec.params / 1e9:.2f} B parameters) on "
                  f"{request.nproc} x {first.device}, micro-batch {run.micro_batch} x seq {run.seq_len}, "
                  f"{first.warmup} warm-up + {first.steps} timed steps, fabric {run.fabric}"
                  + (f", engine {run.engine}" if run.engine != "pytorch" else "")
                  + (", activation checkpointing" if run.activation_checkpointing else "")
                  + (", compiled" if run.compile else ""))
    if request.hsdp_note:
        console.print(f"hsdp: {request.hsdp_note}")
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), console=console, transient=True) as progress:
        task = progress.add_task("starting", total=len(request.cases))

        def on_event(event, case, record):
            if event == "start":
                progress.update(task, description=f"{case.run.strategy}: running")
            else:
                progress.advance(task)
                progress.console.print(_one_line(record))

        records, agreement = train.bench_train(request, expect, on_event)
    console.print(train_table(records))
    style = "green" if agreement.agree else "bold red"
    console.print(f"[{style}]{agreement.message()}[/]")
    if request.out:
        console.print(f"records appended to {request.out}")
    return records, agreement


def _one_line(record: dict) -> str:
    if record["status"] != "ok":
        return f"{record['strategy']}: [red]{record['status']}[/]: {record.get('error', '')}"
    mfu = record.get("mfu_measured_peak")
    return (f"{record['strategy']}: ok, {record['step_time_s'] * 1e3:.1f} ms/step"
            + (f", MFU {100 * mfu:.1f}% of measured peak" if mfu else ""))


def train_table(records: list[dict]):
    from rich.table import Table

    first = records[0] if records else {}
    table = Table(title=f"bench train: {first.get('model', '')}, {first.get('world_size', '')} processes, "
                        f"{first.get('device', '')}, fabric {first.get('fabric', '')}"
                        + (f", engine {first['engine']}" if first.get("engine", "pytorch") != "pytorch" else ""))
    for col in ("strategy", "status", "ms/step", "tok/s/GPU", "MFU", "MFU sheet", "GiB", "resv GiB",
                "pred ms (err)", "pred alloc (err)", "loss"):
        table.add_column(col, justify="left" if col in ("strategy", "status") else "right")

    def fmt(value, scale=1.0, spec="{:.1f}"):
        return "-" if value is None else spec.format(value * scale)

    def with_error(value, error, scale, spec):
        return fmt(value, scale, spec) + ("" if error is None else f" ({100 * error:+.0f}%)")

    for r in records:
        pred = r.get("predicted") or {}
        status = r["status"] if r["status"] == "ok" else f"[red]{r['status']}[/]"
        table.add_row(
            r["strategy"], status, fmt(r["step_time_s"], 1e3), fmt(r["tokens_per_s_per_gpu"], 1, "{:,.0f}"),
            fmt(r.get("mfu_measured_peak"), 100, "{:.1f}%"), fmt(r["mfu"], 100, "{:.1f}%"),
            fmt(r["peak_memory_bytes"], 1 / GIB, "{:.2f}"), fmt(r.get("reserved_bytes"), 1 / GIB, "{:.2f}"),
            with_error(pred.get("step_time_s"), pred.get("step_time_error"), 1e3, "{:.1f}"),
            with_error(pred.get("allocated_bytes", pred.get("peak_memory_bytes")), pred.get("peak_memory_error"),
                       1 / GIB, "{:.2f}"),
            fmt(r["losses"][-1] if r["losses"] else None, 1, "{:.4f}"))
    peaks = [r for r in records if r.get("peak_flops_measured")]
    if peaks:
        r = peaks[0]
        table.caption = (f"MFU: (6N + 12LHQT) x tokens/s over the bf16 8192^3 matmul rate measured on rank 0, "
                         f"{r['peak_flops_measured'] / 1e12:.0f} TFLOP/s; MFU sheet: over the datasheet peak, "
                         f"{(r.get('peak_flops_datasheet') or 0) / 1e12:.0f} TFLOP/s (hardware.py)")
    return table

