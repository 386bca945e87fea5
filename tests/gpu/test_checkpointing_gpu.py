"""Activation checkpointing on a real GPU (pytest -m gpu on a CUDA machine): selective per-op and
every-k-th-block checkpointing give the gradients of no checkpointing, and keep for backward what the
cost model says each mode keeps (costmodel/memory.py). No timing is asserted."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from topowise.costmodel.memory import (  # noqa: E402
    head_bytes_per_token,
    rope_bytes,
    saved_activation_bytes_per_token,
)
from topowise.measure.strategies import apply_checkpointing  # noqa: E402
from topowise.models.spec import ModelSpec  # noqa: E402
from topowise.models.transformer import build_model  # noqa: E402
from topowise.run import Run  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

# 8 blocks of a GQA Llama, wide enough that the blocks' activations dwarf the rest
SPEC = ModelSpec("ckpt-test", "llama", 4096, 1024, 8, 16, 4, 3584, False)
BATCH, SEQ = 4, 2048
MODES = (("none", "op"), ("selective", "op"), ("selective", "2"), ("full", "op"))


def run_mode(mode: str, option: str, tokens: torch.Tensor) -> tuple[int, dict]:
    """(bytes held from the forward into the backward by the blocks, gradients) under FSDP2's dtype
    policy's equivalent here: bf16 weights and activations."""
    model = build_model(SPEC, SEQ, "cuda", seed=0).to(torch.bfloat16)
    apply_checkpointing(model, mode, option)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    logits = model(tokens[:, :-1])
    held = torch.cuda.memory_allocated() - before - logits.numel() * logits.element_size()
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten())
    del logits
    loss.backward()
    grads = {name.replace("._checkpoint_wrapped_module", ""): p.grad.float() for name, p in model.named_parameters()}
    del model, loss
    torch.cuda.empty_cache()
    return held, grads


def test_modes_keep_what_the_model_predicts_and_agree_on_gradients():
    tokens = torch.randint(0, SPEC.vocab_size, (BATCH, SEQ + 1), device="cuda",
                           generator=torch.Generator("cuda").manual_seed(0))
    held, grads = {}, {}
    for mode, option in MODES:
        held[(mode, option)], grads[(mode, option)] = run_mode(mode, option, tokens)
    reference = grads[("none", "op")]
    for key, got in grads.items():
        for name, g in got.items():
            scale = reference[name].abs().max().clamp_min(1e-6)
            assert (g - reference[name]).abs().max() <= 0.02 * scale, (key, name)
    # what the blocks keep, measured, against costmodel.memory (bf16: autocast False), per token
    tokens_per_step = BATCH * SEQ
    for mode, option in MODES:
        run = Run(SPEC, (0,), "zero3", micro_batch=BATCH, seq_len=SEQ, checkpointing=mode,
                  selective_ac_option=option)
        kept, _ = saved_activation_bytes_per_token(run, autocast=False)
        # and outside the blocks: the final norm's and output layer's inputs (not the token ids, which
        # were there before), the rotary tables
        kept += head_bytes_per_token(SPEC) - 16 + rope_bytes(SPEC, SEQ) / tokens_per_step
        measured = held[(mode, option)] / tokens_per_step
        assert measured == pytest.approx(kept, rel=0.10), (mode, option, measured, kept)
    assert held[("none", "op")] > held[("selective", "2")] > held[("selective", "op")] > held[("full", "op")]
