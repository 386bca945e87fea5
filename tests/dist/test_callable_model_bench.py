"""`bench train --model module:function`: the callable's own model, batch and loss trained by every
strategy on gloo ranks (CPU), the losses agreeing. One torchrun launch per strategy (tests/dist: the dist lane)."""

import pytest

from topowise.measure import train


def why(records: list[dict]) -> list:
    """What a failed case left: its error and the ranks' last log lines."""
    return [(r["strategy"], r.get("error"), r.get("log_tail")) for r in records if r["status"] != "ok"]


def vit_request(out=None, **kw):
    return train.make_request(model="examples.models.vit:build_tiny", micro_batch=4, seq_len=1, steps=2, warmup=1,
                              device="cpu", nproc=2, out=out, timeout_s=240, **kw)


@pytest.fixture(scope="module")
def vit_runs(tmp_path_factory):
    """The tiny ViT (images, no sequence) trained by ddp, zero1 and zero3: (records, loss check)."""
    return train.bench_train(vit_request(str(tmp_path_factory.mktemp("vit") / "t.jsonl"), strategies="ddp,zero1,zero3"))


def test_bench_train_runs_the_callable_under_ddp_and_fsdp(vit_runs):
    records, check = vit_runs
    assert [r["status"] for r in records] == ["ok"] * 3, why(records)
    assert check.agree, check.message()
    for r in records:
        assert r["model"] == "examples.models.vit:build_tiny" and r["model_spec"]["wrap_class"] == "Block"
        assert r["tokens_per_step_per_gpu"] == 4 and len(r["losses"]) == 3


def test_bench_train_checkpoints_the_callables_blocks(vit_runs):
    plain = {r["strategy"]: r for r in vit_runs[0]}
    records, check = train.bench_train(vit_request(strategies="ddp,zero3", checkpointing="full"))
    assert [r["status"] for r in records] == ["ok", "ok"] and check.agree, why(records)
    assert all(r["activation_checkpointing"] for r in records)
    assert not any(r["activation_checkpointing"] for r in plain.values())
    for r in records:  # recomputing changes no number the step computes: DDP's hooks and FSDP2's re-gather alike
        assert plain[r["strategy"]]["status"] == "ok", why([plain[r["strategy"]]])
        assert r["losses"] == pytest.approx(plain[r["strategy"]]["losses"], rel=1e-4)
