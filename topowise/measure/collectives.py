"""Collective benchmark, the nccl-tests way: size sweep, out-of-place buffers, algbw/busbw, a `wrong` count.

Pure parts (size parsing, the sweep, bus factors, expected bandwidth, likely causes) import nothing
heavy; the measuring part imports torch inside its functions, so the CLI can check arguments fast.

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
"""

from __future__ import annotations

import math
import os
import re
import time
import zlib
from dataclasses import asdict, dataclass, field

from topowise.errors import UsageError

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "sendrecv")
DEFAULT_OPS = OPS
OP_ALIASES = {
    "allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter",
    "alltoall": "all_to_all", "all2all": "all_to_all", "bcast": "broadcast", "send_recv": "sendrecv",
    "p2p": "sendrecv",
}
DTYPES = {"float32": 4, "bfloat16": 2, "float16": 2}
DTYPE_ALIASES = {"fp32": "float32", "float": "float32", "bf16": "bfloat16", "fp16": "float16", "half": "float16"}
# Largest integer each dtype holds exactly (significand bits): bounds |sum of n ranks' values|.
_EXACT_INT = {"float32": 2**24, "bfloat16": 2**8, "float16": 2**11}

# Ops whose buffers are split in n equal chunks: the size must be a multiple of n elements.
_CHUNKED = ("all_gather", "reduce_scatter", "all_to_all")

# Messages up to this size are replayed from a CUDA graph under --graph auto (launch cost matters
# there; above it one call lasts long enough that it does not).
GRAPH_AUTO_MAX_BYTES = 32 * 2**20

# What NCCL achieves of a link's line rate on large messages, by link kind.
ACHIEVABLE_FRACTION = {
    "NV": 0.77,  # NVLink 4: ~370 of 478 GB/s busbw (facts.md, nccl-tests issue 212, maintainer)
    "PCIe": 0.79,  # PCIe Gen5: ~50 of 63 GB/s on 2x H100 NVL without the bridge (facts.md)
}
# Fixed cost per collective call for the alpha-beta expectation: fit to nccl-tests on the 2x H200
# machine (facts.md: all_reduce 44.5 GB/s busbw at 1 MiB, 329 at 1 GiB -> ~20 us; all_gather agrees).
DEFAULT_LATENCY_S = 20e-6
FLAG_BELOW_PCT = 70.0

_SIZE = re.compile(r"^\s*(?P<num>\d+(?:\.\d+)?)\s*(?P<unit>[kmgt]?)(?P<suffix>i?b?)\s*$", re.I)


# --- argument parsing (pure) ------------------------------------------------------------------
def parse_size(text: str | int, what: str = "size") -> int:
    """'1M', '64MiB', '1G', '4096' -> bytes. K/M/G/T and KiB/MiB/... are powers of 1024 (as nccl-tests
    reads -b/-e); KB/MB/GB/TB are powers of 1000."""
    if isinstance(text, int):
        return text
    m = _SIZE.match(str(text))
    if not m:
        raise UsageError(f"{what} {text!r} is not a size: write bytes or e.g. 1M, 64MiB, 1G")
    num = float(m["num"])
    unit = m["unit"].lower()
    suffix = m["suffix"].lower()
    power = " kmgt".index(unit) if unit else 0
    if unit and suffix == "b":  # MB, GB: decimal
        base = 1000
    elif not unit and suffix not in ("", "b"):
        raise UsageError(f"{what} {text!r} is not a size: write bytes or e.g. 1M, 64MiB, 1G")
    else:
        base = 1024
    value = num * base**power
    if value != int(value):
        raise UsageError(f"{what} {text!r} is not a whole number of bytes")
    return int(value)


