from topowise.measure.records import append_record, done_keys, read_records


def test_append_read_and_done_keys(tmp_path):
    path = tmp_path / "sub" / "r.jsonl"
    append_record(path, {"kind": "collective", "op": "all_reduce", "bytes": 1})
    append_record(path, {"kind": "train", "strategy": "ddp"})
    assert [r["kind"] for r in read_records(path)] == ["collective", "train"]
    # a kind topowise reads back is written with its schema_version, after its kind
    assert read_records(path, kind="train") == [{"kind": "train", "schema_version": "1.0", "strategy": "ddp"}]
    keys = done_keys(path, lambda r: (r["op"], r["bytes"]) if r["kind"] == "collective" else None)
    assert keys == {("all_reduce", 1)}


def test_missing_file_is_empty(tmp_path):
    assert read_records(tmp_path / "none.jsonl") == []
    assert done_keys(tmp_path / "none.jsonl", lambda r: r["op"]) == set()


def test_a_truncated_last_line_is_skipped_and_the_next_append_starts_clean(tmp_path):
    path = tmp_path / "r.jsonl"
    append_record(path, {"op": "a"})
    with open(path, "a") as fh:
        fh.write('{"op": "b", "by')  # an interrupted writer
    assert read_records(path) == [{"op": "a"}]
    append_record(path, {"op": "c"})
    assert [r["op"] for r in read_records(path)] == ["a", "c"]


def test_key_fn_errors_do_not_count(tmp_path):
    path = tmp_path / "r.jsonl"
    append_record(path, {"op": "a"})
    append_record(path, {"other": 1})
    assert done_keys(path, lambda r: r["op"]) == {"a"}
