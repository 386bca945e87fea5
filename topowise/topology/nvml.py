"""Live discovery through NVML (the nvidia-ml-py package, imported as `pynvml`).

What it asks NVML, per GPU: name, PCI bus id, memory, NUMA node, PCIe generation and width; per
NVLink link: is it up, and what PCI device is at the other end (a GPU: a direct link to that peer;
anything else: an NVSwitch); per pair: the nearest common PCIe ancestor (PIX..SYS) and whether P2P
reads are supported. `nvidia-smi topo -m` reads the same NVML calls, so both sources agree.

The NVML module is a parameter (`discover(nvml=fake)`) so tests run without GPUs.
"""

from __future__ import annotations

import itertools
from pathlib import Path

from topowise import hardware
from topowise.errors import UsageError
from topowise.topology.model import NVLINK, Gpu, Link, Topology

NO_GPUS_HINT = ("pass --preset NAME or --file PATH instead (e.g. run `nvidia-smi topo -m > topo.txt` "
                "on the GPU box and give --file topo.txt)")

# nvmlDeviceGetTopologyCommonAncestor -> the class `nvidia-smi topo -m` prints (nvml.h nvmlGpuTopologyLevel_t).
_ANCESTOR_KIND = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
_NVLINK_DEVICE_TYPE_GPU = 0  # nvml.h NVML_NVLINK_DEVICE_TYPE_GPU
_MAX_LINKS_FALLBACK = 18  # NVML_NVLINK_MAX_LINKS on older bindings that lack the constant


def discover(nvml=None, name: str = "local") -> Topology:
    """The GPUs of this machine as a Topology. No NVML library or no GPUs -> UsageError with a way out."""
    nvml = nvml if nvml is not None else _import_pynvml()
    error = getattr(nvml, "NVMLError", Exception)
    try:
        nvml.nvmlInit()
    except error as exc:
        raise UsageError(f"NVML could not start ({_text(exc)}): no NVIDIA driver here? {NO_GPUS_HINT}") from None
    try:
        return _discover(nvml, error, name)
    except error as exc:
        raise UsageError(f"NVML failed while reading the topology ({_text(exc)}); {NO_GPUS_HINT}") from None
    finally:
        try:
            nvml.nvmlShutdown()
        except error:
            pass


def _import_pynvml():
    try:
        import pynvml
    except ImportError:
        raise UsageError(f"live discovery needs nvidia-ml-py (pip install nvidia-ml-py); {NO_GPUS_HINT}") from None
    return pynvml


def _discover(nvml, error, name: str) -> Topology:
    count = nvml.nvmlDeviceGetCount()
    if count == 0:
        raise UsageError(f"NVML found no GPUs on this machine; {NO_GPUS_HINT}")
    handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    bus_ids = [normalize_bus_id(_text(nvml.nvmlDeviceGetPciInfo(h).busId)) for h in handles]
    gpus = tuple(
        Gpu(i, _text(nvml.nvmlDeviceGetName(h)), bus_ids[i], _numa_node(nvml, error, h, bus_ids[i]),
            int(nvml.nvmlDeviceGetMemoryInfo(h).total))
        for i, h in enumerate(handles)
    )
    notes = [f"NVML ({count} GPUs)"]

    # NVLink: count links to each peer GPU; links to anything else go to an NVSwitch.
    by_bus = {b: i for i, b in enumerate(bus_ids)}
    peer_links: dict[tuple[int, int], int] = {}  # (from, to) -> links GPU `from` sees to GPU `to`
    switch_links = [0] * count
    for i, h in enumerate(handles):
        for remote_is_gpu, remote in _active_nvlink_remotes(nvml, error, h):
            j = by_bus.get(remote)
            if j is not None and j != i:
                peer_links[(i, j)] = peer_links.get((i, j), 0) + 1
            elif not remote_is_gpu:  # told it is a switch, or a device that is none of our GPUs
                switch_links[i] += 1
    nvswitch = any(switch_links)

    spec = hardware.gpu_spec(gpus[0].name)
    nvlink_gen = spec.nvlink_gen
    if not nvlink_gen and (peer_links or nvswitch):
        nvlink_gen = 4
        notes.append(f"NVLink generation of {gpus[0].name!r} unknown: assumed NVLink 4 (26.5625 GB/s per link)")
    pcie_gen, pcie_width = _pcie(nvml, error, handles, spec.pcie_gen)
    pcie_rate = hardware.pcie_gbps(pcie_gen) * pcie_width / 16
    notes.append(f"PCIe gen {pcie_gen} x{pcie_width}")

    p2p_read = getattr(nvml, "NVML_P2P_CAPS_INDEX_READ", 0)
    if isinstance(p2p_read, tuple):  # some nvidia-ml-py releases define it as `0,` (a tuple)
        p2p_read = p2p_read[0]
    links = []
    for a, b in itertools.combinations(range(count), 2):
        # Both ends see the same direct links; take the larger count in case one end could not report.
        direct = max(peer_links.get((a, b), 0), peer_links.get((b, a), 0))
        via_switch = min(switch_links[a], switch_links[b])
        nvlinks = direct + via_switch
        p2p = _p2p_ok(nvml, error, handles[a], handles[b], p2p_read)
        if nvlinks:
            links.append(Link(a, b, NVLINK, hardware.NVLINK_GBPS_PER_LINK[nvlink_gen] * nvlinks, nvlinks, p2p))
        else:
            kind = _ancestor(nvml, error, handles[a], handles[b])
            links.append(Link(a, b, kind, pcie_rate, 0, p2p))
    return Topology(name, gpus, tuple(links), (), nvswitch, pcie_gen, "; ".join(notes))


