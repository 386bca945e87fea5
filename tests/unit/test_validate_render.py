"""What `topowise validate` prints: the comparison table's rows, the ranking and target verdicts, the cases not
compared, and the exit status, read as a user reads them (run10's frozen validation records, 2x H200)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

RUN10 = Path(__file__).parents[2] / "tests" / "data" / "records" / "2026-11-30-h200x2" / "run10"


@pytest.fixture(scope="module")
def run10():
    from topowise.calibrate.validate import validate
    from topowise.costmodel.profile import load_profile
    from topowise.topology.model import Topology

    meta = RUN10 / "validate-records" / "meta.json"
    topology = Topology.from_dict(json.loads(meta.read_text())["topology"], str(meta))
    return validate(profile=load_profile(RUN10 / "profile.json"), device="cuda", nproc=0, out=None, plot=None,
                    make_plot=False, measured=str(RUN10 / "validate-records" / "train.jsonl"), topology=topology)


def rendered(result, capsys) -> str:
    from topowise.cli.validate import render

    render(result, "profile.json", "cuda")
    return capsys.readouterr().out


def table_rows(text: str) -> dict[str, list[list[str]]]:
    """{fabric: the rows of its table, split into cells}."""
    tables, fabric, in_rows = {}, None, False
    for line in text.splitlines():
        if "Predicted vs measured, over " in line:
            fabric, in_rows = line.split(" over ")[1].strip(), False
            tables[fabric] = []
        elif line.startswith("─"):
            in_rows = True
        elif line.startswith("profile:"):
            break
        elif in_rows and line.strip():
            tables[fabric].append([c for c in line.split("  ") if c.strip()])
    return tables


def test_each_case_is_a_row_of_its_fabrics_table_with_its_error_sign(run10, capsys):
    text = rendered(run10, capsys)
    cases = run10.to_dict()["cases"]
    tables = table_rows(text)
    assert set(tables) == {"nvlink", "pcie"}
    for fabric, rows in tables.items():
        mine = [c for c in cases if c["fabric"] == fabric]
        assert [r[0].strip() for r in rows] == [f"{c['model']} {c['strategy']} mb{c['micro_batch']} seq{c['seq_len']}"
                                                for c in mine]
        for row, case in zip(rows, mine):
            assert len(row) == 7  # name, pred ms, meas ms, error, pred GiB, meas GiB, error
            assert row[3].strip().startswith("-") == (case["step_time_error"] < 0)
            assert row[6].strip().startswith("-") == (case["peak_memory_error"] < 0)


def test_the_ranking_miss_and_the_missed_target_items_are_said(run10, capsys):
    """ddp ranked first for qwen2.5-0.5b over PCIe, zero2 measured faster; a host-bound case 25% off."""
    lines = rendered(run10, capsys).splitlines()
    ranking = [line for line in lines if line.startswith("ranking ")]
    assert len(ranking) == len(run10.summary["ranking"])
    (miss,) = [line for line in ranking if line.endswith("MISS")]
    assert miss.startswith("ranking qwen2.5-0.5b") and " pcie:" in miss and "measured fastest zero2" in miss
    assert all(line.endswith(" ok") for line in ranking if line != miss)
    (target,) = [line for line in lines if line.startswith("target: ")]
    for item, ok in run10.to_dict()["target"].items():
        assert f"{item} {'yes' if ok else 'no'}" in target
    assert "step max <= 10% no" in target and "ranking no" in target
    assert any(line.startswith("unseen-workload target: ") for line in lines)
    # read back, not measured now: no time, and no advice to re-evaluate what is being re-evaluated
    assert not any("validation took" in line or "re-evaluate" in line for line in lines)


def test_a_failed_case_reads_as_failed_and_a_measuring_problem_sets_exit_status_1(run10, capsys):
    from topowise.calibrate.validate import summarize
    from topowise.cli.validate import exit_status

    rows = list(run10.rows)
    rows[0] = dataclasses.replace(rows[0], status="oom", measured_step_s=None, measured_alloc=None)
    summary = dict(summarize(rows), problems=["pcie: the measuring run stopped"])
    failed = dataclasses.replace(run10, rows=tuple(rows), summary=summary, elapsed_s=600.0)
    text = rendered(failed, capsys)
    first = table_rows(text)["nvlink"][0]
    assert first[0].strip().endswith("oom") and first[2].strip() == "-" and first[3].strip() == "-"
    assert "not compared: llama3.2-3b ddp nvlink: oom" in text
    assert "pcie: the measuring run stopped" in text
    assert "validation took 600 s" in text and "re-evaluate with --measured" in text
    assert exit_status(failed, check=False) == 1
    assert capsys.readouterr().err == ""  # the problem line above says why; --check adds nothing


def test_check_with_no_case_compared_exits_1_and_says_so(run10, capsys):
    from topowise.calibrate.validate import summarize
    from topowise.cli.validate import exit_status

    empty = dataclasses.replace(run10, rows=(), summary=summarize([]))
    assert exit_status(empty, check=False) == 0
    assert exit_status(empty, check=True) == 1
    assert "(no case)" in capsys.readouterr().err
    text = rendered(empty, capsys)
    assert "target:" not in text and "not measured (no allocator statistics)" in text
