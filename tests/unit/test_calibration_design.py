"""The designed calibration: its shapes vary what each fitted parameter multiplies, every step-time
parameter is pinned by runs that move with it, and it fits the time budget (calibrate/design.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from topowise.calibrate.cases import GPU_CALIBRATION, HOST_FLOOR_TOKENS, NON_HSDP
from topowise.calibrate.design import (
    DESIGN_PARAMS,
    comm_sweep_seconds,
    design_cases,
    design_models,
    designed_plan,
    identifiability,
)
from topowise.cli.main import main
from topowise.costmodel.profile import default_profile
from topowise.models.spec import load_model
from topowise.topology import load_topology

TOPO = load_topology("h200-x2")
MODELS = design_models()


def model_of(name: str):
    return MODELS.get(name) or load_model(name)


def test_the_configs_written_load_back_as_the_design_models(tmp_path):
    plan = designed_plan(tmp_path)
    for c in plan.cases:
        spec = load_model(c.model)
        assert spec == MODELS[spec.name]  # shape equality (the path is provenance, not shape)
    assert load_model(plan.hbm_passes[0]).vocab_size == plan.hbm_passes[1]


def test_the_design_varies_what_the_parameters_multiply():
    specs = list(MODELS.values())
    assert len({m.vocab_size for m in specs}) >= 3
    assert {m.tied_embeddings for m in specs} == {True, False}
    assert len({m.num_heads // m.num_kv_heads for m in specs}) >= 3  # MHA and two GQA ratios
    assert len({m.hidden_size for m in specs}) >= 3
    cases = design_cases()
    assert len({c.micro_batch for c in cases}) >= 3 and len({c.seq_len for c in cases}) >= 3
    assert {c.fabric for c in cases} == {"nvlink", "pcie"}
    # host floors: every strategy on two depths of one width, so per-block host time is separable
    floors = [c for c in cases if c.seq_len == HOST_FLOOR_TOKENS]
    for s in NON_HSDP:
        depths = {MODELS[c.model].num_layers for c in floors if c.strategy == s}
        widths = {MODELS[c.model].hidden_size for c in floors if c.strategy == s}
        assert len(depths) == 2 and len(widths) == 1, s


def test_every_step_time_parameter_is_pinned_and_better_conditioned_than_the_classic_plan():
    profile = default_profile()
    designed = identifiability(design_cases(), model_of, TOPO, profile)
    classic = identifiability(GPU_CALIBRATION.cases, model_of, TOPO, profile, warmup=GPU_CALIBRATION.warmup,
                              steps=GPU_CALIBRATION.steps)
    assert designed.unpinned == ()
    assert all(designed.pinned_by[p] >= 2 for p in DESIGN_PARAMS)
    assert designed.condition < classic.condition


def test_a_plan_without_a_strategy_cannot_pin_its_overlap():
    cases = tuple(c for c in design_cases() if c.strategy != "zero1")
    result = identifiability(cases, model_of, TOPO, default_profile())
    assert result.pinned_by["overlap.zero1"] == 0 and "overlap.zero1" in result.unpinned


def test_the_designed_calibration_fits_three_minutes_on_two_h200(tmp_path):
    plan = designed_plan(tmp_path)
    result = identifiability(plan.cases, model_of, TOPO, default_profile(), warmup=plan.warmup, steps=plan.steps)
    assert result.seconds + comm_sweep_seconds(plan) < 180


def test_compiled_twins_of_the_design_each_have_their_eager_run(tmp_path):
    cases = designed_plan(tmp_path, compile=True).cases
    eager = {c for c in cases if not c.compile}
    compiled = [c for c in cases if c.compile]
    assert compiled and all(replace(c, compile=False) in eager for c in compiled)


@pytest.mark.parametrize("argv", [["calibrate", "--device", "cpu", "--design"],
                                  ["calibrate", "--from-records", "x", "--design"]])
def test_design_where_it_does_not_apply_is_one_line_and_exit_2(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("topowise: error:") and "--design" in err and len(err.strip().splitlines()) == 1


def test_validation_covers_selective_checkpointing_and_replays_it_as_selective():
    """Four per-op selective cases in the GPU validation; their Run is selective, not full."""
    from topowise.calibrate.cases import GPU_VALIDATION

    selective = [c for c in GPU_VALIDATION.cases if c.activation_checkpointing == "selective"]
    assert len(selective) >= 4
    for c in selective:
        assert c.run(load_model(c.model), (0, 1)).checkpointing == "selective"


def block_shape(spec) -> tuple:
    """What a model's runs cost by, its name and depth aside: a block's widths, heads, MLP and the vocabulary."""
    return (spec.hidden_size, spec.num_heads, spec.num_kv_heads, spec.intermediate_size, spec.vocab_size,
            spec.tied_embeddings)


def test_the_designed_validation_covers_what_issue_targets_ask(tmp_path):
    """At least 30 cases, none of a block the designed calibration runs; micro-batches 1-8, both fabrics,
    every strategy, four per-op selective, and eight compiled twins with --compile."""
    from topowise.calibrate.design import designed_validation_plan
    from topowise.models.spec import load_model as load
    from topowise.run import STRATEGY_NAMES

    plan = designed_validation_plan(tmp_path, compile=True)
    eager = [c for c in plan.cases if not c.compile]
    assert len(eager) >= 30 and sum(c.compile for c in plan.cases) >= 8
    assert sum(c.activation_checkpointing == "selective" for c in plan.cases) >= 4
    assert {c.fabric for c in eager} == {"nvlink", "pcie"} and {c.strategy for c in eager} == set(STRATEGY_NAMES)
    assert min(c.micro_batch for c in eager) == 1 and max(c.micro_batch for c in eager) == 8
    calibrated = {block_shape(m) for m in MODELS.values()}
    specs = {c.model: load(c.model) for c in plan.cases}
    assert not calibrated & {block_shape(s) for s in specs.values()}
    # the two configs are the held-out one-GPU shapes of tests/data/configs, to the parameter
    root = Path(__file__).resolve().parents[2] / "tests" / "data" / "configs"
    for name in ("llama-0.95b", "llama-2.46b-gqa"):
        (written,) = [s for s in specs.values() if s.name == name]
        assert written.params == load(str(root / f"{name}.json")).params


def test_the_designed_validation_fits_five_minutes_on_two_h200(tmp_path):
    """Its training runs predicted at 144 s on 2x H200 (the classic validation's 25 cases, 104 s, took about
    three minutes); with the compiled twins 171 s plus their compiling, about 8 s a launch."""
    from topowise.calibrate.design import designed_validation_plan

    plan = designed_validation_plan(tmp_path, compile=True)
    models = {c.model: load_model(c.model) for c in plan.cases}
    result = identifiability(plan.cases, models.__getitem__, TOPO, default_profile(), warmup=plan.warmup,
                             steps=plan.steps)
    assert result.seconds + 8 * sum(c.compile for c in plan.cases) < 300


@pytest.mark.parametrize("argv", [["validate", "--device", "cpu", "--design"],
                                  ["validate", "--measured", "x.jsonl", "--design"]])
def test_validate_design_where_it_does_not_apply_is_one_line_and_exit_2(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("topowise: error:") and len(err.strip().splitlines()) == 1