def parse_ops(text: str) -> tuple[str, ...]:
    """'all_reduce,all_gather' -> ('all_reduce', 'all_gather'); 'all' -> every op; 'none' -> ()."""
    words = [w.strip().lower().replace("-", "_") for w in str(text).split(",") if w.strip()]
    if words == ["all"]:
        return OPS
    if words == ["none"]:
        return ()
    ops = []
    for w in words:
        op = OP_ALIASES.get(w.replace("_", ""), w) if w not in OPS else w
        if op not in OPS:
            raise UsageError(f"--ops: unknown collective {w!r}; valid: {', '.join(OPS)} (or all, none)")
        if op not in ops:
            ops.append(op)
    if not ops:
        raise UsageError(f"--ops {text!r} names no collective; valid: {', '.join(OPS)}")
    return tuple(ops)


def parse_dtype(text: str) -> str:
    name = DTYPE_ALIASES.get(text.lower(), text.lower())
    if name not in DTYPES:
        raise UsageError(f"--dtype {text!r}: choose one of {', '.join(DTYPES)}")
    return name


def size_sweep(min_bytes: int, max_bytes: int, factor: float = 2) -> tuple[int, ...]:
    """min, min*factor, ... up to max (inclusive), as nccl-tests -b/-e/-f."""
    if min_bytes < 1:
        raise UsageError(f"--min-bytes must be at least 1 byte, not {min_bytes}")
    if max_bytes < min_bytes:
        raise UsageError(f"--min-bytes {min_bytes} is larger than --max-bytes {max_bytes}: swap them")
    if not factor > 1:
        raise UsageError(f"--factor must be greater than 1, not {factor}")
    sizes, size = [], float(min_bytes)
    while size <= max_bytes * (1 + 1e-12):
        if not sizes or int(size) != sizes[-1]:
            sizes.append(int(size))
        size *= factor
    return tuple(sizes)


# --- bandwidth arithmetic (pure) ---------------------------------------------------------------
def bus_factor(op: str, n: int) -> float:
    """busbw = algbw x factor (nccl-tests doc/PERFORMANCE.md, facts.md)."""
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in _CHUNKED:
        return (n - 1) / n
    if op in ("broadcast", "sendrecv"):
        return 1.0
    raise ValueError(op)


