"""The doctor's checks: pure functions Snapshot -> list[Check], each with the field it reads as its source.

A check that finds nothing to look at (no GPU, no NIC) says so as ok, or is left out where the
"GPUs" row already says there is no GPU. docs/doctor.md explains each check and its fix.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

from topowise.doctor.snapshot import GpuState, Snapshot, format_cpulist, parse_cpulist

OK, WARN, FAIL = "ok", "warn", "fail"
NCCL_ENV_DOC = "NCCL docs, Environment Variables (docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html)"
NCCL_TROUBLE_DOC = "NCCL docs, Troubleshooting (docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html)"

# nvml.h, nvmlClocksEventReasons: the bits of nvmlDeviceGetCurrentClocksEventReasons
GPU_IDLE = 0x1
SW_POWER_CAP = 0x4
HW_SLOWDOWN = 0x8
SW_THERMAL_SLOWDOWN = 0x20
HW_THERMAL_SLOWDOWN = 0x40
HW_POWER_BRAKE_SLOWDOWN = 0x80
SLOWDOWNS = {HW_SLOWDOWN: "HW slowdown", SW_THERMAL_SLOWDOWN: "SW thermal slowdown",
             HW_THERMAL_SLOWDOWN: "HW thermal slowdown", HW_POWER_BRAKE_SLOWDOWN: "HW power brake"}
NEAR_SLOWDOWN_C = 5  # within 5 C of the slowdown threshold: warn before the clocks drop

# ACS Control register (PCIe Base Specification, ACS Extended Capability): P2P Request Redirect and P2P
# Completion Redirect send peer-to-peer traffic up to the root complex (NCCL docs, Troubleshooting, "PCI
# Access Control Services")
ACS_P2P_REQUEST_REDIRECT = 0x4
ACS_P2P_COMPLETION_REDIRECT = 0x8
ACS_REDIRECT = ACS_P2P_REQUEST_REDIRECT | ACS_P2P_COMPLETION_REDIRECT
POWER_LIMIT_LOWERED = 0.95  # an enforced limit under 95% of the default one was lowered on purpose (or by mistake)


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # ok | warn | fail
    evidence: str
    fix: str = ""
    source: str = ""  # the NVML field, sysfs path or NCCL document the check reads

    def to_dict(self) -> dict:
        return asdict(self)


def run_checks(snap: Snapshot) -> list[Check]:
    out = [check_gpus_found(snap)]
    if snap.gpus:
        for check in GPU_CHECKS:
            out.append(check(snap))
    out += [check_acs(snap), check_iommu(snap), check_nic_numa(snap)]
    if snap.gpus:
        out.append(check_nic_rails(snap))
    out.append(check_cpus(snap))
    out += check_environment(snap)
    return out


def worst(checks: list[Check]) -> str:
    statuses = {c.status for c in checks}
    return FAIL if FAIL in statuses else WARN if WARN in statuses else OK


# --- GPUs --------------------------------------------------------------------------------------------
def check_gpus_found(snap: Snapshot) -> Check:
    source = "NVML nvmlInit, nvmlDeviceGetCount"
    if not snap.gpus:
        return Check("GPUs", WARN, snap.gpu_note or "no GPU",
                     "on a GPU node: install the NVIDIA driver and nvidia-ml-py; the checks below still ran", source)
    names = sorted({g.name for g in snap.gpus})
    return Check("GPUs", OK, f"{len(snap.gpus)}x {', '.join(names)}, driver {snap.driver or '?'}", "", source)


def _per_gpu(snap: Snapshot, finding: Callable[[GpuState], tuple[str, str] | None]) -> tuple[str, list[str]]:
    """The worst status over the GPUs and the evidence of those at fault."""
    status, lines = OK, []
    for g in snap.gpus:
        found = finding(g)
        if found is None:
            continue
        level, text = found
        lines.append(f"GPU{g.index}: {text}")
        if level == FAIL or (level == WARN and status == OK):
            status = level
    return status, lines


def check_pcie(snap: Snapshot) -> Check:
    def finding(g: GpuState):
        if None in (g.pcie_gen, g.pcie_width, g.pcie_max_gen, g.pcie_max_width):
            return WARN, "PCIe link not readable"
        now = f"Gen{g.pcie_gen} x{g.pcie_width}, max Gen{g.pcie_max_gen} x{g.pcie_max_width}"
        idle = g.clock_event_reasons is not None and g.clock_event_reasons & GPU_IDLE
        if g.pcie_width < g.pcie_max_width:  # type: ignore[operator]
            return FAIL, now
        if g.pcie_gen < g.pcie_max_gen and not idle:  # type: ignore[operator]  # gen drops when idle to save power
            return FAIL, now
        if g.pcie_gpu_max_gen and g.pcie_gpu_max_gen > g.pcie_max_gen:  # type: ignore[operator]
            return WARN, f"the slot caps it at Gen{g.pcie_max_gen}; the GPU does Gen{g.pcie_gpu_max_gen}"
        return None

    status, lines = _per_gpu(snap, finding)
    g0 = snap.gpus[0]
    evidence = "; ".join(lines) or (f"all at their maximum (Gen{g0.pcie_max_gen} x{g0.pcie_max_width})")
    fix = ("reseat the GPU or its riser, check the slot's BIOS link speed; confirm under load with "
           "`nvidia-smi -q -d PCIE`") if status != OK else ""
    return Check("PCIe link", status, evidence, fix,
                 "NVML nvmlDeviceGetCurrPcieLinkGeneration/Width vs nvmlDeviceGetMaxPcieLinkGeneration/Width")


def check_nvlink(snap: Snapshot) -> Check:
    """The board's design is what the best GPU of the same model has up: NVML lists links a card has but
    no bridge wires (an H100 PCIe without bridge lists them all down), so a link down counts only where
    a peer of the same model has more links up."""
    source = "NVML nvmlDeviceGetNvLinkState per link"
    design: dict[str, int] = {}
    for g in snap.gpus:
        design[g.name] = max(design.get(g.name, 0), sum(g.nvlink_up))

    def finding(g: GpuState):
        up = sum(g.nvlink_up)
        if up >= design[g.name]:
            return None
        down = [i for i, state in enumerate(g.nvlink_up) if not state]
        what = f"link {_ranges(down)} down, " if down else ""
        return FAIL, f"{what}{up} of {design[g.name]} up (its peers have {design[g.name]})"

    if not any(design.values()):
        return Check("NVLink", OK, "no NVLink up on these GPUs (PCIe only)", "", source)
    status, lines = _per_gpu(snap, finding)
    evidence = "; ".join(lines) or f"{'/'.join(str(n) for n in sorted(set(design.values())))} links up on every GPU"
    fix = ("`nvidia-smi nvlink -s` and `-e`; reset the GPU or reboot (NVSwitch boards: restart "
           "nvidia-fabricmanager); a link that stays down is a board fault") if status != OK else ""
    return Check("NVLink", status, evidence, fix, source)


def check_clocks(snap: Snapshot) -> Check:
    def finding(g: GpuState):
        temp = "" if g.temperature_c is None else f", {g.temperature_c} C"
        limit = "" if g.slowdown_temperature_c is None else f" (slowdown at {g.slowdown_temperature_c} C)"
        reasons = g.clock_event_reasons
        if reasons is None:
            return WARN, "clock event reasons not readable"
        slow = [name for bit, name in SLOWDOWNS.items() if reasons & bit]
        clock = "" if not (g.sm_clock_mhz and g.sm_clock_max_mhz) else f", SM {g.sm_clock_mhz}/{g.sm_clock_max_mhz} MHz"
        if slow:
            return FAIL, f"{', '.join(slow)}{temp}{limit}{clock}"
        if (g.temperature_c is not None and g.slowdown_temperature_c
                and g.temperature_c >= g.slowdown_temperature_c - NEAR_SLOWDOWN_C):
            return WARN, f"{g.temperature_c} C, near the slowdown at {g.slowdown_temperature_c} C"
        if reasons & SW_POWER_CAP:
            return WARN, f"at its power cap{clock}"
        return None

    status, lines = _per_gpu(snap, finding)
    temps = [g.temperature_c for g in snap.gpus if g.temperature_c is not None]
    evidence = "; ".join(lines) or ("no slowdown" + (f", {min(temps)}-{max(temps)} C" if temps else ""))
    fix = {OK: "", WARN: "watch it under load (`nvidia-smi -q -d PERFORMANCE`); a power cap under full load is usual",
           FAIL: "check the cooling (fans, airflow, inlet temperature) and the PSUs; `nvidia-smi -q -d PERFORMANCE`"}
    return Check("clocks", status, evidence, fix[status],
                 "NVML nvmlDeviceGetCurrentClocksEventReasons, nvmlDeviceGetTemperature(Threshold)")


def check_power_limit(snap: Snapshot) -> Check:
    def finding(g: GpuState):
        if not (g.power_limit_w and g.power_default_limit_w):
            return None
        if g.power_limit_w < POWER_LIMIT_LOWERED * g.power_default_limit_w:
            return WARN, f"limit {g.power_limit_w:.0f} W of a default {g.power_default_limit_w:.0f} W"
        return None

    status, lines = _per_gpu(snap, finding)
    fix = "`sudo nvidia-smi -i N -pl <default W>` if the cap was not meant (or price it: --power-limit)"
    return Check("power limit", status, "; ".join(lines) or "at the default limit", fix if lines else "",
                 "NVML nvmlDeviceGetEnforcedPowerLimit vs nvmlDeviceGetPowerManagementDefaultLimit")


def check_memory_errors(snap: Snapshot) -> Check:
    def finding(g: GpuState):
        if g.remapped_rows_failure:
            return FAIL, "row remapping failed"
        if g.remapped_rows_pending or g.retired_pages_pending:
            return FAIL, "a row remap (or page retirement) is pending"
        if g.ecc_uncorrected_volatile:
            return WARN, f"{g.ecc_uncorrected_volatile} uncorrected ECC errors since boot"
        return None

    status, lines = _per_gpu(snap, finding)
    failed = any(g.remapped_rows_failure for g in snap.gpus)
    fix = ("replace the GPU (remapping failed: NVIDIA's RMA criteria)" if failed else
           "reset the GPU (`sudo nvidia-smi -r -i N`) or reboot so the remap takes effect") if status == FAIL else \
        "watch the count; reset the GPU if it grows" if status == WARN else ""
    return Check("memory errors", status, "; ".join(lines) or "no pending remap, no uncorrected ECC", fix,
                 "NVML nvmlDeviceGetRemappedRows, nvmlDeviceGetRetiredPagesPendingStatus, nvmlDeviceGetTotalEccErrors")


def check_modes(snap: Snapshot) -> Check:
    def finding(g: GpuState):
        if g.mig_mode:
            return WARN, "MIG on (a job sees slices, no NVLink between them)"
        if g.persistence_mode is False:
            return WARN, "persistence mode off (each job start pays the driver's init)"
        return None

    status, lines = _per_gpu(snap, finding)
    fix = "`sudo nvidia-smi -pm 1` (or run nvidia-persistenced); MIG: `sudo nvidia-smi -i N -mig 0`, then reset"
    return Check("persistence/MIG", status, "; ".join(lines) or "persistence on, MIG off", fix if lines else "",
                 "NVML nvmlDeviceGetPersistenceMode, nvmlDeviceGetMigMode")


GPU_CHECKS = (check_pcie, check_nvlink, check_clocks, check_power_limit, check_memory_errors, check_modes)


# --- PCIe fabric, IOMMU, NICs, CPUs --------------------------------------------------------------------
def check_acs(snap: Snapshot) -> Check:
    source = "sysfs /sys/bus/pci/devices/<bridge>/config, ACS Control; " + NCCL_TROUBLE_DOC + ", ACS"
    switches = [b for b in snap.bridges if not b.root_port]
    if not switches:
        return Check("PCIe ACS", OK, "no PCIe switch above the GPUs and NICs", "", source)
    on = [b.pci_bus_id for b in switches if b.acs_ctrl is not None and b.acs_ctrl & ACS_REDIRECT]
    unread = [b.pci_bus_id for b in switches if b.acs_ctrl is None]
    if on:
        return Check("PCIe ACS", FAIL,
                     f"P2P redirect on at {len(on)} switch port(s) ({', '.join(on[:3])}"
                     f"{', ...' if len(on) > 3 else ''}):"
                     " GPU P2P and GPUDirect RDMA go through the root complex",
                     "turn ACS off in the BIOS, or `sudo setpci -s <bridge> ECAP_ACS+6.w=0000` per port at boot",
                     source)
    if unread:
        return Check("PCIe ACS", WARN, f"{len(unread)} switch port(s) not readable without root",
                     "run `sudo topowise doctor` to read the ACS registers", source)
    return Check("PCIe ACS", OK, f"off at all {len(switches)} switch ports", "", source)


def check_iommu(snap: Snapshot) -> Check:
    source = "sysfs /sys/kernel/iommu_groups/*/type, /proc/cmdline; " + NCCL_TROUBLE_DOC + ", IOMMU"
    io = snap.iommu
    words = f" (kernel: {' '.join(io.cmdline)})" if io.cmdline else ""
    if io.groups == 0:
        return Check("IOMMU", OK, "no IOMMU in use" + words, "", source)
    translated = [t for t in io.gpu_domain_types if t.startswith("DMA")]
    if translated:
        return Check("IOMMU", WARN, f"the GPUs' DMA is translated ({', '.join(io.gpu_domain_types)}){words}: "
                     "P2P goes through the root complex",
                     "boot with iommu=pt (intel_iommu=on iommu=pt) for passthrough", source)
    if io.gpu_domain_types:
        return Check("IOMMU", OK, f"passthrough ({', '.join(io.gpu_domain_types)}){words}", "", source)
    if "iommu=pt" in io.cmdline:
        return Check("IOMMU", OK, f"{io.groups} groups, iommu=pt on the kernel line", "", source)
    return Check("IOMMU", WARN if snap.gpus else OK, f"on ({io.groups} groups), domain type unknown{words}",
                 "boot with iommu=pt if the GPUs' groups are not `identity`" if snap.gpus else "", source)


def check_nic_numa(snap: Snapshot) -> Check:
    source = "sysfs /sys/class/infiniband/*/device/numa_node, /sys/bus/pci/devices/<gpu>/numa_node"
    rdma = [n for n in snap.nics if n.kind == "rdma"]
    nics = rdma or list(snap.nics)
    if not snap.gpus:
        return Check("NIC NUMA", OK, f"{len(nics)} NIC(s), no GPU to pair them with", "", source)
    if not nics:
        return Check("NIC NUMA", OK, "no PCI NIC (a single node: nothing crosses a network)", "", source)
    by_node: dict[int | None, list[str]] = {}
    for n in nics:
        by_node.setdefault(n.numa_node, []).append(n.name)
    far: dict[int, list[int]] = {}
    for g in snap.gpus:
        if g.numa_node is not None and g.numa_node not in by_node and None not in by_node:
            far.setdefault(g.numa_node, []).append(g.index)
    if not far:
        return Check("NIC NUMA", OK, f"every GPU has a NIC on its NUMA node ({len(nics)} NIC(s))", "", source)
    where = ", ".join(f"{n.name} on node {n.numa_node}" for n in nics[:4])
    evidence = "; ".join(f"GPU{_ranges(gpus)} on NUMA {node}: no NIC there" for node, gpus in sorted(far.items()))
    return Check("NIC NUMA", WARN, f"{evidence} ({where}): their traffic crosses the socket link",
                 "put a NIC in a slot of that socket; until then bind those ranks' CPUs to their GPU's node", source)


def check_nic_rails(snap: Snapshot) -> Check:
    """Where the board puts a NIC beside each GPU under one PCIe switch (HGX/DGX: a rail per GPU), every GPU
    should have one: GPUDirect RDMA then stays inside the switch (PIX/PXB) instead of crossing the CPU."""
    source = "sysfs device paths /sys/devices/pci*/.../<device> (the bridges above each GPU and NIC)"
    switches = {b.pci_bus_id for b in snap.bridges if not b.root_port}
    rdma = [n for n in snap.nics if n.kind == "rdma"] or list(snap.nics)

    def beside(g: GpuState) -> list[str]:
        mine = set(g.pci_path) & switches
        return [n.name for n in rdma if mine & set(n.pci_path)]

    paired = {g.index: beside(g) for g in snap.gpus}
    if not any(paired.values()):
        return Check("NIC rails", OK, "no NIC shares a PCIe switch with a GPU (no rails to check)", "", source)
    alone = [i for i, names in paired.items() if not names]
    if not alone:
        return Check("NIC rails", OK, "every GPU has a NIC under its PCIe switch", "", source)
    return Check("NIC rails", WARN, f"GPU{_ranges(alone)}: no NIC under its PCIe switch, where the other GPUs have "
                 "one: its RDMA traffic crosses the root complex",
                 "check the NIC's slot and link (`lspci -tv`, `ibstat`); NCCL picks the nearest NIC left", source)


def check_cpus(snap: Snapshot) -> Check:
    source = "os.sched_getaffinity, /sys/devices/system/node/node*/cpulist, /sys/bus/pci/devices/<gpu>/local_cpulist"
    c = snap.cpus
    nodes = len(c.numa_nodes) or 1
    evidence = f"{c.count} CPUs ({c.usable} usable here), {nodes} NUMA node{'s' if nodes > 1 else ''}"
    if snap.gpus and c.usable < len(snap.gpus):
        return Check("CPUs", WARN, f"{evidence}: fewer usable CPUs than GPUs",
                     "ask the scheduler for more CPUs (e.g. Slurm --cpus-per-task)", source)
    allowed = parse_cpulist(c.affinity)
    # a rank started from here inherits this affinity: none of its GPU's own CPUs means every host
    # copy and kernel launch crosses the socket link
    far = [g.index for g in snap.gpus if allowed and g.local_cpus and not allowed & parse_cpulist(g.local_cpus)]
    if far:
        return Check("CPUs", WARN, f"{evidence}; this process may run only on CPUs {c.affinity}, none near "
                     f"GPU{_ranges(far)}", "let the job use every socket (Slurm: --cpus-per-task, no "
                     "--cpu-bind to one socket), then bind each rank to its GPU's node", source)
    return Check("CPUs", OK, evidence, "", source)


# --- the environment -----------------------------------------------------------------------------------
def check_environment(snap: Snapshot) -> list[Check]:
    env = snap.environment
    out = []
    if _true(env.get("NCCL_P2P_DISABLE")):
        has_nvlink = any(any(g.nvlink_up) for g in snap.gpus)
        cost = p2p_cost(snap)
        out.append(Check("NCCL_P2P_DISABLE", FAIL if has_nvlink else WARN,
                         "=1: NCCL uses neither NVLink nor PCIe P2P" + (f"; {cost}" if cost else ""),
                         "unset NCCL_P2P_DISABLE (look in ~/.bashrc, the job script, the container's env)",
                         NCCL_ENV_DOC + ", NCCL_P2P_DISABLE"))
    if _true(env.get("NCCL_SHM_DISABLE")):
        out.append(Check("NCCL_SHM_DISABLE", WARN, "=1: no shared-memory transport inside the node (the cost model "
                         "does not price it)", "unset NCCL_SHM_DISABLE unless a container lacks /dev/shm",
                         NCCL_ENV_DOC + ", NCCL_SHM_DISABLE"))
    if _true(env.get("NCCL_IB_DISABLE")):
        rdma = [n.name for n in snap.nics if n.kind == "rdma"]
        out.append(Check("NCCL_IB_DISABLE", FAIL if rdma else OK,
                         f"=1 with RDMA NICs ({', '.join(rdma[:4])}): NCCL falls back to TCP sockets across nodes"
                         if rdma else "=1, and no RDMA NIC here", "unset NCCL_IB_DISABLE" if rdma else "",
                         NCCL_ENV_DOC + ", NCCL_IB_DISABLE"))
    for name in ("NCCL_ALGO", "NCCL_PROTO"):
        if env.get(name):
            out.append(Check(name, WARN, f"={env[name]}: forced for every size and group (the cost model does not "
                             "price it here)", f"unset {name} and let NCCL's tuner choose, unless a measurement "
                             "showed the forced one faster", NCCL_ENV_DOC + f", {name}"))
    if env.get("NCCL_NVLS_ENABLE", "").strip() == "0":
        cost = nvls_cost(snap)
        out.append(Check("NCCL_NVLS_ENABLE", WARN if cost else OK,
                         "=0: no NVLink SHARP (the NVSwitch's in-network reduction)" + (f"; {cost}" if cost else
                                                                                        ", which this board lacks"),
                         "unset NCCL_NVLS_ENABLE unless NVLS buffers do not fit in memory" if cost else "",
                         NCCL_ENV_DOC + ", NCCL_NVLS_ENABLE"))
    if _true(env.get("CUDA_LAUNCH_BLOCKING")):
        out.append(Check("CUDA_LAUNCH_BLOCKING", WARN, "=1: every kernel launch waits for the GPU (debugging only)",
                         "unset CUDA_LAUNCH_BLOCKING", "CUDA Programming Guide, CUDA Environment Variables"))
    if not out:
        shown = ", ".join(f"{k}={v}" for k, v in env.items())
        out.append(Check("environment", OK, "nothing disables a transport or forces an algorithm"
                         + (f" ({shown})" if shown else " (no NCCL_*/CUDA_* set)"), "", NCCL_ENV_DOC))
    return out


def p2p_cost(snap: Snapshot) -> str:
    """What NCCL_P2P_DISABLE=1 costs an all-reduce on this wiring, from the cost model: the node's
    widest NVLink group with NVLink and without (topology.without_nvlink, the --fabric pcie what-if)."""
    if not snap.topology:
        return ""
    from topowise.costmodel import comm
    from topowise.costmodel.profile import default_profile
    from topowise.topology.model import Topology

    topo = Topology.from_dict(snap.topology, where="snapshot topology")
    group = max(topo.islands(), key=len)
    if len(group) < 2:
        return ""
    profile = default_profile()

    def busbw(wiring) -> float:
        gbps, link = comm.group_link(wiring, group)
        return comm.achieved_gbps("all_reduce", len(group), gbps, link, profile)

    with_p2p, without = busbw(topo), busbw(topo.without_nvlink())
    return (f"all-reduce over GPU{_ranges(group)} predicted {with_p2p:.0f} GB/s busbw with NVLink, "
            f"{without:.0f} without")


def nvls_cost(snap: Snapshot) -> str:
    """What NCCL_NVLS_ENABLE=0 costs an all-reduce over the whole node: the cost model with and without
    NVLS ("" where the board has no NVLS, so nothing is lost)."""
    if not snap.topology:
        return ""
    from dataclasses import replace

    from topowise.costmodel import comm
    from topowise.costmodel.profile import default_profile
    from topowise.topology.model import Topology

    topo = Topology.from_dict(snap.topology, where="snapshot topology")
    gbps, link = comm.group_link(topo, topo.indices)
    profile = default_profile()
    on = comm.achieved_gbps("all_reduce", topo.num_gpus, gbps, link, profile)
    off = comm.achieved_gbps("all_reduce", topo.num_gpus, gbps, link, replace(profile, nvls_enabled=False))
    if on <= off:
        return ""
    return f"all-reduce over GPU{_ranges(topo.indices)} predicted {on:.0f} GB/s busbw with NVLS, {off:.0f} without"


def _true(value: str | None) -> bool:
    return value is not None and value.strip().lower() not in ("", "0", "false", "no", "off")


def _ranges(indices) -> str:
    """[0, 1, 2, 5] -> "0-2,5"."""
    return format_cpulist(indices)
