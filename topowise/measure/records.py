"""Result files: JSON Lines, one record appended and flushed at a time, so an interrupted run loses nothing.

`bench comm` and `bench train` both write through here; `--resume` asks `done_keys` what is already there.
"""

from __future__ import annotations

import json
import os
import types
import typing
from collections.abc import Callable, Hashable
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from topowise.errors import UsageError


def append_record(path: str | os.PathLike, record: dict | Record) -> None:
    """Append one record as one line, flushed and fsynced before returning. A record of a kind topowise reads
    back (RECORD_CLASSES) is written with its schema_version, after its kind; it is not checked here: a
    measurement is never lost to a check."""
    record = record.to_dict() if isinstance(record, Record) else versioned(record)
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


# ------------------------------------------------------------------------------------------------
# The records as typed classes: what bench train, bench comm, calibrate, validate and StepMonitor write,
# read back through one class per kind so that a record written today is read by tomorrow's code or
# refused with the version it needs. docs/schema/*.json is generated from them (`--schema`, below).

# MAJOR.MINOR. A minor version adds fields: a reader of the same major keeps the ones it does not know in
# `extra`. A major version renames or removes a field or changes its meaning: an older reader refuses it.
RECORD_SCHEMA_VERSION = "1.0"
# a record written before records carried a version is the first one
_UNVERSIONED = "1.0"


@dataclass(frozen=True, kw_only=True)
class Record:
    """What every record has besides its own fields: its kind (a class constant), its schema version, the
    fields a newer minor version added (kept, and written back), and the keys it was read with."""

    KIND: ClassVar[str] = ""
    SCHEMA_NAME: ClassVar[str] = ""  # docs/schema/<name>.json; the kind where empty
    schema_version: str = RECORD_SCHEMA_VERSION
    extra: dict[str, Any] = field(default_factory=dict)
    # the keys as read, in their order: an older record lacks fields added since, and a replay must see the
    # record it read (r.get(k, default) tells a missing key from a null); empty for a record built here
    keys: tuple[str, ...] = field(default=(), compare=False, repr=False)

    @classmethod
    def from_dict(cls: type[_R], data: dict) -> _R:
        """The record in `data` (one JSONL line); UsageError on another kind, a version this code does not
        read, a missing field or a field of the wrong JSON type."""
        if data.get("kind") != cls.KIND:
            raise UsageError(f"a {data.get('kind')!r} record is not a {cls.KIND!r} record")
        version = _readable_version(data.get("schema_version", _UNVERSIONED), cls.KIND)
        hints = _field_types(cls)
        known = {k: v for k, v in data.items() if k in hints and k not in _BASE_FIELDS}
        missing = [k for k in _required(cls) if k not in known]
        if missing:
            raise UsageError(f"a {cls.KIND!r} record lacks {', '.join(missing)}")
        for name, value in known.items():
            if not _json_type_ok(value, hints[name]):
                raise UsageError(f"a {cls.KIND!r} record's {name} is {type(value).__name__} {value!r:.40}, "
                                 f"not {_type_words(hints[name])}")
        extra = {k: v for k, v in data.items() if k != "kind" and (k not in hints or k in ("extra", "keys"))}
        return cls(**{_FIELD_OF.get(k, k): v for k, v in known.items()}, schema_version=version, extra=extra,
                   keys=tuple(data))

    def to_dict(self) -> dict:
        """The JSON object: the keys it was read with, in their order; a record built here: kind and
        schema_version first, then every field."""
        values = {"kind": self.KIND, "schema_version": self.schema_version,
                  **{_KEY_OF.get(f.name, f.name): getattr(self, f.name) for f in fields(self)
                     if f.name not in _BASE_FIELDS},
                  **self.extra}
        if not self.keys:
            return values
        return {k: values[k] for k in self.keys}


_BASE_FIELDS = ("schema_version", "extra", "keys")
_R = TypeVar("_R", bound=Record)


