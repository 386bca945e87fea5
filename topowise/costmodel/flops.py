"""Training FLOPs per token (PaLM, arXiv 2204.02311, appendix B; as nanoGPT's `estimate_mfu`).

    model FLOPs per token = 6 N + 12 L H Q T

N counts the parameters that multiply activations: every parameter except the input embedding
table (a lookup, no FLOPs) and learned position embeddings. The output projection counts even when
tied to the input embedding, because its matmul runs (nanoGPT: tied wte counted once, wpe excluded).
L layers, H heads, Q head dim, T sequence length: the attention scores and the weighted sum,
2 matmuls x 2 FLOPs x T x H Q per layer forward, times 3 for forward + backward. PaLM counts the
full T x T square (no causal halving); MFU everywhere in topowise uses this same count.

Hardware FLOPs (what the GPU executes, for the time model) count attention as the flash kernel runs
it (FlashAttention-2, Dao 2023, arXiv 2307.08691: the forward does 2 matmuls, QK^T and PV; the
backward 5, recomputing QK^T; with a causal mask the blocks above the diagonal are skipped, about
half): 2 x 2 T H Q / 2 forward + 5 x 2 T H Q / 2 backward = 7 L H Q T of the 12 counted above.
Recomputation (activation checkpointing) runs each block's forward a second time: hardware FLOPs
rise by one forward of the blocks (2 N_blocks + 2 L H Q T); model FLOPs, and so MFU, do not.
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


FLASH_FORWARD_SHARE = 2.0 / 12.0  # of attention_flops_per_token: causal forward (see the docstring)
FLASH_BACKWARD_SHARE = 5.0 / 12.0  # causal backward, QK^T recomputed


def hardware_forward_flops_per_token(model: ModelSpec, seq_len: int) -> float:
    """FLOPs the GPU executes in the forward: 2 N + the causal flash forward."""
    return 2.0 * flops_params(model) + FLASH_FORWARD_SHARE * attention_flops_per_token(model, seq_len)


def hardware_flops_per_token(model: ModelSpec, seq_len: int, activation_checkpointing: bool = False) -> float:
    """FLOPs the GPU executes: 6 N + causal flash attention (7 L H Q T) plus, with checkpointing,
    one more forward of every block."""
    attention = attention_flops_per_token(model, seq_len)
    flops = 6.0 * flops_params(model) + (FLASH_FORWARD_SHARE + FLASH_BACKWARD_SHARE) * attention
    if activation_checkpointing:
        flops += 2.0 * model.num_layers * model.layer_params + FLASH_FORWARD_SHARE * attention
    return flops

