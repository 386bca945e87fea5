"""Communication per training step: which collectives each strategy issues, and what each costs.

Alpha-beta per collective, nccl-tests conventions (facts.md; nccl-tests doc/PERFORMANCE.md):

    time = latency + bytes * busbw_factor(op, n) / (line_GBps * achieved_fraction(link, op) * 1e9)

    busbw_factor: all_reduce 2(n-1)/n; all_gather, reduce_scatter (n-1)/n with bytes the full
    (gathered) size; broadcast 1.

line_GBps is the group's bottleneck (`Topology.bottleneck_gbps`): the slowest link of the best ring,
or a GPU's switch port on NVSwitch. achieved_fraction and latency come from the Profile (defaults
from the 2x H200 nccl-tests rows; see profile.py). Latency is taken as flat in n (measured at n=2).

Bytes per step, as PyTorch issues them (see `strategy_collectives`):
- ddp: fp32 gradients all-reduced in DDP buckets (bucket_cap_mb=25, first bucket 1 MiB), filled in
  gradient-ready order; a tensor never splits, so a big embedding is a bucket of its own.
- zero1: ddp's all-reduce, then ZeroRedundancyOptimizer broadcasts every fp32 parameter from the
  rank that owns it (one broadcast per parameter tensor with parameters_as_bucket_view=False).
- zero2: FSDP2, one unit per block plus the root (embedding, final norm, output layer): a bf16
  all-gather per unit in forward, an fp32 reduce-scatter per unit in backward.
- zero3: also a bf16 all-gather per block in backward (the root stays unsharded: FSDP2 does not
  reshard the root after forward).
- hsdp: zero3 inside each shard group, then an fp32 all-reduce of each unit's gradient shard across
  the replica group (GPUs holding the same shard rank).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from topowise.costmodel import network
from topowise.costmodel.profile import Profile
from topowise.models.spec import ModelSpec
from topowise.topology.model import Topology

DDP_BUCKET_BYTES = 25 * 1024**2  # DDP(bucket_cap_mb=25): int(25 * 1024 * 1024)
DDP_FIRST_BUCKET_BYTES = 1024**2  # torch.distributed._DEFAULT_FIRST_BUCKET_BYTES
DTYPE_BYTES = {"fp32": 4, "bf16": 2}

# Phases: where a collective sits in the step, which decides what it can hide behind (step.py).
FORWARD = "forward"  # behind forward compute
FORWARD_FIRST = "forward-first"  # before any compute: exposed
BACKWARD = "backward"  # behind backward compute
BACKWARD_LAST = "backward-last"  # after the last gradient: exposed
AFTER_STEP = "after-step"  # after the optimizer step: exposed
EXPOSED_PHASES = (FORWARD_FIRST, BACKWARD_LAST, AFTER_STEP)


@dataclass(frozen=True)
class CollectiveCost:
    """`count` calls of `bytes` each (the nccl-tests size S); time_s is all of them together."""

    op: str
    bytes: int
    dtype: str
    group_size: int
    count: int
    link: str  # "NV", "PCIe" or "local"
    bandwidth_gbps: float  # achieved bus bandwidth used: line x achieved fraction
    time_s: float
    phase: str

    @property
    def total_bytes(self) -> int:
        return self.bytes * self.count

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "CollectiveCost":
        return cls(**data)


def busbw_factor(op: str, n: int) -> float:
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter"):
        return (n - 1) / n
    if op == "broadcast":
        return 1.0
    raise ValueError(f"unknown collective {op!r}")


def group_link(topo: Topology, gpus) -> tuple[float, str]:
    """(bottleneck line rate GB/s, link class "NV" or "PCIe") of a collective over `gpus`."""
    members = sorted(set(gpus))
    if len(members) < 2:
        return math.inf, "local"
    gbps = topo.bottleneck_gbps(members)
    # Inside one NVLink island the ring stays on NVLink (a hybrid mesh routes around its PCIe pairs);
    # a group that spans islands must cross the host path. No pair loop: groups can hold 512 GPUs.
    return gbps, ("NV" if len(topo.islands_spanned(members)) == 1 and len(topo.island_of(members[0])) > 1
                  else "PCIe")


def collective_time(op: str, nbytes: float, n: int, line_gbps: float, link: str, profile: Profile) -> float:
    """Seconds for one collective: latency + bytes x busbw factor / achieved bandwidth."""
    if n < 2 or nbytes <= 0:
        return 0.0
    efficiency, latency = profile.comm(link, op)
    return latency + nbytes * busbw_factor(op, n) / (line_gbps * efficiency * 1e9)


def collective(op: str, nbytes: float, dtype: str, group: tuple[int, ...] | list, topo: Topology, count: int,
               phase: str, profile: Profile, groups: list | None = None) -> CollectiveCost:
    """A CollectiveCost for `count` calls over `group`; with `groups` (parallel groups, e.g. every
    shard group at once), the slowest group's link sets the rate."""
    groups = groups or [group]
    if network.spans_nodes(topo, groups[0]):  # across nodes: NCCL's ring/tree model (network.py)
        return network.collective_cost(op, nbytes, dtype, groups, topo, count, phase, profile)
    links = [group_link(topo, g) for g in groups]
    line, link = min(links, key=lambda x: x[0])
    n = len(groups[0])
    per_call = collective_time(op, nbytes, n, line, link, profile)
    achieved = 0.0 if n < 2 else line * profile.comm(link, op)[0]
    return CollectiveCost(op, int(round(nbytes)), dtype, n, count, link, achieved, per_call * count, phase)


