"""Planner: candidates are island-aware, the search ranks and prunes honestly, the words match the numbers."""

import json

import pytest

from topowise.cli.main import main
from topowise.costmodel.predict import predict
from topowise.errors import UsageError
from topowise.models.spec import load_model
from topowise.planner.candidates import (
    enumerate_candidates,
    gpu_counts,
    placements,
    shard_group_sizes,
    strategy_options,
)
from topowise.planner.explain import all_groups, gpu_list, param_count
from topowise.planner.search import plan
from topowise.run import Run
from topowise.topology.presets import load_preset

NVL = load_preset("h100-nvl-8")
HGX = load_preset("hgx-h100-8")


# --- candidates ----------------------------------------------------------------------------------
def test_gpu_counts_are_islands_powers_of_two_and_the_node():
    assert gpu_counts(NVL) == (1, 2, 4, 8)
    assert gpu_counts(load_preset("h200-x2")) == (1, 2)
    assert gpu_counts(NVL, 3) == (3,)


def test_placements_are_island_aware_not_all_subsets():
    two = dict(placements(NVL, 2))
    assert two["best"] == (0, 1)  # a bridged pair
    assert len(NVL.islands_spanned(two["spread"])) == 2  # the across-islands alternative
    assert len(placements(NVL, 4)) <= 3
    # on an NVSwitch board every placement is the same: one candidate, not C(8, k)
    assert len(placements(HGX, 4)) == 1


def test_hsdp_shard_sizes_divide_the_count():
    assert shard_group_sizes(NVL, 8) == (2, 4)
    assert shard_group_sizes(NVL, 2) == ()
    assert shard_group_sizes(load_preset("h200-nvl-8"), 8) == (2, 4)
    assert strategy_options(NVL, 1) == (("ddp", None),)
    assert ("hsdp", 2) in strategy_options(NVL, 4)


def test_candidates_cover_the_grid_with_micro_batches_ascending():
    cands = enumerate_candidates(NVL, load_model("llama3.2-1b"), num_gpus=2, micro_batches=(4, 1))
    runs = [c.run for c in cands]
    assert {r.micro_batch for r in runs} == {1, 4}
    assert {r.checkpointing for r in runs} == {"none", "selective", "full"}
    assert {r.strategy for r in runs} == {"ddp", "zero1", "zero2", "zero3"}
    assert {r.gpus for r in runs} == {(0, 1), (0, 2)}
    for a, b in zip(cands, cands[1:]):
        if a.group_key == b.group_key:
            assert a.run.micro_batch < b.run.micro_batch


def test_candidates_are_runs_of_the_asked_model_sequence_and_engine():
    model = load_model("llama3.2-1b")
    cands = enumerate_candidates(NVL, model, seq_len=2048, fabric="pcie", engine="deepspeed", num_gpus=2)
    assert {(c.run.model, c.run.seq_len, c.run.fabric) for c in cands} == {(model, 2048, "pcie")}
    assert {c.run.engine for c in cands if c.run.strategy != "ddp"} == {"deepspeed"}
    assert {c.run.engine for c in cands if c.run.strategy == "ddp"} == {"pytorch"}  # DeepSpeed's stage 0: not modelled


def test_a_micro_batch_below_one_is_refused_by_the_run():
    with pytest.raises(UsageError, match="--micro-batch must be at least 1, not 0"):
        plan(load_model("llama3.2-1b"), NVL, num_gpus=2, micro_batches=(0,))


# --- search --------------------------------------------------------------------------------------
def test_two_gpus_on_nvl_pick_a_bridged_pair():
    result = plan(load_model("llama3.2-1b"), NVL, num_gpus=2)
    best = result.best
    assert best.gpus == (0, 1) and NVL.link(0, 1).is_nvlink
    across = [p for p in result.ranked if p.gpus == (0, 2)]
    assert across and all(p.prediction.tokens_per_s < best.prediction.tokens_per_s for p in across)
    assert any("one NVLink island (0,1)" in n for n in result.notes)


def test_plans_ranked_by_global_tokens_per_s_and_all_fit():
    result = plan(load_model("llama3.2-1b"), NVL, top=5)
    tps = [p.prediction.tokens_per_s for p in result.plans]
    assert tps == sorted(tps, reverse=True) and len(tps) == 5
    assert all(p.prediction.fits for p in result.plans)
    assert result.feasible + len(result.infeasible) == result.evaluated
    # one row per distinct (strategy, shard groups, GPUs)
    keys = [(p.strategy, p.shard_group_size, p.gpus) for p in result.ranked]
    assert len(keys) == len(set(keys))


