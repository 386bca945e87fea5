"""`bench comm` on real GPUs (pytest -m gpu on a CUDA machine). Correctness and plumbing only: no timing
is asserted; the speed comparison with nccl-tests is benchmarks/comm_vs_nccl_tests.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from topowise.measure.records import read_records

ROOT = Path(__file__).resolve().parents[2]


def bench(tmp_path, *args, env_extra=None):
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "topowise", "bench", "comm", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)


def gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


@pytest.mark.gpu
def test_collectives_on_nccl_are_right_and_name_the_transport(tmp_path):
    if gpus() < 2:
        pytest.skip("needs two GPUs")
    out = tmp_path / "c.jsonl"
    done = bench(tmp_path, "--nproc", "2", "--min-bytes", "1M", "--max-bytes", "4M", "--iters", "5",
                 "--graph", "on", "--dtype", "bfloat16", "--out", str(out))
    assert done.returncode == 0, done.stderr + done.stdout
    rows = read_records(out, kind="collective")
    assert len(rows) == 6 * 3
    assert all(r["wrong"] == 0 for r in rows), [r for r in rows if r["wrong"]]
    assert all(r["backend"] == "nccl" and r["nccl_version"] for r in rows)
    assert rows[-1]["transport"] != "unknown", rows[-1]
    assert "NCCL" in done.stdout and "busbw" in done.stdout


@pytest.mark.gpu
def test_pcie_fabric_disables_p2p_without_graphs(tmp_path):
    if gpus() < 2:
        pytest.skip("needs two GPUs")
    out = tmp_path / "p.jsonl"
    done = bench(tmp_path, "--nproc", "2", "--ops", "all_reduce", "--min-bytes", "1M", "--max-bytes", "1M",
                 "--fabric", "pcie", "--graph", "off", "--out", str(out))
    assert done.returncode == 0, done.stderr
    (row,) = read_records(out, kind="collective")
    assert row["fabric"] == "pcie" and row["wrong"] == 0 and row["graph"] is False
    assert not row["transport"].startswith("P2P"), row["transport"]


@pytest.mark.gpu
def test_pair_matrix(tmp_path):
    if gpus() < 2:
        pytest.skip("needs two GPUs")
    out = tmp_path / "m.jsonl"
    done = bench(tmp_path, "--nproc", "2", "--ops", "none", "--matrix", "--matrix-bytes", "16M", "--out", str(out))
    assert done.returncode == 0, done.stderr
    pairs = read_records(out, kind="p2p")
    assert {p["method"] for p in pairs} == {"copy", "nccl"}
    assert all(p["gbps"] > 0 for p in pairs)
    assert (tmp_path / "m.matrix.png").exists()


@pytest.mark.gpu
def test_one_gpu_measures_copies(tmp_path):
    out = tmp_path / "one.jsonl"
    done = bench(tmp_path, "--out", str(out), "--matrix-bytes", "64M", env_extra={"CUDA_VISIBLE_DEVICES": "0"})
    assert done.returncode == 0, done.stderr
    assert "two or more GPUs" in done.stdout
    assert {r["op"] for r in read_records(out, kind="copy")} == {"h2d", "d2h", "d2d"}
