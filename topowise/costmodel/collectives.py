"""The collectives of one training step, each priced where it runs.

A group inside one node: comm.py's alpha-beta over the group's bottleneck ring (calibrated on this
project's measurements). A group across nodes: network.py's model of NCCL's ring and tree. This
module is the one place that chooses between them.

Bytes per step, as PyTorch issues them (`strategy_collectives`; the strategy's flags in topowise.run):
- ddp: fp32 gradients all-reduced in DDP buckets (bucket_cap_mb=25, first bucket 1 MiB), filled in
  gradient-ready order; a tensor never splits, so a big embedding is a bucket of its own.
- zero1: ddp's all-reduce, then ZeroRedundancyOptimizer broadcasts every fp32 parameter from the
  rank that owns it (one broadcast per parameter tensor with parameters_as_bucket_view=False).
- zero2: FSDP2, one unit per block plus the root (embedding, final norm, output layer): a bf16
  all-gather per unit in forward, an fp32 reduce-scatter per unit in backward.
- zero3: also a bf16 all-gather per block in backward. The root's is not counted: FSDP2 keeps the
  root gathered after forward when reshard_after_forward is left out, but the bench hands it True and
  then FSDP2 reshards the root too (seen in its memory, docs/calibration.md "What is alive at the
  peak"); its gather at the backward's start is a term not yet in the model.
- hsdp: zero3 inside each shard group, then an fp32 all-reduce of each unit's gradient shard across
  the replica group (GPUs holding the same shard rank).
"""

from __future__ import annotations

from topowise.costmodel import network
from topowise.costmodel.comm import (
    AFTER_STEP,
    BACKWARD,
    BACKWARD_LAST,
    FORWARD,
    FORWARD_FIRST,
    CollectiveCost,
    achieved_gbps,
    collective_time,
    ddp_buckets,
    grad_tensors_in_ready_order,
    group_link,
    replica_groups,
    root_params,
    shard_groups,
)
from topowise.costmodel.kernels import fp8_all_gather, fp8_linear_params
from topowise.costmodel.profile import Profile
from topowise.run import Run
from topowise.topology.cluster import Cluster
from topowise.topology.model import Wiring


def spans_nodes(topo: Wiring, gpus) -> bool:
    return len(topo.nodes_spanned(gpus)) > 1


def call_cost(op: str, nbytes: float, gpus, topo: Wiring, profile: Profile) -> tuple[float, float]:
    """(seconds, bus GB/s achieved) of one collective over `gpus`, inside one node or across nodes."""
    members = tuple(gpus)
    if spans_nodes(topo, members):
        time_s, detail = network.collective_time_s(op, nbytes, members, topo, profile)
        return time_s, detail["bus_gbps"]
    line, link = group_link(topo, members)
    n = len(members)
    return collective_time(op, nbytes, n, line, link, profile), achieved_gbps(op, n, line, link, profile)


_kinds_memo: dict[tuple[int, int], tuple[tuple, Wiring, list]] = {}


def distinct_groups(groups, topology) -> list:
    """One group of each kind the collectives model tells apart, so that the slowest is found without pricing
    hundreds of alike groups: inside a node, its local indices (alike nodes price alike); across nodes, the nodes
    it spans and, with more than one GPU a node, its local index sets (one a node: the NIC share alone).

    A tuple of groups (a mesh's, which every run on that mesh prices again) is remembered by identity, kept alive
    in the entry with its topology: both are immutable."""
    if not isinstance(groups, tuple):
        return _distinct_groups(groups, topology)
    found = _kinds_memo.get((id(groups), id(topology)))
    if found is None or found[0] is not groups or found[1] is not topology:
        if len(_kinds_memo) >= 256:
            _kinds_memo.clear()
        found = _kinds_memo[(id(groups), id(topology))] = (groups, topology, _distinct_groups(groups, topology))
    return list(found[2])


