"""Memory per GPU: model states as each strategy shards them, the activations, and the moment they peak
(docs/costmodel.md, section 5, has the derivation and the measurements):

    peak_bytes = allocated x (1 + allocator_slack) + cuda_context_bytes + first steps' extra (DDP: 4P on step 2)
    reserved   = the same with FSDP2's own slack (Profile.fsdp_allocator_slack): what nvidia-smi shows (reserved_bytes)
    allocated  = max over moments of (params + optimizer + grads + activations + logits + buffers + cuBLAS workspace)
    fits       = peak_bytes <= GPU memory x (1 - memory_headroom)

    P parameters, n the shard group     params   grads               AdamW m, v   besides
    ddp                                 fp32 4P  fp32 4P (= buckets)  8P           autocast's bf16 weight copies
    zero1 (ZeroRedundancyOptimizer)     4P       4P                   8P/n         as ddp
    zero2, zero3, hsdp (FSDP2)          4P/n     4P/n (in backward)   8P/n         the bf16 units being computed

Moments (`phases`): the loss's backward, the output layer's, the first block's, with FSDP2 the last block's, and
the end of the backward.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from topowise.costmodel.comm import block_tensors, root_params
from topowise.costmodel.flops import flops_params
from topowise.costmodel.kernels import (
    SCORE_SAVED_BYTES,
    fp8_linear_params,
    loss_memory_bytes,
    unfused_score_elements_per_token,
)
from topowise.costmodel.profile import Profile
from topowise.models.spec import ModelSpec
from topowise.run import Run, Strategy


def pytorch_state_bytes(params: float, strategy: Strategy, n: int) -> dict[str, float]:
    """Model states per GPU as PyTorch holds them here (fp32 params, fp32 grads, fp32 m and v), each
    split over the n GPUs of the shard group where the strategy shards it. FSDP2 keeps the fp32
    parameters sharded for zero2 too: what zero2 keeps whole from forward to backward is the unsharded
    bf16 copy (a buffer in estimate_memory), the ZeRO paper's fp16 parameters."""
    return {
        "params": 4 * params / (n if strategy.fsdp else 1),
        "grads": 4 * params / (n if "gradients" in strategy.sharded else 1),
        "optimizer": 8 * params / (n if "optimizer" in strategy.sharded else 1),
    }


