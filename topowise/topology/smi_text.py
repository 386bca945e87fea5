"""Parse `nvidia-smi topo -m` text into a `Topology`.

The text is a matrix: a header row naming the devices (GPU0.., then NICs as mlx5_N or NICn), one
row per device, then trailing columns (CPU Affinity, NUMA Affinity, GPU NUMA ID), a legend, and on
newer drivers a "NIC Legend" that maps NICn to its name. Cells are `X` (self), `NV<n>` (n bonded
NVLinks) or a PCIe path class (PIX, PXB, PHB, NODE, SYS; SOC is the old name of SYS). Columns may be
separated by tabs or spaces, the header may carry ANSI colour escapes, and trailing cells may be empty.
No cell holds a space, so splitting on whitespace is safe once the header's column names are known.

GPU names are not in the matrix. They come from `gpu_name` (--gpu-name), else from other nvidia-smi
output pasted along with it: `nvidia-smi -L` lines ("GPU 0: NVIDIA H100 80GB HBM3 (UUID: ...)"),
`nvidia-smi -q`'s "Product Name" or the GPU rows of plain `nvidia-smi`. With no name, link rates fall
back to NVLink 4 and PCIe gen 4, the GPUs are named `UNNAMED`, and the topology's `source` says what
was assumed; predictions refuse such a topology (topology.load_topology).
"""

from __future__ import annotations

import itertools
import re

from topowise import hardware
from topowise.errors import UsageError
from topowise.topology.model import MAX_NVLINKS, NVLINK, PCIE_KINDS, Gpu, Link, Nic, Topology

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# re.ASCII throughout: \d alone takes any script's digits (GPU٠ would be GPU 0)
# GPU names in other nvidia-smi output pasted along with the matrix: `-L`, `-q`, the plain table.
_LIST_LINE = re.compile(r"^\s*GPU (\d+): (.+?)\s*\(UUID:", re.ASCII)
_QUERY_LINE = re.compile(r"^\s*Product Name\s*:\s*(.+?)\s*$")
_TABLE_ROW = re.compile(r"^\|\s*(\d+)\s+(.+?)\s+(?:On|Off)\s+\|", re.ASCII)
UNNAMED = "unknown"  # the GPU name when neither --gpu-name nor the text gives one
_NV = re.compile(r"NV(\d+)$", re.ASCII)
_NIC_LEGEND_LINE = re.compile(r"\s*(NIC\d+):\s*(\S+)\s*$", re.ASCII)
# The legend's last entry, printed by every driver since NVLink (Pascal): a legend without it was cut short.
_LEGEND_LAST = "NV#"
_WHOLE = "paste the whole `nvidia-smi topo -m` output"
# Words that start the trailing columns: "CPU Affinity", "NUMA Affinity", "GPU NUMA ID".
_TRAILING_WORDS = {"CPU", "NUMA", "GPU"}
# Older drivers print SOC for what newer ones call SYS (nvidia-smi release notes, driver 384).
_ALIASES = {"SOC": "SYS"}
# Most NVLinks one GPU has (NVLink 4 and 5: 18 per GPU, hardware.py). A GPU whose NVLink counts to
# its peers add up to more than this cannot be wired to them directly: the links go to an NVSwitch.
MAX_NVLINKS_PER_GPU = 18


