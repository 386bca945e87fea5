"""predict with tensor, pipeline and context parallelism, and with gradient accumulation (costmodel/parallel.py)."""

from dataclasses import replace

import pytest

from topowise.costmodel.predict import predict
from topowise.models.spec import load_model
from topowise.run import Run
from topowise.topology import load_topology

LLAMA70 = load_model("llama3.1-70b")
TWO_NODES = load_topology("2x hgx-h100-8+ib-ndr")
EIGHT_NODES = load_topology("8x hgx-h100-8+ib-ndr")


def run70(gpus=tuple(range(16)), **kwargs):
    args = {"model": LLAMA70, "gpus": gpus, "strategy": "zero3", "seq_len": 4096, **kwargs}
    return Run(**args)


def test_tp_inside_each_board_talks_over_nvlink_and_across_boards_over_the_network():
    inside = predict(run70(tp=8, pp=2, grad_accum=4), TWO_NODES)
    assert {c.link for c in inside.time.collectives if c.op in ("all_gather", "reduce_scatter")
            and c.unit == "block"} == {"NV"}
    # the same degrees on GPUs listed across the boards: each TP group spans both nodes
    crossed = predict(run70(gpus=tuple(g for pair in zip(range(8), range(8, 16)) for g in pair), tp=8, pp=2,
                            grad_accum=4), TWO_NODES)
    assert {c.link for c in crossed.time.collectives if c.unit == "block"} == {"NET"}
    assert crossed.step_time_s > 1.1 * inside.step_time_s


def test_more_micro_batches_shrink_the_bubble_and_interleaving_shrinks_it_further():
    few = predict(run70(tp=8, pp=2, grad_accum=2), TWO_NODES).mesh
    many = predict(run70(tp=8, pp=2, grad_accum=16), TWO_NODES).mesh
    assert many["bubble_fraction"] < few["bubble_fraction"] / 3
    plain = predict(run70(gpus=tuple(range(64)), tp=8, pp=8, grad_accum=8), EIGHT_NODES)
    inter = predict(run70(gpus=tuple(range(64)), tp=8, pp=8, grad_accum=8, pp_schedule="interleaved-1f1b",
                          virtual_stages=2), EIGHT_NODES)
    zb = predict(run70(gpus=tuple(range(64)), tp=8, pp=8, grad_accum=8, pp_schedule="zb-h1"), EIGHT_NODES)
    assert inter.mesh["bubble_s"] < 0.7 * plain.mesh["bubble_s"]
    assert zb.step_time_s < plain.step_time_s
    # torchtitan: 80 layers + embedding + output = 82 over 8, the remainder early, the ends give one back
    assert plain.mesh["layers_per_stage"] == [10, 11, 10, 10, 10, 10, 10, 9]


def test_the_first_stage_holds_the_most_activations_under_1f1b():
    pred = predict(run70(gpus=tuple(range(64)), tp=8, pp=8, grad_accum=16, seq_len=8192), EIGHT_NODES)
    assert pred.mesh["peak_stage"] == 0 and pred.memory.peak_phase.startswith("pipeline rank 0")
    # selective (per op) keeps what no recompute keeps in a flash-attention Llama block; full keeps one input a layer
    full = predict(run70(gpus=tuple(range(64)), tp=8, pp=8, grad_accum=16, seq_len=8192, checkpointing="full"),
                   EIGHT_NODES)
    assert full.memory.activations_bytes < pred.memory.activations_bytes / 4
    assert full.step_time_s > pred.step_time_s


def test_model_states_are_split_over_tp_pp_and_the_shard_group():
    one = predict(run70(gpus=tuple(range(64)), tp=8, pp=8, grad_accum=8), EIGHT_NODES)
    # 70.6B parameters over tp 8 x pp 8 = 64 parts, none sharded further (dp 1): ~1.1B a rank, fp32
    assert 4.0e9 < one.memory.params_bytes < 5.2e9
    sharded = predict(run70(gpus=tuple(range(64)), tp=8, pp=4, grad_accum=8), EIGHT_NODES)  # dp_shard 2
    assert sharded.mesh["dp_shard"] == 2
    assert sharded.memory.params_bytes == pytest.approx(one.memory.params_bytes, rel=0.15)


