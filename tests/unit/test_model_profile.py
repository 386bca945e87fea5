"""Predictions from a model profile (topowise.costmodel.profiled): the arithmetic on a hand-made
profile, the refusals, and a `module:function` model through `profile` (on the CPU), `predict` and
`plan`; neither predict nor plan imports torch to read a profile."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from topowise.cli.main import main
from topowise.costmodel.memory import pytorch_state_bytes
from topowise.costmodel.predict import predict
from topowise.costmodel.profile import default_profile
from topowise.costmodel.profiled import ModelProfile, ddp_collectives, load_model_profile, profiled_model
from topowise.errors import UsageError
from topowise.run import STRATEGIES, Run
from topowise.topology import load_topology

RESULTS = Path(__file__).parents[2] / "tests" / "data" / "records" / "2026-12-01-h200x1" / "model-profile"
P = 100_000_000  # parameters of the hand-made model
FIG = {"step_s": 0.050, "gpu_s": {"forward": 0.012, "backward": 0.024, "optimizer": 0.004},
       "host_s": {"forward": 0.006, "backward": 0.010, "optimizer": 0.001},
       "peak_allocated_bytes": 20 * P, "first_steps_peak_bytes": 20 * P, "activation_bytes": 3 * P,
       "blocks": [{"name": f"blocks.{i}", "forward_s": 0.001, "backward_s": 0.002, "activation_bytes": P // 4,
                   "input_bytes": P // 100} for i in range(8)]}
PROFILE = {
    "format": "topowise.model_profile", "version": 1,
    "model": {"callable": "mymodels:build", "params": P, "blocks": [P // 10] * 8, "tensors": [P // 20] * 20,
              "wrap_class": "Block", "accepts": ["micro_batch"]},
    "micro_batch": 8, "seq_len": 1, "device": "cuda", "device_name": "NVIDIA H200", "torch_version": "2.11",
    "compile": False, "matmul_flops": 790e12, "memory_bytes_per_s": 4.2e12,
    "strategies": {"ddp": FIG, "zero3": FIG}, "wall_s": 9.0,
}


def model(data=PROFILE):
    return profiled_model(ModelProfile.from_dict(copy.deepcopy(data), "p.json"))


def run_on(topology: str, gpus, strategy: str, **kw):
    topo = load_topology(topology)
    return predict(Run(model(kw.pop("data", PROFILE)), tuple(gpus), strategy, micro_batch=8, seq_len=1, **kw), topo)


def test_on_the_gpu_measured_one_gpu_is_the_profiles_own_step_and_peak():
    for strategy in ("ddp", "zero3"):
        pred = run_on("hgx-h200-8", [0], strategy)
        assert pred.step_time_s == pytest.approx(FIG["step_s"])
        assert pred.memory.allocated_bytes == pytest.approx(FIG["peak_allocated_bytes"], abs=1)
        assert pred.time.collectives == ()


def test_more_gpus_add_the_exposed_communication_and_shard_the_states():
    one, eight = run_on("hgx-h200-8", [0], "zero3"), run_on("hgx-h200-8", range(8), "zero3")
    residual = FIG["step_s"] - max(sum(FIG["host_s"].values()), sum(FIG["gpu_s"].values()))
    gpu = FIG["gpu_s"]["forward"] + FIG["gpu_s"]["backward"] + FIG["gpu_s"]["optimizer"] / 8
    assert eight.step_time_s == pytest.approx(max(sum(FIG["host_s"].values()), gpu + eight.time.exposed_comm_s)
                                              + residual)
    assert eight.time.exposed_comm_s > 0 and eight.step_time_s != one.step_time_s
    saved = sum(pytorch_state_bytes(P, STRATEGIES["zero3"], 1).values()) - sum(
        pytorch_state_bytes(P, STRATEGIES["zero3"], 8).values())
    assert eight.memory.allocated_bytes == pytest.approx(FIG["peak_allocated_bytes"] - saved, abs=2)
    assert eight.memory.activations_bytes == FIG["activation_bytes"]


def test_ddp_buckets_cover_the_real_tensors_in_backward_order():
    topo = load_topology("hgx-h200-8")
    run = Run(model(), tuple(range(8)), "ddp", micro_batch=8, seq_len=1)
    colls = ddp_collectives(run, topo, default_profile())
    assert sum(c.bytes * c.count for c in colls) == pytest.approx(4 * P, rel=1e-6)
    assert colls[-1].phase == "backward-last"
    zero1 = ddp_collectives(Run(model(), tuple(range(8)), "zero1", micro_batch=8, seq_len=1), topo,
                            default_profile())
    assert zero1[-1].op == "broadcast" and zero1[-1].count == 20


def test_another_gpu_is_an_estimate_scaled_by_matmul_and_memory_rates():
    same = run_on("hgx-h200-8", [0], "ddp")
    a100 = run_on("dgx-a100-8", [0], "ddp")
    assert "estimate" not in same.profile_fingerprint
    assert "estimate: profiled on NVIDIA H200" in a100.profile_fingerprint
    # the measured H200 reached 790/989 of its datasheet; the A100 is taken to reach the same share of its 312
    assert a100.time.forward_s == pytest.approx(FIG["gpu_s"]["forward"] * 989 / 312)
    assert a100.time.optimizer_s == pytest.approx(FIG["gpu_s"]["optimizer"] * 4.8 / 2.0)


def test_strategies_not_profiled_borrow_the_nearest_and_others_are_refused():
    hsdp = run_on("hgx-h200-8", range(8), "hsdp")
    assert "zero3's figures" in hsdp.profile_fingerprint
    only_zero3 = dict(PROFILE, strategies={"zero3": FIG})
    with pytest.raises(UsageError, match="no figures for ddp \\(profiled: zero3\\)"):
        run_on("hgx-h200-8", [0], "ddp", data=only_zero3)


def test_a_run_the_profile_did_not_measure_is_refused():
    topo = load_topology("hgx-h200-8")
    with pytest.raises(UsageError, match="profiled at micro-batch 8, not 4: give --micro-batch 8"):
        predict(Run(model(), (0,), "ddp", micro_batch=4, seq_len=1), topo)
    with pytest.raises(UsageError, match="without --compile"):
        predict(Run(model(), (0,), "ddp", micro_batch=8, seq_len=1, compile=True), topo)


def test_a_file_that_is_not_a_profile_is_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    for text, words in (("{", "not JSON"), ('{"format": "topowise.profile"}', "is not a model profile"),
                        (json.dumps(dict(PROFILE, strategies={"ddp": {"gpu_s": {}}})), "missing or malformed")):
        bad.write_text(text)
        assert main(["predict", "--model", "mymodels:build", "--model-profile", str(bad), "--topology", "hgx-h200-8",
                     "--gpus", "0", "--strategy", "ddp", "--micro-batch", "8", "--seq-len", "1"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and words in err[0], err


def test_the_profile_must_be_of_the_model_named(tmp_path, capsys):
    path = tmp_path / "p.json"
    path.write_text(json.dumps(PROFILE))
    assert main(["predict", "--model", "other:build", "--model-profile", str(path), "--topology", "hgx-h200-8",
                 "--gpus", "0", "--strategy", "ddp"]) == 2
    assert "is not the model" in capsys.readouterr().err


# --- a callable model through profile (CPU), predict and plan --------------------------------------
@pytest.fixture(scope="module")
def cpu_profile(tmp_path_factory):
    path = tmp_path_factory.mktemp("profile") / "tiny.json"
    assert main(["profile", "--model", "examples.models.llama:build_tiny", "--device", "cpu", "--strategies",
                 "ddp,zero3", "--steps", "1", "--warmup", "0", "--micro-batch", "2", "--seq-len", "16",
                 "--out", str(path)]) == 0
    return path


def test_profile_writes_the_format_predict_reads(cpu_profile):
    data = json.loads(cpu_profile.read_text())
    assert data["format"] == "topowise.model_profile" and data["device"] == "cpu"
    assert data["micro_batch"] == 2 and data["seq_len"] == 16 and data["model"]["wrap_class"] == "Block"
    for figures in data["strategies"].values():
        assert set(figures["gpu_s"]) == {"forward", "backward", "optimizer"}
        assert all(v > 0 for v in figures["host_s"].values())
        assert [b["name"] for b in figures["blocks"]] == ["layers.0", "layers.1"]
        assert figures["optimizer_bytes"] == 2 * figures["params_bytes"]  # AdamW: exp_avg and exp_avg_sq
    assert load_model_profile(cpu_profile).model.params == data["model"]["params"]


def test_predict_and_plan_refuse_the_cpu_profile_for_gpus(cpu_profile, capsys):
    # its times are the CPU's compute, its memory unmeasured: nothing carries to a GPU
    common = ["--model", "examples.models.llama:build_tiny", "--model-profile", str(cpu_profile),
              "--topology", "hgx-h200-8", "--seq-len", "16"]
    for argv in (["predict", *common, "--num-gpus", "8", "--strategy", "zero3", "--micro-batch", "2"],
                 ["plan", *common, "--num-gpus", "8"]):
        assert main(argv) == 2
        captured = capsys.readouterr()
        err = captured.err.strip()
        assert err.count("\n") == 0 and "profiled on the CPU" in err and "--device cuda" in err
        assert "waits" not in captured.out and "MFU" not in captured.out



def test_plan_ranks_a_measured_profile_at_its_micro_batch(capsys):
    # the ViT profiled on one H200 (tests/data/records/2026-12-01-h200x1/model-profile), planned for 8 GPUs
    profile = RESULTS / "profile-vit-128.json"
    assert main(["plan", "--model", "examples.models.vit:build", "--model-profile", str(profile),
                 "--topology", "hgx-h200-8", "--seq-len", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    plans = out["plans"]
    assert out["model_profile"]["estimate"] is False and out["model_profile"]["device_name"] == "NVIDIA H200"
    assert plans and {p["micro_batch"] for p in plans} == {128}
    assert {p["strategy"] for p in plans} >= {"ddp", "zero3"}


def test_reading_a_profile_imports_no_torch(tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps(PROFILE))
    for argv in (["plan", "--model", "llama3.2-1b", "--topology", "hgx-h200-8", "--num-gpus", "2"],
                 ["predict", "--model", "mymodels:build", "--model-profile", str(path), "--topology", "hgx-h200-8",
                  "--num-gpus", "8", "--strategy", "zero3", "--micro-batch", "8", "--seq-len", "1"]):
        done = subprocess.run([sys.executable, "-X", "importtime", "-m", "topowise", *argv], capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, done.stderr[-500:]
        modules = [line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if "|" in line]
        assert modules and not [m for m in modules if m == "torch" or m.startswith("torch.")]


def test_checkpointing_is_estimated_from_the_block_figures():
    topo = load_topology("hgx-h200-8")
    base = predict(Run(model(), (0,), "ddp", micro_batch=8, seq_len=1), topo)
    full = predict(Run(model(), (0,), "ddp", micro_batch=8, seq_len=1, checkpointing="full"), topo)
    every2 = predict(Run(model(), (0,), "ddp", micro_batch=8, seq_len=1, checkpointing="selective",
                         selective_ac_option="2"), topo)
    per_op = predict(Run(model(), (0,), "ddp", micro_batch=8, seq_len=1, checkpointing="selective"), topo)
    fwd = [b["forward_s"] for b in FIG["blocks"]]  # 8 blocks of 1 ms
    assert full.time.backward_s - base.time.backward_s == pytest.approx(sum(fwd))
    assert every2.time.backward_s - base.time.backward_s == pytest.approx(sum(fwd[::2]))
    assert per_op.time.backward_s - base.time.backward_s == pytest.approx(sum(fwd) / 2)
    freed = P // 4 - P // 100  # each block's activations less its input
    assert base.memory.allocated_bytes - full.memory.allocated_bytes == pytest.approx(7 * freed, abs=8)


def test_a_model_without_blocks_is_gathered_whole_at_the_root():
    flat = copy.deepcopy(PROFILE)
    flat["model"]["blocks"] = []
    pred = run_on("hgx-h200-8", range(8), "zero3", data=flat)
    gathers = [c for c in pred.time.collectives if c.op == "all_gather"]
    assert [(c.bytes, c.phase) for c in gathers] == [(2 * P, "forward-first")]


def test_the_sequence_length_must_be_the_profiles_too(capsys, tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps(PROFILE))
    assert main(["predict", "--model", "mymodels:build", "--model-profile", str(path), "--topology", "hgx-h200-8",
                 "--gpus", "0", "--strategy", "ddp", "--micro-batch", "8"]) == 2  # --seq-len left at 4096
    assert "profiled at --seq-len 1, not 4096: give --seq-len 1" in capsys.readouterr().err
