"""DeepSpeed's host term (its constants are the fit of deepspeed/run26: research/2026-12-02-h200x1/scripts/
check_deepspeed_host.py): with it the DeepSpeed steps that were 15-23% short come out within 5% where the GPU sets
the step."""

from __future__ import annotations

import statistics
from pathlib import Path

from topowise.calibrate.fit import observation_from, predictor
from topowise.calibrate.validate import compare
from topowise.costmodel.profile import default_profile
from topowise.measure.records import read_records
from topowise.topology import load_topology

ROOT = Path(__file__).parents[2]
RUN26 = ROOT / "tests/data/records/2026-12-02-h200x1/deepspeed/run26/deepspeed.jsonl"
RUN23 = ROOT / "tests/data/records/2026-12-02-h200x1/copies/run23/deepspeed.jsonl"  # another launch, no host times


def records(path: Path) -> list[dict]:
    return [r for r in read_records(path, kind="train") if r["status"] == "ok"]


def test_gpu_bound_zero1_and_zero2_steps_within_seven_percent_on_runs_not_fitted():
    # qwen2.5-0.5b 1 x 8192 and the 0.95B config 4 x 2048 (run26), llama3.2-1b 1 x 8192 in another launch
    # (run23); without the host term these were 15-23% short. -6.8..-0.8% (README) since the blocks' elementwise
    # work is counted kernel by kernel; -4.8..+1.6% with the saved-bytes term, which priced bf16 blocks long
    topo = load_topology("h200-x2")
    held_out = [r for r in records(RUN26) + records(RUN23)
                if r["tokens_per_step_per_gpu"] >= 2048 and r["strategy"] in ("zero1", "zero2")]
    assert len(held_out) == 6
    errors = [row.step_error for row in compare(held_out, default_profile(), topo)]
    assert all(-0.07 < e < 0 for e in errors) and statistics.mean(abs(e) for e in errors) < 0.051, errors


def test_a_deepspeed_record_replays_as_deepspeed_and_flags_its_host():
    predict_one = predictor(load_topology("h200-x2"))
    r = next(r for r in records(RUN26) if r["tokens_per_step_per_gpu"] == 128 and r["strategy"] == "zero3")
    o = observation_from(r)
    assert o.engine == "deepspeed" and o.case.label.endswith("deepspeed")
    p = predict_one(default_profile(), o)
    assert p.engine == "deepspeed" and p.time.host_wait_s > 0.5 * p.step_time_s  # the host sets this step
    low, high = p.time.step_range_s
    assert low < p.step_time_s < high
    pytorch = predict_one(default_profile(), observation_from(dict(r, engine="pytorch")))
    assert pytorch.step_time_s < 0.5 * p.step_time_s  # FSDP2's zero3 issues the same step in far less host time


def test_zero1_and_zero2_memory_holds_no_buckets_between_steps():
    # DeepSpeed 0.19.8 releases its reduce buckets and gradient partition at each backward's end and
    # flattens the partition's gradient at the step: the model that kept them was 9-14% over on one GPU
    rows = compare([r for r in records(RUN26) + records(RUN23) if r["strategy"] in ("zero1", "zero2")],
                   default_profile(), load_topology("h200-x2"))
    assert len(rows) == 14 and max(abs(r.memory_error) for r in rows) < 0.01, [r.memory_error for r in rows]


def test_the_plan_says_where_deepspeeds_host_makes_the_gpu_wait():
    from topowise.costmodel.predict import predict
    from topowise.models.spec import load_model
    from topowise.planner.explain import host_phrase
    from topowise.run import Run

    topo = load_topology("h200-x2")
    model = load_model("llama3.2-1b")
    zero2 = predict(Run(model, (0, 1), "zero2", micro_batch=1, seq_len=4096, engine="deepspeed"), topo)
    assert "in the optimizer step" in host_phrase(zero2)  # 34 ms of host against 18 of GPU work
    fsdp = predict(Run(load_model("qwen2.5-0.5b"), (0, 1), "zero3", seq_len=1024), topo)
    assert "per-block hooks" in host_phrase(fsdp)
