"""Warnings about a topology and the environment a job would run in: things that silently cost bandwidth.

How NCCL reads its variables (NCCL src/graph/paths.cc, `ncclGetLevel`, `ncclTopoCheckP2p`):
- NCCL_P2P_DISABLE: only the value 1 disables P2P (it sets the P2P level to LOC).
- NCCL_P2P_LEVEL: P2P is used between two GPUs when their path type <= the level, in the order
  LOC < NVL < NVB < C2C < PIX < PXB < PXN < PHB < SYS. So only LOC (or 0) takes NVLink away; NVL, PIX
  keep NVLink but turn off P2P over PCIe paths that NCCL's default level (PXB) would use.
  Legacy integers: 0 LOC, 1 PIX, 2 PXB, 3 PHB, 4 and above SYS.
Without P2P, NCCL copies through host shared memory (SHM); without SHM too, through the network stack.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from topowise.topology.model import NVLINK, Topology

# Path distance as NCCL orders it (paths.cc topoPathTypeStr); PCIe classes from `nvidia-smi topo -m`.
_DISTANCE = {"LOC": 0, "NVL": 1, "NVB": 2, "C2C": 3, "PIX": 4, "PXB": 5, "PXN": 6, "PHB": 8, "NODE": 8, "SYS": 9}
_LEGACY_LEVEL = ("LOC", "PIX", "PXB", "PHB", "SYS")  # paths.cc levelsOldToNew (5 and above: SYS)
_DEFAULT_P2P_LEVEL = "PXB"  # ncclTopoCheckP2p: default P2P level on Intel and most AMD hosts
# A chosen set of GPUs whose ring runs under half the rate of the best set of the same size is worth a
# warning: a ring's collectives scale with that rate, so the job would pay more than 2x in communication.
SLOWER_THAN_BEST = 0.5


def warnings(topo: Topology, selection: Iterable[int] | None = None,
             environ: Mapping[str, str] | None = None) -> list[str]:
    """Each warning one sentence: what is wrong, what it costs, what to do."""
    environ = os.environ if environ is None else environ
    gpus = tuple(selection) if selection is not None else topo.indices
    out: list[str] = []
    out += _island_warnings(topo, gpus, explicit=selection is not None)
    if selection is not None and not out:  # spanning islands is said above, with its own advice
        out += _slower_than_best(topo, gpus)
    out += _p2p_unsupported(topo, gpus)
    out += _nccl_env(topo, gpus, environ)
    out += _cuda_visible_devices(topo, environ)
    return out


def _island_warnings(topo: Topology, gpus: tuple[int, ...], explicit: bool) -> list[str]:
    spanned = topo.islands_spanned(gpus)
    if len(spanned) < 2 or all(len(i) == 1 for i in topo.islands()):
        return []  # one island, or no NVLink anywhere: nothing faster to lose
    # The fastest link inside the islands the job touches: what it would get if it stayed in one.
    inside = {g for isl in spanned for g in isl}
    fastest = max(l.gbps for l in topo.links if l.a in inside and l.b in inside)
    bottleneck = topo.bottleneck_gbps(gpus)
    who = f"GPUs {_join(gpus)}" if explicit else f"all {len(gpus)} GPUs"
    islands = " ".join("{" + _join(i) + "}" for i in spanned)
    return [f"{who} span {len(spanned)} NVLink islands ({islands}): a ring over them runs at "
            f"{bottleneck:g} GB/s, the link between islands, vs {fastest:g} GB/s on the fastest link inside "
            f"them ({fastest / bottleneck:.1f}x slower); keep a job inside one island or use HSDP "
            "with shard groups on the islands"]


def _slower_than_best(topo: Topology, gpus: tuple[int, ...]) -> list[str]:
    """The selection's ring against the best selection of as many GPUs (e.g. V100 hybrid cube-mesh: one
    NVLink island, but GPUs 0 and 5 are joined only through the CPUs at 15.75 GB/s, while 0 and 3 have
    two NVLinks at 50 GB/s)."""
    if len(set(gpus)) < 2:
        return []
    best = topo.best_subset(len(set(gpus)))
    rate, best_rate = topo.bottleneck_gbps(gpus), topo.bottleneck_gbps(best)
    if rate >= SLOWER_THAN_BEST * best_rate:
        return []
    chosen = sorted(set(gpus))
    # the link that sets the rate: any ring over these GPUs crosses one of this speed
    pinch = next((topo.link(a, b) for i, a in enumerate(chosen) for b in chosen[i + 1:]
                  if topo.link(a, b).gbps == rate), None)
    why = "" if pinch is None else f" (it must cross {_kind(pinch)}, e.g. between GPUs {pinch.a} and {pinch.b})"
    return [f"GPUs {_join(gpus)} run a ring at {rate:g} GB/s per direction{why}, under half the {best_rate:g} "
            f"GB/s of the best {len(best)} GPUs here ({_join(best)}); choose those, or expect collectives "
            f"{best_rate / rate:.1f}x slower"]


def _p2p_unsupported(topo: Topology, gpus: tuple[int, ...]) -> list[str]:
    chosen = set(gpus)
    bad = [l for l in topo.links if not l.p2p_supported and l.a in chosen and l.b in chosen]
    if not bad:
        return []
    pairs = ", ".join(f"{l.a}-{l.b} ({_kind(l)})" for l in bad[:6]) + (" ..." if len(bad) > 6 else "")
    return [f"P2P is reported unsupported between GPUs {pairs}: NCCL copies through host memory there "
            "(check IOMMU/ACS settings and the driver; `nvidia-smi topo -p2p r` shows the same)"]


def _nccl_env(topo: Topology, gpus: tuple[int, ...], env: Mapping[str, str]) -> list[str]:
    out = []
    chosen = set(gpus)
    links = [l for l in topo.links if l.a in chosen and l.b in chosen]
    has_nvlink = any(l.is_nvlink for l in links)
    p2p_off = _int(env.get("NCCL_P2P_DISABLE")) == 1
    level = _p2p_level(env.get("NCCL_P2P_LEVEL"))
    if p2p_off:
        what = "NVLink and PCIe peer-to-peer" if has_nvlink else "PCIe peer-to-peer"
        out.append(f"NCCL_P2P_DISABLE=1 turns off {what}: NCCL copies through host memory (on the 2x H200 "
                   "here all_reduce busbw fell from 329 to 27.7 GB/s at 1 GiB); unset it")
    elif level is not None:
        raw = env["NCCL_P2P_LEVEL"]
        if level == "LOC":
            out.append(f"NCCL_P2P_LEVEL={raw} means LOC: P2P is off on every pair"
                       + (", NVLink included" if has_nvlink else "") + "; unset it")
        else:
            lost = [l for l in links if not l.is_nvlink
                    and _DISTANCE[level] < _DISTANCE[l.kind] <= _DISTANCE[_DEFAULT_P2P_LEVEL]]
            if lost:
                out.append(f"NCCL_P2P_LEVEL={raw} ({level}) turns off P2P on {len(lost)} PCIe pair(s) that NCCL "
                           f"would use by default (e.g. GPUs {lost[0].a}-{lost[0].b}, {lost[0].kind}); unset it")
    elif env.get("NCCL_P2P_LEVEL", "").strip():
        out.append(f"NCCL_P2P_LEVEL={env['NCCL_P2P_LEVEL']} is not a level NCCL knows "
                   "(LOC, NVL, PIX, PXB, PHB, SYS or 0-4); NCCL ignores it")
    if _int(env.get("NCCL_SHM_DISABLE")) == 1 and (p2p_off or level == "LOC"):
        out.append("NCCL_SHM_DISABLE=1 with P2P off leaves NCCL only the network transport between GPUs "
                   "of one node (sockets or IB loopback): slower still; unset both")
    for var in ("NCCL_ALGO", "NCCL_PROTO"):
        if env.get(var, "").strip():
            out.append(f"{var}={env[var]} is forced: NCCL cannot pick by message size and group (e.g. NVLS or "
                       "Tree on NVSwitch boards: ~480 vs ~370 GB/s with Ring on 8x H100); unset it unless measured")
    if _int(env.get("NCCL_IB_DISABLE")) == 1 and topo.nics:
        out.append(f"NCCL_IB_DISABLE=1 while this node has {len(topo.nics)} NIC(s) ({topo.nics[0].name}, ...): "
                   "traffic between nodes goes over TCP sockets; unset it for multi-node jobs")
    if topo.nvswitch and len(gpus) > 2 and _int(env.get("NCCL_NVLS_ENABLE")) == 0:
        out.append("NCCL_NVLS_ENABLE=0 turns off NVLink SHARP on this NVSwitch board: all_reduce on 8x H100 "
                   "reaches ~370 instead of ~480 GB/s busbw")
    return out


def _cuda_visible_devices(topo: Topology, env: Mapping[str, str]) -> list[str]:
    value = env.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return []
    visible = [v for v in value.split(",") if v.strip()]
    if len(visible) >= topo.num_gpus:
        return []
    return [f"CUDA_VISIBLE_DEVICES={value!r} shows {len(visible)} of the {topo.num_gpus} GPUs; CUDA renumbers "
            "the visible ones from 0, while this topology (and --gpus) uses nvidia-smi's numbering"]


def _p2p_level(value: str | None) -> str | None:
    """NCCL_P2P_LEVEL as NCCL reads it -> a path name, or None when unset or unknown."""
    if value is None or not value.strip():
        return None
    value = value.strip()
    if value in _DISTANCE and value != "NODE":
        return value
    if value[0].isdigit():
        number = _int(value)
        if number is not None:
            return _LEGACY_LEVEL[min(number, len(_LEGACY_LEVEL) - 1)]
    return None


def _int(value: str | None) -> int | None:
    """strtol as NCCL uses it: leading digits count, junk reads as None."""
    if value is None:
        return None
    digits = ""
    for ch in value.strip():
        if not ch.isdigit():
            break
        digits += ch
    return int(digits) if digits else None


def _kind(link) -> str:
    return f"NV{link.nvlinks}" if link.kind == NVLINK else link.kind


def _join(gpus: Iterable[int]) -> str:
    return ",".join(str(g) for g in gpus)
