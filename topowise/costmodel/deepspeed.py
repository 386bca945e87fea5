"""DeepSpeed ZeRO as its own engine: where its buffers and traffic differ from FSDP2's.

`costmodel.predict.predict` comes here for a run with engine "deepspeed". Compute, the loss and the activations are
the PyTorch engine's (the same bench transformer, bf16 weights so no autocast: as FSDP2's); what
changes is how DeepSpeed 0.19 holds and moves the training state (bf16 enabled, grad_accum_dtype
unset, overlap_comm and contiguous_gradients on, torch's fused AdamW as a client optimizer; the
config of topowise.export.deepspeed.zero_config, which `bench train --engine deepspeed` runs).
Source for every statement below: deepspeed/runtime/zero/stage_1_and_2.py, stage3.py, config.py of
DeepSpeed 0.19.8.

State per GPU (P parameters, n ranks):
- zero1 / zero2: the bf16 model (2P, every rank), fp32 master weights and AdamW m, v of the rank's
  partition (12P/n). Gradients in bf16: each gradient is copied into the reduce bucket as backward
  makes it (param.grad then points into the bucket) and this rank's slice into a contiguous
  partition buffer (2P/n): with contiguous_gradients zero1 holds no more gradient memory than zero2
  (stage_1_and_2.py reduce_ipg_grads copies the partition for stage 1 too). Two reduce buckets of
  reduce_bucket_size bf16 elements (double-buffered for overlap_comm), allocated with the backward's
  first gradient (setup_buckets) and released with the partition buffer at its end
  (_release_ipg_buffers). At the step the partition's gradient is flattened (a bf16 copy, 2P/n) and
  that converted to fp32 (4P/n).
- zero3: bf16 parameter partitions (2P/n) and whole copies of the tensors at or under
  stage3_param_persistence_threshold (1e5 elements: the norms); gathered bf16 parameters of the
  module computing plus the prefetch bucket (stage3_prefetch_bucket_size elements); persistent bf16
  gradient partitions (2P/n); one reduce bucket; fp32 master, m, v (12P/n); fp32 gradient at the step.
- hsdp is DeepSpeed's nearest form, ZeRO-3 with ZeRO++ hpZ (Wang et al. 2023, arXiv 2306.10209;
  zero_hpz_partition_size = the shard group): zero3's state plus a secondary bf16 partition of the
  parameters inside the shard group (2P/shard), from which the backward all-gathers read, so they
  stay inside the group (an NVLink island); forward all-gathers and gradient reduce-scatters still
  span every rank.
- data_types.grad_accum_dtype "fp32" (`grad_accum_fp32`): gradients accumulate in fp32 (zero1 runs
  DeepSpeed's BF16_Optimizer with a full fp32 gradient, 4P, engine.py _do_optimizer_sanity_check;
  zero2/zero3 fp32 partitions, 4P/n).

Traffic per step (bf16 everywhere: DeepSpeed reduces in the model dtype unless
communication_data_type says otherwise, where FSDP2 here reduce-scatters fp32):
- zero1 / zero2: the gradient buckets are all-reduced (use_multi_rank_bucket_allreduce, the default:
  each rank keeps its slice), 2P bytes in buckets of 2 x reduce_bucket_size, behind the backward
  except the last; after the optimizer step the updated bf16 parameters are all-gathered in one
  all_gather_into_tensor of 2P (allgather_bucket_size only splits it where that collective is
  missing), exposed: FSDP2's zero2 gathers in forward, overlapped.
- zero3: a bf16 all-gather per gathered module (4 Linear modules per block in the bench
  transformer) in forward and again in backward, prefetched; the root tensor(s) (embedding, output
  layer; once when tied) at their use; bf16 gradients reduce-scattered per reduce bucket.
Memory-bound copies: each bf16 gradient into the reduce bucket (2+2 bytes per parameter); in the step, the
partition's gradient to fp32 (2+4 per local parameter) and the fp32 master back to bf16 (4+2), and under ZeRO-1/2
the overflow check (amax and amin of each bf16 gradient), the gradient norm over an fp64 copy and the partition's
gradients flattened, each at the rate it ran at in a traced step (ZERO12_STEP_KERNELS).
Host: DeepSpeed's Python side (its hooks, its optimizer step over flat partitions) priced per phase
from bench train's host times at 128 tokens (Profile.deepspeed_host_s; docs/deepspeed.md).
"""

from __future__ import annotations

import math
from dataclasses import replace

