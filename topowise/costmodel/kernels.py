"""What the run's kernels change: fp8 GEMMs, how the loss is computed, fused or unfused attention (Run.precision,
Run.fp8_recipe, Run.loss, Run.attention). docs/costmodel.md ("Precision, loss and attention kernels") has the
derivations; docs/sources.md each constant's source.

fp8 (torchao's Float8Linear as torchtitan converts a model: every block Linear, not the output layer):
    block Linear passes   at fp8 peak x Profile.fp8_compute_efficiency, by shape as the bf16 ones (gemm.py)
    casts and amax        FP8_CAST_BYTES per element of each GEMM operand: the input and the output gradient per token,
                          the weight per gather (tensorwise with FSDP2's float8 all-gather: on the shard, then the
                          gathered fp8 weight's transpose, FP8_TRANSPOSE_BYTES)
    all-gather            tensorwise under FSDP2: the block Linears' weights in fp8 (1 byte); rowwise: bf16
    memory                master weights, gradients and optimizer as bf16; tensorwise saves what bf16 saves;
                          rowwise keeps each block's gathered bf16 weights from its forward to its backward
loss, per token of V logits:
    plain    the fp32 cross-entropy over every token at once (12 V at the loss's backward)
    chunked  the whole bf16 logits (2 V) and the fp32 work of one chunk of tokens (12 V x tokens / LOSS_CHUNKS)
    fused    Liger's fused linear cross-entropy: one chunk's bf16 logits (2 V x chunk), the input gradient (2 h per
             token) and the output weight's gradient (2 V h), made in the forward; FUSED_LOSS_BYTES per logit
attention unfused: the a x s x s scores of every layer materialised (Megatron-LM's CoreAttention of 2021): the
score GEMMs (QK^T, PV and their gradients, the full square) at the GEMM rate, SCORE_FORWARD_BYTES and
SCORE_BACKWARD_BYTES per score element at the memory-bound rate, SCORE_SAVED_BYTES per score element kept for backward.
"""

from __future__ import annotations

import math

from topowise.costmodel.gemm import block_linears
from topowise.errors import UsageError
from topowise.models.spec import ModelSpec

# Bytes per element of casting a bf16 GEMM operand to fp8 with a dynamic scale: tensorwise reads it for its amax
# (2), reads it again and writes fp8 twice, row- and column-major (2 + 1 + 1); rowwise reads it and writes fp8 once
# per axis (2 x (2 + 1)). pytorch/ao torchao/testing/training/roofline_utils.py, get_tensor_memory_traffic_bytes.
FP8_CAST_BYTES = 6
FP8_TRANSPOSE_BYTES = 2  # the all-gathered fp8 weight's column-major copy: read 1, write 1
# Of the loss: torchtune's CEWithChunkedOutputLoss splits the tokens in 8 (num_output_chunks = 8)
LOSS_CHUNKS = 8
# Liger's fused linear cross-entropy (liger_kernel/ops/fused_linear_cross_entropy.py): per chunk of tokens, the bf16
# logits are read for the online max and sum (2) and read again to write their gradient in place (2 + 2)
FUSED_LOSS_BYTES = 6
# Megatron-LM 2021's unfused attention (megatron/model/transformer.py CoreAttention, fused_softmax.py), bf16/fp16
# scores: forward QK^T writes 2, scale-mask-softmax reads 2 writes 2, dropout reads 2 writes 2 and its mask 1, PV reads
# 2 (13); backward PV's gradient writes 2, dropout's reads 2 + 1 writes 2, softmax's reads 2 + 2 writes 2, the two
# QK^T gradient GEMMs read 2 each (17)
SCORE_FORWARD_BYTES = 13
SCORE_BACKWARD_BYTES = 17
# Korthikanti et al. 2022 (arXiv 2205.05198), section 4.1: softmax output 2 a s^2 b, dropout mask a s^2 b, dropout
# output 2 a s^2 b kept for backward
SCORE_SAVED_BYTES = 5


def fp8_linear_params(model: ModelSpec) -> int:
    """Weights the fp8 recipe converts: every block Linear (the output layer stays bf16, as torchtitan's
    filter_fqns=["output"])."""
    return model.num_layers * sum(out * inp for out, inp in block_linears(model).values())