def _distinct_groups(groups, topology) -> list:
    # in one region and one rack a node's place changes nothing: alike groups on other nodes price alike too
    anywhere = isinstance(topology, Cluster) and topology.wan is None and topology.layout.is_default
    groups = alike_by_shift(groups, topology)
    seen: dict[tuple, tuple] = {}
    for g in groups:
        per = topology.per_node(g)
        if len(per) < 2:
            key: tuple = ("node", *per.values())
        elif anywhere:
            key = ("net", len(per), tuple(sorted(per.values())))
        else:
            locals_ = tuple(sorted(set(per.values()))) if min(len(v) for v in per.values()) > 1 else ()
            key = ("net", tuple(per), locals_)
        seen.setdefault(key, tuple(g))
    return list(seen.values())


def alike_by_shift(groups, topology) -> list:
    """The first of each set of `groups` that are copies of one another some whole nodes apart, on a cluster where
    a node's place changes nothing (one region, one rack, all its GPUs): those price alike (distinct_groups' keys
    and every cost read only the nodes' count and local indices). Elsewhere every group."""
    if not (isinstance(topology, Cluster) and topology.wan is None and topology.layout.is_default
            and not topology.members):
        return list(groups)
    per_gpu = topology.gpus_per_node
    shapes: dict[tuple, tuple] = {}
    if groups and max(map(len, groups)) == 1:  # one GPU each: its local index, of which a node has per_gpu
        for g in groups:
            shapes.setdefault((g[0] % per_gpu,), g)
            if len(shapes) == per_gpu:
                break
        return list(shapes.values())
    for g in groups:
        base = g[0] // per_gpu * per_gpu
        shapes.setdefault(tuple(map(base.__rsub__, g)), g)
    return list(shapes.values())


def collective(op: str, nbytes: float, dtype: str, group: tuple[int, ...] | list, topo: Wiring, count: int,
               phase: str, profile: Profile, groups: list | None = None, unit: str = "") -> CollectiveCost:
    """A CollectiveCost for `count` calls over `group`; with `groups` (parallel groups, e.g. every
    shard group at once), the slowest group sets the time (inside a node: the slowest link)."""
    # one of each kind: a thousand alike shard groups priced once (the max and min below are unchanged)
    groups = distinct_groups(groups, topo) if groups and len(groups) > 1 else (groups or [group])
    n = len(groups[0])
    if spans_nodes(topo, groups[0]):
        per_call, bus = max((call_cost(op, nbytes, g, topo, profile) for g in groups), key=lambda c: c[0])
        return CollectiveCost(op, int(round(nbytes)), dtype, n, count, "NET", bus, per_call * count, phase, unit)
    line, link = min((group_link(topo, g) for g in groups), key=lambda x: x[0])
    per_call = collective_time(op, nbytes, n, line, link, profile)
    return CollectiveCost(op, int(round(nbytes)), dtype, n, count, link, achieved_gbps(op, n, line, link, profile),
                          per_call * count, phase, unit)


_MEMO_ENTRIES = 64  # a plan predicts ~16 micro-batch x checkpointing variants of each placed strategy in a row
_memo: dict[tuple, tuple[Wiring, Profile, tuple[CollectiveCost, ...]]] = {}


def strategy_collectives(run: Run, topology: Wiring, profile: Profile) -> tuple[CollectiveCost, ...]:
    """The collectives of one training step (one micro-batch per step) of a placed run, and their cost.
    `topology` carries the links the run uses (NVLink taken away for the pcie what-if).

    Remembered: they read only the settings in the key (not the micro-batch or checkpointing), and a plan on a
    thousand nodes asks for the same groups of thousands of GPUs sixteen times in a row. The topology is matched by
    identity (kept alive in the entry, so its id is not reused while there), the profile by value (frozen; each
    prediction may make its own default one)."""
    key = (id(topology), run.model, run.strategy, run.shard_group_size, run.precision, run.fp8_recipe,
           run.gpus)
    found = _memo.get(key)
    if found is not None and found[0] is topology and (found[1] is profile or found[1] == profile):
        return found[2]
    out = _strategy_collectives(run, topology, profile)
    if len(_memo) >= _MEMO_ENTRIES:
        _memo.clear()
    _memo[key] = (topology, profile, out)
    return out


