"""`bench comm`, rank side: the collectives sweep, the nccl-tests way (size sweep, out-of-place
buffers, algbw/busbw, a `wrong` count), and the pair matrix. Started by `comm.run_comm` on every rank.

Timing. On CUDA each case is timed by two events around `iters` back-to-back calls with no host sync
between them; the GPU is first kept busy by a short spin kernel so the host can queue the whole loop
ahead of it, and one untimed call lines the ranks up right before the start event (otherwise the rank
that arrives first would count its wait). Small messages are captured once in a CUDA graph (NCCL
supports capture) so Python's per-call cost does not show; capture falls back to plain calls when it
fails on any rank. On CPU (gloo) a perf_counter brackets the same loop. A case's time is the slowest
rank's (all_reduce MAX), per call.

Correctness. Every rank fills its input with small random integers drawn from a counter-based hash of
(seed, rank, op, size, element index): any rank can compute any other rank's data, and sums of small
integers are exact in every dtype and every reduction order, so a result either equals the expected
value or is wrong. After timing, inputs are refilled, the op runs once more, and each rank counts the
elements that differ; `wrong` is the sum over ranks (as nccl-tests reports it). all_reduce and
broadcast are in place in torch.distributed (NCCL's speed is the same either way); the others use
separate input and output buffers, as nccl-tests' out-of-place columns do.

Rank 0 appends each record to --out as soon as it has it, keeps a state file naming the case it is in
(the parent's heartbeat and progress), and writes its result (records, pairs, transport) for the
parent at the end. The expected busbw of each case arrives in the config.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import zlib
from dataclasses import dataclass, field

from topowise.errors import UsageError
from topowise.measure.comm import (
    DTYPES,
    FLAG_BELOW_PCT,
    CommConfig,
    algo_label,
    bandwidths,
    case_elements,
    case_key,
    expected_key,
    group_gpus,
    likely_causes,
    pending_cases,
)
from topowise.measure.rank import destroy_process_group, init_distributed, node_labels, ranks_by_node
from topowise.measure.records import append_record, done_keys
from topowise.units import MIB

# Largest integer each dtype holds exactly (significand bits): bounds |sum of n ranks' values|.
_EXACT_INT = {"float32": 2**24, "bfloat16": 2**8, "float16": 2**11}

# Messages up to this size are replayed from a CUDA graph under --graph auto (launch cost matters
# there; above it one call lasts long enough that it does not).
GRAPH_AUTO_MAX_BYTES = 32 * MIB


# --- the check data ------------------------------------------------------------------------------
def data_amplitude(dtype: str, n: int) -> int:
    """Values lie in [-a, a] so that any sum over n ranks is exact in `dtype`."""
    return max(1, min(8, _EXACT_INT[dtype] // max(1, n)))


def data_key(seed: int, rank: int, op: str, nbytes: int) -> int:
    return zlib.crc32(f"{seed}/{rank}/{op}/{nbytes}".encode()) & 0x7FFFFFFF


def expected_segments(op: str, rank: int, n: int, count: int) -> list[tuple[int, int, list[tuple[int, int]]]]:
    """Where each part of this rank's output comes from: (out_offset, length, [(src_rank, src_offset)]),
    meaning out[out_offset + k] = sum over the sources of data(src_rank)[src_offset + k]."""
    c = count // n
    if op == "all_reduce":
        return [(0, count, [(r, 0) for r in range(n)])]
    if op == "all_gather":
        return [(r * c, c, [(r, 0)]) for r in range(n)]
    if op == "reduce_scatter":
        return [(0, c, [(r, rank * c) for r in range(n)])]
    if op == "all_to_all":
        return [(r * c, c, [(r, rank * c)]) for r in range(n)]
    if op == "broadcast":
        return [(0, count, [(0, 0)])]
    if op == "sendrecv":
        return [(0, count, [((rank - 1) % n, 0)])]
    raise ValueError(op)


# --- measuring (torch from here on) ------------------------------------------------------------------
_CHUNK = 1 << 24  # elements per step when filling/checking: bounds the int64 temporaries to 128 MiB


def pattern(key: int, start: int, count: int, amp: int, device):
    """int64 values in [-amp, amp]: a counter-based hash of (key, index), identical on CPU and GPU."""
    import torch

    mask = 0x7FFFFFFF
    h = torch.arange(start, start + count, dtype=torch.int64, device=device)
    h.add_(key).bitwise_and_(mask)
    h.mul_(0x2C1B3C6D).bitwise_and_(mask)
    h.bitwise_xor_(h >> 13)
    h.mul_(0x297A2D39).bitwise_and_(mask)
    h.bitwise_xor_(h >> 16)
    return h.remainder_(2 * amp + 1).sub_(amp)


def fill(tensor, key: int, amp: int) -> None:
    flat = tensor.view(-1)
    for s in range(0, flat.numel(), _CHUNK):
        n = min(_CHUNK, flat.numel() - s)
        flat[s:s + n].copy_(pattern(key, s, n, amp, flat.device))


def count_wrong(out, segments, keys: list[int], amp: int) -> int:
    """Elements of `out` that differ from what `segments` say they should be."""
    import torch

    flat = out.view(-1)
    wrong = torch.zeros((), dtype=torch.int64, device=flat.device)
    for out_off, length, sources in segments:
        for s in range(0, length, _CHUNK):
            n = min(_CHUNK, length - s)
            expected = None
            for src_rank, src_off in sources:
                part = pattern(keys[src_rank], src_off + s, n, amp, flat.device)
                expected = part if expected is None else expected.add_(part)
            wrong += (flat[out_off + s:out_off + s + n] != expected.to(flat.dtype)).sum()
    return int(wrong.item())


@dataclass
class Buffers:
    inp: object
    out: object
    run_once: object  # callable: one collective call, no host sync


def make_buffers(op: str, count: int, rank: int, n: int, dtype, device) -> Buffers:
    import torch
    import torch.distributed as dist

    c = count // n
    in_count = c if op == "all_gather" else count
    out_count = c if op == "reduce_scatter" else count
    inp = torch.empty(in_count, dtype=dtype, device=device)
    out = inp if op in ("all_reduce", "broadcast") else torch.empty(out_count, dtype=dtype, device=device)
    # torch >= 2.13 names them *_single; 2.11 has only *_into_tensor / reduce_scatter_tensor.
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    nxt, prv = (rank + 1) % n, (rank - 1) % n

    if op == "all_reduce":
        def run_once():
            dist.all_reduce(inp)
    elif op == "all_gather":
        def run_once():
            gather(out, inp)
    elif op == "reduce_scatter":
        def run_once():
            scatter(out, inp)
    elif op == "all_to_all":
        def run_once():
            dist.all_to_all_single(out, inp)
    elif op == "broadcast":
        def run_once():
            dist.broadcast(inp, src=0)
    elif op == "sendrecv":
        def run_once():
            for work in dist.batch_isend_irecv([dist.P2POp(dist.isend, inp, nxt), dist.P2POp(dist.irecv, out, prv)]):
                work.wait()
    else:
        raise ValueError(op)
    return Buffers(inp, out, run_once)


@dataclass(frozen=True)
class CaseResult:
    op: str
    bytes: int
    count: int
    time_s: float  # slowest rank, per call
    wrong: int  # summed over ranks
    graph: bool


def measure_case(op: str, nbytes_requested: int, cfg: CommConfig, rank, world: int) -> CaseResult:
    """One (op, size) case on every rank; returns the same CaseResult on all of them."""
    import torch
    import torch.distributed as dist

    dtype = getattr(torch, cfg.dtype)
    elem = DTYPES[cfg.dtype]
    count = case_elements(op, nbytes_requested, world, elem)
    nbytes = count * elem
    device = torch.device(rank.device)
    amp = data_amplitude(cfg.dtype, world)
    keys = [data_key(cfg.seed, r, op, nbytes) for r in range(world)]
    sentinel = float(amp * world + 1)  # outside every valid value: an element never written is wrong

    buf = make_buffers(op, count, rank.rank, world, dtype, device)
    fill(buf.inp, keys[rank.rank], amp)
    if buf.out is not buf.inp:
        buf.out.fill_(sentinel)
    for _ in range(cfg.warmup):
        buf.run_once()

    cuda = device.type == "cuda"
    use_graph = cuda and (cfg.graph == "on" or (cfg.graph == "auto" and nbytes <= GRAPH_AUTO_MAX_BYTES))
    graph = _capture(buf.run_once, cfg.iters, device) if use_graph else None
    if use_graph:  # every rank must replay, or none: agree on it
        flag = torch.tensor([1 if graph is not None else 0], device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MIN)
        if int(flag.item()) == 0:
            graph = None
    t = _time_cuda(buf.run_once, graph, cfg.iters) if cuda else _time_cpu(buf.run_once, cfg.iters)
    used_graph = graph is not None
    del graph

    # Correctness: fresh inputs, one more call, count what differs from the expected values.
    fill(buf.inp, keys[rank.rank], amp)
    if op == "broadcast" and rank.rank != 0:
        buf.inp.fill_(sentinel)
    elif buf.out is not buf.inp:
        buf.out.fill_(sentinel)
    buf.run_once()
    if cuda:
        torch.cuda.synchronize(device)
    wrong = count_wrong(buf.out, expected_segments(op, rank.rank, world, count), keys, amp)

    stats = torch.tensor([t], dtype=torch.float64, device=device)
    dist.all_reduce(stats, op=dist.ReduceOp.MAX)
    bad = torch.tensor([wrong], dtype=torch.int64, device=device)
    dist.all_reduce(bad, op=dist.ReduceOp.SUM)
    return CaseResult(op, nbytes, count, float(stats.item()), int(bad.item()), used_graph)


def _capture(run_once, iters: int, device):
    """`iters` calls captured in one CUDA graph, or None when capture fails here."""
    import torch

    try:
        side = torch.cuda.Stream(device=device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            run_once()  # a call on the capture stream first, as torch.cuda.graphs advises
        torch.cuda.current_stream(device).wait_stream(side)
        torch.cuda.synchronize(device)
        graph = torch.cuda.CUDAGraph()
        # thread_local: the process group's watchdog thread may query events while we capture
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            for _ in range(iters):
                run_once()
        torch.cuda.synchronize(device)
        return graph
    except Exception:
        try:
            torch.cuda.synchronize(device)
        except Exception:
            pass
        return None


def _time_cuda(run_once, graph, iters: int) -> float:
    import torch
    import torch.distributed as dist

    torch.cuda.synchronize()
    dist.barrier()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    # Keep the GPU busy (~50 us per queued call at ~2 GHz) while the host queues the loop behind it.
    torch.cuda._sleep(int(min(iters * 100_000, 200_000_000)))
    run_once()  # untimed: its completion lines the ranks up before the start event
    start.record()
    if graph is not None:
        graph.replay()
    else:
        for _ in range(iters):
            run_once()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / iters


def _time_cpu(run_once, iters: int) -> float:
    import torch.distributed as dist

    dist.barrier()
    run_once()
    t0 = time.perf_counter()
    for _ in range(iters):
        run_once()
    return (time.perf_counter() - t0) / iters


# --- the whole run on one rank --------------------------------------------------------------------
def collective_record(res: CaseResult, cfg: CommConfig, world: int, *, transport: str,
                      nccl_version: str | None, expected_gbps: float | None, host: str = "",
                      nodes: dict | None = None) -> dict:
    algbw, busbw = bandwidths(res.op, res.bytes, world, res.time_s)
    pct = round(100 * busbw / expected_gbps, 1) if expected_gbps else None
    return {
        "kind": "collective",
        "op": res.op,
        "bytes": res.bytes,
        "count": res.count,
        "dtype": cfg.dtype,
        "world_size": world,
        "time_s": res.time_s,
        "algbw_gbps": round(algbw, 3),
        "busbw_gbps": round(busbw, 3),
        "wrong": res.wrong,
        "backend": cfg.backend,
        "fabric": cfg.fabric,
        "transport": transport,
        "nccl_version": nccl_version,
        "expected_busbw_gbps": round(expected_gbps, 2) if expected_gbps else None,
        "expected_pct": pct,
        "flagged": bool(pct is not None and pct < FLAG_BELOW_PCT),
        "iters": cfg.iters,
        "warmup": cfg.warmup,
        "graph": res.graph,
        "host": host,
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "algo": algo_label(cfg),
        **node_labels(nodes or {}),
    }


@dataclass
class RunContext:
    """What rank 0 knows about the run besides the numbers: for records and the table's # lines."""

    world: int
    transport: str = "unknown"
    nccl_version: str | None = None
    topology: object = None
    gpus: tuple[int, ...] = ()
    multi_node: bool = False
    nodes: dict = field(default_factory=dict)  # node -> ranks
    causes: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        """The plain part the parent renders (not the topology)."""
        return {"transport": self.transport, "nccl_version": self.nccl_version, "gpus": list(self.gpus),
                "multi_node": self.multi_node, "nodes": self.nodes, "causes": self.causes, "notes": self.notes}