def case_elements(op: str, nbytes: int, n: int, elem_size: int) -> int:
    """Elements of the full buffer S for a requested size: rounded down to whole elements, and to a
    multiple of n for the chunked ops (as nccl-tests does); never zero."""
    count = max(1, nbytes // elem_size)
    if op in _CHUNKED:
        count = max(n, count - count % n)
    return count


def bandwidths(op: str, nbytes: int, n: int, time_s: float) -> tuple[float, float]:
    """(algbw, busbw) in GB/s for S = nbytes moved in time_s."""
    algbw = nbytes / time_s / 1e9 if time_s > 0 else 0.0
    return algbw, algbw * bus_factor(op, n)


def case_key(record: dict) -> tuple | None:
    """What makes two collective records the same case (for --resume)."""
    if record.get("kind") != "collective":
        return None
    return (record["op"], int(record["bytes"]), record["dtype"], int(record["world_size"]),
            record.get("backend"), record.get("fabric"), record.get("algo", "auto"))


# --- what the topology says (pure) ---------------------------------------------------------------
@dataclass(frozen=True)
class Expectation:
    """What a group's bottleneck link should give: busbw = line x fraction on large messages, with a
    fixed per-call latency on small ones."""

    line_gbps: float
    fraction: float
    latency_s: float
    link: str  # "NV", "PCIe"
    source: str

    def busbw_gbps(self, op: str, nbytes: int, n: int) -> float:
        bus_bytes = nbytes * bus_factor(op, n)
        if bus_bytes <= 0:
            return 0.0
        t = self.latency_s + bus_bytes / (self.line_gbps * self.fraction * 1e9)
        return bus_bytes / t / 1e9


def expectation_for(topology, gpus, fabric: str = "nvlink", *, multi_node: bool = False,
                    backend: str = "nccl") -> Expectation | None:
    """The expectation for `gpus` on `topology` (a Topology), or None when it cannot be said."""
    if topology is None or multi_node or len(gpus) < 2 or backend != "nccl":
        return None
    try:
        topo = topology.restricted_to(gpus)
        if fabric == "pcie":
            topo = topo.without_nvlink()
        line = topo.bottleneck_gbps(gpus)
        nv = all(topo.link(a, b).is_nvlink for i, a in enumerate(gpus) for b in gpus[i + 1:])
    except Exception:  # a topology that does not cover these GPUs: no expectation rather than a crash
        return None
    if not line or math.isinf(line):
        return None
    link = "NV" if nv else "PCIe"
    return Expectation(line, ACHIEVABLE_FRACTION[link], DEFAULT_LATENCY_S, link,
                       f"{topology.name}: bottleneck {line:.0f} GB/s ({link}) x {ACHIEVABLE_FRACTION[link]:.2f}")


def costmodel_busbw_gbps(op: str, nbytes: int, n: int, topology, gpus, fabric: str,
                         profile: dict | None = None) -> float | None:
    """The cost model's busbw for this case (topowise.costmodel.comm: alpha-beta over the group's
    bottleneck with the profile's achieved fraction and latency), or None where it has no answer
    (all_to_all, sendrecv) or is not importable."""
    if topology is None:
        return None
    try:
        from topowise.costmodel.comm import collective_time, group_link
        from topowise.costmodel.profile import Profile, default_profile

        prof = Profile.from_dict(profile) if profile else default_profile()
        topo = topology.without_nvlink() if fabric == "pcie" else topology
        line, link = group_link(topo, gpus)
        t = float(collective_time(op, nbytes, n, line, link, prof))
    except Exception:
        return None
    return nbytes * bus_factor(op, n) / t / 1e9 if t > 0 and math.isfinite(t) else None


STALE_VARS = {
    "NCCL_P2P_DISABLE": "NCCL_P2P_DISABLE={v} turns GPU peer-to-peer (NVLink) off",
    "NCCL_P2P_LEVEL": "NCCL_P2P_LEVEL={v} limits where P2P is used; a stale value silently disabled NVLink "
                      "in nccl-tests issue 228",
    "NCCL_SHM_DISABLE": "NCCL_SHM_DISABLE={v}",
    "NCCL_ALGO": "NCCL_ALGO={v} forces an algorithm",
    "NCCL_PROTO": "NCCL_PROTO={v} forces a protocol",
    "NCCL_MAX_NCHANNELS": "NCCL_MAX_NCHANNELS={v} caps the channels (each channel is a share of the bandwidth)",
    "NCCL_MIN_NCHANNELS": "NCCL_MIN_NCHANNELS={v}",
    "NCCL_BUFFSIZE": "NCCL_BUFFSIZE={v}",
    "NCCL_IB_DISABLE": "NCCL_IB_DISABLE={v} sends inter-node traffic over sockets",
    "NCCL_NET": "NCCL_NET={v}",
    "NCCL_CUMEM_ENABLE": "NCCL_CUMEM_ENABLE={v}",
}


def likely_causes(*, fabric: str, transport: str, environ: dict, topology=None, gpus=(),
                  multi_node: bool = False) -> list[str]:
    """Reasons a measured busbw can fall well short of the expectation, most specific first."""
    causes = []
    for var, text in STALE_VARS.items():
        value = environ.get(var)
        if value is None or (var == "NCCL_P2P_DISABLE" and fabric == "pcie"):
            continue
        causes.append(f"{text.format(v=value)} (set in the environment)")
    has_nv = False
    spanned = 1
    if topology is not None and len(gpus) > 1:
        try:
            has_nv = any(topology.link(a, b).is_nvlink for i, a in enumerate(gpus) for b in gpus[i + 1:])
            spanned = len(topology.islands_spanned(gpus))
        except Exception:
            pass
    if fabric == "pcie":
        causes.append("--fabric pcie: NCCL_P2P_DISABLE=1 sends data through host memory (SHM), which on "
                      "many hosts reaches about half the PCIe rate")
    elif has_nv and transport and ("SHM" in transport or transport.startswith("NET")):
        causes.append(f"NCCL used {transport} although the topology has NVLink here: GPU P2P unsupported "
                      "or disabled (container without IPC, driver, NCCL_P2P_* variables)")
    if not has_nv and fabric != "pcie" and topology is not None:
        causes.append("PCIe path: ACS or the IOMMU routes peer traffic through the root complex and can "
                      "halve it (nccl-tests issue 112); check `sudo lspci -vvv | grep ACSCtl`")
    if spanned > 1:
        causes.append(f"the GPUs span {spanned} NVLink islands: the ring leaves each island over PCIe")
    if multi_node:
        causes.append("several nodes: the network sets the pace (check `Using network` in the NCCL log)")
    return causes


# --- the config one rank receives ----------------------------------------------------------------
@dataclass(frozen=True)
class CommConfig:
    ops: tuple[str, ...] = DEFAULT_OPS
    sizes: tuple[int, ...] = ()
    dtype: str = "float32"
    warmup: int = 5
    iters: int = 20
    backend: str = "nccl"
    fabric: str = "nvlink"
    seed: int = 0
    graph: str = "auto"  # auto | on | off
    timeout_s: float = 300.0
    out: str = ""
    resume: bool = False
    state_dir: str = ""  # rank 0 writes state.json (the case it is in); ranks write error.rankN.txt
    nccl_log: str = ""  # NCCL_DEBUG_FILE pattern to parse for the transport
    topology: dict | None = None  # Topology.to_dict(), or None to try live discovery on rank 0
    profile: dict | None = None  # a cost-model Profile.to_dict() for the expectation (None: default)
    gpus: tuple[int, ...] = ()  # physical GPU index of each local rank
    algo: str = ""  # NCCL_ALGO this run was started with ("" = NCCL's own choice); a label for records
    matrix: bool = False
    matrix_bytes: int = 256 * 2**20
    plot: str = ""
    json: bool = False
    started: float = field(default_factory=time.time)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "CommConfig":
        data = dict(data)
        for key in ("ops", "sizes", "gpus"):
            data[key] = tuple(data.get(key, ()))
        return cls(**data)


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


def _test_fault(kind: str, op: str) -> bool:
    """Test hook: TOPOWISE_TEST_FAULT=<corrupt|raise|hang>:<op> makes the last rank misbehave in that op,
    so the tests can see that a wrong result is counted, a failing rank ends the run with its message,
    and a hung call ends at --timeout. Unset in normal use."""
    return os.environ.get("TOPOWISE_TEST_FAULT") == f"{kind}:{op}"


def _inject_faults(op: str, rank: int, n: int, out) -> None:
    if rank != n - 1:
        return
    if _test_fault("corrupt", op):
        flat = out.view(-1)
        flat[: min(3, flat.numel())] += 1000
    if _test_fault("raise", op):
        raise RuntimeError(f"injected failure in {op} (TOPOWISE_TEST_FAULT)")
    if _test_fault("hang", op):
        time.sleep(3600)


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
    _inject_faults(op, rank.rank, world, buf.out)
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
def pending_cases(cfg: CommConfig, world: int, done: set) -> list[tuple[str, int]]:
    """(op, requested bytes) in sweep order, less those already in the result file."""
    out = []
    for op in cfg.ops:
        for size in cfg.sizes:
            nbytes = case_elements(op, size, world, DTYPES[cfg.dtype]) * DTYPES[cfg.dtype]
            algo = cfg.algo or os.environ.get("NCCL_ALGO", "") or "auto"
            if (op, nbytes, cfg.dtype, world, cfg.backend, cfg.fabric, algo) not in done:
                out.append((op, size))
    return out


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
        "algo": cfg.algo or os.environ.get("NCCL_ALGO", "") or "auto",
        **node_labels(nodes or {}),
    }


