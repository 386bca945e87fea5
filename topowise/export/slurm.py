"""Slurm: an sbatch script, one node, srun starting torchrun with a c10d rendezvous.

When the plan uses a subset of the node, the script asks for the whole node (--exclusive) and pins
the planned GPUs with CUDA_VISIBLE_DEVICES: `--gpus-per-node=K` alone lets Slurm hand out any K
GPUs, which may sit in different NVLink islands.
"""

from __future__ import annotations

import shlex

from topowise.export import LaunchPlan
from topowise.export.torchrun import script_args

RDZV_PORT = 29500  # torchrun's default master port


def sbatch_script(plan: LaunchPlan, command=("train.py",), job_name: str | None = None) -> str:
    if plan.num_nodes > 1:
        from topowise.export import multinode

        subset = plan.node_gpus > plan.nproc_per_node
        return multinode.sbatch_multinode(
            plan.num_nodes, plan.node_gpus if subset else plan.nproc_per_node, plan.nproc_per_node,
            script_args(command), plan.env, job_name or f"topowise-{plan.strategy}", plan.summary(), plan.warnings,
            multinode.network_notes(plan.network, plan.env), exclusive=subset)
    subset = plan.node_gpus > plan.nproc
    gpus_per_node = plan.node_gpus if subset else plan.nproc
    name = job_name or f"topowise-{plan.strategy}"
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name={name}",
        "#SBATCH --nodes=1",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --gpus-per-node={gpus_per_node}",
    ]
    if subset:
        lines.append("#SBATCH --exclusive")
    lines += [
        f"# topowise plan: {plan.summary()}",
        *[f"# warning: {w}" for w in plan.warnings],
        "set -euo pipefail",
        "",
    ]
    if subset:
        lines.append(f"# the whole node is held so that these {plan.nproc} GPUs are the ones the plan chose")
    for key, value in plan.env.items():
        lines.append(f"export {key}={shlex.quote(value)}")
    lines += [
        "export OMP_NUM_THREADS=1",
        'head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        "",
        "srun torchrun \\",
        '  --nnodes="$SLURM_NNODES" \\',
        f"  --nproc-per-node={plan.nproc} \\",
        "  --rdzv-backend=c10d \\",
        f'  --rdzv-endpoint="$head_node:{RDZV_PORT}" \\',
        '  --rdzv-id="$SLURM_JOB_ID" \\',
        f"  {shlex.join(script_args(command))}",
    ]
    return "\n".join(lines) + "\n"