@dataclass(frozen=True, kw_only=True)
class TrainRecord(Record):
    """One training run of bench train (or of calibrate and validate, which run bench train's cases):
    measured step time and memory beside the cost model's prediction (measure/train.py make_record;
    docs/bench-train.md)."""

    KIND: ClassVar[str] = "train"
    strategy: str
    model: str
    world_size: int
    status: str  # ok, oom, error, timeout
    engine: str | None = None  # pytorch or deepspeed
    step_time_s: float | None = None
    tokens_per_s_per_gpu: float | None = None
    mfu: float | None = None
    peak_memory_bytes: float | None = None  # bytes: a number, as a replay may compute it
    steady_peak_memory_bytes: float | None = None  # bytes: a number, as a replay may compute it
    step_peak_memory_bytes: list[float] | None = None
    losses: list[float] | None = None
    predicted: dict[str, Any] | None = None
    mfu_measured_peak: float | None = None
    peak_flops_datasheet: float | None = None
    peak_flops_measured: float | None = None
    flops_per_token: float | None = None
    reserved_bytes: float | None = None  # bytes: a number, as a replay may compute it
    step_times_s: list[float] | None = None
    params: int | None = None
    model_source: str | None = None
    model_spec: dict[str, Any] | None = None
    micro_batch: int | None = None
    seq_len: int | None = None
    tokens_per_step_per_gpu: int | None = None
    steps: int | None = None
    warmup: int | None = None
    fabric: str | None = None
    device: str | None = None
    activation_checkpointing: bool | None = None
    checkpointing: str | None = None
    selective_ac_option: str | None = None
    compile: bool | None = None
    gpu_name: str | None = None
    torch_version: str | None = None
    nccl_version: str | None = None
    timestamp: str | None = None
    # a mesh run: the degrees asked for, and the rank with the largest peak
    tp: int | None = None
    pp: int | None = None
    cp: int | None = None
    dp: int | None = None
    grad_accum: int | None = None
    peak_memory_rank: int | None = None
    # hsdp
    shard_group_size: int | None = None
    replicas: int | None = None
    # written where the run had them
    error: str | None = None
    oom_requested_bytes: float | None = None  # bytes: a number, as a replay may compute it
    refused_before_launch: bool | None = None  # oom without a launch: the prediction did not fit
    failed_rank: int | None = None  # the rank that failed, and on a mesh its coordinates and stages
    failed_mesh: dict[str, Any] | None = None
    failed_stages: list[int] | None = None
    exit_signal: int | None = None  # the signal that ended the failed rank
    log_tail: str | None = None
    note: str | None = None
    launch_note: str | None = None
    deepspeed_version: str | None = None
    deepspeed_config: dict[str, Any] | None = None
    nodes: int | None = None
    ranks_per_node: dict[str, Any] | None = None
    scope: str | None = None
    host_phase_s: dict[str, Any] | None = None
    warmup_step_times_s: list[float] | None = None
    host_index: dict[str, Any] | None = None
    host_index_cpu: dict[str, Any] | None = None
    gpu_clocks: list[Any] | None = None
    gpu_uuids: list[str] | None = None
    timed_window_unix_s: list[float] | None = None
    trace_dir: str | None = None
    mesh: dict[str, Any] | None = None
    pp_schedule: str | None = None
    layer_split: list[Any] | None = None
    sequence_parallel: bool | None = None
    ranks: list[Any] | None = None
    process_groups: dict[str, Any] | None = None
    # bench train --trace on a mesh: per rank, the exposed communication of each dimension; the pipeline bubble
    exposed_comm_by_dim_s: dict[str, Any] | None = None
    pipeline_bubble: dict[str, Any] | None = None


