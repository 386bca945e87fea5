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
from topowise.report.study import GIB, Study

# --- blocks --------------------------------------------------------------------------------------


def report_blocks(study: Study, plots: dict[str, Path], command: str = "") -> list[tuple]:
    m = study.model
    b: list[tuple] = [("h1", f"topowise study: {m['name']}")]
    b.append(("p", f"{m['name']}: {m['params']:,} parameters ({m['params'] / 1e9:.2f} B), sequence length "
                   f"{study.seq_len}, micro-batch {study.micro_batch} per GPU, bf16 compute with fp32 master "
                   f"weights and AdamW; cost model profile: {study.profile}. Every number here is a prediction "
                   "of topowise's cost model unless a column says measured; every finding is computed from "
                   "those numbers."))
    if command:
        b.append(("p", f"Reproduce: `{command}`"))

    b.append(("h2", "Findings"))
    b += recommendation_blocks(study)
    b.append(("h3", "NVLink vs PCIe bandwidth"))
    b.append(("ul", [f.text for f in study.findings_of("nvlink_pcie_ratio")] or ["None."]))
    b.append(("h3", "Slowdown when a job spans NVLink islands"))
    slow = study.findings_of("island_slowdown")
    if slow:  # many numbers of one shape: a table reads better than sentences
        b.append(("p", "Step time with the GPUs in different NVLink islands over step time with the "
                       "same number of GPUs inside one island (1.00x = no slowdown)."))
        b.append(("table", ["topology", "GPUs", "strategy", "inside", "across", "inside ms", "across ms",
                            "slowdown", "fits"],
                  [[f.topology, str(v["gpus_per_job"]), v["strategy"], ",".join(map(str, v["inside_gpus"])),
                    ",".join(map(str, v["across_gpus"])), _ms(v["inside_step_time_s"]),
                    _ms(v["across_step_time_s"]), f"{v['slowdown']:.2f}x", "yes" if v["fits"] else "no"]
                   for f in slow for v in [f.values]]))
    else:
        b.append(("p", "No topology here has both a placement inside one island and one across islands."))
    b += ddp_fsdp_blocks(study)

    b.append(("h2", "Throughput and memory (all GPUs of each node)"))
    for name, alt in (("throughput", "predicted tokens/s per strategy per topology"),
                      ("memory", "predicted peak memory per GPU per strategy per topology, with GPU memory")):
        if name in plots:
            b.append(("img", plots[name], alt))
    if "slowdown" in plots:
        b.append(("h2", "Spanning islands"))
        b.append(("img", plots["slowdown"], "step time across islands over inside one island"))

    for t in study.topologies:
        b.append(("h2", f"Topology {t.label}"))
        nv = next((f for f in study.findings_of("nvlink_pcie_ratio") if f.topology == t.label), None)
        islands = "; ".join("{" + ",".join(map(str, i)) + "}" for i in t.islands)
        b.append(("p", f"{t.name}: {len(t.link_gbps)}x {t.gpu_name}, {t.gpu_memory_bytes / GIB:.1f} GiB each; "
                       f"NVLink islands: {islands}." + (f" {nv.text}" if nv else "")))
        key = f"links_{t.label}"
        if key in plots:
            b.append(("img", plots[key], f"link matrix of {t.label} in GB/s"))
        b.append(("table", ["placement", "GPUs", "islands", "ring GB/s"],
                  [[p.label, ",".join(map(str, p.gpus)), str(p.islands_spanned),
                    "-" if p.bottleneck_gbps is None else f"{p.bottleneck_gbps:.1f}"] for p in t.placements]))
        b.append(placement_table(study, t))

    b += network_blocks(study, plots)
    if study.questions:
        from topowise.report.networks import blocks as question_blocks

        b += question_blocks(study.questions)

    if study.measured:
        r = study.measured
        b.append(("h2", f"Measured on this machine ({r.topology}, GPUs {','.join(map(str, r.gpus))})"))
        b.append(("p", f"{r.model}, micro-batch {r.micro_batch}, sequence {r.seq_len}; command: `{r.command}`. "
                       "Error = (predicted - measured) / measured."))
        b.append(("table", ["strategy", "status", "predicted ms", "measured ms", "step error %",
                            "predicted allocated GiB", "measured allocated GiB", "memory error %"],
                  [[x.strategy, x.status, _ms(x.predicted_step_time_s), _ms(x.measured_step_time_s),
                    _pct(x.step_error_pct), _gib(x.predicted_peak_bytes), _gib(x.measured_peak_bytes),
                    _pct(x.memory_error_pct)] for x in r.rows]))
        b += breakdown_blocks(study, plots)
    b.append(("p", "All numbers: study.json (every prediction's full breakdown, the findings)."))
    return b


