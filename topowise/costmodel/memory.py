"""Memory per GPU: model states as each strategy shards them, plus what estimators forget.

How PyTorch holds the training state (the bench builds exactly this):
- ddp / zero1: fp32 parameters; torch.autocast(bf16) casts each matmul weight to a bf16 copy in
  forward (kept alive by autograd until that matmul's backward); fp32 gradients, which with
  DDP(gradient_as_bucket_view=True) ARE the 25 MB all-reduce buckets (no extra copy; with False the
  buckets would add another 4 bytes per parameter); AdamW's exp_avg and exp_avg_sq in fp32.
  zero1 (ZeroRedundancyOptimizer) keeps only this rank's share of exp_avg and exp_avg_sq.
- zero2 / zero3 (FSDP2 fully_shard, MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)):
  fp32 sharded parameters, fp32 sharded gradients (created by the reduce-scatter, freed by
  zero_grad(set_to_none=True)), fp32 sharded AdamW states. Unsharded bf16 parameters live while
  a unit computes: zero2 (reshard_after_forward=False) keeps every unit unsharded from its forward
  to its backward; zero3 keeps the root (FSDP2 never reshards the root after forward) and two blocks
  (the one computing and the one prefetched). In backward a unit's bf16 unsharded gradient is cast
  to an fp32 reduce-scatter input.
- hsdp: as zero3 with the shard group in place of the world.

The peak is the largest of four moments (`phases`), each a sum of what is alive then:
  loss backward (all saved activations + the logits buffers), output-layer backward, a block's
  backward (with checkpointing: one block recomputed), and the optimizer step (all gradients + the
  foreach AdamW temporary). What the allocator reports (torch.cuda.max_memory_allocated) is
  `allocated_bytes`; peak_bytes adds allocator slack and the CUDA context (what nvidia-smi shows).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from topowise.costmodel.comm import block_tensors, root_params
from topowise.costmodel.flops import flops_params
from topowise.costmodel.profile import Profile
from topowise.models.spec import ModelSpec

GIB = 1024**3

# ZeRO (Rajbhandari et al. 2020, arXiv 1910.02054, section 3.1/5): mixed-precision Adam holds fp16
# parameters (2), fp16 gradients (2) and K = 12 bytes of optimizer state (fp32 params, m, v).
ZERO_PARAM_BYTES, ZERO_GRAD_BYTES, ZERO_K = 2, 2, 12
SHARDED_STATES = {"ddp": (), "zero1": ("opt",), "zero2": ("opt", "grad"), "zero3": ("opt", "grad", "param"),
                  "hsdp": ("opt", "grad", "param")}


def model_state_bytes(params: float, strategy: str, n: int) -> float:
    """Model-state bytes per GPU by the ZeRO paper's accounting (16 bytes per parameter in all):
    ddp 16P; zero1 4P + 12P/n; zero2 2P + 14P/n; zero3 (and hsdp with n = shard group) 16P/n."""
    sharded = SHARDED_STATES[strategy]
    p = ZERO_PARAM_BYTES * params / (n if "param" in sharded else 1)
    g = ZERO_GRAD_BYTES * params / (n if "grad" in sharded else 1)
    o = ZERO_K * params / (n if "opt" in sharded else 1)
    return p + g + o


def pytorch_state_bytes(params: float, strategy: str, n: int) -> dict[str, float]:
    """Model states per GPU as PyTorch holds them here (fp32 params, fp32 grads, fp32 m and v)."""
    sharded = SHARDED_STATES[strategy]
    return {
        "params": 4 * params / (n if "param" in sharded else 1),
        "grads": 4 * params / (n if "grad" in sharded else 1),
        "optimizer": 8 * params / (n if "opt" in sharded else 1),
    }


def activation_bytes_per_token_per_layer(model: ModelSpec, autocast: bool = False) -> float:
    """Bytes one transformer block saves for backward, per token, with fused (flash) attention.

    `autocast` True is ddp/zero1 (fp32 weights under torch.autocast): the embedding lookup returns fp32,
    so the residual stream is fp32 and every Linear casts its fp32 input to its own bf16 copy (the
    autocast cache holds weights only). False is FSDP2 with bf16 parameters: all bf16.
    r = residual bytes (4 or 2); h hidden, I intermediate, q = heads x head_dim, kv = kv heads x head_dim.

    Llama block (RMSNorm, GQA attention via scaled_dot_product_attention flash, SwiGLU), saved tensors:
      input RMSNorm       input x (r h) + rstd (4)                 [fused rms_norm saves input, rstd]
      q, k, v Linear      their input: 2h once (bf16), or 3 x 2h under autocast (three casts)
      RoPE                nothing per token (mul saves the cos/sin tables, shared)
      SDPA flash          q (2q), k (2kv), v (2kv), out (2q), logsumexp (4 x heads, fp32)
      o Linear            its input = SDPA's out (already counted); residual add saves nothing
      post-attn RMSNorm   input (r h) + rstd (4)
      gate, up Linear     their input: 2h once, or 2 x 2h under autocast
      SwiGLU              gate out (2I, silu's input), silu out (2I) and up out (2I) (the mul's
                          operands), product (2I, down's input)
    GQA makes k and v kv/q the size of q. GPT-2 blocks: LayerNorm saves input, mean, rstd; one c_attn
    input; GELU saves its input (2I) and the c_proj input (2I).
    """
    h, i = model.hidden_size, model.intermediate_size
    q, kv = model.num_heads * model.head_dim, model.num_kv_heads * model.head_dim
    r = 4 if autocast else 2
    lse = 4 * model.num_heads
    if model.family == "gpt2":
        norms = 2 * (r * h + 8)
        linear_inputs = 2 * (2 * h) * (1 if not autocast else 1)  # c_attn and c_fc, one input each
        attention = 2 * q + 2 * kv + 2 * kv + 2 * q + lse
        mlp = 2 * i + 2 * i
        return norms + linear_inputs + attention + mlp
    norms = 2 * (r * h + 4)
    linear_inputs = (3 + 2) * 2 * h if autocast else 2 * (2 * h)
    attention = 2 * q + 2 * kv + 2 * kv + 2 * q + lse
    mlp = 4 * 2 * i
    return norms + linear_inputs + attention + mlp


def block_input_bytes_per_token(model: ModelSpec, autocast: bool = False) -> float:
    """With activation checkpointing a block keeps only its input: the residual stream (r h)."""
    return (4 if autocast else 2) * model.hidden_size


def head_bytes_per_token(model: ModelSpec, autocast: bool = False) -> float:
    """Saved outside the blocks: final-norm input (r h) + rstd, output-layer input (bf16 2h), token ids
    and targets (int64, 16)."""
    r = 4 if autocast else 2
    return r * model.hidden_size + 4 + 2 * model.hidden_size + 16


def logits_bytes_per_token(model: ModelSpec) -> float:
    """At the loss backward, per token (V = vocab): 14 V bytes.

    bf16 logits (2V, held by the training step), log_softmax's saved fp32 output (4V; the fp32 upcast
    `logits.float()` itself is freed once log_softmax has run), nll_loss's dense fp32 gradient (4V) and
    log_softmax's fp32 input gradient (4V). Cast back to bf16 (2V), the gradient then flows on.
    """
    return 14.0 * model.vocab_size


def block_backward_temp_bytes_per_token(model: ModelSpec, autocast: bool = False) -> float:
    """Gradient temporaries alive inside one block's backward (approximate): three intermediate-size bf16
    gradients (product, act/up, gate) and two residual-stream gradients."""
    return 3 * 2 * model.intermediate_size + 2 * (4 if autocast else 2) * model.hidden_size


@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes per GPU at the peak moment (`peak_phase`). peak = allocated + overhead; allocated is the sum
    of params, grads, optimizer, activations, logits and buffers (what max_memory_allocated reports)."""

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

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "MemoryBreakdown":
        return cls(**data)


