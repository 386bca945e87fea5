"""StepMonitor in a real two-rank DDP loop on CPU (gloo): a rank made late at one step shows up as a
spike on the other rank, named as the slow one, and `monitor summarize` says the same."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from topowise.cli.main import main

pytest.importorskip("torch")

EXAMPLE = Path(__file__).parents[2] / "examples" / "train_with_monitor.py"
SLOW_STEP = 12


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("monitor")
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(EXAMPLE),
         "--steps", "16", "--run-dir", str(folder), "--delay-rank", "1", "--delay-at", str(SLOW_STEP),
         "--delay-s", "0.5"],
        capture_output=True, text=True, timeout=180, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert done.returncode == 0, done.stderr[-3000:]
    return folder, done.stderr


def steps(path):
    return {r["step"]: r for r in map(json.loads, path.read_text().splitlines()) if r["kind"] == "step"}


def test_the_late_rank_is_a_spike_on_the_other(run_dir):
    folder, _stderr = run_dir
    rank0 = steps(folder / "monitor.rank0.jsonl")
    assert sorted(rank0) == list(range(16))
    slow = rank0[SLOW_STEP]
    assert slow["spike"]["wait"] and slow["spike"]["step_time"]
    assert slow["slowest_rank"] == 1
    assert slow["wait_s"] > 0.4
    assert steps(folder / "monitor.rank1.jsonl")[SLOW_STEP]["spike"]["wait"] is False  # the late rank did not wait
    assert slow["sm_mhz"] == [None, None] and slow["clock_reasons"] == [0, 0]  # CPU: no GPU clock to read


def test_a_spike_line_on_stderr(run_dir):
    _folder, stderr = run_dir
    line = next(x for x in stderr.splitlines() if x.startswith(f"topowise monitor: step {SLOW_STEP}:"))
    assert "rank 1 slow" in line and "rank 0 waited" in line and "the gradient all-reduce" in line


def test_summarize_names_rank_1(run_dir, capsys):
    folder, _stderr = run_dir
    assert main(["monitor", "summarize", str(folder), "--no-plot"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.strip().startswith(f"{SLOW_STEP} "))
    assert row.split()[1] == "1"  # the slow rank at that step
    assert "Rank 1 is the slow one" in out


def test_tensorboard_events_from_rank_0(run_dir):
    folder, _stderr = run_dir
    pytest.importorskip("tensorboard")
    assert list((folder / "tensorboard").rglob("events.out.tfevents.*"))
