"""launch: plan -> (argv, env), printed with --dry-run, exec'd otherwise; foreign plan files refused."""

import os
import shlex
import subprocess
import sys

import pytest

from topowise.cli.main import main


@pytest.fixture
def plan_file(tmp_path, capsys):
    path = tmp_path / "plan.json"
    assert main(["plan", "--model", "llama3.2-1b", "--topology", "h100-nvl-8", "--num-gpus", "2",
                 "--save-plan", str(path), "--json"]) == 0
    capsys.readouterr()
    return path


def test_dry_run_prints_env_then_torchrun(plan_file, capsys):
    assert main(["launch", "--plan", str(plan_file), "--dry-run", "--",
                 "python", "-m", "my.train", "--tag", "a b"]) == 0
    words = shlex.split(capsys.readouterr().out)
    assert words[0] == "CUDA_VISIBLE_DEVICES=0,1"
    start = words.index("torchrun")
    assert all("=" in w for w in words[:start])
    assert words[start:] == ["torchrun", "--standalone", "--nnodes=1", "--nproc-per-node=2", "-m", "my.train",
                             "--tag", "a b"]


def test_dry_run_from_plan_flags_with_pcie_fabric(capsys):
    assert main(["launch", "--model", "llama3.2-1b", "--topology", "h100-nvl-8", "--num-gpus", "2",
                 "--fabric", "pcie", "--dry-run", "--", "train.py"]) == 0
    out = capsys.readouterr().out
    assert "NCCL_P2P_DISABLE=1" in out and out.rstrip().endswith("train.py")


@pytest.mark.parametrize("content,match", [
    ('{"format": "topowise.topology", "version": 1}', "not a topowise plan"),
    ("hello", "not a topowise plan"),
    ('{"format": "topowise.plan", "version": 2}', "version 2"),
])
def test_foreign_plan_file_exit_2(tmp_path, capsys, content, match):
    path = tmp_path / "x.json"
    path.write_text(content)
    assert main(["launch", "--plan", str(path), "--dry-run", "--", "train.py"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("topowise: error: ") and match in err and err.count("\n") == 1


def test_launch_needs_a_command_and_a_plan(plan_file, capsys):
    assert main(["launch", "--plan", str(plan_file), "--dry-run"]) == 2
    assert "no command to run" in capsys.readouterr().err
    assert main(["launch", "--dry-run", "--", "train.py"]) == 2
    assert "--plan FILE, or --model and --topology" in capsys.readouterr().err
    assert main(["launch", "--plan", str(plan_file), "--num-gpus", "4", "--dry-run", "--", "t.py"]) == 2
    assert "drop --num-gpus" in capsys.readouterr().err


def test_launch_nothing_fits_exit_2(capsys):
    assert main(["launch", "--model", "llama3.1-70b", "--topology", "h100-nvl-8", "--dry-run", "--", "t.py"]) == 2
    assert "nothing to launch" in capsys.readouterr().err


@pytest.mark.dist
def test_launch_execs_torchrun_with_the_plan_env(plan_file, tmp_path):
    """A real launch on CPU: two ranks, each seeing the plan's CUDA_VISIBLE_DEVICES (one file per rank)."""
    pytest.importorskip("torch")
    code = ("import os, pathlib; e = os.environ; pathlib.Path(e['OUT_DIR'], 'rank' + e['RANK'])"
            ".write_text(e['CUDA_VISIBLE_DEVICES'] + ' ' + e['WORLD_SIZE'])")
    env = dict(os.environ, OUT_DIR=str(tmp_path))
    done = subprocess.run([sys.executable, "-m", "topowise", "launch", "--plan", str(plan_file), "--",
                           "python", "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "rank0").read_text() == "0,1 2"
    assert (tmp_path / "rank1").read_text() == "0,1 2"


# --- topowise.measure.launcher: the one place that starts processes ----------------------------------

def test_job_size_from_torchrun_or_srun(monkeypatch):
    from topowise.measure.launcher import job_size

    for key in ("RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_NTASKS_PER_NODE"):
        monkeypatch.delenv(key, raising=False)
    assert job_size() is None
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert job_size() == (8, 4)  # torchrun: two nodes of four
    for key in ("RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(key)
    monkeypatch.setenv("SLURM_PROCID", "1")
    monkeypatch.setenv("SLURM_NTASKS", "4")
    monkeypatch.setenv("SLURM_NTASKS_PER_NODE", "2(x2)")
    assert job_size() == (4, 2)  # srun, before the rank joins the group


def test_run_topowise_gives_the_childs_exit_status():
    from topowise.measure.launcher import run_topowise

    assert run_topowise(["bench", "comm", "--backend", "gloo", "--ops", "allscatter"]) == 2
