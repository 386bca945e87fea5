"""The record classes: every committed record reads back through its class unchanged, a newer version is
refused in one line, a newer minor's fields are kept, the committed JSON Schemas are the classes', and the
replays (validate --measured, calibrate --records, monitor summarize) read through them."""

import json
from pathlib import Path

import pytest

from topowise.cli.main import main
from topowise.errors import UsageError
from topowise.measure.records import (
    RECORD_CLASSES,
    RECORD_SCHEMA_VERSION,
    CollectiveRecord,
    TrainRecord,
    append_record,
    load_records,
    record_from_dict,
    record_schema,
    schema_documents,
    typed_records,
)

ROOT = Path(__file__).parents[2]
DATA = ROOT / "tests" / "data"


def committed_records() -> list[tuple[Path, dict]]:
    """Every JSONL line under tests/data of a kind topowise writes (research scripts' own lines, without a
    kind, are theirs)."""
    out = []
    for path in sorted(DATA.rglob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                rec = json.loads(line)
                if rec.get("kind") in RECORD_CLASSES:
                    out.append((path, rec))
    return out


def test_every_committed_record_round_trips_through_its_class():
    records = committed_records()
    kinds = {rec["kind"] for _, rec in records}
    assert {"train", "collective", "validation"} <= kinds and len(records) > 600  # 671 on 2026-12-05
    for path, rec in records:
        typed = record_from_dict(rec)
        assert type(typed) is RECORD_CLASSES[rec["kind"]]
        back = typed.to_dict()
        assert back == rec and list(back) == list(rec), path  # the same keys, in the same order
        # every field a committed record uses is a declared one: the schema documents it
        assert typed.extra == {}, (path, sorted(typed.extra))


def test_a_record_built_here_carries_its_kind_and_version_first():
    rec = CollectiveRecord(op="all_reduce", bytes=1 << 20, world_size=2, time_s=1e-4, busbw_gbps=10.5)
    data = rec.to_dict()
    assert list(data)[:2] == ["kind", "schema_version"]
    assert data["kind"] == "collective" and data["schema_version"] == RECORD_SCHEMA_VERSION
    assert data["bytes"] == 1 << 20 and data["fabric"] is None
    assert CollectiveRecord.from_dict(json.loads(json.dumps(data))) == rec


def train_line(**changes) -> dict:
    return dict({"kind": "train", "strategy": "ddp", "model": "tiny", "world_size": 2, "status": "ok",
                 "step_time_s": 0.5, "micro_batch": 1, "seq_len": 64}, **changes)


@pytest.mark.parametrize("version, words", [
    ("2.0", "newer than this topowise reads (1.x): upgrade topowise"),
    ("0.3", "older than this topowise reads"),
    ("one", "'one' is not one topowise knows"),
    (2, "2 is not one topowise knows"),
])
def test_a_version_this_code_does_not_read_is_refused_in_one_line(version, words):
    with pytest.raises(UsageError) as caught:
        TrainRecord.from_dict(train_line(schema_version=version))
    assert words in str(caught.value) and "\n" not in str(caught.value)


def test_a_newer_minor_version_reads_and_keeps_its_new_fields():
    line = train_line(schema_version="1.7", interconnect_temperature_c=71.5)
    rec = TrainRecord.from_dict(line)
    assert rec.schema_version == "1.7" and rec.extra == {"interconnect_temperature_c": 71.5}
    assert rec.step_time_s == 0.5
    assert rec.to_dict() == line  # written back with the field it did not know


def test_a_missing_field_or_a_wrong_type_is_refused_naming_it():
    line = train_line()
    del line["strategy"]
    with pytest.raises(UsageError, match="lacks strategy"):
        TrainRecord.from_dict(line)
    with pytest.raises(UsageError, match="step_time_s is str"):
        TrainRecord.from_dict(train_line(step_time_s="fast"))
    with pytest.raises(UsageError, match="world_size is bool"):
        TrainRecord.from_dict(train_line(world_size=True))
    with pytest.raises(UsageError, match="not one topowise writes"):
        record_from_dict({"kind": "mystery"})


def test_make_record_fields_are_declared(tmp_path):
    """A record bench train writes today reads back with nothing left over in `extra`."""
    from topowise.measure.train import make_record, make_request

    case = make_request(model="llama3.2-1b", strategies="hsdp", device="cpu", nproc=2, steps=2, warmup=1).cases[0]
    result = {"status": "ok", "step_time_s": 0.2, "step_times_s": [0.2], "losses": [1.0], "note": "n",
              "gpu_uuids": ["a"], "timed_window_unix_s": [1.0, 2.0], "error": None, "failed_rank": 1,
              "exit_signal": 9, "refused_before_launch": False}
    record = json.loads(json.dumps(make_record(case, result)))
    typed = TrainRecord.from_dict(record)
    assert typed.extra == {} and typed.strategy == "hsdp" and typed.to_dict() == record


def test_the_committed_schemas_are_the_classes():
    """docs/schema/ is what `python -m topowise.measure.records --schema docs/schema` writes."""
    folder = ROOT / "docs" / "schema"
    committed = {p.name: p.read_text(encoding="utf-8") for p in folder.glob("*.json")}
    assert committed == schema_documents()


def test_the_schema_names_each_field_and_its_json_type():
    schema = record_schema(TrainRecord)
    assert schema["properties"]["kind"] == {"const": "train"}
    assert {"kind", "strategy", "model", "world_size", "status"} == set(schema["required"])
    assert schema["properties"]["step_time_s"]["type"] == ["number", "null"]
    assert schema["properties"]["losses"]["type"] == ["array", "null"]
    # every key of every committed train record is described
    for _, rec in committed_records():
        if rec["kind"] == "train":
            assert set(rec) - {"schema_version"} <= set(schema["properties"])


def test_the_readers_check_versions_and_pass_other_kinds(tmp_path):
    path = tmp_path / "mixed.jsonl"
    append_record(path, {"kind": "p2p", "src": 0, "dst": 1})  # bench comm's copies: not a typed kind
    append_record(path, train_line())
    assert [r["kind"] for r in load_records(path)] == ["p2p", "train"]
    assert [type(r) for r in typed_records(path)] == [TrainRecord]
    append_record(path, train_line(schema_version="3.1"))
    with pytest.raises(UsageError, match=f"^{path}: a 'train' record has schema_version 3.1, newer"):
        load_records(path, kind="train")


def test_validate_measured_refuses_a_newer_record(tmp_path, capsys):
    measured = tmp_path / "train.jsonl"
    append_record(measured, train_line(schema_version="2.0"))
    profile = DATA / "records" / "2026-11-30-h200x2" / "run10" / "profile.json"
    code = main(["validate", "--measured", str(measured), "--topology", "hgx-h200-8", "--profile", str(profile),
                 "--out", str(tmp_path / "v.jsonl"), "--no-plot"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert err[0].startswith("topowise: error: ") and "schema_version 2.0, newer than this topowise reads" in err[0]


def test_calibrate_records_folder_refuses_a_newer_record(tmp_path):
    from topowise.calibrate.launch import META_FILE, RECORD_FILES, read_records_dir

    (tmp_path / META_FILE).write_text("{}")
    append_record(tmp_path / RECORD_FILES["collective"], {
        "kind": "collective", "schema_version": "9.0", "op": "all_reduce", "bytes": 8, "world_size": 2,
        "time_s": 1e-5})
    with pytest.raises(UsageError, match="schema_version 9.0, newer"):
        read_records_dir(tmp_path)


def test_monitor_summarize_refuses_a_newer_record(tmp_path):
    from topowise.monitor.summary import read_run

    lines = [{"kind": "start", "rank": 0, "world_size": 1},
             {"kind": "step", "schema_version": "2.0", "step": 0, "rank": 0, "step_time_s": 0.1}]
    (tmp_path / "monitor.rank0.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    with pytest.raises(UsageError, match="line 2: a 'step' record has schema_version 2.0"):
        read_run(str(tmp_path))
    lines[1]["schema_version"] = "1.0"
    (tmp_path / "monitor.rank0.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert [r["kind"] for r in read_run(str(tmp_path))[0]] == ["start", "step"]


def test_records_written_today_carry_their_version(tmp_path):
    path = tmp_path / "r.jsonl"
    append_record(path, train_line())
    append_record(path, CollectiveRecord(op="broadcast", bytes=8, world_size=2, time_s=1e-6))
    append_record(path, {"kind": "p2p", "src": 0})  # not a typed kind: as given
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [list(r)[:2] for r in lines] == [["kind", "schema_version"]] * 2 + [["kind", "src"]]
    assert [r.schema_version for r in typed_records(path)] == [RECORD_SCHEMA_VERSION] * 2
