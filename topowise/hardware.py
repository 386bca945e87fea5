"""GPU and link specifications: one table, each row with its source (docs/sources.md lists them).

Units: bytes, FLOP/s, GB/s (1e9 B/s) per direction. "verify" marks a figure from a product page
that no measurement here has confirmed yet (see docs/results for what was measured).
"""

from __future__ import annotations

from dataclasses import dataclass

from topowise.errors import UsageError
from topowise.units import GIB, MIB

GB = 1e9


@dataclass(frozen=True)
class GpuSpec:
    name: str
    memory_bytes: int
    bf16_dense_flops: float  # datasheet peak, dense (no sparsity)
    nvlink_gen: int  # 0 when the part has no NVLink
    pcie_gen: int
    source: str


# Matched against the name NVML / nvidia-smi reports, longest key first (see `gpu_spec`).
GPUS: dict[str, GpuSpec] = {
    "H200": GpuSpec("H200", 143771 * MIB, 989e12, 4, 5,
                    "memory: nvidia-smi on the 2x H200 machine (143771 MiB); 989 TFLOP/s: NVIDIA H200 datasheet"),
    "H200 NVL": GpuSpec("H200 NVL", 141 * GB, 835e12, 4, 5,
                        "NVIDIA H200 NVL product text: 141 GB, 1671 TFLOP/s bf16 with sparsity (verify)"),
    "H100": GpuSpec("H100", 80 * GIB, 989e12, 4, 5, "NVIDIA H100 SXM datasheet: 80 GB, 989 TFLOP/s bf16 dense"),
    "H100 NVL": GpuSpec("H100 NVL", 94 * GB, 835e12, 4, 5,
                        "NVIDIA H100 NVL product text: 94 GB, 1671 TFLOP/s bf16 with sparsity (verify)"),
    "A100": GpuSpec("A100", 80 * GIB, 312e12, 3, 4, "NVIDIA A100 datasheet: 80 GB, 312 TFLOP/s bf16"),
    "L40S": GpuSpec("L40S", 48 * GIB, 362e12, 0, 4,
                    "NVIDIA L40S datasheet: 48 GB, 733 TFLOP/s bf16 with sparsity (verify)"),
    "RTX 4090": GpuSpec("RTX 4090", 24 * GIB, 165e12, 0, 4,
                        "NVIDIA Ada whitepaper: 165 TFLOP/s bf16 dense with fp32 accumulate (verify)"),
    "RTX A6000": GpuSpec("RTX A6000", 48 * GIB, 155e12, 3, 4,
                         "NVIDIA RTX A6000 datasheet: 48 GB, 309.7 TFLOP/s with sparsity (verify)"),
    "V100": GpuSpec("V100", 32 * GIB, 125e12, 2, 3,
                    "NVIDIA V100 datasheet: 125 TFLOP/s fp16 tensor; no bf16 (used as its 16-bit rate)"),
    "GB200": GpuSpec("GB200", 186 * GB, 2500e12, 5, 6,
                     "NVIDIA GB200 NVL72 product text: 186 GB per GPU, 5 PFLOP/s bf16 sparse (verify)"),
}

# Per NVLink link, GB/s per direction, by generation.
NVLINK_GBPS_PER_LINK: dict[int, float] = {
    2: 25.0,  # V100: 6 links x 25 GB/s = 150 GB/s per direction (NVIDIA V100 whitepaper)
    3: 25.0,  # A100: 12 links x 25 = 300 GB/s (NVIDIA A100 datasheet: NVLink 600 GB/s bidirectional)
    4: 26.5625,  # H100/H200: 18 x 26.5625 = 478 GB/s (`nvidia-smi nvlink -s` on an H200, docs/results run1)
    5: 50.0,  # B200/GB200: 18 x 50 = 900 GB/s per direction (NVIDIA NVLink 5 product text, verify)
}

# PCIe x16, GB/s per direction: 16 lanes x GT/s x 128/130 / 8 for Gen3-5 (8, 16, 32 GT/s, rounded);
# Gen6: 64 GT/s in FLIT mode, 242 payload bytes per 256-byte FLIT: 128 x 242/256 = 121.
PCIE_X16_GBPS: dict[int, float] = {3: 15.75, 4: 31.5, 5: 63.0, 6: 121.0}

# Network, GB/s per NIC per direction: nccl-tests busbw measured per NIC where published.
NIC_GBPS: dict[str, float] = {
    "ib-ndr": 48.0,  # 400G NDR: 46-49 GB/s measured per NIC (NVIDIA/nccl-tests issue 290)
    "ib-hdr": 24.0,  # 200G HDR: ~24 GB/s (NVIDIA/nccl-tests issue 267)
    "roce-400": 48.0,  # 400G line rate = 50 GB/s; taken as NDR's measured figure (verify)
    "roce-200": 24.0,  # 200G, as HDR (verify)
    "eth-100": 12.0,  # 100G: ~12 GB/s (NVIDIA/nccl-tests issue 119)
}


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
