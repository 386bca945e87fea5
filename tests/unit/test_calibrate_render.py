"""What `topowise calibrate` prints: the profile's parameters with their sources, the link/op pairs kept from
the defaults, the runs table, the runs left out, and where the profile went, read as a user reads them (the
profile run16 fitted on 2x H200, with run10's validation rows standing in for the calibration runs)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

DATA = Path(__file__).parents[2] / "tests" / "data"
PROFILE = DATA / "accuracy" / "h200x2-run16" / "profile.json"
RUNS = DATA / "records" / "2026-11-30-h200x2" / "run10" / "validate.jsonl"


@pytest.fixture(scope="module")
def fitted():
    from topowise.calibrate.driver import Calibration
    from topowise.costmodel.profile import load_profile

    detail = [json.loads(line) for line in RUNS.read_text().splitlines()]
    report = {"step_time": {"observations": 15, "rms_error": 0.02, "max_error": 0.04}, "memory": None,
              "runs_detail": detail, "failed": ["llama3.2-3b zero3 mb4 seq4096 nvlink: oom"],
              "host_bound": ["llama3.2-1b ddp mb1 seq128 nvlink"], "problems": ["pcie: the measuring run stopped"]}
    return Calibration(profile=load_profile(PROFILE), profile_path="/p/profile.json", cache_path="/cache/ab.json",
                       records_dir="/r/records", report=report, elapsed_s=None)


def rendered(result, capsys) -> list[str]:
    from topowise.cli.calibrate import render

    render(result)
    return capsys.readouterr().out.splitlines()


def parameter_rows(lines: list[str]) -> dict[str, str]:
    """{parameter: its source}, from the parameter table."""
    start = next(i for i, line in enumerate(lines) if line.startswith("parameter "))
    rows = {}
    for line in lines[start + 2:]:
        if not line or line.startswith("what each value"):
            break
        cells = [c.strip() for c in line.split("  ") if c.strip()]
        rows[cells[0]] = cells[-1]
    return rows


def test_fitted_values_read_fitted_here_and_defaults_read_default(fitted, capsys):
    rows = parameter_rows(rendered(fitted, capsys))
    assert rows["compute_efficiency"] == "fitted here" and rows["overlap.zero3"] == "fitted here"
    assert rows["peak_flops"] == "default" and rows["encryption_gbps_per_core.aes-gcm"] == "default"
    assert rows["comm_efficiency.NV/all_reduce"] == "fitted here" and rows["latency_s.PCIe/all_gather"] == "fitted here"


def test_a_link_op_pair_not_measured_has_no_row_and_is_counted_as_kept(fitted, capsys):
    profile = fitted.profile
    sources = dict(profile.sources, **{"comm_efficiency.PCIe/broadcast": "not calibrated: no PCIe broadcast here"})
    lines = rendered(dataclasses.replace(fitted, profile=dataclasses.replace(profile, sources=sources)), capsys)
    rows = parameter_rows(lines)
    assert "comm_efficiency.PCIe/broadcast" not in rows and "latency_s.PCIe/broadcast" not in rows
    assert "comm_efficiency.PCIe/all_reduce" in rows
    assert any(line.endswith("; 1 link/op pairs not measured here keep their defaults") for line in lines)
    assert not any("keep their defaults" in line for line in rendered(fitted, capsys))


def test_each_run_is_a_row_of_its_fabrics_table_and_the_runs_left_out_are_named(fitted, capsys):
    lines = rendered(fitted, capsys)
    for fabric in ("nvlink", "pcie"):
        title = next(i for i, line in enumerate(lines) if line.strip().endswith(f"fitted profile, over {fabric}"))
        runs = [d for d in fitted.report["runs_detail"] if d["fabric"] == fabric]
        rows = lines[title + 4:title + 4 + len(runs)]
        for row, run in zip(rows, runs):
            cells = [c.strip() for c in row.split("  ") if c.strip()]
            assert cells[0] == f"{run['model']} {run['strategy']} mb{run['micro_batch']} seq{run['seq_len']}"
            assert cells[3].startswith("-") == (run["step_time_error"] < 0)
    assert "step-time fit over 15 runs: rms error 2.0%, worst 4.0%" in lines
    assert not any(line.startswith("memory fit") for line in lines)  # no memory fit: no line
    assert "run not used: llama3.2-3b zero3 mb4 seq4096 nvlink: oom" in lines
    assert any(line.startswith("host seconds per block") and line.endswith("llama3.2-1b ddp mb1 seq128 nvlink")
               for line in lines)
    assert "pcie: the measuring run stopped" in lines


def test_the_profile_line_names_the_cached_copy_only_when_it_is_elsewhere(fitted, capsys):
    assert "profile: /p/profile.json (cached: /cache/ab.json)" in rendered(fitted, capsys)
    same = rendered(dataclasses.replace(fitted, cache_path="/p/profile.json"), capsys)
    assert "profile: /p/profile.json" in same and not any("cached" in line for line in same)
    nowhere = rendered(dataclasses.replace(fitted, profile_path="", cache_path=None), capsys)
    assert "profile: not written (see the warning below)" in nowhere
    assert nowhere[-1] == "raw records: /r/records (re-fit with --from-records /r/records)"
    assert not any(line.startswith("calibration took") for line in nowhere)  # fitted from records: no time
    measured = rendered(dataclasses.replace(fitted, elapsed_s=900.0, report=dict(fitted.report, measure_s=700.0)),
                        capsys)
    assert "calibration took 900 s (measuring 700 s)" in measured
