"""The torchrun and Slurm exports carry the chosen strategy, micro-batch and checkpointing as TOPOWISE_*
variables, and `topowise.export.read_plan()` gives them back to the training script."""

from __future__ import annotations

import shlex

import pytest

from topowise.cli.main import main
from topowise.errors import UsageError
from topowise.export import LaunchPlan, read_plan
from topowise.export.slurm import sbatch_script
from topowise.export.torchrun import torchrun_script
from topowise.models.spec import load_model
from topowise.run import Run


def _plan(strategy="zero2", micro_batch=3, checkpointing="selective", gpus=(0, 1), path="") -> LaunchPlan:
    run = Run(model=load_model("llama3.1-8b"), gpus=gpus, strategy=strategy, micro_batch=micro_batch,
              seq_len=4096, checkpointing=checkpointing)
    return LaunchPlan(run=run, topology="h100-nvl-8", tokens_per_s=1000.0, node_gpus=8, plan_path=path)


def _assignments(line: str) -> dict[str, str]:
    words = shlex.split(line)
    return dict(w.split("=", 1) for w in words[:words.index("torchrun")])


def test_torchrun_export_sets_what_read_plan_reads():
    text = torchrun_script(_plan())
    env = _assignments(text.splitlines()[-1])
    settings = read_plan(env)
    assert (settings.strategy, settings.micro_batch, settings.checkpointing) == ("zero2", 3, "selective")
    assert settings.plan is None and "TOPOWISE_PLAN" not in env
    assert "--save-plan FILE" in text  # says how to carry the whole plan


def test_slurm_export_exports_the_settings_and_the_saved_plan(tmp_path):
    saved = tmp_path / "plan.json"
    plan = _plan(strategy="zero3", micro_batch=1, checkpointing="full").with_path(str(saved))
    saved.write_text(plan.to_json())
    text = sbatch_script(plan)
    env = {}
    for line in text.splitlines():
        if line.startswith("export TOPOWISE_"):
            key, _, value = line[len("export "):].partition("=")
            env[key] = shlex.split(value)[0]
    assert env["TOPOWISE_PLAN"] == str(saved)
    settings = read_plan(env)
    assert (settings.strategy, settings.micro_batch, settings.checkpointing) == ("zero3", 1, "full")
    assert settings.plan.run.gpus == (0, 1)


def test_multinode_torchrun_export_carries_them_on_every_node():
    run = Run(model=load_model("llama3.1-8b"), gpus=tuple(range(16)), strategy="hsdp", micro_batch=2, seq_len=4096,
              shard_group_size=8)
    plan = LaunchPlan(run=run, topology="2x hgx-h100-8+ib-ndr", node_gpus=8, num_nodes=2, network="ib-ndr")
    commands = [line for line in torchrun_script(plan).splitlines() if not line.startswith("#")]
    assert len(commands) == 2
    assert all("TOPOWISE_STRATEGY=hsdp" in c and "TOPOWISE_MICRO_BATCH=2" in c for c in commands)


def test_plan_file_alone_is_enough_and_a_variable_wins_over_it(tmp_path):
    saved = tmp_path / "plan.json"
    saved.write_text(_plan(micro_batch=4).to_json())
    assert read_plan({"TOPOWISE_PLAN": str(saved)}).micro_batch == 4
    changed = read_plan({"TOPOWISE_PLAN": str(saved), "TOPOWISE_MICRO_BATCH": "8"})
    assert changed.micro_batch == 8 and changed.plan.run.micro_batch == 4


def test_nothing_set_reads_as_no_plan():
    assert read_plan({"HOME": "/root"}) is None


@pytest.mark.parametrize("env,words", [
    ({"TOPOWISE_STRATEGY": "zero3"}, "without TOPOWISE_MICRO_BATCH"),
    ({"TOPOWISE_STRATEGY": "zero9", "TOPOWISE_MICRO_BATCH": "2", "TOPOWISE_CHECKPOINTING": "none"}, "zero9"),
    ({"TOPOWISE_STRATEGY": "ddp", "TOPOWISE_MICRO_BATCH": "0", "TOPOWISE_CHECKPOINTING": "none"}, "positive"),
    ({"TOPOWISE_STRATEGY": "ddp", "TOPOWISE_MICRO_BATCH": "\u00b2", "TOPOWISE_CHECKPOINTING": "none"}, "positive"),
    ({"TOPOWISE_STRATEGY": "ddp", "TOPOWISE_MICRO_BATCH": "2", "TOPOWISE_CHECKPOINTING": "some"}, "some"),
    ({"TOPOWISE_PLAN": "/nonexistent/plan.json"}, "cannot read"),
])
def test_bad_settings_are_one_clear_error(env, words):
    with pytest.raises(UsageError, match=words):
        read_plan(env)


def test_fsdp_alias_reads_as_zero3():
    env = {"TOPOWISE_STRATEGY": "fsdp", "TOPOWISE_MICRO_BATCH": "1", "TOPOWISE_CHECKPOINTING": "none"}
    assert read_plan(env).strategy == "zero3"


def test_plan_export_with_save_plan_names_the_file(tmp_path, capsys):
    saved = tmp_path / "p.json"
    assert main(["plan", "--model", "llama3.2-1b", "--topology", "h100-nvl-8", "--num-gpus", "2", "--top", "1",
                 "--export", "torchrun", "--save-plan", str(saved)]) == 0
    line = next(w for w in capsys.readouterr().out.splitlines() if "torchrun" in w and not w.startswith("#"))
    env = _assignments(line)
    assert env["TOPOWISE_PLAN"] == str(saved)
    settings = read_plan(env)
    assert settings.plan.run.strategy == settings.strategy
