"""One collective inside a node: nccl-tests' bus-bandwidth convention and an alpha-beta model; and
what PyTorch holds and sends (DDP buckets, FSDP2 units, HSDP groups).

Alpha-beta per collective (busbw factors: nccl-tests doc/PERFORMANCE.md; docs/sources.md):

    time = latency + bytes * busbw_factor(op, n) / (line_GBps * achieved_fraction(link, op) * 1e9)

    busbw_factor: all_reduce 2(n-1)/n; all_gather, reduce_scatter (n-1)/n with bytes the full
    (gathered) size; broadcast 1.

line_GBps is the group's bottleneck (`Topology.bottleneck_gbps`): the slowest link of the best ring,
or a GPU's switch port on NVSwitch. achieved_fraction and latency come from the Profile (defaults
from the 2x H200 nccl-tests rows; see profile.py). Latency is taken as flat in n (measured at n=2).

Groups across nodes follow NCCL's own model (network.py); collectives.py lists a step's collectives
and prices each one with the model for where it runs.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from topowise.costmodel.profile import Profile
from topowise.models.spec import ModelSpec
from topowise.topology.model import Wiring
from topowise.units import MIB, busbw_factor

DDP_BUCKET_BYTES = 25 * MIB  # DDP(bucket_cap_mb=25): int(25 * 1024 * 1024)
DDP_FIRST_BUCKET_BYTES = MIB  # torch.distributed._DEFAULT_FIRST_BUCKET_BYTES

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
    link: str  # "NV", "PCIe", "local" (one GPU) or "NET" (across nodes)
    bandwidth_gbps: float  # achieved bus bandwidth used: line x achieved fraction
    time_s: float
    phase: str

    @property
    def total_bytes(self) -> int:
        return self.bytes * self.count

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> CollectiveCost:
        return cls(**data)


def group_link(topo: Wiring, gpus) -> tuple[float, str]:
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


def achieved_gbps(op: str, n: int, line_gbps: float, link: str, profile: Profile) -> float:
    """Bus bandwidth a large collective reaches: the line rate x the profile's achieved fraction."""
    return 0.0 if n < 2 else line_gbps * profile.comm(link, op)[0]


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


def shard_groups(topo: Wiring, gpus: tuple[int, ...], size: int) -> list[tuple[int, ...]]:
    """Consecutive groups of `size` after ordering GPUs by NVLink island, so groups follow islands."""
    island_rank = {g: k for k, isl in enumerate(topo.islands()) for g in isl}
    ordered = sorted(gpus, key=lambda g: (island_rank.get(g, 0), g))
    return [tuple(ordered[k:k + size]) for k in range(0, len(ordered), size)]


def replica_groups(groups: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """GPUs holding the same shard rank, one from each shard group."""
    return [tuple(g[s] for g in groups) for s in range(len(groups[0]))]