def node_labels(nodes: dict) -> dict:
    """nodes: node -> its ranks. Every collective spans the whole job: inter-node when it has 2+ nodes."""
    return {"nodes": len(nodes) or 1, "ranks_per_node": {h: list(r) for h, r in nodes.items()},
            "scope": "inter-node" if len(nodes) > 1 else "intra-node"}


def node_name() -> str:
    """This rank's node: torchrun's node rank (GROUP_RANK), srun's SLURM_NODEID, else the hostname."""
    import socket

    host = socket.gethostname()
    for var in ("GROUP_RANK", "SLURM_NODEID"):
        if os.environ.get(var, "").isdigit():
            return f"node{os.environ[var]} ({host})"
    return host


def ranks_by_node(world: int) -> dict:
    """node -> sorted ranks on it, from every rank's `node_name` (a collective call: all ranks must call it)."""
    import torch.distributed as dist

    names = [None] * world
    dist.all_gather_object(names, node_name())
    out: dict = {}
    for r, name in enumerate(names):
        out.setdefault(name, []).append(r)
    return out


@dataclass
class RunContext:
    """What rank 0 knows about the run besides the numbers: for records and the table's # lines."""

    world: int
    transport: str = "unknown"
    nccl_version: str | None = None
    expectation: Expectation | None = None
    topology: object = None
    gpus: tuple[int, ...] = ()
    multi_node: bool = False
    nodes: dict = field(default_factory=dict)  # node -> ranks
    causes: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    expected_from: set = field(default_factory=set)


