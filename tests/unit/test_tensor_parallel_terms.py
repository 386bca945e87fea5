"""TP, SP, CP and PP terms per block against published figures and their own limits."""

from __future__ import annotations

import pytest

from topowise.costmodel.pipeline import in_flight
from topowise.costmodel.tensor_parallel import (
    cp_ring_exchanges,
    gpt_activation_terms,
    llama_activation_terms,
    pp_send_bytes,
    pp_sends,
    tp_block_collectives,
    validate_shapes,
)
from topowise.errors import UsageError

GIB = 2**30
# Korthikanti et al. 2022 Table 3 (s = 2048, b = 1 except 22B's 4, t = 8) and Figure 1's activation bars
# (GiB per GPU), as calculon-ai/calculon transcribes them in calculon/llm/validation.py (seqsel_fig1):
# "none" is TP without SP or recompute, "seqsel" TP + SP + selective recompute.
FIG1 = {
    "22B": {"a": 64, "h": 6144, "layers": 48, "p": 1, "b": 4, "none": 59.25, "seqsel": 9.5625},
    "1T": {"a": 160, "h": 25600, "layers": 128, "p": 64, "b": 1, "none": 131.25, "seqsel": 26.5625},
}


@pytest.mark.parametrize("model", sorted(FIG1))
def test_korthikanti_figure1_activation_bars(model):
    m = FIG1[model]
    # 1F1B's first stage holds p micro-batches of L/p layers: L layers' worth
    held = in_flight("1f1b", m["p"], 64, 1, 0) * m["layers"] // m["p"]
    for mode, sp, recompute in (("none", False, "none"), ("seqsel", True, "selective")):
        per_layer = gpt_activation_terms(seq=2048, micro_batch=m["b"], hidden=m["h"], heads=m["a"], tp=8, sp=sp,
                                         recompute=recompute).total
        assert per_layer * held / GIB == pytest.approx(m[mode], rel=1e-12)


def test_table2_forms_for_gpt3_175b():
    # Table 2's five rows as closed forms, GPT-3 175B (s 2048, b 1, h 12288, a 96, t 8)
    s, b, h, a, t = 2048, 1, 12288, 96, 8
    sbh, att = s * b * h, 5 * a * s / h

    def terms(**kw):
        return gpt_activation_terms(seq=s, micro_batch=b, hidden=h, heads=a, **kw).total

    assert terms() == pytest.approx(sbh * (34 + att))
    assert terms(tp=t) == pytest.approx(sbh * (10 + 24 / t + att / t))
    assert terms(tp=t, sp=True) == pytest.approx(sbh / t * (34 + att))
    assert terms(tp=t, recompute="selective") == pytest.approx(sbh * (10 + 24 / t))
    assert terms(tp=t, sp=True, recompute="selective") == pytest.approx(sbh * 34 / t)
    assert terms(tp=t, sp=True, recompute="full") == pytest.approx(2 * sbh / t)


def test_tp_one_is_the_unsharded_count():
    kw = {"seq": 4096, "micro_batch": 2, "hidden": 8192, "heads": 64}
    assert gpt_activation_terms(**kw, tp=1, sp=True).terms == gpt_activation_terms(**kw).terms
    llama = dict(kw, kv_heads=8, ffn=28672)
    assert llama_activation_terms(**llama, tp=1, cp=1, sp=True).total == llama_activation_terms(**llama).total
    assert tp_block_collectives(seq=4096, micro_batch=2, hidden=8192, tp=1, sp=True) == ()
    assert cp_ring_exchanges(seq=4096, micro_batch=2, kv_heads=8, head_dim=128, cp=1) == ()
    assert pp_sends(pp=1, microbatches=8) == ()


def test_llama_form_matches_the_bench_model_count():
    # costmodel.memory's per-token count is checked against the saved tensors of the model bench train
    # builds (bf16 parameters under FSDP2: autocast False); the Korthikanti-style Llama terms must agree
    memory = pytest.importorskip("topowise.costmodel.memory")
    spec = pytest.importorskip("topowise.models.spec")
    count = getattr(memory, "activation_bytes_per_token_per_layer", None)
    if count is None:
        pytest.skip("costmodel.memory no longer has activation_bytes_per_token_per_layer")
    for name in ("llama3.1-8b", "llama3.1-70b", "llama3.2-1b"):
        m = spec.PRESETS[name]
        ours = llama_activation_terms(seq=1, micro_batch=1, hidden=m.hidden_size, heads=m.num_heads,
                                      kv_heads=m.num_kv_heads, head_dim=m.head_dim, ffn=m.intermediate_size)
        assert ours.total == pytest.approx(count(m, autocast=False)), name


