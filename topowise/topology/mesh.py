"""The device mesh placed on a GPU list: which GPUs form each group of each parallel dimension (pure: the cost
model and the planner both read it).

Rank r runs on gpus[r]; ranks are laid out as torchtitan's ParallelDims.build_mesh unflattens the world:
(pp, dp_replicate, dp_shard, cp, tp), tp fastest (torchtitan/distributed/parallel_dims.py). Megatron-LM's
default order "tp-cp-ep-dp-pp" is the same with dp_replicate 1. So with GPUs listed node by node, TP groups
are runs of consecutive GPUs (inside a node or NVLink island when it divides), then CP, then the data-
parallel dimensions, and PP strides furthest, across nodes and racks.

GPUs are any hashable labels (indices, (node, gpu) pairs); what counts as a node, island or rack is the
caller's `domain` callable. No topology import and no torch.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from topowise.errors import UsageError

DIMS = ("pp", "dp_replicate", "dp_shard", "cp", "tp")  # outermost first (torchtitan's unflatten order)
# flattened dimensions torchtitan builds from these (parallel_dims.py build_mesh)
FLATTENED = {"fsdp": ("dp_shard", "cp"), "batch": ("dp_replicate", "dp_shard"),
             "loss": ("dp_replicate", "dp_shard", "cp")}


@dataclass(frozen=True)
class Mesh:
    """Degrees per dimension (in DIMS order) over an ordered GPU list."""

    gpus: tuple[Hashable, ...]
    pp: int
    dp_replicate: int
    dp_shard: int
    cp: int
    tp: int

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(getattr(self, d) for d in DIMS)

    def coords(self, rank: int) -> dict[str, int]:
        """A rank's coordinate on each dimension (row-major over DIMS, tp fastest)."""
        out = {}
        for name, size in zip(reversed(DIMS), reversed(self.shape)):
            rank, out[name] = divmod(rank, size)
        return {d: out[d] for d in DIMS}

    def groups(self, dim: str) -> tuple[tuple[Hashable, ...], ...]:
        """The GPUs of each group of `dim` (one of DIMS or FLATTENED), each in rank order; groups ordered
        by their first rank."""
        return _groups(self, dim)

    def _groups(self, dim: str) -> tuple[tuple[Hashable, ...], ...]:
        members = FLATTENED.get(dim, (dim,))
        if any(m not in DIMS for m in members):
            raise UsageError(f"unknown mesh dimension {dim!r}; choose one of {', '.join(DIMS + tuple(FLATTENED))}")
        # ranks are row-major over DIMS: a group holds the ranks that differ only in `members`' coordinates; its
        # first rank has those at 0, so groups ordered by first rank are the other coordinates in order
        sizes = dict(zip(DIMS, self.shape))
        strides, step = {}, 1
        for d in reversed(DIMS):
            strides[d], step = step, step * sizes[d]
        if all(sizes[d] == 1 for d in members):  # a dimension of degree 1: each GPU a group of its own
            return tuple(zip(self.gpus))
        offsets, starts = [0], [0]  # rank offsets inside a group; each group's first rank
        for d in DIMS:
            spread = [c * strides[d] for c in range(sizes[d])]
            if d in members:
                offsets = [o + x for o in offsets for x in spread]
            else:
                starts = [o + x for o in starts for x in spread]
        gpus, size = self.gpus, len(offsets)
        step = offsets[1] - offsets[0] if size > 1 else 1
        if offsets == list(range(0, size * step, step)):  # evenly spaced ranks (every single or flattened dim): a slice
            return tuple(tuple(gpus[start:start + size * step:step]) for start in starts)
        return tuple(tuple(gpus[start + o] for o in offsets) for start in starts)

    def group_of(self, dim: str, gpu: Hashable) -> tuple[Hashable, ...]:
        return next(g for g in self.groups(dim) if gpu in g)

    def describe(self) -> str:
        return " x ".join(f"{d} {getattr(self, d)}" for d in DIMS)


@lru_cache(maxsize=512)
def _groups(mesh: Mesh, dim: str) -> tuple[tuple[Hashable, ...], ...]:
    return mesh._groups(dim)  # a planner prices many candidates on one mesh: each mesh's groups once


def build_mesh(gpus: Sequence[Hashable], *, dp_replicate: int = 1, dp_shard: int = -1, cp: int = 1, tp: int = 1,
               pp: int = 1) -> Mesh:
    """Validate the degrees against the GPU count once, with the arithmetic in the message; dp_shard -1
    takes what the others leave (torchtitan's default)."""
    gpus = tuple(gpus)
    n = len(gpus)
    if len(set(gpus)) != n:
        twice = sorted({g for g in gpus if gpus.count(g) > 1}, key=str)
        raise UsageError(f"GPU list names {', '.join(map(str, twice))} more than once")
    for name, value in (("dp_replicate", dp_replicate), ("cp", cp), ("tp", tp), ("pp", pp)):
        if value < 1:
            raise UsageError(f"{name} must be at least 1, not {value}")
    others = dp_replicate * cp * tp * pp
    if dp_shard == -1:
        if n % others:
            raise UsageError(f"{n} GPUs do not divide by dp_replicate {dp_replicate} x cp {cp} x tp {tp} x pp {pp} "
                             f"= {others} (they leave {n % others}); dp_shard would not be whole")
        dp_shard = n // others
    elif dp_shard < 1:
        raise UsageError(f"dp_shard must be at least 1 or -1 (the rest), not {dp_shard}")
    total = others * dp_shard
    if total != n:
        raise UsageError(f"dp_replicate {dp_replicate} x dp_shard {dp_shard} x cp {cp} x tp {tp} x pp {pp} = {total} "
                         f"GPUs, but {n} are given")
    return Mesh(gpus=gpus, pp=pp, dp_replicate=dp_replicate, dp_shard=dp_shard, cp=cp, tp=tp)


def groups_spanning(mesh: Mesh, dim: str, domain: Callable[[Hashable], Hashable]) -> tuple[tuple[Hashable, ...], ...]:
    """The groups of `dim` whose GPUs fall in more than one domain (node, NVLink island, rack): the groups
    whose collectives cross the slower link."""
    return tuple(g for g in mesh.groups(dim) if len({domain(x) for x in g}) > 1)


def largest_contained_degree(gpus: Sequence[Hashable], domain: Callable[[Hashable], Hashable],
                             limit: int | None = None) -> int:
    """The largest degree d dividing len(gpus) (and at most `limit`) for which every run of d consecutive
    GPUs lies in one domain: the largest TP the ordering keeps inside islands (1 if none larger)."""
    n = len(gpus)
    best = 1
    for d in range(2, (limit or n) + 1):
        if n % d:
            continue
        if all(len({domain(x) for x in gpus[i:i + d]}) == 1 for i in range(0, n, d)):
            best = d
    return best
