"""A mesh run's trace (topowise.measure.timeline): exposed communication by mesh dimension, on hand-made CPU
(gloo) and GPU (NCCL) traces whose answer is known, and the pipeline's idle time per stage beside the
schedule's replay."""

import pytest

from topowise.measure import timeline as T

MAIN, TP_A, TP_B, DP, DP_B, STRAY = 1, 11, 12, 21, 22, 99


def span(cat, name, ts, dur, tid=MAIN, **args):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 0, "tid": tid, "args": args}


def us(x):
    return pytest.approx(x / 1e6, abs=1e-12)


def cpu_trace(tp_b_probed=True, stray=True):
    """Probes first: tp's two worker threads each run one of the tp probe's all-reduces, dp_shard's two threads
    the dp_shard probe's. Step 0 (1000-2000, microseconds) on the main thread: a matmul 1000-1300; a DTensor
    redistribution 1300-1500 that issues an all-gather and waits in it (1310-1500); a matmul 1500-1700.
    tp's second thread runs the all-gather 1305-1480 (the main thread only waits: all exposed); dp_shard's
    thread an all-reduce 1100-1250 (behind the first matmul: hidden) and one 1600-1800 (100 behind the
    second matmul, 100 exposed); a receive on the main thread 1800-1900 (the pipeline's: exposed); an
    all-reduce on a thread no probe ran 1950-1960 (exposed, dimension unknown)."""
    return [
        span("user_annotation", "topowise.probe.tp", 0, 100),
        span("user_annotation", "gloo:all_reduce", 10, 40, TP_A),
        span("user_annotation", "gloo:all_reduce", 12, 48, TP_B if tp_b_probed else TP_A),
        span("user_annotation", "topowise.probe.dp_shard", 100, 100),
        span("user_annotation", "gloo:all_reduce", 110, 40, DP),
        span("user_annotation", "gloo:all_reduce", 112, 40, DP_B),
        span("user_annotation", "topowise.step.0", 1000, 1000),
        span("user_annotation", "topowise.forward", 1000, 700),
        span("user_annotation", "topowise.backward", 1700, 200),
        span("user_annotation", "topowise.optimizer", 1900, 100),
        span("cpu_op", "aten::mm", 1000, 300),
        span("cpu_op", "Redistribute", 1300, 200),
        span("cpu_op", "c10d::allgather_into_tensor_coalesced_", 1300, 10),
        span("cpu_op", "_c10d_functional::wait_tensor", 1310, 190),
        span("cpu_op", "aten::mm", 1500, 200),
        span("user_annotation", "gloo:all_gather", 1305, 175, TP_B),
        span("user_annotation", "gloo:all_reduce", 1100, 150, DP),
        span("user_annotation", "gloo:all_reduce", 1600, 200, DP),
        span("user_annotation", "gloo:recv", 1800, 100),
        span("cpu_op", "c10d::recv_", 1800, 100),
    ] + ([span("user_annotation", "gloo:all_reduce", 1950, 10, STRAY)] if stray else [])


def test_a_gloo_trace_names_each_exposed_collective_by_the_dimension_its_thread_probed():
    (step,) = T.read_trace(cpu_trace(), process_groups={}, pipelined=True).steps
    assert step.by_dim == {"tp": {"all_gather": us(175)}, "dp_shard": {"all_reduce": us(100)},
                           "pp": {"recv": us(100)}, "unknown": {"all_reduce": us(10)}}
    assert step.idle_s == us(100)  # the stage's wait on its neighbour
    d = step.to_dict()
    assert d["exposed_comm_by_dim_s"]["tp"] == us(175)


def test_a_groups_thread_the_probes_missed_is_its_other_thread():
    # both tp probes ran on one thread: the one worker thread no probe ran is tp's other
    (step,) = T.read_trace(cpu_trace(tp_b_probed=False, stray=False), process_groups={}).steps
    assert step.by_dim["tp"] == {"all_gather": us(175)} and "unknown" not in step.by_dim
    # with a second thread no probe ran, which is tp's is not known
    (step,) = T.read_trace(cpu_trace(tp_b_probed=False), process_groups={}).steps
    assert "tp" not in step.by_dim and step.by_dim["unknown"] == {"all_gather": us(175), "all_reduce": us(10)}


def test_a_run_without_a_mesh_is_read_as_before():
    (step,) = T.read_trace(cpu_trace()).steps
    assert step.by_dim == {} and step.idle_s is None
    assert "exposed_comm_by_dim" not in step.to_dict()


