"""The topology of one node: GPUs, the link between every pair, NICs; islands and bottlenecks.

Every source (NVML, `nvidia-smi topo -m` text, our JSON, presets) builds the same frozen `Topology`.
Bandwidths are line rates in GB/s per direction; what NCCL achieves on them is the cost model's
business (costmodel/profile.py), not the topology's. `Wiring` is what the rest of topowise asks of a
topology; a `Topology` (one node) and a `Cluster` (topology/cluster.py, N nodes) both answer it.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Protocol

from topowise import hardware
from topowise.errors import UsageError

if TYPE_CHECKING:
    from topowise.topology.fabric import NetworkSpec, WanSpec

FORMAT = "topowise.topology"
VERSION = 1

# PCIe path classes from `nvidia-smi topo -m`, nearest first.
PCIE_KINDS = ("PIX", "PXB", "PHB", "NODE", "SYS")
NVLINK = "NV"
# NVLink ports of one GPU (H100, H200, B200: 18); a pair cannot bond more (NV18 on an NVSwitch board).
MAX_NVLINKS = 18
# Ceilings for hand-edited topology JSON, far above any part made, so that a typo is refused and not
# predicted (a 1e30 GB/s link would make every collective free):
MAX_LINK_GBPS = 10_000.0  # GB/s a direction between two GPUs: 11x NVLink 5's 900 (hardware.py, B200)
MAX_GPU_MEMORY_BYTES = 2.0**42  # 4 TiB: 15x the largest GPU memory, 288 GB (hardware.py, B300 and GB300)
MAX_NIC_GBPS = 1_000.0  # GB/s a direction: 10x an 800 Gb/s NIC (ConnectX-8, 100 GB/s; hardware.NETWORKS)


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    pci_bus_id: str = ""
    numa_node: int | None = None
    memory_bytes: float = 0  # bytes (datasheet GB sizes arrive as floats)


@dataclass(frozen=True)
class Link:
    """The path between GPUs a < b. kind is "NV" (NVLink, `nvlinks` bonded links) or a PCIe class."""

    a: int
    b: int
    kind: str
    gbps: float
    nvlinks: int = 0
    p2p_supported: bool = True

    @property
    def is_nvlink(self) -> bool:
        return self.kind == NVLINK


@dataclass(frozen=True)
class Nic:
    name: str
    kind: str = ""  # ib-ndr, roce-200, eth-100, ... ("" when unknown)
    gbps: float = 0.0
    nearest_gpus: tuple[int, ...] = ()


class Wiring(Protocol):
    """What the cost model, the planner, the exports and the CLI ask of a topology. GPUs are numbered
    globally (node n of a cluster holds n*G .. n*G+G-1); rates are GB/s per direction, line rates."""

    # read-only: a Topology and a Cluster are frozen (their fields and properties answer these)
    @property
    def name(self) -> str: ...
    @property
    def source(self) -> str: ...  # where the description came from
    @property
    def gpus(self) -> tuple[Gpu, ...]: ...
    @property
    def indices(self) -> tuple[int, ...]: ...  # the GPU indices, ascending
    @property
    def num_gpus(self) -> int: ...
    @property
    def nvswitch(self) -> bool: ...  # the node's NVLink goes through NVSwitch (a pair's NV# is a GPU's whole port)
    @property
    def pcie_gen(self) -> int: ...
    @property
    def pcie_gbps(self) -> float: ...  # a PCIe x16 link of that generation
    @property
    def gpu_spec(self) -> hardware.GpuSpec: ...  # the GPUs' datasheet row (all alike)
    @property
    def nics(self) -> tuple[Nic, ...]: ...  # the NICs of one node
    @property
    def num_nodes(self) -> int: ...  # 1 for a single node
    @property
    def gpus_per_node(self) -> int: ...
    @property
    def node(self) -> Topology: ...  # one node's topology, local indices (a Topology is its own node)
    @property
    def network(self) -> NetworkSpec | None: ...  # the network between a cluster's nodes; None for a single node
    @property
    def wan(self) -> WanSpec | None: ...  # the WAN between a cluster's regions; None within one region

    def gpu(self, index: int) -> Gpu: ...  # UsageError for a GPU it lacks
    def link(self, a: int, b: int) -> Link: ...  # the path between two GPUs ("NET" across nodes)
    def islands(self) -> tuple[tuple[int, ...], ...]: ...  # NVLink islands (never across nodes)
    def island_of(self, gpu: int) -> tuple[int, ...]: ...
    def islands_spanned(self, gpus: Iterable[int]) -> tuple[tuple[int, ...], ...]: ...
    def bottleneck_gbps(self, gpus: Iterable[int]) -> float: ...  # per GPU in a ring over gpus; inf for one
    def nodes_spanned(self, gpus: Iterable[int]) -> tuple[int, ...]: ...  # (0,) on a single node
    def per_node(self, gpus: Iterable[int]) -> dict[int, tuple[int, ...]]: ...  # node -> local indices
    def network_gbps(self, gpus: Iterable[int]) -> float: ...  # what the network gives a group; inf on a Topology
    def regions_spanned(self, gpus: Iterable[int]) -> tuple[int, ...]: ...  # (0,) within one region
    def wan_gbps(self, gpus: Iterable[int]) -> float: ...  # what the WAN gives a group across regions; inf within one
    def ring_extra_us(self, gpus: Iterable[int]) -> float: ...  # a ring's slowest hop beyond a rack-local one
    def tree_extra_us(self, gpus: Iterable[int]) -> float: ...  # a tree's slowest hop beyond a rack-local one
    def one_region(self) -> Wiring: ...  # the same nodes in one region (the WAN what-if)
    def best_subset(self, k: int) -> tuple[int, ...]: ...  # the k GPUs with the fastest ring
    def candidate_subsets(self, k: int) -> list[tuple[int, ...]]: ...  # k-subsets worth ranking
    def selection(self, gpus: Iterable[int]) -> dict: ...  # what `topo --gpus` reports of a choice
    def bandwidth_tiers(self) -> tuple[tuple[str, float, int], ...]: ...  # (label, GB/s, pairs), fastest first
    def restricted_to(self, gpus: Iterable[int]) -> Wiring: ...  # only these GPUs
    def without_nvlink(self) -> Wiring: ...  # the PCIe what-if (NCCL_P2P_DISABLE=1)
    def to_dict(self) -> dict: ...  # JSON that load_topology reads back


@dataclass(frozen=True)
class Topology:
    name: str
    gpus: tuple[Gpu, ...]
    links: tuple[Link, ...]
    nics: tuple[Nic, ...] = ()
    nvswitch: bool = False
    pcie_gen: int = 4
    source: str = ""
    power_limit_w: float = 0.0  # every GPU's power limit, W (--power-limit); 0: the part's rated power
    _index: dict = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        index = {(min(l.a, l.b), max(l.a, l.b)): l for l in self.links}
        object.__setattr__(self, "_index", index)

    # --- pairs ---------------------------------------------------------------------------------
    @property
    def num_gpus(self) -> int:
        return len(self.gpus)

    @property
    def indices(self) -> tuple[int, ...]:
        return tuple(g.index for g in self.gpus)

    def link(self, a: int, b: int) -> Link:
        try:
            return self._index[(min(a, b), max(a, b))]
        except KeyError:
            raise UsageError(f"topology {self.name!r} has no link between GPU {a} and GPU {b}") from None

    def gpu(self, index: int) -> Gpu:
        for g in self.gpus:
            if g.index == index:
                return g
        raise UsageError(f"GPU {index} is not in topology {self.name!r} (GPUs {_ranges(self.indices)})")

    @property
    def gpu_spec(self) -> hardware.GpuSpec:
        spec = hardware.gpu_spec(self.gpus[0].name) if self.gpus else hardware.gpu_spec("")
        return hardware.at_power_limit(spec, self.power_limit_w)

    @property
    def pcie_gbps(self) -> float:
        return hardware.pcie_gbps(self.pcie_gen)

    # --- nodes (a Topology is one node; see Cluster) --------------------------------------------
    @property
    def num_nodes(self) -> int:
        return 1

    @property
    def gpus_per_node(self) -> int:
        return self.num_gpus

    @property
    def node(self) -> Topology:
        return self

    @property
    def network(self) -> None:
        """No network between nodes: a single node."""
        return None

    def nodes_spanned(self, gpus: Iterable[int]) -> tuple[int, ...]:
        return (0,)

    def per_node(self, gpus: Iterable[int]) -> dict[int, tuple[int, ...]]:
        return {0: tuple(sorted(gpus))}

    def network_gbps(self, gpus: Iterable[int]) -> float:
        return math.inf

    # --- regions (one node is in one region, its hops rack-local; see Cluster) -----------------
    @property
    def wan(self) -> None:
        """No WAN: a single region."""
        return None

    def regions_spanned(self, gpus: Iterable[int]) -> tuple[int, ...]:
        return (0,)

    def wan_gbps(self, gpus: Iterable[int]) -> float:
        return math.inf

    def ring_extra_us(self, gpus: Iterable[int]) -> float:
        return 0.0

    def tree_extra_us(self, gpus: Iterable[int]) -> float:
        return 0.0

    def one_region(self) -> Topology:
        return self

    # --- islands -------------------------------------------------------------------------------
    def islands(self) -> tuple[tuple[int, ...], ...]:
        """Connected components of the NVLink graph; a GPU with no NVLink is an island of its own."""
        return self._islands

    @cached_property  # asked for on every collective of every prediction; the topology never changes
    def _islands(self) -> tuple[tuple[int, ...], ...]:
        parent = {i: i for i in self.indices}

        def root(i: int) -> int:
            while parent[i] != i:
                parent[i] = parent[parent[i]]
                i = parent[i]
            return i

        for l in self.links:
            if l.is_nvlink:
                parent[root(l.a)] = root(l.b)
        groups: dict[int, list[int]] = {}
        for i in self.indices:
            groups.setdefault(root(i), []).append(i)
        return tuple(sorted((tuple(sorted(g)) for g in groups.values()), key=lambda g: g[0]))

    def island_of(self, gpu: int) -> tuple[int, ...]:
        return self._island_by_gpu[gpu]

    @cached_property
    def _island_by_gpu(self) -> dict[int, tuple[int, ...]]:
        return {gpu: isl for isl in self.islands() for gpu in isl}

    @property
    def full_nvlink_mesh(self) -> bool:
        """Every pair joined directly by NVLink (an NVSwitch board, or a fully bridged small box)."""
        return self.num_gpus > 1 and all(l.is_nvlink for l in self.links)

    def bandwidth_tiers(self) -> tuple[tuple[str, float, int], ...]:
        """Distinct link classes, fastest first: (label, GB/s, pairs), e.g. ("NV12", 318.75, 28)."""
        tiers: dict[tuple[str, float], int] = {}
        for l in self.links:
            key = (f"NV{l.nvlinks}" if l.is_nvlink else l.kind, l.gbps)
            tiers[key] = tiers.get(key, 0) + 1
        return tuple((label, gbps, n) for (label, gbps), n in sorted(tiers.items(), key=lambda t: (-t[0][1], t[0][0])))

    # --- selections ----------------------------------------------------------------------------
    def islands_spanned(self, gpus: Iterable[int]) -> tuple[tuple[int, ...], ...]:
        chosen = set(gpus)
        return tuple(isl for isl in self.islands() if chosen & set(isl))

    def bottleneck_gbps(self, gpus: Iterable[int]) -> float:
        """GB/s per direction that each GPU can push into a collective over `gpus` (line rate).

        - all pairs on NVLink through an NVSwitch: the per-pair rate (each pair's NV# is the GPU's
          whole switch port, not a private link);
        - all pairs on direct NVLink bridges (no switch): NCCL runs a ring per bridge, so a GPU's
          rate is the sum of its bridges to the other members; the slowest GPU sets the pace;
        - otherwise the slowest link of the best ring order: a ring over two NVLink islands must
          leave each island through PCIe, so it runs at PCIe speed however fast the islands are.
        Exact for up to 12 GPUs (bitmask search for a Hamiltonian cycle over fast-enough links).
        """
        members = tuple(sorted(set(gpus)))
        if members not in self._bottleneck_memo:  # a plan or study asks for the same few groups thousands of times
            self._bottleneck_memo[members] = self._bottleneck(list(members))
        return self._bottleneck_memo[members]

    @cached_property
    def _bottleneck_memo(self) -> dict[tuple[int, ...], float]:
        return {}

    def _bottleneck(self, members: list[int]) -> float:
        if len(members) < 2:
            return float("inf")
        pairs = [self.link(a, b) for a, b in itertools.combinations(members, 2)]
        if all(l.is_nvlink for l in pairs):
            if self.nvswitch:
                return min(l.gbps for l in pairs)
            return min(sum(self.link(m, o).gbps for o in members if o != m) for m in members)
        rates = sorted({l.gbps for l in pairs}, reverse=True)
        if len(members) > 12:
            return rates[-1]
        for rate in rates:
            if _has_ring(members, lambda a, b: self.link(a, b).gbps >= rate):
                return rate
        return rates[-1]

    def best_subset(self, k: int) -> tuple[int, ...]:
        """The k GPUs whose ring is fastest: fewest islands spanned, then bottleneck, then NUMA, then index."""
        if not 1 <= k <= self.num_gpus:
            raise UsageError(f"cannot choose {k} GPUs from topology {self.name!r}, which has {self.num_gpus}")
        return min(self.candidate_subsets(k), key=self._subset_rank)

    def candidate_subsets(self, k: int) -> list[tuple[int, ...]]:
        """Island-aware k-subsets: all of them on small nodes, unions of whole islands on big ones."""
        if self.num_gpus <= 10:
            return [tuple(c) for c in itertools.combinations(self.indices, k)]
        out: list[tuple[int, ...]] = []
        islands = sorted(self.islands(), key=len, reverse=True)
        for start in range(len(islands)):
            chosen: list[int] = []
            for isl in islands[start:] + islands[:start]:
                chosen.extend(isl[: k - len(chosen)])
                if len(chosen) == k:
                    out.append(tuple(sorted(chosen)))
                    break
        return out or [self.indices[:k]]

    def _subset_rank(self, subset: tuple[int, ...]) -> tuple:
        numas = {self.gpu(i).numa_node for i in subset}
        return (len(self.islands_spanned(subset)), -self.bottleneck_gbps(subset), len(numas), subset)

    def selection(self, gpus: Iterable[int]) -> dict:
        return selection_of(self, tuple(gpus))

    # --- what-ifs ------------------------------------------------------------------------------
    def restricted_to(self, gpus: Iterable[int]) -> Topology:
        keep = set(gpus)
        return replace(
            self,
            gpus=tuple(g for g in self.gpus if g.index in keep),
            links=tuple(l for l in self.links if l.a in keep and l.b in keep),
        )

    def without_nvlink(self) -> Topology:
        """The same node with NVLink taken away (what NCCL_P2P_DISABLE=1 leaves): host path at PCIe rate."""
        links = tuple(
            replace(l, kind="SYS" if l.is_nvlink else l.kind, nvlinks=0, gbps=min(l.gbps, self.pcie_gbps))
            if l.is_nvlink else l
            for l in self.links
        )
        return replace(self, name=f"{self.name} (pcie)", links=links, nvswitch=False)

    # --- JSON ----------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {
            "format": FORMAT,
            "version": VERSION,
            "name": self.name,
            "source": self.source,
            "nvswitch": self.nvswitch,
            "pcie_gen": self.pcie_gen,
            "gpus": [asdict(g) for g in self.gpus],
            "islands": [list(i) for i in self.islands()],
            "pairs": [asdict(l) for l in self.links],
            "nics": [dict(asdict(n), nearest_gpus=list(n.nearest_gpus)) for n in self.nics],
            **({"power_limit_w": self.power_limit_w} if self.power_limit_w else {}),
        }

    @classmethod
    def from_dict(cls, data: dict, where: str = "JSON") -> Topology:
        check_format(data, FORMAT, VERSION, where, "topology")
        try:
            topo = cls(
                name=data["name"],
                gpus=tuple(Gpu(**g) for g in data["gpus"]),
                links=tuple(Link(**p) for p in data["pairs"]),
                nics=tuple(Nic(**dict(n, nearest_gpus=tuple(n.get("nearest_gpus", ())))) for n in data.get("nics", [])),
                nvswitch=bool(data.get("nvswitch", False)),
                pcie_gen=int(data.get("pcie_gen", 4)),
                source=data.get("source", where),
                power_limit_w=float(data.get("power_limit_w", 0.0)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise UsageError(f"{where}: topology JSON is missing or has a bad field ({exc})") from None
        check_topology(topo, where)
        return topo

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)


def selection_of(topo: Wiring, chosen: tuple[int, ...]) -> dict:
    """What `topo --gpus` reports of a choice on any wiring: its GPUs, the islands it spans, its ring's rate."""
    bottleneck = topo.bottleneck_gbps(chosen)
    return {
        "gpus": list(chosen),
        "islands_spanned": [list(i) for i in topo.islands_spanned(chosen)],
        "bottleneck_gbps": None if bottleneck == float("inf") else bottleneck,
    }


