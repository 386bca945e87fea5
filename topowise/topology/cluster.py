"""A cluster: N identical nodes and the network between them, seen as one big `Topology`.

GPUs are numbered globally: node n holds GPUs n*G .. n*G+G-1 (G GPUs per node). Inside a node every
pair is the node's own link; between nodes every pair is a "NET" link at the per-GPU network share
(gbps_per_nic * nics_per_node / G): in data parallelism every GPU of a node talks at once, so each
gets its share of the node's NICs. Links are made on demand, never all pairs at once: a 64-node,
512-GPU cluster has 130,816 pairs, and planning must stay fast.

Names: "4x hgx-h100-8+ib-ndr" is 4 nodes of the `hgx-h100-8` preset on InfiniBand NDR with the
default NIC count (one per GPU for InfiniBand and RoCE, one per node for 100G Ethernet);
"2x pcie-l40s-8+eth-100x2" says the NIC count. The JSON form is format "topowise.cluster" with the
node topology embedded.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from functools import cached_property, lru_cache
from pathlib import Path

from topowise import hardware
from topowise.errors import UsageError
from topowise.topology.checks import warnings as node_warnings
from topowise.topology.model import Gpu, Link, Nic, Topology, check_format, selection_of
from topowise.topology.presets import PRESETS, load_preset

FORMAT = "topowise.cluster"
VERSION = 1
NET = "NET"

# Defaults for a network named without a NIC count. InfiniBand and RoCE: one NIC per GPU on a
# rail-optimized fabric, as NVIDIA's HGX reference architectures wire them (each GPU its own NIC,
# NIC i of every node on rail switch i: NVIDIA Enterprise RA "HGX AI factory", network logical
# architecture). 100G Ethernet: one port per node on an ordinary data-center fabric (an assumption
# for a commodity server, not a reference design; name the count, e.g. eth-100x4, when you know it).
NETWORK_DEFAULTS: dict[str, tuple[str, bool]] = {
    "ib-ndr": ("per-gpu", True),
    "ib-hdr": ("per-gpu", True),
    "roce-400": ("per-gpu", True),
    "roce-200": ("per-gpu", True),
    "eth-100": ("1", False),
}

NETWORK_LABELS = {
    "ib-ndr": "InfiniBand NDR 400G",
    "ib-hdr": "InfiniBand HDR 200G",
    "roce-400": "RoCE 400G",
    "roce-200": "RoCE 200G",
    "eth-100": "Ethernet 100G",
}

EXAMPLES = ("4x hgx-h100-8+ib-ndr", "2x h100-nvl-8+roce-200", "4x pcie-l40s-8+eth-100")

_NAME = re.compile(r"^\s*(\d+)\s*x\s*([A-Za-z0-9._-]+)\s*\+\s*([A-Za-z0-9-]+?)(?:x(\d+))?\s*$")


@dataclass(frozen=True)
class NetworkSpec:
    """The network between nodes: `nics_per_node` NICs of `kind`, each `gbps_per_nic` GB/s per direction."""

    kind: str
    nics_per_node: int
    gbps_per_nic: float
    rail_optimized: bool = True

    @property
    def node_gbps(self) -> float:
        return self.nics_per_node * self.gbps_per_nic

    @property
    def label(self) -> str:
        return NETWORK_LABELS.get(self.kind, self.kind)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "nics_per_node": self.nics_per_node, "gbps_per_nic": self.gbps_per_nic,
                "rail_optimized": self.rail_optimized}

    @classmethod
    def from_dict(cls, data: dict) -> NetworkSpec:
        return cls(str(data["kind"]), int(data["nics_per_node"]), float(data["gbps_per_nic"]),
                   bool(data.get("rail_optimized", True)))


@dataclass(frozen=True)
class Cluster:
    """`num_nodes` copies of `node` joined by `network`; a `Wiring` like `Topology`, GPUs numbered globally.

    `members` restricts the cluster to some of its GPUs (what `restricted_to` returns); () means all.
    """

    node: Topology
    num_nodes: int
    network: NetworkSpec
    name: str = ""
    members: tuple[int, ...] = ()
    source: str = ""

    def __post_init__(self) -> None:
        if self.num_nodes < 1:
            raise UsageError(f"a cluster needs at least one node, not {self.num_nodes}")
        if self.node.num_gpus < 1:
            raise UsageError(f"node topology {self.node.name!r} has no GPUs")
        if self.network.nics_per_node < 1 or self.network.gbps_per_nic <= 0:
            raise UsageError(f"network {self.network.kind!r}: give at least one NIC per node and a rate above 0 GB/s")
        if self.node.indices != tuple(range(self.node.num_gpus)):
            raise UsageError(f"node topology {self.node.name!r} must number its GPUs 0..{self.node.num_gpus - 1}")
        if not self.name:
            object.__setattr__(self, "name", f"{self.num_nodes}x {self.node.name}+{self.network.kind}")

    # --- cluster-only --------------------------------------------------------------------------
    @property
    def gpus_per_node(self) -> int:
        return self.node.num_gpus

    @property
    def network_gbps_per_gpu(self) -> float:
        """Each GPU's share of its node's NICs when every GPU of the node communicates at once."""
        return self.network.node_gbps / self.gpus_per_node

    def node_of(self, gpu: int) -> int:
        self._check(gpu)
        return gpu // self.gpus_per_node

    def local_index(self, gpu: int) -> int:
        return gpu % self.gpus_per_node

    def nodes_spanned(self, gpus: Iterable[int]) -> tuple[int, ...]:
        return tuple(sorted({self.node_of(g) for g in gpus}))

    def per_node(self, gpus: Iterable[int]) -> dict[int, tuple[int, ...]]:
        """node -> the local indices of `gpus` on that node."""
        out: dict[int, list[int]] = {}
        for g in gpus:
            out.setdefault(self.node_of(g), []).append(self.local_index(g))
        return {n: tuple(sorted(v)) for n, v in sorted(out.items())}

    def network_gbps(self, gpus: Iterable[int]) -> float:
        """GB/s per direction the network gives a group: its fewest GPUs on any node times the per-GPU share."""
        counts = [len(v) for v in self.per_node(gpus).values()]
        return min(counts) * self.network_gbps_per_gpu

    def tiers(self) -> list[dict]:
        """Bandwidth tiers, fastest first: NVLink inside a node (if any), PCIe, the network between nodes."""
        out = []
        nvlink = [isl for isl in self.node.islands() if len(isl) > 1]
        if nvlink:
            best = max(nvlink, key=len)
            out.append({"tier": "NVLink", "scope": f"inside an NVLink island of {len(best)} GPUs",
                        "gbps_per_gpu": self.node.bottleneck_gbps(best)})
        out.append({"tier": "PCIe", "scope": f"inside a node (Gen{self.node.pcie_gen} x16)",
                    "gbps_per_gpu": self.node.pcie_gbps})
        if self.num_nodes > 1:
            net = self.network
            out.append({"tier": "network", "scope": f"between {self.num_nodes} nodes: {net.nics_per_node}x "
                        f"{net.label} per node ({'rail-optimized' if net.rail_optimized else 'not rail-optimized'})",
                        "gbps_per_gpu": self.network_gbps_per_gpu, "gbps_per_node": net.node_gbps})
        return out

    def bandwidth_tiers(self) -> tuple[tuple[str, float, int], ...]:
        """As Topology.bandwidth_tiers: (label, GB/s, pairs), fastest first; "NET" for pairs across nodes."""
        g, n = self.gpus_per_node, self.num_nodes
        tiers = [(label, gbps, pairs * n) for label, gbps, pairs in self.node.bandwidth_tiers()]
        if n > 1:
            tiers.append((NET, self.network_gbps_per_gpu, (n * g) * (n * g - 1) // 2 - n * g * (g - 1) // 2))
        return tuple(sorted(tiers, key=lambda t: -t[1]))

    # --- the Wiring interface ------------------------------------------------------------------
    @cached_property
    def gpus(self) -> tuple[Gpu, ...]:
        g = self.gpus_per_node
        out = tuple(replace(gpu, index=n * g + gpu.index) for n in range(self.num_nodes) for gpu in self.node.gpus)
        if self.members:
            keep = set(self.members)
            out = tuple(gpu for gpu in out if gpu.index in keep)
        return out

    @property
    def num_gpus(self) -> int:
        return len(self.members) if self.members else self.num_nodes * self.gpus_per_node

    @cached_property
    def indices(self) -> tuple[int, ...]:
        return tuple(sorted(self.members)) if self.members else tuple(range(self.num_nodes * self.gpus_per_node))

    @property
    def nvswitch(self) -> bool:
        return self.node.nvswitch

    @property
    def pcie_gen(self) -> int:
        return self.node.pcie_gen

    @property
    def pcie_gbps(self) -> float:
        return self.node.pcie_gbps

    @property
    def gpu_spec(self) -> hardware.GpuSpec:
        return self.node.gpu_spec

    @cached_property
    def nics(self) -> tuple[Nic, ...]:
        """The NICs of one node (every node has the same); on a rail fabric NIC i serves GPUs i*G/nics ..."""
        g, n = self.gpus_per_node, self.network.nics_per_node
        per = max(1, g // n)
        return tuple(Nic(f"nic{i}", self.network.kind, self.network.gbps_per_nic,
                         tuple(range(i * per, min(g, (i + 1) * per))) if n <= g else (i * g // n,))
                     for i in range(n))

    @property
    def full_nvlink_mesh(self) -> bool:
        return self.num_nodes == 1 and self.node.full_nvlink_mesh

    @cached_property
    def links(self) -> tuple[Link, ...]:
        """The links inside each node (the network pairs are made on demand by `link`, never all at once)."""
        g = self.gpus_per_node
        out = [replace(l, a=n * g + l.a, b=n * g + l.b) for n in range(self.num_nodes) for l in self.node.links]
        if self.members:
            keep = set(self.members)
            out = [l for l in out if l.a in keep and l.b in keep]
        return tuple(out)

    def link(self, a: int, b: int) -> Link:
        self._check(a)
        self._check(b)
        a, b = min(a, b), max(a, b)
        if a == b:
            raise UsageError(f"no link from GPU {a} to itself")
        g = self.gpus_per_node
        if a // g == b // g:
            inner = self.node.link(a % g, b % g)
            return replace(inner, a=a, b=b)
        return Link(a, b, NET, self.network_gbps_per_gpu, 0, p2p_supported=False)

    def gpu(self, index: int) -> Gpu:
        self._check(index)
        return replace(self.node.gpu(index % self.gpus_per_node), index=index)

    def islands(self) -> tuple[tuple[int, ...], ...]:
        return self._islands

    @cached_property
    def _islands(self) -> tuple[tuple[int, ...], ...]:
        g = self.gpus_per_node
        out = tuple(tuple(n * g + i for i in isl) for n in range(self.num_nodes) for isl in self.node.islands())
        if self.members:
            keep = set(self.members)
            out = tuple(t for t in (tuple(i for i in isl if i in keep) for isl in out) if t)
        return out

    def island_of(self, gpu: int) -> tuple[int, ...]:
        n, g = self.node_of(gpu), self.gpus_per_node
        local = self.node.island_of(gpu % g)
        return tuple(n * g + i for i in local if not self.members or n * g + i in self.members)

    def islands_spanned(self, gpus: Iterable[int]) -> tuple[tuple[int, ...], ...]:
        g = self.gpus_per_node
        seen: dict[tuple[int, ...], None] = {}
        for node, local in self.per_node(gpus).items():
            for isl in self.node.islands_spanned(local):
                seen[tuple(node * g + i for i in isl if not self.members or node * g + i in self.members)] = None
        return tuple(sorted(seen, key=lambda t: t[0]))

    def bottleneck_gbps(self, gpus: Iterable[int]) -> float:
        """GB/s per direction each GPU pushes into a ring over `gpus` (the ring's bus bandwidth).

        Inside one node: the node's answer. Across nodes: the slower of the slowest node's own ring
        over its members and the network that node's members get (members x per-GPU share): NCCL runs
        one ring channel per NIC, each crossing every node boundary once, so a node's NICs carry the
        ring in parallel (DGX A100 nodes with 8x HDR 200G reach ~192 GB/s busbw = 8 x 24: NVIDIA/nccl
        issue 1576; docs/sources.md).
        """
        groups = self.per_node(gpus)
        if sum(len(v) for v in groups.values()) < 2:
            return float("inf")
        inside = min(_node_bottleneck(self.node, local) for local in groups.values())
        if len(groups) == 1:
            return inside
        return min(inside, self.network_gbps(gpus))

    def best_subset(self, k: int) -> tuple[int, ...]:
        """k GPUs on the fewest nodes, spread evenly when they do not fill whole nodes, best GPUs inside each."""
        if not 1 <= k <= self.num_gpus:
            raise UsageError(f"cannot choose {k} GPUs from cluster {self.name!r}, which has {self.num_gpus}")
        return self.candidate_subsets(k)[0]

    def candidate_subsets(self, k: int) -> list[tuple[int, ...]]:
        """A few k-subsets, best first: inside one node (nodes are alike, so node 0), else on the
        fewest nodes, spread evenly where k divides, else filled node by node."""
        if not 1 <= k <= self.num_gpus:
            return []
        g = self.gpus_per_node
        if self.members:  # a restricted cluster: fill its GPUs node by node
            return [self.indices[:k]]
        if k <= g:
            return sorted(self.node.candidate_subsets(k), key=self.node._subset_rank)
        out: list[tuple[int, ...]] = []
        for nodes in range(-(-k // g), self.num_nodes + 1):
            if k % nodes == 0 and k // nodes <= g:
                local = self.node.best_subset(k // nodes)
                out.append(tuple(n * g + i for n in range(nodes) for i in local))
                break
        filled = tuple(range(k))
        if filled not in out:
            out.append(filled)
        return out

    def selection(self, gpus: Iterable[int]) -> dict:
        chosen = tuple(gpus)
        return {
            **selection_of(self, chosen),
            "nodes_spanned": list(self.nodes_spanned(chosen)),
            "network_gbps_per_gpu": self.network_gbps_per_gpu if len(self.nodes_spanned(chosen)) > 1 else None,
        }

    # --- what-ifs ------------------------------------------------------------------------------
    def restricted_to(self, gpus: Iterable[int]) -> Cluster:
        keep = tuple(sorted(set(gpus)))
        for g in keep:
            self._check(g)
        return replace(self, members=keep, name=self.name)

    def without_nvlink(self) -> Cluster:
        return replace(self, node=self.node.without_nvlink(), name=f"{self.name} (pcie)")

    # --- JSON ----------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {
            "format": FORMAT,
            "version": VERSION,
            "name": self.name,
            "source": self.source,
            "num_nodes": self.num_nodes,
            "gpus_per_node": self.gpus_per_node,
            "network": self.network.to_dict(),
            "network_gbps_per_gpu": self.network_gbps_per_gpu,
            "members": list(self.members),
            "tiers": self.tiers(),
            "node": self.node.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: dict, where: str = "JSON") -> Cluster:
        check_format(data, FORMAT, VERSION, where, "cluster")
        try:
            return cls(
                node=Topology.from_dict(data["node"], f"{where} (node)"),
                num_nodes=int(data["num_nodes"]),
                network=NetworkSpec.from_dict(data["network"]),
                name=str(data.get("name", "")),
                members=tuple(int(i) for i in data.get("members", ())),
                source=str(data.get("source", where)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise UsageError(f"{where}: cluster JSON is missing or has a bad field ({exc}); it needs num_nodes, "
                             "network{kind, nics_per_node, gbps_per_nic, rail_optimized} and node") from None

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def _check(self, gpu: int) -> None:
        total = self.num_nodes * self.gpus_per_node
        if not 0 <= gpu < total or (self.members and gpu not in self._member_set):
            raise UsageError(f"GPU {gpu} is not in cluster {self.name!r} (GPUs 0-{total - 1}, "
                             f"{self.gpus_per_node} per node)")

    @cached_property
    def _member_set(self) -> frozenset[int]:
        return frozenset(self.members)


def cluster_report(cluster: Cluster, gpus=None, environ=None) -> dict:
    """What `topo` shows for a cluster: the tiers, the per-GPU network share, warnings, a selection.

    Never every pair: the node's own report (links, islands) is under "node", in local indices.
    """
    report = cluster.to_dict()
    report["num_gpus"] = cluster.num_gpus
    report["islands"] = [list(i) for i in cluster.islands()]
    report["link_tiers"] = [{"link": label, "gbps": gbps, "pairs": n} for label, gbps, n in cluster.bandwidth_tiers()]
    out = [f"node: {w}" for w in node_warnings(cluster.node, None, environ)]
    out += network_warnings(cluster)
    report["warnings"] = out
    if gpus is not None:
        chosen = tuple(gpus)
        selection = cluster.selection(chosen)
        best = cluster.best_subset(len(chosen))
        selection["gpus_per_node"] = {str(n): len(v) for n, v in cluster.per_node(chosen).items()}
        selection["best_subset_nodes"] = list(cluster.nodes_spanned(best))
        best_gbps = cluster.bottleneck_gbps(best)
        selection["best_subset_bottleneck_gbps"] = None if best_gbps == float("inf") else best_gbps
        report["selection"] = selection
    return report


def network_warnings(cluster: Cluster) -> list[str]:
    """The network against the node: where a job across nodes loses bandwidth, and what helps."""
    if cluster.num_nodes < 2:
        return []
    out = []
    net, share, g = cluster.network, cluster.network_gbps_per_gpu, cluster.gpus_per_node
    inside = _node_bottleneck(cluster.node, tuple(range(g)))
    if cluster.network_gbps(range(2 * g)) < 0.5 * inside:  # line rates: only a clear gap is worth a warning
        out.append(f"the network gives a node {net.node_gbps:g} GB/s ({share:.3g} GB/s per GPU), under half the "
                   f"node's own ring ({inside:.3g} GB/s): collectives across nodes run at the network's pace; HSDP "
                   "with a shard group per node keeps all-gathers and reduce-scatters inside nodes (fewer, "
                   "larger collectives cross the network); `topowise plan` weighs it against FSDP")
    if net.nics_per_node < g:
        out.append(f"{net.nics_per_node} NIC(s) for {g} GPUs per node: GPUs share NICs ({share:.3g} GB/s each "
                   "when all communicate)")
    if not net.rail_optimized and net.nics_per_node > 1:
        out.append("not rail-optimized: traffic between NICs of different index crosses the spine; keep NCCL's "
                   "PXN on (NCCL_PXN_DISABLE unset) so it moves over NVLink to the GPU on the right rail first")
    return out


@lru_cache(maxsize=4096)
def _node_bottleneck_cached(node: Topology, local: tuple[int, ...]) -> float:
    return node.bottleneck_gbps(local)


def _node_bottleneck(node: Topology, local: tuple[int, ...]) -> float:
    if len(local) < 2:
        return float("inf")
    try:
        return _node_bottleneck_cached(node, local)
    except TypeError:  # an unhashable node (never in practice): compute directly
        return node.bottleneck_gbps(local)


def network_spec(text: str) -> NetworkSpec | None:
    """`ib-ndr` or `eth-100x2` (kind and optional NIC count) -> NetworkSpec, with the node's GPU count unknown.

    Returns None for an unknown kind. The per-GPU default count is resolved by `make_cluster`.
    """
    match = re.fullmatch(r"([A-Za-z0-9-]+?)(?:x(\d+))?", text.strip())
    if not match or match.group(1) not in hardware.NIC_GBPS:
        return None
    kind = match.group(1)
    default_count, rail = NETWORK_DEFAULTS.get(kind, ("1", False))
    count = int(match.group(2)) if match.group(2) else (0 if default_count == "per-gpu" else int(default_count))
    return NetworkSpec(kind, count, hardware.NIC_GBPS[kind], rail)


def make_cluster(node: Topology, num_nodes: int, network: NetworkSpec, name: str = "") -> Cluster:
    """A cluster of `num_nodes` x `node`; a NIC count of 0 means one NIC per GPU."""
    if network.nics_per_node == 0:
        network = replace(network, nics_per_node=node.num_gpus)
    return Cluster(node, num_nodes, network, name=name,
                   source=f"{num_nodes} x {node.name}; network rate: hardware.NIC_GBPS")


def parse_cluster_name(name: str) -> tuple[int, str, str] | None:
    """"4x hgx-h100-8+ib-ndr" -> (4, "hgx-h100-8", "ib-ndr"); None when the text is not of that shape."""
    match = _NAME.match(name)
    if not match:
        return None
    net = match.group(3) + (f"x{match.group(4)}" if match.group(4) else "")
    return int(match.group(1)), match.group(2), net


def load_cluster(name_or_path: str) -> Cluster | None:
    """A cluster from a name like "4x hgx-h100-8+ib-ndr" or a `topowise.cluster` JSON file; None otherwise."""
    parsed = parse_cluster_name(name_or_path)
    if parsed is not None:
        num_nodes, node_name, net_name = parsed
        if node_name not in PRESETS:
            raise UsageError(f"cluster {name_or_path!r}: unknown node preset {node_name!r}; "
                             f"valid: {', '.join(PRESETS)}")
        network = network_spec(net_name)
        if network is None:
            raise UsageError(f"cluster {name_or_path!r}: unknown network {net_name!r}; valid: "
                             f"{', '.join(hardware.NIC_GBPS)} (optionally with a NIC count, e.g. eth-100x2)")
        if num_nodes < 1:
            raise UsageError(f"cluster {name_or_path!r}: the node count must be at least 1")
        node = load_preset(node_name)
        cluster = make_cluster(node, num_nodes, network)
        return replace(cluster, name=f"{num_nodes}x {node_name}+{net_name}")
    path = Path(name_or_path)
    if name_or_path.endswith(".json") and path.is_file():
        try:
            data = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            return None  # let the topology loader report it
        if isinstance(data, dict) and data.get("format") == FORMAT:
            return Cluster.from_dict(data, str(path))
    return None
