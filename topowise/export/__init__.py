"""The chosen plan as what people run: torchrun, Slurm, accelerate, DeepSpeed, torchtitan.

`LaunchPlan` (export/plan.py) is the plan reduced to plain values; each exporter is a pure function
LaunchPlan -> str.
"""

from __future__ import annotations

from topowise.errors import UsageError
from topowise.export import accelerate, deepspeed, slurm, torchrun, torchtitan
from topowise.export.plan import LaunchPlan, load_plan_file

__all__ = ["EXPORTERS", "KINDS", "LaunchPlan", "load_plan_file", "render"]

EXPORTERS = {
    "torchrun": torchrun.torchrun_script,
    "slurm": slurm.sbatch_script,
    "accelerate": accelerate.accelerate_config,
    "deepspeed": deepspeed.deepspeed_config_json,
    "torchtitan": torchtitan.torchtitan_command,
}
KINDS = tuple(EXPORTERS)


def render(kind: str, plan: LaunchPlan) -> str:
    """The plan as `kind` (one of KINDS) text."""
    if kind not in EXPORTERS:
        raise UsageError(f"unknown export {kind!r}; valid: {', '.join(KINDS)}")
    if plan.num_nodes > 1 and kind in ("accelerate", "torchtitan"):
        raise UsageError(f"a plan across {plan.num_nodes} nodes exports as torchrun (one command per node), "
                         f"slurm (sbatch --nodes) or deepspeed (its config); not yet as {kind}")
    return EXPORTERS[kind](plan)