@dataclass(frozen=True, kw_only=True)
class CollectiveRecord(Record):
    """One collective at one size (bench comm, calibrate): time and bandwidth in the nccl-tests convention
    (measure/collectives.py collective_record; docs/bench-comm.md)."""

    KIND: ClassVar[str] = "collective"
    op: str
    bytes: int
    world_size: int
    time_s: float
    count: int | None = None
    dtype: str | None = None
    algbw_gbps: float | None = None
    busbw_gbps: float | None = None
    wrong: int | None = None  # elements that differ from the expected result
    backend: str | None = None
    fabric: str | None = None
    transport: str | None = None
    nccl_version: str | None = None
    expected_busbw_gbps: float | None = None
    expected_pct: float | None = None
    flagged: bool | None = None
    iters: int | None = None
    warmup: int | None = None
    graph: bool | None = None
    host: str | None = None
    timestamp: str | None = None
    algo: str | None = None
    nodes: int | None = None
    ranks_per_node: dict[str, Any] | None = None
    scope: str | None = None


@dataclass(frozen=True, kw_only=True)
class MatmulRecord(Record):
    """calibrate: the bf16 n^3 matrix product rate of this GPU (calibrate/rank.py)."""

    KIND: ClassVar[str] = "matmul"
    flops_per_s: float
    n: int | None = None
    device: str | None = None
    dtype: str | None = None
    fabric: str | None = None
    world_size: int | None = None


@dataclass(frozen=True, kw_only=True)
class HbmPassRecord(Record):
    """calibrate: one memory-bound pass timed alone, fused AdamW or the cross-entropy (measure/passes.py)."""

    KIND: ClassVar[str] = "hbm_pass"
    bytes_per_s: float
    bytes: float | None = None
    seconds: float | None = None
    model: str | None = None
    params: int | None = None
    tensors: int | None = None
    vocab: int | None = None
    tokens: int | None = None
    # "pass" is a Python keyword: the field is pass_ and the key "pass" (_KEY_OF)
    pass_: str | None = None


@dataclass(frozen=True, kw_only=True)
class EncryptionRecord(Record):
    """calibrate: one cipher's rate on one CPU core (calibrate/crypto.py)."""

    KIND: ClassVar[str] = "encryption"
    cipher: str
    gbps: float
    algorithm: str | None = None
    buffer_bytes: int | None = None
    threads: int | None = None
    calls: int | None = None
    bursts: int | None = None
    gbps_min: float | None = None
    gbps_max: float | None = None
    cpu: str | None = None
    openssl: str | None = None
    cryptography: str | None = None


@dataclass(frozen=True, kw_only=True)
class ValidationRecord(Record):
    """validate --out: one case predicted and measured, with the errors (calibrate/validate.py
    ValidationRow.to_record; docs/calibration.md)."""

    KIND: ClassVar[str] = "validation"
    model: str
    strategy: str
    micro_batch: int
    seq_len: int
    status: str
    measured: dict[str, Any]
    predicted: dict[str, Any]
    fabric: str | None = None
    activation_checkpointing: bool | str | None = None
    compile: bool | None = None
    selective_ac_option: str | None = None
    engine: str | None = None
    world_size: int | None = None
    step_time_error: float | None = None
    peak_memory_error: float | None = None
    profile_fingerprint: str | None = None


@dataclass(frozen=True, kw_only=True)
class MonitorStart(Record):
    """StepMonitor's first line in RUN_DIR/monitor.rank<R>.jsonl: the run and the monitor's settings
    (monitor/step.py; docs/monitor.md)."""

    KIND: ClassVar[str] = "start"
    SCHEMA_NAME: ClassVar[str] = "monitor_start"
    rank: int
    world_size: int
    collective: str | None = None
    device: str | None = None
    predicted_step_s: float | None = None
    factor: float | None = None
    window: int | None = None
    warmup: int | None = None
    gather_every: int | None = None
    ready_hook: bool | None = None
    time: float | None = None


