"""topowise.measure.timeline on hand-made profiler traces whose answer is known, its writer, and
the cost model's per-phase numbers it puts beside the measured ones."""

import gzip
import json

import pytest

from topowise.errors import UsageError
from topowise.measure import launcher, train
from topowise.measure import timeline as T


def span(cat, name, ts, dur, corr=None, tid=1):
    e = {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 0, "tid": tid, "args": {}}
    if corr is not None:
        e["args"]["correlation"] = corr
    return e


def kernel(name, ts, dur, corr, stream=7):
    return span("kernel", name, ts, dur, corr, tid=stream)


def launch(ts, corr, dur=5):
    return span("cuda_runtime", "cudaLaunchKernel", ts, dur, corr)


def ranges_of(t):
    return [span("user_annotation", f"topowise.step.{t // 1000}", t, 420),
            span("user_annotation", "topowise.forward", t, 300),
            span("user_annotation", "topowise.backward", t + 300, 100),
            span("user_annotation", "topowise.optimizer", t + 400, 20)]


def two_steps():
    """Step s (s = 0, 1) starts at t = 1000 s (microseconds):
    forward, host 0-300: kernel A launched at 10, runs 20-100; a reduce-scatter runs 30-90 behind it
      (hidden); kernel B launched at 200-205 (the host was late: the GPU waits 100-205), runs 205-300.
    backward, host 300-400: an all-gather runs 310-500; kernel C, launched at 305-310 and waiting on
      it, runs 500-600 (300-310: waiting for the launches; 310-500: exposed all-gather); an
      all-reduce runs 450-550, behind the all-gather and then C (hidden).
    optimizer, host 400-420: kernel D launched at 400, runs 600-650; then the GPU waits for step s+1's
      first launch (returns at 1015), and 1015-1020 is neither (other).
    """
    ev = []
    for s in range(2):
        t, c = 1000 * s, 10 * s
        ev += ranges_of(t)
        ev += [launch(t + 10, c + 1), kernel("gemm_A", t + 20, 80, c + 1),
               launch(t + 25, c + 6), kernel("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL", t + 30, 60, c + 6, 20),
               launch(t + 200, c + 2), kernel("gemm_B", t + 205, 95, c + 2),
               launch(t + 305, c + 3), kernel("ncclDevKernel_AllGather_RING_LL", t + 310, 190, c + 3, 20),
               launch(t + 305, c + 4), kernel("gemm_C", t + 500, 100, c + 4),
               launch(t + 306, c + 7), kernel("ncclKernel_AllReduce_RING_LL_Sum_float", t + 450, 100, c + 7, 21),
               launch(t + 400, c + 5), kernel("adam_D", t + 600, 50, c + 5)]
    return ev


def us(x):
    return pytest.approx(x / 1e6, abs=1e-12)


def test_nccl_kernel_names_tell_the_collective():
    assert T.collective_of("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)") == "all_gather"
    assert T.collective_of("ncclKernel_AllReduce_RING_LL_Sum_float") == "all_reduce"
    assert T.collective_of("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL") == "reduce_scatter"
    assert T.collective_of("ncclDevKernel_Broadcast_RING_LL") == "broadcast"
    assert T.collective_of("ncclDevKernel_SendRecv") == "sendrecv"
    assert T.collective_of("ncclDevKernel_Generic") == "nccl"
    assert T.collective_of("ampere_bf16_s16816gemm") is None


