"""The network between a cluster's nodes as it is described: the NICs (kind, count, rate, transport),
how the nodes stand in racks and rails (`Layout`), the WAN between regions (`WanSpec`), and the name
forms that give them ("ib-ndr", "eth-100x2", "custom-25gbit-5us", "rack=4,apart=100m",
"wan-100gbit-30ms-aes-gcm"; docs/networks.md). cluster.py puts them together with the node topology.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

from topowise import hardware
from topowise.errors import UsageError
from topowise.topology.model import MAX_NIC_GBPS

# Defaults for a network named without a NIC count. InfiniBand and RoCE: one NIC per GPU on a
# rail-optimized fabric, as NVIDIA's HGX reference architectures wire them (each GPU its own NIC,
# NIC i of every node on rail switch i: NVIDIA Enterprise RA "HGX AI factory", network logical
# architecture). Ethernet (TCP sockets): one port per node on an ordinary data-center fabric (an
# assumption for a commodity server, not a reference design; name the count, e.g. eth-100x4).
NETWORK_DEFAULTS: dict[str, tuple[str, bool]] = {
    name: (("per-gpu", True) if kind.transport in ("ib", "roce") else ("1", False))
    for name, kind in hardware.NETWORKS.items()
}

NETWORK_LABELS = {name: kind.label for name, kind in hardware.NETWORKS.items()}

TRANSPORTS = ("ib", "roce", "socket")
# as costmodel/encryption.CIPHERS (a test keeps them equal; topology does not import the cost model)
WAN_CIPHERS = ("none", "aes-gcm", "chacha20", "tls")
# Host cores that encrypt a region's WAN traffic when the name does not say (a stated default: one
# 8-core gateway or 8 cores across the region's hosts; give "-<n>cores" or JSON wan.cores).
WAN_DEFAULT_CORES = 8

_CUSTOM = re.compile(r"custom-(\d+(?:\.\d+)?)gbit-(\d+(?:\.\d+)?)us(-rdma)?", re.ASCII)
_WAN = re.compile(r"wan-(\d+(?:\.\d+)?)gbit-(\d+(?:\.\d+)?)ms(?:-(none|aes-gcm|chacha20|tls))?(?:-(\d+)cores)?",
                  re.ASCII)
CUSTOM_SYNTAX = "custom-<rate>gbit-<latency>us[-rdma], e.g. custom-25gbit-5us (TCP sockets) or custom-200gbit-2us-rdma"
WAN_SYNTAX = ("wan-<rate>gbit-<rtt>ms[-none|-aes-gcm|-chacha20|-tls][-<n>cores], "
              "e.g. wan-100gbit-30ms-aes-gcm")
LAYOUT_SYNTAX = ("/rack=<nodes per rack>,apart=<metres between racks, e.g. 100m or 2km>,hops=<switch hops between "
                 "racks>,rail=<nodes per rail group>")


# No node carries more network adapters than this: a server has at most ~10 (DGX B200: 8 compute + 2
# storage), an NVL72 rack taken as one node has one per GPU (72); a count past twice that is a typo that
# would multiply the network's rate.
MAX_NICS_PER_NODE = 144


@dataclass(frozen=True)
class NetworkSpec:
    """The network between nodes: `nics_per_node` NICs of `kind`, each `gbps_per_nic` GB/s per direction
    as NCCL reaches it.

    transport ("ib", "roce", "socket") and latency_us (added to each network step beyond NCCL's tuner
    latencies) come from hardware.NETWORKS when not given; socket_threads and socks_per_thread are
    NCCL_SOCKET_NTHREADS and NCCL_NSOCKS_PERTHREAD (socket transport only).
    """

    kind: str
    nics_per_node: int
    gbps_per_nic: float
    rail_optimized: bool = True
    transport: str = ""
    latency_us: float | None = None
    socket_threads: int = 0
    socks_per_thread: int = 1

    def __post_init__(self) -> None:
        known = hardware.NETWORKS.get(self.kind)
        if not self.transport:
            object.__setattr__(self, "transport", known.transport if known else "ib")
        latency = self.latency_us
        if latency is None:
            latency = known.latency_us if known else 0.0
            object.__setattr__(self, "latency_us", latency)
        if self.transport not in TRANSPORTS:
            raise UsageError(f"network {self.kind!r}: transport {self.transport!r} is not one of "
                             f"{', '.join(TRANSPORTS)}")
        if not latency >= 0 or latency == math.inf:
            raise UsageError(f"network {self.kind!r}: latency_us must be >= 0, not {latency}")
        if not 0 < self.gbps_per_nic <= MAX_NIC_GBPS:
            raise UsageError(f"network {self.kind!r}: gbps_per_nic must be a rate above 0 GB/s and at most "
                             f"{MAX_NIC_GBPS:,.0f} (an 800 Gb/s NIC gives 100), not {self.gbps_per_nic:.4g}")
        if not 0 <= self.nics_per_node <= MAX_NICS_PER_NODE:  # 0: one per GPU, resolved by make_cluster
            raise UsageError(f"network {self.kind!r}: {self.nics_per_node} NICs per node; give 1 to "
                             f"{MAX_NICS_PER_NODE}")

    @property
    def node_gbps(self) -> float:
        return self.nics_per_node * self.gbps_per_nic

    @property
    def label(self) -> str:
        return NETWORK_LABELS.get(self.kind, self.kind)

    @property
    def switch_hop_us(self) -> float:
        return hardware.SWITCH_HOP_US[self.transport]

    def to_dict(self) -> dict:
        return {"kind": self.kind, "nics_per_node": self.nics_per_node, "gbps_per_nic": self.gbps_per_nic,
                "rail_optimized": self.rail_optimized, "transport": self.transport, "latency_us": self.latency_us,
                "socket_threads": self.socket_threads, "socks_per_thread": self.socks_per_thread}

    @classmethod
    def from_dict(cls, data: dict) -> NetworkSpec:
        latency = data.get("latency_us")
        return cls(str(data["kind"]), int(data["nics_per_node"]), float(data["gbps_per_nic"]),
                   bool(data.get("rail_optimized", True)), str(data.get("transport", "")),
                   None if latency is None else float(latency), int(data.get("socket_threads", 0)),
                   int(data.get("socks_per_thread", 1)))


@dataclass(frozen=True)
class Layout:
    """How a region's nodes stand: `nodes_per_rack` to a rack (0: all in one), racks in a row
    `rack_distance_m` apart (fibre metres between neighbours), `hops_between_racks` switches on a
    path between switch domains (3: leaf, spine, leaf). On a rail-optimized fabric
    `nodes_per_rail_group` nodes share their rail switches (NIC i of each on rail switch i, one hop
    apart, as a DGX SuperPOD scalable unit spans racks); 0: a rail group is a rack.

    A path inside a rack (one leaf switch, short cables) is what NCCL's tuner latencies describe;
    `extra_us` is what a longer path adds to it."""

    nodes_per_rack: int = 0
    rack_distance_m: float = 0.0
    hops_between_racks: int = 3
    nodes_per_rail_group: int = 0

    def __post_init__(self) -> None:
        if self.nodes_per_rack < 0 or not self.rack_distance_m >= 0 or self.hops_between_racks < 1 \
                or self.nodes_per_rail_group < 0:
            raise UsageError(f"layout: nodes per rack and per rail group >= 0, distance >= 0 m and at least 1 switch "
                             f"hop between racks, not {self.nodes_per_rack}, {self.nodes_per_rail_group}, "
                             f"{self.rack_distance_m} m, {self.hops_between_racks}")

    @property
    def is_default(self) -> bool:
        return self == Layout()

    def rack_of(self, local_node: int) -> int:
        return local_node // self.nodes_per_rack if self.nodes_per_rack else 0

    def place(self, local_node: int, rails: bool) -> tuple[int, int]:
        """(rack, switch domain) of a node of a region: its rack, and the rack or, on a rail-optimized
        fabric with rail groups, its rail group."""
        rack = self.rack_of(local_node)
        if rails and self.nodes_per_rail_group:
            return rack, local_node // self.nodes_per_rail_group
        return rack, rack

    def extra_us(self, a: tuple[int, int], b: tuple[int, int], switch_hop_us: float) -> float:
        """Latency a path between two placed nodes adds over a path inside one rack: the extra switch
        hops when they sit in different switch domains, and the fibre between their racks (in a row)."""
        hops = 0 if a[1] == b[1] else self.hops_between_racks - 1
        return hops * switch_hop_us + abs(a[0] - b[0]) * self.rack_distance_m * hardware.FIBRE_US_PER_M

    def to_dict(self) -> dict:
        return {"nodes_per_rack": self.nodes_per_rack, "rack_distance_m": self.rack_distance_m,
                "hops_between_racks": self.hops_between_racks, "nodes_per_rail_group": self.nodes_per_rail_group}

    @classmethod
    def from_dict(cls, data: dict | None) -> Layout:
        data = data or {}
        return cls(int(data.get("nodes_per_rack", 0)), float(data.get("rack_distance_m", 0.0)),
                   int(data.get("hops_between_racks", 3)), int(data.get("nodes_per_rail_group", 0)))


@dataclass(frozen=True)
class WanSpec:
    """The link between regions: `gbps` GB/s per direction into and out of each region, `rtt_ms`
    round trip, traffic encrypted with `cipher` by `cores` host cores (costmodel/encryption.py)."""

    gbps: float
    rtt_ms: float
    cipher: str = "none"
    cores: int = WAN_DEFAULT_CORES

    def __post_init__(self) -> None:
        if not self.gbps > 0 or not self.rtt_ms >= 0:
            raise UsageError(f"WAN: the rate must be above 0 and the round trip >= 0 ms, not {self.gbps} GB/s, "
                             f"{self.rtt_ms} ms")
        if self.cipher not in WAN_CIPHERS:
            raise UsageError(f"WAN cipher {self.cipher!r}: use one of {', '.join(WAN_CIPHERS)}")
        if self.cores < 1:
            raise UsageError(f"WAN: at least one core encrypts, not {self.cores}")

    @property
    def one_way_s(self) -> float:
        return self.rtt_ms * 1e-3 / 2

    @property
    def name(self) -> str:
        cores = "" if self.cores == WAN_DEFAULT_CORES else f"-{self.cores}cores"
        return f"wan-{self.gbps * 8:g}gbit-{self.rtt_ms:g}ms-{self.cipher}{cores}"

    def to_dict(self) -> dict:
        return {"gbps": self.gbps, "rtt_ms": self.rtt_ms, "cipher": self.cipher, "cores": self.cores}

    @classmethod
    def from_dict(cls, data: dict) -> WanSpec:
        return cls(float(data["gbps"]), float(data["rtt_ms"]), str(data.get("cipher", "none")),
                   int(data.get("cores", WAN_DEFAULT_CORES)))


def network_spec(text: str) -> NetworkSpec | None:
    """`ib-ndr`, `eth-100x2` or `custom-25gbit-5us` (kind and optional NIC count) -> NetworkSpec, with
    the node's GPU count unknown.

    Returns None for an unknown kind; a malformed custom link is a UsageError saying the syntax. The
    per-GPU default count is resolved by `make_cluster`.
    """
    match = re.fullmatch(r"([A-Za-z0-9.-]+?)(?:x(\d+))?", text.strip(), re.ASCII)
    if not match:
        return None
    kind, count_text = match.group(1), match.group(2)
    if count_text is not None and not 1 <= int(count_text) <= MAX_NICS_PER_NODE:
        raise UsageError(f"network {text.strip()!r}: {int(count_text)} NICs per node; give 1 to {MAX_NICS_PER_NODE} "
                         f"(leave the count out for the default, e.g. {kind})")
    if kind.startswith("custom"):
        return _custom_spec(kind, count_text)
    if kind not in hardware.NETWORKS:
        return None
    default_count, rail = NETWORK_DEFAULTS.get(kind, ("1", False))
    count = int(count_text) if count_text else (0 if default_count == "per-gpu" else int(default_count))
    return NetworkSpec(kind, count, hardware.NIC_GBPS[kind], rail)


def _custom_spec(kind: str, count_text: str | None) -> NetworkSpec:
    """A link given by its rate and latency: custom-25gbit-5us is 25 Gb/s over TCP sockets with 5 us of
    cable and switches beyond a rack-local hop; -rdma makes it RDMA (derated as NDR's measured rate)."""
    match = _CUSTOM.fullmatch(kind)
    if not match:
        raise UsageError(f"custom network {kind!r}: write {CUSTOM_SYNTAX}")
    line = float(match.group(1)) / 8
    latency = float(match.group(2))
    rdma = bool(match.group(3))
    if line <= 0:
        raise UsageError(f"custom network {kind!r}: the rate must be above 0 Gb/s")
    if rdma:
        spec = NetworkSpec(kind, int(count_text) if count_text else 0, line * hardware.RDMA_DERATE, True,
                           "roce", latency)
    else:
        spec = NetworkSpec(kind, int(count_text) if count_text else 1, hardware.socket_busbw_gbps(line), False,
                           "socket", hardware.SOCKET_LATENCY_US + latency)
    return spec


def with_socket_threads(network: NetworkSpec, threads: int, socks_per_thread: int) -> NetworkSpec:
    """The network with NCCL_SOCKET_NTHREADS / NCCL_NSOCKS_PERTHREAD set (socket transport only)."""
    if network.transport != "socket":
        raise UsageError(f"network {network.kind!r} is RDMA ({network.transport}); socket threads apply to "
                         "Ethernet without RoCE")
    if not 0 <= threads <= hardware.SOCKET_MAX_THREADS or socks_per_thread < 1 or \
            max(1, threads) * socks_per_thread > hardware.SOCKET_MAX_SOCKETS:
        raise UsageError(f"NCCL allows 0-{hardware.SOCKET_MAX_THREADS} socket threads and at most "
                         f"{hardware.SOCKET_MAX_SOCKETS} sockets (threads x sockets per thread), not "
                         f"{threads} x {socks_per_thread}")
    line = hardware.NETWORKS[network.kind].line_gbps if network.kind in hardware.NETWORKS else None
    if line is None:
        match = _CUSTOM.fullmatch(network.kind)
        line = float(match.group(1)) / 8 if match else network.gbps_per_nic / hardware.TCP_PAYLOAD_FRACTION
    return replace(network, gbps_per_nic=hardware.socket_busbw_gbps(line, threads, socks_per_thread),
                   socket_threads=threads, socks_per_thread=socks_per_thread)


def parse_layout(text: str) -> Layout:
    """"rack=4,apart=100m,hops=3,rail=32" -> Layout(4, 100.0, 3, 32); metres as 100m, 100 m or 2km."""
    values: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, eq, value = part.partition("=")
        if not eq or key.strip() not in ("rack", "apart", "hops", "rail") or not value.strip() or not value.isascii():
            raise UsageError(f"cluster layout {text!r}: write {LAYOUT_SYNTAX}")
        values[key.strip()] = value.strip().replace(" ", "")
    for key in ("rack", "rail"):  # 0 is the JSON default ("not given"), never a count someone writes
        if values.get(key, "").lstrip("+-0") == "" and key in values:
            raise UsageError(f"cluster layout {text!r}: {key}= counts nodes, at least 1 (leave it out for "
                             f"{'all nodes in one rack' if key == 'rack' else 'a rail group per rack'})")
    try:
        apart = values.get("apart", "0m")
        metres = float(apart[:-2]) * 1000 if apart.endswith("km") else float(apart.removesuffix("m"))
        return Layout(int(values.get("rack", 0)), metres, int(values.get("hops", 3)), int(values.get("rail", 0)))
    except ValueError:
        raise UsageError(f"cluster layout {text!r}: write {LAYOUT_SYNTAX}") from None


def parse_wan(text: str) -> WanSpec:
    match = _WAN.fullmatch(text.strip())
    if not match:
        raise UsageError(f"WAN {text!r}: write {WAN_SYNTAX}")
    return WanSpec(float(match.group(1)) / 8, float(match.group(2)), match.group(3) or "none",
                   int(match.group(4)) if match.group(4) else WAN_DEFAULT_CORES)