@dataclass(frozen=True, kw_only=True)
class MonitorStep(Record):
    """StepMonitor: one step of one rank, with every rank's step time and wait (the cross-rank view)."""

    KIND: ClassVar[str] = "step"
    SCHEMA_NAME: ClassVar[str] = "monitor_step"
    step: int
    rank: int
    world_size: int | None = None
    time: float | None = None
    step_time_s: float | None = None
    ready_to_end_s: float | None = None
    wait_s: float | None = None
    slowest_rank: int | None = None
    slow_by_s: float | None = None
    late_at: str | None = None
    collective: str | None = None
    phases: dict[str, Any] | None = None
    predicted_step_s: float | None = None
    judged: bool | None = None
    step_times_s: list[float] | None = None
    waits_s: list[float] | None = None
    sm_mhz: list[float] | None = None
    clock_reasons: list[int] | None = None
    step_median_s: float | None = None
    wait_median_s: float | None = None
    spike: dict[str, Any] | None = None


RECORD_CLASSES: dict[str, type[Record]] = {c.KIND: c for c in (
    TrainRecord, CollectiveRecord, MatmulRecord, HbmPassRecord, EncryptionRecord, ValidationRecord, MonitorStart,
    MonitorStep)}


def versioned(record: dict) -> dict:
    """The record with schema_version after its kind, where it is of a typed kind and has none yet."""
    if record.get("kind") not in RECORD_CLASSES or "schema_version" in record:
        return record
    kind, rest = record["kind"], {k: v for k, v in record.items() if k != "kind"}
    return {"kind": kind, "schema_version": RECORD_SCHEMA_VERSION, **rest}


def record_from_dict(data: dict) -> Record:
    """The typed record of a JSONL line, by its kind; UsageError on a kind topowise does not write."""
    cls = RECORD_CLASSES.get(data.get("kind"))  # type: ignore[arg-type]
    if cls is None:
        raise UsageError(f"a record of kind {data.get('kind')!r} is not one topowise writes "
                         f"({', '.join(RECORD_CLASSES)})")
    return cls.from_dict(data)


def typed_records(path: str | os.PathLike, *, kind: str | None = None) -> list[Record]:
    """Every complete record of a topowise kind in the file, read through its class (lines of other kinds,
    e.g. p2p copies, are left out); UsageError, naming the file, on a record this code cannot read."""
    out = []
    for rec in read_records(path, kind=kind):
        if rec.get("kind") in RECORD_CLASSES:
            try:
                out.append(record_from_dict(rec))
            except UsageError as exc:
                raise UsageError(f"{path}: {exc}") from None
    return out


def load_records(path: str | os.PathLike, *, kind: str | None = None) -> list[dict]:
    """read_records, each record of a topowise kind read through its class first (its version and field
    types checked) and handed on as the dict it was: what the replays (validate --measured, calibrate
    --records) read. Lines of other kinds pass unchanged."""
    out = []
    for rec in read_records(path, kind=kind):
        try:
            out.append(checked_record(rec))
        except UsageError as exc:
            raise UsageError(f"{path}: {exc}") from None
    return out


def checked_record(data: dict) -> dict:
    """A record of a topowise kind read through its class and handed back as the same dict (UsageError on
    a version or a field this code cannot read); a dict of another kind unchanged."""
    return record_from_dict(data).to_dict() if data.get("kind") in RECORD_CLASSES else data


def _readable_version(version: Any, kind: str) -> str:
    """The version if this code reads it: the same major as RECORD_SCHEMA_VERSION, any minor."""
    major = RECORD_SCHEMA_VERSION.split(".")[0]
    parts = version.split(".") if isinstance(version, str) else []
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        raise UsageError(f"a {kind!r} record's schema_version {version!r} is not one topowise knows "
                         f"(MAJOR.MINOR; this topowise reads {major}.x)")
    if int(parts[0]) > int(major):
        raise UsageError(f"a {kind!r} record has schema_version {version}, newer than this topowise reads "
                         f"({major}.x): upgrade topowise to read it")
    if int(parts[0]) < int(major):
        raise UsageError(f"a {kind!r} record has schema_version {version}, older than this topowise reads "
                         f"({major}.x): read it with the topowise that wrote it")
    return version


