"""`topowise doctor` across nodes, under torchrun or srun (WORLD_SIZE > 1): every node's checks gathered on rank 0,
then node pairs measured in rounds (topowise/doctor/rounds.py) so that a slow node is named.

One process per node is enough (`torchrun --nnodes N --nproc-per-node 1 ...`, `srun --ntasks-per-node 1`); with
more, the lowest rank of each node speaks for it and the others only take part in the collectives. A node is
torchrun's node rank (GROUP_RANK), srun's SLURM_NODEID, else its hostname (topowise.measure.rank.node_name).

The pairs of a round exchange `nbytes` both ways at once (send/recv: NCCL on GPUs, gloo on CPU) `iters` times;
a pair's figure is the bytes of one exchange (both ways) over the slower end's fastest exchange (the path's
pace, not the moments the scheduler kept a process waiting). Each node's figure is held against the
fabric's own pace, the median over nodes of each node's best pair: a slow node is the exception among its
peers, which needs no model of the network (a network slow everywhere is the all-reduce's and nccl-tests'
to tell). Rounds: `rounds` of the circle method (3 by default: a node short with 2+ partners, each sound
elsewhere, is named alone after them; docs/doctor.md).
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import asdict, dataclass

from topowise.doctor import rounds as pair_schedule
from topowise.doctor.checks import FAIL, OK, WARN, Check, worst
from topowise.units import MIB

DEFAULT_ROUNDS = 3
# Held against its peers, not a model: the pace is itself measured, and two sound pairs of one fabric differ by
# their paths through the switches and the traffic beside them (gloo pairs on one loaded host: 0.23-0.34 GB/s in
# one run). A pair under 70% of the pace falls short: a NIC trained down to half its rate or a node late by its
# own work shows far below it, while a sound pair does not (rounds.SHORT's 85% is for a model's expectation).
PACE_SHORT = 0.70
GPU_PAIR_BYTES = 64 * MIB  # bandwidth-bound on a 400 Gb/s NIC (latency under 1% of the exchange)
# gloo over TCP: milliseconds per exchange, long beside a scheduler's wake-up (on a loaded 2-core host 1 MiB let
# the host's load name a sound node in 1 run of 4; 8 MiB in none of 6)
CPU_PAIR_BYTES = 8 * MIB
PAIR_ITERS = 5
PAIR_WARMUP = 2
SLOW_HOOK = "TOPOWISE_DOCTOR_TEST_DELAY_S"  # tests only: this process waits so long after each exchange (a slow NIC)
SOURCE = "torch.distributed batch_isend_irecv between node pairs, rounds of the circle method (doctor/rounds.py)"


@dataclass(frozen=True)
class NodeReport:
    node: int  # position among the job's nodes (ordered by their lowest rank)
    name: str  # "node3 (host)" or the hostname
    status: str
    checks: tuple[Check, ...]

    def to_dict(self) -> dict:
        return {"node": self.node, "name": self.name, "status": self.status,
                "checks": [c.to_dict() for c in self.checks]}


def expected_pace(measured: dict[tuple[int, int], float]) -> float:
    """The fabric's own pace: the median over nodes of each node's fastest pair (a slow node's best pair is
    slow, a sound node's is not: the median stands while fewer than half the nodes are slow)."""
    best: dict[int, float] = {}
    for (a, b), gbps in measured.items():
        for node in (a, b):
            best[node] = max(best.get(node, 0.0), gbps)
    return statistics.median_high(best.values()) if best else 0.0


def check_node_pairs(measured: dict[tuple[int, int], float], names: list[str], rounds_run: int,
                     nbytes: int) -> Check:
    """The slow node(s) named from the pairs, or ok."""
    if not measured:
        return Check("node pairs", OK, "one node: no pair to measure", "", SOURCE)
    pace = expected_pace(measured)
    found = pair_schedule.slow_nodes(measured, pace, PACE_SHORT)
    what = (f"{len(measured)} pairs in {rounds_run} round(s), {nbytes / MIB:g} MiB each way; the fabric's pace "
            f"{pace:.2f} GB/s (median of each node's best pair)")
    if not found:
        low = min(measured, key=measured.__getitem__)
        return Check("node pairs", OK, f"{what}; lowest {names[low[0]]}-{names[low[1]]}: {measured[low]:.2f} GB/s",
                     "", SOURCE)
    alone = [s for s in found if s.alone]
    lines = [f"{names[s.node]} slow with every partner: {_named(s.evidence, names)}" for s in alone]
    unsure = [s for s in found if not s.alone]
    if unsure:
        lines.append("short, one end of it: " + "; ".join(f"{names[s.node]}: {_named(s.evidence, names)}"
                                                             for s in unsure))
    fix = (f"check {', '.join(names[s.node] for s in alone)}: `topowise doctor` on it (NIC NUMA, NIC rails, "
           "PCIe), `ibstat` (link rate, errors), its switch port; drain it meanwhile" if alone else
           f"run more rounds (--rounds {min(rounds_run + 2, len(names) - 1)}) to tell the ends apart")
    return Check("node pairs", FAIL if alone else WARN, f"{what}; " + "; ".join(lines), fix, SOURCE)


def _named(evidence: str, names: list[str]) -> str:
    """rounds.slow_nodes says "with node 3": say the node's name."""
    for i in sorted(range(len(names)), reverse=True):  # node 12 before node 1
        evidence = evidence.replace(f"with node {i}:", f"with {names[i]}:")
    return evidence


# --- the job side (torch) -------------------------------------------------------------------------------
def run_across_nodes(my_checks: list[Check], *, rounds: int = DEFAULT_ROUNDS, nbytes: int | None = None,
                     iters: int = PAIR_ITERS, timeout_s: float = 120.0) -> tuple[list[NodeReport], Check] | None:
    """Every rank calls it; rank 0 gets (a report per node, the node-pairs check), the others None."""
    import torch
    import torch.distributed as dist

    from topowise.measure.rank import destroy_process_group, init_distributed, node_name

    backend = "nccl" if torch.cuda.is_available() else "gloo"
    me = init_distributed(backend, timeout_s)
    try:
        delay = float(os.environ.get(SLOW_HOOK, "0") or 0)
        nbytes = nbytes or (GPU_PAIR_BYTES if backend == "nccl" else CPU_PAIR_BYTES)
        everyone: list = [None] * me.world_size
        dist.all_gather_object(everyone, (node_name(), [c.to_dict() for c in my_checks]))
        leaders: dict[str, int] = {}
        for r, (name, _) in enumerate(everyone):
            leaders.setdefault(name, r)
        names = list(leaders)  # in order of their lowest rank
        leader_ranks = [leaders[n] for n in names]
        schedule = pair_schedule.pair_rounds(len(names), rounds)
        measured: dict[tuple[int, int], float] = {}
        for pairs in schedule:
            seconds = _round(pairs, leader_ranks, me, nbytes, iters, delay)
            for a, b in pairs:
                slower = max(seconds[leader_ranks[a]], seconds[leader_ranks[b]])
                measured[(a, b)] = 2 * nbytes / slower / 1e9 if slower > 0 else 0.0
        if me.rank != 0:
            return None
        reports = []
        for i, name in enumerate(names):
            found = tuple(Check(**c) for c in everyone[leaders[name]][1])
            reports.append(NodeReport(node=i, name=name, status=worst(list(found)), checks=found))
        return reports, check_node_pairs(measured, names, len(schedule), nbytes)
    finally:
        destroy_process_group()


def _round(pairs, leader_ranks: list[int], me, nbytes: int, iters: int, delay: float) -> list[float]:
    """One round: each pair exchanges at once; every rank's seconds (0 for ranks not in a pair)."""
    import torch
    import torch.distributed as dist

    peer = None
    for a, b in pairs:
        if me.rank == leader_ranks[a]:
            peer = leader_ranks[b]
        elif me.rank == leader_ranks[b]:
            peer = leader_ranks[a]
    dist.barrier()
    seconds = 0.0
    if peer is not None:
        device = torch.device(me.device)
        send = torch.ones(max(1, nbytes // 4), dtype=torch.float32, device=device)
        recv = torch.empty_like(send)

        def exchange() -> float:
            start = time.perf_counter()
            if delay:  # the test hook: this node posts each exchange late, as a slow NIC delivers late
                time.sleep(delay)
            ops = [dist.P2POp(dist.isend, send, peer), dist.P2POp(dist.irecv, recv, peer)]
            for work in dist.batch_isend_irecv(ops):
                work.wait()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            return time.perf_counter() - start

        for _ in range(PAIR_WARMUP):
            exchange()
        # the fastest exchange: what the path can do, not when the scheduler let a process run
        seconds = min(exchange() for _ in range(iters))
    everyone: list = [None] * me.world_size
    dist.all_gather_object(everyone, seconds)
    return [float(s) for s in everyone]


def report_dict(reports: list[NodeReport], pairs: Check) -> dict:
    status = worst([Check(name=r.name, status=r.status, evidence="") for r in reports] + [pairs])
    return {"status": status, "nodes": [r.to_dict() for r in reports], "node_pairs": asdict(pairs)}
