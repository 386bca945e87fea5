"""`bench train --model module:function`: the callable's own model, batch and loss trained by every
strategy on gloo ranks (CPU), the losses agreeing. One torchrun launch per strategy (tests/dist: the dist lane)."""

import pytest

from topowise.measure import train


def why(records: list[dict]) -> list:
    """What a failed case left: its error and the ranks' last log lines."""
    return [(r["strategy"], r.get("error"), r.get("log_tail")) for r in records if r["status"] != "ok"]


def test_bench_train_runs_the_callable_under_ddp_and_fsdp(tmp_path):
    request = train.make_request(model="examples.models.vit:build_tiny", strategies="ddp,zero1,zero3", micro_batch=4,
                                 seq_len=1, steps=2, warmup=1, device="cpu", nproc=2, out=str(tmp_path / "t.jsonl"),
                                 timeout_s=240)
    records, check = train.bench_train(request)
    assert [r["status"] for r in records] == ["ok"] * 3, why(records)
    assert check.agree, check.message()
    for r in records:
        assert r["model"] == "examples.models.vit:build_tiny" and r["model_spec"]["wrap_class"] == "Block"
        assert r["tokens_per_step_per_gpu"] == 4 and len(r["losses"]) == 3


def test_bench_train_checkpoints_the_callables_blocks(tmp_path):
    plain, full = (train.make_request(model="examples.models.llama:build_tiny", strategies="ddp,zero3", micro_batch=2,
                                      seq_len=16, steps=2, warmup=1, device="cpu", nproc=2, timeout_s=240,
                                      activation_checkpointing=ac) for ac in (False, True))
    base, _ = train.bench_train(plain)
    records, check = train.bench_train(full)
    assert [r["status"] for r in base + records] == ["ok"] * 4 and check.agree, why(base + records)
    assert all(r["activation_checkpointing"] for r in records)
    for a, b in zip(base, records):  # recomputing changes no number the step computes
        assert a["losses"] == pytest.approx(b["losses"], rel=1e-4)