def test_a_step_is_partitioned_into_compute_exposed_comm_host_wait_and_other():
    reading = T.read_trace(two_steps())
    assert reading.mode == "gpu" and [s.step for s in reading.steps] == [0, 1]
    step = reading.steps[0]
    fwd, bwd, opt = step.phases
    # step 0 on the GPU: A's start (20) to step 1's first kernel (1020); phases open at their first kernel
    assert step.wall_s == us(1000) and [fwd.wall_s, bwd.wall_s, opt.wall_s] == [us(290), us(290), us(420)]
    assert fwd.pieces == {"compute": us(175), "host_wait": us(105 + 10), "other": us(0)}  # the reduce-scatter hid
    assert fwd.nccl_s == us(60)
    assert bwd.pieces == {"compute": us(100), "host_wait": us(0), "comm:all_gather": us(190), "other": us(0)}
    assert bwd.nccl_s == us(550 - 310)  # some NCCL kernel runs from 310 to 550 (the all-reduce hid behind C)
    assert opt.pieces == {"compute": us(50), "host_wait": us(1015 - 650), "other": us(5)}
    assert sum(step.pieces.values()) == pytest.approx(step.wall_s, abs=1e-12)
    assert step.exposed_comm_s == us(190)
    assert fwd.host_s == us(300) and opt.lead_s == us(200) and fwd.lead_s == us(7.5)  # median of 10 and 5
    last = reading.steps[1]  # the last step ends at its last kernel's end: no next step to wait for
    assert last.wall_s == us(1650 - 1020) and last.phases[2].pieces["host_wait"] == us(0)


def test_warm_up_steps_are_left_out_and_the_median_step_is_a_real_step():
    reading = T.read_trace(two_steps(), skip=1)
    assert [s.step for s in reading.steps] == [1]
    assert T.read_trace(two_steps()).median_step().step == 1  # walls 1000 and 630: the lower middle one


def test_overlapping_collectives_go_to_the_one_that_started_first():
    ks = [T.Kernel(0, 10, "all_gather", None, None), T.Kernel(5, 20, "reduce_scatter", None, None),
          T.Kernel(6, 8, "all_reduce", None, None)]
    segs = [((s.start, s.end), op) for s, op in T.labelled_segments(ks)]
    assert segs == [((0, 10), "all_gather"), ((10, 20), "reduce_scatter")]


def test_launch_queue_waits_count_as_blocked_host_time():
    ev = two_steps() + [span("cuda_runtime", "Command Buffer Full", 50, 40), launch(120, 99, dur=1500)]
    fwd = T.read_trace(ev).steps[0].phases[0]
    assert fwd.blocked_s == us(40 + 180)  # the long launch is cut at the range's end (300)


def test_a_trace_without_gpu_activity_is_read_host_only():
    ev = [span("user_annotation", "topowise.step.0", 0, 420), span("user_annotation", "topowise.forward", 5, 295),
          span("user_annotation", "topowise.backward", 300, 100),
          span("user_annotation", "topowise.optimizer", 400, 15), span("cpu_op", "aten::mm", 10, 50)]
    reading = T.read_trace(ev)
    assert reading.mode == "host_only"
    fwd, bwd, opt = reading.steps[0].phases
    assert fwd.pieces == {"host": us(295), "other": us(5)} and bwd.pieces == {"host": us(100), "other": us(0)}
    assert opt.pieces == {"host": us(15), "other": us(5)} and reading.steps[0].wall_s == us(420)


PREDICTED = {"step_time_s": 9e-4, "exposed_comm_s": 2e-4, "host_wait_s": 3e-4,
             "phases": {"forward": {"gpu_s": 3e-4, "host_s": 2e-4, "exposed_comm_s": 0.0, "host_wait_s": 0.0},
                        "backward": {"gpu_s": 3e-4, "host_s": 1e-4, "exposed_comm_s": 2e-4, "host_wait_s": 0.0},
                        "optimizer": {"gpu_s": 1e-4, "host_s": 4e-4, "exposed_comm_s": 0.0, "host_wait_s": 3e-4}}}


def write_trace(path, events):
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": events}, f)


