"""`topowise doctor`: check this machine before a launch (NVML, sysfs, environment); exit 1 on a failed check.

Under torchrun or srun (WORLD_SIZE > 1, one process per node is enough) every node runs its checks, rank 0
gathers them and the node pairs are measured in rounds (topowise/doctor/nodes.py); only rank 0 prints.
"""

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
    parser.add_argument("--rounds", metavar="N",
                        help="across nodes (under torchrun/srun): rounds of node pairs to measure (default 3)")
    parser.add_argument("--pair-bytes", metavar="SIZE",
                        help="across nodes: bytes each pair exchanges each way (default 64M on GPUs, 8M on CPU)")


def run(args: argparse.Namespace) -> int:
    from topowise.doctor import checks as doctor_checks
    from topowise.doctor import read, snapshot

    rounds = _positive(args.rounds or "3", "--rounds")
    pair_bytes = _size(args.pair_bytes) if args.pair_bytes else None
    if _job_world() <= 1 and (args.rounds or args.pair_bytes):
        raise UsageError(f"{'--rounds' if args.rounds else '--pair-bytes'} measures node pairs across a job's "
                         "nodes: run under torchrun or srun with more than one process, or drop it")
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
    if _job_world() > 1:
        return _run_across_nodes(args, snap, found, rounds, pair_bytes)
    status = doctor_checks.worst(found)
    if args.json:
        print(json.dumps({"host": snap.host, "taken_at": snap.taken_at, "status": status,
                          "checks": [c.to_dict() for c in found]}, indent=2))
    else:
        _render(snap, found, status)
    return 1 if status == doctor_checks.FAIL else 0


def _positive(text: str, flag: str) -> int:
    if not (str(text).isascii() and str(text).isdecimal()) or int(text) < 1:  # isdigit() takes "²", int() not
        raise UsageError(f"{flag} {text!r}: give a positive whole number")
    return int(text)


def _size(text: str) -> int:
    from topowise.measure.comm import parse_size

    size = parse_size(text, "--pair-bytes")
    if size < 4:
        raise UsageError(f"--pair-bytes {text}: give at least 4 bytes (one float)")
    return size


def _job_world() -> int:
    """The job's size where this process is one rank of a torchrun/srun job, else 1."""
    from topowise.measure.launcher import in_job

    if not in_job():
        return 1
    import os

    return int(os.environ.get("WORLD_SIZE") or os.environ.get("SLURM_NTASKS") or 1)


def _run_across_nodes(args, snap, found, rounds: int, pair_bytes: int | None) -> int:
    from topowise.doctor import nodes
    from topowise.measure.launcher import require_torch

    require_torch("doctor across nodes (under torchrun/srun)", "run `topowise doctor` on each node alone")
    done = nodes.run_across_nodes(found, rounds=rounds, nbytes=pair_bytes)
    if done is None:
        return 0  # rank 0 speaks for the job
    reports, pairs = done
    data = nodes.report_dict(reports, pairs)
    if args.json:
        print(json.dumps({"taken_at": snap.taken_at, **data}, indent=2))
    else:
        _render_nodes(snap, reports, pairs, data["status"])
    return 1 if data["status"] == "fail" else 0


def _render_nodes(snap, reports, pairs, status: str) -> None:
    from rich.table import Table
    from rich.text import Text

    out, flush = _console()
    out.print(Text(f"topowise doctor: {len(reports)} node(s), {snap.taken_at}"))
    table = Table(box=None, pad_edge=False, show_edge=False)
    table.add_column("node", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("what", ratio=3, overflow="fold")
    table.add_column("fix", ratio=2, overflow="fold")
    for r in reports:
        bad = [c for c in r.checks if c.status != "ok"]
        what = "; ".join(f"{c.name}: {c.evidence}" for c in bad) or f"all {len(r.checks)} checks ok"
        fix = "; ".join(c.fix for c in bad if c.fix)
        table.add_row(Text(r.name), Text(r.status, style=STATUS_STYLE[r.status]), Text(what), Text(fix))
    table.add_row(Text("node pairs"), Text(pairs.status, style=STATUS_STYLE[pairs.status]), Text(pairs.evidence),
                  Text(pairs.fix))
    out.print(table)
    out.print(f"{sum(r.status == 'fail' for r in reports)} of {len(reports)} node(s) fail a check"
              + (": exit status 1" if status == "fail" else ""))
    flush()


def _console():
    """A console at most TABLE_WIDTH wide, and the function that writes what it holds without trailing blanks."""
    import io
    import sys

    from rich.console import Console

    tty = sys.stdout.isatty()
    buffer = io.StringIO()
    out = Console(file=buffer, width=min(TABLE_WIDTH, Console().width) if tty else TABLE_WIDTH,
                  force_terminal=tty, no_color=not tty, highlight=False)

    def flush() -> None:
        # rich pads every cell to the column's width: no trailing blanks in a log or a pasted report
        sys.stdout.write("".join(line.rstrip() + "\n" for line in buffer.getvalue().splitlines()))

    return out, flush


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(text)
    except OSError as exc:
        raise UsageError(f"--save-snapshot {path}: cannot write ({exc.strerror})") from None


def _render(snap, found, status: str) -> None:
    from rich.table import Table
    from rich.text import Text

    out, flush = _console()
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
    flush()
