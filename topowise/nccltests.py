"""What nccl-tests should show on a topology, and a pasted nccl-tests output set beside it.

Three pure pieces, no torch:

- `expected_table`: the busbw a topology should reach per collective and size, row for row as
  nccl-tests prints it (src/util.cu: `writeResultHeader`, `writeBenchmarkLinePreamble`,
  `writeBenchmarkLineBody`; nccl-tests 2.19). Inside one node the price is comm.py's (through
  collectives.call_cost), across nodes network.collective_time_s (NCCL's tuner model).
- `parse_output`: rows and metadata from nccl-tests text, old layout (no root column, a float
  `error` column) and new (`root`, `#wrong`), with or without MPI's per-line prefixes
  (`[1,0]<stdout>:`, `[0]`); the `# nThread .. nGpus ..` header and the `#  Rank ..` lines give
  the rank count, the hosts (nodes) and the GPU model.
- `compare`: each measured row beside the expected one, the sizes that fall short, and the usual
  causes that fit the shape of the shortfall (`hints`).
- `with_settings`: the topology and profile as a run's NCCL settings leave them: `--fabric pcie`
  (NCCL_P2P_DISABLE=1: GPU-to-GPU traffic through the host at PCIe rate) and `--nvls off`
  (NCCL_NVLS_ENABLE=0: no NVLink SHARP inside the node, no NVLS-Tree across nodes).

One GPU per node (`_one_gpu_per_node`): every byte the GPU sends to or receives from the network crosses
its own PCIe link (GPUDirect RDMA), which NCCL's topology prices at width x speed / 80 GB/s, 48 GB/s for
Gen5 x16 (src/graph/topo.cc, ncclTopoAddPci), however many NICs the node has; and on two nodes NCCL's
double binary tree is two one-edge trees, each node the root of one and the leaf of the other, so it
sends and receives the whole buffer once, not twice as a node inside a deeper tree does (the 0.5 of
NCCL's tuner, network.py).

Bus bandwidth is nccl-tests' (doc/PERFORMANCE.md): busbw = algbw x 2(n-1)/n for all-reduce,
(n-1)/n for all-gather and reduce-scatter (size = the gathered buffer), 1 for broadcast.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field, replace

from topowise import hardware
from topowise.costmodel import network
from topowise.costmodel.collectives import call_cost, spans_nodes
from topowise.costmodel.profile import OPS, Profile, default_profile
from topowise.errors import UsageError
from topowise.units import busbw_factor

FLOAT_BYTES = 4  # nccl-tests' default type, float
REDOP = {"all_reduce": "sum", "reduce_scatter": "sum", "all_gather": "none", "broadcast": "none"}
ROOT = {"all_reduce": -1, "reduce_scatter": -1, "all_gather": -1, "broadcast": 0}
# every test nccl-tests builds (src/*.cu); only OPS have a model here
NCCL_TESTS_OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "alltoall", "alltoallv",
                  "sendrecv", "gather", "scatter", "hypercube")

SHORT = 0.85  # measured busbw under 85% of the expected: the row falls short
ABOVE = 1.15  # over 115%: the hardware does something the model leaves out
LATENCY_BOUND = 0.5  # expected time more than half fixed latency: a latency-bound size
BANDWIDTH_BOUND = 0.2  # latency under a fifth of the expected time: a bandwidth-bound size
NIC_MATCH = 0.15  # a ratio within 15% of m/N reads as m of the node's N NICs carrying traffic (the model
# itself is off by up to ~12% on published runs: docs/nccl-tests.md)


# --- the expected table ----------------------------------------------------------------------------
@dataclass(frozen=True)
class ExpectedRow:
    op: str
    bytes: int  # nccl-tests' size column: the full (gathered) buffer
    count: int  # its count column: elements per rank for all-gather / reduce-scatter
    time_s: float
    algbw_gbps: float
    busbw_gbps: float
    algorithm: str  # "ring/Simple", "tree/LL" across nodes (NCCL's tuner); "ring" inside a node (comm.py)
    bound: str  # what sets the bandwidth: "intra" (the node's links) or "network"
    latency_s: float  # the fixed part of time_s (the expected time of a 1-byte call)

    def to_dict(self) -> dict:
        return asdict(self)


def sweep_sizes(min_bytes: int, max_bytes: int, factor: int = 2) -> list[int]:
    """nccl-tests' sweep: -b min -e max -f factor."""
    if min_bytes < 0 or max_bytes < min_bytes or factor < 2:
        raise UsageError(f"sizes {min_bytes}..{max_bytes} by x{factor}: give 0 <= --min-bytes <= --max-bytes "
                         "and --step-factor >= 2")
    sizes, size = [], min_bytes
    while size <= max_bytes:
        sizes.append(size)
        size = size * factor if size else 1
    return sizes