def gpu_trace(groups_desc):
    """One step (0-1000): kernel A 20-100; a reduce-scatter 30-90 hidden behind it, issued in a call on the
    data-parallel group; an all-gather 310-500 exposed (the GPU waits for it: kernel C runs 500-600), issued
    on the tensor-parallel group; an all-reduce 450-550, hidden, issued outside any known group."""
    def launch(ts, corr):
        return span("cuda_runtime", "cudaLaunchKernel", ts, 1, correlation=corr)

    def kernel(name, ts, dur, corr):
        return span("kernel", name, ts, dur, tid=7, correlation=corr)

    return [
        span("user_annotation", "topowise.step.0", 0, 700),
        span("user_annotation", "topowise.forward", 0, 300),
        span("user_annotation", "topowise.backward", 300, 100),
        span("user_annotation", "topowise.optimizer", 400, 20),
        launch(10, 1), kernel("gemm_A", 20, 80, 1),
        span("cpu_op", "record_param_comms", 24, 3, **{"Process Group Name": "7",
                                                         "Process Group Description": groups_desc[0]}),
        launch(25, 6), kernel("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL", 30, 60, 6),
        launch(200, 2), kernel("gemm_B", 205, 95, 2),
        span("cpu_op", "record_param_comms", 302, 2, **{"Process Group Name": "9",
                                                          "Process Group Description": groups_desc[1]}),
        launch(303, 3), kernel("ncclDevKernel_AllGather_RING_LL", 310, 190, 3),
        launch(305, 4), kernel("gemm_C", 500, 100, 4),
        launch(306, 7), kernel("ncclKernel_AllReduce_RING_LL_Sum_float", 450, 100, 7),
        launch(400, 5), kernel("adam_D", 600, 50, 5),
    ]


def test_an_nccl_kernel_takes_the_dimension_of_the_group_its_launch_was_issued_on():
    # by the run's map of group names, or by DeviceMesh's description of the group
    for groups, desc in (({"7": "dp_shard", "9": "tp"}, ("", "")), ({}, ("mesh_dp_shard", "mesh_tp"))):
        (step,) = T.read_trace(gpu_trace(desc), process_groups=groups, pipelined=True).steps
        assert step.by_dim == {"tp": {"all_gather": us(190)}}  # the others are hidden
        # the step's window (20-650) less compute (A, B, C, D: 80 + 95 + 100 + 50) less tp's exposed 190
        assert step.idle_s == us(630 - 325 - 190)
    kernels = T.kernels(gpu_trace(("", "")), process_groups={"7": "dp_shard"})
    assert [k.dim for k in kernels if k.collective] == ["dp_shard", None, None]


def median(rank_stage_idle):
    return {str(rank): {"wall_s": 1.0, "idle_s": idle} for rank, (_, idle) in rank_stage_idle.items()}


def test_the_bubble_per_stage_is_measured_beside_the_schedules_replay():
    # two ranks per stage (tp 2): stage 0's idle is the median of its two ranks'
    ranks = {0: (0, 0.2), 1: (0, 0.4), 2: (1, 0.3), 3: (1, 0.3)}
    record = {"mesh": {"pp": 2}, "grad_accum": 4, "layer_split": [2, 2], "pp_schedule": "1f1b",
              "ranks": [{"rank": r, "mesh": {"pp": stage}} for r, (stage, _) in ranks.items()]}
    bubble = T.pipeline_bubble(median(ranks), record)
    assert [(s["stage"], s["ranks"]) for s in bubble["stages"]] == [(0, [0, 1]), (1, [2, 3])]
    assert [s["idle_s"] for s in bubble["stages"]] == [pytest.approx(0.3), pytest.approx(0.3)]
    # equal busy stages: the replay's idle share is the closed form's, (p - 1) / (m + p - 1) = 1/5
    assert bubble["closed_form_bubble_fraction"] == pytest.approx(1 / 5)
    for s in bubble["stages"]:
        assert s["predicted_idle_fraction"] == pytest.approx(1 / 5)
    # a stage that ran busier sets the pace: the other one waits longer in the replay
    uneven = T.pipeline_bubble(median({0: (0, 0.1), 1: (1, 0.5)}),
                               dict(record, ranks=[{"rank": 0, "mesh": {"pp": 0}}, {"rank": 1, "mesh": {"pp": 1}}]))
    assert uneven["stages"][1]["predicted_idle_s"] > uneven["stages"][0]["predicted_idle_s"]
    # a stage without a reading: no comparison
    assert T.pipeline_bubble(median({0: (0, 0.1)}), dict(record, ranks=[{"rank": 0, "mesh": {"pp": 0}}])) is None


def test_the_printed_breakdown_has_a_row_per_rank_by_dimension_and_the_bubble():
    doc = {"strategy": "ddp", "mode": "host_only",
           "median_step": {"rank": 0, "step": 1, "wall_s": 0.2, "pieces": {"host": 0.2},
                           "phases": {p: {"pieces": {"host": 0.1}, "wall_s": 0.1} for p in T.PHASES}},
           "ranks": {"0": {"median_step": {"wall_s": 0.2}}, "1": {"median_step": {"wall_s": 0.1}}},
           "exposed_comm_by_dim_s": {"0": {"pp": 0.05, "tp": 0.01}, "1": {"tp": 0.02}}}
    lines = T.summary_lines(doc)
    head = next(i for i, line in enumerate(lines) if "by mesh dimension" in line)
    assert lines[head + 1].split() == ["rank", "tp", "pp", "step"]
    assert lines[head + 2].split() == ["0", "10.00", "50.00", "200.00"]
    assert lines[head + 3].split() == ["1", "20.00", "0.00", "100.00"]