def activation_bytes_per_token_per_layer(model: ModelSpec, autocast: bool = False,
                                         gqa_expanded: bool = False, compiled: bool = False) -> float:
    """Bytes one transformer block saves for backward, per token, with fused (flash) attention.

    Matches the transformer `bench train` builds (models/transformer.py): one fused qkv Linear, gate and
    up as two Linears, F.rms_norm, rotary (q, k and a copy of v in their own tensors), k/v at their
    own head count handed to F.scaled_dot_product_attention(enable_gqa=True) (cuDNN or flash, which read
    each kv head for its group). `autocast` True is ddp/zero1 (fp32 weights under torch.autocast): the
    embedding lookup returns fp32, so the residual stream is fp32, rms_norm runs in fp32 (autocast's fp32
    list) and each Linear saves its own bf16 cast of its input. False is FSDP2
    with bf16 parameters: everything bf16. r = residual bytes (4 or 2); h hidden, I intermediate,
    q = heads x head_dim, kv = kv heads x head_dim, H heads.

    Llama block, saved tensors (bytes per token):
      attention RMSNorm   input x (r h) + rstd (4, fp32)        [fused rms_norm saves input and rstd]
      qkv Linear          its bf16 input (2h)                   [the qkv output itself is not kept]
      rotary              nothing per token (the complex product keeps its table: `rope_bytes`)
      SDPA flash          q (2q), k and v (2kv each; 2q each with gqa_expanded, as when they are
                          repeated to every query head first), out (2q), logsumexp (4H)
      out Linear          its input = SDPA's out (counted); residual add saves nothing
      MLP RMSNorm         input (r h) + rstd (4)
      gate, up Linears    their bf16 input (2h; under autocast each Linear casts the fp32 norm output
                          itself, so each keeps its own copy: 4h)
      SwiGLU              gate and up outputs (2I each: silu keeps gate's, the mul keeps up's),
                          silu output (2I), product (2I, down's input)
      q and k norms       Qwen3 (qk_norm): rms_norm over each head of q and k before rotary saves its input
                          and rstd (4 per head): in bf16 the input is a view of the qkv output, which it
                          keeps whole (2 (q + 2 kv)); under autocast (a bf16 input, an fp32 weight)
                          F.rms_norm is PyTorch's composite, not the fused kernel: it keeps its fp32 upcast
                          of q and k and the normalised product, 8 (q + kv) (measured; the ops read in
                          research/2026-12-03-h200x1/qk-norm/run47; the emulation of
                          tests/unit/test_costmodel_memory.py finds half of it); compiled, 2 (q + 2 kv)
                          in either precision
    GPT-2 block: two LayerNorms (input r h + mean and rstd 8), c_attn and c_fc inputs (2h each),
    q, k, v (views of the c_attn output, 6h), out (2h), logsumexp, GELU input (2I), c_proj input (2I).

    `compiled` (torch.compile of each block): less by `compiled_saved_less` (below).
    """
    h, i = model.hidden_size, model.intermediate_size
    q, kv = model.num_heads * model.head_dim, model.num_kv_heads * model.head_dim
    r = 4 if autocast else 2
    lse = 4 * model.num_heads
    less = compiled_saved_less(model, under_ddp=autocast) if compiled else 0.0
    if model.family == "gpt2":
        return 2 * (r * h + 8) + 2 * (2 * h) + 6 * h + 2 * h + lse + 2 * i + 2 * i - less
    k_and_v = 2 * (2 * q if gqa_expanded else 2 * kv)
    norms = 2 * (r * h + 4)
    linear_inputs = 2 * (2 * h) + (2 * h if autocast else 0)
    attention = 2 * q + k_and_v + 2 * q + lse
    mlp = 4 * i + 2 * i + 2 * i
    return norms + linear_inputs + attention + mlp + qk_norm_bytes_per_token(model, autocast and not compiled) - less


def qk_norm_bytes_per_token(model: ModelSpec, autocast: bool) -> float:
    """What a Qwen3 block's q and k norms save per token (activation_bytes_per_token_per_layer); compiled, the
    block keeps the bf16 form under autocast too (measured, run46), so the caller passes autocast False."""
    if not model.qk_norm:
        return 0.0
    q, kv = model.num_heads * model.head_dim, model.num_kv_heads * model.head_dim
    rstd = 4 * (model.num_heads + model.num_kv_heads)
    # under autocast measured 8 (q + kv) (one H200, research/2026-12-03-h200x1/head-dim/run46): PyTorch's
    # composite rms_norm keeps its fp32 upcast (for pow and the product by rstd) and that product (for the product
    # by the weight) (qk-norm/run47, norm_probe.txt)
    return (8 * (q + kv) if autocast else 2 * (q + 2 * kv)) + rstd


# DDP's gradient buckets as bench train sets them (torch's defaults: 25 MiB, and 1 MiB for the first one,
# torch.distributed._DEFAULT_FIRST_BUCKET_BYTES). Under torch.compile Dynamo's DDPOptimizer splits every
# graph it compiles inside a DDP module where these buckets end (torch/_dynamo/backends/distributed.py).
DDP_BUCKET_BYTES = 25 * 2**20
DDP_FIRST_BUCKET_BYTES = 2**20


def block_ops(model: ModelSpec) -> list[tuple[str, int]]:
    """One block's forward as Dynamo traces it, coarsely: (operation, bytes of the fp32 parameters it
    takes), in order, named as Block names them. "attention" stands for everything between the qkv and out
    projections."""
    h, i = model.hidden_size, model.intermediate_size
    q, kv = model.num_heads * model.head_dim, model.num_kv_heads * model.head_dim
    if model.family == "gpt2":
        return [("attn_norm", 8 * h), ("qkv", 4 * (3 * h * h + 3 * h)), ("attention", 0), ("out", 4 * (h * h + h)),
                ("add", 0), ("mlp_norm", 8 * h), ("up", 4 * (i * h + i)), ("activation", 0),
                ("down", 4 * (h * i + h)), ("add", 0)]
    bias = 4 * (q + 2 * kv) if model.qkv_bias else 0
    qk_norms = 4 * 2 * model.head_dim if model.qk_norm else 0
    return [("attn_norm", 4 * h), ("qkv", 4 * (q + 2 * kv) * h + bias), ("attention", qk_norms), ("out", 4 * q * h),
            ("add", 0), ("mlp_norm", 4 * h), ("gate", 4 * i * h), ("activation", 0), ("up", 4 * i * h),
            ("mul", 0), ("down", 4 * h * i), ("add", 0)]


