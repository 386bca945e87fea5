"""The quick-start install has no PyTorch: every verb that needs it says so in one line (exit 2), and
the verbs that do not need it still work.

Each command runs in a subprocess whose import system hides torch (a sitecustomize on PYTHONPATH,
which the processes it starts inherit), with a PATH that holds no `torchrun`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

RESULTS = Path(__file__).parents[2] / "tests" / "data" / "records" / "2026-11-30-h200x2" / "run10"
HIDE_TORCH = '''
import sys


class _NoTorch:
    """Finds torch nowhere, as in an environment where it was never installed."""

    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _NoTorch())
'''
INSTALL = "pip install 'topowise[bench]'"


@pytest.fixture(scope="module")
def no_torch_env(tmp_path_factory):
    site = tmp_path_factory.mktemp("no-torch")
    (site / "sitecustomize.py").write_text(HIDE_TORCH)
    return {**os.environ, "PYTHONPATH": str(site), "PATH": "/usr/bin:/bin",
            "XDG_CACHE_HOME": str(site / "cache")}


def topowise(env, *argv, cwd=None):
    return subprocess.run([sys.executable, "-m", "topowise", *argv], capture_output=True, text=True, env=env,
                          timeout=120, cwd=cwd)


def test_torch_is_hidden(no_torch_env):
    done = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True, text=True, env=no_torch_env)
    assert done.returncode == 1 and "No module named 'torch'" in done.stderr


@pytest.fixture(scope="module")
def plan_file(no_torch_env, tmp_path_factory):
    path = tmp_path_factory.mktemp("plan") / "plan.json"
    done = topowise(no_torch_env, "plan", "--model", "llama3.2-1b", "--topology", "h100-nvl-8", "--num-gpus", "2",
                    "--save-plan", str(path), "--json")
    assert done.returncode == 0, done.stderr
    return path


@pytest.mark.parametrize("argv,what", [
    (["bench", "comm"], "bench comm"),
    (["bench", "comm", "--backend", "gloo"], "bench comm"),
    (["bench", "train"], "bench train"),
    (["bench", "train", "--device", "cpu", "--model", "tiny", "--seq-len", "16"], "bench train"),
    (["calibrate", "--device", "cpu"], "calibrate"),
    (["validate", "--device", "cpu", "--profile", str(RESULTS / "profile.json")], "validate"),
    (["launch", "--plan", "PLAN", "--", "python", "train.py"], "launch runs torchrun"),
])
def test_measuring_without_torch_is_one_line(no_torch_env, plan_file, tmp_path, argv, what):
    argv = [str(plan_file) if a == "PLAN" else a for a in argv]
    done = topowise(no_torch_env, *argv, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"topowise: error: {what}") and done.stderr.count("\n") == 1, done.stderr
    assert INSTALL in done.stderr and "Traceback" not in done.stderr
    assert not list(tmp_path.iterdir())  # nothing started, nothing written


def test_launch_dry_run_needs_no_torch(no_torch_env, plan_file):
    done = topowise(no_torch_env, "launch", "--plan", str(plan_file), "--dry-run", "--", "python", "train.py")
    assert done.returncode == 0 and done.stdout.rstrip().endswith("--no-python python train.py"), done.stderr


def test_validate_of_recorded_runs_needs_no_torch(no_torch_env, tmp_path):
    done = topowise(no_torch_env, "validate", "--profile", str(RESULTS / "profile.json"), "--measured",
                    str(RESULTS / "validate-records" / "train.jsonl"), "--no-plot", "--out", str(tmp_path / "v.jsonl"))
    assert done.returncode == 0, done.stderr
    assert "Predicted vs measured, over nvlink" in done.stdout and "Traceback" not in done.stderr
