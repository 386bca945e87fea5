"""A cluster: N identical nodes and the network between them, seen as one big `Topology`.

GPUs are numbered globally: node n holds GPUs n*G .. n*G+G-1 (G GPUs per node). Inside a node every
pair is the node's own link; between nodes every pair is a "NET" link at the per-GPU network share
(gbps_per_nic * nics_per_node / G): in data parallelism every GPU of a node talks at once, so each
gets its share of the node's NICs. Links are made on demand, never all pairs at once: a 64-node,
512-GPU cluster has 130,816 pairs, and planning must stay fast.

Names (docs/networks.md):
- "4x hgx-h100-8+ib-ndr": 4 nodes of the `hgx-h100-8` preset on InfiniBand NDR with the default NIC
  count (one per GPU for InfiniBand and RoCE, one per node for Ethernet), all in one rack (one
  switch hop); "2x pcie-l40s-8+eth-100x2" says the NIC count. Networks: hardware.NETWORKS, or a
  custom link "custom-<rate>gbit-<latency>us[-rdma]" (TCP sockets unless -rdma).
- "16x hgx-h100-8+ib-ndr/rack=4,apart=100m,hops=3": 4 nodes per rack, racks 100 m apart in a row,
  3 switch hops (leaf, spine, leaf) between racks (`Layout`); ",rail=8" puts 8 nodes on the same
  rail switches (one hop apart however many racks they span) on a rail-optimized fabric.
- "2x (2x hgx-h100-8+ib-ndr) + wan-100gbit-30ms-aes-gcm": 2 regions of that cluster joined by a WAN
  (`WanSpec`: rate, round-trip time, cipher, optional "-16cores"); preset "two-region-h100".
The JSON form is format "topowise.cluster" with the node topology embedded.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path

from topowise import hardware
from topowise.errors import UsageError
from topowise.topology.checks import warnings as node_warnings
from topowise.topology.fabric import (
    CUSTOM_SYNTAX,
    Layout,
    NetworkSpec,
    WanSpec,
    network_spec,
    parse_layout,
    parse_wan,
)
from topowise.topology.model import Gpu, Link, Nic, Topology, check_format, selection_of
from topowise.topology.presets import PRESETS, load_preset

FORMAT = "topowise.cluster"
VERSION = 1
NET = "NET"
WAN = "WAN"  # a bandwidth tier's label for GPU pairs in different regions

EXAMPLES = ("4x hgx-h100-8+ib-ndr", "2x h100-nvl-8+roce-200", "4x pcie-l40s-8+eth-100",
            "16x hgx-h100-8+ib-ndr/rack=4,apart=100m", "2x (2x hgx-h100-8+ib-ndr) + wan-100gbit-30ms-aes-gcm")

# Named clusters (what `topo --preset`, `--topology` accept besides the name forms).
CLUSTER_PRESETS = {
    "two-region-h100": "2x (2x hgx-h100-8+ib-ndr) + wan-100gbit-30ms-aes-gcm",
}

ONE_RACK = Layout()  # every node under one leaf switch: what NCCL's tuner latencies describe
_MEMO_ENTRIES = 4096  # groups remembered per cluster (a plan asks of a few hundred)
# The largest training clusters reported by 2026 hold ~200k GPUs (25k nodes of 8): a power of two above that.
MAX_NODES = 32_768

_NAME = re.compile(r"^\s*(\d+)\s*x\s*([A-Za-z0-9._-]+)\s*\+\s*([A-Za-z0-9.-]+?)(?:x(\d+))?\s*(?:/\s*(.*?))?\s*$",
                   re.ASCII)  # ASCII digits: \d alone takes any script's ("١٠x ..." would be 10 nodes)
_REGIONS = re.compile(r"^\s*(\d+)\s*x\s*\((.+)\)\s*\+\s*(wan-\S*)\s*$", re.ASCII)


@dataclass(frozen=True)
class Cluster:
    """`num_nodes` copies of `node` joined by `network`; a `Wiring` like `Topology`, GPUs numbered globally.

    `members` restricts the cluster to some of its GPUs (what `restricted_to` returns); () means all.
    `layout` spreads each region's nodes over racks; `regions` (node counts, summing to num_nodes,
    nodes numbered region by region) and `wan` join groups of nodes in different regions; () and
    None mean one region.
    """

    node: Topology
    num_nodes: int
    network: NetworkSpec
    name: str = ""
    members: tuple[int, ...] = ()
    source: str = ""
    layout: Layout = ONE_RACK
    regions: tuple[int, ...] = ()
    wan: WanSpec | None = None

    def __post_init__(self) -> None:
        if self.num_nodes < 1:
            raise UsageError(f"a cluster needs at least one node, not {self.num_nodes}")
        if self.num_nodes > MAX_NODES:
            raise UsageError(f"a cluster of {self.num_nodes:,} nodes: give at most {MAX_NODES:,} (a count past it is a "
                             "typo; the largest clusters built hold about 200,000 GPUs)")
        if self.node.num_gpus < 1:
            raise UsageError(f"node topology {self.node.name!r} has no GPUs")
        if self.network.nics_per_node < 1 or self.network.gbps_per_nic <= 0:
            raise UsageError(f"network {self.network.kind!r}: give at least one NIC per node and a rate above 0 GB/s")
        if self.node.indices != tuple(range(self.node.num_gpus)):
            raise UsageError(f"node topology {self.node.name!r} must number its GPUs 0..{self.node.num_gpus - 1}")
        if self.regions:
            if len(self.regions) < 2 or min(self.regions) < 1 or sum(self.regions) != self.num_nodes:
                raise UsageError(f"cluster regions {list(self.regions)}: give at least two regions of at least one "
                                 f"node each, {self.num_nodes} nodes in all")
            if self.wan is None:
                raise UsageError("a cluster of several regions needs a WAN between them (rate, round trip, cipher)")
        elif self.wan is not None:
            raise UsageError("a WAN joins regions: give the regions' node counts too (JSON `regions`)")
        if not self.name:
            object.__setattr__(self, "name", f"{self.num_nodes}x {self.node.name}+{self.network.kind}")

    # --- cluster-only --------------------------------------------------------------------------
    @cached_property  # read for every GPU of every group a prediction describes
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
        return tuple(self._split(gpus))

    def per_node(self, gpus: Iterable[int]) -> dict[int, tuple[int, ...]]:
        """node -> the local indices of `gpus` on that node."""
        return dict(self._split(gpus))  # a copy: the split is shared

    def _split(self, gpus: Iterable[int]) -> dict[int, tuple[int, ...]]:
        """per_node, remembered: a plan on a thousand nodes asks it of the same few groups of thousands of
        GPUs a hundred thousand times, and a pass over every GPU each time took minutes."""
        members = gpus if isinstance(gpus, tuple) else tuple(gpus)
        found = self._split_memo.get(members)
        if found is None:
            if len(self._split_memo) >= _MEMO_ENTRIES:
                self._split_memo.clear()
            found = self._split_memo[members] = self._split_now(members)
        return found

    def _split_now(self, members: tuple[int, ...]) -> dict[int, tuple[int, ...]]:
        if members:  # the ends first: one bad GPU is named without a pass in Python
            for g in (min(members), max(members)):
                self._check(g)
            if self.members and not self._member_set.issuperset(members):
                self._check(next(g for g in members if g not in self._member_set))
        per = self.gpus_per_node
        regular = self._split_regular(members, per)
        if regular is not None:
            return regular
        out: dict[int, list[int]] = {}
        for g in members:
            out.setdefault(g // per, []).append(g % per)
        return {n: tuple(sorted(v)) for n, v in sorted(out.items())}

    @staticmethod
    def _split_regular(members: tuple[int, ...], per: int) -> dict[int, tuple[int, ...]] | None:
        """_split_now of consecutive GPUs (a run's, a shard group's) or of a stride of whole nodes (a replica
        group's), node by node without a pass over the GPUs; None for any other group."""
        if len(members) < 2:
            return None
        lo, hi = members[0], members[-1]
        step = members[1] - lo
        if step < 1 or (hi - lo) % step or (hi - lo) // step + 1 != len(members) \
                or (step != 1 and step % per) or members != tuple(range(lo, hi + 1, step)):
            return None
        if step > 1:  # one GPU, the same local index, on every step // per-th node
            return dict.fromkeys(range(lo // per, hi // per + 1, step // per), (lo % per,))
        first, last = lo // per, hi // per
        if first == last:
            return {first: tuple(range(lo % per, hi % per + 1))}
        out = {first: tuple(range(lo % per, per))}
        out.update(dict.fromkeys(range(first + 1, last), tuple(range(per))))
        out[last] = tuple(range(hi % per + 1))
        return out

    @cached_property
    def _split_memo(self) -> dict[tuple[int, ...], dict[int, tuple[int, ...]]]:
        return {}

    def network_gbps(self, gpus: Iterable[int]) -> float:
        """GB/s per direction the network gives a group: its fewest GPUs on any node times the per-GPU share."""
        return min(map(len, self._split(gpus).values())) * self.network_gbps_per_gpu

    # --- regions and distance ------------------------------------------------------------------
    @cached_property
    def _region_starts(self) -> tuple[int, ...]:
        starts, at = [], 0
        for count in self.regions or (self.num_nodes,):
            starts.append(at)
            at += count
        return tuple(starts)

    @property
    def num_regions(self) -> int:
        return len(self.regions) if self.regions else 1

    def region_of_node(self, node: int) -> int:
        if not self.regions:
            return 0
        return max(r for r, start in enumerate(self._region_starts) if start <= node)

    def region_of(self, gpu: int) -> int:
        return self.region_of_node(self.node_of(gpu))

    def regions_spanned(self, gpus: Iterable[int]) -> tuple[int, ...]:
        if not self.regions:
            self._split(gpus)  # the GPUs checked as before
            return (0,)
        return tuple(sorted({self.region_of_node(n) for n in self.nodes_spanned(gpus)}))

    def gpus_by_region(self) -> tuple[tuple[int, ...], ...]:
        """The cluster's GPUs, one tuple per region (what keeps chatty collectives off the WAN)."""
        out: dict[int, list[int]] = {r: [] for r in range(self.num_regions)}
        for g in self.indices:
            out[self.region_of(g)].append(g)
        return tuple(tuple(v) for _, v in sorted(out.items()))

    def gpus_in_region(self, region: int) -> int:
        """GPUs of a whole region (the WAN's per-GPU share divides by it)."""
        counts = self.regions or (self.num_nodes,)
        return counts[region] * self.gpus_per_node

    def wan_gbps(self, gpus: Iterable[int]) -> float:
        """GB/s per direction the WAN's line gives a group that spans regions (inf within one): its fewest
        GPUs in any region times the per-GPU share of the WAN (every GPU of a region crosses at once,
        as every NIC share assumes). Encryption's limit is the cost model's (costmodel/network.py)."""
        members = tuple(gpus)
        spanned = self.regions_spanned(members)
        if self.wan is None or len(spanned) < 2:
            return float("inf")
        counts: dict[int, int] = {}
        for node, local in self._split(members).items():
            region = self.region_of_node(node)
            counts[region] = counts.get(region, 0) + len(local)
        return min(counts[r] * self.wan.gbps / self.gpus_in_region(r) for r in spanned)

    def _place(self, node: int) -> tuple[int, tuple[int, int]]:
        """(region, (rack, switch domain)) of a node."""
        region = self.region_of_node(node)
        rails = self.network.rail_optimized and self.network.nics_per_node > 1
        return region, self.layout.place(node - self._region_starts[region], rails)

    def hop_extra_us(self, node_a: int, node_b: int) -> float:
        """Latency a network hop between two nodes of one region adds over a hop inside one rack
        (0 across regions: the WAN's latency is priced on its own)."""
        (ra, a), (rb, b) = self._place(node_a), self._place(node_b)
        if ra != rb:
            return 0.0
        return self.layout.extra_us(a, b, self.network.switch_hop_us)

    def ring_extra_us(self, gpus: Iterable[int]) -> float:
        """The slowest network hop of a ring over the group's nodes (in order, wrapping), over a rack-local hop."""
        nodes = self.nodes_spanned(gpus)
        if len(nodes) < 2 or self.layout.is_default:
            return 0.0
        return max(self.hop_extra_us(a, b) for a, b in zip(nodes, nodes[1:] + nodes[:1]))

    def tree_extra_us(self, gpus: Iterable[int]) -> float:
        """The slowest hop any level of a tree over the group's nodes can take: the farthest two nodes
        of one region (a root-to-leaf path takes log2(N) such hops at most)."""
        nodes = self.nodes_spanned(gpus)
        if len(nodes) < 2 or self.layout.is_default:
            return 0.0
        places: dict[int, set[tuple[int, int]]] = {}
        for n in nodes:  # distinct (rack, domain) places: few, however many nodes
            region, place = self._place(n)
            places.setdefault(region, set()).add(place)
        hop = self.network.switch_hop_us
        return max((self.layout.extra_us(a, b, hop) for ps in places.values() for a in ps for b in ps), default=0.0)

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
            where = f"between {self.num_nodes} nodes" + (f" ({self.num_regions} regions)" if self.wan else "")
            spread = ""
            if not self.layout.is_default:
                lay = self.layout
                spread = (f"; {lay.nodes_per_rack or 'all'} nodes per rack, racks {lay.rack_distance_m:g} m apart, "
                          f"{lay.hops_between_racks} switch hops between racks"
                          + (f", rail groups of {lay.nodes_per_rail_group} nodes" if lay.nodes_per_rail_group else ""))
            out.append({"tier": "network", "scope": f"{where}: {net.nics_per_node}x {net.label} per node "
                        f"({'rail-optimized' if net.rail_optimized else 'not rail-optimized'}; "
                        f"{net.transport} transport){spread}",
                        "gbps_per_gpu": self.network_gbps_per_gpu, "gbps_per_node": net.node_gbps,
                        "transport": net.transport, "latency_us": net.latency_us})
        if self.wan is not None:
            wan = self.wan
            out.append({"tier": "WAN", "scope": f"between {self.num_regions} regions: {wan.gbps * 8:g} Gb/s per "
                        f"region, round trip {wan.rtt_ms:g} ms, {wan.cipher} on {wan.cores} cores",
                        "gbps_per_gpu": wan.gbps / max(self.gpus_in_region(r) for r in range(self.num_regions)),
                        "gbps_per_region": wan.gbps, "rtt_ms": wan.rtt_ms, "cipher": wan.cipher, "cores": wan.cores})
        return out

    def bandwidth_tiers(self) -> tuple[tuple[str, float, int], ...]:
        """As Topology.bandwidth_tiers: (label, GB/s, pairs), fastest first; "NET" for pairs across nodes."""
        g, n = self.gpus_per_node, self.num_nodes
        tiers = [(label, gbps, pairs * n) for label, gbps, pairs in self.node.bandwidth_tiers()]
        if n > 1:
            across = (n * g) * (n * g - 1) // 2 - n * g * (g - 1) // 2
            if self.wan is not None:  # pairs in different regions: the WAN's per-GPU share
                counts = [r * g for r in self.regions]
                wan_pairs = ((n * g) ** 2 - sum(c * c for c in counts)) // 2
                wan_share = min(self.wan.gbps / c for c in counts)
                tiers.append((WAN, wan_share, wan_pairs))
                across -= wan_pairs
            tiers.append((NET, self.network_gbps_per_gpu, across))
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

    @cached_property  # the node's is looked up by name each time; a prediction asks for it per collective
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
        # across regions the pair's rate is the lesser of its NIC share and its share of the WAN's line
        return Link(a, b, NET, min(self.network_gbps_per_gpu, self.wan_gbps((a, b))), 0, p2p_supported=False)

    def check_gpus(self, gpus: Iterable[int]) -> None:
        """UsageError for the first of `gpus` the cluster lacks, as `gpu` says it; no call per GPU (`place` checks
        every GPU of every candidate run)."""
        members = gpus if isinstance(gpus, tuple) else tuple(gpus)
        total = self.num_nodes * self.gpus_per_node
        if members and not self.members and 0 <= min(members) and max(members) < total:
            return
        for g in members:
            self.gpu(g)

    def gpu(self, index: int) -> Gpu:
        if not self.members and 0 <= index < self.num_nodes * self.gpus_per_node:
            return self.gpus[index]  # built once: `place` asks for every GPU of every candidate run
        self._check(index)
        if self.members:
            return replace(self.node.gpu(index % self.gpus_per_node), index=index)
        return self.gpus[index]  # built once: `place` asks for every GPU of every candidate run

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
        members = gpus if isinstance(gpus, tuple) else tuple(gpus)
        found = self._islands_memo.get(members)  # each prediction asks it of its run's GPUs, thousands of them
        if found is None:
            if len(self._islands_memo) >= _MEMO_ENTRIES:
                self._islands_memo.clear()
            found = self._islands_memo[members] = self._islands_spanned_now(members)
        return found

    def _islands_spanned_now(self, members: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
        g = self.gpus_per_node
        seen: dict[tuple[int, ...], None] = {}
        local_islands: dict[tuple[int, ...], tuple[tuple[int, ...], ...]] = {}  # alike nodes: asked once
        for node, local in self._split(members).items():
            islands = local_islands.get(local)
            if islands is None:
                islands = local_islands[local] = self.node.islands_spanned(local)
            for isl in islands:
                seen[tuple(node * g + i for i in isl if not self.members or node * g + i in self._member_set)] = None
        return tuple(sorted(seen, key=lambda t: t[0]))

    @cached_property
    def _islands_memo(self) -> dict[tuple[int, ...], tuple[tuple[int, ...], ...]]:
        return {}

    def bottleneck_gbps(self, gpus: Iterable[int]) -> float:
        """GB/s per direction each GPU pushes into a ring over `gpus` (the ring's bus bandwidth).

        Inside one node: the node's answer. Across nodes: the slower of the slowest node's own ring
        over its members and the network that node's members get (members x per-GPU share): NCCL runs
        one ring channel per NIC, each crossing every node boundary once, so a node's NICs carry the
        ring in parallel (DGX A100 nodes with 8x HDR 200G reach ~192 GB/s busbw = 8 x 24: NVIDIA/nccl
        issue 1576; docs/sources.md).
        """
        groups = self._split(gpus)
        if sum(map(len, groups.values())) < 2:
            return float("inf")
        inside = min(self.node.bottleneck_gbps(local) for local in set(groups.values()))  # alike nodes: once
        if len(groups) == 1:
            return inside
        members = tuple(gpus)
        return min(inside, self.network_gbps(members), self.wan_gbps(members))

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

    def one_region(self) -> Cluster:
        """The same nodes in one region, the WAN replaced by the region's own network (the what-if
        that tells what the WAN costs)."""
        if self.wan is None:
            return self
        return replace(self, regions=(), wan=None, name=f"{self.name} (one region)")

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
            "layout": self.layout.to_dict(),
            "regions": list(self.regions),
            "wan": self.wan.to_dict() if self.wan else None,
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
                layout=Layout.from_dict(data.get("layout")),
                regions=tuple(int(n) for n in data.get("regions") or ()),
                wan=WanSpec.from_dict(data["wan"]) if data.get("wan") else None,
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise UsageError(f"{where}: cluster JSON is missing or has a bad field ({exc}); it needs num_nodes, "
                             "network{kind, nics_per_node, gbps_per_nic, rail_optimized} and node; optional "
                             "layout{nodes_per_rack, rack_distance_m, hops_between_racks}, regions[node counts] "
                             "and wan{gbps, rtt_ms, cipher, cores}") from None

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
    inside = cluster.node.bottleneck_gbps(tuple(range(g)))
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
    line = hardware.NETWORKS[net.kind].line_gbps if net.kind in hardware.NETWORKS else None
    if net.transport == "socket" and line and net.gbps_per_nic < 0.9 * line * hardware.TCP_PAYLOAD_FRACTION:
        out.append(f"{net.kind} carries NCCL over TCP sockets: {net.gbps_per_nic:.3g} GB/s per NIC of its "
                   f"{line:g} GB/s line with {max(1, net.socket_threads)} thread(s) x {net.socks_per_thread} "
                   "socket(s) per connection; more NCCL_SOCKET_NTHREADS / NCCL_NSOCKS_PERTHREAD (JSON "
                   "network.socket_threads, socks_per_thread) or RoCE would move more")
    if cluster.wan is not None:
        wan = cluster.wan
        out.append(f"{cluster.num_regions} regions joined by a {wan.gbps * 8:g} Gb/s WAN ({wan.rtt_ms:g} ms round "
                   f"trip, {wan.cipher}): a collective across regions runs at the WAN's rate shared by every GPU "
                   "that crosses it, and pays the one-way latency at each crossing; keep sharding inside a region "
                   "(HSDP with a shard group per region) so only the replica all-reduce crosses")
    return out


def make_cluster(node: Topology, num_nodes: int, network: NetworkSpec, name: str = "", *,
                 layout: Layout = ONE_RACK, regions: tuple[int, ...] = (), wan: WanSpec | None = None) -> Cluster:
    """A cluster of `num_nodes` x `node`; a NIC count of 0 means one NIC per GPU."""
    if network.nics_per_node == 0:
        network = replace(network, nics_per_node=node.num_gpus)
    return Cluster(node, num_nodes, network, name=name,
                   source=f"{num_nodes} x {node.name}; network rate: hardware.NETWORKS", layout=layout,
                   regions=regions, wan=wan)


def parse_cluster_name(name: str) -> tuple[int, str, str] | None:
    """"4x hgx-h100-8+ib-ndr" -> (4, "hgx-h100-8", "ib-ndr"); None when the text is not of that shape
    (a layout after "/" is read by `parse_layout`)."""
    match = _NAME.match(name)
    if not match:
        return None
    net = match.group(3) + (f"x{match.group(4)}" if match.group(4) else "")
    return int(match.group(1)), match.group(2), net


def load_cluster(name_or_path: str) -> Cluster | None:
    """A cluster from a name ("4x hgx-h100-8+ib-ndr", with a layout or regions: see the module), a
    cluster preset, or a `topowise.cluster` JSON file; None otherwise."""
    preset = load_cluster(CLUSTER_PRESETS[name_or_path]) if name_or_path in CLUSTER_PRESETS else None
    if preset is not None:
        return replace(preset, name=name_or_path)
    regions = _REGIONS.match(name_or_path)
    if regions is not None:
        count = int(regions.group(1))
        inner = _load_named(regions.group(2), name_or_path)
        if inner is None:
            raise UsageError(f"cluster {name_or_path!r}: inside the parentheses give a cluster such as "
                             "'2x hgx-h100-8+ib-ndr'")
        if count < 2:
            raise UsageError(f"cluster {name_or_path!r}: a WAN joins at least 2 regions, not {count}")
        wan = parse_wan(regions.group(3))
        return replace(inner, num_nodes=count * inner.num_nodes, regions=(inner.num_nodes,) * count, wan=wan,
                       name=f"{count}x ({inner.name}) + {regions.group(3)}")
    cluster = _load_named(name_or_path, name_or_path)
    if cluster is not None:
        return cluster
    path = Path(name_or_path)
    if name_or_path.endswith(".json") and path.is_file():
        try:
            data = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            return None  # let the topology loader report it
        if isinstance(data, dict) and data.get("format") == FORMAT:
            return Cluster.from_dict(data, str(path))
    return None


def _load_named(text: str, whole: str) -> Cluster | None:
    match, parsed = _NAME.match(text), parse_cluster_name(text)
    if match is None or parsed is None:
        return None
    num_nodes, node_name, net_name = parsed
    if node_name not in PRESETS:
        raise UsageError(f"cluster {whole!r}: unknown node preset {node_name!r}; valid: {', '.join(PRESETS)}")
    network = network_spec(net_name)
    if network is None:
        raise UsageError(f"cluster {whole!r}: unknown network {net_name!r}; valid: "
                         f"{', '.join(hardware.NETWORKS)} (optionally with a NIC count, e.g. eth-100x2), "
                         f"or {CUSTOM_SYNTAX}")
    if num_nodes < 1:
        raise UsageError(f"cluster {whole!r}: the node count must be at least 1")
    layout = parse_layout(match.group(5)) if match.group(5) else ONE_RACK
    node = load_preset(node_name)
    cluster = make_cluster(node, num_nodes, network, layout=layout)
    suffix = f"/{match.group(5)}" if match.group(5) else ""
    return replace(cluster, name=f"{num_nodes}x {node_name}+{net_name}{suffix}")
