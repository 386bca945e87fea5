"""A flag that cannot act beside the others is refused in one line naming it and what it needs (exit 2);
one that can act does (nccl-tests --op without --compare, predict --network --wide)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.unit.cli_run import cli_output

CLUSTER = "4x hgx-h100-8+ib-ndr"
PLAN = ["plan", "--model", "llama3.2-1b", "--topology", "hgx-h100-8"]
PREDICT = ["predict", "--model", "llama3.1-8b", "--topology", CLUSTER, "--num-gpus", "32", "--strategy", "zero3"]
NETWORKS = "ib-ndr,roce-400,eth-100,eth-10"
MEASURED = str(Path(__file__).parents[1] / "data" / "nccl_tests" / "a100x24-4hdr_nccl-tests-119.txt")


def refusal(argv, capsys) -> str:
    """The one stderr line of a refused invocation (exit 2, nothing on stdout)."""
    code, out, err = cli_output(argv, capsys)
    lines = err.strip().splitlines()
    assert (code, out, len(lines)) == (2, "", 1), (code, out, err)
    assert lines[0].startswith("topowise: error: ")
    return lines[0]


def test_plan_global_batch_without_mesh_names_mesh(capsys):
    line = refusal([*PLAN, "--global-batch", "8"], capsys)
    assert "--global-batch" in line and "add --mesh" in line


@pytest.mark.parametrize("topology", ["hgx-h100-8", "2x hgx-h100-8+ib-ndr"])
def test_plan_wan_share_on_one_region_is_refused(topology, capsys):
    line = refusal(["plan", "--model", "llama3.2-1b", "--topology", topology, "--wan-share", "0.5"], capsys)
    assert "--wan-share" in line and "across regions" in line and "one region" in line


def test_nccl_tests_op_without_compare_tabulates_that_op_alone(capsys):
    code, out, _ = cli_output(["nccl-tests", "--topology", "hgx-h100-8", "--op", "all-reduce", "-b", "1M", "-e", "1M",
                               "--json"], capsys)
    assert code == 0
    assert list(json.loads(out)["tables"]) == ["all_reduce"]


def test_study_trace_without_measure_is_refused(tmp_path, capsys):
    line = refusal(["study", "--trace", "--out", str(tmp_path / "s")], capsys)
    assert "--trace" in line and "--measure" in line
    assert not (tmp_path / "s").exists()


def test_study_unknown_questions_model_is_refused_with_the_questions_off(tmp_path, capsys):
    line = refusal(["study", "--questions-model", "no-such-model", "--no-network-questions",
                    "--out", str(tmp_path / "s")], capsys)
    assert "no-such-model" in line


@pytest.mark.parametrize("argv, flag, needs", [
    # plan --mesh searches its own micro-batches, eager, over the topology's links, and writes no plan file
    ([*PLAN, "--mesh", "--micro-batch", "2"], "--micro-batch", "--mesh"),
    ([*PLAN, "--mesh", "--compile"], "--compile", "--mesh"),
    ([*PLAN, "--mesh", "--engine", "deepspeed"], "--engine", "--mesh"),
    ([*PLAN, "--mesh", "--fabric", "pcie"], "--fabric", "--mesh"),
    ([*PLAN, "--mesh", "--save-plan", "p.json"], "--save-plan", "--mesh"),
    ([*PLAN, "--mesh", "--export", "torchtitan", "--out", "t.sh"], "--out", "--mesh"),
    # plan --network compares the best data-parallel plan of each network
    (["plan", "--model", "tiny", "--topology", CLUSTER, "--network", "ib-ndr", "--mesh"], "--mesh", "--network"),
    (["plan", "--model", "tiny", "--topology", CLUSTER, "--network", "ib-ndr", "--top", "3"], "--top", "--network"),
    (["plan", "--model", "tiny", "--topology", "two-region-h100", "--network", "ib-ndr", "--wan-share", "0.2"],
     "--wan-share", "--network"),
    ([*PLAN, "--force-profile"], "--force-profile", "--profile"),
    (["launch", "--model", "tiny", "--topology", "hgx-h100-8", "--force-profile", "--dry-run", "--", "train.py"],
     "--force-profile", "--profile"),
    # the prices price the network comparison only
    ([*PLAN, "--gpu-hour-usd", "2"], "--gpu-hour-usd", "--network"),
    ([*PLAN, "--network-node-hour-usd", "1"], "--network-node-hour-usd", "--network"),
    (["predict", "--model", "tiny", "--topology", "hgx-h100-8", "--num-gpus", "2", "--strategy", "ddp",
      "--gpu-hour-usd", "2"], "--gpu-hour-usd", "--network"),
    (["predict", "--model", "tiny", "--topology", "hgx-h100-8", "--num-gpus", "2", "--strategy", "ddp", "--wide"],
     "--wide", "--network"),
    # with --compare the output sets the sizes and the collective
    (["nccl-tests", "--topology", "hgx-h100-8", "--compare", MEASURED,
      "--max-bytes", "1G"], "--max-bytes", "--compare"),
    (["nccl-tests", "--topology", "hgx-h100-8", "--compare", MEASURED,
      "--ops", "all_gather"], "--ops", "--compare"),
    (["nccl-tests", "--topology", "hgx-h100-8", "--op", "all_reduce", "--ops", "all_gather"], "--ops", "--op"),
    (["nccl-tests", "--topology", "hgx-h100-8", "--algo", "tree"], "--algo", "across nodes"),
    # study: the measured run's flags need --measure; the questions' flags need the questions
    (["study", "--measure-model", "tiny"], "--measure-model", "--measure"),
    (["study", "--measure-steps", "3"], "--measure-steps", "--measure"),
    (["study", "--questions-model", "llama3.1-8b", "--no-network-questions"], "--questions-model",
     "--no-network-questions"),
    (["study", "--gpu-hour-usd", "2", "--no-network-questions"], "--gpu-hour-usd", "--no-network-questions"),
    # mesh flags that shape a group of degree 1
    ([*PREDICT, "--no-sequence-parallel"], "--no-sequence-parallel", "--tp 2"),
    ([*PREDICT, "--virtual-stages", "2"], "--virtual-stages", "--pp 2"),
    ([*PREDICT, "--pp-schedule", "zb-h1"], "--pp-schedule", "--pp 2"),
    # one verb's other flags
    (["topo", "--list-presets", "--gpus", "0,1"], "--gpus", "--list-presets"),
    (["monitor", "summarize", "run", "--plot", "m.png", "--no-plot"], "--plot", "--no-plot"),
    (["doctor", "--snapshot", "s.json", "--rounds", "2"], "--rounds", "torchrun"),
    (["validate", "--topology", "hgx-h100-8"], "--topology", "--measured"),
    (["bench", "comm", "--plot", "m.png"], "--plot", "--matrix"),
    (["launch", "--model", "tiny", "--topology", "hgx-h100-8", "--snapshot", "s.json", "--no-bind", "--dry-run",
      "--", "train.py"], "--snapshot", "--no-bind"),
])
def test_a_flag_that_would_do_nothing_is_refused(argv, flag, needs, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # were a study not refused, its report would land here
    line = refusal(argv, capsys)
    assert flag in line and needs in line


def test_a_wrong_price_is_named_before_it_is_refused_as_unused(capsys):
    line = refusal([*PLAN, "--gpu-hour-usd", "-5"], capsys)
    assert "'-5' is not a price" in line


def test_predict_network_table_fits_80_columns_and_wide_shows_every_column(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "80")
    code, narrow, _ = cli_output([*PREDICT, "--network", NETWORKS], capsys)
    assert code == 0
    assert max(map(len, narrow.splitlines())) <= 80
    assert "--wide shows them" in narrow
    code, wide, _ = cli_output([*PREDICT, "--network", NETWORKS, "--wide"], capsys)
    assert code == 0
    assert max(map(len, wide.splitlines())) > 80
    assert "USD/h" in wide and "--wide shows them" not in wide
