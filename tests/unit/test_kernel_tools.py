"""benchmarks/trace_kernels.py and kernel_rates.py's fit: the tools the cost model's kernel terms come from."""

from __future__ import annotations

import gzip
import json
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
trace_kernels = pytest.importorskip("trace_kernels")


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


def test_attention_fit_recovers_its_form():
    kernel_rates = pytest.importorskip("kernel_rates")
    rows = []
    for head_dim, e in ((64, 0.45), (128, 0.6)):
        for seq in (1024, 2048, 4096, 8192, 16384):
            rate = e * seq / (seq + 700)
            rows.append({"head_dim": head_dim, "seq_len": seq, "peak_flops": 1.0,
                         "step": {"attention_flops": rate, "attention_s": 1.0}})
    offset, effs, rms = kernel_rates.fit_attention(rows)
    assert offset == 700 and effs == pytest.approx({64: 0.45, 128: 0.6}) and rms < 1e-9


def test_copy_rates_groups_the_parameters_as_fsdp2_wraps_them():
    """One group per block and one for the rest: every parameter of the bench transformer once."""
    pytest.importorskip("torch")
    copy_rates = pytest.importorskip("copy_rates")
    from topowise.models.spec import load_model

    spec = load_model("llama3.2-1b")
    groups = copy_rates.parameter_groups("llama3.2-1b")
    assert len(groups) == spec.num_layers + 1
    numel = [sum(math.prod(s) for s in g) for g in groups]
    assert numel[0] == spec.layer_params and sum(numel) == spec.params
    assert (spec.vocab_size, spec.hidden_size) in groups[-1]  # the (tied) embedding outside every block


def test_copy_rates_summary_of_the_record(tmp_path, capsys, monkeypatch):
    copy_rates = pytest.importorskip("copy_rates")
    record = Path(__file__).resolve().parents[2] / "docs/results/2026-12-02-h200x1/copies/run19/copy_rates.jsonl"
    monkeypatch.setattr(sys, "argv", ["copy_rates.py", "--summary", str(record)])
    assert copy_rates.main() == 0
    mean = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("share of adamw, mean"))
    assert mean.split()[-7:] == ["1.000", "1.087", "0.528", "1.093", "0.487", "1.035", "1.188"]
    (tmp_path / "empty.jsonl").write_text('{"model": "x", "status": "oom"}\n')
    monkeypatch.setattr(sys, "argv", ["copy_rates.py", "--summary", str(tmp_path / "empty.jsonl")])
    assert copy_rates.main() == 2
    assert "no measured rows" in capsys.readouterr().err


def test_memory_peak_replays_the_allocator_to_the_last_steps_peak():
    """benchmarks/memory_peak.py: the peak is looked for from the last step's mark on, what was allocated
    before it still counts, a block is freed when its free completes, and each live block is named by its
    innermost frames in topowise and in torch's machinery."""
    memory_peak = pytest.importorskip("memory_peak")
    ours = [{"filename": "/site/torch/nn/functional.py", "name": "linear", "line": 5},
            {"filename": "/repo/topowise/models/transformer.py", "name": "forward", "line": 145}]
    fsdp = [{"filename": "/site/torch/distributed/fsdp/_fully_shard/_fsdp_param.py", "name": "alloc", "line": 9}]
    trace = [{"action": "alloc", "addr": 1, "size": 100, "frames": fsdp},          # before the last step
             {"action": "alloc", "addr": 2, "size": 500, "frames": ours},          # an earlier step's peak
             {"action": "free_requested", "addr": 2, "size": 500},
             {"action": "free_completed", "addr": 2, "size": 500},
             {"action": "alloc", "addr": 3, "size": memory_peak.MARK_ALLOCATED, "frames": []},  # the mark
             {"action": "free_completed", "addr": 3, "size": memory_peak.MARK_ALLOCATED},
             {"action": "alloc", "addr": 4, "size": 300, "frames": ours},
             {"action": "free_requested", "addr": 4, "size": 300},
             {"action": "alloc", "addr": 5, "size": 50, "frames": fsdp},           # 4 not free yet: 450
             {"action": "free_completed", "addr": 4, "size": 300}]
    peak, live = memory_peak.live_at_peak(trace, start=6)
    assert peak == 450
    assert sorted(live.values()) == [(50, "torch/distributed/fsdp/_fully_shard/_fsdp_param.py:alloc:9"),
                                     (100, "torch/distributed/fsdp/_fully_shard/_fsdp_param.py:alloc:9"),
                                     (300, "topowise/models/transformer.py:forward:145")]
    assert memory_peak.frame_name([]) == "no Python frame"


def test_launch_cost_counts_the_queue_at_each_call_and_the_calls_that_waited(tmp_path):
    """Two launches in step 2's forward: the first finds the queue empty, the second one kernel still running;
    a 'Command Buffer Full' marker inside the phase is time the host waited for room."""
    launch_cost = pytest.importorskip("launch_cost")
    events = [event("user_annotation", "topowise.step.1", 0, 100),
              event("user_annotation", "topowise.step.2", 100, 1000),
              event("user_annotation", "topowise.forward", 100, 500),
              event("cuda_runtime", "cudaLaunchKernel", 110, 5, 1), event("kernel", "gemm", 120, 100, 1),
              event("cuda_runtime", "cudaLaunchKernel", 150, 9, 2), event("kernel", "elementwise", 220, 10, 2),
              event("cuda_runtime", "Command Buffer Full", 300, 40)]
    path = tmp_path / "rank0.trace.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": events}, f)
    forward = launch_cost.read(path, skip=2)["phases"]["forward"]
    assert forward["host_ms_per_step"] == pytest.approx(0.5)
    assert forward["queue_full_ms_per_step"] == pytest.approx(0.04)
    assert forward["launches_per_step"] == 2
    assert forward["by_queue_depth"] == {"0-0": {"calls": 1, "median_us": 5.0, "mean_us": 5.0},
                                         "1-8": {"calls": 1, "median_us": 9.0, "mean_us": 9.0}}


def test_gemm_tiles_form_and_its_fit():
    """benchmarks/gemm_tiles.py: a 3.4-wave GEMM idles the rest of its last wave; the grid search finds the
    constants that made a set of rates."""
    import gemm_tiles

    # 8192 x 896 out of 896: 64 x 7 = 448 tiles, 3.39 waves of 132 -> 4; K 896 against K0 184
    o = {"rows": 8192, "cols": 896, "k": 896}
    assert gemm_tiles.tiles(o) == 448
    fill = 8192 * 896 / 128**2 / (132 * 4)
    assert gemm_tiles.tile_form(o, 0.865, 184) == pytest.approx(0.865 * fill * 896 / (896 + 184))
    shapes = [(8192, n, k) for n in (896, 1152, 2048, 4864, 8192) for k in (896, 2048, 8192)]
    rows = [{"rows": m, "cols": n, "k": k} for m, n, k in shapes]
    for r in rows:
        r["rate"] = gemm_tiles.tile_form(r, 0.84, 160)
    assert gemm_tiles.fit(rows) == (0.84, 160)


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
