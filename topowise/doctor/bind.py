"""What `launch` binds from what the doctor found: each rank's CPUs and memory on its GPU's NUMA node, the NICs
NCCL is told of where their names run against PCI order, and PyTorch's flight recorder into the run folder.

`launch_binding` is pure (a Snapshot, the plan's GPUs, what this machine has -> torchrun flags, a wrapper,
environment); `python -m topowise.doctor.bind CMD...` is the wrapper itself, for a PyTorch without
torchrun's `--numa-binding`. docs/launch.md says what each setting does and where it comes from.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from topowise.doctor.snapshot import NicState, Snapshot, format_cpulist, parse_cpulist

TORCHRUN_NUMA_FLAG = "--numa-binding=node"  # torchrun >= 2.9: each rank on the CPUs of its GPU's NUMA node
NODES_VAR = "TOPOWISE_BIND_NODES"  # the wrapper's NUMA node per local rank: "0,0,1,1"
CPUS_VAR = "TOPOWISE_BIND_CPUS"  # the wrapper's CPUs per local rank: "0-55,112-167;0-55,112-167;..."
# The flight recorder (torch/csrc/distributed/c10d/FlightRecorder, ProcessGroupNCCL): entries kept per rank,
# a dump when the NCCL watchdog times out, and where; monitor hang reads the dumps (topowise/monitor/hang.py)
FLIGHT_RECORDER_ENTRIES = 2000  # PyTorch's own example value; each entry is a few hundred bytes of host memory
DUMP_PREFIX = "nccl_trace_rank_"  # the recorder's default file name prefix; the rank is appended


@dataclass(frozen=True)
class Binding:
    flags: tuple[str, ...] = ()  # torchrun flags (--numa-binding=node)
    wrap: tuple[str, ...] = ()  # a command put before the training command (this module's wrapper)
    env: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()  # what was bound and why, or why nothing was


def torch_has_numa_binding() -> bool:
    """Whether the installed PyTorch's torchrun has --numa-binding (torch/numa/binding.py), without importing torch."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return False
    return bool(spec and spec.origin) and (Path(spec.origin).parent / "numa" / "binding.py").is_file()


def have_numactl() -> bool:
    return shutil.which("numactl") is not None


def launch_binding(snap: Snapshot, gpus: tuple[int, ...], *, torch_numa: bool, numactl: bool,
                   python: str = sys.executable) -> Binding:
    """CPUs and memory per rank (local rank i runs on GPU gpus[i]) and the NICs, from the snapshot."""
    cpu = numa_binding(snap, gpus, torch_numa=torch_numa, numactl=numactl, python=python)
    hca, why = nic_env(snap, gpus)
    env = {**cpu.env, **hca}
    return Binding(flags=cpu.flags, wrap=cpu.wrap, env=env, notes=cpu.notes + ((why,) if why else ()))


def numa_binding(snap: Snapshot, gpus: tuple[int, ...], *, torch_numa: bool, numactl: bool,
                 python: str = sys.executable) -> Binding:
    by_index = {g.index: g for g in snap.gpus}
    if not snap.gpus:
        return Binding(notes=("no GPU read on this machine: no NUMA binding",))
    missing = [g for g in gpus if g not in by_index]
    if missing:
        return Binding(notes=(f"GPU {missing[0]} is not among the {len(snap.gpus)} the doctor read: no NUMA binding",))
    nodes = [by_index[g].numa_node for g in gpus]
    if len(snap.cpus.numa_nodes) < 2 or None in nodes:
        return Binding(notes=("one NUMA node (or the GPUs' node unknown): nothing to bind",))
    where = ", ".join(f"GPU{g} on node {n}" for g, n in zip(gpus, nodes))
    if torch_numa and numactl:
        return Binding(flags=(TORCHRUN_NUMA_FLAG,),
                       notes=(f"torchrun {TORCHRUN_NUMA_FLAG}: each rank on its GPU's NUMA node's CPUs ({where}); "
                              "memory follows by first touch",))
    node_cpus = dict(snap.cpus.numa_nodes)
    cpus = [format_cpulist(parse_cpulist(by_index[g].local_cpus or node_cpus.get(n, ""))) for g, n in zip(gpus, nodes)]
    how = ("numactl --cpunodebind --preferred" if numactl else
           "sched_setaffinity (no numactl here: memory follows by first touch)")
    why = "" if torch_numa else " (this PyTorch's torchrun has no --numa-binding)"
    return Binding(wrap=(python, "-m", "topowise.doctor.bind"),
                   env={NODES_VAR: ",".join(str(n) for n in nodes), CPUS_VAR: ";".join(cpus)},
                   notes=(f"python -m topowise.doctor.bind{why}: each rank on its GPU's NUMA node by {how} ({where})",))


