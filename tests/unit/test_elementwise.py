"""The blocks' elementwise kernels, counted (costmodel/elementwise.py): the counts by hand, the counts against the
kernels timed on one H200, Qwen3's q/k norms, and profiles of the earlier saved-bytes form read as they were fitted."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from topowise import hardware
from topowise.costmodel.elementwise import QK_NORM_PEAK_BYTES, block_elementwise_bytes, qk_norm_bytes
from topowise.costmodel.memory import activation_bytes_per_token_per_layer
from topowise.costmodel.predict import predict
from topowise.costmodel.profile import Profile, default_profile
from topowise.costmodel.step import block_elementwise
from topowise.errors import UsageError
from topowise.models.spec import load_model
from topowise.run import Run
from topowise.topology import load_topology

ROOT = Path(__file__).resolve().parents[2]
QWEN3 = str(ROOT / "tests" / "data" / "configs" / "qwen3-0.6b.json")


def test_llama_blocks_counted_by_hand():
    m = load_model("llama3.2-1b")  # h 2048, I 8192, q 2048, kv 512
    h, i, q, kv = 2048, 8192, 2048, 512
    # autocast: norms 2 x 8h, casts 3 x 6h, residual adds 2 x 10h; rotary 20 (q + kv), v copied 4 kv, SwiGLU 10 I
    assert block_elementwise_bytes(m, autocast=True) == (
        16 * h + 18 * h + 20 * h + 20 * (q + kv) + 4 * kv + 10 * i,
        # norms' backward 2 x 20h, the casts back 18h, the residual grads cast 12h, two joins 24h, gate and up's
        # input grads 12h; rotary 20 (q + kv), qkv's grad joined 4 (q + 2 kv); SwiGLU's backward 18 I
        40 * h + 18 * h + 12 * h + 24 * h + 12 * h + 20 * (q + kv) + 4 * (q + 2 * kv) + 18 * i)
    # bf16 (FSDP2): no casts, 2-byte residual stream
    assert block_elementwise_bytes(m, autocast=False) == (
        8 * h + 12 * h + 20 * (q + kv) + 4 * kv + 10 * i,
        20 * h + 12 * h + 6 * h + 20 * (q + kv) + 4 * (q + 2 * kv) + 18 * i)
    assert block_elementwise_bytes(m, True) == (245760.0, 428032.0)


def test_qkv_biases_add_their_gradients_reduction():
    qwen = load_model("qwen2.5-0.5b")
    no_bias = replace(qwen, qkv_bias=False)
    q, kv = qwen.num_heads * qwen.head_dim, qwen.num_kv_heads * qwen.head_dim
    (f1, b1), (f0, b0) = block_elementwise_bytes(qwen, True), block_elementwise_bytes(no_bias, True)
    assert f1 == f0 and b1 - b0 == 2 * (q + 2 * kv)


def test_compiled_blocks_move_less_than_eager():
    """Inductor fuses rotary's three passes and SwiGLU's two into one each; GPT-2's block has less to fuse."""
    for name in ("llama3.2-1b", "qwen2.5-0.5b", "gpt2"):
        m = load_model(name)
        for autocast in (True, False):
            fused = sum(block_elementwise_bytes(m, autocast, compiled=True))
            eager = sum(block_elementwise_bytes(m, autocast))
            assert fused < (0.8 if name == "gpt2" else 0.6) * eager