# --- what PyTorch holds and sends --------------------------------------------------------------
def block_tensors(model: ModelSpec) -> list[int]:
    """Parameter tensor sizes of one block, in the order backward makes their gradients."""
    h, i = model.hidden_size, model.intermediate_size
    q, kv = model.num_heads * model.head_dim, model.num_kv_heads * model.head_dim
    if model.family == "gpt2":  # c_proj, c_fc, ln_2, attn.c_proj, c_attn, ln_1 (weights and biases)
        return [i * h, h, h * i, i, h, h, h * h, h, h * 3 * h, 3 * h, h, h]
    b = model.qkv_bias
    # down, up, gate, post-attention norm, o, v, k, q, input norm (reverse of forward order)
    return ([h * i, i * h, h * i, h, h * q] + ([kv] if b else []) + [kv * h] + ([kv] if b else []) + [kv * h]
            + ([q] if b else []) + [q * h, h])


def grad_tensors_in_ready_order(model: ModelSpec) -> list[int]:
    """Every parameter tensor (elements), in the order backward finishes its gradient.

    Output layer first (untied), final norm, blocks last to first, and the input embedding last: a tied
    embedding's gradient is complete only after the embedding lookup's backward, the step's last op.
    """
    h, v = model.hidden_size, model.vocab_size
    out = [] if model.tied_embeddings else [v * h]
    out += [h, h] if model.family == "gpt2" else [h]
    for _ in range(model.num_layers):
        out += block_tensors(model)
    if model.max_positions:
        out.append(model.max_positions * h)
    out.append(v * h)
    assert sum(out) == model.params, "tensor list must cover every parameter"
    return out


def ddp_buckets(model: ModelSpec, bytes_per_param: int = 4) -> list[int]:
    """Bucket sizes in bytes, in all-reduce order, as DDP's `_compute_bucket_assignment_by_size` fills
    them: add tensors until the bucket reaches its limit (1 MiB for the first, 25 MiB after)."""
    buckets, current, limit = [], 0, DDP_FIRST_BUCKET_BYTES
    for numel in grad_tensors_in_ready_order(model):
        current += numel * bytes_per_param
        if current >= limit:
            buckets.append(current)
            current, limit = 0, DDP_BUCKET_BYTES
    if current:
        buckets.append(current)
    return buckets


