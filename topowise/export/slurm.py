"""Slurm: an sbatch script, srun starting one torchrun per node with a c10d rendezvous.

When the plan uses a subset of the node, the script asks for the whole node (--exclusive) and pins
the planned GPUs with CUDA_VISIBLE_DEVICES: `--gpus-per-node=K` alone lets Slurm hand out any K
GPUs, which may sit in different NVLink islands.
"""

from __future__ import annotations

from topowise.export import multinode
from topowise.export.plan import LaunchPlan
from topowise.export.torchrun import script_args, settings_note


def sbatch_script(plan: LaunchPlan, command=("train.py",), job_name: str | None = None) -> str:
    """One script for one node or many: --nodes N, one srun task per node, each a torchrun."""
    subset = plan.node_gpus > plan.nproc_per_node
    notes = list(multinode.network_notes(plan.network, plan.env)) + plan.nccl_notes if plan.num_nodes > 1 else []
    notes.append(settings_note(plan))
    if subset:
        notes.append(f"the whole node is held so that these {plan.nproc_per_node} GPUs are the ones the plan chose")
    return multinode.sbatch_multinode(
        plan.num_nodes, plan.node_gpus if subset else plan.nproc_per_node, plan.nproc_per_node,
        script_args(command), {**plan.env, **plan.settings_env}, job_name or f"topowise-{plan.run.strategy}",
        plan.summary(), plan.warnings,
        notes, exclusive=subset)
