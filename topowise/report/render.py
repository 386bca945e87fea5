"""Render a Study: markdown, self-contained html (plots inlined as base64 PNG), and a rich terminal summary.

The report is built once as a list of blocks (heading, paragraph, list, table, image); markdown and
html are two renderings of the same blocks, so they never disagree.
"""

from __future__ import annotations

import base64
import html
import json
import re
from pathlib import Path

from topowise.planner.explain import gpu_list
from topowise.report.breakdown import StepBreakdown
from topowise.report.study import GIB, Case, Finding, Measured, Study, TopologySummary
from topowise.report.study_figures import (
    any_mesh,
    checkpointing_of,
    ddp_fits_somewhere,
    fsdp_beside_ddp,
    fsdp_instead_of_ddp,
    fsdp_rescue,
    mesh_degrees,
    nvlink_finding,
    step_totals,
    worst_island_slowdown,
)

# --- blocks --------------------------------------------------------------------------------------


def report_blocks(study: Study, plots: dict[str, Path], command: str = "") -> list[tuple]:
    return [*intro_blocks(study, command), *findings_blocks(study), *plot_blocks(plots),
            *(b for t in study.topologies for b in topology_blocks(study, t, plots)),
            *network_blocks(study, plots), *question_blocks(study), *measured_blocks(study, plots),
            ("p", "All numbers: study.json (every prediction's full breakdown, the findings).")]


def intro_blocks(study: Study, command: str) -> list[tuple]:
    m = study.model
    b: list[tuple] = [("h1", f"topowise study: {m['name']}")]
    b.append(("p", f"{m['name']}: {m['params']:,} parameters ({m['params'] / 1e9:.2f} B), sequence length "
                   f"{study.seq_len}, micro-batch {study.micro_batch} per GPU, bf16 compute with fp32 master "
                   f"weights and AdamW; cost model profile: {study.profile}. Every number here is a prediction "
                   "of topowise's cost model unless a column says measured; every finding is computed from "
                   "those numbers."))
    if command:
        b.append(("p", f"Reproduce: `{command}`"))
    return b


def findings_blocks(study: Study) -> list[tuple]:
    return [("h2", "Findings"), *recommendation_blocks(study),
            ("h3", "NVLink vs PCIe bandwidth"),
            ("ul", [f.text for f in study.findings_of("nvlink_pcie_ratio")] or ["None."]),
            *island_slowdown_blocks(study), *ddp_fsdp_blocks(study)]


ISLAND_SLOWDOWN_HEADERS = ["topology", "GPUs", "strategy", "inside", "across", "inside ms", "across ms", "slowdown",
                           "fits"]


def island_slowdown_blocks(study: Study) -> list[tuple]:
    head = ("h3", "Slowdown when a job spans NVLink islands")
    slow = study.findings_of("island_slowdown")
    if not slow:
        return [head, ("p", "No topology here has both a placement inside one island and one across islands.")]
    # many numbers of one shape: a table reads better than sentences
    return [head, ("p", "Step time with the GPUs in different NVLink islands over step time with the "
                        "same number of GPUs inside one island (1.00x = no slowdown)."),
            ("table", ISLAND_SLOWDOWN_HEADERS, [island_slowdown_row(f) for f in slow])]


def island_slowdown_row(f: Finding) -> list[str]:
    v = f.values
    return [f.topology, str(v["gpus_per_job"]), v["strategy"], _gpu_ids(v["inside_gpus"]), _gpu_ids(v["across_gpus"]),
            _ms(v["inside_step_time_s"]), _ms(v["across_step_time_s"]), f"{v['slowdown']:.2f}x", _yes_no(v["fits"])]


# the plots of all GPUs of each node: (name, alt text)
NODE_PLOTS = (("throughput", "predicted tokens/s per strategy per topology"),
              ("memory", "predicted peak memory per GPU per strategy per topology, with GPU memory"))


def plot_blocks(plots: dict[str, Path]) -> list[tuple]:
    b: list[tuple] = [("h2", "Throughput and memory (all GPUs of each node)")]
    b += [("img", plots[name], alt) for name, alt in NODE_PLOTS if name in plots]
    if "slowdown" in plots:
        b += [("h2", "Spanning islands"), ("img", plots["slowdown"], "step time across islands over inside one island")]
    return b


PLACEMENT_HEADERS = ["placement", "GPUs", "islands", "ring GB/s"]


