"""The step's phases as timelines (costmodel/overlap.py): the laying out itself, and DDP's buckets
against the ready times measured on one H200 (benchmarks/bucket_ready.py, docs/results/2026-12-02-h200x1/
session2)."""

import json
from pathlib import Path

import pytest

from topowise import hardware
from topowise.costmodel import overlap
from topowise.costmodel.predict import predict
from topowise.costmodel.profile import default_profile
from topowise.costmodel.step import exposed_time, head_seconds, peak_flops
from topowise.models.spec import load_model
from topowise.run import Run
from topowise.topology import load_topology

ROOT = Path(__file__).resolve().parents[2]
MEASURED = ROOT / "docs" / "results" / "2026-12-02-h200x1" / "session2"
T = overlap.Transfer


@pytest.mark.parametrize("comm,compute,e", [(1.0, 2.0, 0.8), (3.0, 2.0, 0.8), (2.0, 2.0, 0.5), (0.5, 4.0, 1.0)])
def test_transfers_free_from_the_start_give_the_closed_form(comm, compute, e):
    segments = [compute / 4] * 4
    transfers = [T(comm / 2, overlap.START), T(comm / 2, overlap.START)]
    assert overlap.run_phase(segments, transfers).exposed(e) == pytest.approx(exposed_time(comm, compute, e))


def test_a_transfer_waits_for_its_data_and_for_the_one_before_it():
    # 1 s of compute in two halves; a 0.4 s transfer issued at the end of the first half, then a 0.4 s one at
    # the end: the first runs beside the second half, the second after it
    t = overlap.run_phase([0.5, 0.5], [T(0.4, 0), T(0.4, 1)])
    assert t.end_s == pytest.approx(1.4) and t.structural_s == pytest.approx(0.4)
    assert t.beside_s == pytest.approx(0.4)
    # the same two issued together at the end of the first half: one lane runs them one after the other
    t = overlap.run_phase([0.5, 0.5], [T(0.4, 0), T(0.4, 0)])
    assert t.end_s == pytest.approx(1.3) and t.beside_s == pytest.approx(0.5)


def test_a_prefetch_not_done_in_time_holds_its_segment_back():
    # the second block's all-gather (0.3 s) is issued when the first (0.1 s) starts: 0.2 s of stall
    t = overlap.run_phase([0.1, 0.1], [T(0.3, overlap.START, needed_by=1)])
    assert t.end_s == pytest.approx(0.4) and t.structural_s == pytest.approx(0.2)
    assert t.exposed(1.0) == pytest.approx(0.2) and t.exposed(0.0) == pytest.approx(0.3)


def test_a_second_lane_runs_beside_the_first_but_after_what_it_follows():
    one = overlap.run_phase([1.0], [T(0.5, 0), T(0.5, 0, lane="replica", follows=0)])
    assert one.end_s == pytest.approx(2.0)  # the replica all-reduce sends the reduce-scatter's output
    two = overlap.run_phase([1.0], [T(0.5, 0), T(0.5, 0, lane="replica")])
    assert two.end_s == pytest.approx(1.5)


def test_fsdp_blocks_alike_need_their_first_gather_and_the_rest_hides():
    model = load_model("llama3.2-1b")
    topo = load_topology("h200-x2")
    run = Run(model, (0, 1), "zero3", micro_batch=1, seq_len=8192)
    p = predict(run, topo)
    gather = next(c for c in p.time.collectives if c.op == "all_gather" and c.unit == "root")
    # NVLink at 8192 tokens: every block's gather hides behind the block before it; the root's and the
    # first block's come before any compute, so the forward shows at least those two whole
    forward = next(ph for ph in p.time.phases if ph.phase == "forward")
    block = next(c for c in p.time.collectives if c.op == "all_gather" and c.unit == "block")
    assert forward.exposed_comm_s >= gather.time_s + block.time_s / block.count


def measured_buckets() -> list[dict]:
    records = []
    for path in sorted(MEASURED.glob("run*/buckets/bucket_ready.jsonl")):
        records += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    assert len(records) >= 7
    return [r for r in records if r["status"] == "ok"]


@pytest.mark.parametrize("record", measured_buckets(), ids=lambda r: f"{Path(r['model']).stem}-{r['seq_len']}")
def test_ddp_buckets_are_as_measured_and_ready_when_measured(record):
    model = load_model(str(ROOT / record["model"]) if record["model"].endswith(".json") else record["model"])
    profile, topo = default_profile(), load_topology("h200-x2")
    run = Run(model, (0,), "ddp", micro_batch=record["micro_batch"], seq_len=record["seq_len"])
    backward = next(ph for ph in predict(run, topo, profile).time.phases if ph.phase == "backward").gpu_s
    rate = peak_flops(topo, profile) * profile.compute_efficiency
    hbm = hardware.hbm_bytes_per_s(topo.gpu_spec.name) * profile.hbm_efficiency
    head = head_seconds(model, run.tokens, rate, hbm)[1]
    segments, buckets = overlap.ddp_segments(model, run.seq_len, backward, head)
    if record["bucket_cap_mb"] is None:  # DDP's default buckets, as bench train builds them since
        assert [b for b, _ in buckets] == [b["bytes"] for b in record["buckets"]]
    assert len(buckets) == len(record["buckets"])
    predicted = [t / backward for t in overlap.ready_times(segments, buckets)]
    measured = [b["ready_fraction"] for b in record["buckets"]]
    # measured within 0.01-0.05 of the backward on every model (the head is predicted 20-25% long: the
    # first bucket of a tied 128k-152k vocabulary comes at 0.16-0.21 of the backward, predicted 0.20-0.26)
    assert max(abs(p - m) for p, m in zip(predicted, measured)) < 0.06
    # an untied output layer's gradient is a bucket of its own, ready early; a tied one's is the last
    for first in (predicted[0], measured[0]):
        assert first < 0.12 if not model.tied_embeddings else first > 0.15