def parse_topo_text(text: str, name: str = "nvidia-smi", gpu_name: str | None = None) -> Topology:
    """`nvidia-smi topo -m` output -> Topology. Bad text -> UsageError naming the line that broke.

    gpu_name: the GPU model (--gpu-name), checked against hardware.py's table; None: read it from
    `nvidia-smi -L`/`-q` output pasted along, else UNNAMED."""
    if gpu_name is not None:
        hardware.check_gpu_name(gpu_name)
    lines = [_ANSI.sub("", line).rstrip() for line in text.splitlines()]
    header_at = _header_line(lines)
    columns = _device_columns(lines[header_at].split(), header_at + 1)
    gpu_cols = [c for c in columns if c.startswith("GPU")]  # GPU٠ too: refused below, never read as a NIC
    if gpu_cols != [f"GPU{i}" for i in range(len(gpu_cols))] or columns[:len(gpu_cols)] != gpu_cols:
        raise UsageError(f"line {header_at + 1}: expected GPU columns GPU0, GPU1, ... first, in order, "
                         f"got {' '.join(columns)}")
    n_gpus = len(gpu_cols)

    # Device rows follow the header, one per column, in the header's order.
    cells: dict[str, list[str]] = {}
    numa: dict[int, int | None] = {}
    trailing: dict[str, tuple[int, int]] = {}  # GPU row -> (line, cells after the matrix: CPU and NUMA affinity)
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
        if any(_cell_kind(v) is not None for v in row[1 + len(columns):]):
            raise UsageError(f"line {lineno}: row {col} has more path cells than the header has columns "
                             f"({' '.join(columns)}): the header and the rows do not match; {_WHOLE}")
        if k < n_gpus:
            trailing[col] = (lineno, len(row) - 1 - len(columns))
        for c, v in zip(columns, values):
            if _cell_kind(v) is None:
                raise UsageError(f"line {lineno}: cell {col}/{c} is {v!r}, expected X, NV<n> (n 1 to {MAX_NVLINKS}) "
                                 f"or one of {', '.join(PCIE_KINDS)}")
        cells[col] = values
        if k < n_gpus:
            numa[k] = _numa_affinity(row[1 + len(columns):])
    _check_whole(lines, columns[n_gpus:], trailing)
    nic_names = _nic_legend(lines)

    names = dict.fromkeys(range(n_gpus), gpu_name) if gpu_name is not None else _gpu_names(lines, n_gpus)
    notes = [f"nvidia-smi topo -m text ({name})"]
    if gpu_name is None and names:
        notes.append("GPU model from the nvidia-smi output pasted with it")
    names = {i: names.get(i, UNNAMED) for i in range(n_gpus)}
    spec = hardware.gpu_spec(names[0]) if n_gpus else hardware.gpu_spec(UNNAMED)
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
        kind, count = _path_kind(ab)
        gbps = hardware.NVLINK_GBPS_PER_LINK[nvlink_gen] * count if kind == NVLINK else hardware.pcie_gbps(pcie_gen)
        links.append(Link(a, b, kind, gbps, count))

    gpus = tuple(Gpu(i, names[i], numa_node=numa[i], memory_bytes=hardware.gpu_spec(names[i]).memory_bytes)
                 for i in range(n_gpus))
    nics = tuple(
        Nic(nic_names.get(col, col), nearest_gpus=_nearest_gpus([_path_kind(cells[g][k])[0] for g in gpu_cols]))
        for k, col in enumerate(columns) if k >= n_gpus
    )
    return Topology(name, gpus, tuple(links), nics, infer_nvswitch(links, n_gpus), pcie_gen, "; ".join(notes))


def _check_whole(lines: list[str], nic_columns: list[str], trailing: dict[str, tuple[int, int]]) -> None:
    """Refuse text cut short: a GPU row with fewer affinity cells than the other GPU rows (nvidia-smi fills
    every one), a legend that stops before its last entry, a NIC legend that lacks a NIC of the matrix
    (its name would be lost)."""
    most = max((n for _, n in trailing.values()), default=0)
    for col, (lineno, n) in trailing.items():
        if n < most:
            raise UsageError(f"line {lineno}: row {col} ends after {n} of the {most} cells after the matrix (CPU "
                             f"and NUMA affinity) that the other GPU rows have: the table was cut short; {_WHOLE}")
    words = [line.strip() for line in lines]
    if "Legend:" in words:
        legend = words[words.index("Legend:") + 1:]
        if not any(w.startswith(_LEGEND_LAST) for w in legend):
            last = next((w for w in reversed(legend) if w), "Legend:")
            raise UsageError(f"the text stops inside the legend, before its {_LEGEND_LAST} entry (it ends "
                             f"{last[-40:]!r}): it was cut short; {_WHOLE}")
    if "NIC Legend:" in words:
        named = {m.group(1) for m in map(_NIC_LEGEND_LINE.match, lines) if m}
        missing = [c for c in nic_columns if re.fullmatch(r"NIC\d+", c, re.ASCII) and c not in named]
        if missing:
            raise UsageError(f"the NIC Legend lacks {missing[0]}, a column of the matrix: the text was cut short; "
                             f"{_WHOLE}")


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
    """Index of the header, the line that starts with GPU0: the first non-blank line, or a later one when
    what comes before it is other nvidia-smi output that names the GPUs (`-L`, `-q`, plain `nvidia-smi`)."""
    header = next((i for i, line in enumerate(lines) if line.split()[:1] == ["GPU0"]), None)
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        if header is not None and (i == header or any(_names_a_gpu(l) for l in lines[:header])):
            return header
        raise UsageError(f"line {i + 1}: expected the header of `nvidia-smi topo -m` (GPU0 GPU1 ... CPU Affinity), "
                         f"got {line.strip()[:60]!r}; give `nvidia-smi topo -m` text or `topowise topo --json` output")
    raise UsageError("no `nvidia-smi topo -m` header found")


