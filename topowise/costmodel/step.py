"""Step time and memory of one run under PyTorch (DDP, ZeroRedundancyOptimizer, FSDP2). Each phase takes the
longer of the GPU's work and the host's time to issue it (docs/costmodel.md has each term's derivation):

    step         = max(host_fwd, gpu_fwd) + max(host_bwd, gpu_bwd) + max(host_opt, gpu_opt)
    gpu_fwd      = matmul_fwd + attention_fwd + bytes_fwd / hbm + exposed_fwd
    gpu_bwd      = matmul_bwd + attention_bwd + recompute + bytes_bwd / hbm + exposed_bwd
    gpu_opt      = ADAMW_FUSED_BYTES_PER_PARAM x params / shard group / hbm + after-step collectives
    host_p       = (host_s_per_layer[strategy/p] + block_host_s) x blocks + checkpointing_host_s

- matmul: each block Linear's GEMMs at rate x the share its shape reaches (gemm.py), the output layer at head_rate,
  the rest at rate; rate = peak x Profile.compute_efficiency (matmul_seconds).
- attention: FLASH_FORWARD_SHARE / FLASH_BACKWARD_SHARE of 7 L H Q T per token (flops.py) at Profile.attention_rate.
- recompute: what checkpointing reruns in the backward (recompute_flops_per_token, rerun_share).
- bytes: the fp32 loss (LOSS_*), the casts and copies a strategy makes per parameter (CAST_DOWN ... DEVICE_COPY,
  each at its own share of the rate) and the blocks' elementwise kernels (block_elementwise).
- hbm: the datasheet HBM bandwidth x Profile.hbm_efficiency.
- exposed: each phase's compute as a timeline beside its collectives (overlap.py, collectives.py).
- host_p x (1 -/+ Profile.host_spread) gives the range of a host-bound step.
"""

from __future__ import annotations

import math

from topowise import hardware
from topowise.costmodel import comm as comm_mod
from topowise.costmodel.collectives import strategy_collectives
from topowise.costmodel.elementwise import block_elementwise_bytes, qk_norm_bytes
from topowise.costmodel.flops import (
    FLASH_BACKWARD_SHARE,
    FLASH_FORWARD_SHARE,
    attention_flops_per_token,
    flops_params,
    training_flops_per_token,
)
from topowise.costmodel.gemm import block_linears, block_matmul_seconds
from topowise.costmodel.host_ops import extra_ops, optimizer_scale, per_op_s
from topowise.costmodel.kernels import (
    SCORE_BACKWARD_BYTES,
    SCORE_FORWARD_BYTES,
    fp8_activation_cast_bytes_per_token,
    fp8_peak_flops,
    fp8_weight_cast_bytes,
    loss_bytes_per_logit,
    unfused_score_elements_per_token,
)
from topowise.costmodel.memory import (
    activation_bytes_per_token_per_layer,
    autocast_block_cast_params,
    checkpointed_blocks,
    estimate_memory,
    fits,
    recast_blocks,
)
from topowise.costmodel.overlap import ddp_backward, fsdp_backward, fsdp_forward
from topowise.costmodel.prediction import PhaseCost, Prediction, TimeBreakdown
from topowise.costmodel.profile import Profile
from topowise.errors import UsageError
from topowise.run import Run

ADAMW_FUSED_BYTES_PER_PARAM = 28  # fused AdamW: reads p, g, exp_avg, exp_avg_sq (16); writes p, exp_avg, exp_avg_sq
# The copies a strategy makes per parameter: (bytes per element, rate as a share of the memory-bound rate),
# each timed alone on one H200 (research/2026-12-02-h200x1/scripts/copy_rates.py,
# research/2026-12-02-h200x1/copies/run19)
CAST_DOWN = (6, 1.087)  # fp32 -> bf16: autocast's weight cast, FSDP2's shard into the all-gather buffer
CAST_UP = (6, 0.528)  # bf16 -> fp32: autocast's weight gradient back to the parameter's dtype
BUCKET_COPY = (8, 1.093)  # DDP: torch.mul(grad, 1 / world, out=bucket view)
CHUNK_CAT = (6, 0.487)  # FSDP2: the bf16 gradients into the fp32 reduce-scatter input
COPY_OUT = (4, 1.035)  # FSDP2: the all-gather output into the parameters (split_with_sizes_copy)
DEVICE_COPY = (8, 1.188)  # a device-to-device copy of fp32: NCCL's reduce-scatter over one rank


