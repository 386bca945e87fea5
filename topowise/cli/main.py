"""`topowise VERB ...`: builds the parser from the verb modules, runs one, turns errors into one line.

Verb modules are imported only when their verb runs, so `topowise --help` and `topowise plan`
never import torch.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from topowise import __version__
from topowise.errors import UsageError

# verb -> (module under topowise.cli, one-line help). `bench` has sub-verbs of its own.
VERBS: dict[str, tuple[str, str]] = {
    "env": ("env", "print what a bug report needs: versions, GPUs, NCCL_* and CUDA_* variables"),
    "topo": ("topo", "show the GPU wiring: links, NVLink islands, bandwidth tiers, warnings"),
    "predict": ("predict", "predict step time and memory for one strategy and placement"),
    "plan": ("plan", "rank strategies and GPU placements, say why, export a launch config"),
    "study": ("study", "strategies x topologies report with plots (the main job)"),
    "bench": ("bench", "measure collectives (bench comm) or training steps (bench train)"),
    "calibrate": ("calibrate", "measure this machine and fit the cost model's parameters"),
    "validate": ("validate", "predicted vs measured on cases calibration did not use"),
    "launch": ("launch", "run a command under torchrun with a plan's placement and environment"),
}


class _Parser(argparse.ArgumentParser):
    """argparse exits with status 2 already; keep its message to the one-line form."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        sys.stderr.write(f"topowise: error: {message}\n")
        raise SystemExit(2)


def build_parser(verb: str | None) -> argparse.ArgumentParser:
    parser = _Parser(prog="topowise", description="Match a distributed-training strategy to the GPU wiring.")
    parser.add_argument("--version", action="version", version=f"topowise {__version__}")
    parser.add_argument("--debug", action="store_true", help="show a traceback on error")
    subs = parser.add_subparsers(dest="verb", metavar="VERB", parser_class=_Parser)
    for name, (_module, help_text) in VERBS.items():
        sub = subs.add_parser(name, help=help_text, description=help_text)
        sub.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show a traceback on error")
        if name == verb:  # only the verb being run imports its module
            _module_for(name).add_arguments(sub)
    return parser


def _module_for(verb: str):
    return importlib.import_module(f"topowise.cli.{VERBS[verb][0]}")


def _verb_in(argv: list[str]) -> str | None:
    for word in argv:
        if not word.startswith("-"):
            return word if word in VERBS else None
    return None


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    verb = _verb_in(argv)
    debug = "--debug" in argv
    try:
        args = build_parser(verb).parse_args(argv)
        if args.verb is None:
            build_parser(None).print_help()
            return 0
        return int(_module_for(args.verb).run(args) or 0)
    except UsageError as exc:
        if debug:
            raise
        sys.stderr.write(f"topowise: error: {exc}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("topowise: interrupted\n")
        return 130
    except BrokenPipeError:
        return 0
