"""One collective inside a node: nccl-tests' bus-bandwidth convention and an alpha-beta model; and
what PyTorch holds and sends (DDP buckets, FSDP2 units, HSDP groups).

Alpha-beta per collective (busbw factors: nccl-tests doc/PERFORMANCE.md; docs/sources.md):

    time = latency + bytes * busbw_factor(op, n) / (line_GBps * achieved_fraction(link, op) * 1e9)

    busbw_factor: all_reduce 2(n-1)/n; all_gather, reduce_scatter (n-1)/n with bytes the full
    (gathered) size; broadcast 1.

line_GBps is the group's bottleneck (`Topology.bottleneck_gbps`): the slowest link of the best ring,
or a GPU's switch port on NVSwitch. achieved_fraction and latency come from the Profile (defaults
from the 2x H200 nccl-tests rows; default_profile.json). Latency is taken as flat in n (measured at n=2).

On an NVSwitch board, groups of more than two GPUs (`group_link` says which groups sit there):
- a ring's achieved fraction moves with n: 1 x the profile's at n=2 and `nvswitch_ring_scale[op]` x
  it at n=8 (published 8-GPU nccl-tests figures), linear in 1/n between and beyond;
- all_reduce may run as NVLink SHARP (NVLS) where the switch reduces (NVSwitch gen 3+: NVLink 4+ GPUs,
  NCCL >= 2.17, on by default, off with NCCL_NVLS_ENABLE=0 = `Profile.nvls_enabled`). Each GPU then
  moves S (1 + 1/n) bytes each way instead of the ring's 2 S (n-1)/n, so its bus bandwidth is at most
  line x 2(n-1)/(n+1), of which `nvls_efficiency` is reached; the time is the lesser of the ring's and
  NVLS's (NCCL's tuner picks per size: ring for small messages, NVLS for large). At n=2 NVLS moves
  1.5x the ring's bytes and never wins, so 2-GPU predictions are the ring's alone.

Groups across nodes follow NCCL's own model (network.py); collectives.py lists a step's collectives
and prices each one with the model for where it runs.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Protocol

from topowise import hardware
from topowise.costmodel.flops import FLASH_BACKWARD_SHARE, attention_flops_per_token
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


class Links(Protocol):
    """What group_link reads of a topology: a node's Topology or a Cluster (read-only, as both are)."""

    @property
    def nvswitch(self) -> bool: ...
    @property
    def gpu_spec(self) -> hardware.GpuSpec: ...
    def bottleneck_gbps(self, gpus: Iterable[int]) -> float: ...
    def islands_spanned(self, gpus: Iterable[int]) -> tuple[tuple[int, ...], ...]: ...
    def island_of(self, gpu: int) -> tuple[int, ...]: ...


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
    unit: str = ""  # what one call sends: "bucket" (DDP), "block" or "root" (an FSDP2 unit), "tensor"

    @property
    def total_bytes(self) -> int:
        return self.bytes * self.count

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> CollectiveCost:
        return cls(**data)


# NVLink SHARP needs a third-generation NVSwitch, which joins NVLink 4 GPUs (HGX H100/H200) and later
# (B200, GB200); the A100's second-generation NVSwitch cannot reduce (NCCL's nvlsEfficiency is 0 for
# Volta and Ampere, src/graph/tuning.cc).
NVLS_MIN_NVLINK_GEN = 4
RING_SCALE_AT = 8  # the group size the published ring figures (Profile.nvswitch_ring_scale) are for


class LinkClass(str):
    """A group's link class ("NV", "PCIe"), compared, shown and stored as that plain string, carrying
    what the switch can do for the group: `nvswitch` (every pair goes through the board's NVSwitch)
    and `nvls` (that switch reduces in the network: NVLink SHARP). A plain "NV" has neither."""

    nvswitch: bool
    nvls: bool

    def __new__(cls, name: str, nvswitch: bool = False, nvls: bool = False) -> LinkClass:
        obj = super().__new__(cls, name)
        obj.nvswitch, obj.nvls = nvswitch, nvls
        return obj


