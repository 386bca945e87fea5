"""The cost model's DeepSpeed engine: where its state and traffic differ from FSDP2's."""

import json

import pytest

from topowise.costmodel import comm as C
from topowise.costmodel.deepspeed import deepspeed_buckets, deepspeed_memory, persistent_params
from topowise.costmodel.profile import default_profile
from topowise.costmodel.step import Prediction, predict
from topowise.errors import UsageError
from topowise.models.spec import load_model
from topowise.topology import load_topology

M = load_model("llama3.2-1b")
T = load_topology("hgx-h200-8")
P = M.params


def ds(strategy, gpus=(0, 1), **kw):
    return predict(M, T, gpus, strategy, seq_len=kw.pop("seq_len", 8192), engine="deepspeed", **kw)


def total(pred, op, dtype=None, phase=None):
    return sum(c.bytes * c.count for c in pred.time.collectives
               if c.op == op and (dtype is None or c.dtype == dtype) and (phase is None or c.phase == phase))


@pytest.mark.parametrize("strategy", ["zero1", "zero2"])
def test_zero12_bf16_model_everywhere_and_sharded_master_and_moments(strategy):
    p = ds(strategy, gpus=tuple(range(8)))
    assert p.engine == "deepspeed"
    assert p.memory.params_bytes == int(2 * P)  # the bf16 model on every rank (FSDP2 zero2: fp32 shards)
    assert p.memory.optimizer_bytes == int(12 * P / 8)  # fp32 master + m + v of the partition


def test_zero12_traffic_is_bf16_allreduce_then_allgather_after_the_step():
    p = ds("zero2")
    assert {c.dtype for c in p.time.collectives} == {"bf16"}
    assert total(p, "all_reduce") == pytest.approx(2 * P, rel=1e-6)  # every gradient once, bf16
    assert total(p, "all_gather", phase=C.AFTER_STEP) == pytest.approx(2 * P, rel=1e-6)
    assert total(p, "reduce_scatter") == 0
    fsdp = predict(M, T, (0, 1), "zero2", seq_len=8192)
    assert total(fsdp, "reduce_scatter", "fp32") == pytest.approx(4 * P, rel=1e-3)  # FSDP2 reduces in fp32
    assert total(fsdp, "all_gather", phase=C.AFTER_STEP) == 0  # FSDP2 gathers in forward instead


def test_zero3_gathers_per_module_twice_and_reduce_scatters_bf16():
    p = ds("zero3")
    assert total(p, "reduce_scatter", "bf16") == pytest.approx(2 * P, rel=1e-6)
    gathered = total(p, "all_gather")
    # every non-persistent parameter once in forward and once in backward; the tied embedding 4 times
    # (embedding and output layer in each direction)
    blocks = M.num_layers * M.layer_params - persistent_params(M) + M.final_norm_params
    assert gathered == pytest.approx(2 * (2 * blocks) + 4 * 2 * M.vocab_size * M.hidden_size, rel=1e-3)
    forward = [c for c in p.time.collectives if c.op == "all_gather" and c.phase == C.FORWARD]
    assert sum(c.count for c in forward) == 4 * M.num_layers + 1


def test_gradient_memory_contiguous_partitions_and_fp32_accumulation():
    # a short sequence, so the optimizer step is the peak moment and the gradients show
    kw = dict(micro_batch=1, seq_len=16, activation_checkpointing=False, gpu_memory_bytes=141 * 10**9,
              profile=default_profile(), buckets=deepspeed_buckets(M, 478.125))
    z1, z2 = deepspeed_memory(M, "zero1", 2, **kw), deepspeed_memory(M, "zero2", 2, **kw)
    assert z1.peak_phase == z2.peak_phase == "optimizer step"
    # contiguous_gradients: stage 1 copies its slice into the partition buffer as stage 2 does
    assert z1.grads_bytes == z2.grads_bytes == int(2 * P / 2)
    assert z1.buffers["fp32 gradient of the partition (step)"] == int(4 * P / 2)
    # grad_accum_dtype fp32: zero1 becomes BF16_Optimizer with a full fp32 gradient, zero2 fp32 partitions
    assert deepspeed_memory(M, "zero1", 2, grad_accum_fp32=True, **kw).grads_bytes == int(4 * P)
    assert deepspeed_memory(M, "zero2", 2, grad_accum_fp32=True, **kw).grads_bytes == int(4 * P / 2)


def test_buckets_sized_to_the_link_more_pieces_on_pcie():
    nv = ds("zero2")
    pcie = ds("zero2", fabric="pcie")
    count = lambda p: sum(c.count for c in p.time.collectives if c.op == "all_reduce")
    assert count(pcie) > count(nv)
    assert pcie.step_time_s > nv.step_time_s


def test_hsdp_is_zero3_with_hpz_backward_gathers_inside_the_group():
    topo = load_topology("h100-nvl-8")
    p = predict(load_model("llama3.1-8b"), topo, tuple(range(8)), "hsdp", seq_len=4096, engine="deepspeed")
    assert p.shard_group_size == 2
    back = [c for c in p.time.collectives if c.op == "all_gather" and c.phase == C.BACKWARD]
    fwd = [c for c in p.time.collectives if c.op == "all_gather" and c.phase == C.FORWARD]
    assert {c.group_size for c in back} == {2} and {c.group_size for c in fwd} == {8}
    z3 = predict(load_model("llama3.1-8b"), topo, tuple(range(8)), "zero3", seq_len=4096, engine="deepspeed")
    params = load_model("llama3.1-8b").params
    assert p.memory.params_bytes - z3.memory.params_bytes == int(2 * params / 2)  # the secondary partition


def test_engine_errors_and_json():
    with pytest.raises(UsageError, match="ddp"):
        ds("ddp")
    with pytest.raises(UsageError, match="engine"):
        predict(M, T, (0, 1), "zero2", engine="megatron")
    p = ds("zero3")
    d = p.to_dict()
    assert d["engine"] == "deepspeed"
    assert Prediction.from_dict(json.loads(json.dumps(d))) == p
    assert predict(M, T, (0, 1), "zero3").engine == "pytorch"


def test_predict_cli_engine(capsys):
    from topowise.cli.main import main

    assert main(["predict", "--model", "llama3.2-1b", "--topology", "hgx-h200-8", "--gpus", "0,1", "--strategy",
                 "zero2", "--seq-len", "8192", "--engine", "deepspeed", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["engine"] == "deepspeed" and doc["memory"]["params_bytes"] == int(2 * P)
    assert main(["predict", "--model", "llama3.2-1b", "--topology", "hgx-h200-8", "--gpus", "0,1", "--strategy",
                 "ddp", "--engine", "deepspeed"]) == 2
    assert "topowise: error:" in capsys.readouterr().err