def nccl_size(op: str, nbytes: int, n: int) -> tuple[int, int]:
    """(size, count) as nccl-tests prints them: all-gather and reduce-scatter round each rank's share down
    to a multiple of 16 bytes (src/all_gather.cu, AllGatherGetCollByteCount)."""
    count = nbytes // FLOAT_BYTES
    if op in ("all_gather", "reduce_scatter"):
        per_rank = (count // n) & ~(16 // FLOAT_BYTES - 1)
        return per_rank * n * FLOAT_BYTES, per_rank
    return count * FLOAT_BYTES, count


# NCCL's PCIe link rate, GB/s: width x (100 Mb/s per lane of kvDictPciGen) / 80 (src/graph/topo.cc,
# ncclTopoAddPci): x16 Gen3 8 GT/s 60 -> 12, Gen4 120 -> 24, Gen5 240 -> 48, Gen6 480 -> 96
NCCL_PCIE_X16_GBPS = {3: 12.0, 4: 24.0, 5: 48.0, 6: 96.0}
FABRICS = ("nvlink", "pcie")
NVLS_SETTINGS = ("on", "off")


def with_settings(topo, profile: Profile, fabric: str = "nvlink", nvls: str | None = None):
    """(topology, profile) as NCCL runs with the fabric and NVLS settings: `fabric` "pcie" takes NVLink away
    (NCCL_P2P_DISABLE=1), `nvls` "off" turns NVLink SHARP off (NCCL_NVLS_ENABLE=0); "on" is NCCL's default
    and is refused where the board has no NVLink SHARP to turn on."""
    if fabric not in FABRICS:
        raise UsageError(f"--fabric {fabric!r}: give nvlink or pcie")
    if nvls is not None and nvls not in NVLS_SETTINGS:
        raise UsageError(f"--nvls {nvls!r}: give on or off")
    if nvls == "on" and (fabric == "pcie" or not has_nvls(topo)):
        why = "--fabric pcie takes NVLink away" if fabric == "pcie" else (
            f"{topo.name} has no NVLink SHARP (an NVSwitch of NVLink 4 or later: HGX H100/H200/B200, NVL72)")
        raise UsageError(f"--nvls on: {why}; leave --nvls out or give --nvls off")
    if fabric == "pcie":
        topo = topo.without_nvlink()
    if nvls == "off":
        profile = replace(profile, nvls_enabled=False)
    return topo, profile


def has_nvls(topo) -> bool:
    """Whether the node's GPUs sit on an NVSwitch that reduces (NVLink SHARP), as comm.py decides."""
    from topowise.costmodel.comm import group_link

    node = topo.node
    gpus = tuple(range(node.num_gpus))
    return len(gpus) > 2 and getattr(group_link(node, gpus)[1], "nvls", False)


def _one_gpu_per_node(op: str, nbytes: float, gpus: tuple[int, ...], topo, profile: Profile,
                      algorithm: str) -> tuple[float, str, str]:
    """(seconds, algorithm, bound) across nodes of one GPU each: the network tier capped by the GPU's own
    PCIe link at NCCL's rate, and a two-node tree moving the buffer once each way (module docstring)."""
    group = network.describe_group(gpus, topo, profile)
    link = NCCL_PCIE_X16_GBPS.get(topo.node.pcie_gen, hardware.pcie_gbps(topo.node.pcie_gen))
    capped = group.net_gbps > link
    group = replace(group, net_gbps=min(group.net_gbps, link))
    bus, bound = network.bus_gbps(op, group, profile)
    if capped and bound == "network":
        bound = "gpu-pcie"
    options = {}
    for name in ("ring", "tree"):
        for protocol in network.PROTOCOLS:
            if name == "tree" and group.nodes == 2:
                t = _two_node_tree_s(op, nbytes, group, protocol, bus)
            else:
                t = network.algorithm_time_s(op, nbytes, group, name, protocol, bus)
            if t is not None and (name not in options or t < options[name][0]):
                options[name] = (t, protocol)
    chosen = min(options, key=lambda a: options[a][0]) if algorithm == "auto" else (
        algorithm if algorithm in options else "ring")
    time_s, protocol = options[chosen]
    return time_s, f"{chosen}/{protocol}", bound


def _two_node_tree_s(op: str, nbytes: float, group, protocol: str, bus: float) -> float | None:
    """NCCL's tree all-reduce on two nodes of one GPU: two one-edge trees, each node sending and receiving the
    buffer once, at the tree's share of the bus (tuning.cc's 0.92, LL's line factor and cap), after the tree's
    fixed latency (network.py). Not the tuner's 0.5 x bus nor its medium-size correction: those describe a
    node inside a deeper tree, which moves the buffer twice."""
    latency_s = network.algorithm_time_s(op, 0, group, "tree", protocol, bus)
    if latency_s is None:
        return None  # tree serves all-reduce only
    rate = bus * network.TREE_BW_FACTOR
    if protocol == "LL":
        rate = min(rate * network.LL_BW_FACTOR["tree"], network.LL_MAX_GBPS[2])
    return latency_s + nbytes / (rate * 1e9)


def _price(op: str, nbytes: float, gpus: tuple[int, ...], topo, profile: Profile,
           algorithm: str = "auto") -> tuple[float, str, str]:
    """(seconds, algorithm, bound) of one call; `algorithm` forces ring or tree across nodes (NCCL_ALGO)."""
    if spans_nodes(topo, gpus) and min(len(v) for v in topo.per_node(gpus).values()) == 1:
        return _one_gpu_per_node(op, nbytes, gpus, topo, profile, algorithm)
    if spans_nodes(topo, gpus):
        time_s, detail = network.collective_time_s(op, nbytes, gpus, topo, profile, algorithm=algorithm)
        return time_s, f"{detail['algorithm']}/{detail['protocol']}", detail["bound"]
    time_s, _bus = call_cost(op, nbytes, gpus, topo, profile)
    plain = without_nvls(profile)
    ring_s = call_cost(op, nbytes, gpus, topo, plain)[0] if plain is not None else time_s
    return time_s, "nvls" if time_s < ring_s else "ring", "intra"


def without_nvls(profile: Profile) -> Profile | None:
    """The profile with NVLink SHARP turned off (NCCL_NVLS_ENABLE=0); None where the model has no NVLS."""
    return replace(profile, nvls_enabled=False) if hasattr(profile, "nvls_enabled") else None


def expected_row(op: str, nbytes: int, gpus: tuple[int, ...], topo, profile: Profile | None = None,
                 algorithm: str = "auto") -> ExpectedRow:
    if op not in OPS:
        raise UsageError(f"no model for {op!r}; expected tables cover {', '.join(OPS)}")
    profile = profile or default_profile()
    n = len(gpus)
    size, count = nccl_size(op, nbytes, n)
    if n < 2 or size == 0:
        return ExpectedRow(op, size, count, 0.0, 0.0, 0.0, "-", "-", 0.0)
    time_s, used, bound = _price(op, size, gpus, topo, profile, algorithm)
    latency_s, _, _ = _price(op, 1, gpus, topo, profile, algorithm)
    algbw = size / time_s / 1e9 if time_s > 0 else 0.0
    return ExpectedRow(op, size, count, time_s, algbw, algbw * busbw_factor(op, n), used, bound,
                       min(latency_s, time_s))


def pick_gpus(topo, num_gpus: int | None) -> tuple[int, ...]:
    """The GPUs an nccl-tests run of `num_gpus` ranks uses: the first ones, node by node (all by default)."""
    total = topo.num_gpus
    k = total if num_gpus is None else num_gpus
    if not 2 <= k <= total:
        raise UsageError(f"--num-gpus {k}: give 2 to {total} (the GPUs {topo.name} has)")
    per = topo.gpus_per_node
    if k > per and k % per:
        raise UsageError(f"--num-gpus {k} on {topo.name}: across nodes give a multiple of the {per} GPUs per node "
                         "(nccl-tests runs the same number of ranks on every node)")
    return tuple(range(k))


def expected_table(topo, ops, sizes, num_gpus: int | None = None, profile: Profile | None = None,
                   algorithm: str = "auto") -> dict:
    """{topology, ranks, nodes, gpu, tables: {op: [ExpectedRow]}}; `algorithm` as NCCL_ALGO across nodes."""
    gpus = pick_gpus(topo, num_gpus)
    profile = profile or default_profile()
    tables = {op: [expected_row(op, s, gpus, topo, profile, algorithm) for s in sizes] for op in ops}
    return {"topology": topo.name, "ranks": len(gpus), "nodes": len(topo.nodes_spanned(gpus)),
            "gpu": topo.gpu(gpus[0]).name, "tables": tables}


# --- nccl-tests' own text layout ---------------------------------------------------------------------
def float_str(value: float, width: int) -> str:
    """nccl-tests' getFloatStr: 2 decimals, fewer when the number is too wide, else exponent form."""
    for spec in (".2f", ".1f", ".0f"):
        text = f"{value:{width}{spec}}"
        if len(text) <= width:
            return text
    return f"{value:{width}.{1 if width >= 7 else 0}e}"


def header_lines() -> list[str]:
    """The three column-header lines of src/util.cu writeResultHeader (no per-iteration columns)."""
    blank = f"# {'':>10}  {'':>12}  {'':>8}  {'':>6}  {'':>6}"
    cols = ("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw",
            "#wrong")
    units = ("(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "")
    widths = (10, 12, 8, 6, 6, 7, 6, 6, 6, 7, 6, 6, 6)

    def line(words):
        return "# " + "  ".join(f"{w:>{width}}" for w, width in zip(words, widths)) + " "
    return [f"{blank}           out-of-place                       in-place          ", line(cols), line(units)]


def row_line(row: ExpectedRow) -> str:
    """A result line: out-of-place and in-place alike (the model does not tell them apart); #wrong is
    N/A, as nccl-tests prints it when it does not check data (-c 0)."""
    head = f"{row.bytes:12d}  {row.count:12d}  {'float':>8}  {REDOP[row.op]:>6}  {ROOT[row.op]:6d}"
    side = f"  {float_str(row.time_s * 1e6, 7)}  {float_str(row.algbw_gbps, 6)}  {float_str(row.busbw_gbps, 6)}    N/A"
    return head + side + side


def render_expected(table: dict, sizes: list[int], factor: int) -> str:
    out = []
    for op, rows in table["tables"].items():
        out += [f"# topowise nccl-tests: expected, not measured: {op}_perf on {table['topology']} "
                f"({table['ranks']} x {table['gpu']}, {table['nodes']} node{'s' if table['nodes'] > 1 else ''})",
                f"# nThread 1 nGpus {table['ranks']} minBytes {sizes[0]} maxBytes {sizes[-1]} step: {factor}(factor) "
                "warmup iters: 0 iters: 0 agg iters: 1 validation: 0 graph: 0",
                "#", *header_lines()]
        out += [row_line(r) for r in rows]
        counted = [r.busbw_gbps for r in rows]
        out += ["# Out of bounds values : 0 OK",
                f"# {'Avg bus bandwidth':<20} : {sum(counted) / len(counted):g} ", "#", ""]
    return "\n".join(out)


# --- parsing pasted output ---------------------------------------------------------------------------
@dataclass(frozen=True)
class MeasuredRow:
    op: str
    bytes: int
    count: int
    type: str
    redop: str
    root: int
    time_us: float  # out-of-place
    algbw_gbps: float
    busbw_gbps: float
    wrong: float | None  # None: N/A (not checked)
    in_time_us: float | None
    in_algbw_gbps: float | None
    in_busbw_gbps: float | None
    in_wrong: float | None

    @property
    def best_busbw(self) -> float:
        """The better of out-of-place and in-place."""
        return max(self.busbw_gbps, self.in_busbw_gbps or 0.0)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class NcclTestsOutput:
    rows: tuple[MeasuredRow, ...]
    ops: tuple[str, ...]  # in order of appearance
    ranks: int | None  # from the rank lines, else nThread x nGpus of a multi-GPU process, else None
    nodes: int | None  # distinct hosts in the rank lines
    gpu_name: str | None  # the device name of the rank lines (the most common one)
    layout: str  # "new" (root and #wrong columns) or "old" (no root; an error column)
    n_gpus_header: int | None = None
    hosts: tuple[str, ...] = field(default=())
    avg_busbw: float | None = None

    def to_dict(self) -> dict:
        return {"ranks": self.ranks, "nodes": self.nodes, "gpu_name": self.gpu_name, "layout": self.layout,
                "ops": list(self.ops), "hosts": list(self.hosts), "avg_busbw": self.avg_busbw,
                "rows": [r.to_dict() for r in self.rows]}


_PREFIX = re.compile(r"\[\d+(?:,\d+)*\](?:<std(?:out|err)>)?:?")  # mpirun --tag-output / -output-filename
_NTHREAD = re.compile(r"nThread\s+(\d+)\s+nGpus(?:\(perProc\))?\s+(\d+)")
_NGPUS_ONLY = re.compile(r"nGpus(?:\(perProc\))?\s+(\d+)\s+minBytes")
_RANK = re.compile(r"^#?\s*Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(?:(\S+)\s+)?device\s+(\d+)\s+"
                   r"\[[^\]]*\]\s+(.+?)\s*$")
_OP_NAME = re.compile(r"\b(" + "|".join(NCCL_TESTS_OPS) + r")_perf")
_AVG = re.compile(r"Avg bus bandwidth\s*:\s*([0-9.eE+-]+)")
_TYPES = {"int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float", "double", "bfloat16", "f8e4m3",
          "f8e5m2", "char", "int", "float16", "float32", "float64", "fp8_e4m3", "fp8_e5m2"}
_REDOPS = {"sum", "prod", "max", "min", "avg", "none", "mulsum", "premulsum", "all"}


def _number(word: str) -> float | None:
    if word.upper() == "N/A":
        return None
    return float(word)


def _row_from(words: list[str], op: str, layout: str) -> MeasuredRow | None:
    """A result line's words, or None when the line is not one. New layout: size count type redop root
    then time algbw busbw #wrong twice; old: no root, the fourth column of each side an error (float)."""
    if len(words) < 8 or not words[0].isdigit() or not words[1].isdigit():
        return None
    if words[2].lower() not in _TYPES or words[3].lower() not in _REDOPS:
        return None
    has_root = re.fullmatch(r"-?\d+", words[4]) is not None and layout != "old"
    rest = words[5:] if has_root else words[4:]
    try:
        values = [_number(w) for w in rest[:8]]
    except ValueError:
        return None
    if len(values) < 3 or any(v is None for v in values[:3]):
        return None
    values += [None] * (8 - len(values))
    _check_row(words, int(words[0]), values)
    return MeasuredRow(op, int(words[0]), int(words[1]), words[2], words[3], int(words[4]) if has_root else -1,
                       values[0], values[1], values[2], values[3], values[4], values[5], values[6], values[7])


# No GPU holds a buffer this large (the largest carry under 300 GB): a size past it is not a measurement.
MAX_BUFFER_BYTES = 2**40


def _check_row(words: list[str], nbytes: int, values: list[float | None]) -> None:
    """A result line nccl-tests could have printed: a size a GPU holds, times above 0, rates >= 0, all finite
    (a negative time or an inf rate would rank as faster than any prediction)."""
    line = " ".join(words)
    if nbytes > MAX_BUFFER_BYTES:
        raise UsageError(f"nccl-tests line {line!r}: a size of {nbytes:.3g} bytes, past the 1 TiB no GPU holds")
    times, rates = values[0::4], [v for i, v in enumerate(values) if i % 4 in (1, 2)]
    if any(t is not None and not 0 < t < math.inf for t in times):
        raise UsageError(f"nccl-tests line {line!r}: a time must be above 0 us and finite")
    if any(r is not None and not 0 <= r < math.inf for r in rates):
        raise UsageError(f"nccl-tests line {line!r}: algbw and busbw must be >= 0 GB/s and finite")


def _guess_op(words: list[str]) -> str:
    """An op when the text names none: the columns tell broadcast and all-gather apart (redop none);
    all-reduce and reduce-scatter look alike, and all-reduce is the usual test."""
    redop, root = words[3].lower(), words[4] if len(words) > 4 else "-1"
    if redop == "none":
        return "broadcast" if root.isdigit() else "all_gather"
    return "all_reduce"


def parse_output(text: str, where: str = "input", op: str | None = None) -> NcclTestsOutput:
    """The rows and metadata of nccl-tests output; a UsageError when the text holds no result line."""
    rows: list[MeasuredRow] = []
    ops: list[str] = []
    ranks: dict[int, tuple[str, str]] = {}
    threads_gpus: tuple[int, int] | None = None
    layout = None
    current = op
    avg = None
    for raw in text.splitlines():
        line = _PREFIX.sub(" ", raw).rstrip()
        stripped = line.strip()
        if not stripped:
            continue
        named = _OP_NAME.search(stripped)
        if named and op is None:
            current = named.group(1)
        if m := _NTHREAD.search(stripped):
            threads_gpus = (int(m.group(1)), int(m.group(2)))
        elif m := _NGPUS_ONLY.search(stripped):
            threads_gpus = (1, int(m.group(1)))
        if m := _RANK.match(stripped.lstrip("#").strip() if stripped.startswith("#") else stripped):
            ranks.setdefault(int(m.group(1)), (m.group(2) or "", m.group(4)))
            continue
        if m := _AVG.search(stripped):
            avg = float(m.group(1))
            continue
        words = stripped.lstrip("#").split()
        if stripped.startswith(("#", "size")):
            if "size" in words and "busbw" in words:
                layout = "new" if "root" in words or "#wrong" in words else "old"
            continue
        guess = current or (_guess_op(words) if len(words) > 4 and not words[0].startswith("#") else "all_reduce")
        row = _row_from(stripped.split(), guess, layout or "new")
        if row is None:
            continue
        if row.op not in ops:
            ops.append(row.op)
        rows.append(row)
    if not rows:
        raise UsageError(f"{where} is not nccl-tests output: no result line (size count type redop ... busbw); "
                         "give the text an *_perf binary printed, e.g. all_reduce_perf -b 8 -e 8G -f 2")
    names = [name for _, name in ranks.values()]
    hosts = tuple(dict.fromkeys(h for h, _ in ranks.values() if h))
    # ranks: the highest rank line + 1 (an excerpt may list only some); else one process's threads x GPUs
    # when it drives several (-g K); an MPI run's header (nGpus 1) says nothing of the other processes
    n = (max(ranks) + 1) if ranks else (threads_gpus[0] * threads_gpus[1]
                                        if threads_gpus and threads_gpus[1] > 1 else None)
    return NcclTestsOutput(tuple(rows), tuple(ops), n, len(hosts) or None,
                           max(set(names), key=names.count) if names else None, layout or "new",
                           threads_gpus[1] if threads_gpus else None, hosts, avg)


# --- measured beside expected --------------------------------------------------------------------------
@dataclass(frozen=True)
class ComparedRow:
    op: str
    bytes: int
    measured_busbw_gbps: float
    expected_busbw_gbps: float
    ratio: float  # measured / expected
    verdict: str  # "ok", "short", "above"
    algorithm: str
    bound: str
    latency_share: float  # of the expected time, the fixed latency

    def to_dict(self) -> dict:
        return asdict(self)


def _verdict(ratio: float) -> str:
    return "short" if ratio < SHORT else "above" if ratio > ABOVE else "ok"


def compare(measured: NcclTestsOutput, topo, num_gpus: int | None = None, profile: Profile | None = None,
            algorithm: str = "auto") -> dict:
    """{ranks, nodes, rows[ComparedRow], short_sizes{op: [bytes]}, skipped_ops, hints[str]}."""
    profile = profile or default_profile()
    n = num_gpus or measured.ranks
    if n is None:
        raise UsageError("the output names no rank count (no `#  Rank` lines, no `# nThread .. nGpus` header): "
                         "give --num-gpus")
    gpus = pick_gpus(topo, n)
    compared: list[ComparedRow] = []
    skipped = sorted({r.op for r in measured.rows if r.op not in OPS})
    for r in measured.rows:
        if r.op not in OPS or r.bytes == 0:
            continue
        e = expected_row(r.op, r.bytes, gpus, topo, profile, algorithm)
        if e.busbw_gbps <= 0:
            continue
        ratio = r.best_busbw / e.busbw_gbps
        share = e.latency_s / e.time_s if e.time_s > 0 else 0.0
        compared.append(ComparedRow(r.op, r.bytes, r.best_busbw, e.busbw_gbps, ratio, _verdict(ratio), e.algorithm,
                                    e.bound, share))
    short = {}
    for c in compared:
        if c.verdict == "short":
            short.setdefault(c.op, []).append(c.bytes)
    wrong = any((r.wrong or 0) > 0 or (r.in_wrong or 0) > 0 for r in measured.rows)
    return {"topology": topo.name, "ranks": len(gpus), "nodes": len(topo.nodes_spanned(gpus)),
            "rows": compared, "short_sizes": short, "skipped_ops": skipped,
            "hints": mismatches(measured, topo, gpus) + hints(compared, topo, gpus, profile, wrong=wrong)}


def mismatches(measured: NcclTestsOutput, topo, gpus) -> list[str]:
    """Where the output's own rank lines disagree with the topology it is compared with."""
    out = []
    nodes = len(topo.nodes_spanned(gpus))
    if measured.nodes and measured.ranks == len(gpus) and measured.nodes != nodes:
        out.append(f"the output's {measured.ranks} ranks run on {measured.nodes} host(s), the expectation puts them "
                   f"on {nodes} node(s) of {topo.name}: check --topology")
    if measured.gpu_name:
        theirs, ours = hardware.gpu_spec(measured.gpu_name), hardware.gpu_spec(topo.gpu(gpus[0]).name)
        if theirs.memory_bytes and not hardware.same_silicon(theirs, ours):
            out.append(f"the output ran on {measured.gpu_name}, the expectation is for {topo.gpu(gpus[0]).name}: "
                       "check --topology")
    return out


def _median(values: list[float]) -> float:
    s = sorted(values)
    return s[len(s) // 2] if s else math.nan


def _nic_fraction(ratio: float, topo, gpus) -> tuple[int, int] | None:
    """(m, nics) when the ratio sits near m of the node's NICs carrying traffic, m < nics."""
    net = topo.network
    nics = getattr(net, "nics_per_node", 0) if net else 0
    for m in range(1, nics):
        if abs(ratio / (m / nics) - 1) < NIC_MATCH:
            return m, nics
    return None


def _nvswitch(topo) -> bool:
    node = topo.node
    return getattr(node, "full_nvlink_mesh", False) and node.num_gpus > 2


def hints(rows: list[ComparedRow], topo, gpus, profile: Profile, wrong: bool = False) -> list[str]:
    """The usual causes that fit the shape of the shortfall: which sizes (latency- or bandwidth-bound)
    and by how much, on what wiring (one node or several, NVSwitch, NIC count)."""
    out: list[str] = []
    if wrong:
        out.append("#wrong is not 0: the collective returned wrong data (a faulty GPU, link or NIC, or a driver "
                   "issue); fix this before reading bandwidth")
    multi = spans_nodes(topo, gpus)
    nodes = len(topo.nodes_spanned(gpus))
    for op in dict.fromkeys(r.op for r in rows):
        mine = [r for r in rows if r.op == op]
        big = [r for r in mine if r.latency_share < BANDWIDTH_BOUND]
        small = [r for r in mine if r.latency_share > LATENCY_BOUND]
        middle = [r for r in mine if r not in big and r not in small]
        r_big = _median([r.ratio for r in big]) if big else math.nan
        largest = max(mine, key=lambda r: r.bytes)
        where = f"{op}:"
        if small and all(r.verdict == "short" for r in small) and not (big and r_big < SHORT):
            lat = _median([r.ratio for r in small])
            out.append(f"{where} the latency-bound sizes (up to {_size(max(r.bytes for r in small))}) reach "
                       f"{lat:.0%} of the expected busbw while large sizes are fine: fixed per-call costs (kernel "
                       "launch, proxy thread, CPU binding, a slow first hop) or a protocol limited by NCCL_PROTO, "
                       "not bandwidth")
        if middle and sum(r.verdict == "short" for r in middle) > len(middle) / 2 and not (big and r_big < SHORT):
            out.append(f"{where} only medium sizes fall short: NCCL's algorithm/protocol switch points "
                       "(LL, LL128, Simple; ring or tree) sit elsewhere than its tuner's model; compare runs with "
                       "NCCL_ALGO and NCCL_PROTO forced")
        if big and r_big < SHORT:
            out += _bandwidth_hints(where, r_big, largest, topo, gpus, profile, multi, op)
        elif big and r_big > ABOVE:
            if not multi and _nvswitch(topo) and op == "all_reduce" and largest.algorithm != "nvls":
                out.append(f"{where} large sizes reach {r_big:.0%} of the ring bound: NVLink SHARP (NVLS) is on, "
                           "the NVSwitch reduces in the switch and the GPUs send each byte once; the ring model leaves "
                           "that out (NCCL_NVLS_ENABLE=0 gives the ring figure)")
            elif multi and nodes == 2 and op == "all_reduce":
                out.append(f"{where} large sizes reach {r_big:.0%} of the network bound on 2 nodes: NCCL's tree "
                           "crosses the network with about half the bytes of the ring the busbw formula assumes, so "
                           "tree on two nodes beats the network bound (NCCL_ALGO=Ring gives the ring figure)")
            elif multi and op == "all_reduce":
                out.append(f"{where} large sizes reach {r_big:.0%} of the expected: in-network reduction (NVLS across "
                           "the node, SHARP/CollNet in InfiniBand switches) that the model leaves out")
            else:
                out.append(f"{where} large sizes reach {r_big:.0%} of the expected: the links are faster than the "
                           "model's efficiency for them (calibrate this machine: `topowise calibrate`)")
    return out


def _bandwidth_hints(where, r_big, largest, topo, gpus, profile, multi, op) -> list[str]:
    out = []
    if not multi:
        plain = without_nvls(profile)
        ring = expected_row(op, largest.bytes, gpus, topo, plain).busbw_gbps if plain is not None else 0.0
        if largest.algorithm == "nvls" and ring and abs(largest.measured_busbw_gbps / ring - 1) < 1 - SHORT:
            out.append(f"{where} large sizes reach {r_big:.0%} of the expected, about the ring's {ring:.0f} GB/s: "
                       "NVLink SHARP (NVLS) off, which the expectation counts on this NVSwitch board "
                       "(NCCL_NVLS_ENABLE=0, NCCL older than 2.17, fabric manager or multicast support missing, "
                       "or NCCL_ALGO without NVLS)")
            return out
        pcie = _pcie_expected(op, largest.bytes, gpus, topo, profile)
        near_pcie = pcie and 0.5 <= largest.measured_busbw_gbps / pcie <= 1.5
        if near_pcie or r_big < 0.35:
            what = f" (the PCIe path would give {pcie:.0f} GB/s)" if pcie else ""
            out.append(f"{where} large sizes reach {r_big:.0%} of the expected{what}: traffic is not on NVLink: "
                       "PCIe/P2P disabled (NCCL_P2P_DISABLE=1, NCCL_P2P_LEVEL), ACS or an IOMMU in a VM blocking "
                       "peer-to-peer, or the fabric manager not running on an NVSwitch board")
        else:
            out.append(f"{where} large sizes reach {r_big:.0%} of the expected: fewer NVLink channels than the "
                       "model's (NCCL_MIN_NCHANNELS / NCCL_MAX_NCHANNELS, MIG or a GPU at lower clocks)")
        return out
    if largest.bound != "network":
        out.append(f"{where} large sizes reach {r_big:.0%} of the expected, which the node's own links set: "
                   "check the node alone first (nccl-tests on one node)")
        return out
    nic = _nic_fraction(r_big, topo, gpus)
    if r_big < 0.15:
        out.append(f"{where} large sizes reach {r_big:.0%} of the network bound: RDMA is not in use and NCCL runs "
                   "over TCP sockets (no IB/RoCE device found, NCCL_IB_DISABLE=1, NCCL_NET=Socket); NCCL_DEBUG=INFO "
                   "says NET/IB or NET/Socket")
    elif nic:
        m, nics = nic
        out.append(f"{where} large sizes reach {r_big:.0%} of the network bound, about {m} of the node's {nics} "
                   "NICs' worth: a NIC unused (NCCL_IB_HCA naming fewer, a port down or at a lower rate, GPUs "
                   "sharing NICs); `ibstat` and NCCL_DEBUG=INFO's NET/IB lines list the ports in use; if every "
                   "NIC carries traffic, GPUDirect RDMA off (data staged through host memory)")
    else:
        out.append(f"{where} large sizes reach {r_big:.0%} of the network bound: GPUDirect RDMA off, data staged "
                   "through host memory (nvidia-peermem or dma-buf missing, NCCL_NET_GDR_LEVEL), or PCIe "
                   "ACS/relaxed ordering in a VM; NCCL_DEBUG=INFO shows GDRDMA on each channel when it is on")
    return out


def _pcie_expected(op, nbytes, gpus, topo, profile) -> float | None:
    try:
        wired = topo.without_nvlink()
    except (AttributeError, NotImplementedError):
        return None
    e = expected_row(op, nbytes, gpus, wired, profile)
    return e.busbw_gbps or None


def _size(nbytes: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:g} {unit}"
    return f"{nbytes} B"


def render_comparison(result: dict, measured: NcclTestsOutput, source: str) -> str:
    gpu = f" x {measured.gpu_name}" if measured.gpu_name else ""
    out = [f"# {source}: {result['ranks']} ranks{gpu} beside {result['topology']} "
           f"({result['nodes']} node{'s' if result['nodes'] > 1 else ''}); busbw in GB/s, the better of out-of-place "
           "and in-place",
           f"# {'size (B)':>12}  {'op':>14}  {'measured':>8}  {'expected':>8}  {'ratio':>6}  {'verdict':>7}  "
           f"{'algorithm':>11}  bound"]
    for r in result["rows"]:
        out.append(f"  {r.bytes:12d}  {r.op:>14}  {float_str(r.measured_busbw_gbps, 8)}  "
                   f"{float_str(r.expected_busbw_gbps, 8)}  {r.ratio:6.2f}  {r.verdict:>7}  {r.algorithm:>11}  "
                   f"{r.bound}")
    for op, sizes in result["short_sizes"].items():
        out.append(f"short ({op}, under {SHORT:.0%} of expected): {', '.join(_size(s) for s in sizes)}")
    if not result["short_sizes"]:
        out.append(f"no size falls under {SHORT:.0%} of the expected busbw")
    if result["skipped_ops"]:
        out.append(f"not compared (no model): {', '.join(result['skipped_ops'])}")
    out += [f"hint: {h}" for h in result["hints"]]
    return "\n".join(out) + "\n"
