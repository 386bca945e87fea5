"""Collectives across nodes: NCCL's ring and tree on its own latency/bandwidth model, and network traffic.

A group of n GPUs on N nodes, k on each (n = N k). Two tiers carry every collective: the node's
own links (NVLink or PCIe) and the network (each GPU's share of its node's NICs). NCCL streams
chunks through both tiers at once, so a collective runs at the slower tier's bus bandwidth:

    bus_gbps = min(intra: the node ring over its k GPUs x achieved fraction (profile),
                   network: k x per-GPU NIC share x NET efficiency (profile, default 1: the NIC
                   rates in hardware.NIC_GBPS are already measured busbw))

Time follows NCCL's tuner, `ncclTopoTuneModel` and `ncclTopoGetAlgoTime` in src/graph/tuning.cc
(NCCL 2.20.3; quoted as "tuning.cc" below), in microseconds and GB/s:

    time = latency + bytes / algbw
    ring:  latency = base + (nsteps - ninter) x intra_lat + ninter x net_lat
           all_reduce nsteps = 2(n-1), ninter = 2N;  all_gather, reduce_scatter: n-1 and N-1
           algbw = bus x n / nsteps                          (linear latency, full bandwidth)
    tree (all_reduce only; a chain inside each node, a double binary tree across nodes):
           latency = base + 2 ((n/N - 1) x intra_lat + log2(N) x net_lat)
           algbw = 0.5 x 0.92 x bus x correction(size)       (logarithmic latency)

Each algorithm takes the faster of two protocols, LL and Simple (docs/costmodel.md, section 3, says why tree
wins small messages and ring large ones).

NVLS-Tree (NCCL >= 2.18, on by default where NVLS is: HGX H100/H200/B200 boards) reduces inside each
node through the NVSwitch (NVLink SHARP, comm.py) and runs a tree of the nodes across the network:

    nvlstree (all_reduce, Simple): latency = 25 + 2 log2(N) x 20.9 us   (tuning.cc of NCCL 2.30)
           bus = min(in-node NVLS bus over k GPUs, network x (2 on 2 nodes), WAN),  algbw = bus x n / 2(n-1)

Left out: CollNet, NCCL's per-channel caps, the chunk-size pipeline start-up, oversubscription (docs/costmodel.md).

Distance, transport and regions (docs/networks.md) add to that model, and add nothing on a cluster
that uses none of them (one rack, an RDMA fabric, one region):

    ring:  latency += (ninter - nwan) x (net_extra + slowest ring hop's extra) + nwan x wan_lat
           nwan = 2R for all_reduce, R - 1 for all_gather and reduce_scatter, R for broadcast
    tree:  latency += 2 ((log2 N - w) x (net_extra + farthest hop's extra) + w x wan_lat), w = ceil(log2 R)
    bus    = min(intra, network, WAN share x WAN efficiency)

net_extra is the transport's own latency per network step beyond the tuner's RDMA figures (NCCL's
socket transport: hardware.SOCKET_LATENCY_US; a custom link's latency); a hop's extra is the switch
hops and fibre a path between racks adds over a rack-local hop (Cluster.ring_extra_us, tree_extra_us;
NCCL's tuner adds a network's latency to every inter-node step the same way: `latencyInter` in
tuning.cc). R regions joined by a WAN: wan_lat = one-way WAN latency + encryption_latency_s(cipher);
the WAN's rate = min(line, encrypted_gbps(cipher, cores, profile)), shared by every GPU of a region
that crosses at once (Cluster.wan_gbps), as the NIC share is; the critical path of a ring crosses
each region boundary once per phase, like NCCL's 2N network steps for N nodes. These extra terms are
added after NCCL's x1.4 ring plateau factor, which describes NCCL's own pipeline, not the wire.

Groups inside one node are comm.py's (calibrated on this project's measurements); collectives.py
sends each group to the model for where it runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from topowise.costmodel.comm import group_link, nvls_fraction, ring_efficiency
from topowise.costmodel.encryption import encrypted_gbps, encryption_latency_s
from topowise.costmodel.profile import OPS, Profile, default_profile
from topowise.errors import UsageError
from topowise.run import STRATEGIES, normalize_strategy
from topowise.topology.cluster import Cluster
from topowise.topology.model import Wiring
from topowise.units import busbw_factor

ALGORITHMS = ("ring", "tree", "nvlstree")
PROTOCOLS = ("LL", "Simple")

TUNING = "NCCL 2.20.3 src/graph/tuning.cc"

# Latencies in microseconds (tuning.cc baseLat and hwLat; LL128 columns left out).
BASE_LAT_US = {("tree", "LL"): 6.8, ("tree", "Simple"): 0.0, ("ring", "LL"): 6.6, ("ring", "Simple"): 8.4}
HW_LAT_US = {
    "NVLink": {("tree", "LL"): 0.6, ("tree", "Simple"): 28.0, ("ring", "LL"): 0.6, ("ring", "Simple"): 3.4},
    "PCI": {("tree", "LL"): 1.0, ("tree", "Simple"): 28.0, ("ring", "LL"): 1.0, ("ring", "Simple"): 5.7},
    "NET": {("tree", "LL"): 5.0, ("tree", "Simple"): 28.0, ("ring", "LL"): 2.7, ("ring", "Simple"): 14.0},
}
NET_OVERHEAD_US = 1.0  # tuning.cc getNetOverhead: 1 us per network post on x86 Intel (2 on AMD); x3 for Simple
TREE_BW_FACTOR = 0.92  # tuning.cc: tree busBw *= .92
LL_BW_FACTOR = {"ring": 1 / 4.0, "tree": 1 / 3.8}  # tuning.cc: LL moves 8-byte lines with 4-byte flags
LL_MAX_GBPS = {2: 39.0, 3: 20.4}  # tuning.cc llMaxBws, x86 Intel row: 2 nodes, more than 2 nodes
RING_PLATEAU = 1.4  # tuning.cc: multi-node Simple ring all-reduce latency x1.4 (compute capability >= 8.0)
# NVLS-Tree (NCCL >= 2.18; src/graph/tuning.cc of NCCL 2.30, Simple protocol only): base latency 0, an
# NVLink hop of 25 us and a network hop of 20.9 us; the network tier counts twice on 2 nodes ("Handle
# 2 node case of NVLSTree").
NVLS_TREE_LAT_US = {"NVLink": 25.0, "NET": 20.9}
NVLS_TREE_TWO_NODE_NET = 2.0
# tuning.cc treeCorrectionFactor, index log2(bytes / 64), 64 B .. 256 MiB ("trees are not perfectly
# sticking to the model for medium sizes").
TREE_CORRECTION = {
    "LL": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0),
    "Simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9),
}


@dataclass(frozen=True)
class Group:
    """How a set of GPUs sits on a cluster: n ranks on N nodes, k per node (the fewest on any node)."""

    ranks: int
    nodes: int
    per_node: int
    intra_gbps: float  # line rate of the node ring over its k GPUs (inf when k == 1)
    intra_hw: str  # "NVLink" or "PCI" (tuning.cc's intra-node classes)
    net_gbps: float  # k x per-GPU network share, line (measured NIC) rate
    ring_extra_us: float = 0.0  # per network step of a ring: transport latency + its slowest hop's distance
    tree_extra_us: float = 0.0  # per network level of a tree: transport latency + the farthest hop's distance
    regions: int = 1  # regions the group spans
    wan_gbps: float = math.inf  # the group's share of the WAN, after encryption's limit
    wan_lat_us: float = 0.0  # per WAN crossing: one-way latency + encryption latency
    intra_link: str = ""  # comm.group_link's class of the node ring (says whether it runs on an NVSwitch)
    nvls_tree_gbps: float = 0.0  # bus bandwidth of NCCL's NVLS-Tree all-reduce; 0 where NCCL has none


def describe_group(gpus, topo: Wiring, profile: Profile | None = None) -> Group:
    """How `gpus` sit on `topo`; `profile` gives the encryption rate of a WAN (default profile)."""
    members = tuple(gpus)
    per = topo.per_node(members)
    k = min(map(len, per.values()))
    # the first of the slowest nodes' GPU sets, looked for among the distinct sets (alike nodes: once)
    worst = min(dict.fromkeys(per.values()),
                key=lambda local: topo.node.bottleneck_gbps(local) if len(local) > 1 else math.inf)
    inner = topo.node.bottleneck_gbps(worst) if len(worst) > 1 else math.inf
    nv = all(topo.node.link(a, b).is_nvlink for i, a in enumerate(worst) for b in worst[i + 1:])
    group = Group(len(members), len(per), k, inner, "NVLink" if nv else "PCI",
                  topo.network_gbps(members) if len(per) > 1 else math.inf,
                  intra_link=group_link(topo.node, worst)[1] if len(worst) > 1 else "")
    if len(per) < 2:
        return group
    assert isinstance(topo, Cluster), "a group across nodes sits on a Cluster"
    profile = profile or default_profile()
    net_us = topo.network.latency_us  # across nodes: a Cluster
    assert net_us is not None, "NetworkSpec.__post_init__ fills latency_us from hardware.NETWORKS"
    regions = len(topo.regions_spanned(members))
    wan_gbps, wan_lat = math.inf, 0.0
    if regions > 1 and topo.wan is not None:  # a Cluster of several regions has a WAN (Cluster.__post_init__)
        wan = topo.wan
        wan_gbps = min(topo.wan_gbps(members),
                       encrypted_gbps(wan.cipher, wan.cores, profile) * topo.wan_gbps(members) / wan.gbps)
        wan_lat = (wan.one_way_s + encryption_latency_s(wan.cipher, profile)) * 1e6
    group = replace(group, ring_extra_us=net_us + topo.ring_extra_us(members),
                    tree_extra_us=net_us + topo.tree_extra_us(members), regions=regions, wan_gbps=wan_gbps,
                    wan_lat_us=wan_lat)
    return replace(group, nvls_tree_gbps=nvls_tree_gbps(group, profile))


def nvls_tree_gbps(group: Group, profile: Profile) -> float:
    """Bus bandwidth of NCCL's NVLS-Tree all-reduce (NVLink SHARP inside each node, a tree of the nodes
    across the network), 0 where NCCL has none: it needs an NVSwitch that reduces (comm.LinkClass.nvls),
    more than one GPU per node, and NVLS on (Profile.nvls_enabled, NCCL_NVLS_ENABLE).

    tuning.cc: min(intra NVLS, network (x2 on 2 nodes)); the intra tier is comm.py's in-node NVLS bus
    bandwidth over the node's k GPUs, the network tier the node's NIC share and the WAN as for ring."""
    if group.per_node < 2 or not getattr(group.intra_link, "nvls", False) or not profile.nvls_enabled:
        return 0.0
    efficiency = profile.comm_efficiency.get("NET/all_reduce", 1.0)
    net = group.net_gbps * efficiency * (NVLS_TREE_TWO_NODE_NET if group.nodes <= 2 else 1.0)
    return min(group.intra_gbps * nvls_fraction(group.per_node, profile), net, group.wan_gbps * efficiency)


def wan_gbps_effective(topo: Wiring, profile: Profile | None = None) -> float:
    """The WAN's rate per region per direction once encrypted: min(line, encrypted_gbps(cipher, cores));
    inf without a WAN."""
    wan = getattr(topo, "wan", None)
    if wan is None:
        return math.inf
    return min(wan.gbps, encrypted_gbps(wan.cipher, wan.cores, profile or default_profile()))


def bus_gbps(op: str, group: Group, profile: Profile) -> tuple[float, str]:
    """Achieved bus bandwidth of a collective over the group and the tier that sets it
    ("intra", "network" or "wan")."""
    # The node's share of the ring runs over its k GPUs as comm.py's in-node ring does (on an NVSwitch
    # its efficiency follows k, not the 2-GPU calibration alone).
    intra_class = group.intra_link or ("NV" if group.intra_hw == "NVLink" else "PCIe")
    intra = group.intra_gbps * ring_efficiency(op, group.per_node, intra_class, profile) if group.per_node > 1 \
        else math.inf
    net = group.net_gbps * profile.comm_efficiency.get(f"NET/{op}", 1.0)
    wan = group.wan_gbps * profile.comm_efficiency.get(f"NET/{op}", 1.0)
    return min((net, "network"), (intra, "intra"), (wan, "wan"), key=lambda t: t[0])  # a tie: "network", as before


def algorithm_time_s(op: str, nbytes: float, group: Group, algorithm: str, protocol: str, bus: float) -> float | None:
    """NCCL's predicted time for one algorithm and protocol, seconds; None where NCCL has no such path."""
    n, N = group.ranks, group.nodes
    if n < 2:
        return 0.0
    if algorithm in ("tree", "nvlstree") and op != "all_reduce":
        return None  # tuning.cc: tree and NVLS-Tree serve all-reduce only
    if algorithm == "nvlstree":
        return _nvls_tree_time_s(nbytes, group, protocol)
    key = (algorithm, protocol)
    intra_lat = HW_LAT_US[group.intra_hw][key]
    net_lat = HW_LAT_US["NET"][key]
    lat = BASE_LAT_US[key]
    if algorithm == "ring":
        nsteps, ninter = {"all_reduce": (2 * (n - 1), 2 * N if N > 1 else 0),
                          "all_gather": (n - 1, N - 1), "reduce_scatter": (n - 1, N - 1),
                          "broadcast": (n, N)}[op]
        ninter = min(ninter, nsteps)  # tuning.cc's 2N exceeds 2(n-1) at one GPU per node; clamp
        if N > 1:
            intra_lat = max(intra_lat, NET_OVERHEAD_US * (3 if protocol == "Simple" else 1))
        lat += (nsteps - ninter) * intra_lat + ninter * net_lat
        algbw = bus * n / nsteps
        if protocol == "LL":
            algbw = min(LL_MAX_GBPS[min(N, 3)] if N > 1 else math.inf, bus * LL_BW_FACTOR["ring"]) * n / nsteps
        if protocol == "Simple" and N > 1 and op == "all_reduce":
            lat *= RING_PLATEAU
        R = group.regions
        nwan = min(ninter, {"all_reduce": 2 * R, "all_gather": R - 1, "reduce_scatter": R - 1,
                            "broadcast": R}[op]) if R > 1 else 0
        lat += (ninter - nwan) * group.ring_extra_us + nwan * group.wan_lat_us
    else:
        levels = int(math.log2(N))
        w = min(levels, math.ceil(math.log2(group.regions))) if group.regions > 1 else 0
        lat += 2 * ((n // N - 1) * intra_lat + levels * net_lat)
        lat += 2 * ((levels - w) * group.tree_extra_us + w * group.wan_lat_us)
        tree_bus = bus * TREE_BW_FACTOR
        if protocol == "LL":
            tree_bus = min(tree_bus * LL_BW_FACTOR["tree"], LL_MAX_GBPS[min(N, 3)] if N > 1 else math.inf)
        log_size = int(math.log2(max(1, int(nbytes) >> 6)))
        correction = TREE_CORRECTION[protocol][log_size] if log_size < len(TREE_CORRECTION[protocol]) else 1.0
        algbw = 0.5 * tree_bus * correction
    return lat * 1e-6 + nbytes / (algbw * 1e9)


def _nvls_tree_time_s(nbytes: float, group: Group, protocol: str) -> float | None:
    """NVLS-Tree all-reduce (tuning.cc): latency = NVLink hop + 2 log2(N) network hops (plus distance and
    WAN as for tree), algorithm bandwidth = bus x n / 2(n-1) as ring's."""
    if protocol != "Simple" or group.nvls_tree_gbps <= 0:
        return None
    n, N = group.ranks, group.nodes
    levels = int(math.log2(N))
    w = min(levels, math.ceil(math.log2(group.regions))) if group.regions > 1 else 0
    lat = NVLS_TREE_LAT_US["NVLink"] + 2 * levels * NVLS_TREE_LAT_US["NET"]
    lat += 2 * ((levels - w) * group.tree_extra_us + w * group.wan_lat_us)
    return lat * 1e-6 + nbytes / (group.nvls_tree_gbps * n / (2 * (n - 1)) * 1e9)


def _best(op, nbytes, group, algorithm, bus) -> tuple[float, str] | None:
    options = []
    for protocol in PROTOCOLS:
        t = algorithm_time_s(op, nbytes, group, algorithm, protocol, bus)
        if t is not None:
            options.append((t, protocol))
    return min(options) if options else None


def network_bytes_per_gpu(op: str, nbytes: float, group: Group) -> float:
    """Bytes each GPU's share of the NICs sends for one collective (ring accounting; 0 inside a node).

    A ring channel crosses each node boundary once, so a node sends what one rank of the ring sends
    (2(n-1)/n S for all-reduce, (n-1)/n S for all-gather and reduce-scatter with S the full size,
    S for broadcast), split over its k GPUs' NIC shares.
    """
    if group.nodes < 2:
        return 0.0
    return busbw_factor(op, group.ranks) * nbytes / group.per_node


def collective_time_s(op: str, nbytes: float, gpus, topo: Wiring, profile: Profile | None = None, *,
                      algorithm: str = "auto") -> tuple[float, dict]:
    """Time of one collective of `nbytes` over `gpus` that span nodes, and how it was found.

    `nbytes` follows nccl-tests: the full (gathered) size for all_gather and reduce_scatter.
    `algorithm` is "auto" (the fastest, as NCCL's tuner picks), "ring", "tree" or "nvlstree" (as NCCL_ALGO
    forces; tree and NVLS-Tree exist for all-reduce only, NVLS-Tree only on NVSwitch boards that reduce:
    where an algorithm does not exist, ring, as NCCL falls back).
    detail: op, bytes, ranks, nodes, per_node, algorithm, protocol, bus_gbps, bound ("intra"/"network"),
    link ("NET" across nodes), times_s{ring, tree, nvlstree}, network_bytes_per_gpu, source.
    """
    if op not in OPS:
        raise UsageError(f"unknown collective {op!r}; known: {', '.join(OPS)}")
    if algorithm not in ("auto",) + ALGORITHMS:
        raise UsageError(f"unknown NCCL algorithm {algorithm!r}; use {', '.join(ALGORITHMS)} or auto")
    profile = profile or default_profile()
    members = tuple(gpus)
    if len(topo.nodes_spanned(members)) < 2:
        raise ValueError(f"GPUs {list(members)} lie on one node: comm.py prices them (collectives.call_cost)")
    group = describe_group(members, topo, profile)
    bus, bound = bus_gbps(op, group, profile)
    times = {a: _best(op, nbytes, group, a, bus) for a in ALGORITHMS}
    usable = {a: v for a, v in times.items() if v is not None}
    chosen = min(usable, key=lambda a: usable[a][0]) if algorithm == "auto" else (
        algorithm if algorithm in usable else "ring")
    time_s, protocol = usable[chosen]
    return time_s, {
        "op": op, "bytes": nbytes, "ranks": group.ranks, "nodes": group.nodes, "per_node": group.per_node,
        "algorithm": chosen, "protocol": protocol, "bus_gbps": bus, "bound": bound, "link": "NET",
        "times_s": {a: (v[0] if v else None) for a, v in times.items()},
        "network_bytes_per_gpu": network_bytes_per_gpu(op, nbytes, group),
        "regions": group.regions, "wan_s": _wan_s(op, nbytes, group, profile, algorithm, time_s),
        "source": f"{TUNING} latency/bandwidth model; bus bandwidth min(node ring, k x NIC share, WAN share)",
    }


def _wan_s(op, nbytes, group: Group, profile, algorithm: str, time_s: float) -> float:
    """Seconds of the collective the WAN costs: its time less the time with the WAN as fast and near as
    the region's own network."""
    if group.regions < 2:
        return 0.0
    local = replace(group, regions=1, wan_gbps=math.inf, wan_lat_us=0.0)
    local = replace(local, nvls_tree_gbps=nvls_tree_gbps(local, profile))
    bus, _ = bus_gbps(op, local, profile)
    options = {a: _best(op, nbytes, local, a, bus) for a in ALGORITHMS}
    usable = [v[0] for a, v in options.items() if v is not None and algorithm in ("auto", a)]
    ring = options["ring"]
    assert ring is not None, "ring runs every collective"
    without = min(usable) if usable else ring[0]
    return max(0.0, time_s - without)


def wan_share(op: str, nbytes: float, gpus, topo: Wiring, profile: Profile | None = None) -> float:
    """The fraction of one collective's time the WAN costs (0 for a group inside one region)."""
    members = tuple(gpus)
    if len(topo.nodes_spanned(members)) < 2 or len(getattr(topo, "regions_spanned", lambda g: (0,))(members)) < 2:
        return 0.0
    time_s, detail = collective_time_s(op, nbytes, members, topo, profile)
    return detail["wan_s"] / time_s if time_s > 0 else 0.0


def crossover_bytes(group: Group, profile: Profile | None = None, op: str = "all_reduce",
                    lo: float = 1.0, hi: float = 2.0**40) -> float | None:
    """The all-reduce size where tree stops winning: below it tree is faster than ring, at it ring ties.

    Scans 16 sizes per octave and the last byte before each power of two (tree's correction factor
    jumps there), then bisects the step where ring first catches up. NCCL's
    model can cross more than once (tree's medium-size correction, protocol switches); this is the
    first crossing. None when tree wins over the whole range; `lo` when ring already wins at `lo`.
    """
    profile = profile or default_profile()
    bus, _ = bus_gbps(op, group, profile)

    def ring_wins(size: float) -> bool:
        ring, tree = _best(op, size, group, "ring", bus), _best(op, size, group, "tree", bus)
        assert ring is not None and tree is not None, f"ring and tree both run {op}"
        return ring[0] <= tree[0]

    if ring_wins(lo):
        return lo
    prev = lo
    for size in _scan_sizes(lo, hi):
        if ring_wins(size):
            a, b = prev, size
            for _ in range(60):
                mid = (a + b) / 2
                a, b = (a, mid) if ring_wins(mid) else (mid, b)
            return b
        prev = size
    return None


def _scan_sizes(lo: float, hi: float):
    octave = 1 << max(0, int(math.log2(max(lo, 1))))
    while octave <= hi:
        for j in range(16):
            size = octave + octave * j / 16
            if lo < size <= hi:
                yield size
        if lo < 2 * octave - 1 <= hi:
            yield 2 * octave - 1
        octave *= 2


# --- network traffic of each strategy --------------------------------------------------------------

def step_collectives(strategy: str, params: int, shard_group: int | None = None,
                     engine: str = "torch") -> list[tuple[str, float, str]]:
    """(op, full bytes, group) per training step, as PyTorch holds training state (see costmodel/step.py).

    group: "all" (every GPU), "shard" (the HSDP or hpZ group inside a node), "replica" (one GPU per
    shard-group, across nodes). ddp: fp32 gradient all-reduce (4 P bytes); zero1: the same plus the
    broadcast of each rank's updated fp32 parameter partition (an all-gather of 4 P); zero2: fp32
    reduce-scatter and one bf16 all-gather (parameters kept after forward); zero3: the same with a
    second all-gather in backward; hsdp: zero3's collectives inside the shard group, then an fp32
    all-reduce of each shard (4 P / shard) across replicas. engine="deepspeed" with strategy "hpz"
    is ZeRO++'s hierarchical partitioning (Wang et al. 2023, arXiv 2306.10209): zero3 whose backward
    all-gather reads a secondary bf16 copy kept inside the node.
    """
    p = float(params)
    if strategy == "hpz":
        if engine != "deepspeed":
            raise UsageError("hpZ is DeepSpeed ZeRO++ (zero_hpz_partition_size); PyTorch FSDP has no such mode")
        return [("reduce_scatter", 4 * p, "all"), ("all_gather", 2 * p, "all"), ("all_gather", 2 * p, "shard")]
    spec = STRATEGIES[normalize_strategy(strategy)]
    if spec.autocast:  # DDP's family: the gradient all-reduce; zero1 also gathers the updated partitions
        return [("all_reduce", 4 * p, "all")] + ([("all_gather", 4 * p, "all")] if spec.sharded else [])
    group = "shard" if spec.replicated else "all"
    rows = [("reduce_scatter", 4 * p, group), ("all_gather", 2 * p, group)]
    if spec.reshard_after_forward:
        rows.append(("all_gather", 2 * p, group))
    if spec.replicated:
        if not shard_group:
            raise UsageError("hsdp needs a shard group size (GPUs per shard group, e.g. the GPUs of one node)")
        rows.append(("all_reduce", 4 * p / shard_group, "replica"))
    return rows


def strategy_groups(gpus, shard_group: int) -> dict[str, tuple[int, ...]]:
    """The first group of each kind: all GPUs, the first shard group, the first replica group."""
    members = tuple(gpus)
    return {"all": members, "shard": members[:shard_group], "replica": members[::shard_group]}


def network_traffic(strategy: str, params: int, gpus, topo: Wiring, *, shard_group: int | None = None,
                    engine: str = "torch") -> dict:
    """Bytes each GPU sends over the network per step for a strategy on `gpus` (0 inside one node).

    Returns {strategy, bytes_per_gpu, bytes_per_node, collectives[{op, bytes, group, network_bytes_per_gpu}]}.
    """
    members = tuple(gpus)
    if strategy == "hpz" or STRATEGIES[normalize_strategy(strategy)].replicated:
        shard_group = shard_group or min(topo.gpus_per_node, len(members))  # default: a shard group per node
    groups = strategy_groups(members, shard_group or len(members))
    rows: list[dict[str, Any]] = []
    for op, nbytes, which in step_collectives(strategy, params, shard_group, engine):
        group = describe_group(groups[which], topo)
        per_gpu = network_bytes_per_gpu(op, nbytes, group)
        rows.append({"op": op, "bytes": nbytes, "group": which, "network_bytes_per_gpu": per_gpu})
    per_gpu = sum(r["network_bytes_per_gpu"] for r in rows)
    k = describe_group(members, topo).per_node
    return {"strategy": strategy, "bytes_per_gpu": per_gpu, "bytes_per_node": per_gpu * k, "collectives": rows}
