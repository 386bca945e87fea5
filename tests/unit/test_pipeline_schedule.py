"""Pipeline schedules against hand-worked timelines and against the dependency replay.

Hand-worked 1F1B, p = 4, m = 8, forward 1, backward 2 per stage (Narayanan et al. SC'21, Fig. 4 top):
rank 3 (last) starts at t = 3 and then alternates F, B with no gap: 8 x 3 = 24, so it ends at 27.
The last backward then walks back through ranks 2, 1, 0 at 2 each: rank 0 ends at 27 + 6 = 33.
Step 33 = (m + p - 1)(f + b) = 11 x 3; every rank works 24, so the bubble is 9 = (p - 1)(f + b), which is
(p - 1)/(m + p - 1) = 3/11 of the step and (p - 1)/m = 3/8 of the ideal 24.

Hand-worked interleaved 1F1B, p = 2, v = 2, m = 2, each chunk forward 1, backward 2 (SC'21 Fig. 4 bottom;
m = p, so Megatron runs every forward first). Stages s0, s2 on rank 0, s1, s3 on rank 1:
  rank 0: F0s0 0-1, F1s0 1-2, F0s2 2-3, F1s2 3-4, idle 4-7, B0s2 7-9, B1s2 9-11, B0s0 11-13, B1s0 13-15
  rank 1: idle 0-1, F0s1 1-2, F1s1 2-3, F0s3 3-4, F1s3 4-5, B0s3 5-7, B1s3 7-9, B0s1 9-11, B1s1 11-13, idle 13-15
Step 15 = (m v + p - 1)(f + b) = 5 x 3; each rank idles 3 = (p - 1)(f + b), (p - 1)/(v m) = 1/4 of its
12 of work. The same layers as 1F1B (one stage of f 2, b 4 per rank) take (m + p - 1) x 6 = 18: the
bubble halves with v = 2.
"""

from __future__ import annotations

import itertools
import random

import pytest

from topowise.costmodel.pipeline import (
    SCHEDULES,
    in_flight,
    peak_activation_layers,
    pipeline_time,
    schedule_order,
    simulate,
    split_layers,
)
from topowise.errors import UsageError


def test_hand_worked_1f1b_p4_m8():
    sim = simulate("1f1b", pp=4, microbatches=8, forward_s=1, backward_s=2)
    assert sim.step_s == 33
    last = sim.timelines[3]
    assert last.busy[0].start_s == 3 and last.busy[-1].end_s == 27
    assert [t.idle_s for t in sim.timelines] == [9, 9, 9, 9]
    closed = pipeline_time("1f1b", 4, 8, forward_s=1, backward_s=2)
    assert closed.method == "closed form" and closed.bubble_s == 9 and closed.bubble_fraction == pytest.approx(3 / 11)
    assert closed.bubble_s / closed.compute_s == pytest.approx(3 / 8)


def test_hand_worked_interleaved_p2_v2_m2():
    sim = simulate("interleaved-1f1b", pp=2, microbatches=2, virtual_stages=2, forward_s=1, backward_s=2)
    assert sim.step_s == 15
    rank0 = [(i.op.kind, i.op.microbatch, i.op.stage, i.start_s) for i in sim.timelines[0].busy[:4]]
    assert rank0 == [("F", 0, 0, 0), ("F", 1, 0, 1), ("F", 0, 2, 2), ("F", 1, 2, 3)]
    closed = pipeline_time("interleaved-1f1b", 2, 2, 2, forward_s=1, backward_s=2)
    assert closed.bubble_s / closed.compute_s == pytest.approx((2 - 1) / (2 * 2))
    assert simulate("1f1b", pp=2, microbatches=2, forward_s=2, backward_s=4).step_s == 18


def test_zb_h1_bubble_is_a_third_of_1f1b_with_equal_passes():
    # Qi et al. 2023 section 3.1: with T_F = T_B = T_W the ZB-H1 bubble is 1/3 of 1F1B's
    for p, m in [(4, 8), (8, 24), (3, 3)]:
        one = simulate("1f1b", p, m, forward_s=1, backward_s=1, weight_s=1)
        zb = simulate("zb-h1", p, m, forward_s=1, backward_s=1, weight_s=1)
        assert one.step_s - 3 * m == 3 * (zb.step_s - 3 * m) == 3 * (p - 1)


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_closed_form_equals_replay_with_equal_stages(schedule):
    for p, v, k in itertools.product(range(1, 7), (1, 2, 3), range(1, 5)):
        if v > 1 and schedule != "interleaved-1f1b":
            continue
        m = p * k if schedule == "interleaved-1f1b" else p + k - 1
        for f, b, w in [(1, 2, 0), (3, 5, 0), (2, 2, 1), (4, 3, 3)]:
            sim = simulate(schedule, p, m, v, f, b, w)
            closed = pipeline_time(schedule, p, m, v, f, b, w)
            assert closed.method == "closed form"
            assert closed.step_s == pytest.approx(sim.step_s), (schedule, p, m, v, f, b, w)
            assert closed.compute_s == pytest.approx(max(t.busy_s for t in sim.timelines))


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_uneven_stages_are_replayed_and_bounded_below(schedule):
    rng = random.Random(42)
    for _ in range(300):
        p = rng.randint(1, 6)
        v = rng.randint(1, 3) if schedule == "interleaved-1f1b" else 1
        m = p * rng.randint(1, 4) if schedule == "interleaved-1f1b" else rng.randint(1, 12)
        n = p * v
        f = [rng.randint(1, 9) for _ in range(n)]
        b = [rng.randint(1, 9) for _ in range(n)]
        w = [rng.randint(0, 3) for _ in range(n)]
        sim = simulate(schedule, p, m, v, f, b, w)
        timed = pipeline_time(schedule, p, m, v, f, b, w)
        assert timed.step_s == sim.step_s
        # no schedule beats its busiest rank's own work, nor one micro-batch's trip down and back
        assert sim.step_s >= max(t.busy_s for t in sim.timelines)
        assert sim.step_s >= sum(f) + sum(b) + min(w)


