"""DeepSpeed configs (the export and the bench engine's), read back by DeepSpeed's own config classes."""

import json

import pytest

from topowise.costmodel.deepspeed import bucket_elements
from topowise.export import LaunchPlan, render
from topowise.export.deepspeed import deepspeed_config, zero_config
from topowise.measure.deepspeed_engine import CPU_BUCKET_ELEMENTS, engine_config
from topowise.models.spec import load_model
from topowise.run import Run


def plan(strategy, gpus=(0, 1), shard=None, link=478.125, micro_batch=1):
    run = Run(load_model("llama3.2-1b"), tuple(gpus), strategy, micro_batch=micro_batch, seq_len=8192,
              shard_group_size=shard)
    return LaunchPlan(run=run, topology="hgx-h200-8", link_gbps=link, islands_spanned=1, node_gpus=8)


@pytest.mark.reference
def ds_config(data: dict):
    pytest.importorskip("deepspeed")
    from deepspeed.runtime.config import DeepSpeedConfig

    return DeepSpeedConfig(data)  # validates every key (pydantic, extra keys forbidden)


@pytest.mark.parametrize("strategy,stage", [("zero1", 1), ("zero2", 2), ("zero3", 3)])
def test_engine_config_loads_in_deepspeed_with_the_bucket_sizes(strategy, stage):
    cfg = engine_config(strategy, micro_batch=2, world_size=1, link_gbps=478.125, device="cuda")
    loaded = ds_config(cfg)
    size = bucket_elements(478.125, 2)
    assert loaded.zero_optimization_stage == stage
    assert loaded.bfloat16_config.enabled and not loaded.float16_config.enabled
    assert loaded.train_micro_batch_size_per_gpu == 2 and loaded.train_batch_size == 2
    assert loaded.gradient_clipping == 0.0  # the PyTorch engine clips nothing: neither may this one
    zero = loaded.zero_config
    assert zero.overlap_comm and zero.contiguous_gradients
    assert zero.reduce_bucket_size == size
    if stage < 3:
        assert zero.allgather_bucket_size == size
    else:
        assert zero.prefetch_bucket_size == size


def test_cpu_config_has_small_buckets_and_train_batch_is_micro_times_world():
    cfg = engine_config("zero2", micro_batch=3, world_size=2, link_gbps=None, device="cpu")
    zero = cfg["zero_optimization"]
    assert zero["reduce_bucket_size"] == zero["allgather_bucket_size"] == CPU_BUCKET_ELEMENTS
    assert cfg["train_batch_size"] == 6 and cfg["gradient_clipping"] == 0.0  # absent would mean 1.0


def test_buckets_follow_the_link_pcie_smaller():
    nv = zero_config("zero3", micro_batch=1, link_gbps=478.125, nproc=2)["zero_optimization"]
    pcie = zero_config("zero3", micro_batch=1, link_gbps=28.0, nproc=2)["zero_optimization"]
    assert pcie["reduce_bucket_size"] < nv["reduce_bucket_size"]
    # 9 alpha B / 2 bytes: 9 * 29e-6 * 478.125e9 / 2 = 62.4e6 -> 62e6 bf16 elements
    assert nv["reduce_bucket_size"] == 62_000_000


def test_hpz_only_when_the_plan_shards_inside_islands():
    inside = deepspeed_config(plan("hsdp", gpus=range(8), shard=2, link=63.0))
    assert inside["zero_optimization"]["stage"] == 3
    assert inside["zero_optimization"]["zero_hpz_partition_size"] == 2
    whole = deepspeed_config(plan("hsdp", gpus=range(2), shard=2))  # one shard group: plain ZeRO-3
    assert "zero_hpz_partition_size" not in whole["zero_optimization"]
    assert "zero_hpz_partition_size" not in deepspeed_config(plan("zero3"))["zero_optimization"]
    loaded = ds_config(json.loads(render("deepspeed", plan("hsdp", gpus=range(8), shard=2, link=63.0))))
    assert loaded.zero_config.zero_hpz_partition_size == 2


def test_plan_export_deepspeed_with_engine_deepspeed_loads(tmp_path, capsys):
    from topowise.cli.main import main

    out = tmp_path / "ds.json"
    assert main(["plan", "--model", "llama3.1-8b", "--topology", "h100-nvl-8", "--num-gpus", "8",
                 "--engine", "deepspeed", "--export", "deepspeed", "--out", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["engine"] == "deepspeed"
    assert all(p["strategy"] in ("zero1", "zero2", "zero3", "hsdp") for p in doc["plans"])
    cfg = json.loads(out.read_text())
    best = doc["plans"][0]
    assert cfg["zero_optimization"]["stage"] == {"zero1": 1, "zero2": 2, "zero3": 3, "hsdp": 3}[best["strategy"]]
    if best["strategy"] == "hsdp":  # h100-nvl-8: NVLink pairs, so shard groups of 2 inside them
        assert cfg["zero_optimization"]["zero_hpz_partition_size"] == 2
    ds_config(cfg)