def ddp_compiled_pieces(model: ModelSpec) -> list[list[str]]:
    """The pieces DDPOptimizer compiles one block in, in forward order. It walks the graph backwards (the
    order gradients become ready), adding each operation's parameters to a bucket, and starts a new piece
    at the operation after one that filled the bucket (the first bucket, the block's last operations,
    fills at 1 MiB, the others at 25 MiB); a first piece without parameters joins the next."""
    pieces: list[list[str]] = [[]]
    size = 0
    for name, nbytes in reversed(block_ops(model)):
        if size >= (DDP_FIRST_BUCKET_BYTES if len(pieces) == 1 else DDP_BUCKET_BYTES):
            pieces.append([])
            size = 0
        pieces[-1].append(name)
        size += nbytes
    if len(pieces) > 1 and size == 0:
        pieces[-2].extend(pieces.pop())
    return [list(reversed(piece)) for piece in reversed(pieces)]


def compiled_saved_less(model: ModelSpec, under_ddp: bool) -> float:
    """Bytes per token one compiled block saves for backward fewer than eager (bench train's --compile).

    Inductor's partitioner recomputes cheap outputs in the backward instead of saving them, but only
    inside one compiled graph: what crosses from one graph to the next is saved as eager saves it. Under
    DDP (ddp, zero1) the block is compiled in the pieces `ddp_compiled_pieces` gives; under FSDP2 whole.
      SiLU's output (2I) is recomputed from gate's when SiLU and the product are in one graph (GPT-2's
      GELU output is kept);
      under autocast (ddp, zero1) gate and up each cast the MLP norm's fp32 output to bf16 in eager (two
      copies, 2h each); in one graph the two casts are one (2h).
    Measured with research/2026-12-02-h200x1/scripts/saved_bytes.py --setting model
    (research/2026-12-03-h200x1/compiled-memory).
    A block compiled whole under autocast (no DDP; bench train has no such case) saves 2h more again."""
    h, i = model.hidden_size, model.intermediate_size
    pieces = ddp_compiled_pieces(model) if under_ddp else [[name for name, _ in block_ops(model)]]
    piece = {name: k for k, names in enumerate(pieces) for name in names if name != "add"}
    if model.family == "gpt2":
        return 0.0
    activation = 2 * i if piece["activation"] == piece["mul"] else 0
    shared_cast = 2 * h if under_ddp and piece["gate"] == piece["up"] else 0
    return float(activation + shared_cast)


def rope_bytes(model: ModelSpec, seq_len: int) -> float:
    """Every block builds its complex64 rotary table (seq_len x head_dim / 2, 8 bytes each) from the fp32
    cos and sin, and its products keep it for backward: one table per block."""
    return 0.0 if model.family == "gpt2" else model.num_layers * 8 * seq_len * model.head_dim / 2


def block_input_bytes_per_token(model: ModelSpec, autocast: bool = False) -> float:
    """With activation checkpointing a block keeps only its input: the residual stream (r h)."""
    return (4 if autocast else 2) * model.hidden_size


