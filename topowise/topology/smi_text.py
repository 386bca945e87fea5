"""Parse `nvidia-smi topo -m` text into a `Topology`.

The text is a matrix: a header row naming the devices (GPU0.., then NICs as mlx5_N or NICn), one
row per device, then trailing columns (CPU Affinity, NUMA Affinity, GPU NUMA ID), a legend, and on
newer drivers a "NIC Legend" that maps NICn to its name. Cells are `X` (self), `NV<n>` (n bonded
NVLinks) or a PCIe path class (PIX, PXB, PHB, NODE, SYS; SOC is the old name of SYS). Columns may be
separated by tabs or spaces, the header may carry ANSI colour escapes, and trailing cells may be empty.
No cell holds a space, so splitting on whitespace is safe once the header's column names are known.

GPU names are not in the text, so link rates come from `gpu_name` (hardware.py) and fall back to
NVLink 4 and PCIe gen 4 when the part is unknown; the topology's `source` says which was assumed.
"""

from __future__ import annotations

import itertools
import re

from topowise import hardware
from topowise.errors import UsageError
from topowise.topology.model import NVLINK, PCIE_KINDS, Gpu, Link, Nic, Topology

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_GPU = re.compile(r"GPU(\d+)$")
_NV = re.compile(r"NV(\d+)$")
# Words that start the trailing columns: "CPU Affinity", "NUMA Affinity", "GPU NUMA ID".
_TRAILING_WORDS = {"CPU", "NUMA", "GPU"}
# Older drivers print SOC for what newer ones call SYS (nvidia-smi release notes, driver 384).
_ALIASES = {"SOC": "SYS"}
# Most NVLinks one GPU has (NVLink 4 and 5: 18 per GPU, hardware.py). A GPU whose NVLink counts to
# its peers add up to more than this cannot be wired to them directly: the links go to an NVSwitch.
MAX_NVLINKS_PER_GPU = 18


def parse_topo_text(text: str, name: str = "nvidia-smi", gpu_name: str = "unknown") -> Topology:
    """`nvidia-smi topo -m` output -> Topology. Bad text -> UsageError naming the line that broke."""
    lines = [_ANSI.sub("", line).rstrip() for line in text.splitlines()]
    header_at = _header_line(lines)
    columns = _device_columns(lines[header_at].split(), header_at + 1)
    gpu_cols = [c for c in columns if _GPU.match(c)]
    if gpu_cols != [f"GPU{i}" for i in range(len(gpu_cols))] or columns[:len(gpu_cols)] != gpu_cols:
        raise UsageError(f"line {header_at + 1}: expected GPU columns GPU0, GPU1, ... first, in order, "
                         f"got {' '.join(columns)}")
    n_gpus = len(gpu_cols)

    # Device rows follow the header, one per column, in the header's order.
    cells: dict[str, list[str]] = {}
    numa: dict[int, int | None] = {}
    for k, col in enumerate(columns):
        lineno = header_at + 2 + k
        row = lines[lineno - 1].split() if lineno <= len(lines) else []
        if not row or row[0] != col:
            got = repr(lines[lineno - 1].strip()) if lineno <= len(lines) and row else "nothing"
            what = f"GPU<n> (GPU{k})" if k < n_gpus else f"the NIC {col}"
            raise UsageError(f"line {lineno}: expected a row starting with {what}, got {got}")
        values = row[1:1 + len(columns)]
        if len(values) < len(columns):
            raise UsageError(f"line {lineno}: row {col} has {len(values)} cells, expected {len(columns)} "
                             f"(one per column {' '.join(columns)})")
        for c, v in zip(columns, values):
            if _cell_kind(v) is None:
                raise UsageError(f"line {lineno}: cell {col}/{c} is {v!r}, expected X, NV<n> or one of "
                                 f"{', '.join(PCIE_KINDS)}")
        cells[col] = values
        if k < n_gpus:
            numa[k] = _numa_affinity(row[1 + len(columns):])
    nic_names = _nic_legend(lines)

    spec = hardware.gpu_spec(gpu_name)
    notes = [f"nvidia-smi topo -m text ({name})"]
    nvlink_gen = spec.nvlink_gen
    if not nvlink_gen:
        nvlink_gen = 4
        notes.append("NVLink generation unknown: assumed NVLink 4, 26.5625 GB/s per link (hardware.py)")
    pcie_gen = spec.pcie_gen if spec.memory_bytes else 4
    if not spec.memory_bytes:
        notes.append("GPU model unknown (pass --gpu-name): assumed PCIe gen 4 x16, 31.5 GB/s")

    links = []
    for a, b in itertools.combinations(range(n_gpus), 2):
        ab, ba = cells[gpu_cols[a]][b], cells[gpu_cols[b]][a]
        if _cell_kind(ab) != _cell_kind(ba):
            raise UsageError(f"line {header_at + 2 + b}: GPU{b}/GPU{a} is {ba} but GPU{a}/GPU{b} is {ab}; "
                             "the matrix should be symmetric")
        kind, count = _cell_kind(ab)
        gbps = hardware.NVLINK_GBPS_PER_LINK[nvlink_gen] * count if kind == NVLINK else hardware.pcie_gbps(pcie_gen)
        links.append(Link(a, b, kind, gbps, count))

    gpus = tuple(Gpu(i, gpu_name, numa_node=numa[i], memory_bytes=spec.memory_bytes) for i in range(n_gpus))
    nics = tuple(
        Nic(nic_names.get(col, col), nearest_gpus=_nearest_gpus([_cell_kind(cells[g][k])[0] for g in gpu_cols]))
        for k, col in enumerate(columns) if k >= n_gpus
    )
    return Topology(name, gpus, tuple(links), nics, infer_nvswitch(links, n_gpus), pcie_gen, "; ".join(notes))


