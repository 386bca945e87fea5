"""FSDP2's work per parameter (step.py): the cast of the fp32 shards, the copies in and out of the collectives."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from topowise import hardware
from topowise.costmodel import step as step_mod
from topowise.costmodel.predict import predict
from topowise.costmodel.profile import default_profile
from topowise.models.spec import load_model
from topowise.run import Run
from topowise.topology.presets import load_preset

H200X2 = load_preset("h200-x2")
TRACE = Path(__file__).resolve().parents[2] / "docs/results/2026-12-02-h200x1/kernels/run18/kernels-3b-zero3.json"


def fsdp_seconds(run: Run, monkeypatch) -> float:
    """The memory-bound seconds FSDP2's per-parameter terms add to `run` (the step with them less without)."""
    with_terms = predict(run, H200X2).time.memory_bound_s
    for name in ("FSDP_COPY_OUT_BYTES_PER_PARAM", "FSDP_CAST_BYTES_PER_SHARD_PARAM",
                 "FSDP_REDUCE_COPY_IN_BYTES_PER_PARAM", "ONE_RANK_REDUCE_SCATTER_BYTES_PER_PARAM"):
        monkeypatch.setattr(step_mod, name, 0)
    without = predict(run, H200X2).time.memory_bound_s
    monkeypatch.undo()
    return with_terms - without


def test_bytes_per_parameter_by_shard_and_strategy(monkeypatch):
    model = load_model("llama3.2-1b")
    hbm = hardware.hbm_bytes_per_s("NVIDIA H200") * default_profile().hbm_efficiency
    p, blocks = model.params, model.num_layers * model.layer_params
    one = Run(model=model, gpus=(0,), strategy="zero3", seq_len=4096)
    two = replace(one, gpus=(0, 1))
    # one GPU: per gather 4 + 6 (the whole model is the shard), per step 6 + 8 (NCCL's one-rank copy)
    assert fsdp_seconds(one, monkeypatch) * hbm == pytest.approx(10 * (p + blocks) + 14 * p)
    # two GPUs: the cast is on half the parameters, the reduce-scatter is NCCL's kernels (communication)
    assert fsdp_seconds(two, monkeypatch) * hbm == pytest.approx(7 * (p + blocks) + 6 * p)
    # zero2 gathers once
    assert fsdp_seconds(replace(two, strategy="zero2"), monkeypatch) * hbm == pytest.approx(7 * p + 6 * p)


def test_against_the_traced_kernels(monkeypatch):
    """llama3.2-3b zero3 on one H200 (kernels/run18): the cast, the gradient copy and the one-rank copy
    took 33.8 ms per step; the model's per-parameter terms, the copy-out of 4 bytes per gather included,
    within a fifth of that (those kernels run below the streaming rate of AdamW and the loss, which
    hbm_efficiency is)."""
    kernels = json.loads(TRACE.read_text())["kernels"]
    traced = sum(t for name, t in kernels.items()
                 if "bfloat16_copy_kernel" in name or "chunk_cat" in name or name.startswith("Memcpy DtoD"))
    assert traced == pytest.approx(0.0338, abs=0.001)
    run = Run(model=load_model("llama3.2-3b"), gpus=(0,), strategy="zero3", seq_len=4096)
    modelled = fsdp_seconds(run, monkeypatch)
    assert modelled == pytest.approx(traced, rel=0.2)
