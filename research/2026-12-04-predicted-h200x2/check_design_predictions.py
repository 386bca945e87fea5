"""design_predictions.py: the committed predictions cover the designed validation, and a measurement is paired with
them by case whatever name the records give a config. Run from the repository root:
`python -m pytest -q research/2026-12-04-predicted-h200x2/check_design_predictions.py`."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import design_predictions as dp  # noqa: E402

from topowise.calibrate.design import validation_cases  # noqa: E402

COMMITTED = HERE / "predictions-default.jsonl"


def committed() -> list[dict]:
    return [json.loads(line) for line in COMMITTED.read_text().splitlines()]


def test_the_committed_predictions_are_one_per_designed_case():
    keys = [dp.case_key(r) for r in committed()]
    cases = validation_cases(compile=True)
    assert len(keys) == len(set(keys)) == len(cases) == 41
    assert set(keys) == {dp.case_key(asdict(c)) for c in cases}


def test_a_config_path_and_its_name_are_one_case():
    row = committed()[0]  # llama-0.95b ddp, a config written into the records folder
    as_recorded = dict(row, model="/root/out/suite/validate-design-1-records/configs/llama-0.95b/config.json")
    assert dp.case_key(as_recorded) == dp.case_key(row)
    assert dp.model_name("llama3.2-3b") == "llama3.2-3b"


def record(row: dict, step_s: float, alloc: float) -> dict:
    """A validate --out line for `row`'s case, its model named by the config's path."""
    model = f"/x/configs/{row['model']}/config.json" if row["model"].startswith("llama-") else row["model"]
    fields = {f: row[f] for f in dp.CASE_FIELDS if f in row}
    return {"kind": "validation", **fields, "model": model, "status": "ok",
            "measured": {"step_time_s": step_s, "peak_memory_bytes": alloc}}


def test_the_comparison_reads_errors_ranges_and_ranking(tmp_path, capsys):
    rows = committed()
    gpu = next(r for r in rows if r["model"] == "llama-0.95b" and r["strategy"] == "zero2"
               and r["fabric"] == "nvlink" and not r["compile"] and not r["activation_checkpointing"])
    ddp = next(r for r in rows if dp.case_key(r) == dp.case_key(dict(gpu, strategy="ddp")))
    host = next(r for r in rows if r["predicted"]["host_bound"])
    p = gpu["predicted"]
    lines = [record(gpu, p["step_time_s"] / 1.10, p["allocated_bytes"] / 0.96),  # predicted 10% slow, memory -4%
             record(ddp, p["step_time_s"] / 1.10 * 0.98, ddp["predicted"]["allocated_bytes"]),  # ddp measured 2% faster
             record(host, host["predicted"]["step_range_s"][1] * 1.5, host["predicted"]["allocated_bytes"])]
    path = tmp_path / "validate.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    dp.compare(rows, dp.measured_steps([str(path)]))
    out = capsys.readouterr().out
    assert "# 3 of 41 predicted cases measured" in out
    assert "+10.0%" in out and "-4.0%" in out
    assert f"outside their range: ['{host['label']}']" in out
    assert "least -4.0% (not under -3%)" in out
    # the 0.95B NVLink group: zero2 ranked first, measured 2% slower than ddp, inside the 3% tolerance
    assert "at most 2.0% (within 3%: 1 of 1)" in out


def test_a_bench_train_record_pairs_as_validate_reads_it(tmp_path):
    # bench train writes checkpointing as a mode and a flag, and a config's name: the same case as validate's line
    row = next(r for r in committed() if r["activation_checkpointing"] == "selective" and r["model"] == "llama-0.95b")
    train = {"kind": "train", "status": "ok", "model": "llama-0.95b", "model_source": "/x/llama-0.95b/config.json",
             "strategy": row["strategy"], "micro_batch": row["micro_batch"], "seq_len": row["seq_len"],
             "fabric": row["fabric"], "world_size": 2, "activation_checkpointing": True, "checkpointing": "selective",
             "selective_ac_option": "op", "step_time_s": 0.2, "peak_memory_bytes": 10 * 2**30}
    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps(train) + "\n")
    assert dp.measured_steps([str(path)]) == {dp.case_key(row): {"step_time_s": 0.2, "allocated_bytes": 10 * 2**30}}
