"""`topowise study`: files written, what the findings say about the wiring, placements, bad input."""

import json
import re
import subprocess
import sys

import pytest

from topowise.cli.main import main
from topowise.errors import UsageError
from topowise.measure import launcher
from topowise.models.spec import load_model
from topowise.report import study as st
from topowise.run import STRATEGY_NAMES
from topowise.topology.presets import load_preset
from topowise.units import GIB

TWO = ["hgx-h100-8", "h100-nvl-8"]


@pytest.fixture(scope="module")
def tiny_study():
    """A study of the tiny model on three presets (no files)."""
    topos = [(n, load_preset(n)) for n in ("hgx-h100-8", "h100-nvl-8", "h200-nvl-8")]
    return st.run_study(load_model("tiny"), topos, seq_len=256)


@pytest.fixture(scope="module")
def study_8b():
    """Llama 3.1 8B (16 bytes per parameter: 128 GB of training state) on an NVSwitch board of 80 GB
    GPUs and on H200 NVL (4-way bridges, 141 GB GPUs)."""
    return st.run_study(load_model("llama3.1-8b"), [(n, load_preset(n)) for n in ("hgx-h100-8", "h200-nvl-8")])


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = tmp_path_factory.mktemp("study")
    rc = main(["study", "--model", "tiny", "--topologies", ",".join(TWO), "--out", str(out), "--seq-len", "256",
               "--no-network-questions"])
    assert rc == 0
    return out


