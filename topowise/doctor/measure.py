"""`doctor --measure` on this node: the GPU-pair copy matrix and one all-reduce over its GPUs, measured by
bench comm's own code (topowise.measure: copy_matrix on rank 0, the all_reduce case on one NCCL rank per
GPU) and judged by topowise.doctor.measured. Without a GPU it says so and measures nothing."""

from __future__ import annotations

import os

from topowise.doctor import measured
from topowise.doctor.checks import FAIL, Check
from topowise.doctor.snapshot import Snapshot


def visible_gpus(count: int, environ=None) -> tuple[int, ...]:
    """The NVML index of each CUDA device this process sees (CUDA_VISIBLE_DEVICES, when it lists indices)."""
    environ = os.environ if environ is None else environ
    words = [w.strip() for w in environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if w.strip()]
    if len(words) >= count and all(w.isdigit() for w in words):
        return tuple(int(w) for w in words[:count])
    return tuple(range(count))


def measure_node(snap: Snapshot) -> list[Check]:
    if not snap.gpus:
        return [measured.skipped("no GPU to measure on this machine")]
    from topowise.measure.launcher import have_torch, in_job

    if not have_torch():
        return [measured.skipped("PyTorch is not installed here (pip install 'topowise[bench]')")]
    if in_job():
        return [measured.skipped("inside a torchrun/srun job the node pairs are measured instead; run "
                                 "`topowise doctor --measure` alone on a node for its GPUs")]
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count < 2:
        return [measured.skipped(f"{count} GPU visible to PyTorch: no pair to measure")]
    from topowise.measure import comm

    gpus = visible_gpus(count)
    cfg = comm.CommConfig(ops=("all_reduce",), sizes=(measured.ALL_REDUCE_BYTES,), backend="nccl",
                          topology=snap.topology, gpus=gpus, matrix=True, matrix_bytes=measured.PAIR_BYTES,
                          timeout_s=120.0)
    done = comm.run_comm(cfg, nproc=count)
    if done.status != 0 or not done.result:
        return [Check("measured", FAIL, done.error or f"the measuring ranks exited {done.status}",
                      "`topowise bench comm --debug` shows each rank's output", measured.SOURCE_ALL_REDUCE)]
    return judge(snap, done.result, gpus)


def judge(snap: Snapshot, result: dict, gpus: tuple[int, ...]) -> list[Check]:
    """The checks of a measured node: bench comm's result (p2p copy records, the all_reduce record)."""
    topo = _topology(snap)
    found = measured.pair_bandwidths(result.get("p2p", []))
    expected = measured.expected_pair_gbps(topo, found) if topo else {}
    out = [measured.check_pairs(found, expected)]
    rows = [r for r in result.get("collectives", []) if r.get("op") == "all_reduce"]
    if rows:
        row = max(rows, key=lambda r: r["bytes"])
        want = measured.expected_all_reduce_gbps(topo, gpus, row["bytes"]) if topo else 0.0
        out.append(measured.check_all_reduce(float(row["busbw_gbps"]), want, gpus, int(row["bytes"])))
    return out


def _topology(snap: Snapshot):
    if not snap.topology:
        return None
    from topowise.topology.model import Topology

    return Topology.from_dict(snap.topology, where="snapshot topology")
