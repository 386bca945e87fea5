"""Everything `topowise doctor` read from a machine, as one frozen record that round-trips through JSON.

A field that could not be read is None (no permission, an older driver, no such part); the checks
say "could not read" rather than guess. `doctor --save-snapshot FILE` writes this record and
`doctor --snapshot FILE` runs every check on it, so a bug report carries the machine with it.
"""

from __future__ import annotations

import json
import math
import types
import typing
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
            snap = cls(
                host=_typed("host", data["host"], str),
                taken_at=_typed("taken_at", data["taken_at"], str),
                gpu_note=_typed("gpu_note", data.get("gpu_note", ""), str),
                driver=_typed("driver", data.get("driver"), str | None),
                gpus=tuple(_build(GpuState, g) for g in _typed("gpus", data.get("gpus", []), list)),
                topology=_typed("topology", data.get("topology"), dict | None),
                bridges=tuple(_build(PciBridge, b) for b in _typed("bridges", data.get("bridges", []), list)),
                nics=tuple(_build(NicState, n) for n in _typed("nics", data.get("nics", []), list)),
                iommu=_build(Iommu, data.get("iommu", {"groups": 0})),
                cpus=_build(Cpus, data["cpus"]),
                environment={str(k): _typed(f"environment.{k}", v, str)
                             for k, v in _typed("environment", data.get("environment", {}), dict).items()},
            )
            for g in snap.gpus:  # the binding reads them: a list that is not a cpulist is refused here
                _check_cpulist(f"GpuState.local_cpus of GPU {g.index}", g.local_cpus)
            _check_cpulist("Cpus.affinity", snap.cpus.affinity)
            for node, cpus in snap.cpus.numa_nodes:
                _check_cpulist(f"Cpus.numa_nodes of node {node}", cpus)
        except KeyError as exc:
            raise UsageError(f"{where}: doctor snapshot has no {exc} field") from None
        except (TypeError, ValueError) as exc:
            raise UsageError(f"{where}: doctor snapshot has a bad field ({exc})") from None
        if snap.topology is not None:  # the checks read it as a topology: refused here rather than mid-check
            from topowise.topology.model import Topology

            Topology.from_dict(snap.topology, where=f"{where}: the snapshot's topology")
        return snap


_NON_NEGATIVE_EXCEPT = ("temperature_c", "slowdown_temperature_c")  # a count, clock, power or index is >= 0


def _typed(name: str, value, hint):
    """The JSON value where it has the field's type (a list for a tuple, an int for a float; a bool is no
    number); TypeError naming the field otherwise."""
    if not _fits(value, hint):
        raise TypeError(f"{name} is {type(value).__name__} {_short(value)}, not {_hint_words(hint)}")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isfinite(value):
        raise ValueError(f"{name} is {value}, not a finite number")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0 \
            and name.rsplit(".", 1)[-1] not in _NON_NEGATIVE_EXCEPT:
        raise ValueError(f"{name} is {value}, below 0")
    return _tuples(value) if isinstance(value, list) and _is_tuple(hint) else value


MAX_CPU = 65535  # above any kernel's NR_CPUS (CONFIG_NR_CPUS tops out at 8192 on x86): no cpulist names more


def _check_cpulist(name: str, text: str | None) -> None:
    """"0-2,5" or "" (the kernel's cpulist form); ValueError naming the field otherwise."""
    if not text:
        return
    for part in text.split(","):
        low, _, high = part.strip().partition("-")
        if not low.isascii() or not low.isdigit() or (high and not (high.isascii() and high.isdigit())) \
                or int(high or low) > MAX_CPU or int(high or low) < int(low):
            raise ValueError(f"{name} {_short(text)} is not a CPU list like 0-55,112-167")


def _is_tuple(hint) -> bool:
    options = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    return any(typing.get_origin(o) is tuple for o in options)


def _tuples(value):
    """JSON lists back to the tuples the record holds, nested ones too ((node, cpulist) pairs)."""
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def _fits(value, hint) -> bool:
    options = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    for option in options:
        origin = typing.get_origin(option) or option
        if option is type(None) and value is None:
            return True
        if origin is tuple and isinstance(value, (list, tuple)):
            args = typing.get_args(option)
            if len(args) == 2 and args[1] is Ellipsis:
                if all(_fits(v, args[0]) for v in value):
                    return True
            elif len(args) == len(value) and all(_fits(v, a) for v, a in zip(value, args)):
                return True
        elif origin is bool and isinstance(value, bool):
            return True
        elif origin is int and isinstance(value, int) and not isinstance(value, bool):
            return True
        elif origin is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            return True
        elif origin is list and isinstance(value, (list, tuple)):  # a tuple: from_dict of a to_dict, not via JSON
            return True
        elif origin in (str, dict) and isinstance(value, origin):
            return True
    return False


def _hint_words(hint) -> str:
    if isinstance(hint, type):
        return {"dict": "an object", "list": "a list"}.get(hint.__name__, hint.__name__)
    return str(hint).replace("typing.", "").replace("NoneType", "null").replace("tuple[", "list[")


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _build(cls, data: dict):
    """A dataclass from its dict, each field of its type (JSON lists back to tuples where the field is a tuple)."""
    if not isinstance(data, dict):
        raise TypeError(f"each {cls.__name__} is a JSON object, not {type(data).__name__} {_short(data)}")
    hints = typing.get_type_hints(cls)
    known = {f.name for f in fields(cls)}
    unknown = set(data) - known
    if unknown:
        raise TypeError(f"{cls.__name__} has no field {sorted(unknown)[0]!r}")
    return cls(**{k: _typed(f"{cls.__name__}.{k}", v, hints[k]) for k, v in data.items()})


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
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"--snapshot {path}: cannot read ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise UsageError(f"--snapshot {path}: not a doctor snapshot (binary, not JSON text); write one with "
                         "`topowise doctor --save-snapshot FILE`") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"--snapshot {path}: not JSON ({exc.msg}, line {exc.lineno})") from None
    except RecursionError:  # the parser recurses per level: no snapshot nests past a few levels
        raise UsageError(f"--snapshot {path}: not a doctor snapshot (JSON nested too deeply)") from None
    return Snapshot.from_dict(data, where=str(path))
