"""`topowise study`: every strategy x topology x placement, predicted; findings, plots, a report.

Runs on a laptop in seconds with no arguments (no torch). `--measure` on a GPU machine adds measured
columns from `topowise bench train`, run in a subprocess.
"""

from __future__ import annotations

import argparse
import os
import shlex
from pathlib import Path

from topowise.cli.flags import add_wide_argument
from topowise.cli.whatif_flags import add_whatif_arguments, prices_from_args
from topowise.errors import UsageError
from topowise.report.study import DEFAULT_MODEL, DEFAULT_TOPOLOGIES, MEASURE_MODEL

MEASURE_STEPS = 10  # bench train steps per strategy under --measure


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default=DEFAULT_MODEL,
                        help=f"model preset or Hugging Face config.json (default {DEFAULT_MODEL})")
    parser.add_argument("--topologies", default=None,
                        help="comma-separated presets, topology files or 'live' "
                             f"(default {','.join(DEFAULT_TOPOLOGIES)}"
                             ", plus the live node when there is one)")
    parser.add_argument("--gpu-name", metavar="NAME",
                        help="GPU model for `nvidia-smi topo -m` text among --topologies (e.g. H100)")
    parser.add_argument("--out", default="study", help="output folder (default ./study)")
    parser.add_argument("--num-gpus", type=int, default=None,
                        help="GPUs per job for the main placement (default: all GPUs of each node)")
    parser.add_argument("--seq-len", type=int, default=4096, help="tokens per sequence (default 4096)")
    parser.add_argument("--micro-batch", type=int, default=1, help="sequences per GPU per step (default 1)")
    parser.add_argument("--profile", default=None, help="cost-model profile from `topowise calibrate`")
    parser.add_argument("--measure", action="store_true",
                        help="also run `bench train` on this machine's GPUs and add measured columns (needs GPUs)")
    parser.add_argument("--measure-model", metavar="M",
                        help=f"model for --measure (default {MEASURE_MODEL}: every strategy fits)")
    parser.add_argument("--measure-steps", type=int, metavar="N",
                        help=f"training steps per strategy for --measure (default {MEASURE_STEPS})")
    parser.add_argument("--trace", action="store_true",
                        help="with --measure: run the steps under the profiler and show where each measured step "
                             "goes beside the prediction (the profiler slows the steps)")
    parser.add_argument("--compile", action="store_true",
                        help="predict every case compiled (torch.compile of each block); the recommendation weighs "
                             "eager against compiled; --measure runs bench train --compile")
    parser.add_argument("--json", action="store_true", help="print study.json to stdout instead of the summary")
    add_wide_argument(parser)
    add_whatif_arguments(parser)
    parser.add_argument("--questions-model", metavar="M",
                        help="the second model size for the four network questions (default: llama3.2-1b beside "
                             "a model of 3B parameters or more, else llama3.1-8b)")
    parser.add_argument("--no-network-questions", action="store_true",
                        help="leave out the section that answers the four network questions")


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from topowise.models.spec import load_model
    from topowise.report import study as st
    from topowise.report.render import print_summary

    model = load_model(args.model)
    asked_questions_model = load_model(args.questions_model) if args.questions_model else None  # a bad name, always
    prices = prices_from_args(args)  # a wrong price says so first, then a right one is refused where nothing reads it
    refuse_idle_flags(args)
    topologies = st.resolve_topologies(topology_names(args.topologies), args.gpu_name)
    profile = _load_profile(args.profile, topologies)
    st.check_study_args(topologies, num_gpus=args.num_gpus, seq_len=args.seq_len, micro_batch=args.micro_batch,
                        model=model)
    networks = _networks(args.network, topologies)
    question_models = () if args.no_network_questions else (
        model, asked_questions_model or load_model(second_model(model)))
    live = _live_to_measure(topologies) if args.measure else None
    measure_model = load_model(args.measure_model or MEASURE_MODEL) if args.measure else None

    out_dir = make_out_dir(args.out)  # before the predictions: a bad --out fails in a second, not after them
    err = Console(stderr=True)
    study = _run_with_progress(st, model, topologies, args, profile, err, networks, question_models, prices)
    if args.measure:
        study = study.with_measured(_measure(st, measure_model, live, args, out_dir, profile, err))
    paths = _write_report(study, out_dir, args)
    if args.json:
        import json

        print(json.dumps(study.to_dict(), indent=1))
        return 0
    print_summary(study, paths, wide=args.wide)
    return 0


def topology_names(text: str | None) -> list[str] | None:
    """--topologies as a list of names; None (not given) keeps the default set."""
    return None if text is None else [n.strip() for n in text.split(",") if n.strip()]


def _networks(text: str | None, topologies) -> tuple:
    """--network as the networks to compare; refused when no topology has a network between nodes."""
    if text is None:
        return ()
    from topowise.whatif import parse_networks

    networks = parse_networks(text)
    if not any(getattr(t, "num_nodes", 1) > 1 for _label, t in topologies):
        raise UsageError("--network compares networks between nodes: name a cluster among --topologies, "
                         "e.g. --topologies '4x hgx-h100-8+ib-ndr'")
    return networks


def _live_to_measure(topologies):
    """The node --measure runs on: the live one among --topologies, else this machine's GPUs through NVML."""
    from topowise.report import study as st

    live = next((t for label, t in topologies if label == "live"), None) or st.discover_live()
    if live is None:
        raise UsageError("--measure needs NVIDIA GPUs on this machine (none found through NVML); "
                         "run it on a GPU machine, or drop --measure for predictions only")
    return live