def selective_kept_bytes_per_token_per_layer(model: ModelSpec, autocast: bool = False) -> float:
    """What a block keeps under per-op selective checkpointing (measure/strategies.py's policy, torchtitan's:
    every matmul output but the 2nd, 4th, ... of the block's forward): its input (r h) and the outputs
    of the operators the policy saves and of no other, per token:
      qkv matmul (1st of the Llama block's 5)   2 (q + 2 kv)
      SDPA                                      out 2q, logsumexp 4H
      gate matmul (3rd)                         2I
      down matmul (5th)                         2h (kept though no backward reads it, as torchtitan's)
    The out and up matmuls (2nd and 4th) and the cheap ops (norms, rotary, v's copy, SiLU, the product,
    residual adds, autocast's casts) are recomputed in the backward. GPT-2's block has four matmuls:
    c_attn (3h) and c_fc (2I: its I outputs) kept, out and c_proj recomputed."""
    h, i = model.hidden_size, model.intermediate_size
    q, kv = model.num_heads * model.head_dim, model.num_kv_heads * model.head_dim
    r = 4 if autocast else 2
    first_mm = 2 * (q + 2 * kv)
    mlp_mms = 2 * i if model.family == "gpt2" else 2 * i + 2 * h
    return r * h + first_mm + 2 * q + 4 * model.num_heads + mlp_mms


def selective_recompute_bytes_per_token(model: ModelSpec, autocast: bool = False) -> float:
    """Per-op selective checkpointing: what one block's backward recomputes and holds at once (its
    activations less what was kept): the norms' outputs and rstd (2 x (2h + 4)), rotated q and k
    (2q + 2kv), v's copy (2kv), the residual after attention (r h), SiLU's output and the product (4I),
    and in the Llama block up's output (2I)."""
    h, i = model.hidden_size, model.intermediate_size
    q, kv = model.num_heads * model.head_dim, model.num_kv_heads * model.head_dim
    r = 4 if autocast else 2
    up = 0 if model.family == "gpt2" else 2 * i
    return 2 * (2 * h + 4) + 2 * q + 4 * kv + r * h + 4 * i + up


