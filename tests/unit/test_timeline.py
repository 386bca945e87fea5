"""benchmarks/timeline.py on a hand-made profiler trace whose answer is known."""

import gzip
import importlib.util
import json
import sys
from pathlib import Path

import pytest

SPEC = importlib.util.spec_from_file_location("timeline", Path(__file__).parents[2] / "benchmarks" / "timeline.py")
timeline = importlib.util.module_from_spec(SPEC)
sys.modules["timeline"] = timeline  # dataclasses look their module up
SPEC.loader.exec_module(timeline)


def span(cat, name, ts, dur, corr=None, tid=1):
    e = {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 0, "tid": tid, "args": {}}
    if corr is not None:
        e["args"]["correlation"] = corr
    return e


def kernel(name, ts, dur, corr, stream=7):
    return span("kernel", name, ts, dur, corr, tid=stream)


def launch(ts, corr, dur=5):
    return span("cuda_runtime", "cudaLaunchKernel", ts, dur, corr)


def two_steps():
    """Step s (s = 0, 1) starts at t0 = 1000 s:
    forward, host 0-300: kernel A launched at 10, runs 20-100; kernel B launched at 200 (the host was
      late: the GPU idles 100-205), runs 205-300.
    backward, host 300-400: NCCL runs 310-500; kernel C, launched at 310 and waiting on NCCL, runs
      500-600 (idle 300-310 host, 310-500 comm).
    optimizer, host 400-420: kernel D launched at 405, runs 600-650 (the host is 195 us ahead).
    """
    ev = []
    for s in range(2):
        t = 1000 * s
        ev += [span("user_annotation", f"topowise.step.{s}", t, 420),
               span("user_annotation", "topowise.forward", t, 300),
               span("user_annotation", "topowise.backward", t + 300, 100),
               span("user_annotation", "topowise.optimizer", t + 400, 20)]
        c = 10 * s
        ev += [launch(t + 10, c + 1), kernel("gemm_A", t + 20, 80, c + 1),
               launch(t + 200, c + 2), kernel("gemm_B", t + 205, 95, c + 2),
               launch(t + 305, c + 3), kernel("ncclDevKernel_AllGather", t + 310, 190, c + 3, stream=20),
               launch(t + 305, c + 4), kernel("gemm_C", t + 500, 100, c + 4),
               launch(t + 400, c + 5, dur=5), kernel("adam_D", t + 600, 50, c + 5)]
    return ev


def test_idle_time_is_split_into_host_comm_and_other():
    steps = timeline.step_phases(two_steps(), skip=0)
    assert len(steps) == 1  # step 1's optimizer has no next phase to end its window: step 1 is cut short
    fwd, bwd, opt = steps[0]
    # forward: from A's start (20) to backward's first kernel (NCCL, 310); idle 100-205 waiting for
    # B's launch and 300-310 for the NCCL kernel's (launched 305-310)
    assert fwd.gpu_ms == pytest.approx(0.290) and fwd.compute_ms == pytest.approx(0.175)
    assert fwd.idle_host_ms == pytest.approx(0.115) and fwd.idle_comm_ms == pytest.approx(0.0)
    assert fwd.lead_ms == pytest.approx(0.0075)  # median of 10 and 5 us
    # backward: from its first kernel (NCCL, 310) to optimizer's (D, 600); C waited on NCCL
    assert bwd.gpu_ms == pytest.approx(0.290) and bwd.nccl_ms == pytest.approx(0.190)
    assert bwd.idle_comm_ms == pytest.approx(0.190) and bwd.idle_host_ms == pytest.approx(0.0)
    assert opt.host_ms == pytest.approx(0.020) and opt.lead_ms == pytest.approx(0.200)
    assert opt.gpu_ms == pytest.approx(0.420)  # D's start to step 1's first kernel (1020)


def test_launch_queue_waits_count_as_blocked_host_time():
    ev = two_steps() + [span("cuda_runtime", "Command Buffer Full", 50, 40), launch(120, 99, dur=1500)]
    fwd = timeline.step_phases(ev, skip=0)[0][0]
    assert fwd.blocked_ms == pytest.approx(0.040 + 0.180)  # the long launch is cut at the range's end (300)


def test_cli_reads_a_gzipped_trace_and_refuses_a_missing_one(tmp_path, capsys):
    path = tmp_path / "rank0.trace.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": two_steps()}, f)
    assert timeline.main([str(path), "--skip", "0", "--json", str(tmp_path / "t.json")]) == 0
    assert "forward" in capsys.readouterr().out
    assert len(json.loads((tmp_path / "t.json").read_text())[str(path)]) == 1
    assert timeline.main([str(tmp_path / "missing.json.gz")]) == 2
    (tmp_path / "bad.json").write_text("{not json")
    assert timeline.main([str(tmp_path / "bad.json")]) == 2
    assert "not a profiler trace" in capsys.readouterr().err