def at_rate(copy: tuple[float, float]) -> float:
    """A copy's bytes per element as bytes at the memory-bound rate (Profile.hbm_efficiency's)."""
    nbytes, share = copy
    return nbytes / share


AUTOCAST_BYTES_PER_PARAM = at_rate(CAST_DOWN) + at_rate(CAST_UP) + at_rate(BUCKET_COPY)
AUTOCAST_FORWARD_BYTES_PER_PARAM = at_rate(CAST_DOWN)  # of which the forward's: the weight cast
FSDP_COPY_OUT_BYTES_PER_PARAM = at_rate(COPY_OUT)  # per all-gather pass
FSDP_CAST_BYTES_PER_SHARD_PARAM = at_rate(CAST_DOWN)  # per all-gather pass, fp32 shard into the bf16 buffer
FSDP_REDUCE_COPY_IN_BYTES_PER_PARAM = at_rate(CHUNK_CAT)  # per step
ONE_RANK_REDUCE_SCATTER_BYTES_PER_PARAM = at_rate(DEVICE_COPY)  # per step, one GPU only
LOSS_BYTES_PER_LOGIT = 48  # fp32 cross-entropy forward and backward (aten/src/ATen/native/cuda/SoftMax.cu)
LOSS_FORWARD_BYTES_PER_LOGIT = 2 + 4 + 12 + 4  # of which the forward's: upcast, log_softmax
ELEMENTWISE_FORWARD_SHARE = 1 / 2  # of the saved-bytes form's elementwise traffic, the forward's (block_elementwise)
GEMM_ALIGN_ELEMENTS = 8  # bf16 rows of 16 bytes: what cuBLAS's aligned kernels need (else an `align1` CUTLASS kernel)
# the output layer's GEMMs off that alignment, timed alone on one H200 at hidden 768 and 2048: 0.121 and 0.129 of
# the datasheet rate, mean 0.125 (research/2026-12-02-h200x1/scripts/head_gemm.py,
# research/2026-12-03-h200x1/gpt2/run45)
MISALIGNED_GEMM_EFFICIENCY = 0.125


def block_elementwise(run: Run, profile: Profile, autocast: bool) -> tuple[float, float]:
    """(forward, backward) bytes at the memory-bound rate of all blocks' elementwise kernels in one step: the bytes
    they move (elementwise.py) x Profile.activation_traffic (compiled: compiled_activation_traffic), and Qwen3's
    eager q/k norms at what they took alone. A profile of the "saved-bytes" form (fitted before the kernels were
    counted) is read as it was fitted: its traffic x the bytes the blocks save for backward (eager's, compiled or
    not), half of it in the forward."""
    traffic = profile.compiled_activation_traffic if run.compile else profile.activation_traffic
    per_step = run.tokens * run.model.num_layers
    if profile.elementwise_form == "saved-bytes":
        act = traffic * activation_bytes_per_token_per_layer(run.model, autocast=autocast) * per_step
        return act * ELEMENTWISE_FORWARD_SHARE, act * (1 - ELEMENTWISE_FORWARD_SHARE)
    fwd, bwd = block_elementwise_bytes(run.model, autocast, run.compile)
    norms_fwd, norms_bwd = (0.0, 0.0) if run.compile else qk_norm_bytes(run.model, autocast, profile.hbm_efficiency)
    return (traffic * fwd + norms_fwd) * per_step, (traffic * bwd + norms_bwd) * per_step


def head_rate(model, rate: float, peak: float) -> float:
    """The output layer's matmul rate: `rate`, or MISALIGNED_GEMM_EFFICIENCY x peak when the vocabulary is
    not a multiple of GEMM_ALIGN_ELEMENTS (nanoGPT pads GPT-2's to 50304 for this reason)."""
    return rate if model.vocab_size % GEMM_ALIGN_ELEMENTS == 0 else min(rate, peak * MISALIGNED_GEMM_EFFICIENCY)