def test_pace_formula_is_not_exact_for_uneven_stages():
    # why uneven stages are replayed: sum(c) + (m - 1) max(c) ("the slowest stage sets the pace") overprices a
    # heavy first stage, whose warm-up forwards hide part of the wait for its first backward
    f, b = [3, 1], [6, 2]
    pace = sum(f) + sum(b) + (2 - 1) * max(x + y for x, y in zip(f, b))
    assert simulate("1f1b", 2, 2, 1, f, b).step_s < pace


def test_slowest_stage_sets_the_pace():
    # a last stage twice as slow (the output layer and loss): the step grows by m x the extra, not p x
    even = simulate("1f1b", 4, 32, forward_s=[1, 1, 1, 1], backward_s=[2, 2, 2, 2]).step_s
    slow = simulate("1f1b", 4, 32, forward_s=[1, 1, 1, 2], backward_s=[2, 2, 2, 4]).step_s
    assert slow - even >= 31 * 3


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_in_flight_is_what_the_order_holds(schedule):
    for p, v, m in itertools.product(range(1, 7), (1, 2, 3), range(1, 15)):
        if (v > 1 and schedule != "interleaved-1f1b") or (schedule == "interleaved-1f1b" and m % p):
            continue
        for r in range(p):
            alive = peak = 0
            for op in schedule_order(schedule, p, m, v, r):
                alive += op.kind == "F"
                alive -= op.kind == ("W" if schedule == "zb-h1" else "B")
                peak = max(peak, alive)
            assert peak == in_flight(schedule, p, m, v, r)


def test_in_flight_counts_from_the_papers():
    # 1F1B: stage i of p holds min(p - i, m) (SC'21 2.2.1): the first stage holds the most
    assert [in_flight("1f1b", 4, 8, 1, r) for r in range(4)] == [4, 3, 2, 1]
    assert [in_flight("1f1b", 4, 2, 1, r) for r in range(4)] == [2, 2, 2, 1]
    # interleaved: rank 0 holds L(1 + (p - 1)/(p v)) layers' worth (Korthikanti et al. 2022, 4.2.3):
    # p = 4, v = 2, 8 layers per chunk (L = 64): 64 x (1 + 3/8) = 88 layers = 11 chunks
    assert in_flight("interleaved-1f1b", 4, 8, 2, 0) * 8 == 64 * (1 + 3 / 8)
    assert [in_flight("zb-h1", 4, 8, 1, r) for r in range(4)] == [4, 4, 4, 4]


def test_peak_activation_layers_with_uneven_split():
    split = split_layers(30, 4)  # torchtitan: 32 layer-equivalents -> 8 each, embedding/output on the ends
    assert split.layers == (7, 8, 8, 7)
    assert peak_activation_layers("1f1b", split, 8, 0) == 4 * 7
    assert peak_activation_layers("1f1b", split, 8, 1) == 3 * 8


def test_split_layers_rules():
    assert split_layers(32, 4).layers == (8, 9, 8, 7)  # torchtitan's generate_llm_fqn_per_model_part(4, 32)
    assert split_layers(32, 4, even=True).layers == (8, 8, 8, 8)
    assert split_layers(30, 4, first=6, last=6).layers == (6, 9, 9, 6)
    s = split_layers(24, 4, 2, even=True)
    assert s.layers == (3,) * 8 and s.stages_of(1) == (1, 5) and s.layers_on_rank(1) == 6
    assert sum(split_layers(126, 8, 2).layers) == 126


def test_validation_messages_carry_the_arithmetic():
    with pytest.raises(UsageError, match=r"24 layers do not split over pp 5 x v 2 = 10 chunks evenly"):
        split_layers(24, 5, 2, even=True)
    with pytest.raises(UsageError, match=r"31 - 12 = 19 layers do not split over the 2 middle chunks of pp 4 x v 1"):
        split_layers(31, 4, first=6, last=6)
    with pytest.raises(UsageError, match=r"10 micro-batches over pp 4 leave 2; use 8 or 12"):
        pipeline_time("interleaved-1f1b", 4, 10, 2)
    with pytest.raises(UsageError, match=r"virtual stages 2 need interleaved-1f1b"):
        simulate("1f1b", 4, 8, 2)
    with pytest.raises(UsageError, match=r"unknown pipeline schedule"):
        in_flight("gpipe", 4, 8)
    with pytest.raises(UsageError, match=r"3 stage times for 4 stages"):
        simulate("1f1b", 4, 8, forward_s=[1, 1, 1])


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_sends_between_ranks(schedule):
    # one micro-batch walks down and back: every stage's work plus 2(p - 1) crossings of the boundary
    sim = simulate(schedule, 4, 1 if schedule != "interleaved-1f1b" else 4, 1, 1.0, 2.0, 0.0, send_s=0.25)
    if schedule != "interleaved-1f1b":
        assert sim.step_s == 4 * 3 + 6 * 0.25
    timed = pipeline_time(schedule, 4, 8, 1, 1.0, 2.0, 0.5 if schedule == "zb-h1" else 0.0, send_s=0.25)
    free = pipeline_time(schedule, 4, 8, 1, 1.0, 2.0, 0.5 if schedule == "zb-h1" else 0.0)
    assert timed.method == "replay" and timed.step_s > free.step_s
    assert pipeline_time(schedule, 1, 8, 1, 1.0, 2.0, send_s=5.0).step_s == 8 * 3  # one rank sends nothing