def check_topology(topo: Topology, where: str) -> None:
    """Refuse a topology no machine has (a file edited by hand or cut short): each GPU once, a link of a
    known kind at a positive rate between every pair of its GPUs, memory and NIC rates not negative (0:
    unknown, the datasheet's), each under its MAX_ ceiling, a power limit the GPU takes. A negative link would
    make a step faster, NaN poisons every sum, a 1e30 GB/s link makes communication free."""
    indices = [g.index for g in topo.gpus]
    if not indices:
        raise UsageError(f"{where}: the topology lists no GPUs")
    for g in topo.gpus:
        if not _is_int(g.index) or g.index < 0:
            raise UsageError(f"{where}: GPU index {g.index!r} is not a whole number >= 0")
        if not _is_number(g.memory_bytes) or not 0 <= g.memory_bytes < math.inf:
            raise UsageError(f"{where}: GPU {g.index} memory_bytes is {g.memory_bytes!r}; give its memory in bytes "
                             "(0: the datasheet's)")
        if g.memory_bytes > MAX_GPU_MEMORY_BYTES:
            raise UsageError(f"{where}: GPU {g.index} memory_bytes is {g.memory_bytes:.3g}; give at most "
                             f"{MAX_GPU_MEMORY_BYTES:.4g} (4 TiB; the largest GPU holds 288 GB)")
    if len(set(indices)) != len(indices):
        twice = next(i for i in indices if indices.count(i) > 1)
        raise UsageError(f"{where}: GPU {twice} is listed twice; each GPU once, numbered 0..{len(indices) - 1}")
    known = set(indices)
    pairs: set[tuple[int, int]] = set()
    for l in topo.links:
        for end in (l.a, l.b):
            if end not in known:
                raise UsageError(f"{where}: the pair {l.a}-{l.b} names GPU {end}, which the topology does not list "
                                 f"(GPUs {_ranges(indices)})")
        if l.a == l.b or (min(l.a, l.b), max(l.a, l.b)) in pairs:
            raise UsageError(f"{where}: the pair {l.a}-{l.b} is " + ("one GPU" if l.a == l.b else "listed twice"))
        pairs.add((min(l.a, l.b), max(l.a, l.b)))
        if l.kind != NVLINK and l.kind not in PCIE_KINDS:
            raise UsageError(f"{where}: the pair {l.a}-{l.b} has link kind {l.kind!r}; give {NVLINK} (NVLink) or "
                             f"one of {', '.join(PCIE_KINDS)}")
        if not _is_number(l.gbps) or not 0 < l.gbps < math.inf:
            raise UsageError(f"{where}: the pair {l.a}-{l.b} runs at {l.gbps!r} GB/s; give a rate above 0")
        if l.gbps > MAX_LINK_GBPS:
            raise UsageError(f"{where}: the pair {l.a}-{l.b} runs at {l.gbps:.3g} GB/s; give at most "
                             f"{MAX_LINK_GBPS:,.0f} GB/s a direction (the fastest link, NVLink 5, gives a GPU 900)")
        if l.kind == NVLINK and not (_is_int(l.nvlinks) and 1 <= l.nvlinks <= MAX_NVLINKS):
            raise UsageError(f"{where}: the pair {l.a}-{l.b} bonds {l.nvlinks!r} NVLinks; a GPU has 1 to "
                             f"{MAX_NVLINKS}")
    if len(pairs) != len(indices) * (len(indices) - 1) // 2:
        missing = next((a, b) for a, b in itertools.combinations(sorted(indices), 2) if (a, b) not in pairs)
        raise UsageError(f"{where}: no link for the pair {missing[0]}-{missing[1]}; list every pair of GPUs")
    for n in topo.nics:
        if not _is_number(n.gbps) or not 0 <= n.gbps < math.inf:
            raise UsageError(f"{where}: NIC {n.name!r} runs at {n.gbps!r} GB/s; give a rate >= 0 (0: unknown)")
        if n.gbps > MAX_NIC_GBPS:
            raise UsageError(f"{where}: NIC {n.name!r} runs at {n.gbps:.3g} GB/s; give at most {MAX_NIC_GBPS:,.0f} "
                             "GB/s a direction (an 800 Gb/s NIC gives 100)")
        if any(g not in known for g in n.nearest_gpus):
            raise UsageError(f"{where}: NIC {n.name!r} is near GPUs {list(n.nearest_gpus)}, not all listed")
    if topo.power_limit_w:
        hardware.check_power_limit(hardware.gpu_spec(topo.gpus[0].name), topo.power_limit_w,
                                   flag=f"{where}: power_limit_w")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_format(data: dict, fmt: str, version: int, where: str, what: str) -> None:
    """Refuse JSON that is not ours, or of another format version, with one clear line."""
    if data.get("format") != fmt:
        raise UsageError(f"{where} is not a topowise {what} (no \"format\": \"{fmt}\")")
    if data.get("version") != version:
        raise UsageError(f"{where} is {what} format version {data.get('version')}; this topowise reads {version}")


