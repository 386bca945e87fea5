"""GPU and link specifications: one table, each row with its source (docs/sources.md lists them).

Units: bytes, FLOP/s, GB/s (1e9 B/s) per direction. "verify" marks a figure from a product page
that no measurement here has confirmed yet (see research for what was measured).
"""

from __future__ import annotations

from dataclasses import dataclass

from topowise.errors import UsageError
from topowise.units import GIB, MIB

GB = 1e9


@dataclass(frozen=True)
class GpuSpec:
    name: str
    memory_bytes: float  # bytes; datasheet sizes in GB (1e9) are written as floats
    bf16_dense_flops: float  # datasheet peak, dense (no sparsity)
    nvlink_gen: int  # 0 when the part has no NVLink
    pcie_gen: int
    source: str
    sms: int = 0  # streaming multiprocessors (costmodel/gemm.py: a GEMM's tiles run in waves over them); 0: unknown


# Matched against the name NVML / nvidia-smi reports, longest key first (see `gpu_spec`).
GPUS: dict[str, GpuSpec] = {
    "H200": GpuSpec("H200", 143771 * MIB, 989e12, 4, 5,
                    "memory: nvidia-smi on the 2x H200 machine (143771 MiB); 989 TFLOP/s: NVIDIA H200 datasheet",
                    sms=132),
    "H200 NVL": GpuSpec("H200 NVL", 141 * GB, 835e12, 4, 5,
                        "NVIDIA H200 NVL product text: 141 GB, 1671 TFLOP/s bf16 with sparsity (verify)", sms=132),
    "H100": GpuSpec("H100", 80 * GIB, 989e12, 4, 5, "NVIDIA H100 SXM datasheet: 80 GB, 989 TFLOP/s bf16 dense",
                    sms=132),
    "H100 NVL": GpuSpec("H100 NVL", 94 * GB, 835e12, 4, 5,
                        "NVIDIA H100 NVL product text: 94 GB, 1671 TFLOP/s bf16 with sparsity (verify)", sms=132),
    "A100": GpuSpec("A100", 80 * GIB, 312e12, 3, 4, "NVIDIA A100 datasheet: 80 GB, 312 TFLOP/s bf16", sms=108),
    "L40S": GpuSpec("L40S", 48 * GIB, 362e12, 0, 4,
                    "NVIDIA L40S datasheet: 48 GB, 733 TFLOP/s bf16 with sparsity (verify)", sms=142),
    "RTX 4090": GpuSpec("RTX 4090", 24 * GIB, 165e12, 0, 4,
                        "NVIDIA Ada whitepaper: 165 TFLOP/s bf16 dense with fp32 accumulate (verify)", sms=128),
    "RTX A6000": GpuSpec("RTX A6000", 48 * GIB, 155e12, 3, 4,
                         "NVIDIA RTX A6000 datasheet: 48 GB, 309.7 TFLOP/s with sparsity (verify)", sms=84),
    "V100": GpuSpec("V100", 32 * GIB, 125e12, 2, 3,
                    "NVIDIA V100 datasheet: 125 TFLOP/s fp16 tensor; no bf16 (used as its 16-bit rate)", sms=80),
    "GB200": GpuSpec("GB200", 186 * GB, 2500e12, 5, 6,
                     "NVIDIA GB200 NVL72 product text: 186 GB per GPU, 5 PFLOP/s bf16 sparse (verify)"),
}

# Per NVLink link, GB/s per direction, by generation.
NVLINK_GBPS_PER_LINK: dict[int, float] = {
    2: 25.0,  # V100: 6 links x 25 GB/s = 150 GB/s per direction (NVIDIA V100 whitepaper)
    3: 25.0,  # A100: 12 links x 25 = 300 GB/s (NVIDIA A100 datasheet: NVLink 600 GB/s bidirectional)
    4: 26.5625,  # H100/H200: 18 x 26.5625 = 478 GB/s (`nvidia-smi nvlink -s` on an H200, research run1)
    5: 50.0,  # B200/GB200: 18 x 50 = 900 GB/s per direction (NVIDIA NVLink 5 product text, verify)
}