def _names_a_gpu(line: str) -> bool:
    return bool(_LIST_LINE.match(line) or _TABLE_ROW.match(line) or _QUERY_LINE.match(line))


def _device_columns(words: list[str], lineno: int) -> list[str]:
    columns = []
    for w in words:
        if w in _TRAILING_WORDS:
            break
        columns.append(w)
    if len(set(columns)) != len(columns):
        raise UsageError(f"line {lineno}: a column name appears twice in {' '.join(columns)}")
    return columns


def _gpu_names(lines: list[str], n_gpus: int) -> dict[int, str]:
    """GPU index -> name from `nvidia-smi -L` lines, the rows of plain `nvidia-smi`, or `nvidia-smi -q`'s
    "Product Name" lines (in GPU order); {} when the text holds none of them. One name listed stands
    for every GPU."""
    named: dict[int, str] = {}
    in_order: list[str] = []
    for line in lines:
        m = _LIST_LINE.match(line) or _TABLE_ROW.match(line)
        if m:
            named.setdefault(int(m.group(1)), m.group(2).strip())
            continue
        m = _QUERY_LINE.match(line)
        if m:
            in_order.append(m.group(1))
    if not named:
        named = dict(enumerate(in_order))
    if len(set(named.values())) == 1:
        return dict.fromkeys(range(n_gpus), next(iter(named.values())))
    return {i: v for i, v in named.items() if i < n_gpus}


def _cell_kind(cell: str) -> tuple[str, int] | None:
    """("NV", links), (PCIe class, 0), ("X", 0) for self; None when the cell is not a path."""
    cell = _ALIASES.get(cell, cell)
    m = _NV.match(cell)
    if m:  # NV0 or NV999 is no cell nvidia-smi prints: a GPU has 1 to MAX_NVLINKS links
        return (NVLINK, int(m.group(1))) if 1 <= int(m.group(1)) <= MAX_NVLINKS else None
    if cell in PCIE_KINDS or cell == "X":
        return cell, 0
    return None


def _path_kind(cell: str) -> tuple[str, int]:
    """_cell_kind of a cell the matrix's rows were checked to hold (a path, never None)."""
    kind = _cell_kind(cell)
    if kind is None:
        raise UsageError(f"cell {cell!r}: expected X, NV<n> (n 1 to {MAX_NVLINKS}) or one of {', '.join(PCIE_KINDS)}")
    return kind


def _numa_affinity(trailing: list[str]) -> int | None:
    """Trailing cells are CPU Affinity, NUMA Affinity, GPU NUMA ID; the NUMA node is the second if an int."""
    if len(trailing) >= 2 and trailing[1].isascii() and trailing[1].isdecimal():
        return int(trailing[1])
    return None


def _nic_legend(lines: list[str]) -> dict[str, str]:
    """`NIC Legend:` lines such as `  NIC0: mlx5_2` -> {"NIC0": "mlx5_2"}."""
    out = {}
    for line in lines:
        m = _NIC_LEGEND_LINE.match(line)
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
