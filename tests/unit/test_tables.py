"""Tables of plan, predict, topo and env piped or on an 80-column terminal: every number, name, strategy
and phase printed whole (no "…"), prose under the tables; plan's piped output at COLUMNS, else 80 columns
(tests/unit/test_narrow_tables.py has the verbs fitted to the screen)."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from topowise.cli.main import main

DATA = Path(__file__).parent / "data"
V100 = str(DATA / "06_v100-sxm2-x8_hybrid-cube-mesh_vastai_mlx5x1.txt")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture(autouse=True)
def eighty_columns(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    for var in ("NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def terminal(monkeypatch):
    """stdout as an 80-column terminal (capsys's stdout otherwise reads as a pipe)."""
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)


def text_and_json(capsys, argv: list[str]) -> tuple[str, dict]:
    assert main(argv) == 0
    text = ANSI.sub("", capsys.readouterr().out)
    assert main([*argv, "--json"]) == 0
    return text, json.loads(capsys.readouterr().out)


def whole(text: str) -> None:
    assert "…" not in text and "Traceback" not in text


# --- plan ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("tty", [False, True], ids=["piped", "terminal"])
def test_plan_rows_are_whole_and_the_why_is_under_the_table(tty, capsys, request):
    if tty:
        request.getfixturevalue("terminal")
    text, data = text_and_json(capsys, ["plan", "--model", "llama3.1-8b", "--topology", "h100-nvl-8", "--top", "10"])
    whole(text)
    rows = [line.split() for line in text.splitlines() if re.match(r"^\s*\d+\s+(ddp|zero[123]|hsdp)\s", line)]
    assert len(rows) == len(data["plans"]) == 10
    for row, p in zip(rows, data["plans"]):
        assert row[1] == p["strategy"]
        assert f"{p['tokens_per_s']:,.0f}" in row and f"{p['peak_memory_bytes'] / 2**30:.1f}" in row
    # the table fits the terminal or COLUMNS; the prose wraps under it, each reason whole, not a column of 12
    assert max(len(line) for line in text.splitlines()) <= 80
    flat = " ".join(text.split())
    for i, p in enumerate(data["plans"], 1):
        assert f"{i}. {' '.join(p['why'].split())}" in flat


def test_plan_says_what_the_rows_are_and_how_many_choices(capsys):
    # pcie-l40s-8: 19 predictions fit (none, per op, every 2nd block, full) but they are 4 choices, each at its
    # best micro-batch and checkpointing
    text, data = text_and_json(capsys, ["plan", "--model", "llama3.1-8b", "--topology", "pcie-l40s-8", "--top", "10"])
    assert (data["feasible"], data["choices"], len(data["plans"])) == (19, 4, 4)
    assert "19 of 83 predicted candidates fit" in text and "the rows are all 4 distinct choices" in text
    text, data = text_and_json(capsys, ["plan", "--model", "llama3.1-8b", "--topology", "h100-nvl-8"])
    assert len(data["plans"]) == 5 < data["choices"]
    assert f"the rows are the 5 fastest of {data['choices']} distinct choices" in text
    assert f"(--top {data['choices']} shows all)" in text


def test_plan_piped_through_a_real_pipe_fits_80_columns():
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}  # a pipe without COLUMNS: 80
    done = subprocess.run([sys.executable, "-m", "topowise", "plan", "--model", "llama3.1-8b", "--topology",
                           "h100-nvl-8", "--num-gpus", "8"], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    whole(done.stdout)
    assert "{0,1},{2,3},{4,5},{6,7}" in done.stdout  # hsdp's shard groups, all of them
    assert max(len(line) for line in done.stdout.splitlines()) <= 80  # the prose wrapped, the table whole


# --- predict -------------------------------------------------------------------------------------
@pytest.mark.parametrize("tty", [False, True], ids=["piped", "terminal"])
def test_predict_phases_ops_and_times_are_whole(tty, capsys, request):
    if tty:
        request.getfixturevalue("terminal")
    text, data = text_and_json(capsys, ["predict", "--model", "tiny", "--topology", "h100-nvl-8", "--gpus", "0,2",
                                        "--strategy", "zero3"])
    whole(text)
    lines = [line.split() for line in text.splitlines()]
    for c in data["time"]["collectives"]:
        assert [c["op"], c["phase"], c["dtype"]] in [words[:3] for words in lines]
        assert f"{c['time_s'] * 1e3:,.2f}" in text
    assert any(words[:2] == ["reduce_scatter", "backward-last"] for words in lines)  # not "backwar…"
    assert f"{data['step_time_s'] * 1e3:,.2f}" in text
    if tty:
        assert max(len(line) for line in text.splitlines() if "│" in line or "─" in line) <= 80


def test_predict_names_small_models_and_the_ring_in_words(capsys):
    text, _ = text_and_json(capsys, ["predict", "--model", "tiny", "--topology", "h100-nvl-8", "--gpus", "0,1",
                                     "--strategy", "ddp"])
    assert "0.00B" not in text and "(139.58K parameters)" in text
    assert "GB/s line" not in text and "ring at 318.75 GB/s per direction" in text


# --- topo and env --------------------------------------------------------------------------------
@pytest.mark.parametrize("tty", [False, True], ids=["piped", "terminal"])
def test_topo_matrix_and_warnings_are_whole(tty, capsys, request):
    if tty:
        request.getfixturevalue("terminal")
    text, data = text_and_json(capsys, ["topo", "--file", V100, "--gpu-name", "V100", "--gpus", "0,5"])
    whole(text)
    assert all(f"GPU{i}" in text for i in range(8)) and "15.8" in text and "NV2" in text
    assert data["warnings"]
    for warning in data["warnings"]:  # wrapped on a terminal, whole either way
        assert warning in " ".join(text.split())


def test_topo_preset_is_described_without_repository_files(capsys):
    text, data = text_and_json(capsys, ["topo", "--preset", "pcie-l40s-8"])
    assert "hardware.py" in data["source"]  # the provenance stays in the JSON
    assert "hardware.py" not in text and "tests/unit/data" not in text
    assert "8x L40S, PCIe Gen4 only" in text


def test_env_values_are_whole(capsys, terminal, monkeypatch):
    monkeypatch.setenv("NCCL_DEBUG_SUBSYS", "INIT,GRAPH,ENV,TUNING,NET,P2P,SHM,COLL,BOOTSTRAP,REG,CALL,PROXY,NVLS")
    assert main(["env", "--no-torch"]) == 0
    text = ANSI.sub("", capsys.readouterr().out)
    whole(text)
    assert "INIT,GRAPH,ENV,TUNING,NET,P2P,SHM,COLL,BOOTSTRAP,REG,CALL,PROXY,NVLS" in text
