"""`topowise profile`: measure a `module:function` model on this machine's GPU (or the CPU) as each
strategy runs it on one device, and write a model profile for `predict` and `plan --model-profile`.

The measuring is topowise.measure.model_profile; docs/model-profile.md holds the contract and the
format."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from topowise.errors import UsageError
from topowise.run import STRATEGY_NAMES, parse_strategies
from topowise.units import GIB

DEFAULT_STRATEGIES = "ddp,zero1,zero2,zero3"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, metavar="MODULE:FUNCTION",
                        help="a function returning (model, example_batch[, loss_fn]), e.g. examples.models.llama:build")
    parser.add_argument("--micro-batch", type=int, default=None, metavar="B",
                        help="passed to the function as micro_batch (default: the function's own default; a "
                             "function that takes none: the samples in its example batch)")
    parser.add_argument("--seq-len", type=int, default=None, metavar="L",
                        help="passed as seq_len where the function takes it; tokens per sample in throughput "
                             "(default: the function's seq_len default, else 1)")
    parser.add_argument("--device", choices=("cuda", "cpu"), default=None, help="default cuda when a GPU is visible")
    parser.add_argument("--strategies", default=DEFAULT_STRATEGIES,
                        help=f"which to profile, comma-separated ({', '.join(STRATEGY_NAMES)}; "
                             f"default {DEFAULT_STRATEGIES}; hsdp is predicted from zero3)")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per strategy (default 5)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first (default 3)")
    parser.add_argument("--compile", action="store_true", help="torch.compile each block")
    parser.add_argument("--wrap-class", metavar="NAME",
                        help="the class of the blocks FSDP wraps (default: the repeated class holding the most "
                             "parameters)")
    parser.add_argument("--seed", type=int, default=0, help="weights seed (default 0)")
    parser.add_argument("--out", metavar="FILE", help="write the profile (JSON) here")
    parser.add_argument("--json", action="store_true", help="print the profile as JSON")


def shape_defaults(reference: str, micro_batch: int | None, seq_len: int | None) -> tuple[int, int]:
    """(micro-batch, seq_len) to profile at: the flags, else the function's defaults, else 1. A function
    that takes no micro_batch sizes its batch itself: the micro-batch is its example batch's samples."""
    import inspect

    from topowise.models.callable import accepted_args, example_batch_size, resolve_function

    fn = resolve_function(reference)
    params = inspect.signature(fn).parameters
    if "micro_batch" not in accepted_args(fn):
        samples = example_batch_size(reference, seq_len if "seq_len" in accepted_args(fn) else None)
        if micro_batch is not None and samples is not None and micro_batch != samples:
            raise UsageError(f"--micro-batch {micro_batch}: {reference} takes no micro_batch, and its example batch "
                             f"holds {samples} samples; leave --micro-batch out (or give {samples}), or let the "
                             "function take micro_batch")
        if micro_batch is None and samples is None:
            raise UsageError(f"{reference} takes no micro_batch, and its example batch's tensors share no leading "
                             "(sample) dimension: give --micro-batch, the samples in one step")
        micro_batch = samples if micro_batch is None else micro_batch

    def default(name: str) -> int:
        p = params.get(name)
        value = p.default if p is not None and p.default is not inspect.Parameter.empty else 1
        return value if isinstance(value, int) and value >= 1 else 1

    micro_batch = default("micro_batch") if micro_batch is None else micro_batch
    seq_len = default("seq_len") if seq_len is None else seq_len
    for flag, value in (("--micro-batch", micro_batch), ("--seq-len", seq_len)):
        if value < 1:
            raise UsageError(f"{flag} must be a positive integer, not {value}")
    return micro_batch, seq_len


