"""`study --measure`: where the measured step goes (bench train --trace's breakdown.json) beside the prediction.

The recorded breakdowns come from one H200 (tests/data/records/2026-12-01-h200x1/monitor-trace/trace/):
llama3.2-1b, ddp and zero3, seq 8192, under torch.profiler.
"""

import copy
import json
import re
import shutil
from pathlib import Path

import pytest

from topowise.cli.main import main
from topowise.measure import launcher
from topowise.models.spec import load_model
from topowise.report import breakdown as bd
from topowise.report import study as st
from topowise.report.render import report_blocks, to_html, to_markdown
from topowise.topology.presets import load_preset

RECORDED = Path(__file__).resolve().parents[2] / "tests/data/records/2026-12-01-h200x1/monitor-trace/trace"
TRACED = ("ddp", "zero3")
PHASES = ("forward", "backward", "optimizer")


def recorded(strategy: str) -> dict:
    return json.loads((RECORDED / strategy / "breakdown.json").read_text())


def lay_out(trace_dir: Path) -> None:
    """The recorded files under the layout bench train --trace writes: DIR/<strategy>/breakdown.json."""
    for s in TRACED:
        (trace_dir / s).mkdir(parents=True, exist_ok=True)
        shutil.copy(RECORDED / s / "breakdown.json", trace_dir / s / "breakdown.json")


def fake_bench(out_jsonl: Path, seen: dict):
    """A bench train child: ddp and zero3 ran (their traces are the recorded ones), zero1 ran out of memory."""
    def run(args, env, timeout_s):
        seen["args"] = args
        if "--trace" in args:
            lay_out(Path(args[args.index("--trace") + 1]))
        with open(out_jsonl, "a") as fh:
            for s in TRACED:
                fh.write(json.dumps({"kind": "train", "strategy": s, "status": "ok",
                                     "step_time_s": recorded(s)["measured_step_time_s"],
                                     "peak_memory_bytes": 40 * 1024**3}) + "\n")
            fh.write(json.dumps({"kind": "train", "strategy": "zero1", "status": "oom"}) + "\n")
        return 0
    return run


@pytest.fixture()
def measured(tmp_path, monkeypatch):
    seen = {}
    out = tmp_path / "measured.jsonl"
    monkeypatch.setattr(launcher, "run_topowise", fake_bench(out, seen))
    run = st.measure_live(load_model("llama3.2-1b"), load_preset("h200-x2"), (0,), seq_len=8192, micro_batch=1,
                          steps=6, out_jsonl=str(out), strategies=("ddp", "zero3", "zero1"),
                          trace_dir=str(tmp_path / "trace"))
    return run, seen


def ms(v) -> str:
    return f"{1e3 * v:,.2f}"


def test_reader_keeps_the_median_steps_pieces_beside_the_prediction(tmp_path):
    lay_out(tmp_path)
    for s in TRACED:
        doc = recorded(s)
        b = bd.read_breakdown(str(tmp_path / s), s)
        assert b.ok and b.rank == doc["median_step"]["rank"] and b.step == doc["median_step"]["step"]
        assert b.window_s == doc["median_step"]["wall_s"] and b.measured_s == doc["median_step"]["measured_s"]
        assert b.predicted_step_time_s == doc["predicted"]["step_time_s"]
        for p in PHASES:
            pieces = doc["median_step"]["phases"][p]["pieces"]
            pred = doc["predicted"]["phases"][p]
            got = b.phases[p]
            assert (got["compute_s"], got["host_wait_s"], got["other_s"]) == (
                pieces["compute"], pieces["host_wait"], pieces["other"])
            assert got["exposed_comm_s"] == sum(v for k, v in pieces.items() if k.startswith("comm:"))
            assert got["window_s"] == doc["median_step"]["phases"][p]["wall_s"]
            for k in ("gpu_s", "host_s", "exposed_comm_s", "host_wait_s"):
                assert got[f"predicted_{k}"] == pred[k]
            # the pieces add up to the phase's window
            assert sum(got[k] for k in bd.MEASURED_KEYS) == pytest.approx(got["window_s"])
        assert bd.StepBreakdown.from_dict(json.loads(json.dumps(b.to_dict()))) == b