def topology_blocks(study: Study, t: TopologySummary, plots: dict[str, Path]) -> list[tuple]:
    """One topology: its GPUs and islands, its link matrix, its placements, every case on them."""
    nv = nvlink_finding(study, t.label)
    islands = "; ".join("{" + _gpu_ids(i) + "}" for i in t.islands)
    b: list[tuple] = [("h2", f"Topology {t.label}"),
                      ("p", f"{t.name}: {len(t.link_gbps)}x {t.gpu_name}, {t.gpu_memory_bytes / GIB:.1f} GiB each; "
                            f"NVLink islands: {islands}." + (f" {nv.text}" if nv else ""))]
    key = f"links_{t.label}"
    if key in plots:
        b.append(("img", plots[key], f"link matrix of {t.label} in GB/s"))
    b.append(("table", PLACEMENT_HEADERS, [[p.label, _gpu_ids(p.gpus), str(p.islands_spanned), _gbps(p.bottleneck_gbps)]
                                           for p in t.placements]))
    b.append(placement_table(study, t))
    return b


def placement_table(study: Study, t) -> tuple:
    """Every strategy on every placement of one topology; a "note" column (why a case has no prediction)
    only where some case has one."""
    cases = (study.case(t.label, p.label, s) for p in t.placements for s in study.strategies)
    rows = [_case_row(c) for c in cases if c is not None]
    headers = ["placement", "strategy", "step ms", "tokens/s", "peak GiB", "fits", "note"]
    if not any(row[-1] for row in rows):
        headers, rows = headers[:-1], [row[:-1] for row in rows]
    return ("table", headers, rows)


def _case_row(c: Case) -> list[str]:
    if not c.ok:
        return [c.placement, c.strategy, "-", "-", "-", "-", c.error]
    return [c.placement, c.strategy, _ms0(c.step_time_s), f"{c.tokens_per_s:,.0f}", _gib(c.peak_bytes),
            _yes_no(c.fits), ""]


def question_blocks(study: Study) -> list[tuple]:
    if not study.questions:
        return []
    from topowise.report.networks import blocks

    return blocks(study.questions)


MEASURED_HEADERS = ["strategy", "status", "predicted ms", "measured ms", "step error %", "predicted allocated GiB",
                    "measured allocated GiB", "memory error %"]


def measured_blocks(study: Study, plots: dict[str, Path]) -> list[tuple]:
    """study --measure: predicted beside measured, then where the measured step goes."""
    r = study.measured
    if r is None:
        return []
    return [("h2", f"Measured on this machine ({r.topology}, GPUs {_gpu_ids(r.gpus)})"),
            ("p", f"{r.model}, micro-batch {r.micro_batch}, sequence {r.seq_len}; command: `{r.command}`. "
                  "Error = (predicted - measured) / measured."),
            ("table", MEASURED_HEADERS, [measured_row(x) for x in r.rows]),
            *breakdown_blocks(study, plots)]


def measured_row(x: Measured) -> list[str]:
    return [x.strategy, x.status, _ms(x.predicted_step_time_s), _ms(x.measured_step_time_s), _pct(x.step_error_pct),
            _gib(x.predicted_peak_bytes), _gib(x.measured_peak_bytes), _pct(x.memory_error_pct)]


def network_blocks(study: Study, plots: dict[str, Path]) -> list[tuple]:
    """--network: per cluster, the best plan on each network between its nodes, as a table and a plot."""
    if not study.networks:
        return []
    from topowise.report.whatif import HEADERS, SOCKET_CAP_NOTE, price_notes, rows, with_socket_cap
    from topowise.whatif import NetworkOutcome

    b: list[tuple] = [("h2", "The same job on other networks")]
    b.append(("p", "Each cluster keeps its nodes; only the network between them changes, with that network's own "
                   "NIC count (InfiniBand and RoCE one per GPU, Ethernet one per node unless named, e.g. "
                   "eth-100x4). The planner's best plan on each; network wait: the share of the step spent on "
                   "exposed communication between nodes; USD: topowise/prices.py (docs/sources.md)."))
    if "networks" in plots:
        b.append(("img", plots["networks"], "tokens/s per GPU and network wait per network"))
    for view in study.networks:
        outcomes = [NetworkOutcome.from_dict(r) for r in view["rows"]]
        b.append(("h3", view["topology"]))
        table, capped = with_socket_cap(HEADERS, rows(outcomes))
        b.append(("table", HEADERS, table))
        notes = [*([SOCKET_CAP_NOTE] if capped else []), *price_notes(outcomes)]
        if notes:
            b.append(("ul", notes))
    return b


