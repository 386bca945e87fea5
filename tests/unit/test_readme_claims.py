"""The README's accuracy table ("Results"), replayed: the committed validation records through today's
cost model, by the path `topowise validate --measured FILE --profile PROFILE [--topology T]` takes
(calibrate.validate.compare and summarize), checked against the figures parsed from the README itself.

A row is found by the exact text of its first cell: edit a claim and this test checks the edited figures;
reword a row and this test fails until ROWS (or NOT_REPLAYED) names it again.
"""

import json
import re
from pathlib import Path

import pytest

from topowise.calibrate.validate import compare, summarize
from topowise.costmodel import predict as predict_module
from topowise.costmodel.profile import load_profile
from topowise.measure.records import read_records
from topowise.topology import load_topology
from topowise.topology.model import Topology

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
RESULTS = ROOT / "tests" / "data" / "records" / "2026-11-30-h200x2"
TOLERANCE_PP = 0.05 + 1e-9  # the README prints one decimal of a percentage: only its rounding is allowed

RUN16 = "`calibrate` (91 s) then `validate` on 21 unseen cases (0.5B-3B, mb 1-2, 2 fabrics), run 16"
RUN16_GPU = "the same, the 16 cases the model predicts GPU-bound"
RUN16_HOST = "the same, the 5 cases it predicts host-bound (small models with FSDP2)"
RUN17 = ("run 16's profile validated again on the same machine 4 minutes later, run 17: "
         "all / GPU-bound / host-bound")
DEEPSPEED = ("the same DeepSpeed and FSDP2 records through today's model, DeepSpeed's host term from one "
             "H200 (2026-12-02) and the rates of run 10's profile")
REFIT3 = ("the same records, run 10's calibrated profile (whose step-time values were the defaults until the "
          "bench transformer changed on 2026-12-02; a cross-run check, not unseen shapes; "
          "`refit3/validate-run2-8192.txt`)")

# row text -> (records, profile, topology preset or None for the records' meta.json, what each group of
# figures in the row covers: "all", "gpu" or "host" of summarize's by_bound)
ROWS = {
    REFIT3: ("run2/train.jsonl", "run10/profile.json", "h200-x2", ("all",)),  # refit3/README.md
    RUN16: ("run16/validate-records/train.jsonl", "run16/profile.json", None, ("all",)),
    RUN16_GPU: ("run16/validate-records/train.jsonl", "run16/profile.json", None, ("gpu",)),
    RUN16_HOST: ("run16/validate-records/train.jsonl", "run16/profile.json", None, ("host",)),
    RUN17: ("run17/validate-records/train.jsonl", "run16/profile.json", None, ("all", "gpu", "host")),
    # the default profile (None) with tests/unit/earlier_model.py's rates: run 10's, refitted
    DEEPSPEED: ("run3/deepspeed/deepspeed-vs-fsdp.jsonl", None, "h200-x2", ("all",)),
}

# Rows not replayed, each for its reason:
NOT_REPLAYED = {
    # the first default profile (guessed efficiencies) and the cost model of that day are gone: today's
    # default profile holds run 10's calibrated values, so these figures are history (the `predicted` field
    # recorded in run2/train.jsonl; docs/results/README.md "Cost model with default (uncalibrated) parameters")
    "first default profile (guessed efficiencies), llama3.2-1b 8192 tokens, all strategies, NVLink and PCIe",
    # needs the DeepSpeed and FSDP2 records of that comparison with the earlier profile they were validated
    # with; neither is committed beside a validate command to replay offline
    "DeepSpeed ZeRO-1/2/3 and FSDP2 zero2/zero3, llama3.2-1b 8192 tokens (earlier profile)",
}

PAIR = re.compile(r"(\d+(?:\.\d+)?)% / (\d+(?:\.\d+)?)%")


def accuracy_table() -> dict[str, list[str]]:
    """The README's accuracy table: first cell -> the other cells, by the table's header row."""
    lines = README.read_text().splitlines()
    header = "| what | cases | step time error, mean / max | peak memory error, mean / max |"
    assert header in lines, f"README.md: the accuracy table's header {header!r} is gone"
    rows = {}
    for line in lines[lines.index(header) + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rows[cells[0]] = cells[1:]
    return rows


@pytest.fixture(scope="module")
def table():
    return accuracy_table()


def replay(records: str, profile: str, topology: str | None) -> dict:
    """summarize() of `topowise validate --measured RESULTS/records --profile RESULTS/profile`."""
    path = RESULTS / records
    if topology:
        topo = load_topology(topology)
    else:  # what validate reads when no --topology is given: the records' meta.json
        meta = path.with_name("meta.json")
        topo = Topology.from_dict(json.loads(meta.read_text())["topology"], str(meta))
    # None: the profile `predict` takes when given none (earlier_model's rates, where a test patched it)
    chosen = load_profile(RESULTS / profile) if profile else predict_module.default_profile()
    return summarize(compare(read_records(str(path), kind="train"), chosen, topo))


def test_every_row_of_the_table_is_replayed_or_said_why_not(table):
    assert set(table) == set(ROWS) | NOT_REPLAYED, (
        f"README.md's accuracy table and this test disagree on its rows: in the README only "
        f"{sorted(set(table) - set(ROWS) - NOT_REPLAYED)}, here only {sorted((set(ROWS) | NOT_REPLAYED) - set(table))}")


@pytest.mark.parametrize("row", list(ROWS),
                         ids=["refit3-run2-8192", "run16", "run16-gpu", "run16-host", "run17", "deepspeed"])
def test_readme_accuracy_row_holds(table, row, monkeypatch):
    from earlier_model import predict_earlier_model

    predict_earlier_model(monkeypatch)  # these records were measured with the earlier bench transformer
    assert row in table, f"README.md's accuracy table has no row {row!r} any more"
    records, profile, topology, groups = ROWS[row]
    cases, step_cell, memory_cell = table[row]
    s = replay(records, profile, topology)
    errors = {"all": s["step_time"], **s["by_bound"]}

    claimed_cases = [int(n) for n in cases.split(" / ")]
    replayed_cases = [errors[g]["cases"] for g in groups]
    assert claimed_cases == replayed_cases, f"{row!r}: README says {cases} cases, the records replay {replayed_cases}"

    step_pairs = PAIR.findall(step_cell)
    assert len(step_pairs) == len(groups), f"{row!r}: cannot read {step_cell!r} as mean / max of {groups}"
    claims = [("step time", g, pair, errors[g]) for g, pair in zip(groups, step_pairs)]
    if memory_cell:  # the GPU- and host-bound rows give no memory figures
        (pair,) = PAIR.findall(memory_cell)
        claims.append(("peak memory", "all", pair, s["peak_memory"]))
    misses = []
    for what, group, (mean, worst), replayed in claims:
        for stat, figure in (("mean", mean), ("max", worst)):
            got = 100 * replayed[f"{stat}_abs_error"]
            if abs(got - float(figure)) > TOLERANCE_PP:
                misses.append(f"{what} error {stat} ({group} cases): README {figure}%, replayed {got:.2f}%")
    assert not misses, f"README.md row {row!r} no longer holds: " + "; ".join(misses)
