"""Read a live Snapshot: NVML (nvidia-ml-py) for the GPUs, sysfs and procfs for the rest.

Every read is guarded: a call the driver lacks, a file that needs root, no GPU at all each leave
None (or a note) and the rest is still read. `nvml` and the sysfs/procfs roots are parameters so
tests run the same code on a machine without GPUs.
"""

from __future__ import annotations

import datetime
import os
import socket
from collections.abc import Mapping
from pathlib import Path

from topowise.doctor.snapshot import Cpus, GpuState, Iommu, NicState, PciBridge, Snapshot, format_cpulist
from topowise.envinfo import ENV_PREFIXES
from topowise.errors import UsageError
from topowise.topology import nvml as topology_nvml

ACS_CAP_ID = 0x000D  # extended capability ID of Access Control Services (PCIe Base Specification)
EXT_CAP_START = 0x100  # extended capabilities begin here; unprivileged reads of sysfs `config` stop at 64 B
_IOMMU_WORDS = ("iommu", "intel_iommu", "amd_iommu")


def read(environ: Mapping[str, str] | None = None, nvml=None, sys_root: str | Path = "/sys",
         proc_root: str | Path = "/proc") -> Snapshot:
    environ = os.environ if environ is None else environ
    sys_root, proc_root = Path(sys_root), Path(proc_root)
    gpus, driver, note = _read_gpus(nvml, sys_root)
    topology = None
    if gpus:
        try:
            topology = topology_nvml.discover(nvml).to_dict()
        except (UsageError, AttributeError, TypeError, ValueError):
            topology = None  # a binding without a call the wiring needs: the checks that need it say so
    nics = _read_nics(sys_root)
    paths = [g.pci_path for g in gpus] + [n.pci_path for n in nics]
    bridges = _read_bridges(sys_root, paths)
    return Snapshot(
        host=socket.gethostname(),
        taken_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        gpu_note=note,
        driver=driver,
        gpus=tuple(gpus),
        topology=topology,
        bridges=bridges,
        nics=tuple(nics),
        iommu=_read_iommu(sys_root, proc_root, [g.pci_bus_id for g in gpus] + [n.pci_bus_id for n in nics]),
        cpus=_read_cpus(sys_root),
        environment={k: environ[k] for k in sorted(environ) if k.startswith(ENV_PREFIXES)},
    )


# --- GPUs (NVML) ------------------------------------------------------------------------------------
def _read_gpus(nvml, sys_root: Path) -> tuple[list[GpuState], str | None, str]:
    if nvml is None:
        try:
            import pynvml as nvml  # type: ignore[no-redef]
        except ImportError:
            return [], None, "no GPU: nvidia-ml-py is not installed (pip install nvidia-ml-py)"
    error = getattr(nvml, "NVMLError", Exception)
    try:
        nvml.nvmlInit()
    except error as exc:
        return [], None, f"no GPU: NVML could not start ({_text(exc)}), no NVIDIA driver here"
    try:
        driver = _get(error, lambda: _text(nvml.nvmlSystemGetDriverVersion()))
        count = _get(error, nvml.nvmlDeviceGetCount) or 0
        if not count:
            return [], driver, "no GPU: NVML found none"
        return [_read_gpu(nvml, error, i, sys_root) for i in range(count)], driver, ""
    finally:
        _get(error, nvml.nvmlShutdown)


