"""Launching across nodes with the engines people already run: torchrun's c10d rendezvous and Slurm.

Pure functions of plain values (node count, processes per node, command, environment), so the
single-node exporters can hand over to them when a plan spans nodes:

- `torchrun_per_node`: one torchrun command per node, all meeting at node 0's c10d store
  (`--nnodes N --node-rank i --rdzv-backend c10d --rdzv-endpoint HEAD:PORT`);
- `sbatch_multinode`: `#SBATCH --nodes=N`, one task per node, `srun` starting torchrun on each node,
  the head node's hostname taken from `$SLURM_JOB_NODELIST` (torchrun's Slurm recipe);
- `nccl_network_env`: the NCCL variables the network needs where the topology knows them:
  NCCL_IB_HCA from the node's RDMA NIC names (mlx5_0, ...); NCCL_SOCKET_IFNAME only for an interface
  name we were given (presets do not know it, so the script says where to set it instead).
"""

from __future__ import annotations

import shlex

from topowise.errors import UsageError
from topowise.topology.fabric import network_spec

RDZV_PORT = 29500  # torchrun's default master port
HEAD = "$HEAD_NODE"  # in per-node commands: the first node's hostname, set by the user



def is_rdma(kind: str) -> bool:
    """The network runs NCCL's RDMA transport (InfiniBand, RoCE, a custom `-rdma` link), not TCP sockets."""
    try:
        spec = network_spec(kind) if kind else None
    except UsageError:
        return False
    return spec is not None and spec.transport != "socket"


def nccl_network_env(kind: str, nic_names=(), socket_ifname: str = "") -> dict[str, str]:
    """NCCL variables for the network between nodes (NCCL user guide, "Environment Variables").

    RDMA fabrics (InfiniBand, RoCE): NCCL_IB_HCA lists the HCAs when their names are known, so NCCL
    uses those ports and no management NIC. Plain Ethernet: NCCL's socket transport; with an
    interface name NCCL_SOCKET_IFNAME pins it (else NCCL picks the first non-loopback one).
    """
    env: dict[str, str] = {}
    hcas = [n for n in nic_names if n.startswith(("mlx5_", "mlx4_", "bnxt_re", "irdma"))]
    if is_rdma(kind) and hcas:
        env["NCCL_IB_HCA"] = ",".join(hcas)
    if socket_ifname:
        env["NCCL_SOCKET_IFNAME"] = socket_ifname
    return env


def network_notes(kind: str, env: dict[str, str]) -> list[str]:
    """Comment lines for what the plan cannot know (interface names), said where to set them."""
    notes = []
    if is_rdma(kind) and "NCCL_IB_HCA" not in env:
        notes.append("set NCCL_IB_HCA to this cluster's HCAs (e.g. mlx5_0,mlx5_1,...; `ibv_devices` lists them) "
                     "to keep NCCL off management NICs")
    if "NCCL_SOCKET_IFNAME" not in env:
        notes.append("set NCCL_SOCKET_IFNAME to the interface between nodes (e.g. eth0; `ip -br addr`) if NCCL "
                     "picks the wrong one" + (": on plain Ethernet all collective traffic goes through it"
                                               if not is_rdma(kind) else ""))
    return notes


def torchrun_node_argv(num_nodes: int, node_rank: int, nproc_per_node: int, script: list[str],
                       head: str = HEAD, port: int = RDZV_PORT, run_id: str = "topowise",
                       torchrun: tuple[str, ...] = ("torchrun",)) -> list[str]:
    """The torchrun command for node `node_rank` of `num_nodes` (a c10d rendezvous at head:port)."""
    return [*torchrun, f"--nnodes={num_nodes}", f"--node-rank={node_rank}", f"--nproc-per-node={nproc_per_node}",
            "--rdzv-backend=c10d", f"--rdzv-endpoint={head}:{port}", f"--rdzv-id={run_id}", *script]


def torchrun_per_node(num_nodes: int, nproc_per_node: int, script: list[str], env: dict[str, str],
                      summary: str = "", warnings=(), notes=()) -> str:
    """Shell text: one command per node, each to run on that node (node 0 hosts the rendezvous)."""
    lines = [f"# topowise plan: {summary}"] if summary else []
    lines += [f"# warning: {w}" for w in warnings]
    lines += [f"# {n}" for n in notes]
    lines.append(f"# run each line on its node; HEAD_NODE is node 0's hostname, reachable from all {num_nodes} nodes")
    assignments = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    for rank in range(num_nodes):
        argv = torchrun_node_argv(num_nodes, rank, nproc_per_node, script)
        words = " ".join(shlex.quote(w) if not w.startswith("--rdzv-endpoint=") else w.replace(HEAD, '"$HEAD_NODE"')
                         for w in argv)
        lines.append(f"# node {rank}")
        lines.append((assignments + " " if assignments else "") + words)
    return "\n".join(lines) + "\n"


def sbatch_multinode(num_nodes: int, gpus_per_node: int, nproc_per_node: int, script: list[str],
                     env: dict[str, str], job_name: str = "topowise", summary: str = "", warnings=(),
                     notes=(), exclusive: bool = False) -> str:
    """An sbatch script: N nodes, one srun task per node, each task a torchrun of nproc_per_node ranks."""
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name={job_name}",
        f"#SBATCH --nodes={num_nodes}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --gpus-per-node={gpus_per_node}",
    ]
    if exclusive:
        lines.append("#SBATCH --exclusive")
    if summary:
        lines.append(f"# topowise plan: {summary}")
    lines += [f"# warning: {w}" for w in warnings]
    lines += [f"# {n}" for n in notes]
    lines += ["set -euo pipefail", ""]
    for key, value in env.items():
        lines.append(f"export {key}={shlex.quote(value)}")
    lines += [
        "export OMP_NUM_THREADS=1",
        'head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        "",
        "srun torchrun \\",
        '  --nnodes="$SLURM_NNODES" \\',
        f"  --nproc-per-node={nproc_per_node} \\",
        "  --rdzv-backend=c10d \\",
        f'  --rdzv-endpoint="$head_node:{RDZV_PORT}" \\',
        '  --rdzv-id="$SLURM_JOB_ID" \\',
        f"  {shlex.join(script)}",
    ]
    return "\n".join(lines) + "\n"