def group_link(topo: Links, gpus) -> tuple[float, str]:
    """(bottleneck line rate GB/s, link class "NV" or "PCIe") of a collective over `gpus`; an "NV"
    class says whether the group sits on an NVSwitch and whether that switch has NVLink SHARP."""
    members = sorted(set(gpus))
    if len(members) < 2:
        return math.inf, "local"
    gbps = topo.bottleneck_gbps(members)
    # Inside one NVLink island the ring stays on NVLink (a hybrid mesh routes around its PCIe pairs);
    # a group that spans islands must cross the host path. No pair loop: groups can hold 512 GPUs.
    if len(topo.islands_spanned(members)) != 1 or len(topo.island_of(members[0])) < 2:
        return gbps, "PCIe"
    switch = bool(topo.nvswitch)
    return gbps, LinkClass("NV", nvswitch=switch, nvls=switch and topo.gpu_spec.nvlink_gen >= NVLS_MIN_NVLINK_GEN)


def ring_scale(op: str, n: int, link: str, profile: Profile) -> float:
    """How much more of the line an n-GPU ring on an NVSwitch reaches than the 2-GPU one the profile
    holds: 1 at n=2, the profile's published 8-GPU ratio at n=8, linear in 1/n (1 elsewhere)."""
    if n <= 2 or not getattr(link, "nvswitch", False):
        return 1.0
    at8 = profile.nvswitch_ring_scale.get(op, 1.0)
    return 1.0 + (at8 - 1.0) * (1 / 2 - 1 / n) / (1 / 2 - 1 / RING_SCALE_AT)


def ring_efficiency(op: str, n: int, link: str, profile: Profile) -> float:
    """Achieved fraction of the line rate of an n-GPU ring: the scale never lifts it above the line (a
    profile's own value, e.g. gloo's against a nominal CPU rate, may be above 1 and stays as it is)."""
    efficiency = profile.comm(link, op)[0]
    return min(efficiency * ring_scale(op, n, link, profile), max(efficiency, 1.0))


def uses_nvls(op: str, n: int, link: str, profile: Profile) -> bool:
    """NVLink SHARP is in reach: an all-reduce of 3+ GPUs on a switch that reduces, NVLS not turned off."""
    return op == "all_reduce" and n > 2 and getattr(link, "nvls", False) and profile.nvls_enabled


def nvls_fraction(n: int, profile: Profile) -> float:
    """busbw / line rate of an NVLS all-reduce over n GPUs: the traffic bound 2(n-1)/(n+1) x achieved."""
    return profile.nvls_efficiency * 2.0 * (n - 1) / (n + 1)


def collective_time(op: str, nbytes: float, n: int, line_gbps: float, link: str, profile: Profile) -> float:
    """Seconds for one collective: latency + bytes x busbw factor / achieved bandwidth (the faster of
    ring and NVLS where NVLS is in reach)."""
    if n < 2 or nbytes <= 0:
        return 0.0
    latency = profile.comm(link, op)[1]
    ring = latency + nbytes * busbw_factor(op, n) / (line_gbps * ring_efficiency(op, n, link, profile) * 1e9)
    if not uses_nvls(op, n, link, profile):
        return ring
    return min(ring, profile.nvls_latency_s + nbytes * busbw_factor(op, n) / (line_gbps * nvls_fraction(n, profile)
                                                                             * 1e9))


def achieved_gbps(op: str, n: int, line_gbps: float, link: str, profile: Profile) -> float:
    """Bus bandwidth a large collective reaches: the line rate x the achieved fraction (NVLS's where it
    beats the ring)."""
    if n < 2:
        return 0.0
    fraction = ring_efficiency(op, n, link, profile)
    if uses_nvls(op, n, link, profile):
        fraction = max(fraction, nvls_fraction(n, profile))
    return line_gbps * fraction


# --- what PyTorch holds and sends --------------------------------------------------------------
def block_backward(model: ModelSpec, seq_len: int, attention_scale: float = 1.0) -> list[tuple[int, float]]:
    """(elements, backward FLOPs per token) of each parameter tensor of one block, in the order backward
    makes their gradients: a matrix's input and weight gradients (4 x its elements), the attention's
    backward (flash, causal; x `attention_scale`, its time per FLOP over the matmuls') before the fused
    qkv whose gradient needs it; norms and biases ~0."""
    h, i = model.hidden_size, model.intermediate_size
    q, kv = model.num_heads * model.head_dim, model.num_kv_heads * model.head_dim
    attention = attention_scale * FLASH_BACKWARD_SHARE * attention_flops_per_token(model, seq_len) / model.num_layers
    if model.family == "gpt2":  # c_proj, c_fc, ln_2, attn.c_proj, c_attn, ln_1 (weights and biases)
        sizes = [i * h, h, h * i, i, h, h, h * h, h, h * 3 * h, 3 * h, h, h]
        qkv = 8
    else:  # down, up, gate, post-attention norm, out, Qwen3's k and q norms, the fused qkv (its bias), input
        # norm (the bench transformer's tensors, reverse of forward order)
        qk_norms = [model.head_dim] * 2 if model.qk_norm else []
        sizes = ([h * i, i * h, h * i, h, h * q] + qk_norms + [(q + 2 * kv) * h]
                 + ([q + 2 * kv] if model.qkv_bias else []) + [h])
        qkv = 5 + len(qk_norms)
    return [(n, 4.0 * n + (attention if k == qkv else 0.0)) for k, n in enumerate(sizes)]


