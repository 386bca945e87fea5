"""`topowise env`: versions, GPUs and NCCL_*/CUDA_* variables, for bug reports."""

from __future__ import annotations

import argparse
import json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--no-torch", action="store_true", help="skip importing torch (faster)")


def run(args: argparse.Namespace) -> int:
    from topowise.envinfo import collect

    info = collect(with_torch=not args.no_torch)
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    from rich.table import Table

    from topowise.cli.console import column, console

    # versions, bus ids and variable values are copied into bug reports: never wrapped or cut
    table = Table(show_header=False, box=None)
    column(table, "", style="bold")
    column(table, "")
    for key in ("topowise", "python", "platform"):
        table.add_row(key, info[key])
    for name, version in info["packages"].items():
        table.add_row(name, version or "not installed")
    torch = info["torch"]
    table.add_row("torch", torch.get("version") or torch.get("note", "not installed"))
    if torch.get("version"):
        table.add_row("torch CUDA / NCCL", f"{torch.get('cuda') or '-'} / {torch.get('nccl') or '-'}"
                      f"  (cuda available: {torch.get('cuda_available')}, devices: {torch.get('device_count')})")
    nvidia = info["nvidia"]
    table.add_row("NVIDIA driver", (nvidia.get("driver") or nvidia.get("note", "-"))
                  + (f" (CUDA {nvidia['cuda_driver']})" if nvidia.get("cuda_driver") else ""))
    for g in nvidia.get("gpus", []):
        table.add_row(f"GPU{g['index']}", f"{g['name']}  {g['memory_gib']} GiB  {g['pci_bus_id']}")
    for k, v in info["environment"].items():
        table.add_row(k, v)
    if not info["environment"]:
        table.add_row("NCCL_*/CUDA_*", "none set")
    console().print(table)
    return 0
