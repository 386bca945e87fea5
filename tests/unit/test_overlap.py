"""The step's phases as timelines (costmodel/overlap.py): the laying out itself, and DDP's buckets
against the ready times measured on one H200 (research/2026-12-02-h200x1/scripts/bucket_ready.py; the records
frozen in tests/data/records/2026-12-02-h200x1/timelines)."""

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
MEASURED = ROOT / "tests" / "data" / "records" / "2026-12-02-h200x1" / "timelines"
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
    name = record["model"]  # a preset, or a config by the path it had then: the same file under tests/data/configs
    model = load_model(str(ROOT / "tests/data/configs" / Path(name).name) if name.endswith(".json") else name)
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


def cost(op: str, unit: str, seconds: float, count: int = 1, phase: str = "backward"):
    from topowise.costmodel.comm import CollectiveCost

    return CollectiveCost(op, 1, "bf16", 2, count, "NV", 1.0, seconds * count, phase, unit)


def test_fsdp_forward_shows_the_root_and_first_gathers_whole_and_hides_the_rest():
    model = load_model("llama3.2-1b")  # 16 blocks
    collectives = [cost("all_gather", "root", 0.003), cost("all_gather", "block", 0.001, 16, "forward")]
    t = overlap.fsdp_forward(model, collectives, total_s=0.060, head_s=0.012)  # 3 ms per block: gathers hide
    assert t.structural_s == pytest.approx(0.004)
    # gathers slower than a block: each block after the first waits for the difference
    collectives = [cost("all_gather", "root", 0.003), cost("all_gather", "block", 0.005, 16, "forward")]
    t = overlap.fsdp_forward(model, collectives, total_s=0.060, head_s=0.012)
    assert t.structural_s == pytest.approx(0.003 + 0.005 + 15 * (0.005 - 0.003))


def test_fsdp_backward_regathers_for_zero3_and_ends_with_the_last_reduce_scatters():
    model = load_model("llama3.2-1b")
    collectives = [cost("all_gather", "block", 0.001, 16), cost("reduce_scatter", "block", 0.001, 16),
                   cost("reduce_scatter", "root", 0.004)]
    zero2 = overlap.fsdp_backward(model, collectives, total_s=0.120, head_s=0.024, regather=False)
    zero3 = overlap.fsdp_backward(model, collectives, total_s=0.120, head_s=0.024, regather=True)
    # 6 ms per block hides a gather and a reduce-scatter; block 0's and the root's come after the compute
    assert zero2.structural_s == pytest.approx(0.001 + 0.004)
    assert zero3.structural_s == pytest.approx(0.001 + 0.004)
    assert zero3.comm_s == pytest.approx(zero2.comm_s + 0.016)
    # comm-bound (gather + reduce-scatter 8 ms against 6 ms of compute per block): the backward stretches
    slow = [cost("all_gather", "block", 0.004, 16), cost("reduce_scatter", "block", 0.004, 16),
            cost("reduce_scatter", "root", 0.004)]
    assert overlap.fsdp_backward(model, slow, 0.120, 0.024, regather=True).structural_s > 15 * 0.002


def test_ddp_backward_sends_its_buckets_after_they_are_made():
    tied, untied = load_model("llama3.2-1b"), load_model(str(ROOT / "tests" / "data" / "configs" / "llama-0.95b.json"))
    for model in (tied, untied):
        buckets = overlap.ddp_segments(model, 8192, 0.1, 0.02)[1]
        collectives = [cost("all_reduce", "bucket", 0.05 / (len(buckets) - 1), len(buckets) - 1),
                       cost("all_reduce", "bucket", 0.01, 1, "backward-last")]
        t = overlap.ddp_backward(model, 8192, collectives, total_s=0.1, head_s=0.02)
        # the last bucket (the embedding) is made by the step's last op: it is exposed whole, and so is
        # the bucket closed by block 0's last tensors; the rest (50 ms in all) fits in the 80 ms of blocks
        largest = max(0.05 * b / sum(b for b, _ in buckets[:-1]) for b, _ in buckets[:-1])
        assert 0.01 < t.structural_s <= 0.01 + largest
        assert t.structural_s + t.beside_s == pytest.approx(t.comm_s)  # one lane: what is not beside is after
