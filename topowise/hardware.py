"""GPU and link specifications: one table, each row with its source (docs/sources.md lists them).

Units: bytes, FLOP/s, GB/s (1e9 B/s) per direction. "verify" marks a figure from a product page
that no measurement here has confirmed yet (see research for what was measured).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

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
    tdp_w: float = 0.0  # rated board power (the default power limit), W; 0: unknown
    form: str = ""  # "SXM" (baseboard, NVSwitch or direct NVLink), "PCIe" (a card), "superchip" (Grace + GPUs)
    nvlink_gbps: float = 0.0  # datasheet NVLink per GPU, GB/s per direction (half the bidirectional figure); 0: none
    power_limit_w: float = 0.0  # the limit the GPU runs under, W (--power-limit); 0: the rated tdp_w
    rated_bf16_dense_flops: float = 0.0  # the datasheet peak when a power limit lowered bf16_dense_flops; 0: the same
    # datasheet fp8 tensor-core peak, dense (half the sparse figure), FLOP/s; 0: the part has no fp8 (Ampere, Volta)
    fp8_dense_flops: float = 0.0
    rated_fp8_dense_flops: float = 0.0  # as rated_bf16_dense_flops, for fp8


# Dense fp8 peaks, FLOP/s: the datasheet's fp8 tensor figure "with sparsity" halved (docs/sources.md, "GPU catalogue",
# fp8 rows); parts left out have no fp8 tensor cores (A100, A100 40GB, RTX A6000, V100).
FP8_DENSE_FLOPS: dict[str, float] = {
    "H200": 1979e12,  # NVIDIA H200 datasheet: FP8 3,958 TFLOPS with sparsity
    "H200 NVL": 1671e12,  # NVIDIA H200 NVL product text: FP8 3,341 TFLOPS with sparsity (verify)
    "H100": 1979e12,  # NVIDIA H100 SXM datasheet: FP8 3,958 TFLOPS with sparsity
    "H100 NVL": 1671e12,  # NVIDIA H100 NVL product text: FP8 3,341 TFLOPS with sparsity (verify)
    "H100 PCIe": 1513e12,  # NVIDIA H100 PCIe datasheet: FP8 3,026 TFLOPS with sparsity
    "H100 96GB": 1979e12,  # GH100 SXM at 700 W rated, as H100 SXM (verify)
    "H800": 1979e12,  # NVIDIA H800 SXM datasheet: FP8 as H100 SXM, 3,958 with sparsity (verify)
    "H20": 296e12,  # NVIDIA H20 product brief as quoted: FP8 296 TFLOPS dense (verify)
    "L40S": 733e12,  # NVIDIA L40S datasheet: FP8 1,466 TFLOPS with sparsity
    "L4": 242.5e12,  # NVIDIA L4 datasheet: FP8 485 TFLOPS with sparsity
    "RTX 4090": 330e12,  # NVIDIA Ada whitepaper: FP8 330.3 TFLOPS dense with fp32 accumulate (verify)
    "B200": 4500e12,  # NVIDIA HGX B200: 72 PFLOPS fp8 with sparsity for 8 GPUs (pytorch/ao roofline_utils: 4.5e15)
    "B300": 4500e12,  # NVIDIA HGX B300: 72 PFLOPS fp8 with sparsity for 8 GPUs (verify)
    "GB200": 5000e12,  # NVIDIA GB200 NVL72: 720 PFLOPS fp8 with sparsity for 72 GPUs (verify)
    "GB300": 5000e12,  # NVIDIA GB300 NVL72: 720 PFLOPS fp8 with sparsity for 72 GPUs (verify)
}


# Matched against the name NVML / nvidia-smi reports, longest key first (see `gpu_spec`). Figures are the
# vendor's datasheet or product page (docs/sources.md, "GPU catalogue", has the URL of each row); "verify"
# marks a figure read on a secondary page that quotes the vendor. Dense bf16 is half the sparse figure
# where a page gives only the sparse one. nvlink_gbps is the datasheet's bidirectional figure halved.
GPUS: dict[str, GpuSpec] = {
    "H200": GpuSpec("H200", 143771 * MIB, 989e12, 4, 5,
                    "memory: nvidia-smi on the 2x H200 machine (143771 MiB); 989 TFLOP/s: NVIDIA H200 datasheet",
                    sms=132, tdp_w=700, form="SXM", nvlink_gbps=450),
    "H200 NVL": GpuSpec("H200 NVL", 141 * GB, 835e12, 4, 5,
                        "NVIDIA H200 NVL product text: 141 GB, 1671 TFLOP/s bf16 with sparsity (verify)", sms=132,
                        tdp_w=600, form="PCIe", nvlink_gbps=450),
    "H100": GpuSpec("H100", 80 * GIB, 989e12, 4, 5, "NVIDIA H100 SXM datasheet: 80 GB, 989 TFLOP/s bf16 dense",
                    sms=132, tdp_w=700, form="SXM", nvlink_gbps=450),
    "H100 NVL": GpuSpec("H100 NVL", 94 * GB, 835e12, 4, 5,
                        "NVIDIA H100 NVL product text: 94 GB, 1671 TFLOP/s bf16 with sparsity (verify)", sms=132,
                        tdp_w=400, form="PCIe", nvlink_gbps=300),
    "H100 PCIe": GpuSpec("H100 PCIe", 80 * GIB, 756e12, 4, 5,
                         "NVIDIA H100 PCIe datasheet: 80 GB HBM2e, 1513 TFLOP/s bf16 with sparsity, 350 W, NVLink "
                         "bridge 600 GB/s; 114 SMs (NVIDIA H100 MIG docs)", sms=114, tdp_w=350, form="PCIe",
                         nvlink_gbps=300),
    # The H100 of Meta's Grand Teton hosts (torchtitan benchmarks/asyncTP_llama3_h100_2025-06: "96GB HBM2e with
    # 2.4 TB/sec", run at a 500 W limit); 94 GiB usable, 2.41 TB/s (arXiv 2604.11391, the same part measured).
    "H100 96GB": GpuSpec("H100 96GB", 94 * GIB, 989e12, 4, 5,
                         "torchtitan asyncTP_llama3_h100_2025-06: 96GB HBM2e, 2.4 TB/s; arXiv 2604.11391: 94 GiB; "
                         "GH100 SXM at 700 W rated: 989 TFLOP/s as H100 SXM (verify)", sms=132, tdp_w=700,
                         form="SXM", nvlink_gbps=450),
    "H800": GpuSpec("H800", 80 * GIB, 989e12, 4, 5,
                    "NVIDIA H800 SXM datasheet: 80 GB HBM3, bf16 as H100 SXM (1979 TFLOP/s sparse), NVLink "
                    "400 GB/s bidirectional (verify)", sms=132, tdp_w=700, form="SXM", nvlink_gbps=200),
    "H20": GpuSpec("H20", 96 * GB, 148e12, 4, 5,
                   "NVIDIA H20 product brief as quoted: 96 GB HBM3, 4.0 TB/s, 148 TFLOP/s bf16 dense, NVLink "
                   "900 GB/s, 400 W (verify)", tdp_w=400, form="SXM", nvlink_gbps=450),
    "A100": GpuSpec("A100", 80 * GIB, 312e12, 3, 4, "NVIDIA A100 datasheet: 80 GB, 312 TFLOP/s bf16", sms=108,
                    tdp_w=400, form="SXM", nvlink_gbps=300),
    # "NVIDIA A100-SXM4-40GB" / "A100-PCIE-40GB": every word of the key must appear (see `gpu_spec`)
    "A100 40GB": GpuSpec("A100 40GB", 40 * GIB, 312e12, 3, 4,
                         "NVIDIA A100 datasheet: 40 GB HBM2, 1555 GB/s, 312 TFLOP/s bf16, 400 W SXM", sms=108,
                         tdp_w=400, form="SXM", nvlink_gbps=300),
    "L40S": GpuSpec("L40S", 48 * GIB, 362e12, 0, 4,
                    "NVIDIA L40S datasheet: 48 GB, 733 TFLOP/s bf16 with sparsity (verify)", sms=142,
                    tdp_w=350, form="PCIe"),
    "L4": GpuSpec("L4", 24 * GIB, 121e12, 0, 4,
                  "NVIDIA L4 datasheet: 24 GB GDDR6, 300 GB/s, 242 TFLOP/s bf16 with sparsity, 72 W (verify)",
                  tdp_w=72, form="PCIe"),
    "RTX 4090": GpuSpec("RTX 4090", 24 * GIB, 165e12, 0, 4,
                        "NVIDIA Ada whitepaper: 165 TFLOP/s bf16 dense with fp32 accumulate (verify)", sms=128),
    "RTX A6000": GpuSpec("RTX A6000", 48 * GIB, 155e12, 3, 4,
                         "NVIDIA RTX A6000 datasheet: 48 GB, 309.7 TFLOP/s with sparsity (verify)", sms=84),
    "V100": GpuSpec("V100", 32 * GIB, 125e12, 2, 3,
                    "NVIDIA V100 datasheet: 125 TFLOP/s fp16 tensor; no bf16 (used as its 16-bit rate)", sms=80),
    "B200": GpuSpec("B200", 180 * GB, 2250e12, 5, 6,
                    "NVIDIA HGX B200: 1.4 TB for 8 GPUs, 36 PFLOP/s fp16/bf16 sparse for 8 (2.25 dense per GPU), "
                    "NVLink 5 1.8 TB/s per GPU, 1000 W (MLPerf v6.0 system B200-SXM-180GB, TGP 1000W); 148 SMs "
                    "(cudaGetDeviceProperties, pytorch/ao PR 4002)", sms=148, tdp_w=1000, form="SXM",
                    nvlink_gbps=900),
    "B300": GpuSpec("B300", 288 * GB, 2250e12, 5, 6,
                    "NVIDIA HGX B300: up to 2.3 TB for 8 GPUs (288 GB), 36 PFLOP/s fp16/bf16 sparse for 8, NVLink 5 "
                    "1.8 TB/s per GPU, 1100 W (verify)", tdp_w=1100, form="SXM", nvlink_gbps=900),
    "GB200": GpuSpec("GB200", 186 * GB, 2500e12, 5, 6,
                     "NVIDIA GB200 NVL72 product text: 186 GB per GPU, 5 PFLOP/s bf16 sparse (verify)",
                     tdp_w=1200, form="superchip", nvlink_gbps=900),
    "GB300": GpuSpec("GB300", 288 * GB, 2500e12, 5, 6,
                     "NVIDIA GB300 NVL72: 72 GPUs, up to 20.7 TB HBM3e (288 GB each), 360 PFLOP/s fp16/bf16 sparse "
                     "(2.5 dense per GPU), NVLink 5 1.8 TB/s per GPU, 1400 W (verify)", tdp_w=1400,
                     form="superchip", nvlink_gbps=900),
}
GPUS = {key: replace(spec, fp8_dense_flops=FP8_DENSE_FLOPS.get(key, 0.0)) for key, spec in GPUS.items()}
# Left out, no datasheet figure found: RTX PRO 6000 Blackwell (96 GB GDDR7, 600 W, 188 SMs are published; its
# dense bf16 tensor rate is not), so it is predicted only with a calibrated --profile.

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
    """The spec whose key `name` names ("NVIDIA H100 80GB HBM3" -> H100, "NVIDIA A100-SXM4-40GB" -> A100 40GB),
    longest key first."""
    for key in sorted(GPUS, key=len, reverse=True):
        if names_part(name, key):
            return GPUS[key]
    # An unknown part: no peak to predict with; callers show the name and ask for --profile.
    return GpuSpec(name, 0, 0.0, 0, 4, "unknown GPU: no datasheet row")


def names_part(name: str, key: str) -> bool:
    """Does a reported GPU name name the catalogue key? Every word of the key appears in it, not followed by
    a digit: "L4" is not "L40S", "H20" not "H200", "A100 40GB" is "NVIDIA A100-SXM4-40GB"."""
    upper = name.upper()
    return all(re.search(re.escape(word) + r"(?!\d)", upper) for word in key.upper().split())


def same_silicon(a: GpuSpec, b: GpuSpec) -> bool:
    """The same GPU but for its memory size ("A100" and "A100 40GB"): what nccl-tests' comparison asks,
    where the memory does not matter and the links do."""
    def base(spec: GpuSpec) -> str:
        return " ".join(w for w in spec.name.split() if not re.fullmatch(r"\d+GB", w))
    return base(a) == base(b)


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
    "H100 PCIe": 2.0e12,  # NVIDIA H100 PCIe datasheet: 2 TB/s
    "H100 96GB": 2.4e12,  # torchtitan asyncTP_llama3_h100_2025-06: 2.4 TB/s (arXiv 2604.11391: 2.41)
    "H800": 3.35e12,  # NVIDIA H800 SXM datasheet: 3.35 TB/s, as H100 SXM (verify)
    "H20": 4.0e12,  # NVIDIA H20 product brief as quoted: 4.0 TB/s (verify)
    "A100 40GB": 1.555e12,  # NVIDIA A100 40GB SXM datasheet: 1,555 GB/s
    "L4": 0.3e12,  # NVIDIA L4 datasheet: 300 GB/s
    "B200": 8.0e12,  # NVIDIA HGX B200: 64 TB/s for 8 GPUs (the bus read back gives 7.68: pytorch/ao PR 4002)
    "B300": 8.0e12,  # NVIDIA HGX B300: 8 TB/s per GPU (verify)
    "GB300": 8.0e12,  # NVIDIA GB300 NVL72: 576 TB/s for 72 GPUs (verify)
}


def hbm_bytes_per_s(name: str) -> float:
    """Memory bandwidth of the part named (same matching as `gpu_spec`); 1 TB/s for an unknown part."""
    for key in sorted(HBM_BYTES_PER_S, key=len, reverse=True):
        if names_part(name, key):
            return HBM_BYTES_PER_S[key]
    return 1.0e12  # unknown part: a round figure, to be replaced by calibration


# --- Power limit and the clock it allows -------------------------------------------------------------
# Under a power limit the GPU lowers its SM clock until the board draws no more than the limit (NVML
# clocks_event_reasons "SW power cap"). Dynamic power is C V^2 f and across the DVFS range the voltage
# rises with the clock, so power goes as f^3 and the clock as the cube root of power (docs/sources.md,
# "Power limit"). The datasheet peak and the calibrated efficiency behind every prediction were
# measured at the rated limit (the 2x H200 machine here ran its steps at 1484-1959 MHz of 1980 under
# 700 W: research/2026-12-02-h200x1/clocks), so the rated limit is the reference: clock ratio 1 there.
POWER_CLOCK_EXPONENT = 1.0 / 3.0
# The lowest limit nvidia-smi -pl takes (NVML's minimum enforced limit), W, by catalogue key, where a document gives
# it: B200, NVIDIA DGX B200 User Guide, "Managing Power Capping" (Redfish PowerLimitWatts AllowableMin 200,
# AllowableMax 1000); H100 and H200 (verify): an earlier edition of that page shows AllowableMin 200 for a 700 W
# board, and arXiv 2604.11391 capped H100 (HBM2e) and H200 from 200 W up (docs/sources.md, "Power limit").
MIN_POWER_LIMIT_W: dict[str, float] = {"H100": 200.0, "H100 96GB": 200.0, "H200": 200.0, "B200": 200.0}
# Elsewhere a fifth of the rated power: the lowest share those documents give (B200: 200 of 1000 W); below it no
# board of the catalogue is known to go, and the cube law would be stretched past any measured cap.
MIN_POWER_FRACTION = 0.2


def clock_fraction(spec: GpuSpec, limit_w: float) -> float:
    """The SM clock under `limit_w`, as a fraction of the clock at the part's rated limit (<= 1)."""
    if limit_w <= 0 or not spec.tdp_w or limit_w >= spec.tdp_w:
        return 1.0
    return (limit_w / spec.tdp_w) ** POWER_CLOCK_EXPONENT