def matmul_seconds(run: Run, rate: float, output_rate: float, sms: int,
                   linear_rate: float | None = None) -> tuple[float, float]:
    """(forward, backward) seconds of the matmuls in one step, the backward's with what checkpointing recomputes.
    Each block Linear's passes at `linear_rate` (fp8's; default `rate`) x the share its shape reaches on `sms` SMs ^
    the power limit's exponent (gemm.linear_seconds; every pass at that rate when sms is 0), the output layer at
    `output_rate`, the rest of the parameters' FLOPs (norms) at `rate`."""
    model, tokens = run.model, run.tokens
    layers, head = model.num_layers, 2.0 * model.hidden_size * model.vocab_size * tokens
    shapes, linears = block_linears(model), block_matmul_seconds(model, tokens, linear_rate or rate, sms)
    block_flops = 2.0 * tokens * sum(out * inp for out, inp in shapes.values())
    other = 2.0 * flops_params(model) * tokens - head - layers * block_flops
    forward = layers * sum(f for f, _, _ in linears.values()) + head / output_rate + other / rate
    backward = layers * sum(dx + dw for _, dx, dw in linears.values()) + 2 * head / output_rate + 2 * other / rate
    # checkpointing's rerun: the forward passes of the Linears it recomputes, the rest of its FLOPs at `rate`
    if run.per_op_checkpointing:
        rerun = ("out",) if model.family == "gpt2" else ("out", "up")  # as recompute_flops_per_token counts them
        rerun_s = layers * sum(linears[name][0] for name in rerun)
        rerun_flops = layers * 2.0 * tokens * sum(math.prod(shapes[name]) for name in rerun)
    else:
        rerun_s = checkpointed_blocks(run) * sum(f for f, _, _ in linears.values())
        rerun_flops = checkpointed_blocks(run) * block_flops
    recompute = (recompute_flops_per_token(run) - recompute_attention_flops_per_token(run)) * tokens
    return forward, backward + rerun_s + (recompute - rerun_flops) / rate


def recompute_flops_per_token(run: Run) -> float:
    """FLOPs the backward spends recomputing, per token: a block's forward (2 x its parameters + the
    causal flash forward) for each block recomputed whole; per-op selective, of the matmuls it does
    not keep those whose output the backward needs again: the output projection of every block
    (2 q h; its output feeds the residual that the MLP's norm keeps) and in the Llama block up (2 h I;
    the product keeps it). The last matmul's output (down, GPT-2's c_proj) is needed by no backward."""
    model = run.model
    if run.per_op_checkpointing:
        up = 0 if model.family == "gpt2" else model.hidden_size * model.intermediate_size
        return 2.0 * model.num_layers * (model.num_heads * model.head_dim * model.hidden_size + up) \
            + recompute_attention_flops_per_token(run)
    block = 2.0 * model.layer_params + attention_shares(run)[0] * attention_flops_per_token(model, run.seq_len) \
        / model.num_layers
    return checkpointed_blocks(run) * block


def attention_shares(run: Run) -> tuple[float, float]:
    """(forward, backward) shares of attention_flops_per_token the GPU runs: the causal flash kernels' (flops.py), or
    unfused the full square, forward a third (QK^T, PV), backward two thirds (their four gradient GEMMs)."""
    if run.attention == "unfused":
        return 1.0 / 3.0, 2.0 / 3.0
    return FLASH_FORWARD_SHARE, FLASH_BACKWARD_SHARE


def unfused_score_bytes(run: Run) -> tuple[float, float]:
    """(forward, whole step) HBM bytes of the materialised scores (0 with flash attention): the forward, the backward
    and the forwards checkpointing reruns (kernels.SCORE_FORWARD_BYTES, SCORE_BACKWARD_BYTES)."""
    if run.attention != "unfused":
        return 0.0, 0.0
    scores = unfused_score_elements_per_token(run.model, run.seq_len) * run.tokens
    forward = SCORE_FORWARD_BYTES * scores
    return forward, forward * (1 + rerun_share(run)) + SCORE_BACKWARD_BYTES * scores


def rerun_share(run: Run) -> float:
    """Of the blocks' forward elementwise work, the share checkpointing runs again in the backward:
    per-op selective the cheap ops of every block (all of it), a block recomputed whole ("full", every k-th)
    its whole forward."""
    return 1.0 if run.per_op_checkpointing else checkpointed_blocks(run) / run.model.num_layers


def dispatch_autocast(run: Run) -> bool:
    """Whether the model dispatches its operators under autocast (fp32 weights): DDP and ZeRO-1 under PyTorch;
    FSDP2 and every DeepSpeed stage run it in bf16."""
    return run.spec.autocast and run.engine == "pytorch"


