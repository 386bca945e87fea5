"""Writes the doctor's fixture snapshots: two healthy boards and one fault each (run from the repository root:
`PYTHONPATH=$PWD python tests/data/doctor/make_snapshots.py`). Each fault is the healthy board with the one
field changed that NVML or sysfs would show; the values of the healthy boards follow an HGX H100 and a
2-socket H100 NVL server as `nvidia-smi -q` and `lspci -t` show them (bus numbers made up, shapes not)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from topowise.doctor.snapshot import Cpus, GpuState, Iommu, NicState, PciBridge, Snapshot
from topowise.topology.presets import load_preset

HERE = Path(__file__).parent
TAKEN_AT = "2026-12-05T09:00:00+00:00"
SOCKET_CPUS = {0: "0-55,112-167", 1: "56-111,168-223"}  # 2x 56-core sockets, SMT on
CPUS = Cpus(count=224, usable=224, numa_nodes=tuple(SOCKET_CPUS.items()), affinity="0-223")
IOMMU_PT = Iommu(groups=212, gpu_domain_types=("identity",), cmdline=("intel_iommu=on", "iommu=pt"))
ACS_ROOT_PORT = 0x5F  # root ports keep ACS on (isolation between root ports); the switch ports below are what count


def _gpu(index: int, name: str, links: int, bus: str, path: tuple[str, ...], power: float) -> GpuState:
    node = index // 4
    return GpuState(
        index=index, name=name, pci_bus_id=bus, pcie_gen=5, pcie_width=16, pcie_max_gen=5, pcie_max_width=16,
        pcie_gpu_max_gen=5, nvlink_up=(True,) * links, clock_event_reasons=0, sm_clock_mhz=1980,
        sm_clock_max_mhz=1980, temperature_c=52 + index % 3, slowdown_temperature_c=87, power_w=power * 0.9,
        power_limit_w=power, power_default_limit_w=power, ecc_uncorrected_volatile=0, retired_pages_pending=False,
        remapped_rows_pending=False, remapped_rows_failure=False, persistence_mode=True, mig_mode=False,
        numa_node=node, local_cpus=SOCKET_CPUS[node], pci_path=path)


def hgx_h100() -> Snapshot:
    """8x H100 SXM, NV18 to the NVSwitches; each GPU and its NIC under one PCIe switch (a rail per GPU)."""
    gpus, nics, bridges = [], [], []
    for i in range(8):
        root, up, down_gpu, down_nic = (f"0000:{0x10 * (i + 1):02x}:01.0", f"0000:{0x10 * (i + 1) + 1:02x}:00.0",
                                        f"0000:{0x10 * (i + 1) + 2:02x}:00.0", f"0000:{0x10 * (i + 1) + 2:02x}:01.0")
        gpus.append(_gpu(i, "NVIDIA H100 80GB HBM3", 18, f"0000:{0x10 * (i + 1) + 3:02x}:00.0",
                         (root, up, down_gpu), 700.0))
        nics.append(NicState(name=f"mlx5_{i}", kind="rdma", pci_bus_id=f"0000:{0x10 * (i + 1) + 4:02x}:00.0",
                             numa_node=i // 4, pci_path=(root, up, down_nic)))
        bridges += [PciBridge(pci_bus_id=root, root_port=True, acs_ctrl=ACS_ROOT_PORT),
                    PciBridge(pci_bus_id=up, root_port=False, acs_ctrl=0),
                    PciBridge(pci_bus_id=down_gpu, root_port=False, acs_ctrl=0),
                    PciBridge(pci_bus_id=down_nic, root_port=False, acs_ctrl=0)]
    return Snapshot(host="hgx-h100", taken_at=TAKEN_AT, gpu_note="", driver="550.90.07", gpus=tuple(gpus),
                    topology=load_preset("hgx-h100-8").to_dict(), bridges=tuple(bridges), nics=tuple(nics),
                    iommu=IOMMU_PT, cpus=CPUS, environment={"NCCL_DEBUG": "WARN"})


def nvl_h100() -> Snapshot:
    """8x H100 NVL in root-port slots (no PCIe switch), NV12 bridges in pairs; one 400G NIC per socket."""
    gpus = [_gpu(i, "NVIDIA H100 NVL", 12, f"0000:{0x20 * (i + 1) + 1:02x}:00.0",
                 (f"0000:{0x20 * (i + 1):02x}:01.0",), 400.0) for i in range(8)]
    nics = [NicState(name=f"mlx5_{s}", kind="rdma", pci_bus_id=f"0000:{0xe1 + 0x10 * s:02x}:00.0", numa_node=s,
                     pci_path=(f"0000:{0xe0 + 0x10 * s:02x}:01.0",)) for s in (0, 1)]
    bridges = [PciBridge(pci_bus_id=p, root_port=True, acs_ctrl=ACS_ROOT_PORT)
               for p in [g.pci_path[0] for g in gpus] + [n.pci_path[0] for n in nics]]
    return Snapshot(host="nvl-h100", taken_at=TAKEN_AT, gpu_note="", driver="550.90.07", gpus=tuple(gpus),
                    topology=load_preset("h100-nvl-8").to_dict(), bridges=tuple(bridges), nics=tuple(nics),
                    iommu=IOMMU_PT, cpus=CPUS, environment={})


def _with_gpu(snap: Snapshot, index: int, **changes) -> Snapshot:
    gpus = tuple(replace(g, **changes) if g.index == index else g for g in snap.gpus)
    return replace(snap, gpus=gpus)


def snapshots() -> dict[str, Snapshot]:
    hgx, nvl = hgx_h100(), nvl_h100()
    down = list(hgx.gpus[5].nvlink_up)
    down[7] = False
    return {
        "healthy_hgx_h100": hgx,
        "healthy_nvl_h100": nvl,
        # a GPU that came back at PCIe Gen3 x8 after a reseat, busy (not idle: Gen drops only at idle)
        "fault_pcie_gen3_x8": _with_gpu(hgx, 3, pcie_gen=3, pcie_width=8),
        "fault_nvlink_down": _with_gpu(hgx, 5, nvlink_up=tuple(down)),
        # ACS P2P request/completion redirect on (SV|RR|CR|UF = 0x1d) at every switch port
        "fault_acs_on": replace(hgx, bridges=tuple(b if b.root_port else replace(b, acs_ctrl=0x1D)
                                                  for b in hgx.bridges)),
        # both NICs of the NVL server in slots of socket 1: GPUs 0-3 (socket 0) reach them over the socket link
        "fault_nic_other_socket": replace(nvl, nics=tuple(replace(n, numa_node=1) for n in nvl.nics)),
        # mlx5_3 moved from GPU3's PCIe switch to a root-port slot of the same socket
        "fault_nic_off_its_switch": replace(hgx, nics=tuple(replace(n, pci_path=n.pci_path[:1]) if n.name == "mlx5_3"
                                                            else n for n in hgx.nics)),
        "fault_nccl_p2p_disable": replace(hgx, environment={"NCCL_DEBUG": "WARN", "NCCL_P2P_DISABLE": "1"}),
        # HW and SW thermal slowdown: 91 C against an 87 C slowdown threshold, SM clock down
        "fault_thermal_throttle": _with_gpu(hgx, 2, clock_event_reasons=0x60, temperature_c=91, sm_clock_mhz=1290),
        # a job step bound to socket 0's CPUs: the ranks of GPUs 4-7 would run a socket away from them
        "fault_cpus_one_socket": replace(hgx, cpus=replace(CPUS, usable=112, affinity=SOCKET_CPUS[0])),
        "fault_nccl_nvls_disable": replace(hgx, environment={"NCCL_NVLS_ENABLE": "0"}),
        "fault_row_remap_pending": _with_gpu(hgx, 6, remapped_rows_pending=True),
        "fault_iommu_translated": replace(hgx, iommu=Iommu(groups=212, gpu_domain_types=("DMA-FQ",),
                                                            cmdline=("intel_iommu=on",))),
    }


if __name__ == "__main__":
    for name, snap in snapshots().items():
        (HERE / f"{name}.json").write_text(snap.to_json() + "\n")
        print(name)
