"""The chosen plan as what people run: torchrun, Slurm, accelerate, DeepSpeed, torchtitan, Megatron-LM.

`LaunchPlan` (export/plan.py) is the chosen plan's Run and what was predicted of it; each exporter is a pure
function LaunchPlan -> str.
"""

from __future__ import annotations

from topowise.errors import UsageError
from topowise.export import accelerate, deepspeed, megatron, slurm, torchrun, torchtitan
from topowise.export.plan import LaunchPlan, PlanSettings, load_plan_file, read_plan

__all__ = ["EXPORTERS", "KINDS", "LaunchPlan", "PlanSettings", "export_notes", "load_plan_file", "read_plan", "render"]

EXPORTERS = {
    "torchrun": torchrun.torchrun_script,
    "slurm": slurm.sbatch_script,
    "accelerate": accelerate.accelerate_config,
    "deepspeed": deepspeed.deepspeed_config_json,
    "torchtitan": torchtitan.torchtitan_command,
    "megatron": megatron.megatron_command,
}
KINDS = tuple(EXPORTERS)


def render(kind: str, plan: LaunchPlan) -> str:
    """The plan as `kind` (one of KINDS) text."""
    if kind not in EXPORTERS:
        raise UsageError(f"unknown export {kind!r}; valid: {', '.join(KINDS)}")
    if plan.num_nodes > 1 and kind in ("accelerate", "torchtitan"):
        raise UsageError(f"a plan across {plan.num_nodes} nodes exports as torchrun (one command per node), "
                         f"slurm (sbatch --nodes) or deepspeed (its config); not yet as {kind}")
    check_engine(kind, plan)
    check_mesh(kind, plan)
    return EXPORTERS[kind](plan)


def export_notes(kind: str, plan: LaunchPlan) -> tuple[str, ...]:
    """What the export's text cannot say, for whoever runs it: DeepSpeed's config is JSON, with no room for the
    plan's summary and warnings that the other exports carry as comments, and it cannot turn on activation
    checkpointing (the model does) nor say that the step was predicted as FSDP2 runs it."""
    if kind != "deepspeed":
        return ()
    notes = [f"topowise plan: {plan.summary()}", *(f"warning: {w}" for w in plan.warnings)]
    if plan.run.checkpointing == "full":
        notes.append("the plan fits with full activation checkpointing, which a DeepSpeed config does not turn on: "
                     "enable it in the model (e.g. gradient_checkpointing_enable(), or "
                     "deepspeed.checkpointing.checkpoint around each block)")
    elif plan.run.checkpointing == "selective":
        option = plan.run.selective_ac_option
        words = plan.run.checkpoint_words
        how = ("torch.utils.checkpoint with create_selective_checkpoint_contexts around each block" if option == "op"
               else "a checkpoint around those blocks")
        notes.append(f"the plan fits with {words} activation checkpointing, which a DeepSpeed config does not turn "
                     f"on: enable it in the model ({how}; gradient_checkpointing_enable() checkpoints every block "
                     "whole: less memory, more recompute than planned)")
    if plan.run.engine != "deepspeed":
        notes.append("the step was predicted as PyTorch's FSDP2 runs this strategy; plan --engine deepspeed "
                     "predicts DeepSpeed's ZeRO (its own host work and buckets)")
    return tuple(notes)


def check_engine(kind: str, plan: LaunchPlan) -> None:
    """A plan predicted as DeepSpeed runs ZeRO exports only to what runs DeepSpeed: its config, accelerate's
    DeepSpeed plugin, or a launcher (torchrun, slurm) that starts your DeepSpeed script. torchtitan runs
    FSDP2 only; accelerate's plugin settings have no ZeRO++ hpZ (hsdp)."""
    if plan.run.engine != "deepspeed":
        return
    if kind == "torchtitan":
        raise UsageError(f"this {plan.run.strategy} plan was predicted as DeepSpeed runs it (--engine deepspeed), and "
                         "torchtitan runs FSDP2, not DeepSpeed: export deepspeed or accelerate, or plan with "
                         "--engine pytorch for torchtitan")
    if kind == "accelerate" and plan.spec.replicated:
        raise UsageError("this hsdp plan was predicted as DeepSpeed runs it (ZeRO-3 with ZeRO++ hpZ), which "
                         "accelerate's DeepSpeed settings cannot express: export deepspeed --out ds.json and give "
                         "accelerate `deepspeed_config_file: ds.json`, or plan with --engine pytorch")


def check_mesh(kind: str, plan: LaunchPlan) -> None:
    """DeepSpeed's config and accelerate's settings express data parallelism alone: a plan with tp, pp or cp above 1
    is refused in one line (torchtitan and Megatron-LM run it; torchrun and Slurm start your script)."""
    run = plan.run
    if kind in ("deepspeed", "accelerate") and run.has_mesh:
        raise UsageError(f"this plan runs tp {run.tp} x pp {run.pp} x cp {run.cp}, which a {kind} config cannot "
                         "express: export torchtitan or megatron")
