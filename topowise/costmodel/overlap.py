"""When a step's collectives run beside its compute: the forward and the backward as two timelines.

A phase is a row of compute segments on the compute stream and a row of transfers on the
communication lanes. A transfer is issued when a segment ends (its data is ready: a DDP bucket's
last gradient, a block's reduce-scatter after that block's backward) or at the phase's start, may
hold back a later segment (FSDP2's all-gather of the next block, prefetched one block ahead), and
runs after the transfers issued before it on its lane: one NCCL communicator runs its collectives one
at a time, in the order they were issued. HSDP's replica all-reduce has a lane of its own and
follows the reduce-scatter whose output it sends.

    exposed = (end of the phase's last compute or transfer - its compute alone)
              + (1 - e) x the transfer time that ran beside compute

The first term is structural: which bucket is last and how large, how late the first one is ready
(a tied output layer's backward makes no bucket ready; an untied one makes its own, early), what a
stalled block waits for. The second is what the compute loses while NCCL's kernels share the GPU
(SMs, HBM): e is Profile.overlap[strategy], fitted by `calibrate`. When every transfer may start at
the phase's start and none holds compute back, this is the earlier closed form
max(H - C, 0) + (1 - e) min(H, C).

Compute segments come from the step's own times (step.py): the backward's head (the loss's backward
over the vocabulary and the output layer's two matmuls) first, then the blocks last to first, each
an equal share of the rest, split inside a block by its tensors' backward FLOPs (4 x elements each:
the input gradient and the weight gradient) with the attention's backward before the fused qkv.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from topowise.costmodel.comm import (
    BACKWARD,
    BACKWARD_LAST,
    block_backward,
    ddp_bucket_ends,
    grad_tensors_in_ready_order,
)
from topowise.models.spec import ModelSpec

START = -1  # `after` of a transfer issued when the phase starts


class Transfer(NamedTuple):  # a tuple: a 70B model's DDP backward makes about 800 of them per prediction
    seconds: float
    after: int  # issued when compute segment `after` ends (START: when the phase starts)
    needed_by: int | None = None  # the segment that cannot start before this transfer is done
    lane: str = "comm"
    follows: int | None = None  # index of an earlier transfer whose output this one sends


@dataclass(frozen=True)
class PhaseTimeline:
    compute_s: float  # the phase's compute alone
    end_s: float  # when its last compute segment or transfer ends
    comm_s: float  # every transfer's time
    beside_s: float  # transfer time that ran while the compute stream was busy

    @property
    def structural_s(self) -> float:
        """What the phase takes beyond its compute: stalls on an all-gather, the transfers after the end."""
        return self.end_s - self.compute_s

    def exposed(self, overlap: float) -> float:
        """The phase's cost of its transfers at overlap efficiency `overlap`."""
        return self.structural_s + (1.0 - overlap) * self.beside_s


def run_phase(segments: list[float], transfers: list[Transfer]) -> PhaseTimeline:
    """Lay `transfers` (in issue order) beside `segments` and return when the phase ends."""
    assert all(a.after <= b.after for a, b in zip(transfers, transfers[1:])), "transfers must come in issue order"
    waiting: dict[int, list[int]] = {}
    for k, t in enumerate(transfers):
        if t.needed_by is not None:
            assert t.needed_by > t.after, "a transfer cannot be needed before it is issued"
            waiting.setdefault(t.needed_by, []).append(k)
    n = len(transfers)
    began, done = [0.0] * n, [0.0] * n
    lane_free: dict[str, float] = {}
    ends: list[float] = []
    busy: list[list[float]] = []  # the compute stream's busy intervals, joined where one segment follows another
    issued = 0

    def issue_until(segment: int) -> None:  # every transfer issued at or before the end of `segment`
        nonlocal issued
        while issued < n and transfers[issued].after <= segment:
            t = transfers[issued]
            start = max(lane_free.get(t.lane, 0.0), 0.0 if t.after == START else ends[t.after],
                        0.0 if t.follows is None else done[t.follows])
            began[issued], done[issued] = start, start + t.seconds
            lane_free[t.lane] = done[issued]
            issued += 1

    clock = 0.0
    for i, seconds in enumerate(segments):
        issue_until(i - 1)
        start = max([clock] + [done[k] for k in waiting[i]]) if i in waiting else clock
        clock = start + seconds
        ends.append(clock)
        if busy and busy[-1][1] >= start:
            busy[-1][1] = clock
        elif seconds > 0:
            busy.append([start, clock])
    issue_until(len(segments))
    beside = sum(overlap_with(busy, b, d) for b, d in zip(began, done))
    return PhaseTimeline(sum(segments), max([clock] + done), sum(t.seconds for t in transfers), beside)


def overlap_with(busy: list[list[float]], begin: float, end: float) -> float:
    """How long [begin, end] shares with the (sorted, disjoint) busy intervals."""
    total = 0.0
    for lo, hi in busy:
        if lo >= end:
            break
        if hi > begin:
            total += min(end, hi) - max(begin, lo)
    return total


def split_blocks(total_s: float, head_s: float, blocks: int) -> list[float]:
    """The head's time, then `blocks` equal shares of what is left (never negative)."""
    head_s = min(head_s, total_s)
    return [head_s] + [(total_s - head_s) / blocks] * blocks


