"""launch: plan -> (argv, env), printed with --dry-run, exec'd otherwise; foreign plan files refused.
The real launches (torchrun on CPU) are in tests/dist/test_launch_torchrun.py."""

import shlex
import sys

import pytest

from topowise.cli.launch import torchrun_prefix
from topowise.cli.main import main
from topowise.measure.torchrun import failure_line, shell_status


def test_dry_run_prints_env_then_torchrun(plan_file, capsys):
    assert main(["launch", "--plan", str(plan_file), "--dry-run", "--",
                 "python", "-m", "my.train", "--tag", "a b"]) == 0
    words = shlex.split(capsys.readouterr().out)
    assert words[0] == "CUDA_VISIBLE_DEVICES=0,1"
    start = words.index("torchrun")
    assert all("=" in w for w in words[:start])
    assert words[start:] == ["torchrun", "--standalone", "--nnodes=1", "--nproc-per-node=2", "--no-python",
                             "python", "-m", "my.train", "--tag", "a b"]


@pytest.mark.parametrize("command,tail", [
    (["python", "env.py"], ["--no-python", "python", "env.py"]),  # the command as the user wrote it
    (["python3", "-u", "env.py"], ["--no-python", "python3", "-u", "env.py"]),
    (["env.py", "--x"], ["env.py", "--x"]),  # a script alone: torchrun's Python runs it
    (["-m", "pkg.train"], ["-m", "pkg.train"]),
    (["bash", "run.sh"], ["--no-python", "bash", "run.sh"]),
])
def test_dry_run_keeps_the_command_as_written(plan_file, capsys, command, tail):
    assert main(["launch", "--plan", str(plan_file), "--dry-run", "--", *command]) == 0
    words = shlex.split(capsys.readouterr().out)
    assert words[-len(tail):] == tail and words[words.index("torchrun") + 4:] == tail


def test_dry_run_from_plan_flags_with_pcie_fabric(capsys):
    assert main(["launch", "--model", "llama3.2-1b", "--topology", "h100-nvl-8", "--num-gpus", "2",
                 "--fabric", "pcie", "--dry-run", "--", "train.py"]) == 0
    out = capsys.readouterr().out
    assert "NCCL_P2P_DISABLE=1" in out and out.rstrip().endswith("train.py")


@pytest.mark.parametrize("content,match", [
    ('{"format": "topowise.topology", "version": 1}', "not a topowise plan"),
    ("hello", "not a topowise plan"),
    ('{"format": "topowise.plan", "version": 2}', "version 2"),
    (b"\x7fELF\x02\x01\x01\x00\xff\xfe\x00", "not a topowise plan: not text"),  # a binary file
])
def test_foreign_plan_file_exit_2(tmp_path, capsys, content, match):
    path = tmp_path / "x.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
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


def test_launch_runs_torchrun_through_the_status_keeping_wrapper():
    pytest.importorskip("torch")
    assert torchrun_prefix() == (sys.executable, "-m", "topowise.measure.torchrun")


@pytest.mark.parametrize("exitcode,status,words", [
    (3, 3, "rank 1 exited with status 3"),
    (1, 1, "rank 1 exited with status 1"),
    (-9, 137, "rank 1 was killed by SIGKILL: exit status 137"),
    (-15, 143, "rank 1 was killed by SIGTERM: exit status 143"),
])
def test_a_failed_rank_status_as_a_shell_reports_it(exitcode, status, words):
    assert shell_status(exitcode) == status
    assert failure_line(1, exitcode) == f"topowise: {words}"
