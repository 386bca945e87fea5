"""The study tools the cost model's kernel terms came from: kernel_rates.py's attention fit, copy_rates.py,
memory_peak.py, gemm_tiles.py (this session) and launch_cost.py (2026-12-03). A check of these scripts, run from the
repository root: `python -m pytest -q research/2026-12-02-h200x1/scripts/check_kernel_tools.py`."""

from __future__ import annotations

import gzip
import json
import math
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1] / "2026-12-03-h200x1" / "scripts")]


def event(cat, name, ts, dur, correlation=None):
    e = {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur}
    if correlation is not None:
        e["args"] = {"correlation": correlation}
    return e


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
    record = HERE.parent / "copies/run19/copy_rates.jsonl"
    monkeypatch.setattr(sys, "argv", ["copy_rates.py", "--summary", str(record)])
    assert copy_rates.main() == 0
    mean = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("share of adamw, mean"))
    assert mean.split()[-7:] == ["1.000", "1.087", "0.528", "1.093", "0.487", "1.035", "1.188"]
    (tmp_path / "empty.jsonl").write_text('{"model": "x", "status": "oom"}\n')
    monkeypatch.setattr(sys, "argv", ["copy_rates.py", "--summary", str(tmp_path / "empty.jsonl")])
    assert copy_rates.main() == 2
    assert "no measured rows" in capsys.readouterr().err


def test_memory_peak_replays_the_allocator_to_the_last_steps_peak():
    """memory_peak.py: the peak is looked for from the last step's mark on, what was allocated
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
    """gemm_tiles.py: a 3.4-wave GEMM idles the rest of its last wave; the grid search finds the
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