def test_llama_tp_sp_shards_everything_when_regathered():
    kw = {"seq": 8192, "micro_batch": 1, "hidden": 8192, "heads": 64, "kv_heads": 8, "ffn": 28672}
    whole = llama_activation_terms(**kw).total
    assert llama_activation_terms(**kw, tp=8, sp=True, sp_regather=True).total == pytest.approx(whole / 8)
    kept = llama_activation_terms(**kw, tp=8, sp=True, sp_regather=False)
    # the two gathered linear inputs (qkv's and the MLP's, 2h bytes per token each) stay whole
    assert kept.total - whole / 8 == pytest.approx(2 * 2 * 8192 * 8192 * (1 - 1 / 8))
    # TP without SP leaves the norms and the linears' inputs whole
    tp_only = llama_activation_terms(**kw, tp=8)
    assert whole / 8 < tp_only.total < whole


def test_sp_moves_the_same_bus_bytes_as_the_all_reduces():
    for t in (2, 4, 8):
        kw = {"seq": 4096, "micro_batch": 2, "hidden": 8192, "tp": t}
        plain = sum(c.bus_bytes for c in tp_block_collectives(**kw))
        sp = sum(c.bus_bytes for c in tp_block_collectives(**kw, sp=True))
        assert sp == pytest.approx(plain)
        # and each is 4 all-reduces of s b h bf16: 2(t - 1)/t of the buffer each (nccl-tests)
        assert plain == pytest.approx(4 * 2 * (t - 1) / t * 4096 * 2 * 8192 * 2)
        regather = sum(c.bus_bytes for c in tp_block_collectives(**kw, sp=True, sp_regather=True))
        assert regather == pytest.approx(plain * 1.25)  # two more all-gathers


def test_cp_ring_moves_cp_minus_one_over_cp_of_kv():
    s, b, kv_heads, d = 32768, 1, 8, 128
    kv_bytes = 2 * s * b * kv_heads * d * 2  # K and V of the whole sequence, bf16
    for cp in (2, 4, 8, 16):
        fwd, bwd = cp_ring_exchanges(seq=s, micro_batch=b, kv_heads=kv_heads, head_dim=d, cp=cp)
        assert fwd.bus_bytes == pytest.approx((cp - 1) / cp * kv_bytes)
        assert bwd.bus_bytes == pytest.approx(2 * fwd.bus_bytes)  # K, V and their gradients
        # with TP each rank holds kv_heads / t of the heads
        tp_fwd = cp_ring_exchanges(seq=s, micro_batch=b, kv_heads=kv_heads, head_dim=d, cp=cp, tp=8)[0]
        assert tp_fwd.bus_bytes == pytest.approx(fwd.bus_bytes / 8)


def test_pp_sends():
    assert pp_send_bytes(seq=2048, micro_batch=1, hidden=12288) == 2048 * 12288 * 2
    assert pp_send_bytes(seq=2048, micro_batch=1, hidden=12288, tp=8, sp=True) == 2048 * 12288 * 2 / 8
    fwd, bwd = pp_sends(pp=8, virtual_stages=2, microbatches=16)
    assert fwd.count == bwd.count == 16 * 15


def test_validation_messages():
    with pytest.raises(UsageError, match=r"8 KV heads do not split over tp 16: 8 % 16 = 8"):
        validate_shapes(heads=128, kv_heads=8, seq=8192, tp=16)
    with pytest.raises(UsageError, match=r"sequence 8196 does not split over 2 x cp 4 = 8 chunks .*: 8196 % 8 = 4"):
        validate_shapes(heads=64, kv_heads=8, seq=8196, cp=4)
    validate_shapes(heads=64, kv_heads=8, seq=8196, cp=4, load_balanced_cp=False)
    with pytest.raises(UsageError, match=r"unknown recompute"):
        gpt_activation_terms(seq=1, micro_batch=1, hidden=8, heads=1, recompute="op")