# PCIe x16, GB/s per direction: 16 lanes x GT/s x 128/130 / 8 for Gen3-5 (8, 16, 32 GT/s, rounded);
# Gen6: 64 GT/s in FLIT mode, 242 payload bytes per 256-byte FLIT: 128 x 242/256 = 121.
PCIE_X16_GBPS: dict[int, float] = {3: 15.75, 4: 31.5, 5: 63.0, 6: 121.0}

# --- Networks between nodes ------------------------------------------------------------------------
# GB/s per NIC per direction. `busbw_gbps` is what NCCL reaches on one NIC (nccl-tests bus bandwidth)
# where a measurement is published, else the line rate derated as NDR's measured/line (48/50 = 0.96).
# `latency_us` is added to every network step of NCCL's ring and tree beyond NCCL's own tuner
# latencies (costmodel/network.py), which describe an RDMA fabric: 0 for InfiniBand and RoCE.
# Transports: "ib" and "roce" are RDMA (GPUDirect); "socket" is NCCL's TCP transport (net_socket.cc),
# which every Ethernet without RoCE uses. Sources: docs/sources.md, "Networks".

RDMA_DERATE = 48.0 / 50.0  # NDR: 46-49 GB/s measured per 400G NIC (nccl-tests issue 290) over 50 GB/s line

# NCCL's socket transport (src/transport/net_socket.cc, NCCL 2.28; NCCL user guide, env.html):
# NCCL_SOCKET_NTHREADS default 0 (the proxy thread moves the data itself) and NCCL_NSOCKS_PERTHREAD
# default 1 on a generic NIC; a message is cut into tasks of at least NCCL_SOCKET_MIN_TASKSIZE
# (64 KiB) spread over the sockets, and a Simple-protocol step is NCCL_BUFFSIZE / NCCL_STEPS
# (4 MiB / 8 = 512 KiB), so at most 8 sockets of a connection carry one step at once; at most 64
# sockets and 16 threads. NCCL runs 2 channels (connections) per NIC (NVIDIA/nccl issue 438).
SOCKET_MAX_SOCKETS = 64
SOCKET_MAX_THREADS = 16
SOCKET_STEP_BYTES = 4 * MIB // 8
SOCKET_MIN_TASK_BYTES = 64 * 1024
SOCKET_CHANNELS_PER_NIC = 2
# GB/s one socket thread moves (one TCP stream, host-staged copy): 2.06 GB/s busbw on one ring over
# 32 Gb/s TCP (NVIDIA/nccl issue 209, NCCL 2.3.7); 100 Gb/s TCP clusters reach 4-6 GB/s busbw
# (NVIDIA/nccl issue 450), i.e. ~2 streams' worth.
SOCKET_THREAD_GBPS = 2.0
# TCP payload over Ethernet at MTU 1500: 1448 payload bytes (1500 - 20 IP - 20 TCP - 12 timestamp
# option) per 1538 on the wire (+ 14 header, 4 FCS, 8 preamble, 12 inter-frame gap; IEEE 802.3).
TCP_PAYLOAD_FRACTION = 1448 / 1538
# Each network step of NCCL over sockets, beyond the tuner's RDMA latency: an 8-byte broadcast
# between 2 nodes over NCCL's socket transport took 45.8 us out of place / 38.2 us in place
# (nccl-tests issue 82, NCCL 2.9.6); NCCL's tuner predicts 12.0 us for it (ring LL, 2 network
# steps), so (42.0 - 12.0) / 2 = 15 us per network step.
SOCKET_LATENCY_US = 15.0

