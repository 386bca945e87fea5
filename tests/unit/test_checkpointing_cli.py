"""The checkpointing mode travels from the command line through the prediction, the plan and its exports."""

from __future__ import annotations

import json

import pytest

from topowise.cli.main import main
from topowise.export import LaunchPlan, render
from topowise.models.spec import load_model
from topowise.planner.search import plan
from topowise.run import Run
from topowise.topology import load_topology


def predict_json(capsys, *extra) -> dict:
    assert main(["predict", "--model", "llama3.1-8b", "--topology", "hgx-h100-8", "--num-gpus", "8",
                 "--strategy", "zero3", "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_predict_takes_each_mode_and_says_which(capsys):
    none, selective, full = (predict_json(capsys, "--checkpointing", m) for m in ("none", "selective", "full"))
    assert [d["checkpointing"] for d in (none, selective, full)] == ["none", "selective", "full"]
    assert [d["activation_checkpointing"] for d in (none, selective, full)] == [False, True, True]
    # selective keeps more than full and less than none; it recomputes less than full
    peaks = [d["memory"]["peak_bytes"] for d in (none, selective, full)]
    assert peaks[0] > peaks[1] > peaks[2]
    assert none["step_time_s"] < selective["step_time_s"] < full["step_time_s"]
    assert predict_json(capsys, "--activation-checkpointing")["checkpointing"] == "full"


def test_predict_refuses_two_modes_at_once(capsys):
    assert main(["predict", "--model", "llama3.1-8b", "--topology", "hgx-h100-8", "--num-gpus", "8",
                 "--strategy", "zero3", "--checkpointing", "selective", "--activation-checkpointing"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("topowise: error:") and "--checkpointing full" in err


@pytest.fixture(scope="module")
def selective_plan():
    """A selective plan: llama3.1-8b on 8 H100s at 8192 tokens, where zero2 fits only with checkpointing."""
    topo = load_topology("hgx-h100-8")
    result = plan(load_model("llama3.1-8b"), topo, num_gpus=8, micro_batches=(1,), seq_len=8192)
    best = next(p for p in result.ranked if p.run.checkpointing == "selective")
    return result, best, topo


def test_plan_json_and_launch_plan_carry_the_mode(selective_plan, tmp_path):
    result, best, topo = selective_plan
    assert best.to_dict()["checkpointing"] == "selective" and best.to_dict()["activation_checkpointing"] is True
    launch = LaunchPlan.from_plan(best, result, topo)
    assert launch.run.checkpointing == "selective"
    path = tmp_path / "plan.json"
    path.write_text(launch.to_json())
    again = LaunchPlan.from_dict(json.loads(path.read_text()))
    assert again == launch
    toml = render("torchtitan", again)
    assert "--activation_checkpoint.mode selective" in toml
    option = best.prediction.run.selective_ac_option  # per op or every 2nd block: the plan's own
    assert launch.run.selective_ac_option == option and f"--activation_checkpoint.selective_ac_option {option}" in toml


def test_a_plan_file_written_before_the_modes_reads_as_full_or_none():
    written = LaunchPlan(run=Run(load_model("tiny"), (0, 1), "zero3", micro_batch=1, seq_len=8), topology="t").to_dict()
    for flag, mode in ((True, "full"), (False, "none")):
        old = dict(written, plan={k: v for k, v in written["plan"].items() if k not in ("checkpointing",
                                                                                      "selective_ac_option")})
        old["plan"]["activation_checkpointing"] = flag
        assert LaunchPlan.from_dict(old).run.checkpointing == mode


def test_the_plan_keeps_the_profile_it_ranked_with():
    from topowise.costmodel.profile import default_profile

    profile = default_profile()
    result = plan(load_model("llama3.2-1b"), load_topology("2x hgx-h100-8+ib-ndr"), num_gpus=16, profile=profile,
                  micro_batches=(1,), top=1)
    assert result.profile is profile
