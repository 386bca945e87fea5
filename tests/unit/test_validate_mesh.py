"""calibrate and validate over the mesh: the cases that need more processes than the machine has are left out,
a mesh case runs under the profiler, and validate pairs each traced mesh run's exposed communication per mesh
dimension with the cost model's, here on the frozen record of a 4-process CPU tp2 x pp2 run
(tests/data/records/2026-12-05-cpu/mesh-trace: its README says how it was made)."""

import json
from pathlib import Path

import pytest

from topowise.calibrate import dims
from topowise.calibrate.cases import CPU_CALIBRATION, CPU_VALIDATION, Case, calibration_plan, validation_plan
from topowise.calibrate.fit import observation_from
from topowise.calibrate.launch import rank_config
from topowise.cli.main import main
from topowise.costmodel.predict import predict
from topowise.costmodel.profile import default_profile
from topowise.models.spec import load_model
from topowise.topology import load_topology

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "records" / "2026-12-05-cpu" / "mesh-trace"
TOPO = load_topology("hgx-h100-8")


def test_mesh_cases_run_where_the_processes_divide_into_their_degrees(tmp_path):
    tp2pp2 = Case("tiny", "ddp", 1, 128, tp=2, pp=2, grad_accum=2)
    assert tp2pp2.runs_on(4) and tp2pp2.runs_on(8) and not tp2pp2.runs_on(2) and not tp2pp2.runs_on(6)
    assert any(c.has_mesh for c in CPU_CALIBRATION.cases) and any(c.has_mesh for c in CPU_VALIDATION.cases)
    for device in ("cuda", "cpu"):
        assert any(c.has_mesh for c in validation_plan(device).cases)
        assert any(c.has_mesh for c in calibration_plan(device).cases)
    # a mesh case goes to the ranks with its degrees and a trace folder of its own; the others as before
    cases = [c for c in CPU_CALIBRATION.cases if c.runs_on(4)]
    train = rank_config(CPU_CALIBRATION, "nvlink", cases, 4, tmp_path, "gloo", 60)["train"]
    mesh = [t for t in train if "mesh" in t]
    assert len(mesh) == 1 and mesh[0]["mesh"]["tp"] == 2 and mesh[0]["mesh"]["pp"] == 2
    assert mesh[0]["trace"].startswith(str(tmp_path / "traces")) and "tp2-pp2" in mesh[0]["trace"]
    assert all("trace" not in t for t in train if "mesh" not in t)


def test_a_mesh_case_keeps_its_degrees_through_the_record_and_its_label():
    record = json.loads((FIXTURE / "train.jsonl").read_text().splitlines()[0])
    case = observation_from(record).case
    assert (case.tp, case.pp, case.cp, case.grad_accum) == (2, 2, 1, 2)
    assert "tp2 pp2 ga2" in case.label
    run = case.run(load_model("tiny"), range(4))
    assert (run.tp, run.pp, run.dp) == (2, 2, 1)
    # a data-parallel record is the case it always was
    plain = {k: v for k, v in record.items() if k not in ("tp", "pp", "cp", "dp", "grad_accum", "pp_schedule")}
    assert observation_from(plain).case == Case("tiny", "ddp", 2, 64, "nvlink")


def predicted(strategy, **mesh):
    run = Case("llama3.1-8b", strategy, 1, 2048, **mesh).run(load_model("llama3.1-8b"), range(8))
    return dims.predicted_by_dim(predict(run, TOPO, default_profile()))


def test_the_predicted_exposure_is_split_over_the_dimensions_the_run_has():
    assert set(predicted("ddp", tp=2, pp=2, grad_accum=4)) == {"tp", "pp", "dp_replicate"}  # ddp replicates
    assert set(predicted("zero3", tp=2, pp=2, grad_accum=4)) == {"tp", "pp", "dp_shard"}  # zero3 shards
    assert set(predicted("zero3", tp=8)) == {"tp"}
    assert set(predicted("zero3", tp=2)) == {"tp", "dp_shard"}
    # a wider TP group moves more of each block over the wire, all of it on the block's critical path
    assert predicted("ddp", tp=8)["tp"] > predicted("ddp", tp=2, grad_accum=1)["tp"] / 4 > 0
    # a deeper pipeline of the same micro-batches idles more
    assert predicted("ddp", pp=4, grad_accum=4)["pp"] > predicted("ddp", pp=2, grad_accum=4)["pp"]
    run = Case("llama3.1-8b", "ddp", 1, 2048).run(load_model("llama3.1-8b"), range(8))
    assert dims.predicted_by_dim(predict(run, TOPO, default_profile())) == {}


def test_the_measured_exposure_is_the_most_waiting_rank_and_the_busiest_stages_idle():
    record = json.loads((FIXTURE / "train.jsonl").read_text().splitlines()[0])
    measured = dims.measured_by_dim(record)
    assert set(measured) == {"tp", "pp"}
    assert measured["tp"] == max(r["tp"] for r in record["exposed_comm_by_dim_s"].values())
    busiest = max(record["pipeline_bubble"]["stages"], key=lambda s: s["busy_s"])
    assert measured["pp"] == busiest["idle_s"]
    assert dims.measured_by_dim({k: v for k, v in record.items() if k != "exposed_comm_by_dim_s"}) == {}


def test_validate_replays_the_traced_cpu_mesh_record_dimension_by_dimension(tmp_path, capsys):
    out = tmp_path / "v.jsonl"
    assert main(["validate", "--measured", str(FIXTURE / "train.jsonl"), "--profile", str(FIXTURE / "cpu-profile.json"),
                 "--out", str(out), "--no-plot", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (case,) = doc["cases"]
    assert (case["tp"], case["pp"]) == (2, 2)
    by_dim = case["exposed_by_dim"]
    assert set(by_dim) == {"tp", "pp"}
    record = json.loads((FIXTURE / "train.jsonl").read_text().splitlines()[0])
    assert by_dim["tp"]["measured"] == pytest.approx(dims.measured_by_dim(record)["tp"])
    for d in by_dim.values():
        assert d["predicted"] > 0 and d["error"] == pytest.approx(d["predicted"] / d["measured"] - 1)
    assert set(doc["summary"]["by_dimension"]) == {"tp", "pp"}
    assert json.loads(out.read_text())["exposed_by_dim"] == by_dim
    # and printed: a row per dimension
    assert main(["validate", "--measured", str(FIXTURE / "train.jsonl"), "--profile", str(FIXTURE / "cpu-profile.json"),
                 "--no-plot"]) == 0
    text = capsys.readouterr().out
    assert "by mesh dimension" in text and "tp: 1 case" in text and "pp: 1 case" in text