from topowise import hardware
from topowise.costmodel import comm as C
from topowise.costmodel.collectives import collective
from topowise.costmodel.memory import (
    CUBLAS_WORKSPACE_BYTES,
    MemoryBreakdown,
    activation_bytes_per_token_per_layer,
    block_backward_temp_bytes_per_token,
    block_input_bytes_per_token,
    breakdown_at_peak,
    fits,
    head_bytes_per_token,
    logits_bytes_per_token,
    rope_bytes,
)
from topowise.costmodel.prediction import PhaseCost, Prediction
from topowise.costmodel.profile import Profile
from topowise.costmodel.step import (
    ADAMW_FUSED_BYTES_PER_PARAM,
    LOSS_BYTES_PER_LOGIT,
    LOSS_FORWARD_BYTES_PER_LOGIT,
    block_elementwise,
    block_host_s,
    checkpointing_host_s,
    exposed_time,
    predict_pytorch,
    rerun_share,
)
from topowise.models.spec import ModelSpec
from topowise.run import Run

# DeepSpeed 0.19.8 defaults (runtime/zero/config.py), used where the config does not say
DEFAULT_REDUCE_BUCKET = 500_000_000  # reduce_bucket_size, elements
DEFAULT_ALLGATHER_BUCKET = 500_000_000  # allgather_bucket_size, elements
DEFAULT_PREFETCH_BUCKET = 50_000_000  # stage3_prefetch_bucket_size, elements
DEFAULT_PERSISTENCE = 100_000  # stage3_param_persistence_threshold, elements
GRAD_TO_BUCKET_BYTES = 2 + 2  # bf16 gradient copied into the reduce bucket
GRAD_TO_FP32_BYTES = 2 + 4  # bf16 gradient partition read, fp32 written
MASTER_TO_BF16_BYTES = 4 + 2  # fp32 master read, bf16 parameter written
# ZeRO-1/2's optimizer step besides the fused AdamW (stage_1_and_2.py `step`), on the rank's partition, kernel by
# kernel: (bytes per local parameter, the rate the kernel ran at as a share of the memory-bound rate), the rates read
# from a traced llama3.2-1b step on one H200, each kernel's time against its bytes (research/2026-12-03-h200x1/
# deepspeed/run51, kernels-deepspeed-optimizer.json: 17.7 of the phase's 19.4 ms besides AdamW; the rest, 1.7 ms,
# is a few scalar kernels per gradient tensor, not priced).
ZERO12_STEP_KERNELS: dict[str, tuple[float, float]] = {
    "overflow check": (2 + 2, 0.49),  # runtime/utils.py has_inf_or_nan: amax and amin of each bf16 gradient
    "norm cast": (2 + 8, 0.97),  # get_grad_norm_direct: each gradient to fp64 (zero/utils.py get_norm_dtype)
    "norm": (8, 0.90),  # torch.linalg.vector_norm of the fp64 copy
    "flatten": (2 + 2, 1.17),  # the partition's gradients into one flat bf16 tensor (torch.cat)
    "to fp32": (GRAD_TO_FP32_BYTES, 0.40),  # the flat partition .to(fp32): a dtype-converting copy
    "to bf16": (MASTER_TO_BF16_BYTES, 1.24),  # the updated fp32 partition copied into the bf16 parameters
}
BACKWARD_FIRST = "backward-first"  # the first backward gather (zero3 output layer): nothing to hide behind


def modules_per_block(model: ModelSpec) -> int:
    """The bench transformer's Linear modules per block, each one ZeRO-3 gather: qkv, out, gate, up, down
    (GPT-2: c_attn, c_proj, c_fc, proj)."""
    return 4 if model.family == "gpt2" else 5


# Buckets: a collective of S bytes over a link of B bytes/s with start-up latency alpha runs at
# S / (S + alpha B) of the link rate, so S = 9 alpha B reaches 90%. Larger buckets buy nothing but
# memory and a later start of the overlap. alpha is the intercept of the line t = alpha + S/B through
# nccl-tests' all_reduce on 2x H200 NV18 at 16 MiB (79.5 us) and 1 GiB (3.26 ms): 29 us, B = 332 GB/s
# (docs/sources.md, "2x H200 nccl-tests"); the bucket sizes are large messages, so the line through
# large messages, not the 1 MiB latency the profile's small-message term uses.
BUCKET_ALPHA_S = 29e-6
BUCKET_TARGET_EFFICIENCY = 0.9
MIN_BUCKET_ELEMENTS = 1_000_000  # below this, per-bucket launch overhead dominates whatever the link
MAX_BUCKET_ELEMENTS = DEFAULT_REDUCE_BUCKET  # DeepSpeed's own default reduce/allgather bucket size