def test_infeasible_reason_states_the_memory():
    result = plan(load_model("llama3.1-8b"), NVL, num_gpus=2)
    ddp = [i for i in result.infeasible if i.run.strategy == "ddp"]
    assert ddp
    need = ddp[0].peak_memory_bytes / 2**30
    assert ddp[0].reason.startswith(f"needs {need:.1f} GiB, the GPU has 87.5 GiB")
    assert "over by" in ddp[0].reason
    # ddp cannot hold llama3.1-8b's training state on 2x 94 GB; zero3 can, and the note says so
    assert result.best.strategy in ("zero3", "zero2")
    assert any(n.startswith("ddp does not fit on 2 GPUs") for n in result.notes)


def test_micro_batch_pruning_stops_at_the_first_miss():
    result = plan(load_model("llama3.1-8b"), NVL, num_gpus=2)
    for miss in result.infeasible:
        bigger = [p for p in result.ranked if (p.strategy, p.gpus, p.shard_group_size, p.run.checkpointing)
                  == (miss.run.strategy, miss.run.gpus, miss.run.shard_group_size, miss.run.checkpointing)
                  and p.run.micro_batch > miss.run.micro_batch]
        assert not bigger


def test_nothing_fits_gives_a_suggestion_with_memory():
    result = plan(load_model("llama3.1-70b"), NVL)
    assert not result.plans and result.infeasible
    assert result.suggestion and "GiB" in result.suggestion and "zero3" in result.suggestion


def test_suggestion_names_more_gpus_when_they_would_fit():
    result = plan(load_model("llama3.1-8b"), NVL, num_gpus=1)
    assert not result.plans
    assert "More GPUs would" in result.suggestion


def test_suggestion_names_a_smaller_micro_batch_first():
    result = plan(load_model("llama3.1-8b"), NVL, num_gpus=2, micro_batches=(64,))
    assert not result.plans
    assert "smaller micro-batch would fit" in result.suggestion


def test_why_draws_on_the_numbers():
    result = plan(load_model("llama3.2-1b"), NVL, num_gpus=2)
    best = result.best
    assert f"{best.prediction.tokens_per_s:,.0f} tokens/s" in best.why
    second = result.plans[1]
    ratio = round(100 * second.prediction.tokens_per_s / best.prediction.tokens_per_s)
    assert f"{ratio}% of the throughput" in second.why


def test_why_names_the_host_where_the_gpu_waits_for_it():
    # qwen2.5-0.5b on two H200s: the default profile's host term makes zero3 wait for Python (FSDP2's
    # per-block hooks cost the host about twice DDP's), while ddp's step is the GPU's
    result = plan(load_model("qwen2.5-0.5b"), load_preset("h200-x2"), num_gpus=2, micro_batches=(2,))
    by = {p.strategy: p for p in result.plans if len(p.gpus) == 2}
    zero3, ddp = by["zero3"], by["ddp"]
    wait = zero3.prediction.time.host_wait_s / zero3.prediction.step_time_s
    assert ddp.prediction.time.host_wait_s == 0 and wait >= 0.03
    assert f"the GPU waits {round(100 * wait)}% of its step for the host" in zero3.why
    assert "for the host" not in ddp.why


@pytest.mark.parametrize("kwargs,match", [
    ({"num_gpus": 9}, "has 8 GPUs"), ({"num_gpus": 0}, "has 8 GPUs"), ({"micro_batches": (0,)}, "micro-batch"),
    ({"seq_len": 0}, "sequence length"), ({"top": 0}, "--top"), ({"fabric": "ib"}, "fabric"),
])
def test_bad_plan_arguments(kwargs, match):
    with pytest.raises(UsageError, match=match):
        plan(load_model("tiny"), NVL, **kwargs)


def test_plan_result_json_keys():
    data = plan(load_model("llama3.1-8b"), NVL, num_gpus=2).to_dict()
    assert set(data) >= {"plans", "infeasible", "suggestion"}
    assert set(data["plans"][0]) >= {"strategy", "gpus", "micro_batch", "activation_checkpointing", "step_time_s",
                                     "tokens_per_s", "peak_memory_bytes", "fits", "why"}
    assert set(data["infeasible"][0]) >= {"strategy", "gpus", "micro_batch", "activation_checkpointing", "reason"}
    json.dumps(data)


def test_words_for_gpu_sets():
    assert gpu_list((0, 1, 2, 3)) == "0-3" and gpu_list((0, 2)) == "0,2"
    # every shard group is named: a cut list could not be told from another
    assert all_groups(tuple(range(8)), 2) == "{0,1},{2,3},{4,5},{6,7}"
    assert all_groups((0, 2, 4, 6), 2) == "{0,2},{4,6}" and all_groups(tuple(range(16)), 8) == "{0-7},{8-15}"