def _read_gpu(nvml, error, index: int, sys_root: Path) -> GpuState:
    h = nvml.nvmlDeviceGetHandleByIndex(index)
    c = lambda name, default=None: getattr(nvml, name, default)  # noqa: E731 (a constant, if the binding has it)
    bus = _get(error, lambda: topology_nvml.normalize_bus_id(_text(nvml.nvmlDeviceGetPciInfo(h).busId))) or ""
    remapped = _get(error, lambda: nvml.nvmlDeviceGetRemappedRows(h))  # (corr, unc, pending, failure)
    mig = _get(error, lambda: nvml.nvmlDeviceGetMigMode(h))  # (current, pending)
    reasons_fn = c("nvmlDeviceGetCurrentClocksEventReasons") or c("nvmlDeviceGetCurrentClocksThrottleReasons")
    numa = _get(error, lambda: int(nvml.nvmlDeviceGetNumaNodeId(h)))
    device = sys_root / "bus/pci/devices" / bus if bus else None
    if numa is None or numa < 0:
        numa = _int_file(device / "numa_node") if device else None
    return GpuState(
        index=index,
        name=_get(error, lambda: _text(nvml.nvmlDeviceGetName(h))) or "unknown",
        pci_bus_id=bus,
        pcie_gen=_get(error, lambda: int(nvml.nvmlDeviceGetCurrPcieLinkGeneration(h))),
        pcie_width=_get(error, lambda: int(nvml.nvmlDeviceGetCurrPcieLinkWidth(h))),
        pcie_max_gen=_get(error, lambda: int(nvml.nvmlDeviceGetMaxPcieLinkGeneration(h))),
        pcie_max_width=_get(error, lambda: int(nvml.nvmlDeviceGetMaxPcieLinkWidth(h))),
        pcie_gpu_max_gen=_get(error, lambda: int(nvml.nvmlDeviceGetGpuMaxPcieLinkGeneration(h))),
        nvlink_up=_nvlink_states(nvml, error, h),
        clock_event_reasons=_get(error, lambda: int(reasons_fn(h))) if reasons_fn else None,
        sm_clock_mhz=_get(error, lambda: int(nvml.nvmlDeviceGetClockInfo(h, c("NVML_CLOCK_SM", 1)))),
        sm_clock_max_mhz=_get(error, lambda: int(nvml.nvmlDeviceGetMaxClockInfo(h, c("NVML_CLOCK_SM", 1)))),
        temperature_c=_get(error, lambda: int(nvml.nvmlDeviceGetTemperature(h, c("NVML_TEMPERATURE_GPU", 0)))),
        slowdown_temperature_c=_get(error, lambda: int(nvml.nvmlDeviceGetTemperatureThreshold(
            h, c("NVML_TEMPERATURE_THRESHOLD_SLOWDOWN", 1)))),
        power_w=_get(error, lambda: nvml.nvmlDeviceGetPowerUsage(h) / 1000),
        power_limit_w=_get(error, lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000),
        power_default_limit_w=_get(error, lambda: nvml.nvmlDeviceGetPowerManagementDefaultLimit(h) / 1000),
        ecc_uncorrected_volatile=_get(error, lambda: int(nvml.nvmlDeviceGetTotalEccErrors(
            h, c("NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1), c("NVML_VOLATILE_ECC", 0)))),
        retired_pages_pending=_get(error, lambda: bool(nvml.nvmlDeviceGetRetiredPagesPendingStatus(h))),
        remapped_rows_pending=bool(remapped[2]) if remapped else None,
        remapped_rows_failure=bool(remapped[3]) if remapped else None,
        persistence_mode=_get(error, lambda: bool(nvml.nvmlDeviceGetPersistenceMode(h))),
        mig_mode=bool(mig[0]) if mig else None,
        numa_node=numa if numa is not None and numa >= 0 else None,
        local_cpus=_text_file(device / "local_cpulist") if device else None,
        pci_path=_pci_path(sys_root, bus),
    )


def _nvlink_states(nvml, error, h) -> tuple[bool, ...]:
    """Up (True) or down per link the part has; NVML raises past the last link (or on a part with none)."""
    enabled = getattr(nvml, "NVML_FEATURE_ENABLED", 1)
    states = []
    for link in range(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18)):
        try:
            states.append(nvml.nvmlDeviceGetNvLinkState(h, link) == enabled)
        except error:
            break
    return tuple(states)


# --- PCI, NICs, IOMMU (sysfs) ------------------------------------------------------------------------
def _pci_path(sys_root: Path, bus_id: str) -> tuple[str, ...]:
    """The bridges above a device, root port first: /sys/devices/pci0000:00/0000:00:01.0/.../<bus_id>."""
    if not bus_id:
        return ()
    try:
        real = (sys_root / "bus/pci/devices" / bus_id).resolve(strict=True)
    except OSError:
        return ()
    parts = [p for p in real.parts if _is_bus_id(p)]
    return tuple(parts[:-1])


def _is_bus_id(text: str) -> bool:
    return len(text) == 12 and text[4] == ":" and text[7] == ":" and text[10] == "."


def _read_nics(sys_root: Path) -> list[NicState]:
    nics = []
    seen: set[str] = set()
    for kind, folder in (("rdma", "class/infiniband"), ("net", "class/net")):
        try:
            names = sorted(p.name for p in (sys_root / folder).iterdir())
        except OSError:
            continue
        for name in names:
            device = sys_root / folder / name / "device"
            try:
                bus = device.resolve(strict=True).name
            except OSError:
                continue  # a virtual interface (lo, a bridge, a tunnel): no PCI device
            if not _is_bus_id(bus) or bus in seen:
                continue  # the netdev of an RDMA device is the same card
            seen.add(bus)
            nics.append(NicState(name=name, kind=kind, pci_bus_id=bus, numa_node=_numa(device / "numa_node"),
                                 pci_path=_pci_path(sys_root, bus)))
    return nics


def _numa(path: Path) -> int | None:
    node = _int_file(path)
    return node if node is not None and node >= 0 else None


def _read_bridges(sys_root: Path, paths) -> tuple[PciBridge, ...]:
    bridges: dict[str, PciBridge] = {}
    for path in paths:
        for depth, bus in enumerate(path):
            if bus not in bridges:
                bridges[bus] = PciBridge(pci_bus_id=bus, root_port=depth == 0,
                                         acs_ctrl=_acs_ctrl(sys_root / "bus/pci/devices" / bus / "config"))
    return tuple(bridges.values())


def _acs_ctrl(config: Path) -> int | None:
    """The ACS Control register: walk the extended capability list of the device's config space.
    None where the file stops at 64/256 bytes (reading past them needs root); 0 where there is no ACS."""
    try:
        data = config.read_bytes()
    except OSError:
        return None
    if len(data) <= EXT_CAP_START:
        return None
    offset, seen = EXT_CAP_START, set()
    while offset and offset + 8 <= len(data) and offset not in seen:
        seen.add(offset)
        header = int.from_bytes(data[offset:offset + 4], "little")
        if header & 0xFFFF == ACS_CAP_ID:
            return int.from_bytes(data[offset + 6:offset + 8], "little")
        offset = (header >> 20) & 0xFFC
    return 0


def _read_iommu(sys_root: Path, proc_root: Path, bus_ids: list[str]) -> Iommu:
    groups_dir = sys_root / "kernel/iommu_groups"
    try:
        groups = sum(1 for _ in groups_dir.iterdir())
    except OSError:
        groups = 0
    types = set()
    for bus in bus_ids:
        try:
            group = (sys_root / "bus/pci/devices" / bus / "iommu_group").resolve(strict=True)
        except OSError:
            continue
        kind = _text_file(group / "type")
        if kind:
            types.add(kind)
    cmdline = (_text_file(proc_root / "cmdline") or "").split()
    words = tuple(w for w in cmdline if w.split("=", 1)[0] in _IOMMU_WORDS)
    return Iommu(groups=groups, gpu_domain_types=tuple(sorted(types)), cmdline=words)


def _read_cpus(sys_root: Path) -> Cpus:
    count = os.cpu_count() or 0
    try:
        allowed = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        allowed = list(range(count))
    nodes = []
    try:
        for p in (sys_root / "devices/system/node").iterdir():
            if p.name.startswith("node") and p.name[4:].isdigit():
                nodes.append((int(p.name[4:]), _text_file(p / "cpulist") or ""))
    except OSError:
        pass
    return Cpus(count=count, usable=len(allowed), numa_nodes=tuple(sorted(nodes)), affinity=format_cpulist(allowed))



# --- guarded reads ------------------------------------------------------------------------------------
def _get(error, fn):
    """fn() or None where NVML says no (not supported, no permission) or the binding lacks the call."""
    try:
        return fn()
    except (error, AttributeError, TypeError, ValueError):
        return None


def _text_file(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _int_file(path: Path) -> int | None:
    text = _text_file(path)
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _text(value) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