def bucket_elements(link_gbps: float | None, bytes_per_element: int) -> int:
    """Elements per bucket so one collective reaches BUCKET_TARGET_EFFICIENCY of the link (rounded to 1e6)."""
    if not link_gbps or link_gbps == float("inf"):
        return MAX_BUCKET_ELEMENTS  # one GPU or an unknown link: DeepSpeed's default
    ratio = BUCKET_TARGET_EFFICIENCY / (1 - BUCKET_TARGET_EFFICIENCY)
    size_bytes = ratio * BUCKET_ALPHA_S * link_gbps * 1e9
    elements = round(size_bytes / bytes_per_element / 1e6) * 1_000_000
    return int(min(max(elements, MIN_BUCKET_ELEMENTS), MAX_BUCKET_ELEMENTS))


def deepspeed_buckets(model, link_gbps: float | None) -> dict:
    """The bucket sizes (elements) `plan --export deepspeed` and `bench train --engine deepspeed` use."""
    size = bucket_elements(link_gbps, 2)
    return {"reduce": size, "allgather": size, "prefetch": size}


def persistent_params(model, threshold: int = DEFAULT_PERSISTENCE) -> int:
    """zero3 keeps tensors of at most `threshold` elements whole on every rank: the norm weights (and
    q/k/v biases of a Qwen2 block, which live in the qkv Linear here, so gathered with it)."""
    h = model.hidden_size
    qk_norms = 2 * model.head_dim if model.qk_norm else 0
    norms = model.num_layers * ((4 if model.family == "gpt2" else 2) * h + qk_norms) + model.final_norm_params
    return norms if h <= threshold else 0


def deepspeed_collectives(model, topo, gpus, strategy: str, profile, buckets: dict,
                          shard_group_size: int | None = None) -> tuple:
    """DeepSpeed's collectives of one step (CollectiveCost rows, phases as comm.py's)."""
    n = len(gpus)
    group = tuple(sorted(gpus))
    if n < 2:
        return ()
    P = model.params
    col = lambda op, nbytes, count, phase: collective(op, nbytes, "bf16", group, topo, count, phase, profile)
    if strategy == "hsdp" and shard_group_size and shard_group_size < n:  # hpZ: backward gathers in the group
        groups = C.shard_groups(topo, gpus, shard_group_size)
        back = lambda op, nbytes, count, phase: collective(op, nbytes, "bf16", groups[0], topo, count, phase,
                                                           profile, groups)
    else:
        back = col
    out = []
    grad_bucket = 2 * buckets["reduce"]
    pieces = max(1, math.ceil(2 * P / grad_bucket))
    if strategy in ("zero1", "zero2"):  # (`pieces` gradient buckets)
        if pieces > 1:
            out.append(col("all_reduce", grad_bucket, pieces - 1, C.BACKWARD))
        out.append(col("all_reduce", 2 * P - grad_bucket * (pieces - 1), 1, C.BACKWARD_LAST))
        # one all_gather_into_tensor of the whole flat bf16 group: with it available (NCCL, gloo)
        # runtime/utils.py all_gather_dp_groups ignores allgather_bucket_size
        out.append(col("all_gather", 2 * P, 1, C.AFTER_STEP))
        return tuple(out)
    # zero3
    gathered_block = model.layer_params - persistent_params(model) // max(model.num_layers, 1)
    per_module = 2 * gathered_block / modules_per_block(model)
    root = C.root_params(model) - model.final_norm_params
    root_tensors = 1 if model.tied_embeddings else 2
    root_each = 2 * root / root_tensors
    modules = modules_per_block(model) * model.num_layers
    out.append(col("all_gather", root_each, 1, C.FORWARD_FIRST))  # embedding, before any compute
    out.append(col("all_gather", per_module, modules, C.FORWARD))
    out.append(col("all_gather", root_each, 1, C.FORWARD))  # output layer (the embedding again when tied)
    out.append(back("all_gather", root_each, 1, BACKWARD_FIRST))  # output layer backward, first
    out.append(back("all_gather", per_module, modules, C.BACKWARD))
    out.append(back("all_gather", root_each, 1, C.BACKWARD))  # the embedding's backward hook, tied or not
    if pieces > 1:
        out.append(col("reduce_scatter", grad_bucket, pieces - 1, C.BACKWARD))
    out.append(col("reduce_scatter", 2 * P - grad_bucket * (pieces - 1), 1, C.BACKWARD_LAST))
    return tuple(c for c in out if c.group_size > 1 and c.count > 0)