def root_params(model: ModelSpec) -> int:
    """Parameters of FSDP2's root unit: everything outside the blocks (embeddings, final norm, output)."""
    return model.params - model.num_layers * model.layer_params


def shard_groups(topo: Topology, gpus: tuple[int, ...], size: int) -> list[tuple[int, ...]]:
    """Consecutive groups of `size` after ordering GPUs by NVLink island, so groups follow islands."""
    island_rank = {g: k for k, isl in enumerate(topo.islands()) for g in isl}
    ordered = sorted(gpus, key=lambda g: (island_rank.get(g, 0), g))
    return [tuple(ordered[k:k + size]) for k in range(0, len(ordered), size)]


def replica_groups(groups: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """GPUs holding the same shard rank, one from each shard group."""
    return [tuple(g[s] for g in groups) for s in range(len(groups[0]))]


def strategy_collectives(model: ModelSpec, topo: Topology, gpus: tuple[int, ...], strategy: str,
                         profile: Profile, shard_group_size: int | None = None) -> tuple[CollectiveCost, ...]:
    """The collectives of one training step (one micro-batch per step) and their cost."""
    n = len(gpus)
    group = tuple(sorted(gpus))
    out: list[CollectiveCost] = []
    if strategy in ("ddp", "zero1"):
        buckets = ddp_buckets(model)
        if len(buckets) > 1:
            rest = buckets[:-1]
            out.append(collective("all_reduce", sum(rest) / len(rest), "fp32", group, topo, len(rest), BACKWARD, profile))
        out.append(collective("all_reduce", buckets[-1], "fp32", group, topo, 1, BACKWARD_LAST, profile))
        if strategy == "zero1":
            tensors = grad_tensors_in_ready_order(model)
            out.append(collective("broadcast", 4 * model.params / len(tensors), "fp32", group, topo, len(tensors),
                                  AFTER_STEP, profile))
        return tuple(c for c in out if c.group_size > 1)

    blocks, block, root = model.num_layers, model.layer_params, root_params(model)
    if strategy == "hsdp":
        size = shard_group_size or n
        groups = shard_groups(topo, gpus, size)
    else:
        groups = [group]
    g0 = groups[0]
    ag = lambda nbytes, count, phase: collective("all_gather", nbytes, "bf16", g0, topo, count, phase, profile, groups)
    rs = lambda nbytes, count, phase: collective("reduce_scatter", nbytes, "fp32", g0, topo, count, phase, profile, groups)
    # forward: the root's and the first block's all-gathers come before any compute to hide behind;
    # each later block's all-gather is prefetched during the previous block's forward.
    out.append(ag(2 * root, 1, FORWARD_FIRST))
    out.append(ag(2 * block, 1, FORWARD_FIRST))
    if blocks > 1:
        out.append(ag(2 * block, blocks - 1, FORWARD))
    if strategy in ("zero3", "hsdp"):  # blocks re-gathered in backward, prefetched one ahead
        out.append(ag(2 * block, blocks, BACKWARD))
    # backward: each block's reduce-scatter hides behind the next block's backward; block 0's and the
    # root's (after the embedding backward, the last op) are exposed.
    if blocks > 1:
        out.append(rs(4 * block, blocks - 1, BACKWARD))
    out.append(rs(4 * block, 1, BACKWARD_LAST))
    out.append(rs(4 * root, 1, BACKWARD_LAST))
    if strategy == "hsdp" and len(groups) > 1:
        reps = replica_groups(groups)
        ar = lambda nbytes, count, phase: collective("all_reduce", nbytes, "fp32", reps[0], topo, count, phase,
                                                     profile, reps)
        if blocks > 1:
            out.append(ar(4 * block / len(g0), blocks - 1, BACKWARD))
        out.append(ar(4 * block / len(g0), 1, BACKWARD_LAST))
        out.append(ar(4 * root / len(g0), 1, BACKWARD_LAST))
    return tuple(c for c in out if c.group_size > 1 and c.count > 0)
