"""`bench train --engine deepspeed` on CPU: DeepSpeed 0.19 runs ZeRO-1/2/3 on its CPU accelerator over
gloo (DS_ACCELERATOR=cpu, set by the engine on each rank), two processes, a tiny tied-embedding model.

Each strategy is a torchrun launch (DeepSpeed's import makes each ~5-10 s on two cores).
"""

import json

import pytest
import rank_faults

from topowise.measure import train

pytest.importorskip("torch")
pytest.importorskip("deepspeed")

# tied embeddings, as llama3.2-1b: zero3 must gather the embedding for the output layer too
TINY_TIED = {"model_type": "llama", "vocab_size": 512, "hidden_size": 64, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
             "tie_word_embeddings": True}


def request(tmp_path, strategies, engine, out=None):
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY_TIED))
    return train.make_request(model=str(config), strategies=strategies, device="cpu", nproc=2, micro_batch=2,
                              seq_len=32, steps=3, warmup=1, timeout_s=180, engine=engine, out=out,
                              lr=0.01)  # large enough that the loss moves visibly within 4 steps


@pytest.mark.dist
def test_deepspeed_zero_stages_train_like_fsdp2_and_failures_are_recorded(tmp_path, monkeypatch):
    out = tmp_path / "train.jsonl"
    # zero1 fails with OOM after wrapping; zero2 runs but its weights never move (a wrong run)
    for key, value in rank_faults.env_with_faults("zero1:oom,zero2:diverge").items():
        monkeypatch.setenv(key, value)
    ds_records, _ = train.bench_train(request(tmp_path, "zero1,zero2,zero3", "deepspeed", str(out)),
                                      entry=rank_faults.TRAIN_ENTRY)
    pt_records, _ = train.bench_train(request(tmp_path, "zero3", "pytorch", str(out)))

    oom, ds2, ds3 = ds_records
    assert oom["status"] == "oom" and oom["engine"] == "deepspeed" and oom["oom_requested_bytes"] == int(3.5 * 2**30)
    for r in (ds2, ds3, *pt_records):
        assert r["status"] == "ok", r.get("error", "") + r.get("log_tail", "")
    assert ds2["deepspeed_config"]["zero_optimization"]["stage"] == 2
    assert ds3["deepspeed_config"]["zero_optimization"]["stage"] == 3
    assert ds3["deepspeed_config"]["gradient_clipping"] == 0.0
    assert len(ds3["losses"]) == 4 and ds3["losses"][-1] < 0.97 * ds3["losses"][0]  # it trains
    # the same weights, data and optimizer: DeepSpeed's ZeRO-3 follows FSDP2's ZeRO-3 step by step,
    # and the loss check names the run that does not train
    check = train.compare_losses([ds2, ds3, pt_records[0]])
    assert not check.agree and check.diverging == ("zero2",) and check.reference == "zero3"
    assert train.compare_losses([ds3, pt_records[0]]).agree
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["engine"], r["strategy"], r["status"]) for r in lines] == [
        ("deepspeed", "zero1", "oom"), ("deepspeed", "zero2", "ok"), ("deepspeed", "zero3", "ok"),
        ("pytorch", "zero3", "ok")]
