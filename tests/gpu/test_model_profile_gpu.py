"""`topowise profile` of a `module:function` model on a CUDA GPU (run on a GPU machine: pytest -m gpu)."""

import pytest

pytestmark = pytest.mark.gpu


def test_a_gpu_profile_times_phases_and_blocks_and_predicts_its_own_step():
    from topowise.costmodel.predict import predict
    from topowise.costmodel.profiled import ModelProfile, profiled_model
    from topowise.measure.model_profile import profile_model
    from topowise.run import Run
    from topowise.topology import load_topology

    data = profile_model("examples.models.llama:build_tiny", micro_batch=2, seq_len=64, device="cuda",
                         strategies=("ddp", "zero3"), steps=3, warmup=2)
    assert data["device_name"] and 1e12 < data["matmul_flops"] and 1e11 < data["memory_bytes_per_s"]
    for figures in data["strategies"].values():
        assert figures.get("status", "ok") == "ok", figures
        assert all(v > 0 for v in figures["gpu_s"].values()) and all(v > 0 for v in figures["host_s"].values())
        assert 0 < figures["activation_bytes"] < figures["peak_allocated_bytes"]
        assert all(b["forward_s"] > 0 and b["backward_s"] > 0 for b in figures["blocks"])
        assert figures["params_bytes"] > 0 and figures["optimizer_bytes"] == 2 * figures["params_bytes"]
    mp = ModelProfile.from_dict(data, "gpu profile")
    topo = load_topology("hgx-h200-8")
    pred = predict(Run(profiled_model(mp), (0,), "ddp", micro_batch=2, seq_len=64), topo)
    assert pred.step_time_s > 0 and pred.memory.allocated_bytes > 0