def nics_in_pci_order(nics: tuple[NicState, ...]) -> bool:
    """The RDMA NICs' names (mlx5_0, mlx5_1, ...) run in the order of their PCI addresses."""
    rdma = [n for n in nics if n.kind == "rdma" and n.pci_bus_id]
    by_name = sorted(rdma, key=lambda n: _name_key(n.name))
    by_bus = sorted(rdma, key=lambda n: n.pci_bus_id)
    return [n.name for n in by_name] == [n.name for n in by_bus]


def nic_env(snap: Snapshot, gpus: tuple[int, ...]) -> tuple[dict[str, str], str]:
    """NCCL_IB_HCA with the exact names of the NICs beside the planned GPUs, only where the names run against PCI
    order (a BIOS that numbered a switch's NICs backwards, nccl #820): a list written by name elsewhere would
    then pick another GPU's rail. NCCL still pairs each GPU with its nearest NIC among those listed."""
    if nics_in_pci_order(snap.nics):
        return {}, ""
    switches = {b.pci_bus_id for b in snap.bridges if not b.root_port}
    rdma = [n for n in snap.nics if n.kind == "rdma"]
    by_index = {g.index: g for g in snap.gpus}
    beside = []
    for g in gpus:
        mine = set(by_index[g].pci_path) & switches if g in by_index else set()
        beside += [n.name for n in rdma if mine & set(n.pci_path) and n.name not in beside]
    if not beside:
        return {}, "the NICs' names run against PCI order, and no NIC shares a PCIe switch with the planned GPUs: " \
                   "NCCL_IB_HCA left to NCCL"
    value = "=" + ",".join(beside)
    return {"NCCL_IB_HCA": value}, (f"NCCL_IB_HCA={value}: the NICs' names run against PCI order; these sit beside "
                                    "the planned GPUs")


def flight_recorder_env(run_dir: str) -> dict[str, str]:
    """PyTorch's flight recorder on, dumping into `run_dir` when a collective times out (monitor hang DIR reads it).
    Both names of each setting: PyTorch 2.4-2.6 read the TORCH_NCCL_ ones, later ones also TORCH_FR_."""
    prefix = os.path.join(run_dir, DUMP_PREFIX)
    return {"TORCH_NCCL_TRACE_BUFFER_SIZE": str(FLIGHT_RECORDER_ENTRIES),
            "TORCH_FR_BUFFER_SIZE": str(FLIGHT_RECORDER_ENTRIES),  # gloo's recorder too
            "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
            "TORCH_FR_DUMP_TEMP_FILE": prefix,
            "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": prefix}


def _name_key(name: str) -> tuple[str, int]:
    """mlx5_10 after mlx5_9."""
    stem, _, number = name.rpartition("_")
    return (stem, int(number)) if number.isdigit() else (name, -1)


# --- the wrapper: python -m topowise.doctor.bind CMD... ----------------------------------------------------
def bound_command(command: list[str], environ, numactl: str | None) -> tuple[list[str], set[int] | None]:
    """(argv to exec, CPUs to set on this process first or None): this local rank's node and CPUs from the
    environment launch set. With numactl, numactl binds CPUs and memory; without, the CPUs are set here."""
    local = int(environ.get("LOCAL_RANK", "0"))
    nodes = [w for w in environ.get(NODES_VAR, "").split(",") if w]
    cpus = environ.get(CPUS_VAR, "").split(";")
    if local >= len(nodes):
        return list(command), None  # nothing given for this rank: run it unbound
    if numactl:
        node = nodes[local]
        return [numactl, f"--cpunodebind={node}", f"--preferred={node}", *command], None
    return list(command), parse_cpulist(cpus[local] if local < len(cpus) else "")


def main(argv: list[str] | None = None) -> None:
    command = list(sys.argv[1:] if argv is None else argv)
    if not command:
        sys.stderr.write("usage: python -m topowise.doctor.bind CMD [ARGS...] (started by topowise launch)\n")
        raise SystemExit(2)
    run, cpus = bound_command(command, os.environ, shutil.which("numactl"))
    if cpus:
        allowed = cpus & os.sched_getaffinity(0)
        if allowed:  # CPUs the job was not given stay out of reach; an empty set would refuse to bind at all
            os.sched_setaffinity(0, allowed)
    os.execvp(run[0], run)


if __name__ == "__main__":
    main()
