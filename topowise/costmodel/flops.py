"""Training FLOPs per token (PaLM, arXiv 2204.02311, appendix B; as nanoGPT's `estimate_mfu`).

    model FLOPs per token = 6 N + 12 L H Q T

N counts the parameters that multiply activations: every parameter except the input embedding
table (a lookup, no FLOPs) and learned position embeddings. The output projection counts even when
tied to the input embedding, because its matmul runs (nanoGPT: tied wte counted once, wpe excluded).
L layers, H heads, Q head dim, T sequence length: the attention scores and the weighted sum,
2 matmuls x 2 FLOPs x T x H Q per layer forward, times 3 for forward + backward. PaLM counts the
full T x T square (no causal halving); MFU everywhere in topowise uses this same count.

Recomputation (activation checkpointing) runs each block's forward a second time: hardware FLOPs
rise by one forward of the blocks (2 N_blocks + 4 L H Q T); model FLOPs, and so MFU, do not.
"""

from __future__ import annotations

from topowise.models.spec import ModelSpec


def flops_params(model: ModelSpec) -> int:
    """N of 6N: all parameters but the input embedding lookup (token table if untied, positions)."""
    lookup = model.max_positions * model.hidden_size
    if not model.tied_embeddings:
        lookup += model.vocab_size * model.hidden_size
    return model.params - lookup


def attention_flops_per_token(model: ModelSpec, seq_len: int) -> float:
    """12 L H Q T: forward + backward of QK^T and AV, full square."""
    return 12.0 * model.num_layers * model.num_heads * model.head_dim * seq_len


def training_flops_per_token(model: ModelSpec, seq_len: int, activation_checkpointing: bool = False) -> float:
    """Model FLOPs per token, 6N + 12LHQT; the same with or without checkpointing (the MFU numerator)."""
    return 6.0 * flops_params(model) + attention_flops_per_token(model, seq_len)


def hardware_flops_per_token(model: ModelSpec, seq_len: int, activation_checkpointing: bool = False) -> float:
    """FLOPs the GPU executes: model FLOPs plus, with checkpointing, one more forward of every block."""
    flops = training_flops_per_token(model, seq_len)
    if activation_checkpointing:
        flops += 2.0 * model.num_layers * model.layer_params + attention_flops_per_token(model, seq_len) / 3.0
    return flops


def mfu(model: ModelSpec, seq_len: int, tokens_per_s_per_gpu: float, peak_flops: float) -> float:
    """Model FLOPs utilisation: achieved model FLOP/s per GPU over the datasheet peak."""
    if peak_flops <= 0:
        return 0.0
    return training_flops_per_token(model, seq_len) * tokens_per_s_per_gpu / peak_flops
