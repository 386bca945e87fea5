"""Topology sources: presets, our JSON, `nvidia-smi topo -m` text, live NVML.

One node builds a `Topology`, several nodes with the network between them a `Cluster`
("4x hgx-h100-8+ib-ndr", racks apart "16x hgx-h100-8+ib-ndr/rack=4,apart=100m", regions joined by a WAN
"2x (2x hgx-h100-8+ib-ndr) + wan-100gbit-30ms-aes-gcm" or the preset "two-region-h100"; docs/networks.md);
both are a `Wiring` (topology/model.py), the interface everything else uses.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from topowise import hardware
from topowise.errors import UsageError
from topowise.topology.cluster import CLUSTER_PRESETS, EXAMPLES, Cluster, load_cluster
from topowise.topology.cluster import FORMAT as CLUSTER_FORMAT
from topowise.topology.model import Topology, Wiring
from topowise.topology.presets import PRESETS, load_preset
from topowise.topology.smi_text import UNNAMED, parse_topo_text

__all__ = ["Cluster", "Topology", "Wiring", "load_topologies", "load_topology", "topology_from_text"]


def load_topology(name_or_path: str, gpu_name: str | None = None, *, need_gpu_model: bool = False) -> Wiring:
    """A preset name, a cluster name, a path to `topo --json` output or `nvidia-smi topo -m` text, or
    `-` for stdin.

    gpu_name (--gpu-name): the GPU model of `nvidia-smi topo -m` text, which does not name it; refused
    for sources that name their GPUs. need_gpu_model: the caller predicts (peak FLOP/s, memory), so
    a topology whose GPU model is unknown is refused with what to give instead."""
    return load_topologies([name_or_path], gpu_name, need_gpu_model=need_gpu_model)[0]


def load_topologies(names: list[str], gpu_name: str | None = None, *,
                    need_gpu_model: bool = False) -> list[Wiring]:
    """`load_topology` for several names; gpu_name applies to the `nvidia-smi topo -m` text among them."""
    loaded = [_load(name, gpu_name) for name in names]
    if gpu_name is not None and not any(from_text for _, from_text in loaded):
        wiring = loaded[0][0] if len(loaded) == 1 else None
        named = f"; {names[0]!r} names its GPUs ({wiring.gpus[0].name})" if wiring is not None and wiring.gpus else ""
        raise UsageError(f"--gpu-name applies to `nvidia-smi topo -m` text{named}; drop --gpu-name")
    if need_gpu_model:
        for name, (wiring, from_text) in zip(names, loaded):
            _check_gpu_model(wiring, name, from_text)
    return [wiring for wiring, _ in loaded]


def _load(name_or_path: str, gpu_name: str | None) -> tuple[Wiring, bool]:
    """(the wiring, whether it came from `nvidia-smi topo -m` text)."""
    if name_or_path in PRESETS:
        return load_preset(name_or_path), False
    cluster = load_cluster(name_or_path)
    if cluster is not None:
        return cluster, False
    if name_or_path == "-":
        text, where = sys.stdin.read(), "stdin"
    else:
        path = Path(name_or_path)
        if not path.is_file():
            raise UsageError(f"unknown topology {name_or_path!r}: give a preset ({', '.join(PRESETS)}), "
                             f"a cluster (e.g. {', '.join(repr(e) for e in EXAMPLES)}; presets "
                             f"{', '.join(CLUSTER_PRESETS)}), "
                             "a file from `topowise topo --json`, or `nvidia-smi topo -m` output")
        try:
            text, where = path.read_text(errors="replace"), str(path)
        except OSError as exc:
            raise UsageError(f"{path}: cannot read ({exc.strerror})") from None
    from_text = not _is_json(text)
    return topology_from_text(text, where, gpu_name if from_text else None), from_text


def _check_gpu_model(wiring: Wiring, where: str, from_text: bool) -> None:
    """Predictions need the GPU model; say how to give it when the source did not."""
    if not wiring.gpus or wiring.gpus[0].name != UNNAMED:
        return
    if from_text:
        raise UsageError(f"{where}: `nvidia-smi topo -m` text does not name the GPU model, which predictions need: "
                         f"give --gpu-name (one of {hardware.known_gpu_names()}), or paste `nvidia-smi -L` "
                         "output along with the matrix")
    raise UsageError(f"{where}: the GPU model is {UNNAMED!r} (saved from `nvidia-smi topo -m` text without "
                     "--gpu-name); save it again with `topowise topo --file TEXT --gpu-name NAME --json`")


def _is_json(text: str) -> bool:
    return text.lstrip().startswith("{")


def topology_from_text(text: str, where: str, gpu_name: str | None = None) -> Wiring:
    """Our JSON when the text starts with `{`, else `nvidia-smi topo -m` output (gpu_name: its GPU model)."""
    if not text.strip():
        raise UsageError(f"{where} is empty: expected `topowise topo --json` output or `nvidia-smi topo -m` text")
    if _is_json(text):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{where}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
        except RecursionError:  # the parser recurses per level: no topology nests that deep
            raise UsageError(f"{where}: not a topology (JSON nested too deeply)") from None
        if isinstance(data, dict) and data.get("format") == CLUSTER_FORMAT:
            return Cluster.from_dict(data, where)
        return Topology.from_dict(data, where)
    return parse_topo_text(text, name=Path(where).stem if where != "stdin" else "stdin", gpu_name=gpu_name)