def run(args: argparse.Namespace) -> int:
    from topowise.measure.launcher import require_torch

    require_torch("profile")
    from topowise.models.spec import is_callable_reference

    if not is_callable_reference(args.model):
        raise UsageError(f"--model {args.model!r}: profile takes module:function (e.g. examples.models.llama:build); "
                         "presets and config.json are predicted without a profile")
    strategies = parse_strategies(args.strategies)
    for flag, value, least in (("--steps", args.steps, 1), ("--warmup", args.warmup, 0)):
        if value < least:
            raise UsageError(f"{flag} must be at least {least}, not {value}")
    micro_batch, seq_len = shape_defaults(args.model, args.micro_batch, args.seq_len)
    import torch

    from topowise.measure.model_profile import profile_model

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cpu":  # said before the first step: a CPU step of a real model takes seconds
        sys.stderr.write("topowise: profiling on the CPU is for testing: the times are this CPU's (host and compute "
                         "at once), and predict and plan do not take them for a GPU; one line per step follows\n")

    def progress(line: str) -> None:
        if device == "cpu":
            sys.stderr.write(f"topowise: {line}\n")
            sys.stderr.flush()

    data = profile_model(args.model, micro_batch=micro_batch, seq_len=seq_len, device=device,
                         strategies=tuple(s for s in strategies if s != "hsdp"), steps=args.steps,
                         warmup=args.warmup, compile=args.compile, wrap_class=args.wrap_class, seed=args.seed,
                         progress=progress)
    if args.out:
        try:
            Path(args.out).write_text(json.dumps(data, indent=1) + "\n")
        except OSError as exc:
            raise UsageError(f"--out {args.out}: cannot write ({exc.strerror})") from None
    if args.json:
        print(json.dumps(data, indent=1))
    else:
        render(data)
        if args.out:
            print(f"wrote {args.out}")
    return 0


def throughput_unit(data: dict) -> str:
    """"samples" for a model that takes no tokens (no seq_len, one per sample), else "tokens"."""
    from topowise.costmodel.profiled import throughput_unit as unit

    return unit(data["model"].get("accepts", ()), data.get("seq_len"))


def render(data: dict) -> None:
    from rich import box
    from rich.table import Table

    from topowise.cli.console import column, console, print_whole
    from topowise.planner.explain import param_count

    out = console()
    m = data["model"]
    shape = (f"{data['micro_batch']} samples" if throughput_unit(data) == "samples"
             else f"{data['micro_batch']} x {data['seq_len']} tokens")
    out.print(f"[bold]{m['name']}[/] ({param_count(m['params'])} parameters; {len(m['blocks'])} blocks of "
              f"{m['wrap_class'] or '(none: FSDP wraps the root only)'}) on {data['device_name']}, "
              f"micro-batch {shape}, torch {data['torch_version']}"
              f"{', compiled' if data['compile'] else ''}", highlight=False)
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, collapse_padding=True)
    heads = ("strategy", "step ms", "fwd GPU", "bwd GPU", "opt GPU", "fwd host", "bwd host", "opt host",
             "peak GiB", "activations GiB")
    for h in heads:
        column(table, h, justify="left" if h == "strategy" else "right")
    for name, s in data["strategies"].items():
        if s.get("status", "ok") != "ok":
            table.add_row(name, s.get("status", "?"), *[""] * (len(heads) - 2))
            continue
        ms = lambda x: f"{x * 1e3:,.2f}"  # noqa: E731
        gib = lambda x: "" if x is None else f"{x / GIB:,.2f}"  # noqa: E731
        table.add_row(name, ms(s["step_s"]), *(ms(s["gpu_s"][p]) for p in ("forward", "backward", "optimizer")),
                      *(ms(s["host_s"][p]) for p in ("forward", "backward", "optimizer")),
                      gib(s["peak_allocated_bytes"]), gib(s["activation_bytes"]))
    print_whole(out, table)
    for name, s in data["strategies"].items():  # why a strategy has no figures: its error, not a blank row
        if s.get("status", "ok") != "ok":
            out.print(f"{name}: {s.get('status')}: {s.get('error', 'no message')}", highlight=False, soft_wrap=True)
    out.print(f"GPU: each phase's own work (the GPU held while the host issued the step); host: the time to issue "
              f"it. Profiled in {data['wall_s']:.1f} s.", highlight=False)
