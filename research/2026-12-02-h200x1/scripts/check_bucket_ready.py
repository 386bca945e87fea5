"""bucket_ready.py on CPU (gloo, one process): DDP as bench train builds it makes the buckets the cost model counts
(comm.ddp_bucket_ends), in the order it says, for a tied model with biases (gpt2; the Llama shapes are checked
against one-H200 records in tests/unit/test_overlap.py). Run from the repository root (about a minute):
`python -m pytest -q research/2026-12-02-h200x1/scripts/check_bucket_ready.py`."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from topowise.costmodel.comm import ddp_bucket_ends
from topowise.models.spec import load_model

pytest.importorskip("torch")

HERE = Path(__file__).resolve().parent


def test_ddp_makes_the_buckets_the_cost_model_counts(tmp_path):
    # one thread: gloo's own thread otherwise contends with the compute on a machine of few cores
    env = dict(os.environ, OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, str(HERE / "bucket_ready.py"), "--models",
                           "gpt2", "--device", "cpu", "--seq-len", "16", "--warmup", "1", "--steps", "1",
                           "--out", str(tmp_path)], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    records = [json.loads(line) for line in (tmp_path / "bucket_ready.jsonl").read_text().splitlines()]
    assert [r["status"] for r in records] == ["ok"]
    for r in records:
        assert [b["bytes"] for b in r["buckets"]] == [b for b, _ in ddp_bucket_ends(load_model(r["model"]))]
        fractions = [b["ready_fraction"] for b in r["buckets"]]
        assert fractions == sorted(fractions) and 0 < fractions[0] < fractions[-1] <= 1.0