def build(name: str, gpu_name: str, kinds: dict[tuple[int, int], str], *, nvlink_counts=None, nics=(),
          nvswitch=False, numa=None, source="", memory_bytes=None) -> Topology:
    """A topology from a pair -> kind map ("NV" or a PCIe class); rates come from hardware.py."""
    spec = hardware.gpu_spec(gpu_name)
    n = 1 + max(max(p) for p in kinds) if kinds else 1
    nvlink_counts = nvlink_counts or {}
    links = []
    for a, b in itertools.combinations(range(n), 2):
        kind = kinds.get((a, b)) or kinds.get((b, a)) or "SYS"
        count = nvlink_counts.get((a, b), nvlink_counts.get((b, a), 0)) if kind == NVLINK else 0
        gbps = hardware.nvlink_gbps(spec.nvlink_gen, count) if kind == NVLINK else hardware.pcie_gbps(spec.pcie_gen)
        links.append(Link(a, b, kind, gbps, count))
    gpus = tuple(
        Gpu(i, gpu_name, numa_node=(numa[i] if numa else None), memory_bytes=memory_bytes or spec.memory_bytes)
        for i in range(n)
    )
    return Topology(name, gpus, tuple(links), tuple(nics), nvswitch, spec.pcie_gen, source)


def _has_ring(members: list[int], ok) -> bool:
    """Is there a Hamiltonian cycle over `members` using only pairs where ok(a, b)? (Held-Karp on bitmasks.)"""
    n = len(members)
    adj = [[ok(members[i], members[j]) if i != j else False for j in range(n)] for i in range(n)]
    reach = [0] * (1 << n)  # reach[mask] = bitmask of end nodes of paths from node 0 covering mask
    reach[1] = 1
    for mask in range(1, 1 << n):
        if not mask & 1 or not reach[mask]:
            continue
        ends = reach[mask]
        for j in range(n):
            if ends >> j & 1:
                for k in range(n):
                    if not mask >> k & 1 and adj[j][k]:
                        reach[mask | 1 << k] |= 1 << k
    full = (1 << n) - 1
    return any(reach[full] >> j & 1 and adj[j][0] for j in range(1, n))


