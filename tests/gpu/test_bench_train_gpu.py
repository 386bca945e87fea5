"""`bench train` on CUDA GPUs with NCCL (run on a GPU machine: pytest -m gpu)."""

import pytest

from topowise.expectations import train_expected
from topowise.measure import train
from topowise.measure.machine import live_topology

pytestmark = pytest.mark.gpu


def _nproc():
    import torch

    return min(2, torch.cuda.device_count())


def test_every_strategy_on_gpus_reports_time_memory_mfu_and_agreeing_losses(tmp_path):
    # qwen2.5-0.5b: grouped-query attention, q/k/v biases, tied embeddings, head_dim 64 (flash)
    request = train.make_request(model="qwen2.5-0.5b", strategies="ddp,zero1,zero2,zero3,hsdp", micro_batch=1,
                                 seq_len=1024, steps=3, warmup=2, device="cuda", nproc=_nproc(),
                                 out=str(tmp_path / "t.jsonl"), timeout_s=240)
    topology = live_topology()
    records, check = train.bench_train(request, lambda case: train_expected(case, topology))
    for r in records:
        assert r["status"] == "ok", r
        assert 0 < r["mfu_measured_peak"] < 1 and 0 < r["mfu"] < 1
        assert 100e12 < r["peak_flops_measured"] < 5000e12
        assert 0 < r["peak_memory_bytes"] <= r["reserved_bytes"]
        assert r["gpu_name"] and r["nccl_version"]
        # every rank's GPU sampled by NVML over the timed steps, at a clock it can run at
        assert len(r["gpu_clocks"]) == _nproc(), r.get("gpu_clocks")
        for c in r["gpu_clocks"]:
            assert c["samples"] >= 1 and 0 < c["sm_mhz_min"] <= c["sm_mhz_mean"] <= c["max_sm_mhz"]
            assert 0 < c["power_w_mean"] and 0 <= c["power_capped_share"] <= 1
    assert check.agree, check.message()
    # sharding shrinks what each GPU holds: zero3 allocates less than ddp at world size 2
    if _nproc() == 2:
        by = {r["strategy"]: r for r in records}
        assert by["zero3"]["peak_memory_bytes"] < by["ddp"]["peak_memory_bytes"]


def test_a_real_out_of_memory_is_recorded_with_the_bytes_asked_for():
    # 64 x 8192 tokens of a 152k vocabulary: the logits alone are ~150 GiB
    request = train.make_request(model="qwen2.5-0.5b", strategies="ddp", micro_batch=64, seq_len=8192, steps=1,
                                 warmup=0, device="cuda", nproc=_nproc(), timeout_s=240)
    (record,), _ = train.bench_train(request)
    assert record["status"] == "oom", record
    assert record["oom_requested_bytes"] and record["oom_requested_bytes"] > 2**20
