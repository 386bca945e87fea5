"""Everything `topowise doctor` read from a machine, as one frozen record that round-trips through JSON.

A field that could not be read is None (no permission, an older driver, no such part); the checks
say "could not read" rather than guess. `doctor --save-snapshot FILE` writes this record and
`doctor --snapshot FILE` runs every check on it, so a bug report carries the machine with it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from topowise.errors import UsageError

FORMAT = "topowise-doctor-snapshot"
VERSION = 1


@dataclass(frozen=True)
class GpuState:
    """One GPU as NVML (nvidia-ml-py) and sysfs describe it; NVML call names in the comments."""

    index: int
    name: str
    pci_bus_id: str = ""  # nvmlDeviceGetPciInfo().busId, sysfs form "0000:1b:00.0"
    pcie_gen: int | None = None  # nvmlDeviceGetCurrPcieLinkGeneration
    pcie_width: int | None = None  # nvmlDeviceGetCurrPcieLinkWidth
    pcie_max_gen: int | None = None  # nvmlDeviceGetMaxPcieLinkGeneration (this GPU in this slot)
    pcie_max_width: int | None = None  # nvmlDeviceGetMaxPcieLinkWidth
    pcie_gpu_max_gen: int | None = None  # nvmlDeviceGetGpuMaxPcieLinkGeneration (the GPU alone)
    nvlink_up: tuple[bool, ...] = ()  # nvmlDeviceGetNvLinkState per link the part has
    clock_event_reasons: int | None = None  # nvmlDeviceGetCurrentClocksEventReasons (bitmask, nvml.h)
    sm_clock_mhz: int | None = None  # nvmlDeviceGetClockInfo(NVML_CLOCK_SM)
    sm_clock_max_mhz: int | None = None  # nvmlDeviceGetMaxClockInfo(NVML_CLOCK_SM)
    temperature_c: int | None = None  # nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)
    slowdown_temperature_c: int | None = None  # nvmlDeviceGetTemperatureThreshold(..._SLOWDOWN)
    power_w: float | None = None  # nvmlDeviceGetPowerUsage (mW / 1000)
    power_limit_w: float | None = None  # nvmlDeviceGetEnforcedPowerLimit
    power_default_limit_w: float | None = None  # nvmlDeviceGetPowerManagementDefaultLimit
    ecc_uncorrected_volatile: int | None = None  # nvmlDeviceGetTotalEccErrors(UNCORRECTED, VOLATILE_ECC)
    retired_pages_pending: bool | None = None  # nvmlDeviceGetRetiredPagesPendingStatus
    remapped_rows_pending: bool | None = None  # nvmlDeviceGetRemappedRows()[2]
    remapped_rows_failure: bool | None = None  # nvmlDeviceGetRemappedRows()[3]
    persistence_mode: bool | None = None  # nvmlDeviceGetPersistenceMode
    mig_mode: bool | None = None  # nvmlDeviceGetMigMode()[0]
    numa_node: int | None = None  # nvmlDeviceGetNumaNodeId, else sysfs .../numa_node
    local_cpus: str | None = None  # sysfs /sys/bus/pci/devices/<bus>/local_cpulist
    pci_path: tuple[str, ...] = ()  # the PCI bridges above it, root port first (sysfs device path)


@dataclass(frozen=True)
class NicState:
    name: str  # mlx5_0 (/sys/class/infiniband) or eth0 (/sys/class/net)
    kind: str  # "rdma" or "net"
    pci_bus_id: str = ""
    numa_node: int | None = None  # sysfs .../device/numa_node
    pci_path: tuple[str, ...] = ()


@dataclass(frozen=True)
class PciBridge:
    """A PCI bridge above a GPU or NIC: a root port or a PCIe switch port."""

    pci_bus_id: str
    root_port: bool  # directly under the host bridge (part of the root complex)
    acs_ctrl: int | None  # ACS Control register (PCIe ext. capability 0x000D, offset 6); None: unreadable


@dataclass(frozen=True)
class Iommu:
    groups: int  # entries in /sys/kernel/iommu_groups (0: no IOMMU in use)
    gpu_domain_types: tuple[str, ...] = ()  # /sys/kernel/iommu_groups/<g>/type of the GPUs' and NICs' groups
    cmdline: tuple[str, ...] = ()  # iommu-related words of /proc/cmdline (iommu=pt, intel_iommu=on, ...)


@dataclass(frozen=True)
class Cpus:
    count: int  # os.cpu_count()
    usable: int  # len(os.sched_getaffinity(0)): what this process (and a launcher it starts) may use
    numa_nodes: tuple[tuple[int, str], ...] = ()  # (node, cpulist) from /sys/devices/system/node
    affinity: str = ""  # the usable CPUs as a cpulist ("0-55,112-167"): what a launched rank inherits


@dataclass(frozen=True)
class Snapshot:
    host: str
    taken_at: str  # ISO 8601, UTC
    gpu_note: str  # "" when the GPUs were read; otherwise why there are none ("no GPU: ...")
    driver: str | None
    gpus: tuple[GpuState, ...]
    topology: dict | None  # topology/nvml.py's discover() of the same GPUs (Topology.to_dict)
    bridges: tuple[PciBridge, ...]
    nics: tuple[NicState, ...]
    iommu: Iommu
    cpus: Cpus
    environment: dict[str, str] = field(default_factory=dict)  # NCCL_*, CUDA_*, TORCH_NCCL_*

    def to_dict(self) -> dict:
        return {"format": FORMAT, "version": VERSION, **asdict(self)}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_dict(cls, data: dict, where: str = "snapshot") -> Snapshot:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise UsageError(f"{where}: not a doctor snapshot (no \"format\": \"{FORMAT}\"); "
                             "write one with `topowise doctor --save-snapshot FILE`")
        if data.get("version") != VERSION:
            raise UsageError(f"{where}: snapshot version {data.get('version')!r}; this topowise reads {VERSION}")
        try:
            return cls(
                host=str(data["host"]),
                taken_at=str(data["taken_at"]),
                gpu_note=str(data.get("gpu_note", "")),
                driver=data.get("driver"),
                gpus=tuple(_build(GpuState, g) for g in data.get("gpus", [])),
                topology=data.get("topology"),
                bridges=tuple(_build(PciBridge, b) for b in data.get("bridges", [])),
                nics=tuple(_build(NicState, n) for n in data.get("nics", [])),
                iommu=_build(Iommu, data.get("iommu", {"groups": 0})),
                cpus=Cpus(count=int(data["cpus"]["count"]), usable=int(data["cpus"]["usable"]),
                          numa_nodes=tuple((int(n), str(c)) for n, c in data["cpus"].get("numa_nodes", [])),
                          affinity=str(data["cpus"].get("affinity", ""))),
                environment={str(k): str(v) for k, v in data.get("environment", {}).items()},
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise UsageError(f"{where}: doctor snapshot is missing or has a bad field ({exc})") from None


def _build(cls, data: dict):
    """A dataclass from its dict: JSON lists back to tuples where the field is a tuple."""
    known = {f.name: f for f in fields(cls)}
    unknown = set(data) - set(known)
    if unknown:
        raise TypeError(f"{cls.__name__} has no field {sorted(unknown)[0]!r}")
    return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})


def format_cpulist(cpus) -> str:
    """[0, 1, 2, 5] -> "0-2,5" (the kernel's cpulist form, as in /sys/devices/system/node/node0/cpulist)."""
    items = sorted(cpus)
    parts, start = [], None
    for i, x in enumerate(items):
        if start is None:
            start = x
        if i + 1 == len(items) or items[i + 1] != x + 1:
            parts.append(str(start) if start == x else f"{start}-{x}")
            start = None
    return ",".join(parts)


def parse_cpulist(text: str | None) -> set[int]:
    """"0-2,5" -> {0, 1, 2, 5}; "" or None -> set()."""
    out: set[int] = set()
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        low, _, high = part.partition("-")
        out.update(range(int(low), int(high or low) + 1))
    return out


def load(path: str | Path) -> Snapshot:
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise UsageError(f"--snapshot {path}: cannot read ({exc.strerror})") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"--snapshot {path}: not JSON ({exc.msg}, line {exc.lineno})") from None
    return Snapshot.from_dict(data, where=str(path))
