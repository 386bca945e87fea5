"""benchmarks/trace_kernels.py: a traced step's GPU time by kernel class, each kernel counted in the step and the
phase whose host range launched it. Not collected by the suite (tests/ imports nothing from benchmarks/); run from the
repository root: `python -m pytest -q benchmarks/check_trace_kernels.py`."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import trace_kernels  # noqa: E402


def event(cat, name, ts, dur, correlation=None):
    e = {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur}
    if correlation is not None:
        e["args"] = {"correlation": correlation}
    return e


def test_kernels_go_to_the_step_that_launched_them(tmp_path):
    """A GPU that lags its host runs step 1's matmul during step 2's host range: it still counts for step 1."""
    events = [event("user_annotation", "topowise.step.1", 0, 100),
              event("user_annotation", "topowise.step.2", 100, 100),
              event("cuda_runtime", "cudaLaunchKernel", 50, 1, 1), event("cuda_driver", "cuLaunchKernel", 150, 1, 2),
              event("kernel", "sm90_xmma_gemm_bf16bf16", 160, 40, 1),
              event("kernel", "void at::native::vectorized_elementwise_kernel", 210, 30, 2),
              event("gpu_memcpy", "Memcpy DtoD (Device -> Device)", 250, 10, 2)]
    steps, kernels = trace_kernels.per_step({"traceEvents": events}, skip=2)
    assert steps == 1 and set(kernels) == {"void at::native::vectorized_elementwise_kernel",
                                           "Memcpy DtoD (Device -> Device)"}
    steps, kernels = trace_kernels.per_step({"traceEvents": events}, skip=1)
    assert steps == 2 and kernels["sm90_xmma_gemm_bf16bf16"] == pytest.approx(40e-6 / 2)
    path = tmp_path / "rank0.trace.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": events}, f)
    sys.argv = ["trace_kernels.py", str(path), "--skip", "1", "--json", str(tmp_path / "k.json")]
    assert trace_kernels.main() == 0
    classes = json.loads((tmp_path / "k.json").read_text())["classes"]
    assert classes == pytest.approx({"matmul": 20e-6, "elementwise/other": 15e-6, "copy/set": 5e-6})
    sys.argv = ["trace_kernels.py", str(tmp_path / "missing.gz")]
    assert trace_kernels.main() == 2


def test_kernel_classes():
    assert trace_kernels.kernel_class("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL") == "nccl"
    assert trace_kernels.kernel_class("cudnn_generated_fort_native_sdpa_sm90_flash_fprop") == "attention"
    assert trace_kernels.kernel_class("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTN") == "matmul"
    assert trace_kernels.kernel_class("void at::native::cunn_SoftMaxForward<4, float>") == "loss"
    assert trace_kernels.kernel_class("void at::native::multi_tensor_apply_kernel<FusedAdamMathFunctor>") == "optimizer"


def test_trace_kernels_counts_a_phase_by_where_the_host_launched_each_kernel():
    events = []

    def span(name, cat, ts, dur, **args):
        events.append({"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "args": args})

    for step in range(3):
        t0 = 1000 * step
        span(f"topowise.step.{step}", "user_annotation", t0, 900)
        span("topowise.forward", "user_annotation", t0, 300)
        span("topowise.optimizer", "user_annotation", t0 + 600, 300)
        span("cudaLaunchKernel", "cuda_runtime", t0 + 10, 1, correlation=10 * step + 1)
        span("fwd_kernel", "kernel", t0 + 20, 100, correlation=10 * step + 1)
        span("cudaLaunchKernel", "cuda_runtime", t0 + 610, 1, correlation=10 * step + 2)
        # launched in the optimizer's range, run after the step's range ends on the host: still the optimizer's
        span("opt_kernel", "kernel", t0 + 950, 50, correlation=10 * step + 2)
    trace = {"traceEvents": events}
    assert trace_kernels.per_step(trace, 1) == (2, {"fwd_kernel": 100e-6, "opt_kernel": 50e-6})
    assert trace_kernels.per_step(trace, 1, "optimizer") == (2, {"opt_kernel": 50e-6})
    assert trace_kernels.per_step(trace, 0, "forward") == (3, {"fwd_kernel": 100e-6})