def fp8_peak_flops(gpu_spec) -> float:
    """The GPU's dense fp8 peak; a part without fp8 tensor cores is refused."""
    if gpu_spec.fp8_dense_flops <= 0:
        raise UsageError(f"--precision fp8: the {gpu_spec.name} has no fp8 tensor cores (fp8 needs Ada, Hopper or "
                         "later: L4, L40S, H100, H200, B200, ...); use --precision bf16")
    return float(gpu_spec.fp8_dense_flops)


def fp8_activation_cast_bytes_per_token(model: ModelSpec) -> tuple[float, float]:
    """(forward, backward) cast bytes per token of every block Linear's per-token operands: its input in the forward,
    its output gradient in the backward."""
    shapes = block_linears(model).values()
    return (model.num_layers * FP8_CAST_BYTES * sum(inp for _, inp in shapes),
            model.num_layers * FP8_CAST_BYTES * sum(out for out, _ in shapes))


def fp8_weight_cast_bytes(model: ModelSpec, recipe: str, fsdp: bool, shard: int) -> float:
    """Cast bytes of the fp8 weights per gather pass (per step without FSDP): with tensorwise under FSDP2 the shard is
    cast before the float8 all-gather and the gathered weight transposed; otherwise the whole weight cast."""
    params = fp8_linear_params(model)
    if fp8_all_gather(recipe, fsdp):
        return params * (FP8_CAST_BYTES / shard + FP8_TRANSPOSE_BYTES)
    return params * FP8_CAST_BYTES


def fp8_all_gather(recipe: str, fsdp: bool) -> bool:
    """FSDP2 gathers the fp8 weights in fp8: tensorwise with enable_fsdp_float8_all_gather (torchtitan's docs/float8.md
    runs tensorwise so); rowwise gathers bf16."""
    return fsdp and recipe == "tensorwise"


def all_gather_bytes_per_param(run) -> float:
    """Bytes FSDP2 gathers per parameter of the model on average: bf16, the fp8 block Linears at 1 byte with the
    float8 all-gather."""
    if run.precision == "fp8" and fp8_all_gather(run.fp8_recipe, run.spec.fsdp):
        return 2.0 - fp8_linear_params(run.model) / run.model.params
    return 2.0


def loss_chunk_tokens(model: ModelSpec, tokens: int, loss: str) -> int:
    """Tokens the loss works on at once: all (plain), tokens / LOSS_CHUNKS (chunked), Liger's chunk (fused:
    next_power_of_2(ceil(tokens / ceil(V / h))), logits about the size of the hidden states)."""
    if loss == "plain":
        return tokens
    if loss == "chunked":
        return math.ceil(tokens / LOSS_CHUNKS)
    chunk = math.ceil(tokens / math.ceil(model.vocab_size / model.hidden_size))
    return min(tokens, 1 << max(chunk - 1, 0).bit_length())


def loss_memory_bytes(model: ModelSpec, tokens: int, loss: str, plain_per_token: float) -> tuple[float, float]:
    """(bytes alive at the loss's backward, at the output layer's backward) of the logits and the loss;
    plain_per_token: the plain loss's bytes per token at its backward (memory.logits_bytes_per_token)."""
    vocab, hidden = model.vocab_size, model.hidden_size
    if loss == "plain":
        return tokens * plain_per_token, tokens * 2.0 * vocab
    chunk = loss_chunk_tokens(model, tokens, loss)
    if loss == "chunked":
        return tokens * 2.0 * vocab + chunk * plain_per_token, tokens * 2.0 * vocab
    made = chunk * 2.0 * vocab + tokens * 2.0 * hidden + 2.0 * vocab * hidden
    return made, made


def loss_bytes_per_logit(loss: str, plain_forward: float, plain_total: float) -> tuple[float, float]:
    """(forward, forward + backward) HBM bytes per logit of the loss (plain's from step.py's constants; chunked moves
    the same bytes a chunk at a time)."""
    if loss == "fused":
        return float(FUSED_LOSS_BYTES), float(FUSED_LOSS_BYTES)
    return plain_forward, plain_total


def unfused_score_elements_per_token(model: ModelSpec, seq_len: int) -> float:
    """Attention score elements per token in one step's forward, every layer: heads x keys (the full square)."""
    return float(model.num_layers * model.num_heads * seq_len)