def deepspeed_memory(model, strategy: str, n: int, *, micro_batch: int, seq_len: int,
                     activation_checkpointing: bool, gpu_memory_bytes: int, profile, buckets: dict,
                     grad_accum_fp32: bool = False, shard_group_size: int | None = None) -> MemoryBreakdown:
    """Peak bytes per GPU as DeepSpeed holds the state (module docstring), at the largest of four moments."""
    P = model.params
    tokens = micro_batch * seq_len
    scale = getattr(profile, "activation_scale", 1.0)
    per_layer = activation_bytes_per_token_per_layer(model, autocast=False)
    kept = block_input_bytes_per_token(model) if activation_checkpointing else per_layer
    saved = (tokens * (model.num_layers * kept + head_bytes_per_token(model)) + rope_bytes(model, seq_len)) * scale
    recompute = tokens * per_layer * scale if activation_checkpointing else 0.0
    block_temp = tokens * block_backward_temp_bytes_per_token(model)

    optimizer = 12 * P / n  # fp32 master + m + v of the partition
    # what is there besides in the loss's backward and the step, where not `base`
    loss_base: dict[str, float] | None = None
    step_base: dict[str, float] | None = None
    if strategy in ("zero3", "hsdp"):
        params = 2 * P / n + 2 * persistent_params(model)
        if strategy == "hsdp" and shard_group_size and shard_group_size < n:
            params += 2 * P / shard_group_size  # hpZ's secondary bf16 partition
        live = 2 * (model.layer_params / modules_per_block(model)) + 2 * min(buckets["prefetch"], P)
        base = {"reduce bucket (bf16)": 2 * buckets["reduce"], "gathered bf16 params (module + prefetch)": live}
        grads_full = (4 if grad_accum_fp32 else 2) * P / n  # persistent partitions, from init
        grads_start = grads_full
    else:
        params = 2 * P
        base = {"reduce buckets (bf16, double-buffered)": 2 * 2 * buckets["reduce"]}
        if strategy == "zero1" and grad_accum_fp32:  # BF16_Optimizer: a persistent full fp32 gradient
            grads_full = grads_start = 4 * P
        else:
            # the buckets come with the first gradient of each backward (setup_buckets, from the gradient
            # hook); the backward's end releases them and the contiguous partition buffer
            # (_release_ipg_buffers), and the step frees the partition's gradient: none is there while the
            # loss's backward runs
            grads_full = (4 if grad_accum_fp32 else 2) * P / n
            grads_start = 0.0
            loss_base = {}
            # the step flattens the partition's gradient (a bf16 copy) and casts that to fp32 while both
            # are alive (stage_1_and_2.py step: flatten_dense_tensors_aligned, then .to(fp32)); the
            # buckets are gone by then
            step_base = {"flat bf16 copy of the partition's gradient (step)": 2 * P / n}
    block_grad = {"block gradient (bf16)": 2 * model.layer_params}
    if model.tied_embeddings:  # the output layer's gradient waits for the embedding's half before its hook fires
        block_grad["tied embedding gradient (bf16, through the backward)"] = 2 * model.vocab_size * model.hidden_size
    step_fp32 = {} if grad_accum_fp32 else {"fp32 gradient of the partition (step)": 4 * P / n}
    phases = {
        "loss backward": (grads_start, saved, tokens * logits_bytes_per_token(model),
                          base if loss_base is None else loss_base),
        "block backward": ((grads_start + grads_full) / 2, saved + recompute + block_temp, 0.0, {**base, **block_grad}),
        "optimizer step": (grads_full, 0.0, 0.0, {**(base if step_base is None else step_base), **step_fp32}),
    }
    return breakdown_at_peak(phases, params, optimizer, gpu_memory_bytes, profile, workspace=CUBLAS_WORKSPACE_BYTES)


def step_copy_bytes(model, strategy: str, n: int) -> float:
    """Bytes at the memory-bound rate of DeepSpeed's optimizer step besides the fused AdamW: ZeRO-1/2's kernels
    (ZERO12_STEP_KERNELS) each at its own rate; ZeRO-3's gradient to fp32 and master back to bf16 at the rate."""
    local = model.params / n
    if strategy in ("zero1", "zero2"):
        return local * sum(nbytes / share for nbytes, share in ZERO12_STEP_KERNELS.values())
    return (GRAD_TO_FP32_BYTES + MASTER_TO_BF16_BYTES) * local


