"""Flags that several verbs take with one meaning: the cost model's profile, the engine, the fabric."""

from __future__ import annotations

import argparse

from topowise.run import ENGINES, FABRICS


def add_model_arguments(parser: argparse.ArgumentParser, fabric_help: str) -> None:
    parser.add_argument("--fabric", choices=FABRICS, default="nvlink", help=fabric_help)
    parser.add_argument("--profile", metavar="FILE", help="a calibrated cost-model profile (topowise calibrate; "
                        "default: the cached one of this machine, when the topology has its GPUs)")
    parser.add_argument("--force-profile", action="store_true", help="use --profile even if calibrated on another GPU")
    parser.add_argument("--engine", choices=ENGINES, default="pytorch",
                        help="whose ZeRO: pytorch (DDP, ZeroRedundancyOptimizer, FSDP2) or deepspeed (default pytorch)")