def test_context_parallel_splits_the_sequence_and_its_memory():
    base = run70(gpus=tuple(range(64)), tp=8, pp=4, grad_accum=8, seq_len=32768)
    with_cp = replace(base, pp=2, cp=2)
    a, b = predict(base, EIGHT_NODES), predict(with_cp, EIGHT_NODES)
    assert b.mesh["cp"] == 2 and b.tokens_per_s > 0
    # per layer, cp 2 keeps half the tokens' activations
    assert b.memory.activations_bytes / 41 < a.memory.activations_bytes / 21


@pytest.mark.parametrize("strategy", ["ddp", "zero3"])
def test_accumulation_charges_the_optimizer_once_per_step(strategy):
    topo = load_topology("hgx-h100-8")
    model = load_model("llama3.2-1b")
    one = predict(Run(model=model, gpus=tuple(range(8)), strategy=strategy), topo)
    four = predict(Run(model=model, gpus=tuple(range(8)), strategy=strategy, grad_accum=4), topo)
    assert four.mesh["grad_accum"] == 4 and one.mesh is None
    assert four.step_time_s < 4 * one.step_time_s  # one optimizer step (and DDP one all-reduce) for four
    assert four.step_time_s > 3 * one.step_time_s
    assert four.tokens_per_s > one.tokens_per_s


def test_predict_takes_the_mesh_flags_and_its_json_carries_the_mesh(capsys):
    import json

    from tests.unit.cli_run import cli_output

    code, out, _ = cli_output(["predict", "--model", "llama3.1-70b", "--topology", "8x hgx-h100-8+ib-ndr",
                               "--num-gpus", "64", "--strategy", "fsdp", "--tp", "8", "--pp", "4",
                               "--pp-schedule", "interleaved-1f1b", "--virtual-stages", "2", "--grad-accum", "8",
                               "--json"], capsys)
    assert code == 0
    mesh = json.loads(out)["mesh"]
    assert {k: mesh[k] for k in ("tp", "pp", "cp", "dp_shard", "dp_replicate", "schedule", "virtual_stages",
                                 "grad_accum")} == {"tp": 8, "pp": 4, "cp": 1, "dp_shard": 2, "dp_replicate": 1,
                                                    "schedule": "interleaved-1f1b", "virtual_stages": 2,
                                                    "grad_accum": 8}
    assert mesh["bubble_s"] > 0 and mesh["peak_stage"] == 0
    code, out, err = cli_output(["predict", "--model", "llama3.1-70b", "--topology", "8x hgx-h100-8+ib-ndr",
                                 "--num-gpus", "64", "--strategy", "fsdp", "--tp", "3"], capsys)
    assert code == 2 and err.strip() == ("topowise: error: 64 GPUs do not divide by tp 3 x pp 1 x cp 1 = 3 (they "
                                         "leave 1); the data-parallel degree would not be whole")


def test_gpt3_175b_preset_has_the_megatron_papers_parameter_count():
    # SC'21 eq. 2, 12 l h^2 (1 + 13/(12h) + (V + s)/(12 l h)), leaves out the final LayerNorm (2h)
    l, h, v, s = 96, 12288, 51200, 2048
    eq2 = 12 * l * h * h * (1 + 13 / (12 * h) + (v + s) / (12 * l * h))
    assert load_model("gpt3-175b").params == pytest.approx(eq2 + 2 * h, abs=1)


def test_megatron_table1_rows_are_predicted_within_the_published_error_band(capsys):
    """benchmarks/published_megatron.py: SC'21 Table 1 with the 2021 runs' unfused attention added is within
    12% on every row (8% mean); without it (flash attention) every row is predicted faster than that."""
    import json
    import runpy
    import statistics

    script = runpy.run_path("benchmarks/published_megatron.py")
    assert script["main"](["--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 10 and all(r["fits"] for r in rows)
    assert all(r["error"] > r["error_2021"] for r in rows)
    assert max(abs(r["error_2021"]) for r in rows) < 0.12
    assert statistics.mean(abs(r["error_2021"]) for r in rows) < 0.08