def block_host_s(run: Run, profile: Profile, phase: str) -> float:
    """Host seconds per block in a phase beyond the strategy's measured term (host_ops.py): in the forward and the
    backward the operators an eager block dispatches beyond the reference block's, in the mode it runs in
    (dispatch_autocast), at ddp's price per operator (compiled blocks: none, their terms are per block); in a PyTorch
    optimizer step, per parameter tensor beyond the reference block's."""
    if phase == "optimizer":
        if run.engine != "pytorch":  # DeepSpeed's step works on flat partitions: per step (deepspeed.py)
            return 0.0
        return profile.host_s(run.strategy, phase, run.compile) * (optimizer_scale(run.model) - 1.0)
    if run.compile:
        return 0.0
    return extra_ops(run.model, dispatch_autocast(run), phase) * per_op_s(profile.host_s("ddp", phase), phase)


def checkpointing_host_s(run: Run, profile: Profile, phase: str) -> float:
    """Host seconds checkpointing adds to a phase. A block recomputed whole ("full", every k-th): torch's
    checkpoint in its forward, and the rerun with checkpoint's hooks in the backward ("checkpoint/phase"
    per such block). Per-op selective: the policy's dispatch mode runs in Python for every operator of
    every block's forward and rerun ("selective-op/phase" per block). Measured at 128 tokens, where the
    host sets the step (Profile.host_s_per_layer)."""
    key = "selective-op" if run.per_op_checkpointing else "checkpoint"
    return recast_blocks(run) * float(profile.host_s_per_layer.get(f"{key}/{phase}", 0.0))


def recompute_attention_flops_per_token(run: Run) -> float:
    """Of recompute_flops_per_token, the attention's: its forward per block recomputed whole; per-op selective
    keeps a flash attention's output (nothing), and reruns an unfused attention's core, which keeps no scores."""
    if run.per_op_checkpointing:
        return attention_shares(run)[0] * attention_flops_per_token(run.model, run.seq_len) \
            if run.attention == "unfused" else 0.0
    return checkpointed_blocks(run) * attention_shares(run)[0] * attention_flops_per_token(run.model, run.seq_len) \
        / run.model.num_layers


def head_seconds(model, tokens: int, rate: float, hbm: float, loss: str = "plain") -> tuple[float, float]:
    """(forward, backward) seconds of the output layer's matmuls (at `rate`: head_rate's) and the loss over the
    vocabulary (fp32 unless fused: loss_bytes): the forward's last work and the backward's first, before any block's
    gradient exists."""
    matmul = 2.0 * model.vocab_size * model.hidden_size * tokens / rate
    logits = tokens * model.vocab_size
    forward, total = loss_bytes(loss)
    return matmul + forward * logits / hbm, 2 * matmul + (total - forward) * logits / hbm


def loss_bytes(loss: str) -> tuple[float, float]:
    """(forward, forward + backward) HBM bytes per logit of the run's loss (kernels.loss_bytes_per_logit)."""
    return loss_bytes_per_logit(loss, LOSS_FORWARD_BYTES_PER_LOGIT, LOSS_BYTES_PER_LOGIT)


def exposed_time(hideable_s: float, window_s: float, overlap: float) -> float:
    """What of `hideable_s` stays visible behind `window_s` of compute at overlap efficiency `overlap`."""
    inside = min(hideable_s, window_s)
    return max(hideable_s - window_s, 0.0) + (1.0 - overlap) * inside


def peak_flops(topology, profile: Profile) -> float:
    """A calibrated peak (CPU) or the datasheet's bf16 dense rate."""
    peak = profile.peak_flops or topology.gpu_spec.bf16_dense_flops
    if peak <= 0:
        raise UsageError(f"no datasheet peak for GPU {topology.gpus[0].name!r}: give --profile with a calibrated one")
    return peak


def linear_rate(run: Run, topology, profile: Profile) -> float | None:
    """The block Linears' best rate in fp8 (fp8 peak x Profile.fp8_compute_efficiency); None in bf16 (they run at
    the bf16 rate)."""
    if run.precision != "fp8":
        return None
    return fp8_peak_flops(topology.gpu_spec) * profile.fp8_compute_efficiency


def mfu_peak_flops(run: Run, topology, profile: Profile) -> float:
    """MFU's denominator: the dense peak of the precision the block GEMMs run in (fp8's with --precision fp8)."""
    return fp8_peak_flops(topology.gpu_spec) if run.precision == "fp8" else peak_flops(topology, profile)