def placement_table(study: Study, t) -> tuple:
    """Every strategy on every placement of one topology; a "note" column (why a case has no prediction)
    only where some case has one."""
    rows = []
    for p in t.placements:
        for s in study.strategies:
            c = study.case(t.label, p.label, s)
            if c is None:
                continue
            if not c.ok:
                rows.append([p.label, s, "-", "-", "-", "-", c.error])
                continue
            rows.append([p.label, s, f"{c.step_time_s * 1000:,.0f}", f"{c.tokens_per_s:,.0f}",
                         f"{c.peak_bytes / GIB:.1f}", "yes" if c.fits else "no", ""])
    headers = ["placement", "strategy", "step ms", "tokens/s", "peak GiB", "fits", "note"]
    if not any(row[-1] for row in rows):
        headers, rows = headers[:-1], [row[:-1] for row in rows]
    return ("table", headers, rows)


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
    without = []
    for x in r.breakdowns:
        if not x.ok:
            without.append(f"{x.strategy}: {x.note}")
            continue
        b.append(("h3", x.strategy))
        rows = []
        for phase, v in x.phases.items():
            rows.append([phase, _ms2(v["compute_s"]), _ms2(v["exposed_comm_s"]), _ms2(v["predicted_exposed_comm_s"]),
                         _ms2(v["host_wait_s"]), _ms2(v["predicted_host_wait_s"])])
        total = {k: sum(v[k] for v in x.phases.values()) for k in ("compute_s", "exposed_comm_s", "host_wait_s")}
        pred = {k: _sum_or_none(v[k] for v in x.phases.values())
                for k in ("predicted_exposed_comm_s", "predicted_host_wait_s")}
        rows.append(["step", _ms2(total["compute_s"]), _ms2(total["exposed_comm_s"]),
                     _ms2(pred["predicted_exposed_comm_s"]), _ms2(total["host_wait_s"]),
                     _ms2(pred["predicted_host_wait_s"])])
        b.append(("table", BREAKDOWN_HEADERS, rows))
        other = sum(v["other_s"] for v in x.phases.values())
        comm = {}
        for v in x.phases.values():
            for op, s in v["exposed_comm_by_collective"].items():
                comm[op] = comm.get(op, 0.0) + s
        line = (f"Rank {x.rank}'s step {x.step}: {_ms2(x.window_s)} ms on the GPU timeline (other: {_ms2(other)} ms), "
                f"{_ms2(x.measured_s)} ms measured, {_ms2(x.predicted_step_time_s)} ms predicted")
        line += ("; exposed communication by collective: " + ", ".join(f"{op} {_ms2(s)} ms" for op, s in comm.items())
                 if comm else "") + "."
        b.append(("p", line))
    if without:
        b.append(("p", "No breakdown:" if len(without) < len(r.breakdowns) else "No breakdown for any strategy:"))
        b.append(("ul", without))
    return b


def _sum_or_none(values):
    values = list(values)
    return None if any(v is None for v in values) else sum(values)


def recommendation_blocks(study: Study) -> list[tuple]:
    """The planner's choice per topology as a short table; its reasons below, one clause per line. A mesh
    column where any choice has tensor, pipeline or context parallelism."""
    from topowise.report.console import mesh_cell

    found = study.findings_of("recommendations")
    meshed = any(max(f.values.get(d) or 1 for d in ("tp", "pp", "cp")) > 1 for f in found)
    rows, reasons = [], []
    for f in found:
        v = f.values
        mesh = [mesh_cell(*(v.get(d) or 1 for d in ("tp", "pp", "cp", "dp")))] if meshed else []
        if v.get("strategy") is None:
            rows.append([f.topology, *(["-"] if meshed else []), "nothing fits", "-", "-", "-", "-", "-"])
        else:
            groups = f" (shard groups of {v['shard_group_size']})" if v.get("shard_group_size") else ""
            groups += ", compiled" if v.get("compile") else ""
            rows.append([f.topology, *mesh, v["strategy"] + groups, gpu_list(v["gpus"]), str(v["micro_batch"]),
                         v.get("checkpointing") or ("full" if v["activation_checkpointing"] else "none"),
                         f"{v['tokens_per_s']:,.0f}",
                         f"{v['peak_bytes'] / GIB:.1f}"])
        reasons.append((f.topology, _clauses(v.get("why") or "")))
    if not rows:
        return [("h3", "Recommendation per topology"), ("p", "None.")]
    return [("h3", "Recommendation per topology"),
            ("table", ["topology", *(["mesh"] if meshed else []), "strategy", "GPUs", "micro-batch", "checkpointing",
                       "tokens/s", "peak GiB"], rows),
            ("p", "Why, as the planner says it:"),
            ("ul", reasons)]


