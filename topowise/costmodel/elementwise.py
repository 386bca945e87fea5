"""The bytes a block's elementwise kernels move through HBM, per token: the norms, casts, rotary embedding,
residual adds, the activation function and their backward, as the bench transformer
(topowise/models/transformer.py) issues them. Everything a block runs besides its GEMMs and its attention.

Each eager kernel reads its inputs and writes its output once (bytes per token below; h hidden, I intermediate,
q = heads x head_dim, kv = kv heads x head_dim, r = 4 for DDP's fp32 residual stream under autocast, 2 for
FSDP2's bf16). Autocast's casts of the weights (and of their gradients back) are per parameter, priced apart
(step.py); a GEMM's bias is in its epilogue, its gradient a reduction of the output gradient.

    Llama block, forward                              backward
    RMSNorm x2 (fused kernel)        2 r h each       norm backward: input grad 3 r h, weight grad 2 r h, each
    autocast: each Linear casts its  6 h each (qkv,   grads of the casts back to fp32 6 h each (qkv, gate, up),
      fp32 input to bf16             gate, up)          the residual add's grad to the bf16 branch 6 h x 2
    rotary on q and k: upcast 6,     20 (q + kv)      the same three, 20 (q + kv)
      complex product 8, downcast 6
    v made contiguous                4 kv             q, k, v gradients joined into qkv's: 4 (q + 2 kv)
    residual add x2                  (2 r + 2) h each the branches' gradients summed x2: 3 r h each; gate's
                                                        and up's input gradients summed: 3 r h (autocast, in
                                                        fp32) or 6 h (one bf16 input)
    SiLU 4 I, product 6 I            10 I             product backward 12 I, SiLU backward 6 I
    q/k norms (Qwen3)                measured alone (`qk_norm_bytes`, below)

Qwen3's q/k norms are priced at what they took alone (qk_norm_bytes): their kernels are slow per byte.

GPT-2's block: LayerNorm x2 (2 r h forward, 5 r h backward, each), the autocast casts of c_attn's and c_fc's
inputs (6 h each, and back), q/k/v as views of c_attn's output (no copy), GELU (4 I forward, 6 I backward),
residual adds as Llama's, biases' gradients (reductions of 2 (3 h + h + I + h)).

Compiled (torch.compile of each block), Inductor fuses every run of elementwise work between two GEMMs (or
the attention) into one kernel that reads its inputs and writes its outputs once:

    forward: norm and cast (r h + 2 h); qkv's output to q, k, v, with the q/k norms and rotary (4 (q + 2 kv));
             residual add, norm and cast (2 r h + 4 h); SiLU and product (6 I); residual add (2 r h + 2 h)
    backward: the residual gradient cast to bf16 (r h + 2 h, autocast); SiLU's backward and the product's,
              SiLU recomputed (10 I); gate's and up's input gradients, the norm's backward, the residual
              gradient (3 r h + 4 h, + 2 h autocast's bf16 copy); the attention's gradients back to qkv's,
              through rotary and the q/k norms (4 (q + 2 kv), + 2 (q + kv) for the norms' saved input); the
              first norm's backward (3 r h + 2 h)

Profile.activation_traffic (compiled: compiled_activation_traffic) is the HBM-rate bytes one of these bytes
costs: 1 where the kernels run at the memory-bound rate of the fused AdamW and the loss (hbm_efficiency).
"""

from __future__ import annotations

from topowise.models.spec import ModelSpec


def block_elementwise_bytes(model: ModelSpec, autocast: bool, compiled: bool = False) -> tuple[float, float]:
    """(forward, backward) HBM bytes per token of one block's elementwise kernels (the docstring's tables)."""
    h, i = model.hidden_size, model.intermediate_size
    q, kv = model.num_heads * model.head_dim, model.num_kv_heads * model.head_dim
    r = 4 if autocast else 2
    if compiled:
        return compiled_bytes(model, autocast)
    if model.family == "gpt2":
        casts = 2 * 6 * h if autocast else 0
        forward = 2 * 2 * r * h + casts + 2 * (2 * r + 2) * h + 4 * i
        biases = 2 * (3 * h + h + i + h)
        backward = 2 * 5 * r * h + casts + (2 * 6 * h if autocast else 0) + 2 * 3 * r * h + 6 * i + biases
        return float(forward), float(backward)
    casts = 3 * 6 * h if autocast else 0  # qkv's, gate's and up's inputs to bf16
    rotary = 20 * (q + kv)
    forward = 2 * 2 * r * h + casts + rotary + 4 * kv + 2 * (2 * r + 2) * h + 10 * i
    residual_grad_casts = 2 * 6 * h if autocast else 0
    mlp_input_grads = 3 * r * h if autocast else 6 * h
    bias = 2 * (q + 2 * kv) if model.qkv_bias else 0
    backward = (2 * 5 * r * h + casts + residual_grad_casts + rotary + 4 * (q + 2 * kv) + 2 * 3 * r * h
                + mlp_input_grads + 18 * i + bias)
    return float(forward), float(backward)


# Qwen3's q/k norms per element of q and k, as bytes at the HBM datasheet rate, and their forward's share: timed
# alone on one H200 (research/2026-12-03-h200x1/qk-norm/run47, norm_probe.txt)
QK_NORM_PEAK_BYTES = {True: (271.0, 40 / 128), False: (101.0, 4 / 14)}  # autocast -> (bytes, forward share)


def qk_norm_bytes(model: ModelSpec, autocast: bool, hbm_efficiency: float) -> tuple[float, float]:
    """(forward, backward) bytes per token at the memory-bound rate (HBM x hbm_efficiency) that Qwen3's eager q/k
    norms take (QK_NORM_PEAK_BYTES); compiled, Inductor fuses them and block_elementwise_bytes counts them."""
    if not model.qk_norm:
        return 0.0, 0.0
    per_element, forward_share = QK_NORM_PEAK_BYTES[autocast]
    total = per_element * hbm_efficiency * (model.num_heads + model.num_kv_heads) * model.head_dim
    return total * forward_share, total * (1 - forward_share)


def compiled_bytes(model: ModelSpec, autocast: bool) -> tuple[float, float]:
    """Inductor's fused kernels (the docstring's second table)."""
    h, i = model.hidden_size, model.intermediate_size
    q, kv = model.num_heads * model.head_dim, model.num_kv_heads * model.head_dim
    r = 4 if autocast else 2
    gpt2 = model.family == "gpt2"
    qkv = 4 * (q + 2 * kv) if not gpt2 else 0  # GPT-2 hands SDPA views of c_attn's output
    activation_fwd, activation_bwd = (4 * i, 8 * i) if gpt2 else (6 * i, 10 * i)
    forward = (r * h + 2 * h) + qkv + (2 * r * h + 4 * h) + activation_fwd + (2 * r * h + 2 * h)
    norms_saved = 2 * (q + kv) if model.qk_norm else 0
    backward = ((r * h + 2 * h if autocast else 0) + activation_bwd + (3 * r * h + 4 * h + (2 * h if autocast else 0))
                + qkv + norms_saved + (3 * r * h + 2 * h))
    return float(forward), float(backward)