def block_tensors(model: ModelSpec) -> list[int]:
    """Parameter tensor sizes of one block, in the order backward makes their gradients."""
    return [n for n, _ in block_backward(model, 0)]


@functools.lru_cache(maxsize=256)
def grad_tensors_in_ready_order(model: ModelSpec) -> tuple[int, ...]:
    """Every parameter tensor (elements), in the order backward finishes its gradient.

    Output layer first (untied), final norm, blocks last to first, and the input embedding last: a tied
    embedding's gradient is complete only after the embedding lookup's backward, the step's last op.
    """
    h, v = model.hidden_size, model.vocab_size
    out = [] if model.tied_embeddings else [v * h]
    out += [h, h] if model.family == "gpt2" else [h]
    out += block_tensors(model) * model.num_layers
    if model.max_positions:
        out.append(model.max_positions * h)
    out.append(v * h)
    assert sum(out) == model.params, "tensor list must cover every parameter"
    return tuple(out)  # cached (a planner predicts one model thousands of times): not to be changed


def fill_ddp_buckets(numels, bytes_per_param: int = 4) -> tuple[tuple[int, int], ...]:
    """(bytes, index of its last tensor) of each bucket over tensors given in gradient-ready order, in
    all-reduce order, as DDP's `_compute_bucket_assignment_by_size` fills them: add tensors until the
    bucket reaches its limit (1 MiB for the first, 25 MiB after; a tensor never splits)."""
    buckets, current, limit = [], 0, DDP_FIRST_BUCKET_BYTES
    k = -1
    for k, numel in enumerate(numels):
        current += numel * bytes_per_param
        if current >= limit:
            buckets.append((current, k))
            current, limit = 0, DDP_BUCKET_BYTES
    if current:
        buckets.append((current, k))
    return tuple(buckets)


@functools.lru_cache(maxsize=256)
def ddp_bucket_ends(model: ModelSpec, bytes_per_param: int = 4) -> tuple[tuple[int, int], ...]:
    """DDP's buckets over the model's tensors (fill_ddp_buckets of grad_tensors_in_ready_order)."""
    return fill_ddp_buckets(grad_tensors_in_ready_order(model), bytes_per_param)


def ddp_buckets(model: ModelSpec, bytes_per_param: int = 4) -> list[int]:
    """Bucket sizes in bytes, in all-reduce order (ddp_bucket_ends)."""
    return [b for b, _ in ddp_bucket_ends(model, bytes_per_param)]


def root_params(model: ModelSpec) -> int:
    """Parameters of FSDP2's root unit: everything outside the blocks (embeddings, final norm, output)."""
    return model.params - model.num_layers * model.layer_params


def shard_groups(topo: Wiring, gpus: tuple[int, ...], size: int) -> list[tuple[int, ...]]:
    """Consecutive groups of `size` after ordering GPUs by NVLink island, so groups follow islands."""
    island_rank = island_ranks(topo)
    ordered = sorted(gpus, key=lambda g: (island_rank.get(g, 0), g))
    return [tuple(ordered[k:k + size]) for k in range(0, len(ordered), size)]


def replica_groups(groups: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """GPUs holding the same shard rank, one from each shard group."""
    return [tuple(g[s] for g in groups) for s in range(len(groups[0]))]


_island_rank_memo: dict[int, tuple[Wiring, dict[int, int]]] = {}


def island_ranks(topo: Wiring) -> dict[int, int]:
    """GPU -> the index of its NVLink island, remembered per topology (matched by identity and kept alive in the
    entry): a cluster of thousands of nodes has hundreds of thousands of GPUs, and a plan asks for each hsdp run."""
    found = _island_rank_memo.get(id(topo))
    if found is None or found[0] is not topo:
        if len(_island_rank_memo) >= 8:
            _island_rank_memo.clear()
        found = _island_rank_memo[id(topo)] = (topo, {g: k for k, isl in enumerate(topo.islands()) for g in isl})
    return found[1]

