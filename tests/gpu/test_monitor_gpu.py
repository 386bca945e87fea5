"""StepMonitor on the GPUs of this machine (one rank per GPU, at most two): every step record carries
each rank's SM clock as NVML reads it, within the GPU's own clock range, and `monitor summarize` reports
the same median clock."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
pynvml = pytest.importorskip("pynvml")

EXAMPLE = Path(__file__).parents[2] / "examples" / "train_with_monitor.py"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    folder = tmp_path_factory.mktemp("monitor-gpu")
    ranks = min(torch.cuda.device_count(), 2)
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks), str(EXAMPLE),
         "--model", "llama3.2-1b", "--seq-len", "1024", "--steps", "12", "--run-dir", str(folder)],
        capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert done.returncode == 0, done.stderr[-3000:]
    return folder, ranks


def _max_sm_mhz(rank: int) -> float:
    pynvml.nvmlInit()
    try:
        return float(pynvml.nvmlDeviceGetMaxClockInfo(pynvml.nvmlDeviceGetHandleByIndex(rank), pynvml.NVML_CLOCK_SM))
    finally:
        pynvml.nvmlShutdown()


def test_each_step_records_each_ranks_sm_clock(run_dir):
    folder, ranks = run_dir
    steps = [r for r in map(json.loads, (folder / "monitor.rank0.jsonl").read_text().splitlines())
             if r["kind"] == "step"]
    assert len(steps) >= 10
    for rank in range(ranks):
        mhz = [s["sm_mhz"][rank] for s in steps]
        top = _max_sm_mhz(rank)  # CUDA_VISIBLE_DEVICES unset on the device machine: rank r is NVML index r
        assert all(m is not None and 100 <= m <= top for m in mhz), (rank, mhz, top)
    assert all(isinstance(s["clock_reasons"][0], int) for s in steps)


def test_summarize_reports_the_median_clock(run_dir):
    from topowise.monitor.summary import summarize

    folder, ranks = run_dir
    summary = summarize(str(folder))
    assert len(summary.ranks) == ranks
    for r in summary.ranks:
        assert not math.isnan(r.median_sm_mhz) and 100 <= r.median_sm_mhz <= _max_sm_mhz(r.rank)