BREAKDOWN_HEADERS = ["phase", "measured compute ms", "measured exposed comm ms", "predicted exposed comm ms",
                     "measured host wait ms", "predicted host wait ms"]
# the figures under BREAKDOWN_HEADERS after the first: keys of a phase and fields of its StepTotals alike
BREAKDOWN_KEYS = ("compute_s", "exposed_comm_s", "predicted_exposed_comm_s", "host_wait_s", "predicted_host_wait_s")


def breakdown_blocks(study: Study, plots: dict[str, Path]) -> list[tuple]:
    """Where the measured median step goes (bench train --trace), per strategy and phase, beside the
    cost model's exposed communication and host wait; a strategy without a GPU trace gets one line."""
    r = study.measured
    if r is None or not r.breakdowns:
        return []
    b: list[tuple] = [("h2", "Where the measured step goes")]
    b.append(("p", f"The median timed step of each strategy (the slowest rank's), read from `bench train --trace "
                   f"{r.trace_dir}`'s timelines and split per phase into compute, exposed communication (NCCL "
                   "running while no compute kernel does), host wait (the GPU idle until the next launch returns) "
                   "and other; beside them the cost model's exposed communication and host wait for the same "
                   "phase. The steps ran under the profiler: read the shares, not the step time."))
    if "step_breakdown" in plots:
        b.append(("img", plots["step_breakdown"], "measured median step per phase beside the prediction, "
                                                  "per strategy (ms)"))
    for x in r.breakdowns:
        if x.ok:
            b += strategy_breakdown_blocks(x)
    return b + no_breakdown_blocks(r.breakdowns)


def strategy_breakdown_blocks(x: StepBreakdown) -> list[tuple]:
    """One strategy's table of phases (and the step), then a line on the step's window and collectives."""
    totals = step_totals(x)
    rows = [[phase, *(_ms2(v[k]) for k in BREAKDOWN_KEYS)] for phase, v in x.phases.items()]
    rows.append(["step", *(_ms2(getattr(totals, k)) for k in BREAKDOWN_KEYS)])
    comm = totals.exposed_comm_by_collective
    line = (f"Rank {x.rank}'s step {x.step}: {_ms2(x.window_s)} ms on the GPU timeline (other: "
            f"{_ms2(totals.other_s)} ms), {_ms2(x.measured_s)} ms measured, {_ms2(x.predicted_step_time_s)} ms "
            "predicted")
    if comm:
        line += "; exposed communication by collective: " + ", ".join(f"{op} {_ms2(s)} ms" for op, s in comm.items())
    return [("h3", x.strategy), ("table", BREAKDOWN_HEADERS, rows), ("p", line + ".")]


def no_breakdown_blocks(breakdowns: tuple[StepBreakdown, ...]) -> list[tuple]:
    without = [f"{x.strategy}: {x.note}" for x in breakdowns if not x.ok]
    if not without:
        return []
    return [("p", "No breakdown:" if len(without) < len(breakdowns) else "No breakdown for any strategy:"),
            ("ul", without)]


RECOMMENDATION_TITLE = "Recommendation per topology"
RECOMMENDATION_HEADERS = ["topology", "strategy", "GPUs", "micro-batch", "checkpointing", "tokens/s", "peak GiB"]


def recommendation_blocks(study: Study) -> list[tuple]:
    """The planner's choice per topology as a short table; its reasons below, one clause per line. A mesh
    column where any choice has tensor, pipeline or context parallelism."""
    found = study.findings_of("recommendations")
    if not found:
        return [("h3", RECOMMENDATION_TITLE), ("p", "None.")]
    headers, rows = recommendation_table(found)
    return [("h3", RECOMMENDATION_TITLE), ("table", headers, rows),
            ("p", "Why, as the planner says it:"),
            ("ul", [(f.topology, _clauses(f.values.get("why") or "")) for f in found])]


def recommendation_table(found: tuple[Finding, ...]) -> tuple[list[str], list[list[str]]]:
    meshed = any_mesh(found)
    headers = [*RECOMMENDATION_HEADERS[:1], *(["mesh"] if meshed else []), *RECOMMENDATION_HEADERS[1:]]
    return headers, [recommendation_row(f, meshed) for f in found]


