"""NCCL_ALGO advice: given where the model expects ring or tree to beat NCCL's own choice by more than
5% on a plan's all-reduces across nodes, withheld (with the reason) otherwise; plan and the exports
carry it."""

from __future__ import annotations

import json
from functools import cache

import pytest

from topowise import nccl_advice
from topowise.cli.main import main
from topowise.costmodel import network
from topowise.costmodel.predict import predict
from topowise.export import LaunchPlan, render
from topowise.models.spec import load_model
from topowise.run import Run
from topowise.topology import load_topology

# A100 boards have no NVLink SHARP, so NCCL chooses between ring and tree alone there (NVLS-Tree on
# Hopper boards: test_nvls_tree.py)
ONE_RACK = "4x dgx-a100-8+ib-hdr"
TWO_REGIONS = "2x (2x dgx-a100-8+ib-hdr) + wan-100gbit-30ms-aes-gcm"
TWO_REGIONS_HOPPER = "2x (2x hgx-h100-8+ib-ndr) + wan-100gbit-30ms-aes-gcm"


@cache
def _pred(topology: str, strategy: str = "ddp", model: str = "llama3.2-1b"):
    topo = load_topology(topology)
    shard = topo.gpus_per_node if strategy == "hsdp" else None
    return predict(Run(load_model(model), tuple(range(topo.num_gpus)), strategy, shard_group_size=shard), topo), topo


def test_withheld_where_the_model_knows_no_more_than_nccls_tuner():
    pred, topo = _pred(ONE_RACK)
    advice = nccl_advice.advise(pred, topo)
    assert advice.algorithm == "" and advice.env == {} and advice.gain == 0.0
    assert advice.calls > 1 and advice.nccl_s == pytest.approx(min(advice.forced_s.values()))
    assert advice.reason.startswith("NCCL_ALGO left unset") and "agrees with NCCL's tuner" in advice.reason


def test_given_where_wan_latency_makes_nccls_pick_the_slower():
    pred, topo = _pred(TWO_REGIONS)
    advice = nccl_advice.advise(pred, topo)
    assert advice.algorithm == "tree" and advice.env == {"NCCL_ALGO": "allreduce:tree"}
    assert advice.gain > nccl_advice.THRESHOLD
    assert advice.gain == pytest.approx(1 - advice.forced_s["tree"] / advice.nccl_s)
    # NCCL's tuner, blind to the WAN, picks ring for these sizes; the model with the WAN prices ring higher
    group = nccl_advice.allreduce_group(pred, topo)
    assert nccl_advice.tuner_choice("all_reduce", 2**26, group, topo, nccl_advice.default_profile()) == "ring"
    assert "NCCL's tuner picks ring" in advice.reason and "2.24.3" in advice.reason


def test_the_tuner_view_drops_only_what_nccl_does_not_know():
    _, topo = _pred(TWO_REGIONS_HOPPER)
    gpus = tuple(range(topo.num_gpus))
    group = network.describe_group(gpus, topo)
    plain = nccl_advice.tuner_group(group, nccl_advice.default_profile())
    kept = ("ranks", "nodes", "per_node", "intra_gbps", "intra_hw", "net_gbps", "intra_link")  # NCCL sees these
    assert [getattr(plain, k) for k in kept] == [getattr(group, k) for k in kept]
    assert plain.regions == 1 and plain.wan_lat_us == 0.0 and plain.ring_extra_us == 0.0
    # NVLS-Tree stays (NCCL detects the NVSwitch), priced without the WAN's limit
    assert plain.nvls_tree_gbps > group.nvls_tree_gbps > 0


def _shifted(extra_ring_s: float):
    """A model that agrees with NCCL's tuner except for extra seconds on every ring call."""
    def time_fn(op, nbytes, gpus, topo, profile, algorithm):
        base = nccl_advice.model_time_s(op, nbytes, gpus, topo, profile, algorithm)
        return base + (extra_ring_s if algorithm == "ring" else 0.0)
    return time_fn