def predict_deepspeed(run: Run, topology, profile: Profile) -> Prediction:
    """A Prediction for DeepSpeed ZeRO: the PyTorch engine's compute and loss, DeepSpeed's state,
    buffers, collectives and host time. Buckets are sized to the group's link as the export sizes them.
    Each phase (forward, backward, optimizer step) takes the longer of the GPU's work and the host's
    time to issue it (Profile.deepspeed_host_s), as step.py's phases do."""
    base = predict_pytorch(run, topology, profile)
    model, gpus, strategy, shard_group_size = run.model, run.gpus, run.strategy, run.shard_group_size
    n = len(gpus)
    line = topology.bottleneck_gbps(gpus)
    buckets = deepspeed_buckets(model, None if line == math.inf else line)
    collectives = deepspeed_collectives(model, topology, gpus, strategy, profile, buckets, shard_group_size)

    t = base.time
    tokens = run.tokens
    hbm = hardware.hbm_bytes_per_s(topology.gpu_spec.name) * profile.hbm_efficiency
    # the blocks' elementwise work is the model's own (bf16 throughout under DeepSpeed)
    act_fwd, act_bwd = block_elementwise(run, profile, autocast=False)
    fwd_bytes = LOSS_FORWARD_BYTES_PER_LOGIT * tokens * model.vocab_size + act_fwd
    bwd_bytes = (LOSS_BYTES_PER_LOGIT * tokens * model.vocab_size + act_fwd + act_bwd - fwd_bytes
                 + act_fwd * rerun_share(run) + GRAD_TO_BUCKET_BYTES * model.params)
    step_bytes = step_copy_bytes(model, strategy, n)
    memory_bound_s = (fwd_bytes + bwd_bytes + step_bytes) / hbm
    optimizer_s = ADAMW_FUSED_BYTES_PER_PARAM * model.params / n / hbm
    overlap = profile.overlap.get(strategy, 0.0)
    phase_of = {C.FORWARD_FIRST: "forward", C.FORWARD: "forward", BACKWARD_FIRST: "backward",
                C.BACKWARD: "backward", C.BACKWARD_LAST: "backward", C.AFTER_STEP: "optimizer"}
    fixed = {p: sum(c.time_s for c in collectives if c.phase in C.EXPOSED_PHASES + (BACKWARD_FIRST,)
                    and phase_of[c.phase] == p) for p in ("forward", "backward", "optimizer")}
    fwd = sum(c.time_s for c in collectives if c.phase == C.FORWARD)
    bwd = sum(c.time_s for c in collectives if c.phase == C.BACKWARD)
    exposed_by_phase = {"forward": fixed["forward"] + exposed_time(fwd, t.forward_s, overlap),
                        "backward": fixed["backward"] + exposed_time(bwd, t.backward_s, overlap),
                        "optimizer": fixed["optimizer"]}
    device = {"forward": t.forward_s + fwd_bytes / hbm + exposed_by_phase["forward"],
              "backward": t.backward_s + bwd_bytes / hbm + exposed_by_phase["backward"],
              "optimizer": optimizer_s + step_bytes / hbm + exposed_by_phase["optimizer"]}
    host = {p: max(profile.deepspeed_host_s(strategy, p, model.num_layers)
                   + block_host_s(run, profile, p) * model.num_layers, 0.0)
            + checkpointing_host_s(run, profile, p) for p in device}
    device_s = sum(device.values())
    step = sum(max(host[p], device[p]) for p in device)
    step_range = tuple(sum(max(host[p] * scale, device[p]) for p in device)
                       for scale in (1 - profile.host_spread, 1 + profile.host_spread))
    phases = tuple(PhaseCost(p, device[p], host[p], exposed_by_phase[p], max(host[p] - device[p], 0.0))
                   for p in device)
    exposed = sum(exposed_by_phase.values())
    memory = deepspeed_memory(model, strategy, n, micro_batch=run.micro_batch, seq_len=run.seq_len,
                              activation_checkpointing=run.activation_checkpointing,
                              gpu_memory_bytes=base.memory.gpu_memory_bytes, profile=profile, buckets=buckets,
                              shard_group_size=shard_group_size)
    per_gpu = tokens / step
    model_flops = base.mfu * base.step_time_s  # mfu = model FLOPs / step / peak: keep FLOPs / peak
    return replace(
        base, step_time_s=step, tokens_per_s=per_gpu * n, tokens_per_s_per_gpu=per_gpu,
        time=replace(t, comm_s=sum(c.time_s for c in collectives), exposed_comm_s=exposed,
                     collectives=collectives, memory_bound_s=memory_bound_s, optimizer_s=optimizer_s,
                     host_s=sum(host.values()), host_wait_s=step - device_s, step_range_s=step_range,
                     phases=phases),
        memory=memory, fits=fits(memory, profile), mfu=model_flops / step)