def _field_types(cls: type) -> dict[str, Any]:
    """field name (as in the JSON: "pass" for pass_) -> its type."""
    hints = typing.get_type_hints(cls)
    return {_KEY_OF.get(f.name, f.name): hints[f.name] for f in fields(cls)}


_KEY_OF = {"pass_": "pass"}
_FIELD_OF = {v: k for k, v in _KEY_OF.items()}


def _required(cls: type) -> list[str]:
    return [_KEY_OF.get(f.name, f.name) for f in fields(cls)
            if f.default is MISSING and f.default_factory is MISSING]


def _json_type_ok(value: Any, hint: Any) -> bool:
    """Whether a JSON value has the field's type (an int is a float; a bool is not a number)."""
    options = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    for option in options:
        base = typing.get_origin(option) or option
        if option is type(None) and value is None:
            return True
        if base is Any:
            return True
        if isinstance(value, bool):
            if base is bool:
                return True
            continue
        if base is float and isinstance(value, (int, float)) or base is int and isinstance(value, int):
            return True
        if base in (str, list, dict) and isinstance(value, base):
            return True
    return False


def _type_words(hint: Any) -> str:
    return " or ".join(_JSON_TYPE[typing.get_origin(o) or o] for o in
                       (typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)))


_JSON_TYPE: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean", list: "array",
                              dict: "object", type(None): "null", Any: "any"}


# ------------------------------------------------------------------------------------------------
# JSON Schema (draft 2020-12) of each record class: docs/schema/<name>.json, written by
# `python -m topowise.measure.records --schema docs/schema`; a test checks the committed files against these.


def record_schema(cls: type[Record]) -> dict:
    """The JSON Schema of one record class: its fields and their JSON types, `kind` fixed, the version's
    major fixed, and any other key allowed (a newer minor version's fields)."""
    major = RECORD_SCHEMA_VERSION.split(".")[0]
    hints = _field_types(cls)
    properties: dict[str, Any] = {"kind": {"const": cls.KIND}, "schema_version": {
        "type": "string", "pattern": f"^{major}\\.[0-9]+$",
        "description": f"MAJOR.MINOR; absent: {_UNVERSIONED} (written before records carried a version)"}}
    for name, hint in hints.items():
        if name not in _BASE_FIELDS:
            properties[name] = _json_schema_type(hint)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": f"topowise {cls.KIND} record ({cls.__name__})",
            "description": " ".join((cls.__doc__ or "").split()),
            "type": "object", "properties": properties, "required": ["kind", *_required(cls)],
            "additionalProperties": True}


def schema_name(cls: type[Record]) -> str:
    return cls.SCHEMA_NAME or cls.KIND


def schema_documents() -> dict[str, str]:
    """file name -> the text of its JSON Schema, for every record class."""
    return {f"{schema_name(c)}.json": json.dumps(record_schema(c), indent=2) + "\n" for c in RECORD_CLASSES.values()}


def _json_schema_type(hint: Any) -> dict:
    options = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    names = []
    for option in options:
        name = _JSON_TYPE[typing.get_origin(option) or option]
        if name == "any":
            return {}
        names.append(name)
    return {"type": names[0] if len(names) == 1 else names}


def _write_schemas(folder: str) -> list[str]:
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    for name, text in schema_documents().items():
        (out / name).write_text(text, encoding="utf-8")
    return sorted(schema_documents())


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(prog="python -m topowise.measure.records",
                                     description="write the JSON Schema of every record topowise writes")
    parser.add_argument("--schema", metavar="DIR", required=True, help="the folder to write (docs/schema)")
    args = parser.parse_args()
    print("\n".join(f"{args.schema}/{name}" for name in _write_schemas(args.schema)))
