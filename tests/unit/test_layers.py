"""The layers of pyproject.toml's import-linter contracts hold (cli > report, monitor, calibrate > measure >
planner, export > costmodel > run > topology, models > units; no cycles inside a package; the package never
imports benchmarks/ or research/; the planning path imports no torch), and an import that breaks one,
inside a function too, fails `lint-imports`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]
LINT = "from importlinter.cli import lint_imports_command; lint_imports_command()"


def lint_imports(tree: Path) -> subprocess.CompletedProcess:
    """`lint-imports` with pyproject.toml's contracts over the package found in `tree`."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    return subprocess.run([sys.executable, "-c", LINT, "--no-cache", "--no-logo", "--config",
                           str(tree / "pyproject.toml")], cwd=tree, env=env, capture_output=True, text=True,
                          timeout=120)


def test_the_package_keeps_its_layers():
    done = lint_imports(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


def test_an_upward_import_inside_a_function_and_an_import_of_the_lab_fail(tmp_path):
    shutil.copytree(ROOT / "topowise", tmp_path / "topowise", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    step = tmp_path / "topowise" / "costmodel" / "flops.py"
    step.write_text(step.read_text() + "\n\ndef _upward():\n    from topowise.cli import main\n\n    return main\n")
    units = tmp_path / "topowise" / "units.py"
    units.write_text(units.read_text() + "\n\ndef _lab():\n    import benchmarks.plan_search_time\n\n"
                     "    return benchmarks.plan_search_time\n")
    done = lint_imports(tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "topowise.costmodel is not allowed to import topowise.cli" in done.stdout
    assert "topowise is not allowed to import benchmarks" in done.stdout
    assert "topowise.units -> benchmarks" in done.stdout