def _clauses(text: str) -> list[str]:
    """The planner's reason split into its sentences and `;` clauses, each a line of its own."""
    out = []
    for sentence in re.split(r"(?<=\.)\s+(?=[A-Z])", text.strip()):
        out += [c.strip().rstrip(".") for c in sentence.split("; ") if c.strip()]
    return out


def ddp_fsdp_blocks(study: Study) -> list[tuple]:
    """Where DDP does not fit (and what takes its place), then where FSDP comes near a DDP that fits."""
    b: list[tuple] = [("h3", "Where DDP does not fit")]
    over = study.findings_of("ddp_does_not_fit")
    near = study.findings_of("fsdp_near_ddp")
    instead = [f for f in near if not f.values["ddp_fits"]]
    beside = [f for f in near if f.values["ddp_fits"]]
    b.append(("ul", [f.text for f in over]) if over else ("p", "DDP fits everywhere in this study."))
    if instead:
        b.append(("p", "zero2 and zero3 on the same GPUs, against the tokens/s DDP would reach if it had the memory:"))
        b.append(("table", ["topology", "GPUs", "strategy", "tokens/s vs DDP", "peak GiB", "saved GiB", "fits"],
                  [[f.topology, str(len(v["gpus"])), v["strategy"], f"{v['speed_vs_ddp']:.0%}",
                    f"{v['peak_bytes'] / GIB:.1f}", f"{v['memory_saved_bytes'] / GIB:.1f}",
                    "yes" if v["fits"] else "no"] for f in instead for v in [f.values]]))
    b.append(("h3", "Where FSDP (zero2/zero3) comes within 10% of DDP with less memory"))
    if beside:
        b.append(("ul", [f.text for f in beside]))
    elif not any(c.fits for c in study.cases if (c.strategy, c.placement) == ("ddp", "all") and c.ok):
        b.append(("p", "DDP fits on none of these topologies (above), so there is no DDP to come near."))
    else:
        b.append(("p", "Where DDP fits, zero2 and zero3 stay below 90% of its tokens/s."))
    return b


def _ms(v):
    return "-" if v is None else f"{v * 1000:,.1f}"


def _ms2(v):
    return "-" if v is None else f"{v * 1000:,.2f}"


def _gib(v):
    return "-" if v is None else f"{v / GIB:.1f}"


def _pct(v):
    return "-" if v is None else f"{v:+.1f}"


# --- markdown and html ---------------------------------------------------------------------------