def test_qwen3s_norms_at_what_they_took_alone():
    qwen3 = load_model(QWEN3)
    elements = (qwen3.num_heads + qwen3.num_kv_heads) * qwen3.head_dim  # 24 heads of 128
    for autocast in (True, False):
        fwd, bwd = qk_norm_bytes(qwen3, autocast, hbm_efficiency=0.5)
        assert fwd + bwd == pytest.approx(QK_NORM_PEAK_BYTES[autocast][0] * 0.5 * elements)
        assert fwd / (fwd + bwd) == pytest.approx(QK_NORM_PEAK_BYTES[autocast][1])
    assert qk_norm_bytes(load_model("llama3.2-1b"), True, 0.7) == (0.0, 0.0)
    # in a step: eager pays them, compiled does not (Inductor fuses them into the counted kernels)
    topo = load_topology("h200-x2")
    profile = default_profile()
    eager = Run(qwen3, (0,), "ddp", micro_batch=4, seq_len=4096)
    fwd, bwd = block_elementwise(eager, profile, autocast=True)
    counted = block_elementwise_bytes(qwen3, True)
    per_step = eager.tokens * qwen3.num_layers
    norms = qk_norm_bytes(qwen3, True, profile.hbm_efficiency)
    assert fwd == pytest.approx((profile.activation_traffic * counted[0] + norms[0]) * per_step)
    assert bwd == pytest.approx((profile.activation_traffic * counted[1] + norms[1]) * per_step)
    compiled = replace(eager, compile=True)
    assert sum(block_elementwise(compiled, profile, True)) == pytest.approx(
        profile.compiled_activation_traffic * sum(block_elementwise_bytes(qwen3, True, compiled=True)) * per_step)
    assert predict(eager, topo).time.memory_bound_s > predict(replace(eager, model=replace(qwen3, qk_norm=False)),
                                                              topo).time.memory_bound_s


def test_a_profile_fitted_per_saved_byte_is_read_so():
    legacy = Profile.from_dict({"format": "topowise.profile", "compute_efficiency": 0.76, "activation_traffic": 16.86})
    assert legacy.elementwise_form == "saved-bytes"
    assert Profile.from_dict(default_profile().to_dict()).elementwise_form == "kernels"
    assert Profile.from_dict({"compute_efficiency": 0.7}).elementwise_form == "kernels"  # no traffic of its own
    with pytest.raises(UsageError, match="elementwise_form must be one of"):
        Profile.from_dict({"elementwise_form": "guess"})
    run = Run(load_model("llama3.2-1b"), (0,), "ddp", micro_batch=1, seq_len=8192)
    fwd, bwd = block_elementwise(run, legacy, autocast=True)
    saved = 16.86 * activation_bytes_per_token_per_layer(run.model, autocast=True) * 8192 * run.model.num_layers
    assert (fwd, bwd) == pytest.approx((saved / 2, saved / 2))
    hbm = hardware.hbm_bytes_per_s("NVIDIA H200") * legacy.hbm_efficiency
    assert fwd / hbm > 3 * block_elementwise(run, default_profile(), True)[0] / hbm  # the forms differ


def test_the_readme_figures_of_the_counted_term_hold():
    """README: "today, with the attention by its thread blocks, 125 records at 1.57%"; the 25 compiled ones
    "today 1.15%, 5.8%": every bench train record of 2026-12-02/03 above 128 tokens under PyTorch's engine, as frozen
    in tests/data/records, replayed through the default profile. Fourteen of them are the runs the rates were fitted
    from (design/run22/fit, timelines/run8/compiled); the README says so and gives the figures without them."""
    from replay import RESULTS, finished

    from topowise.calibrate.fit import observation_from, predictor

    predict_one = predictor(load_topology("h200-x2"))
    errors = {False: [], True: []}
    for r in finished(sorted(RESULTS.glob("2026-12-0[23]-h200x1/**/*.jsonl"))):
        if r["micro_batch"] * r["seq_len"] <= 128 or r.get("engine", "pytorch") != "pytorch":
            continue
        p = predict_one(default_profile(), observation_from(r))
        if p.time.host_wait_s == 0:
            errors[bool(r.get("compile"))].append(p.step_time_s / r["step_time_s"] - 1)
    both = errors[False] + errors[True]
    assert len(both) == 125 and round(100 * sum(map(abs, both)) / len(both), 2) <= 1.57
    compiled = errors[True]
    assert len(compiled) == 25 and round(100 * sum(map(abs, compiled)) / 25, 2) <= 1.15
    assert round(100 * max(map(abs, compiled)), 1) <= 5.8