def _strategy_collectives(run: Run, topology: Wiring, profile: Profile) -> tuple[CollectiveCost, ...]:
    model, gpus, spec = run.model, run.gpus, run.spec
    group = tuple(sorted(gpus))
    out: list[CollectiveCost] = []
    if spec.autocast:  # DDP's family: buckets all-reduced during backward
        buckets = ddp_buckets(model)
        if len(buckets) > 1:
            rest = buckets[:-1]
            out.append(collective("all_reduce", sum(rest) / len(rest), "fp32", group, topology, len(rest), BACKWARD,
                                  profile, unit="bucket"))
        out.append(collective("all_reduce", buckets[-1], "fp32", group, topology, 1, BACKWARD_LAST, profile,
                              unit="bucket"))
        if spec.sharded:  # zero1: each owner broadcasts its updated parameters
            tensors = grad_tensors_in_ready_order(model)
            out.append(collective("broadcast", 4 * model.params / len(tensors), "fp32", group, topology,
                                  len(tensors), AFTER_STEP, profile, unit="tensor"))
        return tuple(c for c in out if c.group_size > 1)

    blocks, block, root = model.num_layers, model.layer_params, root_params(model)
    groups = shard_groups(topology, gpus, run.shard_group_size or run.num_gpus) if spec.replicated else [group]
    g0 = groups[0]
    alike = distinct_groups(groups, topology) if len(groups) > 1 else groups  # once for the step's seven calls
    # a block's bf16 weights, or with fp8's float8 all-gather (kernels.fp8_all_gather) its Linears in fp8
    gathered, dtype = 2.0 * block, "bf16"
    if run.precision == "fp8" and fp8_all_gather(run.fp8_recipe, spec.fsdp):
        gathered, dtype = 2 * block - fp8_linear_params(model) / blocks, "fp8"
    ag = lambda nbytes, count, phase, unit="block": collective("all_gather", nbytes,
                                                               dtype if unit == "block" else "bf16", g0, topology,
                                                               count, phase, profile, alike, unit)
    rs = lambda nbytes, count, phase, unit="block": collective("reduce_scatter", nbytes, "fp32", g0, topology, count,
                                                               phase, profile, alike, unit)
    # forward: the root's and the first block's all-gathers come before any compute to hide behind;
    # each later block's all-gather is prefetched during the previous block's forward.
    out.append(ag(2 * root, 1, FORWARD_FIRST, "root"))
    out.append(ag(gathered, 1, FORWARD_FIRST))
    if blocks > 1:
        out.append(ag(gathered, blocks - 1, FORWARD))
    if spec.reshard_after_forward:  # blocks re-gathered in backward, prefetched one ahead
        out.append(ag(gathered, blocks, BACKWARD))
    # backward: each block's reduce-scatter hides behind the next block's backward; block 0's and the
    # root's (after the embedding backward, the last op) are exposed.
    if blocks > 1:
        out.append(rs(4 * block, blocks - 1, BACKWARD))
    out.append(rs(4 * block, 1, BACKWARD_LAST))
    out.append(rs(4 * root, 1, BACKWARD_LAST, "root"))
    if spec.replicated and len(groups) > 1:
        reps = replica_groups(groups)
        reps = distinct_groups(reps, topology) if len(reps) > 1 else reps
        ar = lambda nbytes, count, phase, unit="block": collective("all_reduce", nbytes, "fp32", reps[0], topology,
                                                                   count, phase, profile, reps, unit)
        if blocks > 1:
            out.append(ar(4 * block / len(g0), blocks - 1, BACKWARD))
        out.append(ar(4 * block / len(g0), 1, BACKWARD_LAST))
        out.append(ar(4 * root / len(g0), 1, BACKWARD_LAST, "root"))
    return tuple(c for c in out if c.group_size > 1 and c.count > 0)


def wan_seconds(run: Run, topology: Wiring, profile: Profile) -> float:
    """Seconds of a step's collectives (hidden or not) that the WAN between regions costs: their time on
    `topology` less their time with the same nodes in one region (0 without a WAN). The shard groups
    of a placed run are kept, so HSDP with a shard group per region pays only its replica all-reduce."""
    if not isinstance(topology, Cluster) or topology.wan is None:
        return 0.0
    here = sum(c.time_s for c in strategy_collectives(run, topology, profile))
    local = sum(c.time_s for c in strategy_collectives(run, topology.one_region(), profile))
    return max(0.0, here - local)