def min_power_limit_w(spec: GpuSpec) -> float:
    """The lowest power limit the part takes, W: MIN_POWER_LIMIT_W where documented, else MIN_POWER_FRACTION x rated."""
    return MIN_POWER_LIMIT_W.get(spec.name, MIN_POWER_FRACTION * spec.tdp_w)


def check_power_limit(spec: GpuSpec, limit_w: float, flag: str = "--power-limit") -> None:
    """Refuse a limit the part cannot be set to: none at all, above its rated power, below its minimum, or an
    unknown rating."""
    if not limit_w > 0:
        raise UsageError(f"{flag} {limit_w:g}: give the GPU's power limit in watts, above 0")
    if not spec.tdp_w:
        raise UsageError(f"{flag}: the rated power of {spec.name!r} is not in the catalogue, so a limit cannot be "
                         f"priced; GPUs with a rating: {', '.join(k for k, v in GPUS.items() if v.tdp_w)}")
    if limit_w > spec.tdp_w:
        raise UsageError(f"{flag} {limit_w:g}: above the {spec.name} rated {spec.tdp_w:g} W, the most nvidia-smi "
                         "-pl accepts")
    floor = min_power_limit_w(spec)
    if limit_w < floor:
        why = ("the least nvidia-smi -pl accepts" if spec.name in MIN_POWER_LIMIT_W else
               f"a fifth of its rated {spec.tdp_w:g} W; its own minimum is not in the catalogue")
        raise UsageError(f"{flag} {limit_w:g}: below the {spec.name}'s minimum of {floor:g} W ({why}); give "
                         f"{floor:g} to {spec.tdp_w:g} W")


def at_power_limit(spec: GpuSpec, limit_w: float) -> GpuSpec:
    """The row as run under `limit_w` watts: its bf16 and fp8 rates scaled by the clock the limit allows; 0: the row."""
    if not limit_w:
        return spec
    rated = spec.rated_bf16_dense_flops or spec.bf16_dense_flops
    rated_fp8 = spec.rated_fp8_dense_flops or spec.fp8_dense_flops
    clock = clock_fraction(spec, limit_w)
    return replace(spec, bf16_dense_flops=rated * clock, power_limit_w=limit_w, rated_bf16_dense_flops=rated,
                   fp8_dense_flops=rated_fp8 * clock, rated_fp8_dense_flops=rated_fp8)
