"""Candidates: strategy x GPU subset x micro-batch x activation checkpointing (x compile), island-aware.

A candidate is a `Run` and the placement that chose its GPUs. Checkpointing takes four values: none,
selective per op (torchtitan's default), selective every 2nd block (torchtitan's `selective_ac_option` 2:
half the blocks recomputed whole, and none of per op's Python on every operator, which sets the step of
small models on a fast GPU), full.

GPU subsets are never all C(n, k): for k GPUs we take the topology's best subset (fewest NVLink
islands, fastest ring), the first k indices (what people type), and a spread across islands (what a
scheduler may hand out), so the ranking can show what placement alone is worth.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields

from topowise.costmodel.comm import island_ranks
from topowise.models.spec import ModelSpec
from topowise.planner.regions import region_sizes
from topowise.run import STRATEGIES, Run
from topowise.topology.model import Topology

DEFAULT_MICRO_BATCHES = (1, 2, 4, 8)
# (checkpointing, selective_ac_option): none, per op, every 2nd block, full
CHECKPOINTING_CHOICES: tuple[tuple[str, str], ...] = (("none", "op"), ("selective", "op"), ("selective", "2"),
                                                      ("full", "op"))
COMMON_SHARD_SIZES = (2, 4, 8)  # shard groups people use even where no island has that size


@dataclass(frozen=True)
class Candidate:
    run: Run
    placement: str = "best"  # best | first | spread | given: how its GPUs were chosen

    @property
    def group_key(self) -> tuple:
        """Candidates that differ only in micro-batch (memory grows with it: the search stops at the first miss)."""
        return settings_key(self.run, micro_batch=None)

    @property
    def memory_key(self) -> tuple:
        """Memory depends on the GPU count, not on which GPUs: one miss rules out every placement."""
        return settings_key(self.run, gpus=len(self.run.gpus))


def settings_key(run: Run, **instead: object) -> tuple:
    """Every setting of the run but its model (one model per search), some given `instead`: a setting Run gains
    tells candidates apart with no change here."""
    return tuple(instead.get(f.name, getattr(run, f.name)) for f in fields(run) if f.name != "model")


def engine_for(strategy: str, engine: str) -> str:
    """DeepSpeed's stage 0 is not modelled: a ddp run (only a suggestion's one-GPU fallback, with engine
    deepspeed) is predicted as PyTorch runs it."""
    return engine if STRATEGIES[strategy].deepspeed_stage is not None else "pytorch"


def shard_groups(gpus: tuple[int, ...], size: int | None) -> tuple[tuple[int, ...], ...]:
    """HSDP shard groups: consecutive runs of `gpus` (placements list island-mates next to each other)."""
    if not size:
        return ()
    return tuple(gpus[i:i + size] for i in range(0, len(gpus), size))


def gpu_counts(topo: Topology, num_gpus: int | None = None) -> tuple[int, ...]:
    """Each island size, the powers of two up to the node, and the whole node (e.g. 1, 2, 4, 8)."""
    if num_gpus is not None:
        return (num_gpus,)
    n = topo.num_gpus
    counts = {len(isl) for isl in topo.islands()} | {n}
    k = 1
    while k < n:
        counts.add(k)
        k *= 2
    return tuple(sorted(counts))


def island_order(topo: Topology, gpus) -> tuple[int, ...]:
    """GPUs sorted by island, then index: HSDP's consecutive shard groups then follow the islands."""
    rank = island_ranks(topo)  # built once per topology: a cluster's islands are counted in tens of thousands
    return tuple(sorted(gpus, key=lambda g: (rank[g], g)))


@functools.lru_cache(maxsize=256)
def placements(topo: Topology, k: int) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """(label, GPUs) for k GPUs: best, first k, spread across islands; duplicates dropped."""
    islands = topo.islands()
    spread: list[int] = []
    depth = 0
    while len(spread) < k:  # one GPU from each island in turn
        for isl in islands:
            if depth < len(isl) and len(spread) < k:
                spread.append(isl[depth])
        depth += 1
    out: list[tuple[str, tuple[int, ...]]] = []
    for label, gpus in (("best", topo.best_subset(k)), ("first", topo.indices[:k]), ("spread", spread)):
        ordered = island_order(topo, gpus)
        if all(ordered != seen for _, seen in out):
            out.append((label, ordered))
    return tuple(out)


def shard_group_sizes(topo: Topology, k: int) -> tuple[int, ...]:
    """HSDP shard-group sizes for k GPUs: island sizes and 2/4/8 that divide k (1 and k are DDP and ZeRO-3)."""
    sizes = {len(isl) for isl in topo.islands()} | set(COMMON_SHARD_SIZES)
    if topo.num_nodes > 1:  # a cluster: shard groups of 1, 2 or 4 whole nodes too
        sizes |= {m * topo.gpus_per_node for m in (1, 2, 4)}
    sizes |= set(region_sizes(topo))  # regions: a shard group per region keeps sharding off the WAN
    return tuple(sorted(s for s in sizes if 1 < s < k and k % s == 0))


def strategy_options(topo: Topology, k: int) -> tuple[tuple[str, int | None], ...]:
    """(strategy, shard group size) pairs worth predicting on k GPUs. One GPU has nothing to shard."""
    if k == 1:
        return (("ddp", None),)
    return (*((name, None) for name, s in STRATEGIES.items() if not s.replicated),
            *((name, size) for name, s in STRATEGIES.items() if s.replicated for size in shard_group_sizes(topo, k)))


def enumerate_candidates(topo: Topology, model: ModelSpec, *, seq_len: int = 4096, fabric: str = "nvlink",
                         engine: str = "pytorch", num_gpus: int | None = None, gpus: tuple[int, ...] | None = None,
                         micro_batches: tuple[int, ...] | None = None,
                         compile_choices: tuple[bool, ...] = (False,)) -> list[Candidate]:
    """Every candidate run of `model`, micro-batches ascending inside each (strategy, GPUs, shard,
    checkpointing, compile) group; `compile_choices`: (False,) eager only, (False, True) eager and compiled."""
    mbs = tuple(sorted(set(micro_batches or DEFAULT_MICRO_BATCHES)))
    if gpus is not None:
        where = [("given", island_order(topo, gpus))]
        counts: tuple[int, ...] = (len(gpus),)
    else:
        counts = gpu_counts(topo, num_gpus)
        where = []
    out: list[Candidate] = []
    for k in counts:
        for label, subset in where or placements(topo, k):
            for strategy, shard in strategy_options(topo, k):
                for mode, option in CHECKPOINTING_CHOICES:
                    for compiled in compile_choices:
                        out.extend(Candidate(run=Run(model=model, gpus=subset, strategy=strategy, micro_batch=mb,
                                                     seq_len=seq_len, compile=compiled, fabric=fabric,
                                                     shard_group_size=shard, engine=engine_for(strategy, engine),
                                                     checkpointing=mode, selective_ac_option=option),
                                             placement=label)
                                   for mb in mbs)
    return out