def refresh_transport(ctx: RunContext, cfg: CommConfig) -> None:
    if cfg.backend != "nccl":
        ctx.transport = "gloo/tcp"
        return
    from topowise.measure.nccl_log import read_logs

    if cfg.nccl_log:
        log = read_logs(cfg.nccl_log, newer_than=cfg.started - 5)
        if log.connections or log.nvls:
            ctx.transport = log.summary()
        ctx.nccl_version = log.version or ctx.nccl_version
    if ctx.nccl_version is None:
        try:
            import torch

            ctx.nccl_version = ".".join(str(x) for x in torch.cuda.nccl.version())
        except Exception:  # no NCCL in this torch build: the version stays unknown
            pass


def write_state(cfg: CommConfig, **state) -> None:
    """rank 0's note of the case it is entering: the parent names it if the run dies or hangs."""
    if not cfg.state_dir:
        return
    path = os.path.join(cfg.state_dir, "state.json")
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(dict(state, time=time.time()), fh)
    os.replace(tmp, path)


def run_collectives(cfg: CommConfig, rank, *, on_plan=None, on_record=None) -> tuple[list[dict], RunContext]:
    """Every pending case on this rank. Rank 0 appends each record to cfg.out as soon as it has it and
    calls on_record(record); on_plan(cases, ctx) is called once on rank 0 with the case list."""
    import torch.distributed as dist

    world = rank.world_size
    ctx = RunContext(world=world, multi_node=rank.local_world_size < world)
    if world < 2:
        raise UsageError("collectives need two or more processes (GPUs); this job has one")
    # Rank 0 alone reads the result file (other nodes may not see it) and tells everyone what is left.
    box = [None]
    if rank.is_main:
        done = done_keys(cfg.out, case_key) if (cfg.resume and cfg.out) else set()
        box[0] = pending_cases(cfg, world, done)
        skipped = len(cfg.ops) * len(cfg.sizes) - len(box[0])
        if skipped:
            ctx.notes.append(f"--resume: {skipped} case(s) already in {cfg.out}, skipped")
    dist.broadcast_object_list(box, src=0)
    cases = box[0]
    ctx.nodes = ranks_by_node(world)
    if rank.is_main:
        if cfg.topology:
            from topowise.topology.model import Topology

            ctx.topology = Topology.from_dict(cfg.topology)
        ctx.gpus = group_gpus(cfg, world)
        if on_plan:
            on_plan(cases, ctx)
    host = socket.gethostname()
    records = []
    for index, (op, size) in enumerate(cases):
        if rank.is_main:
            write_state(cfg, op=op, bytes=size, dtype=cfg.dtype, index=index, total=len(cases))
        res = measure_case(op, size, cfg, rank, world)
        if not rank.is_main:
            continue
        refresh_transport(ctx, cfg)
        rec = collective_record(res, cfg, world, transport=ctx.transport, nccl_version=ctx.nccl_version,
                                expected_gbps=cfg.expected.get(expected_key(op, res.bytes)), host=host,
                                nodes=ctx.nodes)
        if cfg.out:
            append_record(cfg.out, rec)
        records.append(rec)
        if on_record:
            on_record(rec)
    if rank.is_main:
        refresh_transport(ctx, cfg)
        if any(r["flagged"] for r in records):
            ctx.causes = likely_causes(fabric=cfg.fabric, transport=ctx.transport, environ=dict(os.environ),
                                       topology=ctx.topology, gpus=ctx.gpus, multi_node=ctx.multi_node)
        write_state(cfg, op=None, bytes=None, done=True)
    return records, ctx


