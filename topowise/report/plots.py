"""The study's plots as PNG files (matplotlib, Agg backend, imported only when a plot is drawn)."""

from __future__ import annotations

from pathlib import Path

from topowise.report.study import GIB, Study

STRATEGY_COLORS = {"ddp": "#4c72b0", "zero1": "#55a868", "zero2": "#c44e52", "zero3": "#8172b2", "hsdp": "#ccb974"}
DPI = 110


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only: no display, no GUI toolkit
    import matplotlib.pyplot as plt

    return plt


def write_plots(study: Study, out_dir: str | Path) -> dict[str, Path]:
    """Every plot of the study: name -> path. A plot with nothing to show is not written."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {
        "throughput": plot_throughput(study, out_dir / "throughput.png"),
        "memory": plot_memory(study, out_dir / "memory.png"),
        "slowdown": plot_island_slowdown(study, out_dir / "slowdown.png"),
    }
    if study.networks:
        paths["networks"] = plot_networks(study, out_dir / "networks.png")
    if study.measured is not None:
        paths["step_breakdown"] = plot_step_breakdown(study, out_dir / "step_breakdown.png")
    for t in study.topologies:
        paths[f"links_{t.label}"] = plot_link_matrix(study, t.label, out_dir / f"links_{_safe(t.label)}.png")
    return {k: v for k, v in paths.items() if v is not None}


STUB = 0.03  # a bar that does not fit, drawn as a stub: this share of the tallest bar that does


def _grouped_bars(ax, groups: list[str], strategies: tuple[str, ...], value, *, hatch_if=None, stub: bool = False):
    """One group of bars per entry of `groups`, one bar per strategy; returns the bar width. A bar `hatch_if`
    names is hatched; with `stub` it is also cut to a short stub labelled "does not fit" (a throughput
    it cannot reach must not read as a winner)."""
    n = len(strategies)
    width = 0.8 / n
    fits = [v for s in strategies for g in groups
            if (v := value(g, s)) is not None and not (hatch_if and hatch_if(g, s))]
    stub_height = STUB * max(fits, default=1.0)
    for j, strategy in enumerate(strategies):
        xs, heights, hatches = [], [], []
        for i, g in enumerate(groups):
            v = value(g, strategy)
            if v is None:
                continue
            hatched = bool(hatch_if and hatch_if(g, strategy))
            xs.append(i - 0.4 + width * (j + 0.5))
            heights.append(stub_height if hatched and stub else v)
            hatches.append(hatched)
        bars = ax.bar(xs, heights, width * 0.92, label=strategy, color=STRATEGY_COLORS.get(strategy, "#888888"))
        for bar, hatched in zip(bars, hatches):
            if hatched:
                bar.set_hatch("///")
                bar.set_alpha(0.45)
                bar.set_edgecolor("black")
                if stub:
                    ax.annotate("does not fit", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                                xytext=(0, 2), textcoords="offset points", ha="center", va="bottom", rotation=90,
                                fontsize=7)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups)
    ax.set_xlim(-0.6, len(groups) - 0.4)
    return width


def _legend_with_no_fit(ax, plt, note: str = "hatched: does not fit in GPU memory"):
    """One plain swatch per strategy (a strategy's first bar may be hatched: its swatch is not), the
    other labelled artists (GPU memory), then what hatching means."""
    from matplotlib.patches import Patch

    handles, labels = [], []
    for handle, label in zip(*ax.get_legend_handles_labels()):
        if label in STRATEGY_COLORS:
            handle = Patch(facecolor=STRATEGY_COLORS[label], edgecolor="none")
        handles.append(handle)
        labels.append(label)
    handles.append(Patch(facecolor="white", edgecolor="black", hatch="///"))
    labels.append(note)
    ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9, frameon=False)


def _title(study: Study, what: str) -> str:
    m = study.model
    return (f"{what}: {m['name']} ({m['params'] / 1e9:.2f} B params), seq {study.seq_len}, "
            f"micro-batch {study.micro_batch}, all GPUs of each node")


def plot_throughput(study: Study, path: Path) -> Path:
    plt = _pyplot()
    groups = [t.label for t in study.topologies]
    fig, ax = plt.subplots(figsize=(11, 5))

    def value(g, s):
        c = study.case(g, "all", s)
        return c.tokens_per_s if c and c.ok else None

    def no_fit(g, s):
        c = study.case(g, "all", s)
        return c is not None and c.ok and not c.fits

    _grouped_bars(ax, groups, study.strategies, value, hatch_if=no_fit, stub=True)
    ax.set_ylabel("predicted tokens/s (whole node)")
    ax.yaxis.set_major_formatter(_thousands())
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    ax.set_title(_title(study, "Throughput"), fontsize=11)
    ax.set_xticklabels([f"{t.label}\n({len(t.placements[0].gpus)}x {_short_gpu(t.gpu_name)})"
                        for t in study.topologies])
    _legend_with_no_fit(ax, plt, "hatched stub: does not fit in GPU memory")
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def plot_memory(study: Study, path: Path) -> Path:
    plt = _pyplot()
    groups = [t.label for t in study.topologies]
    fig, ax = plt.subplots(figsize=(11, 5))

    def value(g, s):
        c = study.case(g, "all", s)
        return c.peak_bytes / GIB if c and c.ok else None

    def no_fit(g, s):
        c = study.case(g, "all", s)
        return c is not None and c.ok and not c.fits

    _grouped_bars(ax, groups, study.strategies, value, hatch_if=no_fit)
    for i, t in enumerate(study.topologies):  # the GPU's memory across its group of bars
        gib = t.gpu_memory_bytes / GIB
        ax.hlines(gib, i - 0.45, i + 0.45, colors="black", linestyles="dashed", linewidth=1.5,
                  label="GPU memory" if i == 0 else None)
        ax.annotate(f"{gib:.0f} GiB", (i + 0.45, gib), xytext=(0, 3), textcoords="offset points",
                    ha="right", va="bottom", fontsize=8,
                    bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1})
    ax.set_ylabel("predicted peak memory per GPU (GiB)")
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    ax.set_title(_title(study, "Peak memory"), fontsize=11)
    ax.set_xticklabels([f"{t.label}\n({_short_gpu(t.gpu_name)})" for t in study.topologies])
    _legend_with_no_fit(ax, plt)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def plot_island_slowdown(study: Study, path: Path) -> Path | None:
    """Step time across islands over inside one island, per strategy, for each topology and job size."""
    rows = study.findings_of("island_slowdown")
    if not rows:
        return None
    groups = list(dict.fromkeys((f.topology, f.values["gpus_per_job"]) for f in rows))
    lookup = {(f.topology, f.values["gpus_per_job"], f.values["strategy"]): f for f in rows}
    strategies = tuple(s for s in study.strategies if any(k[2] == s for k in lookup))
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(8.0, 2.4 * len(groups) + 4), 5))
    names = [f"{t}|{k}" for t, k in groups]

    def value(g, s):
        t, k = g.split("|")
        f = lookup.get((t, int(k), s))
        return f.values["slowdown"] if f else None

    def no_fit(g, s):
        t, k = g.split("|")
        f = lookup.get((t, int(k), s))
        return f is not None and not f.values["fits"]

    _grouped_bars(ax, names, strategies, value, hatch_if=no_fit)
    for container in ax.containers:  # the factor on each bar, upright so that neighbours never overlap
        ax.bar_label(container, fmt="%.2fx", fontsize=7, padding=2, rotation=90)
    top = max((f.values["slowdown"] for f in rows), default=1.0)
    ax.set_ylim(0, top * 1.15)  # room for the labels above the tallest bar
    ax.axhline(1.0, color="black", linewidth=1)
    ax.set_xticklabels([f"{t}\n{k} GPUs" for t, k in groups])
    ax.set_ylabel("step time across islands / inside one (x)")
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    ax.set_title(f"Slowdown when a job spans NVLink islands: {study.model['name']}, seq {study.seq_len}", fontsize=11)
    _legend_with_no_fit(ax, plt, "hatched: the placement does not fit in memory")
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def plot_link_matrix(study: Study, label: str, path: Path) -> Path:
    """GB/s per direction between every pair of GPUs, with the link kind (NV#, NODE, SYS) in each cell."""
    import numpy as np

    t = next(t for t in study.topologies if t.label == label)
    plt = _pyplot()
    n = len(t.link_gbps)
    data = np.array(t.link_gbps, dtype=float)
    masked = np.ma.masked_where(np.eye(n, dtype=bool), data)
    size = max(4.5, min(8.0, 0.6 * n + 2.5))
    fig, ax = plt.subplots(figsize=(size + 1.2, size))
    # one colour scale for every topology in the study, so the heatmaps compare across nodes
    vmax = max(1.0, max(max(max(r) for r in o.link_gbps) for o in study.topologies if o.link_gbps))
    cmap = plt.get_cmap("viridis").with_extremes(bad="#dddddd")  # the diagonal: no link
    im = ax.imshow(masked, cmap=cmap, vmin=0, vmax=vmax)
    small = n > 10
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            v = data[i, j]
            rate = f"{v:.0f}" if v >= 100 else f"{v:.1f}"
            text = rate if small else f"{t.link_kind[i][j]}\n{rate}"
            ax.text(j, i, text, ha="center", va="center", fontsize=6 if small else 8,
                    color="white" if v < 0.6 * vmax else "black")
    ax.set_xticks(range(n))
    ax.set_yticks(range(n))
    ax.set_xticklabels([f"GPU{i}" for i in range(n)], fontsize=8, rotation=45 if n > 6 else 0)
    ax.set_yticklabels([f"GPU{i}" for i in range(n)], fontsize=8)
    islands = ", ".join("{" + ",".join(map(str, isl)) + "}" for isl in t.islands if len(isl) > 1) or "none"
    ax.set_title(f"{label}: link GB/s per direction\nNVLink islands: {islands}", fontsize=10)
    fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04, label="GB/s (same scale for every topology)")
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


PIECE_COLORS = {"compute": "#4c72b0", "exposed comm": "#c44e52", "host wait": "#dd8452", "other": "#bbbbbb"}


def step_pieces(phase: dict) -> tuple[dict[str, float], dict[str, float]]:
    """(measured, predicted) pieces of one phase of a StepBreakdown, seconds; the prediction's compute
    is its GPU time less its exposed communication (as breakdown.png draws it), None read as 0."""
    measured = {"compute": phase["compute_s"], "exposed comm": phase["exposed_comm_s"],
                "host wait": phase["host_wait_s"], "other": phase["other_s"]}
    comm = phase.get("predicted_exposed_comm_s") or 0.0
    predicted = {"compute": max(0.0, (phase.get("predicted_gpu_s") or 0.0) - comm), "exposed comm": comm,
                 "host wait": phase.get("predicted_host_wait_s") or 0.0}
    return measured, predicted


def plot_step_breakdown(study: Study, path: Path) -> Path | None:
    """One group per strategy with a GPU trace: per phase (F, B, O) the measured median step's pieces
    stacked, beside the prediction's (hatched), in ms. None when no strategy has a breakdown."""
    shown = [x for x in (study.measured.breakdowns if study.measured else ()) if x.ok]
    if not shown:
        return None
    plt = _pyplot()
    from matplotlib.patches import Patch

    phases = list(shown[0].phases)
    per_group = 2 * len(phases)
    width = 0.84 / per_group
    fig, ax = plt.subplots(figsize=(max(7.0, 2.6 * len(shown) + 3.5), 5))
    for gi, x in enumerate(shown):
        for pj, phase in enumerate(phases):
            measured, predicted = step_pieces(x.phases[phase])
            for k, (pieces, hatch) in enumerate(((measured, ""), (predicted, "///"))):
                xpos = gi - 0.42 + width * (2 * pj + k + 0.5)
                bottom = 0.0
                for name, value in pieces.items():
                    if value <= 0:
                        continue
                    ax.bar(xpos, 1e3 * value, width * 0.9, bottom=bottom, color=PIECE_COLORS[name], hatch=hatch,
                           edgecolor="white" if hatch else None, linewidth=0)
                    bottom += 1e3 * value
                ax.text(xpos, bottom, phase[0].upper(), ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(shown)))
    ax.set_xticklabels([x.strategy for x in shown])
    ax.set_xlim(-0.6, len(shown) - 0.4)
    ax.set_ylabel("ms (median timed step)")
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    r = study.measured
    ax.set_title(f"Where the measured step goes: {r.model} on {r.topology}, GPUs {','.join(map(str, r.gpus))}\n"
                 "per phase (F, B, O: forward, backward, optimizer), measured beside predicted", fontsize=10)
    handles = [Patch(facecolor=c) for c in PIECE_COLORS.values()]
    handles.append(Patch(facecolor="white", edgecolor="black", hatch="///"))
    ax.legend(handles, [*PIECE_COLORS, "hatched: predicted"], loc="upper left", bbox_to_anchor=(1.01, 1.0),
              fontsize=9, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def plot_networks(study: Study, path: Path) -> Path | None:
    """--network: per cluster, tokens/s per GPU of the best plan on each network, its network wait on top."""
    from topowise.whatif import NetworkOutcome

    views = [(v["topology"], [NetworkOutcome.from_dict(r) for r in v["rows"]]) for v in study.networks]
    if not views:
        return None
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(views), figsize=(max(6.0, 5.5 * len(views)), 4.2), squeeze=False)
    for ax, (label, outcomes) in zip(axes[0], views):
        names = [o.network for o in outcomes]
        values = [o.tokens_per_s_per_gpu or 0.0 for o in outcomes]
        bars = ax.bar(range(len(names)), values, color="#4c72b0")
        for bar, o in zip(bars, outcomes):
            text = "no fit" if o.strategy is None else f"{o.network_wait_fraction:.0%} wait"
            ax.annotate(text, (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom",
                        fontsize=8)
        ax.set_xticks(range(len(names)), names, rotation=20)
        ax.set_ylabel("tokens/s per GPU (best plan)")
        ax.set_title(label, fontsize=10)
        ax.yaxis.set_major_formatter(_thousands())
        ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle(_title(study, "the same job on each network").replace(": ", ":\n", 1)
                 + "\nlabel: the share of the step waiting on the network", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def _thousands():
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda v, _pos: f"{v / 1000:.0f}k" if v >= 1000 else f"{v:.0f}")


def _short_gpu(name: str) -> str:
    return name.replace("NVIDIA ", "").replace(" 80GB HBM3", "")


def _safe(label: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in label)