def recommendation_row(f: Finding, meshed: bool) -> list[str]:
    v = f.values
    if v.get("strategy") is None:
        return [f.topology, *(["-"] if meshed else []), "nothing fits", "-", "-", "-", "-", "-"]
    from topowise.report.console import mesh_cell

    mesh = [mesh_cell(*mesh_degrees(v))] if meshed else []
    return [f.topology, *mesh, _strategy_label(v), gpu_list(v["gpus"]), str(v["micro_batch"]), checkpointing_of(v),
            f"{v['tokens_per_s']:,.0f}", f"{v['peak_bytes'] / GIB:.1f}"]


def _strategy_label(v: dict) -> str:
    """The strategy, its shard groups where it has them, and whether it is compiled."""
    groups = f" (shard groups of {v['shard_group_size']})" if v.get("shard_group_size") else ""
    return v["strategy"] + groups + (", compiled" if v.get("compile") else "")


def _clauses(text: str) -> list[str]:
    """The planner's reason split into its sentences and `;` clauses, each a line of its own."""
    out = []
    for sentence in re.split(r"(?<=\.)\s+(?=[A-Z])", text.strip()):
        out += [c.strip().rstrip(".") for c in sentence.split("; ") if c.strip()]
    return out


FSDP_INSTEAD_HEADERS = ["topology", "GPUs", "strategy", "tokens/s vs DDP", "peak GiB", "saved GiB", "fits"]


def ddp_fsdp_blocks(study: Study) -> list[tuple]:
    """Where DDP does not fit (and what takes its place), then where FSDP comes near a DDP that fits."""
    over = study.findings_of("ddp_does_not_fit")
    instead = fsdp_instead_of_ddp(study)
    b: list[tuple] = [("h3", "Where DDP does not fit"),
                      ("ul", [f.text for f in over]) if over else ("p", "DDP fits everywhere in this study.")]
    if instead:
        b.append(("p", "zero2 and zero3 on the same GPUs, against the tokens/s DDP would reach if it had the memory:"))
        b.append(("table", FSDP_INSTEAD_HEADERS, [fsdp_instead_row(f) for f in instead]))
    return [*b, ("h3", "Where FSDP (zero2/zero3) comes within 10% of DDP with less memory"), fsdp_beside_block(study)]


def fsdp_instead_row(f: Finding) -> list[str]:
    v = f.values
    return [f.topology, str(len(v["gpus"])), v["strategy"], f"{v['speed_vs_ddp']:.0%}", f"{v['peak_bytes'] / GIB:.1f}",
            f"{v['memory_saved_bytes'] / GIB:.1f}", _yes_no(v["fits"])]


def fsdp_beside_block(study: Study) -> tuple:
    beside = fsdp_beside_ddp(study)
    if beside:
        return ("ul", [f.text for f in beside])
    if not ddp_fits_somewhere(study):
        return ("p", "DDP fits on none of these topologies (above), so there is no DDP to come near.")
    return ("p", "Where DDP fits, zero2 and zero3 stay below 90% of its tokens/s.")


def _ms0(v):
    return "-" if v is None else f"{v * 1000:,.0f}"


def _ms(v):
    return "-" if v is None else f"{v * 1000:,.1f}"


def _ms2(v):
    return "-" if v is None else f"{v * 1000:,.2f}"


def _gib(v):
    return "-" if v is None else f"{v / GIB:.1f}"


def _pct(v):
    return "-" if v is None else f"{v:+.1f}"


def _gbps(v):
    return "-" if v is None else f"{v:.1f}"


def _yes_no(flag) -> str:
    return "yes" if flag else "no"


def _gpu_ids(gpus) -> str:
    return ",".join(map(str, gpus))


# --- markdown and html ---------------------------------------------------------------------------

def to_markdown(blocks: list[tuple]) -> str:
    out = [_MARKDOWN[block[0]](block) for block in blocks if block[0] in _MARKDOWN]
    return "\n\n".join(out) + "\n"


def _md_heading(block: tuple) -> str:
    return "#" * int(block[0][1]) + " " + block[1]


def _md_paragraph(block: tuple) -> str:
    return block[1]


def _md_list(block: tuple) -> str:
    return "\n".join(_md_item(item) for item in block[1])


def _md_table(block: tuple) -> str:
    headers, rows = block[1], block[2]
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _md_image(block: tuple) -> str:
    return f"![{block[2]}]({Path(block[1]).name})"


def _md_item(item) -> str:
    """A list item: text, or (text, [sub-items])."""
    if isinstance(item, str):
        return f"- {item}"
    head, subs = item
    return "\n".join([f"- {head}", *(f"  - {sub}" for sub in subs)])