def measure_matrix(cfg: CommConfig, rank) -> list[dict]:
    """The pair matrix: device-to-device copies on rank 0 (one node only), then send/recv between ranks."""
    import torch.distributed as dist

    from topowise.measure.p2p import copy_matrix, sendrecv_matrix

    out = []
    cuda = rank.device.startswith("cuda")
    if rank.is_main:
        write_state(cfg, stage="matrix", method="copy", src="all", dst="all")
        if cuda and rank.local_world_size == rank.world_size:
            physical = list(cfg.gpus) or list(range(rank.world_size))
            # copy_matrix addresses devices by local index; records name physical GPUs
            recs = copy_matrix(list(range(rank.world_size)), cfg.matrix_bytes)
            for r in recs:
                r["src"], r["dst"] = physical[r["src"]], physical[r["dst"]]
            out.extend(recs)
    dist.barrier()
    if rank.is_main:
        write_state(cfg, stage="matrix", method=rank.backend, src="all", dst="all")
    out.extend(sendrecv_matrix(rank, cfg.matrix_bytes, physical=list(cfg.gpus) or None))
    if rank.is_main and cfg.out:
        for r in out:
            append_record(cfg.out, r)
    return out


def rank_main(config: dict) -> None:
    """One rank of `bench comm` (started by the launcher, or by the user's torchrun/srun).

    A failure on any rank becomes one line, in error.rank<N>.txt for the parent and on stderr, and
    the process exits at once (its peers may be stuck in a collective with it)."""
    cfg = CommConfig.from_dict(config)
    rank = None
    try:
        rank = init_distributed(cfg.backend, cfg.timeout_s)
        records, ctx = run_collectives(cfg, rank) if cfg.ops else ([], None)
        pairs = measure_matrix(cfg, rank) if cfg.matrix else []
        import torch.distributed as dist

        dist.barrier()
        if rank.is_main and cfg.result_path:
            write_result(cfg.result_path, {"world_size": rank.world_size, "collectives": records, "p2p": pairs,
                                           "context": ctx.to_dict() if ctx else None})
    except BaseException as exc:  # noqa: BLE001 - any failure becomes one clear line and a non-zero exit
        if isinstance(exc, SystemExit) and not exc.code:
            raise
        who = f"rank {rank.rank}" if rank else f"rank {os.environ.get('RANK', '?')}"
        msg = f"{who}: {exc}" if not isinstance(exc, KeyboardInterrupt) else f"{who}: interrupted"
        if not isinstance(exc, (UsageError, KeyboardInterrupt, SystemExit)):
            msg = f"{who}: {type(exc).__name__}: {exc}"
        if cfg.state_dir:
            name = f"error.rank{rank.rank if rank else os.environ.get('RANK', 'x')}.txt"
            with open(os.path.join(cfg.state_dir, name), "w") as fh:
                fh.write(msg)
        sys.stderr.write(f"topowise: error: {msg}\n")
        sys.stderr.flush()
        os._exit(1)  # do not wait on peers that may be stuck in a collective with us
    finally:
        destroy_process_group()


def write_result(path: str, result: dict) -> None:
    """Whole or absent: the parent never reads half a result."""
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(result, fh)
    os.replace(tmp, path)
