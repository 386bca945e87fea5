"""The machine being measured, as a Topology: the GPUs NVML sees, or gloo processes on one CPU."""

from __future__ import annotations

from topowise.costmodel.comm import group_link
from topowise.costmodel.profile_store import cpu_model
from topowise.errors import UsageError
from topowise.topology.model import Gpu, Link, Topology

# gloo between processes of one CPU has no line rate; the CPU topology says this nominal one, and the
# fitted comm_efficiency is relative to it (busbw = 10 GB/s x efficiency).
CPU_NOMINAL_LINE_GBPS = 10.0


def cpu_topology(nproc: int) -> Topology:
    """The CPU processes as a Topology: one 'GPU' per process, named by the CPU model, joined by a
    host link at the nominal gloo rate."""
    name = f"CPU {cpu_model()}"
    gpus = tuple(Gpu(i, name) for i in range(nproc))
    links = tuple(Link(a, b, "SYS", CPU_NOMINAL_LINE_GBPS) for a in range(nproc) for b in range(a + 1, nproc))
    return Topology("cpu", gpus, links,
                    source=f"{nproc} gloo processes on one CPU (nominal {CPU_NOMINAL_LINE_GBPS:g} GB/s)")


def live_topology(device: str, nproc: int) -> Topology:
    """This machine's first `nproc` GPUs (NVML), or `nproc` processes on its CPU."""
    if device == "cpu":
        return cpu_topology(nproc)
    from topowise.topology.nvml import discover

    topo = discover()
    if topo.num_gpus < nproc:
        raise UsageError(f"--nproc {nproc} needs {nproc} GPUs; NVML sees {topo.num_gpus}")
    return topo.restricted_to(topo.indices[:nproc])


def link_class(topo: Topology, gpus: tuple[int, ...], fabric: str) -> tuple[str, float]:
    """(link class, line GB/s) a collective over `gpus` uses on `fabric` (the cost model's rule)."""
    t = topo.without_nvlink() if fabric == "pcie" else topo
    line, link = group_link(t, gpus)
    return link, line
