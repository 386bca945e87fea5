"""Topology sources: presets, our JSON, `nvidia-smi topo -m` text, live NVML.

One node builds a `Topology`, several nodes with the network between them a `Cluster`
("4x hgx-h100-8+ib-ndr"); both are a `Wiring` (topology/model.py), the interface everything else uses.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from topowise.errors import UsageError
from topowise.topology.cluster import EXAMPLES, Cluster, load_cluster
from topowise.topology.cluster import FORMAT as CLUSTER_FORMAT
from topowise.topology.model import Topology, Wiring
from topowise.topology.presets import PRESETS, load_preset
from topowise.topology.smi_text import parse_topo_text

__all__ = ["Cluster", "Topology", "Wiring", "load_topology", "topology_from_text"]


def load_topology(name_or_path: str) -> Wiring:
    """A preset name, a cluster name, a path to `topo --json` output or `nvidia-smi topo -m` text, or
    `-` for stdin."""
    if name_or_path in PRESETS:
        return load_preset(name_or_path)
    cluster = load_cluster(name_or_path)
    if cluster is not None:
        return cluster
    if name_or_path == "-":
        return topology_from_text(sys.stdin.read(), "stdin")
    path = Path(name_or_path)
    if not path.is_file():
        raise UsageError(f"unknown topology {name_or_path!r}: give a preset ({', '.join(PRESETS)}), "
                         f"a cluster (e.g. {', '.join(repr(e) for e in EXAMPLES)}), "
                         "a file from `topowise topo --json`, or `nvidia-smi topo -m` output")
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        raise UsageError(f"{path}: cannot read ({exc.strerror})") from None
    return topology_from_text(text, str(path))


def topology_from_text(text: str, where: str) -> Wiring:
    """Our JSON when the text starts with `{`, else `nvidia-smi topo -m` output."""
    if not text.strip():
        raise UsageError(f"{where} is empty: expected `topowise topo --json` output or `nvidia-smi topo -m` text")
    if text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{where}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
        if isinstance(data, dict) and data.get("format") == CLUSTER_FORMAT:
            return Cluster.from_dict(data, where)
        return Topology.from_dict(data, where)
    return parse_topo_text(text, name=Path(where).stem if where != "stdin" else "stdin")