def test_exposed_comm_adds_its_collectives():
    doc = recorded("ddp")
    step = doc["median_step"]["phases"]["backward"]["pieces"]
    step["comm:all_reduce"], step["comm:broadcast"] = 0.004, 0.001
    b = bd.from_document(doc)
    assert b.phases["backward"]["exposed_comm_s"] == pytest.approx(0.005)
    assert b.phases["backward"]["exposed_comm_by_collective"] == {"all_reduce": 0.004, "broadcast": 0.001}


def test_host_only_and_missing_traces_say_why(tmp_path):
    host = bd.from_document({"strategy": "ddp", "mode": "host_only", "median_step": recorded("ddp")["median_step"]})
    assert host.status == "host_only" and not host.phases and "CPU" in host.note
    assert "no breakdown.json" in bd.read_breakdown(str(tmp_path / "nothing"), "zero2").note
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "breakdown.json").write_text("{not json")
    assert bd.read_breakdown(str(tmp_path / "bad"), "zero2").status == "missing"
    none = bd.from_document({"strategy": "ddp", "mode": "none", "note": "no rank<R>.trace.json.gz in x"})
    assert none.status == "missing" and "no rank<R>" in none.note


def test_measure_live_passes_trace_and_reads_each_strategys_breakdown(measured, tmp_path):
    run, seen = measured
    args = seen["args"]
    assert args[args.index("--trace") + 1] == str(tmp_path / "trace") == run.trace_dir
    assert "--trace" in run.command
    by = {b.strategy: b for b in run.breakdowns}
    assert list(by) == ["ddp", "zero3", "zero1"]
    assert by["ddp"].ok and by["zero3"].ok
    assert by["zero1"].status == "missing" and "oom" in by["zero1"].note


def test_study_json_gains_the_breakdowns_and_keeps_its_keys(measured):
    run, _ = measured
    d = run.to_dict()
    old = {"model", "topology", "gpus", "micro_batch", "seq_len", "command", "rows"}
    assert set(d) == old | {"trace_dir", "breakdowns"}
    assert d["rows"] == [r.to_dict() for r in run.rows]
    assert d["breakdowns"][0]["phases"]["backward"]["compute_s"] == \
        recorded("ddp")["median_step"]["phases"]["backward"]["pieces"]["compute"]
    assert st.MeasuredRun.from_dict(json.loads(json.dumps(d))).to_dict() == d
    # a study.json written before the breakdowns still loads
    legacy = {k: v for k, v in d.items() if k in old}
    assert st.MeasuredRun.from_dict(legacy).breakdowns == ()


def _section(md: str) -> str:
    return md.split("## Where the measured step goes\n", 1)[1].split("\n## ", 1)[0]


def _table(section: str, strategy: str) -> dict[str, list[str]]:
    """phase -> cells of the table under `### strategy`."""
    part = section.split(f"### {strategy}\n", 1)[1].split("\n#", 1)[0]
    rows = [line.strip("| ").split(" | ") for line in part.splitlines() if line.startswith("| ")]
    assert rows[0][0] == "phase"
    return {r[0]: r[1:] for r in rows[1:]}