# Distance (docs/networks.md): light in silica fibre, group index ~1.47: 1 km / (c / 1.47) = 4.9 us,
# taken as 5 us/km (5 ns/m). A switch hop: InfiniBand, NVIDIA Quantum QM8790 product brief
# "sub-130ns" port-to-port; Ethernet, Cisco Nexus 93180YC-FX datasheet "latency of less than 1
# microsecond" (an upper bound for a cut-through data-center switch).
FIBRE_US_PER_M = 5.0e-3
SWITCH_HOP_US = {"ib": 0.13, "roce": 1.0, "socket": 1.0}


@dataclass(frozen=True)
class NetworkKind:
    """One row of the network catalog: a NIC type as bought."""

    name: str
    label: str
    line_gbps: float  # line rate, GB/s per direction (Gb/s / 8)
    busbw_gbps: float  # what NCCL reaches per NIC (nccl-tests busbw), GB/s
    latency_us: float  # added per network step beyond NCCL's tuner latency (0 for RDMA)
    transport: str  # "ib", "roce" or "socket"
    source: str


def socket_busbw_gbps(line_gbps: float, threads: int = 0, socks_per_thread: int = 1,
                      channels: int = SOCKET_CHANNELS_PER_NIC) -> float:
    """GB/s NCCL's socket transport moves over one NIC: the TCP payload rate of the line, or what
    its connections' threads move, whichever is less.

    Each channel's connection has max(1, threads) threads (0 threads: the proxy thread moves the
    data) and threads x socks sockets, of which at most step/min-task (8) carry a step at once; a
    thread moves SOCKET_THREAD_GBPS, and a socket no more than its thread.
    """
    threads = min(max(0, threads), SOCKET_MAX_THREADS)
    movers = max(1, threads)
    sockets = max(1, min(movers * max(1, socks_per_thread), SOCKET_MAX_SOCKETS,
                         SOCKET_STEP_BYTES // SOCKET_MIN_TASK_BYTES))
    per_channel = min(movers, sockets) * SOCKET_THREAD_GBPS
    return min(line_gbps * TCP_PAYLOAD_FRACTION, channels * per_channel)


def _eth(gbit: int) -> NetworkKind:
    line = gbit / 8
    return NetworkKind(f"eth-{gbit}", f"Ethernet {gbit}G (TCP sockets)", line, round(socket_busbw_gbps(line), 4),
                       SOCKET_LATENCY_US, "socket",
                       "NCCL socket transport model: min(line x TCP payload 1448/1538, 2 channels x 2.0 GB/s)")


NETWORKS: dict[str, NetworkKind] = {
    "ib-hdr": NetworkKind("ib-hdr", "InfiniBand HDR 200G", 25.0, 24.0, 0.0, "ib",
                          "~24 GB/s busbw per NIC measured (NVIDIA/nccl-tests issue 267)"),
    "ib-ndr": NetworkKind("ib-ndr", "InfiniBand NDR 400G", 50.0, 48.0, 0.0, "ib",
                          "46-49 GB/s busbw per NIC measured (NVIDIA/nccl-tests issue 290)"),
    "ib-xdr": NetworkKind("ib-xdr", "InfiniBand XDR 800G", 100.0, round(100.0 * RDMA_DERATE, 4), 0.0, "ib",
                          "line rate 800 Gb/s (ConnectX-8 / Quantum-X800), derated 0.96 as NDR; no published "
                          "per-NIC nccl-tests figure (verify)"),
    "roce-100": NetworkKind("roce-100", "RoCE 100G", 12.5, 12.0, 0.0, "roce",
                            "12.2 GB/s busbw on one 100 Gb/s RDMA NIC, 'as good as you can get' "
                            "(NVIDIA/nccl-tests issue 29, maintainer)"),
    "roce-200": NetworkKind("roce-200", "RoCE 200G", 25.0, 24.0, 0.0, "roce",
                            "200 Gb/s line, as HDR's measured 24 GB/s (nccl-tests issue 267; verify on RoCE)"),
    "roce-400": NetworkKind("roce-400", "RoCE 400G", 50.0, 48.0, 0.0, "roce",
                            "400 Gb/s line, as NDR's measured 48 GB/s (nccl-tests issue 290; verify on RoCE)"),
    "roce-800": NetworkKind("roce-800", "RoCE 800G", 100.0, round(100.0 * RDMA_DERATE, 4), 0.0, "roce",
                            "800 Gb/s line derated 0.96 as NDR (verify)"),
    **{f"eth-{g}": _eth(g) for g in (1, 10, 25, 50, 100, 200, 400, 800)},
}

# Network, GB/s per NIC per direction as NCCL reaches it (the catalog's busbw column).
NIC_GBPS: dict[str, float] = {name: kind.busbw_gbps for name, kind in NETWORKS.items()}


def gpu_spec(name: str) -> GpuSpec:
    """The spec whose key appears in `name` ("NVIDIA H100 80GB HBM3" -> H100), longest key first."""
    upper = name.upper()
    for key in sorted(GPUS, key=len, reverse=True):
        if key.upper() in upper:
            return GPUS[key]
    # An unknown part: no peak to predict with; callers show the name and ask for --profile.
    return GpuSpec(name, 0, 0.0, 0, 4, "unknown GPU: no datasheet row")


def known_gpu_names() -> str:
    """The GPU models the table knows, for messages: "H200, H200 NVL, H100, ..."."""
    return ", ".join(GPUS)


def check_gpu_name(name: str, flag: str = "--gpu-name") -> GpuSpec:
    """The row of a GPU model the user named; an unknown name is refused rather than predicted as 0 GB."""
    spec = gpu_spec(name)
    if not spec.memory_bytes:
        raise UsageError(f"{flag} {name!r}: not a GPU model topowise knows; give one of {known_gpu_names()} "
                         "(matched inside the name, e.g. 'NVIDIA H100 80GB HBM3' is H100)")
    return spec


def nvlink_gbps(gen: int, links: int) -> float:
    return NVLINK_GBPS_PER_LINK.get(gen, NVLINK_GBPS_PER_LINK[4]) * links


def pcie_gbps(gen: int) -> float:
    return PCIE_X16_GBPS.get(gen, PCIE_X16_GBPS[4])


# HBM (or GDDR) bandwidth, bytes/s, datasheet; the cost model's memory-bound terms (optimizer step).
HBM_BYTES_PER_S: dict[str, float] = {
    "H200": 4.8e12,  # NVIDIA H200 datasheet: 4.8 TB/s
    "H200 NVL": 4.8e12,  # NVIDIA H200 NVL product text: 4.8 TB/s (verify)
    "H100": 3.35e12,  # NVIDIA H100 SXM datasheet: 3.35 TB/s
    "H100 NVL": 3.9e12,  # NVIDIA H100 NVL product text: 3.9 TB/s (verify)
    "A100": 2.0e12,  # NVIDIA A100 80GB SXM datasheet: 2,039 GB/s
    "L40S": 0.864e12,  # NVIDIA L40S datasheet: 864 GB/s
    "RTX 4090": 1.008e12,  # NVIDIA Ada whitepaper: 1,008 GB/s (verify)
    "RTX A6000": 0.768e12,  # NVIDIA RTX A6000 datasheet: 768 GB/s
    "V100": 0.9e12,  # NVIDIA V100 SXM2 datasheet: 900 GB/s
    "GB200": 8.0e12,  # NVIDIA GB200 NVL72 product text: 8 TB/s per GPU (verify)
}


def hbm_bytes_per_s(name: str) -> float:
    """Memory bandwidth of the part named (same matching as `gpu_spec`); 1 TB/s for an unknown part."""
    upper = name.upper()
    for key in sorted(HBM_BYTES_PER_S, key=len, reverse=True):
        if key.upper() in upper:
            return HBM_BYTES_PER_S[key]
    return 1.0e12  # unknown part: a round figure, to be replaced by calibration