# --- the phases of a PyTorch step (DDP's family, FSDP2's) -------------------------------------------
def per_call(collectives, op: str, unit: str) -> float:
    """Seconds of one call of `op` on `unit` (0 when the step has none, e.g. on one GPU)."""
    return next((c.time_s / c.count for c in collectives if c.op == op and c.unit == unit and c.count), 0.0)


def ddp_backward(model: ModelSpec, seq_len: int, collectives, total_s: float, head_s: float,
                 extra_flops_per_block: float = 0.0, attention_scale: float = 1.0) -> PhaseTimeline:
    """DDP's backward: each bucket's all-reduce issued when its last gradient is made, one at a time.
    `attention_scale`: the attention's time per FLOP over the matmuls' (comm.block_backward)."""
    segments, buckets = ddp_segments(model, seq_len, total_s, head_s, extra_flops_per_block, attention_scale)
    rest = next((c.time_s for c in collectives if c.unit == "bucket" and c.phase == BACKWARD), 0.0)
    last = next((c.time_s for c in collectives if c.unit == "bucket" and c.phase == BACKWARD_LAST), 0.0)
    rest_bytes = sum(b for b, _ in buckets[:-1]) or 1
    # the buckets before the last are priced together (comm.py): their time is shared by their bytes
    transfers = [Transfer(rest * b / rest_bytes, k) for b, k in buckets[:-1]]
    transfers.append(Transfer(last, buckets[-1][1]))
    return run_phase(segments, transfers)


def ddp_segments(model: ModelSpec, seq_len: int, total_s: float, head_s: float, extra_flops_per_block: float = 0.0,
                 attention_scale: float = 1.0) -> tuple[list[float], list[tuple[int, int]]]:
    """DDP's backward as segments (the head, then one per parameter tensor in the order its gradient is
    made) and its buckets as (bytes, the segment at whose end the bucket is ready)."""
    tensors = grad_tensors_in_ready_order(model)
    pieces = block_backward(model, seq_len, attention_scale)
    work = [w for _, w in pieces]
    work[0] += extra_flops_per_block  # a checkpointed block runs its forward again before its first gradient
    head = len(tensors) - model.num_layers * len(pieces) - (2 if model.max_positions else 1)
    head_s, block_s = split_blocks(total_s, head_s, model.num_layers)[:2]
    per_tensor = [0.0] * head + [block_s * w / sum(work) for w in work] * model.num_layers
    per_tensor += [0.0] * (len(tensors) - len(per_tensor))  # the embeddings: a lookup's backward, ~0
    # tensor k is made at the end of segment k + 1 (segment 0 is the head)
    return [head_s] + per_tensor, [(b, k + 1) for b, k in ddp_bucket_ends(model)]


def ready_times(segments: list[float], buckets: list[tuple[int, int]]) -> list[float]:
    """Seconds from the phase's start at which each bucket is ready (compute alone, no stalls)."""
    ends, clock = [], 0.0
    for s in segments:
        clock += s
        ends.append(clock)
    return [ends[k] for _, k in buckets]


def fsdp_forward(model: ModelSpec, collectives, total_s: float, head_s: float) -> PhaseTimeline:
    """FSDP2's forward: the root's and the first block's all-gathers before any compute, each later
    block's prefetched while the block before it runs. Segments: embedding, blocks, output and loss."""
    blocks = model.num_layers
    segments = [0.0] + split_blocks(total_s, head_s, blocks)[1:] + [min(head_s, total_s)]
    gather = per_call(collectives, "all_gather", "block")
    transfers = [Transfer(per_call(collectives, "all_gather", "root"), START, needed_by=0),
                 Transfer(gather, START, needed_by=1)]
    transfers += [Transfer(gather, b - 1, needed_by=b + 1) for b in range(1, blocks)]
    return run_phase(segments, transfers)


def fsdp_backward(model: ModelSpec, collectives, total_s: float, head_s: float, regather: bool) -> PhaseTimeline:
    """FSDP2's backward: output layer and loss first, then the blocks last to first (segment s is block
    L - s), then the embedding. Each block's reduce-scatter is issued when its backward ends; with
    `regather` (zero3, hsdp) each block is all-gathered again, prefetched one block ahead; HSDP's
    replica all-reduce follows each reduce-scatter on a lane of its own."""
    blocks = model.num_layers
    segments = split_blocks(total_s, head_s, blocks) + [0.0]
    gather = per_call(collectives, "all_gather", "block") if regather else 0.0
    scatter = per_call(collectives, "reduce_scatter", "block")
    replica = per_call(collectives, "all_reduce", "block")
    transfers = [Transfer(gather, START, needed_by=1)] if gather else []

    def reduce(seconds: float, replica_s: float, after: int) -> None:
        transfers.append(Transfer(seconds, after))
        if replica_s:
            transfers.append(Transfer(replica_s, after, lane="replica", follows=len(transfers) - 1))

    for s in range(blocks + 1):  # at the end of segment s: its reduce-scatter, then the next prefetch
        if s >= 1:
            reduce(scatter, replica, s)
        if gather and s + 2 <= blocks:
            transfers.append(Transfer(gather, s, needed_by=s + 2))
    reduce(per_call(collectives, "reduce_scatter", "root"), per_call(collectives, "all_reduce", "root"), blocks + 1)
    return run_phase(segments, transfers)
