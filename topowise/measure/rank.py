"""One rank of a measurement: joining the process group, its CPUs, which node holds which rank.

Everything here runs inside the processes torchrun (or srun) started; torch is imported inside the
functions that need it.
"""

from __future__ import annotations

import datetime
import os
import socket
from dataclasses import dataclass

from topowise.errors import UsageError


@dataclass(frozen=True)
class Rank:
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    backend: str
    device: str  # "cuda:N" or "cpu"

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def _env_from_slurm() -> None:
    """srun sets SLURM_*; torch.distributed reads RANK/WORLD_SIZE/MASTER_ADDR. MASTER_ADDR must be exported."""
    if "RANK" in os.environ or "SLURM_PROCID" not in os.environ:
        return
    os.environ.setdefault("RANK", os.environ["SLURM_PROCID"])
    os.environ.setdefault("WORLD_SIZE", os.environ["SLURM_NTASKS"])
    os.environ.setdefault("LOCAL_RANK", os.environ.get("SLURM_LOCALID", "0"))
    os.environ.setdefault("LOCAL_WORLD_SIZE", os.environ.get("SLURM_NTASKS_PER_NODE", "1").split("(")[0])
    os.environ.setdefault("MASTER_PORT", "29500")
    if "MASTER_ADDR" not in os.environ:
        raise UsageError("inside srun, export MASTER_ADDR (the first node's hostname) before topowise bench")


def init_distributed(backend: str, timeout_s: float = 300.0) -> Rank:
    """Join the process group torchrun (or srun) described in the environment."""
    import torch
    import torch.distributed as dist

    _env_from_slurm()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = "cpu"
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
        device = f"cuda:{local_rank}"
    if not dist.is_initialized():
        kwargs = {"device_id": torch.device(device)} if backend == "nccl" else {}
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_s), **kwargs)
    return Rank(dist.get_rank(), dist.get_world_size(), local_rank,
                int(os.environ.get("LOCAL_WORLD_SIZE", dist.get_world_size())), backend, device)


def destroy_process_group() -> None:
    """Leave the process group, if this process joined one; never raises (a peer may be gone)."""
    try:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
    except Exception:
        pass


def cuda_device_count() -> int:
    """CUDA GPUs this process can see (0 without CUDA); UsageError without PyTorch."""
    try:
        import torch
    except ImportError:
        raise UsageError("bench needs PyTorch: pip install 'topowise[bench]'") from None
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def cores_for_local_rank(cpus: list[int], local_rank: int, local_world_size: int) -> list[int]:
    """This rank's equal, disjoint slice of the CPUs the job may use (the leftover go to no one)."""
    per = len(cpus) // max(local_world_size, 1)
    if per == 0:
        return cpus  # fewer CPUs than ranks: nothing to split
    return cpus[local_rank * per:(local_rank + 1) * per]


def pin_to_cores() -> list[int] | None:
    """Every thread of this rank onto its own slice of the CPUs (`bench train --pin-cpus`), so the
    ranks' Python threads neither share a core nor migrate across the machine. Threads made later
    (NCCL's, autograd's) inherit it. Returns the cores, or None where affinity is unsupported."""
    if not hasattr(os, "sched_setaffinity"):
        return None
    cores = cores_for_local_rank(sorted(os.sched_getaffinity(0)), int(os.environ.get("LOCAL_RANK", "0")),
                                 int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cores)
        except OSError:
            pass  # a thread that ended meanwhile
    return cores


def node_name() -> str:
    """This rank's node: torchrun's node rank (GROUP_RANK), srun's SLURM_NODEID, else the hostname."""
    host = socket.gethostname()
    for var in ("GROUP_RANK", "SLURM_NODEID"):
        if os.environ.get(var, "").isdigit():
            return f"node{os.environ[var]} ({host})"
    return host


def ranks_by_node(world: int) -> dict:
    """node -> sorted ranks on it, from every rank's `node_name` (a collective call: all ranks must call it)."""
    import torch.distributed as dist

    names = [None] * world
    dist.all_gather_object(names, node_name())
    out: dict = {}
    for r, name in enumerate(names):
        out.setdefault(name, []).append(r)
    return out


def node_labels(nodes: dict) -> dict:
    """nodes: node -> its ranks. Every collective spans the whole job: inter-node when it has 2+ nodes."""
    return {"nodes": len(nodes) or 1, "ranks_per_node": {h: list(r) for h, r in nodes.items()},
            "scope": "inter-node" if len(nodes) > 1 else "intra-node"}
