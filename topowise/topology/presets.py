"""Named machines as data. Every figure has a source (hardware.py for rates, the cited page for shape;
tests/unit/data holds the `nvidia-smi topo -m` outputs cited; docs/sources.md lists them all)."""

from __future__ import annotations

import itertools

from topowise.errors import UsageError
from topowise.topology.model import NVLINK, Nic, Topology, build


def _all_pairs(gpus, kind):
    return dict.fromkeys(itertools.combinations(gpus, 2), kind)


def _two_sockets(n: int) -> dict[int, int]:
    return {i: 0 if i < n // 2 else 1 for i in range(n)}


def _pcie_by_socket(n: int) -> dict[tuple[int, int], str]:
    """NODE inside a CPU socket, SYS across sockets (as `nvidia-smi topo -m` shows dual-socket hosts)."""
    numa = _two_sockets(n)
    return {(a, b): "NODE" if numa[a] == numa[b] else "SYS" for a, b in itertools.combinations(range(n), 2)}


def _nvswitch_node(name, gpu, nvlinks, source, nics=()):
    kinds = _all_pairs(range(8), NVLINK)
    counts = dict.fromkeys(kinds, nvlinks)
    return build(name, gpu, kinds, nvlink_counts=counts, nvswitch=True, numa=_two_sockets(8), source=source, nics=nics)


def _direct_nvlink_node(name, gpu, n, nvlinks, source):
    """n GPUs with a direct NVLink bundle between every pair and no switch (HGX 4-GPU boards)."""
    kinds = _all_pairs(range(n), NVLINK)
    return build(name, gpu, kinds, nvlink_counts=dict.fromkeys(kinds, nvlinks), numa=_two_sockets(n), source=source)


def _nvl72_rack(name, gpu, source):
    """A GB200/GB300 NVL72 rack: 18 compute trays of 2 Grace CPUs and 4 GPUs, every GPU's 18 NVLink 5 links
    going to the rack's NVLink Switch trays, so the 72 GPUs are one NVSwitch island (each pair: the GPU's
    whole port, as on an HGX board). NUMA: a Grace CPU and its 2 GPUs."""
    kinds = _all_pairs(range(72), NVLINK)
    return build(name, gpu, kinds, nvlink_counts=dict.fromkeys(kinds, 18), nvswitch=True,
                 numa={i: i // 2 for i in range(72)}, source=source)


def _bridged_node(name, gpu, groups, links_per_pair, source):
    kinds = _pcie_by_socket(8)
    counts = {}
    for group in groups:
        for p in itertools.combinations(group, 2):
            kinds[p] = NVLINK
            counts[p] = links_per_pair
    return build(name, gpu, kinds, nvlink_counts=counts, numa=_two_sockets(8), source=source)


def _ib_rails(kind: str, count: int, gbps: float) -> tuple[Nic, ...]:
    return tuple(Nic(f"mlx5_{i}", kind, gbps, (i,)) for i in range(count))


PRESETS = {
    "hgx-h100-8": (
        "8x H100 SXM on an NVSwitch board, NV18 all-to-all (478 GB/s per direction per GPU)",
        lambda: _nvswitch_node("hgx-h100-8", "NVIDIA H100 80GB HBM3", 18,
                               "shape: tests/unit/data/01_h100-sxm-x8_nvswitch_no-nics.txt (NV18 all-to-all); "
                               "rates: hardware.py"),
    ),
    "hgx-h200-8": (
        "8x H200 SXM on an NVSwitch board, NV18 all-to-all (478 GB/s per direction per GPU)",
        lambda: _nvswitch_node("hgx-h200-8", "NVIDIA H200", 18,
                               "shape: NVIDIA HGX H200 (same board as HGX H100); rates: hardware.py"),
    ),
    "hgx-h100-4": (
        "4x H100 SXM on an HGX 4-GPU board, NV6 direct between every pair, no NVSwitch (478 GB/s per GPU)",
        lambda: _direct_nvlink_node("hgx-h100-4", "NVIDIA H100 80GB HBM3", 4, 6,
                                    "NVIDIA HGX H100 4-GPU: 4 GPUs fully connected by direct NVLink 4, 18 links per "
                                    "GPU = 6 to each of 3 peers (verify); rates: hardware.py"),
    ),
    "hgx-h800-8": (
        "8x H800 SXM on an NVSwitch board, NV8 all-to-all (212.5 GB/s per direction per GPU: NVLink cut to "
        "400 GB/s bidirectional)",
        lambda: _nvswitch_node("hgx-h800-8", "NVIDIA H800", 8,
                               "NVIDIA H800 SXM: NVLink 400 GB/s bidirectional = 8 NVLink 4 links of 50 GB/s "
                               "(verify); board as HGX H100; rates: hardware.py"),
    ),
    "hgx-b200-8": (
        "8x B200 SXM on an NVLink 5 switch board, NV18 all-to-all (900 GB/s per direction per GPU)",
        lambda: _nvswitch_node("hgx-b200-8", "NVIDIA B200", 18,
                               "NVIDIA HGX B200: 8 GPUs, NVLink 5 switch, 1.8 TB/s per GPU; `nvidia-smi topo -m` "
                               "on HGX B200 shows NV18 all-to-all (Vultr hardware overview); rates: hardware.py"),
    ),
    "gb200-nvl72": (
        "72x B200 (GB200 NVL72 rack): 18 trays of 4 GPUs, one NVLink 5 switch domain, NV18 (900 GB/s per direction "
        "per GPU)",
        lambda: _nvl72_rack("gb200-nvl72", "NVIDIA GB200",
                            "NVIDIA GB200 NVL72: 72 GPUs and 36 Grace CPUs in 18 compute trays, 9 NVLink switch "
                            "trays, 1.8 TB/s per GPU, 130 TB/s in all; rates: hardware.py"),
    ),
    "gb300-nvl72": (
        "72x B300 (GB300 NVL72 rack): 18 trays of 4 GPUs, one NVLink 5 switch domain, NV18 (900 GB/s per direction "
        "per GPU)",
        lambda: _nvl72_rack("gb300-nvl72", "NVIDIA GB300",
                            "NVIDIA GB300 NVL72: 72 GPUs and 36 Grace CPUs in 18 compute trays, NVLink 5 at "
                            "1.8 TB/s per GPU, 130 TB/s in all; rates: hardware.py"),
    ),
    "h100-nvl-8": (
        "8x H100 NVL, four NV12-bridged pairs, PCIe Gen5 between pairs (NODE in a socket, SYS across)",
        lambda: _bridged_node("h100-nvl-8", "NVIDIA H100 NVL", [(0, 1), (2, 3), (4, 5), (6, 7)], 12,
                              "NVIDIA H100 NVL product brief: a bridge joins 2 cards, NV12; bluenotebook.io: "
                              "4 of 28 pairs bridged"),
    ),
    "h200-nvl-8": (
        "8x H200 NVL, two 4-GPU bridge domains (NV6 per pair, 478 GB/s per GPU), PCIe Gen5 between",
        lambda: _bridged_node("h200-nvl-8", "NVIDIA H200 NVL", [(0, 1, 2, 3), (4, 5, 6, 7)], 6,
                              "NVIDIA H200 NVL product brief: 4-way bridge, 900 GB/s bidirectional per GPU = 18 "
                              "links shared by 3 peers (verify)"),
    ),
    "dgx-a100-8": (
        "8x A100 SXM on NVSwitch, NV12 all-to-all (300 GB/s per direction), 8x HDR 200G",
        lambda: _nvswitch_node("dgx-a100-8", "NVIDIA A100-SXM4-80GB", 12,
                               "shape: tests/unit/data/02_dgx-a100_mlx5x12.txt (DGX A100, NV12); NICs: HDR "
                               "~24 GB/s (nccl-tests issue 267)",
                               nics=_ib_rails("ib-hdr", 8, 24.0)),
    ),
    "pcie-l40s-8": (
        "8x L40S, PCIe Gen4 only, no NVLink (NODE in a socket, SYS across)",
        lambda: build("pcie-l40s-8", "NVIDIA L40S", _pcie_by_socket(8), numa=_two_sockets(8),
                      source="shape: tests/unit/data/13_l40s-x4_pcie_nics2.txt (L40S, PCIe only); rates: hardware.py"),
    ),
    "h200-x2": (
        "2x H200 SXM, NV18 (a slice of an NVSwitch board): the machine topowise measures on",
        lambda: build("h200-x2", "NVIDIA H200", {(0, 1): NVLINK}, nvlink_counts={(0, 1): 18}, nvswitch=True,
                      numa={0: 0, 1: 0}, source="tests/unit/data/17_h200-x2_nv18.txt (nvidia-smi topo -m, 2026-11-30)"),
    ),
}


def preset_names() -> list[str]:
    return list(PRESETS)


def describe(name: str) -> str:
    return PRESETS[name][0]


def load_preset(name: str) -> Topology:
    if name not in PRESETS:
        raise UsageError(f"unknown topology preset {name!r}; valid presets: {', '.join(PRESETS)}")
    return PRESETS[name][1]()
