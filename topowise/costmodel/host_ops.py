"""The host's work per block, by the operators the block dispatches (docs/costmodel.md, "The host by its operators"):

    host per block      = host_s_per_layer[strategy/phase] + (ops - reference ops) x price per operator
    price per operator  = host_s_per_layer[ddp/phase] / reference ops
    optimizer per block = host_s_per_layer[strategy/optimizer] x block tensors / REFERENCE_TENSORS

Reference: the blocks the host terms were measured on (llama3.2-1b's and qwen2.5-0.5b's). The operator counts are
the bench transformer's on CUDA, in the two modes bench train runs a model in: fp32 weights under autocast (ddp,
zero1) and bf16 weights (FSDP2, DeepSpeed). Compiled blocks are priced per block ("compiled/" terms), not here.
"""

from __future__ import annotations

from topowise.models.spec import ModelSpec

# (forward, backward) operators of one block, by mode (autocast True: fp32 weights under torch.autocast): the model
# of two blocks less the model of one at 1 x 128 tokens, torch 2.11, one H200 (count_ops.py, host-ops/run60)
LLAMA_BLOCK_OPS = {True: (63, 94), False: (57, 84)}
QKV_BIAS_OPS = {True: (1, 4), False: (0, 3)}
QK_NORM_OPS = {True: (18, 40), False: (4, 6)}
GPT2_BLOCK_OPS = {True: (40, 78), False: (30, 66)}
PHASE_INDEX = {"forward": 0, "backward": 1}


def block_ops(model: ModelSpec, autocast: bool) -> tuple[float, float]:
    """(forward, backward) aten operators one block dispatches (the tables above); a family they do not hold
    counts as the reference block."""
    if model.family not in ("llama", "gpt2"):
        return reference_ops(autocast)
    if model.family == "gpt2":
        return GPT2_BLOCK_OPS[autocast]
    fwd, bwd = LLAMA_BLOCK_OPS[autocast]
    for present, extra in ((model.qkv_bias, QKV_BIAS_OPS[autocast]), (model.qk_norm, QK_NORM_OPS[autocast])):
        if present:
            fwd, bwd = fwd + extra[0], bwd + extra[1]
    return fwd, bwd


def reference_ops(autocast: bool) -> tuple[float, float]:
    """The operators of the blocks the host terms were measured on: the mean of llama3.2-1b's and qwen2.5-0.5b's
    (the terms are the median of the two; per operator, the median of two is at the mean of their counts)."""
    llama, bias = LLAMA_BLOCK_OPS[autocast], QKV_BIAS_OPS[autocast]
    return llama[0] + bias[0] / 2, llama[1] + bias[1] / 2


def extra_ops(model: ModelSpec, autocast: bool, phase: str) -> float:
    """Operators one block dispatches in `phase` beyond the reference block's (negative: fewer); 0 in the
    optimizer step, whose host work goes with the parameter tensors (optimizer_scale)."""
    if phase not in PHASE_INDEX:
        return 0.0
    i = PHASE_INDEX[phase]
    return block_ops(model, autocast)[i] - reference_ops(autocast)[i]


def block_tensors(model: ModelSpec) -> float:
    """Parameter tensors of one block: Llama's 7 (qkv, out, gate, up, down, two norms), + 1 for qkv's bias, + 2 for the
    q/k norms; GPT-2's 12 (four Linears and two LayerNorms, each with a bias); a family not known: the reference."""
    if model.family == "gpt2":
        return 12.0
    if model.family != "llama":
        return REFERENCE_TENSORS
    return 7.0 + int(model.qkv_bias) + 2 * int(model.qk_norm)


REFERENCE_TENSORS = 7.5  # llama3.2-1b's 7 and qwen2.5-0.5b's 8, as reference_ops


def optimizer_scale(model: ModelSpec) -> float:
    """The optimizer step's host per block over the reference block's: its parameter tensors over 7.5."""
    return block_tensors(model) / REFERENCE_TENSORS


def per_op_s(ddp_host_s: float, phase: str) -> float:
    """Host seconds per operator in `phase`, from ddp's host seconds per reference block (autocast)."""
    if phase not in PHASE_INDEX:
        return 0.0
    return ddp_host_s / reference_ops(True)[PHASE_INDEX[phase]]


def operators_note(model: ModelSpec, autocast: bool, compiled: bool) -> str | None:
    """What `predict` says where an eager block dispatches a tenth more or fewer operators than the reference
    block, in either phase; None otherwise (and for compiled blocks, priced per block)."""
    if compiled:
        return None
    ops, ref = block_ops(model, autocast), reference_ops(autocast)
    if all(abs(o / r - 1) < 0.1 for o, r in zip(ops, ref)):
        return None
    return (f"its blocks dispatch {ops[0]:g} / {ops[1]:g} aten operators forward / backward, the blocks the host "
            f"term was measured on {ref[0]:g} / {ref[1]:g}")
