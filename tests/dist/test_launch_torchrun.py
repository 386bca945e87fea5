"""`topowise launch` for real on CPU: torchrun starts two ranks with the plan's environment, and the
exit status of the rank that failed comes back unchanged (torchrun alone turns it into 1)."""

import os
import subprocess
import sys

import pytest

from topowise.cli.main import main

pytest.importorskip("torch")


def launch(plan_file, *command, env=None):
    run_dir = os.path.join(os.path.dirname(str(plan_file)), "run")  # not ./runs of wherever pytest started
    return subprocess.run([sys.executable, "-m", "topowise", "launch", "--plan", str(plan_file), "--run-dir", run_dir,
                           "--", sys.executable, "-c", *command], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, **(env or {})))


def test_launch_execs_torchrun_with_the_plan_env(plan_file, tmp_path):
    """Two ranks, each seeing the plan's CUDA_VISIBLE_DEVICES (one file per rank)."""
    code = ("import os, pathlib; e = os.environ; pathlib.Path(e['OUT_DIR'], 'rank' + e['RANK'])"
            ".write_text(e['CUDA_VISIBLE_DEVICES'] + ' ' + e['WORLD_SIZE'] + ' ' + e['TORCH_FR_DUMP_TEMP_FILE'] + ' '"
            " + e['TOPOWISE_PLAN'])")
    done = launch(plan_file, code, env={"OUT_DIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    run_dir = os.path.join(os.path.dirname(str(plan_file)), "run")
    want = f"0,1 2 {run_dir}/nccl_trace_rank_ {os.path.abspath(plan_file)}"
    assert (tmp_path / "rank0").read_text() == want
    assert (tmp_path / "rank1").read_text() == want
    assert os.path.isdir(run_dir)  # the recorder's dumps have a folder to go to


def test_a_rank_exit_status_passes_through(plan_file):
    done = launch(plan_file, "import os, sys; sys.exit(3 if os.environ['RANK'] == '1' else 0)")
    assert done.returncode == 3, done.stderr
    assert "topowise: rank 1 exited with status 3" in done.stderr
    assert "ChildFailedError" not in done.stderr  # one line, not torchrun's traceback
