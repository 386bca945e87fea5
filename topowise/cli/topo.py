"""`topowise topo`: the GPU wiring (links, NVLink islands, bandwidth tiers) and what would slow a job down."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from topowise.errors import UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--preset", metavar="NAME", help="a named machine (see --list-presets)")
    source.add_argument("--file", metavar="PATH",
                        help="`topowise topo --json` output or `nvidia-smi topo -m` text (- for stdin)")
    parser.add_argument("--gpu-name", metavar="NAME",
                        help="GPU model for `nvidia-smi topo -m` text, which does not name it (e.g. H100)")
    parser.add_argument("--gpus", metavar="LIST", help="analyse a selection, e.g. 0,1 or 0-3")
    parser.add_argument("--list-presets", action="store_true", help="list the named machines and exit")
    parser.add_argument("--json", action="store_true", help="print JSON (reads back with --file)")


def run(args: argparse.Namespace) -> int:
    if args.list_presets:
        _refuse_selection_with_list_presets(args)
        _print_presets()
        return 0
    topo = _load(args)
    if topo.network is not None:  # a cluster: tiers and the network share, not an n x n matrix
        return _show_cluster(topo, args)
    report = topo_report(topo, args.gpus)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _render(report, largest_tp(topo, report.get("selection", {}).get("gpus"))[1])
    return 0


def _refuse_selection_with_list_presets(args: argparse.Namespace) -> None:
    given = [f for f, v in (("--preset", args.preset), ("--file", args.file), ("--gpu-name", args.gpu_name),
                            ("--gpus", args.gpus), ("--json", args.json)) if v]
    if given:
        raise UsageError(f"--list-presets lists the named machines and nothing else: drop {given[0]}")


def preset_rows() -> list[tuple[str, str]]:
    """(name, description) of every named machine, then every named cluster."""
    from topowise.topology import presets
    from topowise.topology.cluster import CLUSTER_PRESETS

    rows = [(name, presets.describe(name)) for name in presets.preset_names()]
    rows += [(name, f"cluster: {form}") for name, form in CLUSTER_PRESETS.items()]
    return rows


def _print_presets() -> None:
    from topowise.topology.cluster import EXAMPLES

    rows = preset_rows()
    width = max(len(name) for name, _ in rows)
    for name, text in rows:
        print(f"{name:<{width}}  {text}")
    print("clusters by name: " + "; ".join(EXAMPLES) + " (docs/networks.md)")


def _show_cluster(topo, args: argparse.Namespace) -> int:
    from topowise.topology.cluster import cluster_report
    from topowise.topology.model import parse_gpu_list

    gpus = parse_gpu_list(args.gpus, topo) if args.gpus else None
    report = cluster_report(topo, gpus)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _render_cluster(report, largest_tp(topo, gpus)[1])
    return 0


def largest_tp(topo, gpus=None) -> tuple[int, str]:
    """The largest tensor-parallel degree the selection (every GPU without one) supports: the largest group of
    consecutive GPUs that stays inside an NVLink island (topology.mesh.largest_contained_degree, as plan --mesh
    caps TP), and the sentence that says why."""
    from topowise.topology.mesh import largest_contained_degree

    cluster = getattr(topo, "network", None) is not None
    node = topo.node
    per_node = gpus is None and cluster
    if per_node:  # every node alike: the answer of one node
        topo = node
    selected = gpus is not None
    gpus = tuple(topo.indices if gpus is None else gpus)
    island = max(len(isl) for isl in node.islands())
    degree = largest_contained_degree(gpus, topo.island_of, limit=min(island, len(gpus)))
    beyond = "the network" if cluster and island == node.num_gpus else "PCIe"
    why = _tp_reason(degree, len(gpus), island, beyond, per_node=per_node, selected=selected)
    return degree, f"largest TP degree {degree}: {why}"


def _tp_reason(degree: int, n: int, island: int, beyond: str, *, per_node: bool, selected: bool) -> str:
    """Why TP stops at `degree` among `n` GPUs in NVLink islands of `island`; `beyond` is what a larger group
    would cross."""
    if n == 1:
        return "one GPU"
    if degree == 1 and island == 1:
        return f"no NVLink joins these GPUs: a TP group's per-block collectives would cross {beyond}"
    if degree == 1:
        return (f"no run of consecutive GPUs that divides the {n} selected stays inside one NVLink island "
                f"(islands of {island}): a TP group would cross {beyond}")
    if per_node and degree == n:
        return f"each node's {degree} GPUs share one NVLink island; a larger TP group would cross {beyond}"
    if degree == n:
        return f"all {degree}{' selected' if selected else ''} GPUs share one NVLink island"
    return (f"TP groups of {degree} consecutive GPUs stay inside NVLink islands of {island}; a larger group would "
            f"cross {beyond}")


def topo_report(topo, gpus_text: str | None = None, environ=None) -> dict:
    """Topology.to_dict plus tiers, warnings and (with a selection) its analysis."""
    from topowise.topology.checks import warnings
    from topowise.topology.model import parse_gpu_list

    gpus = parse_gpu_list(gpus_text, topo) if gpus_text is not None else None
    report = topo.to_dict()
    report["tiers"] = [{"link": label, "gbps": gbps, "pairs": n} for label, gbps, n in topo.bandwidth_tiers()]
    report["warnings"] = warnings(topo, gpus, os.environ if environ is None else environ)
    if gpus is not None:
        selection = topo.selection(gpus)
        best = topo.best_subset(len(gpus))
        best_gbps = topo.bottleneck_gbps(best)
        selection["best_subset"] = list(best)
        selection["best_subset_bottleneck_gbps"] = None if best_gbps == float("inf") else best_gbps
        report["selection"] = selection
    return report


def _load(args):

    if args.preset is not None:
        if args.gpu_name:
            raise UsageError("--gpu-name applies to `nvidia-smi topo -m` text given with --file, not to presets")
        from topowise.topology.cluster import load_cluster
        from topowise.topology.presets import load_preset

        return load_cluster(args.preset) or load_preset(args.preset)
    if args.file is not None:
        return _load_file(args.file, args.gpu_name)
    if args.gpu_name:
        raise UsageError("--gpu-name applies to `nvidia-smi topo -m` text given with --file; NVML names live GPUs")
    from topowise.topology.nvml import discover

    return discover()


def _load_file(path: str, gpu_name: str | None):
    from topowise.topology import topology_from_text
    from topowise.topology.smi_text import parse_topo_text

    if path == "-":
        text, name = sys.stdin.read(), "stdin"
    else:
        p = Path(path)
        if p.is_dir():
            raise UsageError(f"--file {path} is a folder: give a file, `topowise topo --json` output or "
                             "`nvidia-smi topo -m` text")
        if not p.is_file():
            raise UsageError(f"--file {path}: no such file (give `topowise topo --json` output or "
                             "`nvidia-smi topo -m` text)")
        try:
            text = p.read_text(errors="replace")
        except OSError as exc:
            raise UsageError(f"--file {path}: cannot read ({exc.strerror})") from None
        name = p.stem
    if gpu_name and text.strip() and not text.lstrip().startswith("{"):
        return parse_topo_text(text, name, gpu_name=gpu_name)
    if gpu_name:
        raise UsageError("--gpu-name applies to `nvidia-smi topo -m` text; a topowise JSON file names its GPUs")
    return topology_from_text(text, path if path != "-" else "stdin")


def _render(report: dict, tp_line: str = "") -> None:
    from topowise.cli.console import console as make_console
    from topowise.cli.console import print_whole

    console = make_console()
    console.print(_headline(report))
    about = _about(report)
    if about:
        console.print(f"[dim]{about}[/dim]", highlight=False)
    console.print("links (kind, GB/s per direction):")
    print_whole(console, _link_matrix(report))
    console.print(f"[bold]NVLink islands[/bold]: {_islands_text(report['islands'])}")
    if tp_line:
        console.print(tp_line, markup=False, highlight=False)
    console.print(f"[bold]bandwidth tiers[/bold]: {_tiers_text(report['tiers']) or 'one GPU, no links'}")
    for nic in report.get("nics", []):
        console.print(_nic_line(nic))
    sel = report.get("selection")
    if sel:
        for line in _selection_lines(sel):
            console.print(line)
    _print_warnings(console, report["warnings"])


def _headline(report: dict) -> str:
    gpus = report["gpus"]
    names = sorted({g["name"] for g in gpus})
    return (f"[bold]{report['name']}[/bold]: {len(gpus)} x {', '.join(names)}"
            + ("  (NVSwitch)" if report["nvswitch"] else "") + f"  PCIe gen {report['pcie_gen']}")


def _about(report: dict) -> str | None:
    """A preset is described in words; its sources (files of this repository) stay in --json's "source"."""
    from topowise.topology.presets import PRESETS, describe

    return describe(report["name"]) if report["name"] in PRESETS else report.get("source")