def _measure(st, measure_model, live, args: argparse.Namespace, out_dir: Path, profile, err):
    """`bench train` of every strategy on the live node's GPUs (the best --num-gpus of them)."""
    gpus = live.best_subset(args.num_gpus) if args.num_gpus else live.indices
    err.print(f"measuring {measure_model.name} on GPUs {','.join(map(str, gpus))} with `bench train` ...")
    return st.measure_live(measure_model, live, tuple(gpus), seq_len=args.seq_len,
                           micro_batch=args.micro_batch, steps=measure_steps(args),
                           out_jsonl=str(out_dir / "measured.jsonl"), profile=profile,
                           trace_dir=str(out_dir / "trace") if args.trace else None, compile=args.compile)


def _write_report(study, out_dir: Path, args: argparse.Namespace):
    from topowise.report.render import write_report

    try:
        return write_report(study, out_dir, command=_command_line(args))
    except OSError as exc:
        raise UsageError(f"--out {args.out}: cannot write the report ({exc.strerror or exc})") from None


def refuse_idle_flags(args: argparse.Namespace) -> None:
    """A flag read only beside another (--measure, the network questions or --network) is refused without it."""
    if not args.measure:
        _refuse_measure_flags(args)
    if args.no_network_questions and args.questions_model is not None:
        raise UsageError("--questions-model sets the network questions' second model, and --no-network-questions "
                         "leaves them out: give one of them")
    _refuse_unread_prices(args)


def _refuse_measure_flags(args: argparse.Namespace) -> None:
    """Without --measure: --trace, --measure-model and --measure-steps have no run to set."""
    for flag, given in (("--trace", args.trace), ("--measure-model", args.measure_model is not None),
                        ("--measure-steps", args.measure_steps is not None)):
        if given:
            what = "a trace needs a measured run" if flag == "--trace" else "it sets the measured run"
            raise UsageError(f"{flag} applies to --measure ({what}): add --measure on a GPU machine, "
                             f"or drop {flag}")


def _refuse_unread_prices(args: argparse.Namespace) -> None:
    """The prices are read by the network questions and --network only."""
    prices = [f for f, v in (("--gpu-hour-usd", args.gpu_hour_usd), ("--network-node-hour-usd",
                                                                       args.network_node_hour_usd)) if v is not None]
    if prices and args.no_network_questions and args.network is None:
        raise UsageError(f"{prices[0]} prices the network questions and --network, and neither is asked: drop "
                         f"{prices[0]}, or --no-network-questions")


def measure_steps(args: argparse.Namespace) -> int:
    return MEASURE_STEPS if args.measure_steps is None else args.measure_steps


def make_out_dir(path: str) -> Path:
    """--out as a folder that exists and can be written; a file, or a place where no folder can be
    made, is a one-line error."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {path}: is a file, not a folder; give a folder for the report (default ./study)")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--out {path}: cannot create the folder ({exc.strerror or exc}); "
                         "give a folder you can write") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise UsageError(f"--out {path}: the folder is not writable; give a folder you can write")
    return out


def second_model(model) -> str:
    """The other model size of the network questions: a small one beside a large model, else a large one."""
    return "llama3.2-1b" if model.params >= 3e9 else "llama3.1-8b"


def _run_with_progress(st, model, topologies, args, profile, console, networks=(), question_models=(),
                       prices=None):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    total = st.study_size(topologies, args.num_gpus)
    with Progress(TextColumn("[progress.description]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console, transient=True) as progress:
        task = progress.add_task("predicting", total=total)

        def advance(what: str) -> None:
            progress.update(task, advance=1, description=f"predicting {what}")

        return st.run_study(model, topologies, num_gpus=args.num_gpus, seq_len=args.seq_len,
                            micro_batch=args.micro_batch, profile=profile, advance=advance, networks=networks,
                            question_models=question_models, prices=prices, compile=args.compile)


def _load_profile(path: str | None, topologies=()):
    """--profile FILE as given, else the cached profile of this machine when every topology has its GPUs."""
    from topowise.costmodel.profile_store import resolve_profile

    return resolve_profile(path, [t.gpus[0].name for _label, t in topologies if t.gpus], check=False)


def _command_line(args: argparse.Namespace) -> str:
    """The command that reproduces this report, from the parsed flags."""
    words = ["topowise", "study", "--model", args.model]
    words += _topology_words(args)
    words += ["--seq-len", str(args.seq_len), "--micro-batch", str(args.micro_batch)]
    if args.profile:
        words += ["--profile", args.profile]
    words += _measure_words(args)
    words += _network_words(args)
    return " ".join(shlex.quote(w) for w in words)


def _topology_words(args: argparse.Namespace) -> list[str]:
    words = []
    if args.topologies is not None:
        words += ["--topologies", args.topologies]
    if args.gpu_name:
        words += ["--gpu-name", args.gpu_name]
    if args.num_gpus is not None:
        words += ["--num-gpus", str(args.num_gpus)]
    return words


def _measure_words(args: argparse.Namespace) -> list[str]:
    if not args.measure:
        return []
    return ["--measure", "--measure-model", args.measure_model or MEASURE_MODEL, "--measure-steps",
            str(measure_steps(args))] + (["--trace"] if args.trace else [])


def _network_words(args: argparse.Namespace) -> list[str]:
    """--network, the prices and the network questions' flags, as given."""
    words = []
    for flag in ("network", "gpu_hour_usd", "network_node_hour_usd", "questions_model"):
        if getattr(args, flag, None) is not None:
            words += ["--" + flag.replace("_", "-"), str(getattr(args, flag))]
    if args.no_network_questions:
        words.append("--no-network-questions")
    return words
