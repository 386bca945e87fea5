"""`topowise VERB ...`: builds the parser from the verb modules, runs one, turns errors into one line.

Verb modules are imported only when their verb runs, so `topowise --help` and `topowise plan`
never import torch.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import sys

from topowise import __version__
from topowise.errors import UsageError

# verb -> (module under topowise.cli, one-line help). `bench` and `monitor` have sub-verbs of their own.
VERBS: dict[str, tuple[str, str]] = {
    "env": ("env", "print what a bug report needs: versions, GPUs, NCCL_* and CUDA_* variables"),
    "topo": ("topo", "show the GPU wiring: links, NVLink islands, bandwidth tiers, warnings"),
    "predict": ("predict", "predict step time and memory for one strategy and placement"),
    "profile": ("model_profile", "measure a module:function model on one GPU: a model profile for predict and plan"),
    "plan": ("plan", "rank strategies and GPU placements, say why, export a launch config"),
    "study": ("study", "strategies x topologies report with plots (the main job)"),
    "bench": ("bench", "measure collectives (bench comm) or training steps (bench train)"),
    "calibrate": ("calibrate", "measure this machine and fit the cost model's parameters"),
    "validate": ("validate", "predicted vs measured on cases calibration did not use"),
    "launch": ("launch", "run a command under torchrun with a plan's placement and environment"),
    "monitor": ("monitor", "summarize what StepMonitor wrote from your own training loop (monitor summarize)"),
    "doctor": ("doctor", "check this node before a launch (PCIe, NVLink, clocks, ACS, NICs, NCCL_*); exit 1 on a fail"),
    "nccl-tests": ("nccl_tests", "the busbw nccl-tests should show here; a pasted output beside it (--compare)"),
}


class _Parser(argparse.ArgumentParser):
    """argparse exits with status 2 already; its message becomes one line that names the flag and
    points at the verb's own help (not an 8-line usage block)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        subs = next((a for a in self._actions if isinstance(a, argparse._SubParsersAction)), None)
        if subs is not None:  # argparse calls a verb by its metavar ("argument VERB: ...")
            if message.endswith(f"required: {subs.metavar}"):
                message = f"`{self.prog}` needs a verb: one of {', '.join(subs.choices)}"
            message = message.replace(f"argument {subs.metavar}: invalid choice:", "unknown verb")
        sys.stderr.write(f"topowise: error: {message}; see `{self.prog} --help`\n")
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
            importlib.import_module("topowise.cli.flags").ascii_numbers(sub)  # ASCII digits only
    return parser


def _module_for(verb: str):
    return importlib.import_module(f"topowise.cli.{VERBS[verb][0]}")


def _verb_in(argv: list[str]) -> str | None:
    for word in argv:
        if not word.startswith("-"):
            return word if word in VERBS else None
    return None


def _chosen_parser(parser: argparse.ArgumentParser, args: argparse.Namespace):
    """The (sub-)parser of the verb being run, e.g. `topowise bench comm`'s, and its sibling verbs' parsers."""
    siblings: dict[str, argparse.ArgumentParser] = {}
    while True:
        subs = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        chosen = getattr(args, subs.dest, None) if subs is not None else None
        if chosen not in (subs.choices if subs is not None else {}):
            return parser, siblings
        siblings = {name: p for name, p in subs.choices.items() if name != chosen}
        parser = subs.choices[chosen]


def _unrecognized(parser: argparse.ArgumentParser, args: argparse.Namespace, extras: list[str]) -> None:
    """Words no parser took: name the flag, the flag it was likely meant to be, or the verb that has it."""
    parser, siblings = _chosen_parser(parser, args)
    flags = [w.split("=", 1)[0] for w in extras if w.startswith("-")]
    if not flags:
        parser.error(f"unexpected argument {extras[0]!r}")
    known = [o for a in parser._actions for o in a.option_strings if o.startswith("--")]
    hints = []
    for flag in flags:
        close = difflib.get_close_matches(flag, known, n=1, cutoff=0.75)
        elsewhere = [p.prog for p in siblings.values() if flag in p._option_string_actions]
        if close:
            hints.append(f"did you mean {close[0]}?")
        elif elsewhere:
            hints.append(f"{flag} is a flag of `{elsewhere[0]}`")
    what = f"no flag {flags[0]}" if len(flags) == 1 else f"no flags {', '.join(flags)}"
    parser.error(f"`{parser.prog}` has {what}" + (f" ({'; '.join(hints)})" if hints else ""))


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    verb = _verb_in(argv)
    debug = "--debug" in argv
    try:
        parser = build_parser(verb)
        args, extras = parser.parse_known_args(argv)
        if extras:
            _unrecognized(parser, args, extras)
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
