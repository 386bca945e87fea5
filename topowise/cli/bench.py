"""`topowise bench comm|train`: each sub-verb lives in its own module."""

from __future__ import annotations

import argparse
import importlib

SUBVERBS = {
    "comm": ("bench_comm", "collectives, the GPU-pair matrix and the transport NCCL used"),
    "train": ("bench_train", "training steps of each strategy: time, memory, MFU, losses"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    subs = parser.add_subparsers(dest="bench_verb", metavar="WHAT", required=True, parser_class=type(parser))
    for name, (module, help_text) in SUBVERBS.items():
        sub = subs.add_parser(name, help=help_text, description=help_text)
        importlib.import_module(f"topowise.cli.{module}").add_arguments(sub)


def run(args: argparse.Namespace) -> int:
    return importlib.import_module(f"topowise.cli.{SUBVERBS[args.bench_verb][0]}").run(args)