def to_markdown(blocks: list[tuple]) -> str:
    out = []
    for block in blocks:
        kind = block[0]
        if kind in ("h1", "h2", "h3"):
            out.append("#" * int(kind[1]) + " " + block[1])
        elif kind == "p":
            out.append(block[1])
        elif kind == "ul":
            out.append("\n".join(_md_item(item) for item in block[1]))
        elif kind == "table":
            headers, rows = block[1], block[2]
            lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
            lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
            out.append("\n".join(lines))
        elif kind == "img":
            out.append(f"![{block[2]}]({Path(block[1]).name})")
    return "\n\n".join(out) + "\n"


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
    for block in blocks:
        kind = block[0]
        if kind in ("h1", "h2", "h3"):
            out.append(f"<{kind}>{_inline(block[1])}</{kind}>")
        elif kind == "p":
            out.append(f"<p>{_inline(block[1])}</p>")
        elif kind == "ul":
            out.append("<ul>" + "".join(_html_item(i) for i in block[1]) + "</ul>")
        elif kind == "table":
            head = "".join(f"<th>{html.escape(h)}</th>" for h in block[1])
            body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>"
                           for row in block[2])
            out.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
        elif kind == "img":
            data = base64.b64encode(Path(block[1]).read_bytes()).decode("ascii")
            out.append(f"<figure><img src=\"data:image/png;base64,{data}\" alt=\"{html.escape(block[2])}\">"
                       f"<figcaption>{html.escape(block[2])}</figcaption></figure>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def _html_item(item) -> str:
    if isinstance(item, str):
        return f"<li>{_inline(item)}</li>"
    head, subs = item
    return f"<li>{_inline(head)}<ul>" + "".join(f"<li>{_inline(s)}</li>" for s in subs) + "</ul></li>"


def _inline(text: str) -> str:
    """Escape, then turn `code` spans into <code>."""
    parts = html.escape(text).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


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
    from rich import box

    from topowise.report.console import Col, print_table, prose, screen_console

    console = console or screen_console()
    m = study.model
    console.print(f"[bold]topowise study[/bold]: {m['name']} ({m['params'] / 1e9:.2f} B params), "
                  f"seq {study.seq_len}, micro-batch {study.micro_batch}, profile {study.profile}", highlight=False)
    for t in study.topologies:
        _print_topology(console, study, t, wide)
    if study.measured:
        _print_measured(console, study.measured, wide)
    blocks = recommendation_blocks(study)
    table_block = next((b for b in blocks if b[0] == "table"), None)
    if table_block:
        # what the recommendation answers (where, what, how fast, in how much memory): kept at any width
        cols = [Col(h, "left" if h in ("topology", "mesh", "strategy", "GPUs", "checkpointing") else "right",
                    key=h not in ("micro-batch", "checkpointing")) for h in table_block[1]]
        print_table(console, cols, table_block[2], wide=wide,
                    title="Recommendation per topology (the planner's reasons: report.md)", title_justify="left",
                    box=box.SIMPLE_HEAD, show_edge=False, collapse_padding=True)
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
    console.print("[bold]Wrote[/bold]")
    for name in ("report.md", "report.html", "study.json"):
        if name in paths:  # a path whole, however long
            console.print(f"  {paths[name]}", markup=False, highlight=False, soft_wrap=True)
    pngs = [p for k, p in paths.items() if str(p).endswith(".png")]
    if pngs:
        prose(console, f"{len(pngs)} plots in {pngs[0].parent}: " + ", ".join(p.name for p in pngs), "  ", "    ")


def _print_measured(console, r, wide: bool) -> None:
    """Predicted beside measured (study --measure), a row per strategy."""
    from topowise.report.console import Col, print_table

    cols = [Col(h, "left" if h in ("strategy", "status") else "right") for h in
            ("strategy", "status", "pred ms", "meas ms", "err %", "pred GiB", "meas GiB", "err %")]
    rows = [[x.strategy, x.status, _ms(x.predicted_step_time_s), _ms(x.measured_step_time_s), _pct(x.step_error_pct),
             _gib(x.predicted_peak_bytes), _gib(x.measured_peak_bytes), _pct(x.memory_error_pct)] for x in r.rows]
    print_table(console, cols, rows, wide=wide, title=f"measured: {r.model} on {r.topology}", title_justify="left")


def _print_topology(console, study: Study, t, wide: bool) -> None:
    """The strategies on all GPUs of one topology; a case that could not be predicted says why under it."""
    from topowise.report.console import Col, print_table

    place = t.placements[0]
    rows, notes = [], []
    for s in study.strategies:
        c = study.case(t.label, place.label, s)
        if c is None:
            continue
        if not c.ok:  # the reason is prose: under the table
            rows.append([s, gpu_list(c.gpus), "-", "-", "[yellow]see below[/yellow]"])
            notes.append(f"  {s}: {c.error}")
            continue
        rows.append([s, gpu_list(c.gpus), f"{c.tokens_per_s:,.0f}", f"{c.peak_bytes / GIB:.1f}",
                     "[green]yes[/green]" if c.fits else "[red]no[/red]"])
    cols = [Col("strategy"), Col("GPUs"), Col("tokens/s", "right"), Col("peak GiB", "right"), Col("fits")]
    print_table(console, cols, rows, wide=wide, title_justify="left",
                title=f"{t.label}: {len(place.gpus)}x {t.gpu_name} ({t.gpu_memory_bytes / GIB:.0f} GiB)")
    for note in notes:
        console.print(note, markup=False, highlight=False)


def _summary_findings(study: Study) -> list[str]:
    """The findings the terminal summary lists (the tables of the rest are in report.md)."""
    near = study.findings_of("fsdp_near_ddp")
    lines = [f.text for kind in ("nvlink_pcie_ratio", "ddp_does_not_fit") for f in study.findings_of(kind)]
    lines += [f.text for f in near if f.values["ddp_fits"]]
    instead = [f for f in near if not f.values["ddp_fits"]]
    if instead:
        rescued = {f.topology for f in instead if f.values["fits"]}
        lines.append(f"where DDP does not fit, zero2 or zero3 fits instead on {len(rescued)} of those "
                     f"{len({f.topology for f in instead})} topologies (report.md)")
    slow = study.findings_of("island_slowdown")
    if slow:  # the largest among placements that fit, when some do: those are the ones a job could take
        worst = max([f for f in slow if f.values["fits"]] or slow, key=lambda f: f.values["slowdown"])
        lines.append(f"{len(slow)} island-slowdown figures (report.md); the largest: {worst.text}")
    return lines
