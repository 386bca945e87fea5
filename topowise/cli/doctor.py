"""`topowise doctor`: check this machine before a launch (NVML, sysfs, environment); exit 1 on a failed check."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from topowise.errors import UsageError

TABLE_WIDTH = 80  # the table wraps its prose columns to fit a terminal or a log line of 80 columns
STATUS_STYLE = {"ok": "green", "warn": "yellow", "fail": "bold red"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--snapshot", metavar="FILE", help="run the checks on a saved snapshot instead of this machine")
    source.add_argument("--save-snapshot", metavar="FILE",
                        help="also write everything read (NVML fields, sysfs values, environment) to FILE")
    parser.add_argument("--measure", action="store_true",
                        help="also measure the GPU-pair copy matrix and an all-reduce over this node's GPUs against "
                             "what the cost model expects (seconds; skipped without a GPU)")
    parser.add_argument("--json", action="store_true", help="print JSON: status, checks[{name, status, ...}]")


def run(args: argparse.Namespace) -> int:
    from topowise.doctor import checks as doctor_checks
    from topowise.doctor import read, snapshot

    if args.snapshot and args.measure:
        raise UsageError("--measure measures this machine; a --snapshot holds no measurement: drop one of them")
    if args.snapshot:
        snap = snapshot.load(args.snapshot)
    else:
        snap = read.read()
        if args.save_snapshot:
            _write(Path(args.save_snapshot), snap.to_json() + "\n")
    found = doctor_checks.run_checks(snap)
    if args.measure:
        from topowise.doctor.measure import measure_node

        found += measure_node(snap)
    status = doctor_checks.worst(found)
    if args.json:
        print(json.dumps({"host": snap.host, "taken_at": snap.taken_at, "status": status,
                          "checks": [c.to_dict() for c in found]}, indent=2))
    else:
        _render(snap, found, status)
    return 1 if status == doctor_checks.FAIL else 0


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(text)
    except OSError as exc:
        raise UsageError(f"--save-snapshot {path}: cannot write ({exc.strerror})") from None


def _render(snap, found, status: str) -> None:
    import io
    import sys

    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    tty = sys.stdout.isatty()
    buffer = io.StringIO()
    out = Console(file=buffer, width=min(TABLE_WIDTH, Console().width) if tty else TABLE_WIDTH,
                  force_terminal=tty, no_color=not tty, highlight=False)
    out.print(Text(f"topowise doctor: {snap.host}, {snap.taken_at}"))
    table = Table(box=None, pad_edge=False, show_edge=False)
    table.add_column("check", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("evidence", ratio=3, overflow="fold")
    table.add_column("fix", ratio=2, overflow="fold")
    for c in found:
        # Text, not markup: an environment value or a device name may hold "[...]"
        table.add_row(Text(c.name), Text(c.status, style=STATUS_STYLE[c.status]), Text(c.evidence), Text(c.fix))
    out.print(table)
    counts = {s: sum(c.status == s for c in found) for s in STATUS_STYLE}
    out.print(f"{counts['fail']} fail, {counts['warn']} warn, {counts['ok']} ok"
              + (": exit status 1" if status == "fail" else ""))
    # rich pads every cell to the column's width: no trailing blanks in a log or a pasted report
    sys.stdout.write("".join(line.rstrip() + "\n" for line in buffer.getvalue().splitlines()))
