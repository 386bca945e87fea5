"""Honest uncertainty where the host sets the step: a range from the host's launch-to-launch spread,
a flag in predict, and a word in the plan's reasons when the spread can flip the order."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from topowise.cli.main import main
from topowise.costmodel.predict import predict
from topowise.costmodel.profile import Profile, default_profile
from topowise.models.spec import load_model
from topowise.planner import explain
from topowise.planner.search import plan
from topowise.run import Run
from topowise.topology import load_topology

X2 = load_topology("h200-x2")


def pred(model="qwen2.5-0.5b", strategy="zero3", seq_len=1024, profile: Profile | None = None):
    return predict(Run(load_model(model), (0, 1), strategy, seq_len=seq_len), X2, profile)


def test_a_host_bound_step_is_a_range_from_the_hosts_spread():
    p = pred()
    assert p.host_bound
    lo, hi = p.step_time_range_s
    spread = default_profile().host_spread
    assert lo < p.step_time_s < hi
    # the host moves by the spread; the GPU's work is a floor under the fast end
    assert hi - p.step_time_s <= spread * p.time.host_s + 1e-12
    assert p.step_time_s - lo <= spread * p.time.host_s + 1e-12


def test_a_gpu_bound_step_is_a_point():
    p = pred("llama3.2-1b", "ddp", 8192)
    assert not p.host_bound and p.step_time_range_s == (p.step_time_s, p.step_time_s)


def test_no_spread_no_range():
    p = pred(profile=replace(default_profile(), host_spread=0.0))
    assert p.host_bound and p.step_time_range_s == pytest.approx((p.step_time_s, p.step_time_s))


def test_predict_json_and_text_say_host_bound(capsys):
    argv = ["predict", "--model", "qwen2.5-0.5b", "--topology", "h200-x2", "--num-gpus", "2", "--strategy", "zero3",
            "--seq-len", "1024"]
    assert main([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["host_bound"] is True and data["step_time_range_s"][0] < data["step_time_s"] < \
        data["step_time_range_s"][1]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "host-bound" in text and "host_spread" in text


def test_the_plan_says_when_the_spread_flips_the_order():
    result = plan(load_model("qwen2.5-0.5b"), X2, micro_batches=(1,), seq_len=4096, top=5)
    a, b = result.plans[0], result.plans[1]
    flips = explain.within_host_spread(a.prediction, b.prediction)
    assert flips is not None and flips in result.plans[0].why
    # with no spread the order holds, and nothing is said
    assert explain.within_host_spread(replace(a.prediction, time=replace(a.prediction.time, step_range_s=())),
                                      replace(b.prediction, time=replace(b.prediction.time, step_range_s=()))) is None
    # two GPU-bound plans: nothing to say
    big = plan(load_model("llama3.2-1b"), X2, micro_batches=(1,), seq_len=8192, top=2)
    assert not any(p.prediction.host_bound for p in big.plans)
    assert explain.within_host_spread(big.plans[0].prediction, big.plans[1].prediction) is None


def test_the_plan_says_when_two_gpu_bound_candidates_are_within_the_models_error():
    """llama3.2-1b on 2x H200: zero3 within 2% of zero2, both GPU-bound; llama3.2-3b's runner-up is 4% behind."""
    close = plan(load_model("llama3.2-1b"), X2, micro_batches=(1,), seq_len=8192, top=2)
    a, b = (p.prediction for p in close.plans)
    note = explain.within_model_error(a, b)
    assert not (a.host_bound or b.host_bound) and a.tokens_per_s / b.tokens_per_s - 1 < explain.UNSETTLED_GAP
    assert note is not None and "measure both" in note and note in close.plans[0].why
    apart = plan(load_model("llama3.2-3b"), X2, micro_batches=(1,), seq_len=4096, top=2)
    a, b = (p.prediction for p in apart.plans)
    assert a.tokens_per_s / b.tokens_per_s - 1 > explain.UNSETTLED_GAP
    assert explain.within_model_error(a, b) is None and "measure both" not in apart.plans[0].why
    # host-bound candidates get the host's range instead
    host = plan(load_model("qwen2.5-0.5b"), X2, micro_batches=(1,), seq_len=4096, top=2)
    assert host.plans[0].prediction.host_bound or host.plans[1].prediction.host_bound
    assert explain.within_model_error(host.plans[0].prediction, host.plans[1].prediction) is None
