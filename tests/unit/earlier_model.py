"""Predict the bench transformer as it was earlier, for replaying records measured with it.

Until 2026-12-02 gate and up were one Linear (gate_up) and the rotary embedding was real arithmetic on
bf16 cos/sin tables cast once per forward: under autocast the MLP's Linears kept one bf16 copy of
their input (2h bytes per token less), the model kept one pair of tables (2 x 2 x seq x head_dim
bytes) rather than one complex table per block, a block's backward concatenated the gate and up
gradients (4I bytes per token more), and a block had four Linear modules (ZeRO-3 gathers four per
block). Per-op selective checkpointing is not replayed from those days (its records ran on the GPU).
The default profile's GPU rates were then run 10's (2x H200), in one rate for all FLOPs; `predict`
without a profile gets them back here, as fitted again under today's other terms (EARLIER_RATES).

Until 2026-12-01 besides, k and v were repeated to every query head before SDPA (repeat_interleave)
and every block cast its own bf16 rotary tables, so each block saved 4 (q - kv) bytes per token more
and the model num_layers pairs of tables instead of one. The records of 2026-11-30 (2x H200) were
measured so."""

from __future__ import annotations

from dataclasses import replace

# run 10's fit, in its form: one rate for all FLOPs, attention's included (no attention term); fitted again
# since FSDP2's cast and copies were modelled (research/2026-11-30-h200x2/scripts/overlap_refit.py --rates, refit5;
# 0.6027 and 11.17 before)
EARLIER_RATES = {"compute_efficiency": 0.7610, "activation_traffic": 16.86, "attention_efficiency": {},
                 "elementwise_form": "saved-bytes", "gemm_form": "one-rate"}


def predict_fused_gate_up_model(monkeypatch) -> None:
    from topowise.costmodel import deepspeed as ds_mod
    from topowise.costmodel import memory as mem_mod
    from topowise.costmodel import step as step_mod

    per_layer, temp = mem_mod.activation_bytes_per_token_per_layer, mem_mod.block_backward_temp_bytes_per_token

    def one_mlp_input(model, autocast=False, gqa_expanded=False, compiled=False):
        extra = 2 * model.hidden_size if autocast and model.family != "gpt2" else 0
        return per_layer(model, autocast, gqa_expanded=gqa_expanded, compiled=compiled) - extra

    def with_concatenation(model, autocast=False):
        return temp(model, autocast) + 4 * model.intermediate_size

    def shared_tables(model, seq_len):
        return 0.0 if model.family == "gpt2" else 2 * 2 * seq_len * model.head_dim

    for module in (mem_mod, ds_mod, step_mod):
        monkeypatch.setattr(module, "activation_bytes_per_token_per_layer", one_mlp_input)
    for module in (mem_mod, ds_mod):
        monkeypatch.setattr(module, "block_backward_temp_bytes_per_token", with_concatenation)
        monkeypatch.setattr(module, "rope_bytes", shared_tables)
    monkeypatch.setattr(ds_mod, "modules_per_block", lambda model: 4)
    from topowise.costmodel import predict as predict_mod
    from topowise.costmodel.profile import default_profile

    monkeypatch.setattr(predict_mod, "default_profile", lambda: replace(default_profile(), **EARLIER_RATES))


def predict_earlier_model(monkeypatch) -> None:
    from topowise.costmodel import deepspeed as ds_mod
    from topowise.costmodel import memory as mem_mod
    from topowise.costmodel import step as step_mod

    predict_fused_gate_up_model(monkeypatch)
    per_layer, rope = mem_mod.activation_bytes_per_token_per_layer, mem_mod.rope_bytes

    def expanded(model, autocast=False, gqa_expanded=True, compiled=False):
        return per_layer(model, autocast, gqa_expanded=True, compiled=compiled)

    for module in (mem_mod, ds_mod, step_mod):
        monkeypatch.setattr(module, "activation_bytes_per_token_per_layer", expanded)
    for module in (mem_mod, ds_mod):
        monkeypatch.setattr(module, "rope_bytes", lambda model, seq_len: model.num_layers * rope(model, seq_len))
