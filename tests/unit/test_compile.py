"""torch.compile as a dimension of a run: the compiled terms of the cost model, their fit, the planner's
choice between eager and compiled, and the flags of every verb that takes it."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from cli_run import cli_output as cli

from topowise import hardware
from topowise.calibrate.cases import calibration_plan, validation_plan
from topowise.calibrate.fit import fit_compiled, observation_from, observations_from, predictor
from topowise.costmodel.elementwise import block_elementwise_bytes
from topowise.costmodel.predict import predict
from topowise.costmodel.profile import Profile, default_profile
from topowise.errors import UsageError
from topowise.models.spec import load_model
from topowise.planner.search import plan
from topowise.run import Run
from topowise.topology import load_topology

TOPO = load_topology("h200-x2")


def run(strategy="zero3", compile=False, model="llama3.2-1b", **kw) -> Run:
    kw = {"micro_batch": 1, "seq_len": 8192, **kw}
    return Run(load_model(model), (0,), strategy, compile=compile, **kw)


@pytest.mark.parametrize("strategy,drops", [("ddp", False), ("zero2", True), ("zero3", True)])
def test_compiling_drops_the_activation_functions_output_from_memory(strategy, drops):
    """With FSDP2's bf16 parameters Inductor recomputes SiLU's output in the backward instead of saving it:
    2I bytes per token per block (measured to the MiB on one H200); under ddp DDPOptimizer compiles
    llama3.2-1b's gate and up in pieces of their own, so SiLU's output is kept (measured: compiled 45.39 GiB,
    eager 45.42)."""
    eager, compiled = (predict(run(strategy, c), TOPO) for c in (False, True))
    m = load_model("llama3.2-1b")
    saved = 2 * m.intermediate_size * 8192 * m.num_layers if drops else 0
    assert eager.memory.activations_bytes - compiled.memory.activations_bytes == pytest.approx(saved)


def test_compiling_changes_the_elementwise_traffic_and_nothing_else_on_the_gpu():
    profile = default_profile()
    eager, compiled = (predict(run(compile=c), TOPO, profile) for c in (False, True))
    assert compiled.time.compute_s == eager.time.compute_s  # the same matmul and attention kernels
    assert compiled.time.optimizer_s == eager.time.optimizer_s
    assert compiled.time.memory_bound_s < eager.time.memory_bound_s
    # the difference is the blocks' elementwise kernels alone: eager's counted at eager's traffic, Inductor's fused
    # ones at the compiled traffic
    r, hbm = run(), hardware.hbm_bytes_per_s("NVIDIA H200") * profile.hbm_efficiency
    per_step = r.tokens * r.model.num_layers / hbm
    kernels = sum(block_elementwise_bytes(r.model, r.spec.autocast)) * per_step
    fused = sum(block_elementwise_bytes(r.model, r.spec.autocast, compiled=True)) * per_step
    eager_kernels, fused = profile.activation_traffic * kernels, profile.compiled_activation_traffic * fused
    assert eager.time.memory_bound_s - compiled.time.memory_bound_s == pytest.approx(eager_kernels - fused)
    # and a profile of the saved-bytes form saves nothing when its compiled traffic equals eager's
    same = replace(profile, compiled_activation_traffic=profile.activation_traffic, elementwise_form="saved-bytes")
    assert (predict(run(compile=True), TOPO, same).time.memory_bound_s
            == pytest.approx(predict(run(), TOPO, same).time.memory_bound_s))


def test_the_compile_time_is_reported_apart_from_the_step():
    profile = replace(default_profile(), compile_s=12.5)
    eager, compiled = (predict(run(compile=c), TOPO, profile) for c in (False, True))
    assert (eager.compile_s, compiled.compile_s) == (0.0, 12.5)
    assert compiled.to_dict()["compile"] is True and compiled.to_dict()["compile_s"] == 12.5


def test_compiled_host_terms_fall_back_to_a_related_strategy_then_to_eager():
    host = {"ddp/forward": 1.0, "zero3/forward": 3.0, "compiled/ddp/forward": 2.0, "compiled/zero3/forward": 4.0}
    p = replace(Profile(), host_s_per_layer=host)
    assert p.host_s("ddp", "forward", compiled=True) == 2.0
    assert p.host_s("zero1", "forward", compiled=True) == 2.0  # zero1 runs DDP's hooks
    assert p.host_s("hsdp", "forward", compiled=True) == 4.0  # hsdp runs zero3's code
    assert p.host_s("zero2", "forward", compiled=True) == 0.0  # nothing measured, no fallback
    assert p.host_s("ddp", "forward") == 1.0
    no_compiled = replace(Profile(), host_s_per_layer={"ddp/forward": 1.0})
    assert no_compiled.host_s("ddp", "forward", compiled=True) == 1.0


def test_deepspeed_compiled_is_refused_with_one_line():
    with pytest.raises(UsageError, match="PyTorch engine only"):
        predict(Run(load_model("llama3.2-1b"), (0, 1), "zero3", compile=True, engine="deepspeed"), TOPO)


def record(strategy: str, compile: bool, step_s: float, seq_len: int = 8192, warmup0: float | None = None) -> dict:
    model = load_model("llama3.2-1b")
    return {"kind": "train", "status": "ok", "model": model.name, "model_spec": model.to_dict(),
            "strategy": strategy, "micro_batch": 1, "seq_len": seq_len, "fabric": "nvlink", "world_size": 1,
            "step_time_s": step_s, "step_times_s": [step_s] * 5, "compile": compile, "device": "cuda",
            "warmup_step_times_s": [warmup0 if warmup0 is not None else step_s, step_s, step_s]}


def test_fit_compiled_recovers_the_traffic_from_what_compiling_saved_whatever_the_eager_error():
    """Measured eager runs 6% slower than predicted; the compiled twins save what a known traffic saves.
    The fit takes the saving, not the level, so it finds that traffic again."""
    truth = replace(default_profile(), compiled_activation_traffic=4.0)
    predict_one = predictor(TOPO)
    records = []
    for strategy in ("ddp", "zero3"):
        eager = observation_from(record(strategy, False, 1.0))
        pe = predict_one(truth, eager).step_time_s
        pc = predict_one(truth, replace(eager, compile=True)).step_time_s
        measured_eager = 1.06 * pe
        records += [record(strategy, False, measured_eager),
                    record(strategy, True, measured_eager - (pe - pc), warmup0=10.0)]
    fitted, fit = fit_compiled(default_profile(), observations_from(records), predict_one, "test")
    assert fitted.compiled_activation_traffic == pytest.approx(4.0, abs=0.01)
    assert fitted.compile_s == pytest.approx(10.0 - records[1]["step_time_s"], abs=0.01)
    assert "calibrated (test)" in fitted.sources["compiled_activation_traffic"]


def test_fit_compiled_without_eager_twins_keeps_the_default_and_says_so():
    fitted, fit = fit_compiled(default_profile(), observations_from([record("ddp", True, 0.2)]), predictor(TOPO), "t")
    assert fit is None
    assert fitted.compiled_activation_traffic == default_profile().compiled_activation_traffic
    assert fitted.sources["compiled_activation_traffic"].startswith("not calibrated")


def test_a_selective_record_replays_as_selective_not_full():
    r = dict(record("zero3", True, 0.1), activation_checkpointing=True, checkpointing="selective")
    o = observation_from(r)
    assert predictor(TOPO)(default_profile(), o).run.checkpointing == "selective"


def test_every_compiled_calibration_case_has_its_eager_twin_in_the_plan():
    """fit_compiled pairs each compiled run with the eager run of the same case: the plan must hold both."""
    cases = calibration_plan("cuda", compile=True).cases
    eager = {c for c in cases if not c.compile}
    compiled = [c for c in cases if c.compile]
    assert compiled and all(replace(c, compile=False) in eager for c in compiled)
    assert calibration_plan("cpu", compile=True) == calibration_plan("cpu")
    assert sum(c.compile for c in validation_plan("cuda", compile=True).cases) >= 8


def test_plan_weighs_eager_against_compiled_and_says_whether_the_winner_changes():
    model, topo = load_model("llama3.2-3b"), load_topology("h100-nvl-8")
    eager_only = plan(model, topo, seq_len=4096, top=3)
    both = plan(model, topo, seq_len=4096, top=3, compile_choices=(False, True))
    assert not any(p.run.compile for p in eager_only.ranked)
    # one row per distinct choice at its fastest: here compiled for every choice; the note weighs both
    assert any(p.run.compile for p in both.ranked)
    assert both.best.prediction.tokens_per_s >= eager_only.best.prediction.tokens_per_s
    note = next(n for n in both.notes if n.startswith("comp"))
    eager_best = eager_only.best
    if (both.best.strategy, both.best.shard_group_size) != (eager_best.strategy, eager_best.shard_group_size):
        assert note.startswith("compiling changes the winner") and eager_best.strategy in note
    else:
        assert "the same strategy wins either way" in note
    assert both.best.to_dict()["compile"] is True


def test_predict_compile_flag_reaches_the_json_and_the_text(capsys):
    base = ["predict", "--model", "llama3.2-1b", "--topology", "h200-x2", "--num-gpus", "2", "--strategy", "zero3"]
    code, out, _ = cli(base + ["--compile", "--json"], capsys)
    assert code == 0 and json.loads(out)["compile"] is True and json.loads(out)["compile_s"] > 0
    code, out, _ = cli(base + ["--compile"], capsys)
    assert code == 0 and "compiled (first step +" in out
    assert "each block keeps 16,384 bytes per token fewer than eager" in out  # SiLU's output, 2I
    code, out, _ = cli(base[:-1] + ["ddp", "--compile"], capsys)
    assert "keeps 0 bytes per token fewer than eager; under DDP Dynamo compiles it in 5 pieces" in out


@pytest.mark.parametrize("argv", [
    ["calibrate", "--device", "cpu", "--compile"],
    ["validate", "--device", "cpu", "--compile", "--profile", "x.json"],
    ["predict", "--model", "llama3.2-1b", "--topology", "h200-x2", "--num-gpus", "2", "--strategy", "zero3",
     "--engine", "deepspeed", "--compile"],
])
def test_compile_where_it_does_not_apply_is_one_line_and_exit_2(argv, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.json").write_text(json.dumps({"format": "topowise.profile"}))
    code, _, err = cli(argv, capsys)
    assert code == 2 and err.startswith("topowise: error:") and len(err.strip().splitlines()) == 1
    assert "compile" in err


def test_the_host_index_times_cpu_dispatch_without_a_gpu():
    from topowise.measure.host_index import measure_host_index

    index = measure_host_index("cpu", ops=200, rounds=3)
    assert index.path == "cpu-dispatch" and index.us_per_op > 0 and index.rounds == 3


def test_a_compiled_plan_says_so_in_its_export_and_round_trips(tmp_path, capsys):
    from topowise.export import LaunchPlan

    model, topo = load_model("llama3.2-1b"), load_topology("h200-x2")
    result = plan(model, topo, seq_len=8192, top=1, compile_choices=(False, True))
    assert result.best.run.compile
    launch = LaunchPlan.from_plan(result.best, result, topo)
    assert launch.run.compile and any("compiled" in w for w in launch.warnings) and ", compiled" in launch.summary()
    assert LaunchPlan.from_dict(json.loads(json.dumps(launch.to_dict()))).run.compile
    eager = plan(model, topo, seq_len=8192, top=1)
    assert not LaunchPlan.from_plan(eager.best, eager, topo).run.compile


def test_the_host_index_is_timed_once_per_process_and_device(monkeypatch):
    """A calibration runs many cases in one process: the index must not cost each of them a second."""
    from topowise.measure import host_index as hi

    calls = []
    monkeypatch.setattr(hi, "_ONCE", {})
    monkeypatch.setattr(hi, "measure_host_index", lambda device: calls.append(device) or hi.HostIndex(
        1.0, 0.0, "cpu-dispatch", 1, 1, None))
    first, again, other = hi.index_once("cpu"), hi.index_once("cpu"), hi.index_once("cuda")
    assert first is again and calls == ["cpu", "cuda"] and other is not first