@pytest.mark.parametrize("params,text", [(8.03e9, "8.03B"), (70.6e9, "70.60B"), (494e6, "494.00M"),
                                         (139_584, "139.58K"), (900, "900")])
def test_parameter_counts_never_read_as_zero(params, text):
    assert param_count(params) == text


# --- the command line ----------------------------------------------------------------------------
def test_plan_cli_json(capsys):
    assert main(["plan", "--model", "llama3.2-1b", "--topology", "h100-nvl-8", "--num-gpus", "2", "--top", "2",
                 "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["plans"][0]["gpus"] == [0, 1] and len(data["plans"]) == 2


def test_plan_cli_table_and_export(capsys):
    assert main(["plan", "--model", "llama3.2-1b", "--topology", "h100-nvl-8", "--num-gpus", "2",
                 "--export", "torchrun"]) == 0
    out = capsys.readouterr().out
    assert "CUDA_VISIBLE_DEVICES=0,1" in out and "--nproc-per-node=2" in out


def test_plan_cli_save_plan_and_out(tmp_path, capsys):
    saved, out = tmp_path / "plan.json", tmp_path / "ds.json"
    assert main(["plan", "--model", "llama3.2-1b", "--topology", "h100-nvl-8", "--num-gpus", "2",
                 "--save-plan", str(saved), "--export", "deepspeed", "--out", str(out), "--json"]) == 0
    plan_file = json.loads(saved.read_text())
    assert plan_file["format"] == "topowise.plan" and plan_file["version"] == 1
    assert plan_file["model"] == "llama3.2-1b" and plan_file["topology"] == "h100-nvl-8"
    assert plan_file["nproc"] == 2 and plan_file["env"] == {"CUDA_VISIBLE_DEVICES": "0,1"}
    assert "zero_optimization" in json.loads(out.read_text())


@pytest.mark.parametrize("argv,match", [
    (["--model", "no-such", "--topology", "h100-nvl-8"], "unknown model"),
    (["--model", "tiny", "--topology", "no-such"], "unknown topology"),
    (["--model", "tiny", "--topology", "h100-nvl-8", "--num-gpus", "16"], "--num-gpus 16"),
    (["--model", "tiny", "--topology", "h100-nvl-8", "--micro-batch", "0"], "--micro-batch"),
    (["--model", "tiny", "--topology", "h100-nvl-8", "--micro-batch", "two"], "--micro-batch"),
    (["--model", "tiny", "--topology", "h100-nvl-8", "--seq-len", "-1"], "--seq-len"),
    (["--model", "llama3.1-70b", "--topology", "h100-nvl-8", "--export", "slurm"], "nothing fits"),
])
def test_plan_cli_bad_input_is_one_line_exit_2(argv, match, capsys):
    assert main(["plan", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("topowise: error: ") and match in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_a_placement_as_fast_as_a_variant_of_a_shown_choice_gets_no_row():
    # On 4 of 8 H100 NVL, zero3 on 0,2,4,6 (four bridged pairs, every hop over PCIe) is predicted exactly as fast
    # as zero3 on 0-3 (two pairs, PCIe between) at each micro-batch and checkpointing: the ring's slowest link
    # is PCIe either way. 0-3 is shown (at its fastest variant); 0,2,4,6 must not come back as a choice of its own.
    model, topo = load_model("llama3.1-8b"), load_preset("h100-nvl-8")
    result = plan(model, topo, num_gpus=4, seq_len=4096, top=10)
    zero3 = [p.gpus for p in result.ranked if p.strategy == "zero3"]
    assert zero3 == [(0, 1, 2, 3)]
    spread, packed = (predict(Run(model=model, gpus=gpus, strategy="zero3", micro_batch=4, seq_len=4096,
                                  checkpointing="selective"), topo) for gpus in ((0, 2, 4, 6), (0, 1, 2, 3)))
    assert spread.fits and spread.tokens_per_s == packed.tokens_per_s  # the premise: the model cannot tell them apart


def test_plan_rows_carry_every_setting_of_their_run():
    """A plan row and an infeasible row say their run's settings as Run.to_dict() does (the model, sequence,
    fabric and engine once, in the result): a setting Run gains reaches `plan --json` with no change there."""
    result = plan(load_model("llama3.1-8b"), NVL, num_gpus=2)
    said_once = {"model", "seq_len", "fabric", "engine"}
    for row, run in [(p.to_dict(), p.run) for p in result.plans] + [(i.to_dict(), i.run) for i in result.infeasible]:
        settings = {k: v for k, v in run.to_dict().items() if k not in said_once}
        assert {k: row[k] for k in settings} == settings
    data = result.to_dict()
    assert (data["model"], data["seq_len"], data["fabric"], data["engine"]) == ("llama3.1-8b", 4096, "nvlink",
                                                                               "pytorch")
