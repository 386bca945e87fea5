"""What bench train, bench comm, calibrate and validate print and return, without running anything:
tables at 80 columns and piped, the loss check's words, exit statuses, labels of CPU runs, warnings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console

from topowise.calibrate.driver import FIT_WARN_RMS, fit_warnings
from topowise.cli.bench_comm import backend_of, collectives_table, natural_width
from topowise.cli.bench_train import exit_status, prediction_table, train_table
from topowise.cli.main import main
from topowise.cli.validate import cached_profile
from topowise.errors import UsageError
from topowise.measure.records import fabric_label
from topowise.measure.train import compare_losses
from topowise.report.comparison import comparison_tables
from topowise.units import GIB

RUN = Path(__file__).parents[2] / "tests" / "data" / "records" / "2026-11-30-h200x2"


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def rendered(table, width: int) -> str:
    console = Console(width=width, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(table)
    return console.export_text()


def assert_whole(text: str, width: int, cells: list[str]) -> None:
    """Every line within `width`, no ellipsis, every cell printed whole."""
    lines = text.splitlines()
    assert max(map(len, lines)) <= width, text
    assert "…" not in text
    for cell in cells:
        assert cell in text, (cell, text)


# --- bench train ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def h200_records():
    """bench train on 2x H200 (run 2, NVLink), with one strategy that hung."""
    records = [r for r in read_jsonl(RUN / "run2" / "train.jsonl") if r["fabric"] == "nvlink"]
    hung = dict(records[1], status="timeout", step_time_s=None, tokens_per_s_per_gpu=None, mfu=None,
                mfu_measured_peak=None, peak_memory_bytes=None, reserved_bytes=None, losses=[], predicted={})
    return [records[0], hung, *records[2:]]


@pytest.mark.parametrize("width", [80, 1000])
def test_train_tables_print_every_number_and_name_whole(h200_records, width):
    measured = rendered(train_table(h200_records), width)
    cells = ["timeout"]
    for r in h200_records:
        cells.append(r["strategy"])
        if r["status"] == "ok":
            cells += [f"{r['step_time_s'] * 1e3:.1f}", f"{r['tokens_per_s_per_gpu']:,.0f}",
                      f"{100 * r['mfu_measured_peak']:.1f}%", f"{100 * r['mfu']:.1f}%",
                      f"{r['peak_memory_bytes'] / GIB:.2f}", f"{r['losses'][-1]:.4f}"]
    assert_whole(measured, 80, cells)
    compared = rendered(prediction_table(h200_records), width)
    cells = []
    for r in h200_records:
        if r["status"] == "ok":
            p = r["predicted"]
            cells += [f"{p['step_time_s'] * 1e3:.1f}", f"{100 * p['step_time_error']:+.1f}%",
                      f"{p['allocated_bytes'] / GIB:.2f}"]
    assert_whole(compared, 80, cells)


def test_cpu_runs_are_labelled_gloo_not_nvlink():
    record = {"model": "tiny", "world_size": 2, "device": "cpu", "fabric": "nvlink", "strategy": "ddp",
              "status": "ok", "step_time_s": 0.01, "tokens_per_s_per_gpu": 100.0, "mfu": None, "losses": [6.2],
              "peak_memory_bytes": None, "predicted": {"note": "CPU run"}}
    text = rendered(train_table([record]), 80)
    assert "gloo" in text and "nvlink" not in text
    assert prediction_table([record]) is None  # no prediction: no table of dashes
    assert fabric_label("nvlink", "cpu") == "gloo" and fabric_label("pcie", "cuda") == "pcie"


def _rec(name, losses, status="ok"):
    return {"strategy": name, "status": status, "losses": losses}


@pytest.mark.parametrize("records,agree,words", [
    ([], None, "not compared (no strategy finished)"),
    ([_rec("ddp", [], "error"), _rec("zero3", [], "error")], None, "not compared (no strategy finished)"),
    ([_rec("ddp", [10.0, 9.0])], None, "not compared (only ddp finished"),
    ([_rec("ddp", [10.0, 9.0]), _rec("zero3", [10.0, 9.01])], True, "losses agree across ddp, zero3"),
    ([_rec("ddp", [10.0, 9.0]), _rec("zero3", [10.0, 12.0])], False, "losses DIVERGE"),
])
def test_a_loss_check_that_compares_nothing_does_not_say_agree(records, agree, words):
    check = compare_losses(records)
    assert check.agree is agree and words in check.message()
    if agree is None:
        assert "agree" not in check.message()
        assert check.to_dict()["agree"] is None


@pytest.mark.parametrize("statuses,losses_agree,status", [
    (["ok", "ok"], True, 0),
    (["ok"], None, 0),  # one strategy asked for: nothing to compare, nothing wrong
    (["ok", "oom"], None, 0),  # an OOM is a result: that strategy does not fit
    (["error", "error"], None, 1),  # every strategy crashed (e.g. no PyTorch on the ranks)
    (["ok", "timeout", "ok"], True, 1),
    (["ok", "ok"], False, 1),
])
def test_bench_train_exit_status(statuses, losses_agree, status):
    records = [{"strategy": f"s{i}", "status": s} for i, s in enumerate(statuses)]

    class Check:
        agree = losses_agree

    assert exit_status(records, Check()) == status


# --- bench comm ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def sweep():
    records = read_jsonl(RUN / "run2" / "profile-records" / "collectives.jsonl")
    return [dict(r, flagged=r.get("expected_pct", 100) < 70) for r in records if r["fabric"] == "nvlink"]


def test_collectives_table_fits_80_columns_and_keeps_every_column_piped(sweep):
    narrow = Console(width=80, file=open("/dev/null", "w"))  # noqa: SIM115
    full = collectives_table(sweep)
    assert natural_width(narrow, full) > 80  # nccl-tests' nine columns do not fit: the compact form is used
    compact = rendered(collectives_table(sweep, compact=True), 80)
    cells = [str(r["bytes"]) for r in sweep] + [f"{r['time_s'] * 1e6:.1f}" for r in sweep]
    cells += [f"{r['busbw_gbps']:.2f}" for r in sweep] + ["reduce_scatter", "all_gather"]
    assert_whole(compact, 80, cells)
    piped = rendered(full, 1000)
    assert_whole(piped, 1000, cells + [str(r["count"]) for r in sweep] + ["float32"])


@pytest.mark.parametrize("backend,device,result", [
    (None, None, None), ("gloo", None, "gloo"), (None, "cpu", "gloo"), (None, "cuda", "nccl"),
    ("gloo", "cpu", "gloo"),
])
def test_bench_comm_takes_device_as_bench_train_does(backend, device, result):
    assert backend_of(backend, device) == result


def test_bench_comm_device_and_backend_that_disagree():
    with pytest.raises(UsageError, match="--device cpu runs --backend gloo"):
        backend_of("nccl", "cpu")


# --- calibrate and validate ----------------------------------------------------------------------

@pytest.mark.parametrize("device,cached,users", [
    ("cpu", True, "validate on this machine uses it"),
    ("cuda", True, "predict, plan, study and validate on this machine use it"),
    ("cuda", False, None),
])
def test_a_loose_fit_is_cached_with_a_warning(device, cached, users):
    report = {"step_time": {"observations": 3, "rms_error": 0.32, "max_error": 0.41}, "memory": None}
    (warning,) = fit_warnings(report, device, cached)
    assert "32.0% rms" in warning and "\n" not in warning
    assert (users in warning) if users else ("cached" not in warning)
    assert ("per-operation overhead" in warning) == (device == "cpu")


def test_a_close_fit_has_no_warning():
    report = {"step_time": {"observations": 20, "rms_error": FIT_WARN_RMS, "max_error": 0.2},
              "memory": {"observations": 20, "rms_error": 0.01, "max_error": 0.02}}
    assert fit_warnings(report, "cuda", True) == []


def test_validate_finds_the_cached_cpu_profile(tmp_path, monkeypatch):
    from topowise.costmodel.profile import default_profile
    from topowise.costmodel.profile_store import cache_path, fingerprint_text, machine_fingerprint

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cached_profile("cpu") is None
    fp = fingerprint_text(machine_fingerprint("cpu"))
    path = cache_path(fp)
    path.parent.mkdir(parents=True)
    from dataclasses import replace

    path.write_text(replace(default_profile(), fingerprint=fp).to_json())
    profile, where = cached_profile("cpu")
    assert where == path and profile.fingerprint == fp


def test_comparison_tables_fit_80_columns_one_per_fabric():
    rows = read_jsonl(RUN / "run10" / "validate.jsonl")
    tuples = [(r["fabric"], f"{r['model']} {r['strategy']} mb{r['micro_batch']} seq{r['seq_len']}",
               r["predicted"]["step_time_s"], r["measured"]["step_time_s"], r["step_time_error"],
               r["predicted"]["allocated_bytes"], r["measured"]["peak_memory_bytes"], r["peak_memory_error"])
              for r in rows]
    tables = comparison_tables("Predicted vs measured", "case", tuples, "cuda")
    assert [t.title for t in tables] == ["Predicted vs measured, over nvlink", "Predicted vs measured, over pcie"]
    text = "".join(rendered(t, 80) for t in tables)
    assert_whole(text, 80, [t[1] for t in tuples] + [f"{100 * t[4]:+.1f}%" for t in tuples])
    cpu = comparison_tables("Calibration runs", "run", [("nvlink", "tiny ddp mb1 seq128", 0.01, 0.012, -0.1,
                                                         None, None, None)], "cpu")
    assert cpu[0].title == "Calibration runs, gloo (CPU)"


@pytest.mark.parametrize("check,status", [(False, 0), (True, 1)])
def test_validate_check_exits_1_when_the_target_is_missed(tmp_path, capsys, check, status):
    """run10's validation misses the step-time target (worst 25.7%, a host-bound case; mean 5.0%) and ranks
    ddp first for qwen2.5-0.5b over PCIe, 0.1% ahead of zero2, which measured 5.2% faster."""
    argv = ["validate", "--profile", str(RUN / "run10" / "profile.json"), "--measured",
            str(RUN / "run10" / "validate-records" / "train.jsonl"), "--no-plot", "--out", str(tmp_path / "v.jsonl")]
    assert main(argv + (["--check"] if check else [])) == status
    err = capsys.readouterr().err
    if check:
        assert err.startswith("topowise: the accuracy target is missed (step max <= 10%, ranking)")
    else:
        assert err == ""


def test_calibrate_and_validate_measure_the_cpu_where_no_gpu_is_seen(monkeypatch, capsys):
    """`topowise calibrate && topowise validate`, as the README chains them, runs on a machine without GPUs."""
    from topowise.cli.calibrate import default_device_and_nproc
    from topowise.costmodel import profile_store

    monkeypatch.setattr(profile_store, "gpu_inventory", lambda: None)
    assert default_device_and_nproc(None, None) == ("cpu", 2)
    assert "--device cpu" in capsys.readouterr().err
    assert default_device_and_nproc(None, 3) == ("cpu", 3)
    with pytest.raises(UsageError, match="--device cuda"):
        default_device_and_nproc("cuda", None)