def _link_matrix(report: dict):
    """The GPU x GPU table of link kinds and GB/s, with each GPU's NUMA node."""
    from rich import box
    from rich.table import Table

    from topowise.cli.console import column

    gpus = report["gpus"]
    pairs = {(p["a"], p["b"]): p for p in report["pairs"]}
    matrix = Table(box=box.SIMPLE_HEAD)
    column(matrix, "")
    for g in gpus:
        column(matrix, f"GPU{g['index']}", justify="center")
    column(matrix, "NUMA", justify="right")
    for g in gpus:
        row = [_link_cell(pairs, g["index"], h["index"]) for h in gpus]
        matrix.add_row(f"GPU{g['index']}", *row, "-" if g.get("numa_node") is None else str(g["numa_node"]))
    return matrix


def _link_cell(pairs: dict, i: int, j: int) -> str:
    a, b = sorted((i, j))
    p = pairs.get((a, b))
    if a == b:
        return "X"
    if p is None:
        return "?"
    label = f"NV{p['nvlinks']}" if p["kind"] == "NV" else p["kind"]
    style = "green" if p["kind"] == "NV" else "yellow"
    p2p = "" if p.get("p2p_supported", True) else " !p2p"
    return f"[{style}]{label}\n{p['gbps']:.3g}[/{style}]" + p2p