def checkpointed_blocks(run: Run) -> int:
    """Blocks recomputed whole in the backward: all with "full", every k-th (0, k, 2k, ...) with
    selective option k, none otherwise."""
    layers = run.model.num_layers
    if run.checkpointing == "full":
        return layers
    if run.checkpointing == "selective" and run.selective_ac_option != "op":
        return -(-layers // int(run.selective_ac_option))
    return 0


def saved_activation_bytes_per_token(run: Run, autocast: bool) -> tuple[float, float]:
    """(bytes every block together keeps for backward, bytes one block's backward recomputes at once),
    per token, under the run's checkpointing mode."""
    model = run.model
    per_layer = activation_bytes_per_token_per_layer(model, autocast, compiled=run.compile) + score_bytes_per_token(run)
    if run.per_op_checkpointing:
        return (model.num_layers * selective_kept_bytes_per_token_per_layer(model, autocast),
                selective_recompute_bytes_per_token(model, autocast))
    whole = checkpointed_blocks(run)
    kept = whole * block_input_bytes_per_token(model, autocast) + (model.num_layers - whole) * per_layer
    return kept, per_layer if whole else 0.0


def score_bytes_per_token(run: Run) -> float:
    """Unfused attention: what one layer keeps of its scores per token (kernels.SCORE_SAVED_BYTES per score element,
    heads x sequence of them); 0 with flash attention."""
    if run.attention != "unfused":
        return 0.0
    return SCORE_SAVED_BYTES * unfused_score_elements_per_token(run.model, run.seq_len) / run.model.num_layers


def head_bytes_per_token(model: ModelSpec, autocast: bool = False) -> float:
    """Saved outside the blocks: final-norm input (r h) + rstd, output-layer input (bf16 2h), token ids
    and targets (int64, 16)."""
    r = 4 if autocast else 2
    return r * model.hidden_size + 4 + 2 * model.hidden_size + 16


def logits_bytes_per_token(model: ModelSpec) -> float:
    """At the loss backward, per token (V = vocab): 12 V bytes.

    The step computes `F.cross_entropy(logits.float(), targets)` and deletes the bf16 logits before
    backward, so alive are: log_softmax's saved fp32 output (4V; the fp32 upcast itself is freed once
    log_softmax has run), nll_loss's dense fp32 input gradient (4V) and log_softmax's fp32 input
    gradient (4V). In forward the moment is smaller: bf16 logits 2V + fp32 upcast 4V + output 4V.
    """
    return 12.0 * model.vocab_size


def block_backward_temp_bytes_per_token(model: ModelSpec, autocast: bool = False) -> float:
    """Gradient temporaries inside one block's backward (approximate): at the SwiGLU backward the gate and
    up output gradients (2I each), plus two residual-stream gradients."""
    return 4 * model.intermediate_size + 2 * (4 if autocast else 2) * model.hidden_size


def autocast_cast_params(model: ModelSpec) -> int:
    """Parameters autocast casts to bf16 in forward: every Linear weight and bias, the output layer
    included (tied or not); not the embedding lookup, not the norms (rms_norm/layer_norm run in fp32)."""
    norms = model.num_layers * (4 if model.family == "gpt2" else 2) * model.hidden_size + model.final_norm_params
    return flops_params(model) - norms


def autocast_block_cast_params(model: ModelSpec) -> float:
    """Of autocast_cast_params, one block's (the output layer's weight, vocab x hidden, set apart)."""
    return (autocast_cast_params(model) - model.vocab_size * model.hidden_size) / model.num_layers


def recast_blocks(run: Run) -> int:
    """Blocks whose forward checkpointing reruns in the backward: every block under per-op selective (its
    cheap ops), each block recomputed whole otherwise. Under autocast their bf16 weight copies are not
    kept for backward either (the cast is a cheap op): they live in autocast's cache until the forward
    leaves autocast (torch.autocast's __exit__ clears it), and the rerun casts the weights again."""
    if run.per_op_checkpointing:
        return run.model.num_layers
    return checkpointed_blocks(run)


@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes per GPU at the peak moment (`peak_phase`). allocated is the sum of params, grads, optimizer,
    activations, logits and buffers: what max_memory_allocated reports over a steady step. peak =
    allocated + overhead (allocator slack, CUDA context) + the first steps' extra (DDP's bucket rebuild)."""

    peak_bytes: int
    params_bytes: int
    grads_bytes: int
    optimizer_bytes: int
    activations_bytes: int
    logits_bytes: int
    buffers_bytes: int
    overhead_bytes: int
    gpu_memory_bytes: int
    allocated_bytes: int = 0
    cuda_context_bytes: int = 0
    allocator_slack_bytes: int = 0
    peak_phase: str = ""
    buffers: dict = field(default_factory=dict)  # name -> bytes, the parts of buffers_bytes
    # DDP's bucket rebuild after step 1: old and new buckets alive on step 2, one more fp32 gradient copy
    # (+4.60 GiB for llama3.2-1b on 2x H200: research/2026-11-30-h200x2/run2/train.jsonl)
    first_steps_extra_bytes: int = 0  # counted in peak_bytes, not in allocated_bytes (the steady step)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> MemoryBreakdown:
        return cls(**data)


def estimate_memory(run: Run, *, gpu_memory_bytes: int, profile: Profile) -> MemoryBreakdown:
    """Peak bytes per GPU for one training step of a placed run."""
    model, seq_len = run.model, run.seq_len
    tokens = run.tokens
    P = model.params
    autocast = run.spec.autocast
    states = pytorch_state_bytes(P, run.spec, run.shard_size)
    params_b, opt_b, full_grads = states["params"], states["optimizer"], states["grads"]
    # FSDP2's sharded gradients appear during backward (zero_grad(set_to_none=True) freed them);
    # DDP's buckets, which the gradients are views of, are always there.
    grads_at_start = full_grads if autocast else 0.0

    kept, recomputed = saved_activation_bytes_per_token(run, autocast)
    saved = tokens * (kept + head_bytes_per_token(model, autocast)) + rope_bytes(model, seq_len)
    recompute = tokens * recomputed
    saved, recompute = saved * profile.activation_scale, recompute * profile.activation_scale  # 1 unless calibrated
    block_temp = tokens * block_backward_temp_bytes_per_token(model, autocast)

    block, root = model.layer_params, root_params(model)
    out_weight = model.vocab_size * model.hidden_size  # the output layer's weight (the embedding when tied)
    if autocast:
        # autocast's cache holds every weight's bf16 copy to the forward's end; from the loss on only the
        # copies autograd saved are alive, and a block being recomputed holds its own again
        recast = recast_blocks(run) * autocast_block_cast_params(model)
        all_copies = {"autocast bf16 weight copies": 2 * autocast_cast_params(model)}
        base: dict[str, float] = {"autocast bf16 weight copies": 2 * (autocast_cast_params(model) - recast)}
        at_loss = base
        out_grad = {"output-layer weight gradient (bf16 + fp32 cast)": 6 * out_weight}
        block_grad: dict[str, float] = {"block weight gradient (bf16 + fp32 cast)": 6 * max(block_tensors(model))}
        if recast:
            block_grad["recomputed block's bf16 weight copies"] = 2 * autocast_block_cast_params(model)
        end = {"embedding gradient (fp32, dense)": 4 * model.vocab_size * model.hidden_size}
    else:
        if not run.spec.reshard_after_forward:
            base = {"unsharded bf16 params (every unit, forward to backward)": 2 * P}
            at_loss = base
            # FSDP2 reshards each unit after its own backward (reshard_after_backward, on unless set off):
            # when the last block computes, only it and the root (whose backward ends the step) are unsharded
            last: dict[str, float] = {"unsharded bf16 params (root + the block)": 2 * root + 2 * block}
        else:
            base = {"unsharded bf16 params (root + 2 blocks)": 2 * root + 2 * 2 * block}
            # the bench hands reshard_after_forward=True to the root too, and FSDP2 then reshards it after
            # forward (it keeps the root gathered only when the argument is left out): at the loss's
            # backward no unit is gathered (docs/calibration.md, "What is alive at the peak")
            at_loss = {}
            last = base
        out_grad = {"root unsharded bf16 gradient": 2 * root}
        block_grad = {"root unsharded bf16 gradient": 2 * root,
                      "block gradient: bf16 + fp32 reduce-scatter input, one more in flight": 10 * block}
        # The root unit reduces last. FSDP2's post_backward reshards it (frees its unsharded bf16 params)
        # before reducing, and frees its bf16 gradient as soon as it is copied into the fp32 reduce-scatter
        # input (torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py post_backward,
        # _fsdp_collectives.py foreach_reduce): first the bf16 gradient and the input, then the input and
        # the output, which is the root's sharded gradient (docs/calibration.md, "The root unit at the end of
        # the backward").
        copy_in = {"root unsharded bf16 gradient": 2 * root, "root fp32 reduce-scatter input": 4 * root}
        end = {"root fp32 reduce-scatter input": 4 * root}

    # Each moment: grads, activations, logits, buffers alive (params and optimizer states always are).
    # Going down the blocks, each block's backward frees its saved activations and (FSDP2) adds its
    # sharded gradients: what is alive is linear in the block reached, so its largest is at the first
    # block's backward (every block's activations, no block's gradients) or the last one's (one block's
    # activations, every other block's gradients). DDP's gradients are there throughout.
    if run.precision == "fp8" and run.fp8_recipe == "rowwise" and run.spec.reshard_after_forward:
        # rowwise keeps each block's gathered bf16 weights from its forward to its backward (zero2 keeps every unit
        # gathered already); torchtitan measured +10.9 GiB over bf16 on Llama 3 8B, 8 H100; this term +13.0 GiB
        # (docs/costmodel.md)
        base = {**base, "fp8 rowwise: gathered bf16 block weights kept for backward": 2.0 * fp8_linear_params(model)}
        at_loss = {**at_loss, **base}
    at_loss_logits, at_output_logits = loss_memory_bytes(model, tokens, run.loss, logits_bytes_per_token(model))
    phases = {
        "loss backward": (grads_at_start, saved, at_loss_logits, at_loss),
        "output-layer backward": (grads_at_start, saved, at_output_logits, {**base, **out_grad}),
        "block backward": (grads_at_start, saved + recompute + block_temp, 0.0, {**base, **block_grad}),
        "end of backward": (full_grads, 0.0, 0.0, end),  # fused AdamW: no temporaries in the step
    }
    if autocast and recast:  # the logits just computed, in bf16, with every weight copy still cached
        phases["end of forward"] = (grads_at_start, saved, tokens * 2 * model.vocab_size, all_copies)
    if not autocast:
        # the root's own sharded gradient is not there yet while its input is filled
        phases["root gradient copy-in"] = (full_grads - full_grads * root / P, 0.0, 0.0, copy_in)
        layers = model.num_layers
        block_grads = full_grads * layers * model.layer_params / P
        phases["last block's backward"] = (block_grads * (layers - 1) / layers,
                                           tokens * kept / layers + recompute + block_temp, 0.0,
                                           {**last, **block_grad})
    return breakdown_at_peak(phases, params_b, opt_b, gpu_memory_bytes, profile,
                             first_steps_extra=full_grads if autocast else 0.0, workspace=CUBLAS_WORKSPACE_BYTES)


# PyTorch allocates cuBLASLt's workspace through its caching allocator, once per handle and stream, and keeps it: 32 MiB
# on compute capability 9 and later (pytorch/pytorch#120925, after the cuBLAS documentation's recommendation for Hopper;
# 4 MiB on large Ampere parts). Read alive at every peak of memory/run62 (research/2026-12-03-h200x1).
CUBLAS_WORKSPACE_BYTES = 32 * 2**20


def allocator_slack(run: Run, profile: Profile) -> float:
    """Reserved above allocated, a fraction of allocated, as a steady step shows it: FSDP2's (zero2, zero3, hsdp
    under PyTorch) is its own (Profile.fsdp_allocator_slack: its all-gather and reduce-scatter buffers come and go
    on their own streams each block), the rest Profile.allocator_slack."""
    return profile.fsdp_allocator_slack if run.spec.fsdp and run.engine == "pytorch" else profile.allocator_slack


def reserved_bytes(memory: MemoryBreakdown, run: Run, profile: Profile) -> int:
    """What nvidia-smi shows at the peak: the allocated peak x (1 + allocator_slack(run)), the CUDA context, the first
    steps' extra. peak_bytes, which `fits` reads, keeps Profile.allocator_slack: the cache FSDP2 keeps above it is
    given back (the caching allocator frees its cached blocks and retries before it raises out-of-memory), and no
    record here ran out of memory to say otherwise (docs/costmodel.md, "Reserved memory")."""
    return int(memory.allocated_bytes * (1 + allocator_slack(run, profile)) + memory.cuda_context_bytes
               + memory.first_steps_extra_bytes)


def breakdown_at_peak(phases: dict, params: float, optimizer: float, gpu_memory_bytes: float, profile: Profile,
                      first_steps_extra: float = 0.0, workspace: float = 0.0) -> MemoryBreakdown:
    """The breakdown at the largest of the `phases` (name -> (grads, activations, logits, {buffer: bytes}),
    each beside `params` and `optimizer`, and `workspace` bytes alive in every phase: cuBLAS's, for the models
    whose matmuls the model counts; a profiled model's measured peak has it already), with the allocator slack and
    CUDA context on top."""
    if workspace:
        phases = {k: (g, a, lg, {**b, "cuBLAS workspace": workspace}) for k, (g, a, lg, b) in phases.items()}
    totals = {k: params + optimizer + g + a + lg + sum(b.values()) for k, (g, a, lg, b) in phases.items()}
    phase = max(totals, key=lambda name: totals[name])
    grads_b, acts_b, logits_b, buffers = phases[phase]
    allocated = totals[phase]
    slack = profile.allocator_slack * allocated
    overhead = slack + profile.cuda_context_bytes
    return MemoryBreakdown(
        peak_bytes=int(allocated + overhead + first_steps_extra), params_bytes=int(params), grads_bytes=int(grads_b),
        optimizer_bytes=int(optimizer), activations_bytes=int(acts_b), logits_bytes=int(logits_b),
        buffers_bytes=int(sum(buffers.values())), overhead_bytes=int(overhead),
        gpu_memory_bytes=int(gpu_memory_bytes), allocated_bytes=int(allocated),
        cuda_context_bytes=int(profile.cuda_context_bytes), allocator_slack_bytes=int(slack), peak_phase=phase,
        buffers={k: int(x) for k, x in buffers.items()},
        first_steps_extra_bytes=int(first_steps_extra),
    )


def fits(memory: MemoryBreakdown, profile: Profile) -> bool:
    """Peak (the first steps' transient included: a job that runs out of memory on step 2 does not
    fit) within GPU memory less the profile's headroom."""
    return memory.peak_bytes <= memory.gpu_memory_bytes * (1.0 - profile.memory_headroom)