def test_report_section_shows_the_jsons_numbers(measured, tmp_path):
    from topowise.report.plots import plot_step_breakdown

    run, _ = measured
    study = st.run_study(load_model("tiny"), [("h200-x2", load_preset("h200-x2"))], seq_len=256).with_measured(run)
    png = plot_step_breakdown(study, tmp_path / "step_breakdown.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    blocks = report_blocks(study, {"step_breakdown": png})
    md = to_markdown(blocks)
    section = _section(md)
    assert "](step_breakdown.png)" in section
    for s in TRACED:
        doc = recorded(s)
        table = _table(section, s)
        assert list(table) == [*PHASES, "step"]
        for p in PHASES:
            pieces = doc["median_step"]["phases"][p]["pieces"]
            cmp = doc["compared"][p]
            assert table[p] == [ms(pieces["compute"]), ms(cmp["exposed_comm_s"]["measured"]),
                                ms(cmp["exposed_comm_s"]["predicted"]), ms(cmp["host_wait_s"]["measured"]),
                                ms(cmp["host_wait_s"]["predicted"])]
        step = doc["compared"]["step"]
        assert table["step"][1:] == [ms(step["exposed_comm_s"]["measured"]), ms(step["exposed_comm_s"]["predicted"]),
                                     ms(step["host_wait_s"]["measured"]), ms(step["host_wait_s"]["predicted"])]
        assert table["step"][0] == ms(doc["median_step"]["pieces"]["compute"])
        assert f"{ms(doc['median_step']['wall_s'])} ms on the GPU timeline" in section
    # the failed strategy: one line, no table
    assert "### zero1" not in section
    assert [line for line in section.splitlines() if line.startswith("- zero1:")] == [
        "- zero1: oom: the strategy did not run to the end, so no trace"]
    page = to_html(blocks, "t")
    assert "<h2>Where the measured step goes</h2>" in page
    figure = page.split("<h2>Where the measured step goes</h2>", 1)[1]
    assert re.search(r'<img src="data:image/png;base64,[^"]+" alt="measured median step', figure)


def test_host_only_traces_get_one_line_and_no_plot(measured, tmp_path):
    from topowise.report.plots import plot_step_breakdown

    run, _ = measured
    host = tuple(bd.StepBreakdown(b.strategy, bd.HOST_ONLY, "host-only trace (a CPU/gloo run has no GPU timeline "
                                  "to split)") for b in run.breakdowns)
    study = st.run_study(load_model("tiny"), [("h200-x2", load_preset("h200-x2"))], seq_len=256).with_measured(
        st.MeasuredRun(**{**run.__dict__, "breakdowns": host}))
    assert plot_step_breakdown(study, tmp_path / "x.png") is None
    section = _section(to_markdown(report_blocks(study, {})))
    assert "No breakdown for any strategy:" in section and "###" not in section
    assert sum(line.startswith("- ") for line in section.splitlines()) == 3


def test_study_measure_end_to_end_writes_the_section(tmp_path, monkeypatch):
    """`topowise study --measure --trace` with the bench child faked: OUT/trace is passed and read, the report
    shows it; without --trace the steps are timed without the profiler and no section appears."""
    out = tmp_path / "study"
    seen = {}
    monkeypatch.setattr(st, "discover_live", lambda: load_preset("h200-x2"))
    monkeypatch.setattr(launcher, "run_topowise", fake_bench(out / "measured.jsonl", seen))
    assert main(["study", "--model", "tiny", "--topologies", "h200-x2", "--seq-len", "256", "--num-gpus", "1",
                 "--measure", "--trace", "--measure-model", "llama3.2-1b", "--out", str(out),
                 "--no-network-questions"]) == 0
    assert seen["args"][seen["args"].index("--trace") + 1] == str(out / "trace")
    data = json.loads((out / "study.json").read_text())
    status = {b["strategy"]: b["status"] for b in data["measured"]["breakdowns"]}
    assert status == {"ddp": "ok", "zero1": "missing", "zero2": "missing", "zero3": "ok", "hsdp": "missing"}
    assert (out / "step_breakdown.png").is_file()
    assert "## Where the measured step goes" in (out / "report.md").read_text()
    assert st.Study.from_dict(copy.deepcopy(data)).to_dict() == data
    untraced = tmp_path / "untraced"
    monkeypatch.setattr(launcher, "run_topowise", fake_bench(untraced / "measured.jsonl", seen))
    assert main(["study", "--model", "tiny", "--topologies", "h200-x2", "--seq-len", "256", "--num-gpus", "1",
                 "--measure", "--measure-model", "llama3.2-1b", "--out", str(untraced), "--no-network-questions"]) == 0
    assert "--trace" not in seen["args"]
    assert "## Where the measured step goes" not in (untraced / "report.md").read_text()