def _islands_text(islands) -> str:
    return "  ".join("{" + ",".join(map(str, i)) + "}" for i in islands)


def _tiers_text(tiers: list[dict]) -> str:
    return ", ".join(f"{'NVLink ' + t['link'] if t['link'].startswith('NV') else 'PCIe ' + t['link']} "
                     f"{t['gbps']:g} GB/s ({t['pairs']} pair{'s' if t['pairs'] != 1 else ''})"
                     for t in tiers)


def _nic_line(nic: dict) -> str:
    near = ",".join(map(str, nic["nearest_gpus"])) or "none"
    return (f"NIC {nic['name']}" + (f" ({nic['kind']}, {nic['gbps']:g} GB/s)" if nic["kind"] else "")
            + f": nearest GPUs {near}")


def _selection_lines(sel: dict) -> list[str]:
    """The selected GPUs' islands and ring, then the best choice of that many GPUs."""
    ring = ("one GPU, no ring" if sel["bottleneck_gbps"] is None
            else f"ring at {sel['bottleneck_gbps']:g} GB/s per direction")
    n = len(sel["islands_spanned"])
    lines = [f"[bold]selection[/bold] GPUs {','.join(map(str, sel['gpus']))}: "
             f"{n} NVLink island{'s' if n != 1 else ''} spanned ({_islands_text(sel['islands_spanned'])}), {ring}"]
    if sorted(sel["best_subset"]) != sorted(sel["gpus"]):
        best = sel["best_subset_bottleneck_gbps"]
        lines.append(f"  best {len(sel['gpus'])} GPUs here: {','.join(map(str, sel['best_subset']))}"
                     + ("" if best is None else f" at {best:g} GB/s"))
    else:
        lines.append("  this is already the best choice of that many GPUs")
    return lines


def _print_warnings(console, warnings: list[str]) -> None:
    for w in warnings:
        console.print(f"[bold red]warning[/bold red]: {w}", highlight=False)
    if not warnings:
        console.print("[green]no warnings[/green]")


def _render_cluster(report: dict, tp_line: str = "") -> None:
    from topowise.cli.console import console as make_console

    console = make_console()
    net = report["network"]
    console.print(f"[bold]{report['name']}[/bold]: {report['num_nodes']} nodes x {report['gpus_per_node']} GPUs "
                  f"({report['node']['name']}), {report['num_gpus']} GPUs numbered node by node")
    console.print(f"[bold]network[/bold]: {net['nics_per_node']} x {net['kind']} per node at {net['gbps_per_nic']:g} "
                  f"GB/s each, {'rail-optimized' if net['rail_optimized'] else 'not rail-optimized'}; "
                  f"[bold]{report['network_gbps_per_gpu']:.3g} GB/s per GPU[/bold] when every GPU communicates")
    for t in report["tiers"]:
        console.print(f"  {t['tier']:<8} {t['gbps_per_gpu']:>8.3g} GB/s per GPU  {t['scope']}")
    if tp_line:
        console.print(tp_line, markup=False, highlight=False)
    sel = report.get("selection")
    if sel:
        bottleneck = "n/a (one GPU)" if sel["bottleneck_gbps"] is None else f"{sel['bottleneck_gbps']:.3g} GB/s"
        console.print(f"[bold]selection[/bold] {len(sel['gpus'])} GPUs on node(s) "
                      f"{','.join(map(str, sel['nodes_spanned']))}: ring at {bottleneck}; the best "
                      f"{len(sel['gpus'])} sit on node(s) {','.join(map(str, sel['best_subset_nodes']))}")
    _print_warnings(console, report["warnings"])