def test_rule_compares_forced_against_nccls_own_choice_at_five_percent():
    pred, topo = _pred(ONE_RACK)
    base = nccl_advice.advise(pred, topo)
    tree_gap = base.forced_s["tree"] - base.nccl_s  # tree is slower here; ring costs extra until tree wins
    calls = base.calls
    just_under = nccl_advice.advise(pred, topo, time_fn=_shifted((tree_gap + 0.04 * (base.nccl_s + tree_gap)) /
                                                                 calls))
    assert just_under.algorithm == "" and 0 < just_under.gain <= nccl_advice.THRESHOLD
    assert "under the 5%" in just_under.reason
    over = nccl_advice.advise(pred, topo, time_fn=_shifted((tree_gap + 0.2 * (base.nccl_s + tree_gap)) / calls))
    assert over.algorithm == "tree" and over.gain > nccl_advice.THRESHOLD


def test_no_allreduce_across_nodes_leaves_nccl_alone():
    pred, topo = _pred(ONE_RACK, "zero2")
    advice = nccl_advice.advise(pred, topo)
    assert advice.algorithm == "" and advice.calls == 0 and "no all-reduce" in advice.reason


def test_hsdp_advises_on_its_replica_group():
    pred, topo = _pred(ONE_RACK, "hsdp")
    group = nccl_advice.allreduce_group(pred, topo)
    assert group == (0, 8, 16, 24)


# --- plan and exports ---------------------------------------------------------------------------------
def _launch(**kw) -> LaunchPlan:
    gpus = kw.pop("gpus", tuple(range(32)))
    base = {"run": Run(load_model("llama3.2-1b"), gpus, "ddp"), "topology": TWO_REGIONS, "node_gpus": 8,
            "num_nodes": 4, "network": "ib-ndr"}
    return LaunchPlan(**{**base, **kw})


@pytest.mark.parametrize("kind", ["torchrun", "slurm"])
def test_exports_set_nccl_algo_when_advised(kind):
    text = render(kind, _launch(nccl_algo="tree", nccl_reason="NCCL_ALGO=allreduce:tree: because"))
    assert "NCCL_ALGO=allreduce:tree" in text.replace("'", "")
    assert "# NCCL_ALGO=allreduce:tree: because" in text


@pytest.mark.parametrize("kind", ["torchrun", "slurm"])
def test_exports_leave_nccl_alone_and_say_why(kind):
    text = render(kind, _launch(nccl_reason="NCCL_ALGO left unset: the model agrees"))
    assert "# NCCL_ALGO left unset: the model agrees" in text
    assert "NCCL_ALGO=" not in text.replace("# NCCL_ALGO left unset", "")


def test_single_node_exports_say_nothing_of_nccl_algo():
    text = render("torchrun", _launch(topology="hgx-h100-8", gpus=(0, 1), num_nodes=1, network=""))
    assert "NCCL_ALGO" not in text


def test_saved_plan_keeps_the_advice():
    plan = _launch(nccl_algo="ring", nccl_reason="why")
    back = LaunchPlan.from_dict(json.loads(plan.to_json()))
    assert (back.nccl_algo, back.nccl_reason, back.env["NCCL_ALGO"]) == ("ring", "why", "allreduce:ring")


def test_from_plan_computes_the_advice_for_a_plan_across_nodes():
    from topowise.planner.search import plan

    topo = load_topology(TWO_REGIONS)
    result = plan(load_model("llama3.2-1b"), topo, num_gpus=32, top=1)
    best = result.best
    launch = LaunchPlan.from_plan(best, result, topo)
    advice = nccl_advice.advise(best.prediction, topo)
    assert launch.nccl_algo == advice.algorithm and launch.nccl_reason == advice.reason
    assert any(n == advice.reason for n in result.notes)  # plan's notes say it either way
    assert (advice.reason in best.why) == bool(advice.algorithm)  # the best plan's why says it when advised


def test_plan_cli_export_carries_the_advice(capsys):
    assert main(["plan", "--model", "llama3.2-1b", "--topology", ONE_RACK, "--num-gpus", "32", "--top", "1",
                 "--export", "slurm"]) == 0
    out = capsys.readouterr().out
    assert "# NCCL_ALGO left unset" in out and "export NCCL_ALGO" not in out
