"""The host's work per block, by the operators the block dispatches.

An eager step's host time is Python and PyTorch's dispatcher issuing each aten operator (views included) and
autograd recording it. At 1 x 128 tokens, where the GPU waits for the host, one H200's host took about the same time
per operator on three block families in one process (docs/results/2026-12-03-h200x1/host-ops/run59, host_probe.py,
the fastest of five rounds over ten models): Llama-style blocks (63 / 94 operators forward / backward) 15.3 and
13.4 us (median of seven models); at that price GPT-2's model (40 / 78) comes out -3% / +4% and Qwen3's two (81 /
134, their q/k norms) +0..+7% / -14..+14%, where priced per block they would be up to 1.6 times off (`python
benchmarks/host_ops_check.py`). So a block that dispatches more
operators than the blocks the host terms were measured on (Profile.host_s_per_layer: the median of qwen2.5-0.5b's
and llama3.2-1b's, Llama-style blocks) takes the host longer by the difference at that price, and one that
dispatches fewer, less:

    host per block = host_s_per_layer[strategy/phase] + (ops - reference ops) x price per operator
    price per operator = host_s_per_layer[ddp/phase] / reference ops

The price is ddp's: at one process DDP's host is the model's dispatch and its per-bucket hooks. The strategy's own host
work (FSDP2's hooks per block, ZeRO-1's step) stays as measured.

Operators per block, forward / backward, as the bench transformer dispatches them on CUDA (torch 2.11, one H200;
`count_ops.py` in host-ops/run60: the model of two blocks less the model of one at 1 x 128 tokens), in the two modes
bench train runs a model in: fp32 weights under autocast (ddp, zero1) and bf16 weights (FSDP2's zero2 and zero3,
DeepSpeed). Each is exact for the bench transformer, not for another implementation of the same architecture.

                                      autocast      bf16
    Llama block (GQA or not)          63 / 94       57 / 84
    + q, k, v biases (Qwen2)          +1 / +4       +0 / +3
    + q/k norms (Qwen3)               +18 / +40     +4 / +6     (autocast: PyTorch's composite norm, bf16: fused)
    GPT-2 block                       40 / 78       30 / 66

The optimizer step's host work is per parameter tensor (torch's AdamW over its list of tensors; FSDP2's DTensors
each through their own dispatch): in one call (host-ops/run60, 1 x 128 tokens) Qwen3-0.6B's 254 tensors (28 blocks of
9) took FSDP2's step 13.9-14.0 ms of host where llama3.2-1b's 114 (16 of 7) took 5.0-6.7, 2.1-2.8 times for 2.2
times the tensors and 1.75 times the blocks. So the optimizer's term per block is scaled by the block's tensors
over the reference block's: Llama's 7 (qkv, out, gate, up, down, two norms), Qwen2's 8 (qkv's bias), Qwen3's 9
(the q and k norms), GPT-2's 12 (four Linears and two LayerNorms, each with a bias).

Compiled blocks are one graph each (Dynamo's guards, then Inductor's kernels): their host terms are per block as
measured ("compiled/"), not per operator.
"""

from __future__ import annotations

from topowise.models.spec import ModelSpec

# (forward, backward) operators of one block, by mode (autocast True: fp32 weights under torch.autocast)
LLAMA_BLOCK_OPS = {True: (63, 94), False: (57, 84)}
QKV_BIAS_OPS = {True: (1, 4), False: (0, 3)}
QK_NORM_OPS = {True: (18, 40), False: (4, 6)}
GPT2_BLOCK_OPS = {True: (40, 78), False: (30, 66)}
PHASE_INDEX = {"forward": 0, "backward": 1}


def block_ops(model: ModelSpec, autocast: bool) -> tuple[float, float]:
    """(forward, backward) aten operators one block dispatches (the module docstring's table); a family the table
    does not hold counts as the reference block."""
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
    """Parameter tensors of one block (the module docstring); a family not known counts as the reference."""
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
