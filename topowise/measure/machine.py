"""This machine as the parent of a measurement sees it: its live wiring (NVML) and the GPUs it may use."""

from __future__ import annotations

import os


def live_topology():
    """This machine's Topology from NVML, or None (no GPU, no NVML)."""
    try:
        from topowise.topology.nvml import discover

        return discover()
    except Exception:  # no driver, no pynvml, no GPU: the measurement goes on without the wiring
        return None


def live_islands(num_gpus: int) -> tuple[tuple[int, ...], ...] | None:
    """NVLink islands of the first `num_gpus` GPUs of this machine, when live discovery works."""
    topo = live_topology()
    if topo is None or topo.num_gpus < num_gpus:
        return None
    return topo.restricted_to(range(num_gpus)).islands()


def visible_gpus(count: int) -> tuple[int, ...]:
    """Physical GPU index of each of the first `count` local ranks (CUDA_VISIBLE_DEVICES when it lists indices)."""
    text = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    try:
        listed = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:  # UUIDs: keep local indices
        listed = ()
    return listed[:count] if listed else tuple(range(count))
