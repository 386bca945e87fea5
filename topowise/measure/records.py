"""Result files: JSON Lines, one record appended and flushed at a time, so an interrupted run loses nothing.

`bench comm` and `bench train` both write through here; `--resume` asks `done_keys` what is already there.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Hashable
from pathlib import Path


def append_record(path: str | os.PathLike, record: dict) -> None:
    """Append one record as one line, flushed and fsynced before returning."""
    path = Path(path)
    if path.parent and not path.parent.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(record, sort_keys=False, allow_nan=False, default=_plain)
    with open(path, "a", encoding="utf-8") as fh:
        if fh.tell() > 0 and not _ends_with_newline(path):
            fh.write("\n")  # a previous run died mid-line: start clean rather than glue onto it
        fh.write(line + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def read_records(path: str | os.PathLike, *, kind: str | None = None) -> list[dict]:
    """Every complete record in the file (a missing file is an empty list). A truncated or
    garbled line, which an interrupted writer can leave, is skipped; `kind` filters on record["kind"]."""
    path = Path(path)
    if not path.is_file():
        return []
    out = []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(rec, dict) and (kind is None or rec.get("kind") == kind):
                out.append(rec)
    return out


def done_keys(path: str | os.PathLike, key_fn: Callable[[dict], Hashable | None]) -> set:
    """The keys of the records already in `path`; key_fn returns None for records that do not count."""
    keys = set()
    for rec in read_records(path):
        try:
            key = key_fn(rec)
        except (KeyError, TypeError):
            continue
        if key is not None:
            keys.add(key)
    return keys


def steady_peak_bytes(record: dict) -> int | None:
    """The allocated peak of a steady step: the last timed step's. DDP rebuilds its gradient buckets after
    the first iteration and keeps the old ones for one to four steps, one more fp32 gradient copy (75 of
    the 99 ddp and zero1 runs on one H200; docs/calibration.md, "A designed calibration on one GPU");
    after two warm-up steps that can reach into the timed ones. The cost model counts that transient apart
    (MemoryBreakdown.first_steps_extra_bytes). Records without per-step peaks: their timed steps' peak,
    else the whole run's."""
    steps = record.get("step_peak_memory_bytes")
    if steps:
        return steps[-1]
    return record.get("steady_peak_memory_bytes") or record.get("peak_memory_bytes")


def relative_error(predicted: float | None, measured: float | None) -> float | None:
    """predicted / measured - 1, the error every record and table reports; None without both."""
    if predicted is None or not measured:
        return None
    return (predicted - measured) / measured


def fabric_label(fabric: str, device: str | None) -> str:
    """What joined the processes of a run, for people: the fabric (nvlink, pcie) on GPUs, "gloo" on a
    CPU, where there is no NVLink to use or take away. Records keep `fabric` as the switch it was."""
    return "gloo" if device == "cpu" else fabric


def _ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as fh:
        fh.seek(-1, os.SEEK_END)
        return fh.read(1) == b"\n"


def _plain(value):
    """JSON for the odd non-JSON value (a tuple is already fine; a Path or a numpy scalar is not)."""
    if hasattr(value, "item"):
        return value.item()
    return str(value)
