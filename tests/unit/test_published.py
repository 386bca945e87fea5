"""Published runs (tests/data/published/) against the cost model, as `python benchmarks/published.py` prints them.

A regression check: every row's status and signed error are what its data file records ("expected", written by
`published.py --record`), within half a point, so a change of the model that moves a published prediction is
seen and the files (and the README's table) are brought up to date on purpose. Rows that cannot be expressed are
set apart with their reason, never dropped."""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import published  # noqa: E402

SOURCES = [p.stem for p in published.sources()]


@functools.cache
def predicted(name: str) -> tuple:
    return tuple(published.predict_source(published.DATA / f"{name}.json"))


@pytest.fixture(params=SOURCES)
def source(request):
    return json.loads((published.DATA / f"{request.param}.json").read_text()), predicted(request.param)


def test_every_source_is_a_data_file_with_its_reference_and_figure():
    assert {"llm_foundry_mpt", "torchtitan_llama3_h100_202412", "megatron_sc21_table1",
            "korthikanti_2022_table5"} <= set(SOURCES)
    for name in SOURCES:
        data = json.loads((published.DATA / f"{name}.json").read_text())
        assert data["source"]["url"].startswith("https://") and data["source"]["title"]
        for row in data["rows"]:
            assert row["published"]["value"] > 0 and row["published"]["unit"], row["id"]
            for key in ("gpu", "gpus", "topology", "strategy", "micro_batch", "seq_len", "precision", "loss",
                        "attention", "checkpointing"):
                assert key in row, (name, row["id"], key)


def test_each_row_is_predicted_as_its_file_records(source):
    data, outcomes = source
    assert [o.id for o in outcomes] == [r["id"] for r in data["rows"]]  # none dropped, none added
    moved = []
    for o in outcomes:
        expected = o.expected or {}
        if o.status != expected.get("status"):
            moved.append(f"{o.id}: {o.status} ({o.reason}), recorded {expected.get('status')}")
        elif o.error is not None and abs(o.error - expected["error"]) > 0.005:
            moved.append(f"{o.id}: error {o.error:+.2%}, recorded {expected['error']:+.2%}")
    assert not moved, ("predictions of published runs moved; if on purpose, run `python benchmarks/published.py "
                       "--record` and paste `python benchmarks/accuracy_table.py` into README.md:\n" + "\n".join(moved))


def test_a_row_set_apart_says_why_and_a_compared_one_has_its_error(source):
    _, outcomes = source
    for o in outcomes:
        if o.compared:
            assert o.predicted is not None and o.error == pytest.approx(o.predicted / o.published - 1)
        else:
            assert o.reason, o.id


def test_fp8_rows_wait_for_the_precision_setting():
    outcomes = [o for name in SOURCES for o in predicted(name) if "fp8" in o.config]
    assert len(outcomes) >= 15  # torchtitan's float8 rows and llm-foundry's amp_fp8 one
    if "precision" not in published.RUN_FIELDS:
        assert all(o.status == "set apart" and "needs --precision fp8" in o.reason for o in outcomes)


def test_the_power_limit_and_gpu_variant_of_a_row_reach_the_prediction(tmp_path):
    """torchtitan's H100s were 96 GB HBM2e parts capped at 500 W: priced as such, not as 80 GB 700 W ones."""
    data = json.loads((published.DATA / "torchtitan_llama3_h100_202412.json").read_text())
    row = next(r for r in data["rows"] if r["id"] == "t1-8b-x8-fsdp")
    capped = published.topology_of(row, tmp_path)
    rated = published.topology_of({**row, "power_limit_w": 0}, tmp_path)
    plain = published.topology_of({**row, "power_limit_w": 0, "gpu_name": ""}, tmp_path)
    assert capped.gpu_spec.name == rated.gpu_spec.name == "H100 96GB" and plain.gpu_spec.name == "H100"
    assert capped.gpu_spec.bf16_dense_flops < rated.gpu_spec.bf16_dense_flops
    run, _ = published.run_of(row, tmp_path)
    import topowise

    assert topowise.predict(run, capped).step_time_s > topowise.predict(run, rated).step_time_s


def test_the_readme_states_the_summaries_computed():
    """README.md's table of published runs is what benchmarks/accuracy_table.py computes (figures compared)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import accuracy_table
    from test_accuracy_table import figures

    readme = {figures(line) for line in (ROOT / "README.md").read_text().splitlines() if line.startswith("|")}
    missing = [row for row in accuracy_table.published_rows() if figures(row) not in readme]
    assert not missing, "paste `python benchmarks/accuracy_table.py`'s published table into README.md:\n" + "\n".join(
        missing)


def test_no_default_constant_was_fitted_to_a_published_training_row():
    """The constants fitted to published figures are the nccl-tests ones (8-GPU ring and NVLS): every training
    row above is a validation row."""
    fitted = published.fitted_constants()
    assert fitted and all(what == ["published nccl-tests outputs (NVIDIA/nccl-tests issues)"]
                          for what in fitted.values())