def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;max-width:1150px;margin:2em auto;padding:0 1em;
color:#222;line-height:1.45}
h1{border-bottom:2px solid #444}h2{border-bottom:1px solid #bbb;margin-top:2em}
table{border-collapse:collapse;margin:1em 0;font-size:.9em;display:block;max-width:100%;overflow-x:auto}
th,td{border:1px solid #ccc;padding:.25em .6em}
th{background:#f0f0f0}td{text-align:right}td:first-child,td:nth-child(2),td:last-child{text-align:left}
img{max-width:100%;border:1px solid #ddd;margin:.5em 0}code{background:#f4f4f4;padding:0 .2em}
"""


def to_html(blocks: list[tuple], title: str) -> str:
    """One file: styles inline, images as data: URIs, no scripts, no links out."""
    out = ["<!DOCTYPE html>", "<html lang=\"en\"><head><meta charset=\"utf-8\">",
           "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">",
           f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>"]
    out += [_HTML[block[0]](block) for block in blocks if block[0] in _HTML]
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def _html_heading(block: tuple) -> str:
    return f"<{block[0]}>{_inline(block[1])}</{block[0]}>"


def _html_paragraph(block: tuple) -> str:
    return f"<p>{_inline(block[1])}</p>"


def _html_list(block: tuple) -> str:
    return "<ul>" + "".join(_html_item(i) for i in block[1]) + "</ul>"


def _html_table(block: tuple) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in block[1])
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in block[2])
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _html_image(block: tuple) -> str:
    data = base64.b64encode(Path(block[1]).read_bytes()).decode("ascii")
    return (f"<figure><img src=\"data:image/png;base64,{data}\" alt=\"{html.escape(block[2])}\">"
            f"<figcaption>{html.escape(block[2])}</figcaption></figure>")


def _html_item(item) -> str:
    if isinstance(item, str):
        return f"<li>{_inline(item)}</li>"
    head, subs = item
    return f"<li>{_inline(head)}<ul>" + "".join(f"<li>{_inline(s)}</li>" for s in subs) + "</ul></li>"


def _inline(text: str) -> str:
    """Escape, then turn `code` spans into <code>."""
    parts = html.escape(text).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


# how each kind of block is written; a kind a renderer does not know is left out
_MARKDOWN = {"h1": _md_heading, "h2": _md_heading, "h3": _md_heading, "p": _md_paragraph, "ul": _md_list,
             "table": _md_table, "img": _md_image}
_HTML = {"h1": _html_heading, "h2": _html_heading, "h3": _html_heading, "p": _html_paragraph, "ul": _html_list,
         "table": _html_table, "img": _html_image}


def write_report(study: Study, out_dir: str | Path, command: str = "") -> dict[str, Path]:
    """DIR/study.json, the PNG plots, DIR/report.md and DIR/report.html; returns name -> path."""
    from topowise.report.plots import write_plots

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path = out_dir / "study.json"
    json_path.write_text(json.dumps(study.to_dict(), indent=1) + "\n")
    plots = write_plots(study, out_dir)
    blocks = report_blocks(study, plots, command)
    md_path = out_dir / "report.md"
    md_path.write_text(to_markdown(blocks))
    html_path = out_dir / "report.html"
    html_path.write_text(to_html(blocks, f"topowise study: {study.model['name']}"))
    return {"report.md": md_path, "report.html": html_path, "study.json": json_path, **plots}


# --- terminal ------------------------------------------------------------------------------------

def print_summary(study: Study, paths: dict[str, Path], console=None, wide: bool = False) -> None:
    """A table per topology (all GPUs), the recommendations as a table, the other findings, the files; fitted
    to the screen (report.console.print_table), every column with `wide`."""
    from topowise.report.console import screen_console

    console = console or screen_console()
    m = study.model
    console.print(f"[bold]topowise study[/bold]: {m['name']} ({m['params'] / 1e9:.2f} B params), "
                  f"seq {study.seq_len}, micro-batch {study.micro_batch}, profile {study.profile}", highlight=False)
    for t in study.topologies:
        _print_topology(console, study, t, wide)
    if study.measured:
        _print_measured(console, study.measured, wide)
    _print_recommendations(console, study, wide)
    _print_findings(console, study)
    _print_written(console, paths)


# what the recommendation answers (where, what, how fast, in how much memory) is kept at any width
RECOMMENDATION_LEFT = ("topology", "mesh", "strategy", "GPUs", "checkpointing")
RECOMMENDATION_DROPPABLE = ("micro-batch", "checkpointing")


def _print_recommendations(console, study: Study, wide: bool) -> None:
    from rich import box

    from topowise.report.console import Col, print_table

    found = study.findings_of("recommendations")
    if not found:
        return
    headers, rows = recommendation_table(found)
    cols = [Col(h, "left" if h in RECOMMENDATION_LEFT else "right", key=h not in RECOMMENDATION_DROPPABLE)
            for h in headers]
    print_table(console, cols, rows, wide=wide,
                title="Recommendation per topology (the planner's reasons: report.md)", title_justify="left",
                box=box.SIMPLE_HEAD, show_edge=False, collapse_padding=True)


def _print_findings(console, study: Study) -> None:
    """The findings in sentences, then what --network and the network questions added (their tables are in
    report.md)."""
    from topowise.report.console import prose

    console.print("[bold]Findings[/bold]")
    for line in _summary_findings(study):
        prose(console, line, "  - ", "    ")
    if study.networks:
        prose(console, f"Other networks (--network): {len(study.networks)} cluster(s), tables in report.md")
    if study.questions:
        console.print("[bold]Network questions[/bold] (tables in report.md)")
        for a in study.questions:
            prose(console, a.title, "  ", "  ")
            for sentence in a.sentences:
                prose(console, sentence, "    - ", "      ")


def _print_written(console, paths: dict[str, Path]) -> None:
    from topowise.report.console import prose

    console.print("[bold]Wrote[/bold]")
    for name in ("report.md", "report.html", "study.json"):
        if name in paths:  # a path whole, however long
            console.print(f"  {paths[name]}", markup=False, highlight=False, soft_wrap=True)
    pngs = [p for p in paths.values() if str(p).endswith(".png")]
    if pngs:
        prose(console, f"{len(pngs)} plots in {pngs[0].parent}: " + ", ".join(p.name for p in pngs), "  ", "    ")


MEASURED_SHORT_HEADERS = ("strategy", "status", "pred ms", "meas ms", "err %", "pred GiB", "meas GiB", "err %")


def _print_measured(console, r, wide: bool) -> None:
    """Predicted beside measured (study --measure), a row per strategy."""
    from topowise.report.console import Col, print_table

    cols = [Col(h, "left" if h in ("strategy", "status") else "right") for h in MEASURED_SHORT_HEADERS]
    print_table(console, cols, [measured_row(x) for x in r.rows], wide=wide,
                title=f"measured: {r.model} on {r.topology}", title_justify="left")


def _print_topology(console, study: Study, t, wide: bool) -> None:
    """The strategies on all GPUs of one topology; a case that could not be predicted says why under it."""
    from topowise.report.console import Col, print_table

    place = t.placements[0]
    cases = [c for c in (study.case(t.label, place.label, s) for s in study.strategies) if c is not None]
    rows = [_summary_case_row(c) for c in cases]
    cols = [Col("strategy"), Col("GPUs"), Col("tokens/s", "right"), Col("peak GiB", "right"), Col("fits")]
    print_table(console, cols, rows, wide=wide, title_justify="left",
                title=f"{t.label}: {len(place.gpus)}x {t.gpu_name} ({t.gpu_memory_bytes / GIB:.0f} GiB)")
    for c in cases:
        if not c.ok:  # the reason is prose: under the table
            console.print(f"  {c.strategy}: {c.error}", markup=False, highlight=False)


def _summary_case_row(c: Case) -> list[str]:
    if not c.ok:
        return [c.strategy, gpu_list(c.gpus), "-", "-", "[yellow]see below[/yellow]"]
    return [c.strategy, gpu_list(c.gpus), f"{c.tokens_per_s:,.0f}", _gib(c.peak_bytes),
            "[green]yes[/green]" if c.fits else "[red]no[/red]"]


def _summary_findings(study: Study) -> list[str]:
    """The findings the terminal summary lists (the tables of the rest are in report.md)."""
    lines = [f.text for kind in ("nvlink_pcie_ratio", "ddp_does_not_fit") for f in study.findings_of(kind)]
    lines += [f.text for f in fsdp_beside_ddp(study)]
    rescue = fsdp_rescue(study)
    if rescue is not None:
        lines.append(f"where DDP does not fit, zero2 or zero3 fits instead on {rescue.rescued} of those "
                     f"{rescue.topologies} topologies (report.md)")
    worst = worst_island_slowdown(study)
    if worst is not None:
        lines.append(f"{len(study.findings_of('island_slowdown'))} island-slowdown figures (report.md); "
                     f"the largest: {worst.text}")
    return lines