def estimate_memory(model: ModelSpec, strategy: str, shard_size: int, *, micro_batch: int, seq_len: int,
                    activation_checkpointing: bool, gpu_memory_bytes: int, profile: Profile) -> MemoryBreakdown:
    """Peak bytes per GPU for one training step. shard_size: n for zero1/2/3, the shard group for hsdp."""
    n = max(shard_size, 1)
    tokens = micro_batch * seq_len
    P = model.params
    autocast = strategy in ("ddp", "zero1")
    fsdp = not autocast
    states = pytorch_state_bytes(P, strategy, n)
    params_b, opt_b = states["params"], states["optimizer"]
    full_grads = states["grads"]
    # FSDP2 gradients appear during backward (set_to_none before); DDP's buckets are always there.
    grads_at_start = full_grads if autocast else 0.0

    per_layer = activation_bytes_per_token_per_layer(model, autocast)
    kept_per_layer = block_input_bytes_per_token(model, autocast) if activation_checkpointing else per_layer
    saved = tokens * (model.num_layers * kept_per_layer + head_bytes_per_token(model, autocast))
    recompute = tokens * per_layer if activation_checkpointing else 0.0
    block_temp = tokens * block_backward_temp_bytes_per_token(model, autocast)

    block, root = model.layer_params, root_params(model)
    h, v = model.hidden_size, model.vocab_size
    lm_head = v * h  # the output layer's weight (the embedding when tied)
    largest_block_tensor = max(block_tensors(model))
    buffers: dict[str, float] = {}
    if autocast:
        norm_params = model.num_layers * 2 * h + h
        buffers["autocast bf16 weight copies"] = 2 * (flops_params(model) - norm_params)
        weight_grad_out = 6 * lm_head  # bf16 weight gradient + its fp32 cast, before landing in the bucket
        weight_grad_block = 6 * largest_block_tensor
    elif strategy == "zero2":
        buffers["unsharded bf16 params (all units)"] = 2 * P
        weight_grad_out = 2 * root  # the root's unsharded bf16 gradient, reduce-scattered at the end
        weight_grad_block = 2 * root + 2 * block + 4 * block + 4 * block  # + bf16 grad, fp32 RS in, RS in flight
    else:  # zero3, hsdp
        buffers["unsharded bf16 params (root + 2 blocks)"] = 2 * root + 2 * 2 * block
        weight_grad_out = 2 * root
        weight_grad_block = 2 * root + 2 * block + 4 * block + 4 * block
    buffer_total = sum(buffers.values())

    # Each moment: (grads, activations, logits, extra buffers); params, optimizer, buffers always.
    phases = {
        "loss backward": (grads_at_start, saved, tokens * logits_bytes_per_token(model), 0.0),
        "output-layer backward": (grads_at_start, saved, tokens * 4 * v, weight_grad_out),
        "block backward": (full_grads if autocast else 0.5 * full_grads, saved + recompute + block_temp, 0.0,
                           weight_grad_block),
        # foreach AdamW: one fp32 temporary the size of the local states (exp_avg_sq.sqrt())
        "optimizer step": (full_grads, 0.0, 0.0, opt_b / 2 - buffer_total),
    }
    totals = {k: params_b + opt_b + buffer_total + sum(vals) for k, vals in phases.items()}
    phase = max(totals, key=totals.get)
    grads_b, acts_b, logits_b, extra = phases[phase]
    allocated = totals[phase]
    buf = dict(buffers)
    if phase == "optimizer step":
        buf = {"AdamW foreach temporary": opt_b / 2}
    elif extra:
        buf["weight-gradient transients"] = extra
    slack = profile.allocator_slack * allocated
    overhead = slack + profile.cuda_context_bytes
    return MemoryBreakdown(
        peak_bytes=int(allocated + overhead), params_bytes=int(params_b), grads_bytes=int(grads_b),
        optimizer_bytes=int(opt_b), activations_bytes=int(acts_b), logits_bytes=int(logits_b),
        buffers_bytes=int(sum(buf.values())), overhead_bytes=int(overhead), gpu_memory_bytes=int(gpu_memory_bytes),
        allocated_bytes=int(allocated), cuda_context_bytes=int(profile.cuda_context_bytes),
        allocator_slack_bytes=int(slack), peak_phase=phase, buffers={k: int(x) for k, x in buf.items()},
    )


def fits(memory: MemoryBreakdown, profile: Profile) -> bool:
    """Peak within GPU memory less the profile's headroom."""
    return memory.peak_bytes <= memory.gpu_memory_bytes * (1.0 - profile.memory_headroom)