def test_breakdown_json_and_png_per_rank_with_the_prediction_beside(tmp_path):
    for rank in (0, 1):
        write_trace(tmp_path / f"rank{rank}.trace.json.gz", two_steps())
    record = {"strategy": "zero3", "model": "tiny", "device": "cuda", "warmup": 0, "step_time_s": 8e-4,
              "step_times_s": [1.01e-3, 0.63e-3], "predicted": PREDICTED}
    doc = T.write_breakdown(tmp_path, record)
    on_disk = json.loads((tmp_path / "breakdown.json").read_text())
    assert on_disk["ranks"].keys() == {"0", "1"} and (tmp_path / "breakdown.png").stat().st_size > 0
    step0 = on_disk["ranks"]["0"]["steps"][0]
    assert step0["measured_s"] == 1.01e-3 and step0["residual_s"] == pytest.approx(1e-5)
    assert step0["residual_pct"] == pytest.approx(100 * 1e-5 / 1.01e-3)
    assert step0["pieces_sum_s"] == pytest.approx(step0["wall_s"])
    assert doc["median_step"]["step"] == 1 and doc["median_step"]["rank"] == 0
    compared = doc["compared"]
    assert compared["backward"]["exposed_comm_s"] == {"predicted": 2e-4, "measured": pytest.approx(1.9e-4)}
    assert compared["step"]["host_wait_s"]["predicted"] == 3e-4
    lines = T.summary_lines(doc)
    assert "median step 1" in lines[0] and any("predicted" in line for line in lines)


def test_a_host_only_breakdown_says_so(tmp_path):
    ev = [span("user_annotation", "topowise.step.0", 0, 420), span("user_annotation", "topowise.forward", 5, 295)]
    write_trace(tmp_path / "rank0.trace.json.gz", ev)
    (tmp_path / "rank1.trace.json.gz").write_text("not gzip")
    doc = T.write_breakdown(tmp_path, {"strategy": "ddp", "warmup": 0, "step_times_s": [4.2e-4],
                                       "predicted": {"note": "CPU run"}})
    assert doc["mode"] == "host_only" and doc["partition"].startswith("host only")
    assert "not a profiler trace" in doc["ranks"]["1"]["error"]
    assert doc["predicted"] == {"note": "CPU run"} and "compared" not in doc
    assert "host only" in T.summary_lines(doc)[0]


def test_trace_nsys_needs_nsys_on_path(monkeypatch):
    import shutil

    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(UsageError, match="--trace DIR"):
        train.parse_trace("nsys")
    assert train.parse_trace("prof") == ("prof", False) and train.parse_trace(None) == (None, False)
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/nsys")
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("SLURM_PROCID", raising=False)
    assert train.parse_trace("nsys") == (train.NSYS_DEFAULT_DIR, True)
    assert train.parse_trace("nsys:out/n") == ("out/n", True)


def test_the_ranks_run_under_the_wrap_command():
    cmd = launcher.torchrun_command("m:f", "c.json", 2, launcher.nsys_command("d/zero3/rank"))
    i = cmd.index("--no-python")
    assert cmd[i + 1:i + 3] == ["nsys", "profile"] and "d/zero3/rank%q{RANK}" in cmd
    assert cmd[-4:-2] == ["-m", "topowise.measure.launcher"]


def test_the_cost_model_says_each_phases_exposed_comm_and_host_wait():
    from topowise.costmodel.predict import predict
    from topowise.models.spec import load_model
    from topowise.run import Run
    from topowise.topology.presets import load_preset

    for strategy in ("ddp", "zero3"):
        pred = predict(Run(load_model("qwen2.5-0.5b"), (0, 1), strategy, seq_len=128), load_preset("h200-x2"))
        t = pred.time
        assert [c.phase for c in t.phases] == list(T.PHASES)
        assert sum(c.exposed_comm_s for c in t.phases) == pytest.approx(t.exposed_comm_s)
        assert sum(c.host_wait_s for c in t.phases) == pytest.approx(t.host_wait_s, abs=1e-12)
        assert sum(max(c.gpu_s, c.host_s) for c in t.phases) == pytest.approx(pred.step_time_s)
        assert "phases" not in t.to_dict()  # predict --json is unchanged