def infer_nvswitch(links, n_gpus: int) -> bool:
    """Every pair on NVLink and some GPU with more links to its peers than a GPU has: a switch.

    8 GPUs all-to-all NV18 (or NV12 on A100) need 7 x 18 links per GPU if direct; a GPU has at most 18,
    so they go through NVSwitches. Four H200 NVL on a 4-way bridge (NV6 x 3 peers = 18) stay a bridge.
    """
    if n_gpus < 2 or not all(l.is_nvlink for l in links):
        return False
    per_gpu = dict.fromkeys(range(n_gpus), 0)
    for l in links:
        per_gpu[l.a] += l.nvlinks
        per_gpu[l.b] += l.nvlinks
    return max(per_gpu.values()) > MAX_NVLINKS_PER_GPU


def _header_line(lines: list[str]) -> int:
    """Index of the header: the first non-blank line; it must name GPU0 first."""
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        words = line.split()
        if words[0] == "GPU0":
            return i
        raise UsageError(f"line {i + 1}: expected the header of `nvidia-smi topo -m` (GPU0 GPU1 ... CPU Affinity), "
                         f"got {line.strip()[:60]!r}; give `nvidia-smi topo -m` text or `topowise topo --json` output")
    raise UsageError("no `nvidia-smi topo -m` header found")


def _device_columns(words: list[str], lineno: int) -> list[str]:
    columns = []
    for w in words:
        if w in _TRAILING_WORDS:
            break
        columns.append(w)
    if len(set(columns)) != len(columns):
        raise UsageError(f"line {lineno}: a column name appears twice in {' '.join(columns)}")
    return columns


def _cell_kind(cell: str) -> tuple[str, int] | None:
    """("NV", links), (PCIe class, 0), ("X", 0) for self; None when the cell is not a path."""
    cell = _ALIASES.get(cell, cell)
    m = _NV.match(cell)
    if m:
        return NVLINK, int(m.group(1))
    if cell in PCIE_KINDS or cell == "X":
        return cell, 0
    return None


def _numa_affinity(trailing: list[str]) -> int | None:
    """Trailing cells are CPU Affinity, NUMA Affinity, GPU NUMA ID; the NUMA node is the second if an int."""
    if len(trailing) >= 2 and trailing[1].isdigit():
        return int(trailing[1])
    return None


def _nic_legend(lines: list[str]) -> dict[str, str]:
    """`NIC Legend:` lines such as `  NIC0: mlx5_2` -> {"NIC0": "mlx5_2"}."""
    out = {}
    for line in lines:
        m = re.match(r"\s*(NIC\d+):\s*(\S+)\s*$", line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def _nearest_gpus(paths: list[str]) -> tuple[int, ...]:
    """GPUs behind the NIC's PCIe switch (PIX/PXB); else those on its NUMA node (PHB/NODE); else none."""
    for near in (("PIX", "PXB"), ("PHB", "NODE")):
        gpus = tuple(i for i, p in enumerate(paths) if p in near)
        if gpus:
            return gpus
    return ()