def _active_nvlink_remotes(nvml, error, handle) -> list[tuple[bool, str]]:
    """(is a GPU, normalized PCI bus id) at the far end of each active NVLink. Where NVML cannot say
    the device type, is-a-GPU is False and the caller tells GPUs by their bus id."""
    max_links = getattr(nvml, "NVML_NVLINK_MAX_LINKS", _MAX_LINKS_FALLBACK)
    enabled = getattr(nvml, "NVML_FEATURE_ENABLED", 1)
    remote_pci = (getattr(nvml, "nvmlDeviceGetNvLinkRemotePciInfo_v2", None)
                  or nvml.nvmlDeviceGetNvLinkRemotePciInfo)
    remote_type = getattr(nvml, "nvmlDeviceGetNvLinkRemoteDeviceType", None)
    out = []
    for link in range(max_links):
        try:
            if nvml.nvmlDeviceGetNvLinkState(handle, link) != enabled:
                continue
        except error:
            break  # no NVLink on this part, or past its last link
        try:
            is_gpu = remote_type is not None and remote_type(handle, link) == _NVLINK_DEVICE_TYPE_GPU
        except error:
            is_gpu = False
        try:
            out.append((is_gpu, normalize_bus_id(_text(remote_pci(handle, link).busId))))
        except error:
            out.append((is_gpu, ""))
    return out


def _ancestor(nvml, error, h1, h2) -> str:
    try:
        return _ANCESTOR_KIND.get(int(nvml.nvmlDeviceGetTopologyCommonAncestor(h1, h2)), "SYS")
    except error:
        return "SYS"  # unknown: assume the farthest path


def _p2p_ok(nvml, error, h1, h2, index) -> bool:
    try:
        return nvml.nvmlDeviceGetP2PStatus(h1, h2, index) == getattr(nvml, "NVML_P2P_STATUS_OK", 0)
    except error:
        return True  # NVML cannot tell; NCCL will find out


def _pcie(nvml, error, handles, default_gen: int) -> tuple[int, int]:
    """The slowest GPU's maximum link generation and width (current values drop when a GPU idles)."""
    gens, widths = [], []
    for h in handles:
        try:
            gens.append(int(nvml.nvmlDeviceGetMaxPcieLinkGeneration(h)))
            widths.append(int(nvml.nvmlDeviceGetMaxPcieLinkWidth(h)))
        except error:
            pass
    gens = [g for g in gens if g in hardware.PCIE_X16_GBPS]
    widths = [w for w in widths if 0 < w <= 16]
    return (min(gens) if gens else default_gen), (min(widths) if widths else 16)


def _numa_node(nvml, error, handle, bus_id: str) -> int | None:
    getter = getattr(nvml, "nvmlDeviceGetNumaNodeId", None)
    if getter is not None:
        try:
            node = int(getter(handle))
            return node if node >= 0 else None
        except error:
            pass
    try:
        node = int(Path(f"/sys/bus/pci/devices/{bus_id}/numa_node").read_text().strip())
    except (OSError, ValueError):
        return None
    return node if node >= 0 else None


def normalize_bus_id(bus_id: str) -> str:
    """"00000000:1B:00.0" (NVML) -> "0000:1b:00.0" (sysfs); "" stays "" (a device NVML cannot name)."""
    bus_id = bus_id.strip().lower()
    if not bus_id:
        return ""
    parts = bus_id.split(":")
    if len(parts) == 3:
        try:
            parts[0] = f"{int(parts[0], 16):04x}"
        except ValueError:
            pass
    return ":".join(parts)


def _text(value) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
