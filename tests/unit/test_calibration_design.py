"""The designed calibration: its shapes vary what each fitted parameter multiplies, every step-time
parameter is pinned by runs that move with it, and it fits the time budget (calibrate/design.py)."""

from __future__ import annotations

from dataclasses import replace

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
