"""Predict the bench transformer as it was before 2026-12-01, for replaying records measured with it.

Until then k and v were repeated to every query head before SDPA (repeat_interleave) and every block
cast its own bf16 rotary tables, so each block saved 4 (q - kv) bytes per token more and the model
num_layers pairs of tables instead of one. The records of 2026-11-30 (2x H200) were measured so."""

from __future__ import annotations


def predict_earlier_model(monkeypatch) -> None:
    from topowise.costmodel import deepspeed as ds_mod
    from topowise.costmodel import memory as mem_mod
    from topowise.costmodel import step as step_mod

    per_layer, rope = mem_mod.activation_bytes_per_token_per_layer, mem_mod.rope_bytes

    def expanded(model, autocast=False, gqa_expanded=True, compiled=False):
        return per_layer(model, autocast, gqa_expanded=True, compiled=compiled)

    for module in (mem_mod, ds_mod, step_mod):
        monkeypatch.setattr(module, "activation_bytes_per_token_per_layer", expanded)
    for module in (mem_mod, ds_mod):
        monkeypatch.setattr(module, "rope_bytes", lambda model, seq_len: model.num_layers * rope(model, seq_len))