def test_study_writes_every_file(written):
    for name in ("report.md", "report.html", "study.json", "throughput.png", "memory.png", "slowdown.png",
                 "links_hgx-h100-8.png", "links_h100-nvl-8.png"):
        path = written / name
        assert path.is_file() and path.stat().st_size > 0, name
    assert (written / "throughput.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_study_json_has_findings_and_every_prediction(written):
    data = json.loads((written / "study.json").read_text())
    assert set(data["findings"]) == set(st.FINDING_KINDS)
    assert {r["topology"] for r in data["findings"]["recommendations"]} == set(TWO)
    # every (placement, strategy) of both topologies, each with the cost model's full to_dict()
    expected = sum(len(t["placements"]) for t in data["topologies"]) * len(STRATEGY_NAMES)
    assert len(data["predictions"]) == expected
    ok = [p for p in data["predictions"] if not p["error"]]
    assert ok and all("memory" in p["prediction"] and "step_time_s" in p["prediction"] for p in ok)
    assert st.Study.from_dict(data).to_dict() == data


def test_html_is_self_contained(written):
    page = (written / "report.html").read_text()
    images = re.findall(r'<img src="([^"]*)"', page)
    assert len(images) >= 4 and all(src.startswith("data:image/png;base64,") for src in images)
    assert "http://" not in page and "https://" not in page and "<script" not in page and "<link" not in page
    md = (written / "report.md").read_text()
    assert "](throughput.png)" in md and "## Findings" in md


def test_nvlink_pcie_ratio_comes_from_the_topology(tiny_study):
    ratios = {f.topology: f.values for f in tiny_study.findings_of("nvlink_pcie_ratio")}
    assert ratios["h100-nvl-8"]["ratio"] == pytest.approx(318.75 / 63)  # NV12 x 26.5625 over PCIe Gen5 x16
    assert ratios["h200-nvl-8"]["ratio"] == pytest.approx(3 * 6 * 26.5625 / 63)  # 3 bridges of NV6 per GPU
    l40s = st.nvlink_pcie_ratios([("pcie-l40s-8", load_preset("pcie-l40s-8"))])[0]
    assert l40s.values["ratio"] is None and "no NVLink" in l40s.text


def test_placements_inside_and_across_islands():
    nvl = {p.label: p for p in st.placements_for(load_preset("h100-nvl-8"))}
    assert nvl["all"].gpus == tuple(range(8))
    assert nvl["2 in island"].gpus in load_preset("h100-nvl-8").islands()
    assert nvl["2 across islands"].islands_spanned == 2
    assert "4 in island" not in nvl  # no island of four on H100 NVL
    h200 = {p.label: p for p in st.placements_for(load_preset("h200-nvl-8"))}
    assert h200["4 in island"].gpus == (0, 1, 2, 3)
    assert h200["4 across islands"].gpus == (0, 1, 4, 5)  # an even 2+2 split
    assert [p.label for p in st.placements_for(load_preset("hgx-h100-8"))] == ["all"]  # one island
    assert [p.label for p in st.placements_for(load_preset("pcie-l40s-8"))] == ["all"]  # no island of two
    assert st.placements_for(load_preset("h200-nvl-8"), num_gpus=2)[0].gpus in ((0, 1), (2, 3), (4, 5), (6, 7))


def test_spanning_nvlink_islands_slows_the_step(study_8b):
    """On H200 NVL a job on GPUs of two 4-way bridges runs its collectives over PCIe (63 GB/s against
    478 GB/s inside a bridge): every strategy's step is far slower. The NVSwitch board has one island."""
    found = study_8b.findings_of("island_slowdown")
    assert {f.topology for f in found} == {"h200-nvl-8"}
    assert {(f.values["strategy"], f.values["gpus_per_job"]) for f in found} == {
        (s, k) for s in STRATEGY_NAMES for k in (2, 4)}
    islands = load_preset("h200-nvl-8").islands()
    for f in found:
        v = f.values
        assert any(set(v["inside_gpus"]) <= set(i) for i in islands)
        assert not any(set(v["across_gpus"]) <= set(i) for i in islands)
        assert v["slowdown"] > 1.5, f.text
        assert f"{v['slowdown']:.2f}x" in f.text
    # more GPUs across the PCIe hop: more of the step is communication
    by = {(f.values["strategy"], f.values["gpus_per_job"]): f.values["slowdown"] for f in found}
    assert all(by[(s, 4)] > by[(s, 2)] for s in STRATEGY_NAMES)


def test_ddp_of_an_8b_model_fits_neither_board(study_8b):
    params = load_model("llama3.1-8b").params
    ddp = {f.topology: f for f in study_8b.findings_of("ddp_does_not_fit")}
    assert set(ddp) == {"hgx-h100-8", "h200-nvl-8"}
    for f in ddp.values():
        assert f.values["peak_bytes"] > 16 * params  # the fp32 parameter, gradient, m and v alone
        assert f.values["over_bytes"] > 0
        assert f"{f.values['peak_bytes'] / GIB:.1f} GiB" in f.text


def test_fsdp_beside_ddp_saves_most_of_the_state(study_8b):
    """Sharding over 8 GPUs keeps 2 of DDP's 16 bytes per parameter; zero2 and zero3 run close to
    DDP's speed (DDP itself would not fit, so the comparison is what a user would trade)."""
    params = load_model("llama3.1-8b").params
    near = {(f.topology, f.values["strategy"]): f for f in study_8b.findings_of("fsdp_near_ddp")}
    assert {("hgx-h100-8", "zero2"), ("hgx-h100-8", "zero3")} <= set(near)
    for f in near.values():
        assert f.values["memory_saved_bytes"] > 12 * params
        assert f.values["speed_vs_ddp"] >= 0.9 and not f.values["ddp_fits"]
        assert "DDP itself does not fit here" in f.text


def test_recommendations_name_a_strategy_that_fits(study_8b):
    recs = {f.topology: f.values for f in study_8b.findings_of("recommendations")}
    assert set(recs) == {"hgx-h100-8", "h200-nvl-8"}
    for label, rec in recs.items():
        assert rec["strategy"] in STRATEGY_NAMES and rec["strategy"] != "ddp"
        gpu_bytes = study_8b.case(label, "all", rec["strategy"]).gpu_memory_bytes
        assert rec["peak_bytes"] < gpu_bytes and rec["why"]


@pytest.mark.parametrize("argv, words", [
    (["--topologies", "no-such-box"], "unknown topology"),
    (["--model", "no-such-model"], "unknown model"),
    (["--topologies", "hgx-h100-8", "--num-gpus", "9"], "--num-gpus 9"),
    (["--topologies", "hgx-h100-8", "--seq-len", "0"], "--seq-len"),
])
def test_bad_input_exits_2_with_one_line(argv, words, tmp_path, capsys):
    assert main(["study", "--out", str(tmp_path / "o"), *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("topowise: error:") and words in err[0]
    assert not (tmp_path / "o").exists()  # nothing written


def test_measure_without_gpus_says_so(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(st, "discover_live", lambda: None)
    assert main(["study", "--topologies", "hgx-h100-8", "--measure", "--out", str(tmp_path)]) == 2
    assert "--measure needs NVIDIA GPUs" in capsys.readouterr().err


def test_measured_columns_pair_bench_records_with_predictions(tmp_path, monkeypatch):
    """The bench child is replaced by one that writes the JSONL `bench train` would."""
    out = tmp_path / "m.jsonl"
    seen = {}

    def fake_run(args, env, timeout_s):
        seen["args"] = args
        with open(out, "w") as fh:
            fh.write(json.dumps({"kind": "train", "strategy": "ddp", "status": "ok", "step_time_s": 0.5,
                                 "peak_memory_bytes": 2 * 1024**3}) + "\n")
            fh.write(json.dumps({"kind": "train", "strategy": "zero3", "status": "oom"}) + "\n")
        return 0

    monkeypatch.setattr(launcher, "run_topowise", fake_run)
    topo = load_preset("h200-x2")
    run = st.measure_live(load_model("tiny"), topo, (0, 1), seq_len=256, micro_batch=1, steps=3,
                          out_jsonl=str(out), strategies=("ddp", "zero3", "zero1"))
    assert seen["args"][:2] == ["bench", "train"] and "--out" in seen["args"]
    assert "--trace" not in seen["args"] and run.breakdowns == ()  # untraced unless asked (the profiler slows steps)
    traced = st.measure_live(load_model("tiny"), topo, (0, 1), seq_len=256, micro_batch=1, steps=3,
                             out_jsonl=str(out), strategies=("ddp", "zero3", "zero1"), trace_dir=str(tmp_path / "t"))
    assert seen["args"][seen["args"].index("--trace") + 1] == str(tmp_path / "t") == traced.trace_dir
    assert [b.strategy for b in traced.breakdowns] == ["ddp", "zero3", "zero1"]
    assert all(b.status == "missing" for b in traced.breakdowns)  # the fake wrote no trace
    assert "oom" in traced.breakdowns[1].note and "no breakdown.json" in traced.breakdowns[0].note
    rows = {r.strategy: r for r in run.rows}
    assert rows["ddp"].step_error_pct == pytest.approx(100 * (rows["ddp"].predicted_step_time_s - 0.5) / 0.5)
    assert rows["ddp"].memory_error_pct == pytest.approx(
        100 * (rows["ddp"].predicted_peak_bytes - 2 * 1024**3) / (2 * 1024**3))
    assert rows["zero3"].status == "oom" and rows["zero3"].step_error_pct is None
    assert rows["zero1"].status == "missing"


def test_unknown_live_topology_is_a_usage_error(monkeypatch):
    monkeypatch.setattr(st, "discover_live", lambda: None)
    with pytest.raises(UsageError, match="live"):
        st.resolve_topologies(["live"])


def test_default_topologies_add_the_live_node(monkeypatch):
    monkeypatch.setattr(st, "discover_live", lambda: load_preset("h200-x2"))
    labels = [label for label, _ in st.resolve_topologies(None)]
    assert labels == [*st.DEFAULT_TOPOLOGIES, "live"]
    monkeypatch.setattr(st, "discover_live", lambda: None)
    assert [label for label, _ in st.resolve_topologies(None)] == list(st.DEFAULT_TOPOLOGIES)


def test_default_study_imports_no_torch(tmp_path):
    """`topowise study` with no flags but --out: the default model and topologies, no torch."""
    code = ("import sys; from topowise.cli.main import main; "
            f"rc = main(['study', '--out', {str(tmp_path)!r}]); "
            "assert rc == 0, rc; assert 'torch' not in sys.modules, 'torch was imported'")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]


# --- the report's words, tables and plots ------------------------------------------------------------

def test_a_single_island_board_is_not_said_to_be_joined_by_pcie():
    one = st.nvlink_pcie_ratios([("hgx-h100-8", load_preset("hgx-h100-8"))])[0]
    assert "joins islands" not in one.text and "all 8 GPUs in one island" in one.text
    assert one.values["ratio"] == pytest.approx(478.125 / 63)  # the number stays
    bridged = st.nvlink_pcie_ratios([("h200-nvl-8", load_preset("h200-nvl-8"))])[0]
    assert "that joins islands" in bridged.text


def _section(md: str, heading: str) -> str:
    """The markdown under `### heading`, up to the next heading."""
    return md.split(f"### {heading}\n", 1)[1].split("\n#", 1)[0]


def test_fsdp_near_ddp_heading_only_over_a_ddp_that_fits(study_8b):
    from topowise.report.render import report_blocks, to_markdown

    md = to_markdown(report_blocks(study_8b, {}))
    near = _section(md, "Where FSDP (zero2/zero3) comes within 10% of DDP with less memory")
    assert "does not fit" not in near.replace("DDP fits on none", "")  # DDP fits neither board here
    assert "no DDP to come near" in near
    over = _section(md, "Where DDP does not fit")
    assert "| hgx-h100-8 | 8 | zero2 |" in over and "tokens/s vs DDP" in over  # FSDP in its place, a table


def test_recommendations_are_a_table_with_the_reasons_below(study_8b):
    from topowise.report.render import report_blocks, to_markdown

    section = _section(to_markdown(report_blocks(study_8b, {})), "Recommendation per topology")
    table, reasons = section.split("Why, as the planner says it:")
    rows = [line for line in table.splitlines() if line.startswith("| h")]
    assert [r.split(" | ")[0] for r in rows] == ["| hgx-h100-8", "| h200-nvl-8"]
    assert all(len(r.split(" | ")) == 7 for r in rows)  # the numbers in columns, no prose
    assert "  - " in reasons  # each reason split into lines under its topology
    assert max(len(line) for line in reasons.splitlines()) < max(len(f.text) for f in
                                                                  study_8b.findings_of("recommendations"))


def test_slowdown_bar_labels_do_not_overlap(study_8b, tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    from topowise.report import plots

    monkeypatch.setattr(plt, "close", lambda fig: None)  # keep the figure to measure it
    plots.plot_island_slowdown(study_8b, tmp_path / "s.png")
    fig = plt.gcf()
    ax = fig.axes[0]
    renderer = fig.canvas.get_renderer()
    boxes = [t.get_window_extent(renderer) for t in ax.texts if t.get_text().endswith("x")]
    assert len(boxes) == len(study_8b.findings_of("island_slowdown"))
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
    swatches = {t.get_text(): h for t, h in zip(ax.get_legend().get_texts(), ax.get_legend().legend_handles)}
    assert all(not swatches[s].get_hatch() for s in STRATEGY_NAMES)  # hatching only means "does not fit"
    plt.close(fig)


def test_summary_is_not_squeezed_when_piped(written, capsys):
    from topowise.report.render import print_summary

    study = st.Study.from_dict(json.loads((written / "study.json").read_text()))
    print_summary(study, {})
    out = capsys.readouterr().out
    assert "Recommendation per topology" in out and "…" not in out
    assert not any(line.startswith("of ") for line in out.splitlines())  # no sentence broken at 80 columns