def fp8_cast_bytes(run: Run) -> tuple[float, float]:
    """(forward, whole step) HBM bytes of fp8's casts and amax (kernels.py): the Linears' inputs in the forward (again
    in a recompute), their output gradients in the backward, the weights per gather pass (per step under DDP)."""
    if run.precision != "fp8":
        return 0.0, 0.0
    act_f, act_b = (x * run.tokens for x in fp8_activation_cast_bytes_per_token(run.model))
    weights = fp8_weight_cast_bytes(run.model, run.fp8_recipe, run.spec.fsdp, run.shard_size)
    passes = 2 if run.spec.reshard_after_forward else 1
    return act_f + weights, act_f * (1 + rerun_share(run)) + act_b + weights * passes


def predict_pytorch(run: Run, topology, profile: Profile) -> Prediction:
    """Step time and memory per GPU for a placed `run` (costmodel.predict.predict) on `topology`, whose
    links are the ones the run uses (NVLink taken away for fabric "pcie")."""
    model, tokens, autocast = run.model, run.tokens, run.spec.autocast
    peak = peak_flops(topology, profile)
    rate = peak * profile.compute_efficiency
    # the causal attention at its own measured rate (Profile.attention_rate), the matmuls at `rate`
    attention_rate = profile.attention_rate(model.head_dim, run.seq_len, peak, run.micro_batch, model.num_heads) or rate
    model_flops = training_flops_per_token(model, run.seq_len) * tokens
    attention = attention_flops_per_token(model, run.seq_len)
    recompute_attention = recompute_attention_flops_per_token(run)
    recompute_matmul = recompute_flops_per_token(run) - recompute_attention
    # the output layer's matmuls at their own rate where the vocabulary is misaligned (head_rate)
    output_rate = rate if profile.peak_flops else head_rate(model, rate, peak)  # peak_flops: a CPU's
    head_matmul = 2.0 * model.hidden_size * model.vocab_size
    slower = head_matmul * (1 / output_rate - 1 / rate)
    sms = topology.gpu_spec.sms if profile.gemm_form == "tiles" and not profile.peak_flops else 0
    fwd_matmul_s, bwd_matmul_s = matmul_seconds(run, rate, output_rate, sms, linear_rate(run, topology, profile))
    # unfused attention: its score GEMMs at the GEMM rate; flash: the causal kernels at their measured rate
    attention_at = rate if run.attention == "unfused" else attention_rate
    share_fwd, share_bwd = attention_shares(run)
    forward_s = fwd_matmul_s + share_fwd * attention / attention_at * tokens
    backward_s = bwd_matmul_s + (share_bwd * attention + recompute_attention) / attention_at * tokens
    compute_s = forward_s + backward_s

    # memory-bound passes (forward, backward bytes) and the optimizer step
    hbm = hardware.hbm_bytes_per_s(topology.gpu_spec.name) * profile.hbm_efficiency
    local_params = model.params / run.shard_size
    loss_forward, loss_total = loss_bytes(run.loss)
    loss_step_bytes = loss_total * tokens * model.vocab_size
    fwd_bytes: float = loss_forward * tokens * model.vocab_size
    if autocast:
        fwd_bytes += AUTOCAST_FORWARD_BYTES_PER_PARAM * model.params
        recast = recast_blocks(run) * autocast_block_cast_params(model)
        copy_bytes = (loss_step_bytes + AUTOCAST_BYTES_PER_PARAM * model.params
                      + AUTOCAST_FORWARD_BYTES_PER_PARAM * recast)
    else:  # every unit is gathered for the forward; zero3 and hsdp gather the blocks again in backward
        per_gather = FSDP_COPY_OUT_BYTES_PER_PARAM + FSDP_CAST_BYTES_PER_SHARD_PARAM / run.shard_size
        per_step = FSDP_REDUCE_COPY_IN_BYTES_PER_PARAM + (ONE_RANK_REDUCE_SCATTER_BYTES_PER_PARAM
                                                          if run.shard_size == 1 else 0)
        fwd_bytes += per_gather * model.params
        regathered = model.num_layers * model.layer_params if run.spec.reshard_after_forward else 0
        copy_bytes = loss_step_bytes + per_gather * (model.params + regathered) + per_step * model.params
    # elementwise work inside the blocks (norms, rotary, SwiGLU, residuals, casts), kernel by kernel
    act_fwd, act_bwd = block_elementwise(run, profile, autocast)
    fwd_bytes += act_fwd
    copy_bytes += act_fwd + act_bwd + act_fwd * rerun_share(run)
    # fp8's casts and amax, unfused attention's scores: memory-bound passes of their own (kernels.py)
    for forward, step_bytes in (fp8_cast_bytes(run), unfused_score_bytes(run)):
        fwd_bytes += forward
        copy_bytes += step_bytes
    memory_bound_s = copy_bytes / hbm
    optimizer_s = ADAMW_FUSED_BYTES_PER_PARAM * local_params / hbm

    collectives = strategy_collectives(run, topology, profile)
    overlap = profile.overlap.get(run.strategy, 0.0)
    # each phase's compute as a timeline beside its collectives (overlap.py): the output layer and the
    # loss at the forward's end and the backward's start, the blocks between
    fwd_head, bwd_head = head_seconds(model, tokens, output_rate, hbm, run.loss)
    fwd_total, bwd_total = forward_s + fwd_bytes / hbm, backward_s + (copy_bytes - fwd_bytes) / hbm
    if run.spec.autocast:  # DDP's family: nothing to send in the forward
        fwd_exposed = 0.0
        scale = rate / attention_at  # attention's FLOPs in matmul-equivalents, for the timeline's shares
        bwd_exposed = ddp_backward(model, run.seq_len, collectives, bwd_total, bwd_head,
                                   (recompute_matmul + scale * recompute_attention) / model.num_layers,
                                   attention_scale=scale).exposed(overlap)
    else:
        fwd_exposed = fsdp_forward(model, collectives, fwd_total, fwd_head).exposed(overlap)
        bwd_exposed = fsdp_backward(model, collectives, bwd_total, bwd_head,
                                    run.spec.reshard_after_forward).exposed(overlap)
    opt_exposed = sum(c.time_s for c in collectives if c.phase == comm_mod.AFTER_STEP)
    exposed = fwd_exposed + bwd_exposed + opt_exposed
    comm_s = sum(c.time_s for c in collectives)
    # what the GPU does in each phase, and what the host (Python) needs to issue it: a phase takes the
    # longer of the two (the host runs ahead of a busy GPU; an idle GPU waits for the host)
    device = {"forward": fwd_total + fwd_exposed,
              "backward": bwd_total + bwd_exposed,
              "optimizer": optimizer_s + opt_exposed}
    host = {p: max(profile.host_s(run.strategy, p, run.compile) + block_host_s(run, profile, p), 0.0) * model.num_layers
            + checkpointing_host_s(run, profile, p) for p in device}
    device_s = sum(device.values())  # = compute + memory-bound + optimizer + exposed communication
    step = sum(max(host[p], device[p]) for p in device)
    # the host's speed moves between launches (Profile.host_spread): a host-bound step is a range
    step_range = tuple(sum(max(host[p] * scale, device[p]) for p in device)
                       for scale in (1 - profile.host_spread, 1 + profile.host_spread))
    exposed_by_phase = {"forward": fwd_exposed, "backward": bwd_exposed, "optimizer": opt_exposed}
    phases = tuple(PhaseCost(p, device[p], host[p], exposed_by_phase[p], max(host[p] - device[p], 0.0))
                   for p in device)

    memory = estimate_memory(run, gpu_memory_bytes=topology.gpus[0].memory_bytes or topology.gpu_spec.memory_bytes,
                             profile=profile)
    bottleneck = topology.bottleneck_gbps(run.gpus)
    per_gpu = tokens / step
    return Prediction(
        run=run, topology=topology.name, step_time_s=step,
        tokens_per_s=per_gpu * run.num_gpus, tokens_per_s_per_gpu=per_gpu,
        time=TimeBreakdown(compute_s, comm_s, exposed, collectives, memory_bound_s, optimizer_s, forward_s, backward_s,
                           host_s=sum(host.values()), host_wait_s=step - device_s, step_range_s=step_range,
                           misaligned_head_s=3 * slower * tokens, phases=phases),
        memory=memory, fits=fits(memory, profile),
        bottleneck_gbps=None if bottleneck == math.inf else bottleneck,
        islands_spanned=len(topology.islands_spanned(run.gpus)),
        mfu=model_flops / step / mfu_peak_flops(run, topology, profile), profile_fingerprint=profile.fingerprint,
        mfu_peak_flops=mfu_peak_flops(run, topology, profile),
        compile_s=profile.compile_s if run.compile else 0.0,
    )