def _ranges(indices: Iterable[int]) -> str:
    """(0, 1, 2, 3, 6) -> "0-3,6": a 1024-GPU cluster's list stays one short line."""
    runs: list[list[int]] = []
    for i in sorted(indices):
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ",".join(str(a) if a == b else f"{a}-{b}" if b > a + 1 else f"{a},{b}" for a, b in runs)


def ascii_int(text: str) -> int:
    """int() of a number written in ASCII digits; ValueError otherwise. int() alone reads any script's
    digits ("٠,١" would name GPUs 0 and 1)."""
    text = str(text).strip()
    if not text.isascii():
        raise ValueError(f"{text!r} is not written in ASCII digits")
    return int(text)


def parse_gpu_list(text: str, topo: Wiring) -> tuple[int, ...]:
    """`--gpus 0,1,4-7` -> (0, 1, 4, 5, 6, 7), checked against the topology; ASCII digits only."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        try:
            if "-" in part:
                lo, hi = (ascii_int(x) for x in part.split("-", 1))
                if hi < lo or lo < 0:
                    raise ValueError
                if hi > max(topo.indices, default=-1):  # before the range is built: 0-99999999999 is not a MemoryError
                    raise UsageError(f"--gpus {text!r}: GPU {hi} is out of range; {topo.name!r} has GPUs "
                                     f"{_ranges(topo.indices)}")
                out.extend(range(lo, hi + 1))
            else:
                out.append(ascii_int(part))
        except ValueError:
            raise UsageError(f"--gpus {text!r}: {part!r} is not a GPU index or range (write e.g. 0,1 or 0-3 in "
                             "ASCII digits)") from None
    if len(set(out)) != len(out):
        raise UsageError(f"--gpus {text!r} names a GPU twice")
    bad = [i for i in out if i not in topo.indices]
    if bad:
        raise UsageError(f"--gpus {text!r}: GPU {bad[0]} is out of range; {topo.name!r} has GPUs "
                         f"{_ranges(topo.indices)}")
    return tuple(out)
