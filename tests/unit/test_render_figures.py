"""What the renderers are handed: the figures and choices computed before any formatting (the study report's,
bench comm's and monitor summarize's)."""

from types import SimpleNamespace

from topowise.cli import bench_comm, monitor
from topowise.measure.comm import CommConfig
from topowise.report import study_figures as sf
from topowise.report.breakdown import StepBreakdown
from topowise.report.study import Finding, Study


def study_of(*findings: Finding) -> Study:
    return Study(model={}, seq_len=1, micro_batch=1, num_gpus=None, profile="default", strategies=(), topologies=(),
                 cases=(), findings=findings)


def slowdown(topology: str, value: float, fits: bool) -> Finding:
    return Finding("island_slowdown", topology, f"{topology} {value}", {"slowdown": value, "fits": fits})


def test_the_worst_island_slowdown_is_among_placements_that_fit_when_some_do():
    fitting = study_of(slowdown("a", 3.0, False), slowdown("b", 1.5, True), slowdown("c", 1.2, True))
    assert sf.worst_island_slowdown(fitting).topology == "b"
    none_fit = study_of(slowdown("a", 3.0, False), slowdown("b", 1.5, False))
    assert sf.worst_island_slowdown(none_fit).topology == "a"
    assert sf.worst_island_slowdown(study_of()) is None


def near(topology: str, ddp_fits: bool, fits: bool) -> Finding:
    return Finding("fsdp_near_ddp", topology, topology, {"ddp_fits": ddp_fits, "fits": fits})


def test_fsdp_findings_split_by_whether_ddp_fits_and_count_rescued_topologies():
    study = study_of(near("a", False, True), near("a", False, False), near("b", False, False), near("c", True, True))
    assert [f.topology for f in sf.fsdp_beside_ddp(study)] == ["c"]
    assert [f.topology for f in sf.fsdp_instead_of_ddp(study)] == ["a", "a", "b"]
    assert sf.fsdp_rescue(study) == sf.Rescue(rescued=1, topologies=2)  # a is rescued, b is not
    assert sf.fsdp_rescue(study_of(near("c", True, True))) is None


def test_a_recommendation_has_a_mesh_only_with_tp_pp_or_cp():
    assert sf.has_mesh({"tp": 2}) and sf.has_mesh({"cp": 2, "tp": None})
    assert not sf.has_mesh({"dp": 8}) and not sf.has_mesh({})
    assert sf.mesh_degrees({"pp": 2, "dp": 4}) == (1, 2, 1, 4)
    assert sf.checkpointing_of({"checkpointing": "selective", "activation_checkpointing": True}) == "selective"
    assert sf.checkpointing_of({"activation_checkpointing": True}) == "full"  # a record from before the field


def phase(comm: dict, predicted_comm) -> dict:
    return {"compute_s": 1.0, "exposed_comm_s": sum(comm.values()), "exposed_comm_by_collective": comm,
            "host_wait_s": 0.0, "other_s": 0.0, "predicted_exposed_comm_s": predicted_comm,
            "predicted_host_wait_s": 0.0}


def test_step_totals_merge_collectives_across_phases_and_need_every_prediction():
    x = StepBreakdown("zero3", "ok", phases={"forward": phase({"all_gather": 1.0}, 0.5),
                                              "backward": phase({"all_gather": 2.0, "reduce_scatter": 0.5}, None)})
    totals = sf.step_totals(x)
    assert totals.exposed_comm_by_collective == {"all_gather": 3.0, "reduce_scatter": 0.5}
    assert totals.predicted_exposed_comm_s is None  # the backward phase had no prediction
    assert totals.predicted_host_wait_s == 0.0


def test_bench_comm_row_state_footer_and_algorithm():
    wrong_and_flagged = {"wrong": 2, "flagged": True}
    assert bench_comm.row_state(wrong_and_flagged) == "wrong"
    assert bench_comm.row_state({"wrong": 0, "flagged": True}) == "flagged"
    assert bench_comm.row_state({"wrong": 0, "flagged": False}) is None
    assert bench_comm.forced_algo([{"algo": "auto"}]) is None and bench_comm.forced_algo([]) is None
    assert bench_comm.forced_algo([{"algo": "Ring"}]) == "Ring"
    assert bench_comm.expected_cell({"expected_pct": None}) == "-"
    assert bench_comm.expected_cell({"expected_pct": 50.0, "expected_busbw_gbps": 370.0, "flagged": True}).endswith("!")
    records = [{"wrong": 2, "busbw_gbps": 1.0}, {"wrong": 1, "busbw_gbps": 3.0}]
    lines = bench_comm.footer_lines(records, CommConfig(out=""), {"causes": ["NVLink is off"]})
    assert lines[0] == ("# Out of bounds values : 3 FAILED", "red")
    assert lines[1][0].endswith(": 2.000 GB/s")
    assert [style for _, style in lines[2:]] == ["yellow", "yellow"] and "NVLink is off" in lines[3][0]


def test_the_step_table_names_the_slow_rank_only_where_a_rank_waited_unless_every_step():
    summary = SimpleNamespace(steps=[{"step": s} for s in range(4)],
                              spike_steps=[{"step": 1, "waited": [0]}, {"step": 3, "waited": []}])
    assert [v["step"] for v in monitor.shown_steps(summary, all_steps=False)] == [1, 3]
    assert [v["step"] for v in monitor.shown_steps(summary, all_steps=True)] == [0, 1, 2, 3]
    assert monitor.names_slow_rank({"waited": [0]}, all_steps=False)
    assert not monitor.names_slow_rank({"waited": []}, all_steps=False)
    assert not monitor.names_slow_rank(None, all_steps=False) and monitor.names_slow_rank(None, all_steps=True)