def resolve_topology(cfg: CommConfig):
    """The topology given to the run, else the live one (NVML), else None."""
    if cfg.topology:
        from topowise.topology.model import Topology

        return Topology.from_dict(cfg.topology)
    try:
        from topowise.topology.nvml import discover  # optional: needs NVML and a GPU
    except Exception:
        return None
    try:
        return discover()
    except Exception:
        return None


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
        except Exception:
            pass


def write_state(cfg: CommConfig, **state) -> None:
    """rank 0's note of the case it is entering: the parent names it if the run dies or hangs."""
    if not cfg.state_dir:
        return
    import json

    path = os.path.join(cfg.state_dir, "state.json")
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(dict(state, time=time.time()), fh)
    os.replace(tmp, path)


def run_collectives(cfg: CommConfig, rank, *, on_plan=None, on_record=None) -> tuple[list[dict], RunContext]:
    """Every pending case on this rank. Rank 0 appends each record to cfg.out as soon as it has it and
    calls on_record(record); on_plan(cases) is called once on rank 0 with the case list."""
    import socket

    import torch.distributed as dist

    from topowise.measure.records import append_record, done_keys

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
        ctx.topology = resolve_topology(cfg)
        ctx.gpus = tuple(cfg.gpus[:world]) if len(cfg.gpus) >= world else tuple(range(world))
        ctx.expectation = expectation_for(ctx.topology, ctx.gpus, cfg.fabric, multi_node=ctx.multi_node,
                                          backend=cfg.backend)
        if on_plan:
            on_plan(cases, ctx)
    host = socket.gethostname()
    records = []
    for op, size in cases:
        if rank.is_main:
            write_state(cfg, op=op, bytes=size, dtype=cfg.dtype)
        res = measure_case(op, size, cfg, rank, world)
        if not rank.is_main:
            continue
        refresh_transport(ctx, cfg)
        expected = None
        if ctx.expectation is not None:  # (the cost model is asked only where the topology applies)
            expected = costmodel_busbw_gbps(op, res.bytes, world, ctx.topology, ctx.gpus, cfg.fabric, cfg.profile)
            if expected is not None:
                ctx.expected_from.add("cost model (topowise.costmodel.comm" + (", --profile)" if cfg.profile else ", default profile)"))
        if expected is None and ctx.expectation is not None:
            ctx.expected_from.add(ctx.expectation.source + f" + {ctx.expectation.latency_s * 1e6:.0f} us per call")
            expected = ctx.expectation.busbw_gbps(op, res.bytes, world)
        rec = collective_record(res, cfg, world, transport=ctx.transport, nccl_version=ctx.nccl_version,
                                expected_gbps=expected, host=host, nodes=ctx.nodes)
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
