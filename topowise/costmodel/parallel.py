"""Step time and memory of a run with tensor, pipeline or context parallelism (tp x pp x cp > 1), and gradient
accumulation for every run.

`predict` calls this module only for such runs (and, for accumulation, on top of the engine's one-micro-batch
prediction), so the data-parallel formulas of step.py are unchanged. Each term is named; the derivations are in
docs/parallelism.md.

One micro-batch on one pipeline rank, per block (the tp group's GPUs run it together):
- matmuls: each block Linear narrowed by tp (column-parallel qkv, gate, up: out / tp; row-parallel out, down:
  in / tp; Shoeybi et al. 2019) and priced by its shape (gemm.linear_seconds), s / cp tokens;
- attention: the causal flash attention's FLOPs / (tp x cp) at Profile.attention_rate (heads / tp);
- elementwise kernels: step.py's bytes per token / tp (sequence parallel or head-sharded, each kernel runs on a
  tp-th of the tensor);
- TP collectives (tensor_parallel.tp_block_collectives) over each tp group, exposed (no async TP);
- CP's ring of K/V (tensor_parallel.cp_ring_exchanges) over each cp group, hidden behind the attention;
- recompute: "full" reruns every block's forward in the backward (TP collectives included), every k-th block
  its share; per-op selective the out and up projections (step.recompute_flops_per_token's choice).
Stages: transformer layers over pp x virtual stages (pipeline.split_layers, torchtitan's split), the output
layer and the vocabulary-parallel loss on the last stage; the sends between stages over the link between the
stage GPUs; the schedule's step and bubble from pipeline.pipeline_time (replayed where stages differ).
Per optimizer step, once: the data-parallel collectives over the remaining dimensions (FSDP: an all-gather of
the stage's bf16 parameters and a reduce-scatter of its fp32 gradients over dp_shard x cp, HSDP's all-reduce
over dp_replicate; DDP's family: an all-reduce over dp x cp), partly hidden behind the first forward and the
last backward at the strategy's overlap; the fused AdamW step on the rank's shard.
Memory per pipeline rank: parameters, gradients and optimizer states of its stages / tp / (dp_shard x cp),
activations per layer (tensor_parallel's Llama or GPT-3 terms) x the layers' worth alive at its peak
(pipeline.peak_activation_layers), the logits on the last rank; the peak rank is reported.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache

from topowise import hardware
from topowise.costmodel.collectives import alike_by_shift, call_cost, collective, distinct_groups
from topowise.costmodel.comm import AFTER_STEP, BACKWARD, FORWARD, CollectiveCost
from topowise.costmodel.elementwise import block_elementwise_bytes
from topowise.costmodel.flops import (
    FLASH_BACKWARD_SHARE,
    FLASH_FORWARD_SHARE,
    attention_flops_per_token,
    training_flops_per_token,
)
from topowise.costmodel.gemm import block_linears, linear_seconds
from topowise.costmodel.kernels import (
    FP8_CAST_BYTES,
    SCORE_BACKWARD_BYTES,
    SCORE_FORWARD_BYTES,
    SCORE_SAVED_BYTES,
    all_gather_bytes_per_param,
    fp8_linear_params,
    fp8_weight_cast_bytes,
    loss_chunk_tokens,
)
from topowise.costmodel.memory import (
    CUBLAS_WORKSPACE_BYTES,
    breakdown_at_peak,
    fits,
    pytorch_state_bytes,
)
from topowise.costmodel.pipeline import LayerSplit, in_flight, peak_activation_layers, pipeline_time
from topowise.costmodel.prediction import PhaseCost, Prediction, TimeBreakdown
from topowise.costmodel.profile import Profile
from topowise.costmodel.step import (
    ADAMW_FUSED_BYTES_PER_PARAM,
    attention_shares,
    exposed_time,
    linear_rate,
    loss_bytes,
    mfu_peak_flops,
    peak_flops,
)
from topowise.costmodel.tensor_parallel import (
    cp_ring_exchanges,
    gpt_activation_terms,
    llama_activation_terms,
    pp_send_bytes,
    tp_block_collectives,
)
from topowise.run import Run
from topowise.topology.mesh import Mesh, build_mesh

ROW_PARALLEL = ("out", "down")  # Megatron's RowParallelLinear: the input dimension split over tp; the rest column


@dataclass(frozen=True)
class BlockCost:
    """One block, one micro-batch, on one rank: seconds of forward, input gradient and weight gradient (the
    recompute inside the input gradient), and of it the exposed TP / CP communication."""

    forward_s: float
    input_grad_s: float
    weight_grad_s: float
    comm_s: float
    memory_s: float  # of forward and backward: the elementwise kernels at the memory-bound rate


def mesh_of(run: Run) -> Mesh:
    """The run's device mesh on its GPUs in rank order (torchtitan's order, tp fastest: topology.mesh)."""
    return build_mesh(run.gpus, dp_replicate=run.dp_replicate, dp_shard=run.dp_shard, cp=run.cp, tp=run.tp,
                      pp=run.pp)


def narrowed_linears(run: Run) -> dict[str, tuple[int, int]]:
    """Each block Linear's (out, in) on one TP rank: row-parallel ones split their input, the others their output."""
    return {name: (out, inp // run.tp) if name in ROW_PARALLEL else (out // run.tp, inp)
            for name, (out, inp) in block_linears(run.model).items()}


@lru_cache(maxsize=1024)
def mesh_group_kinds(mesh: Mesh, dim: str, topology) -> tuple[tuple, ...]:
    """distinct_groups of one mesh dimension, once per mesh and topology (a planner prices many runs on each)."""
    return tuple(distinct_groups(mesh.groups(dim), topology))


def priced(ops, groups, topology, profile: Profile, phase: str) -> tuple[CollectiveCost, ...]:
    """tensor_parallel's Collective list priced over the mesh groups (the slowest group sets the time)."""
    kinds = distinct_groups(groups, topology)
    return tuple(collective(c.op, c.size_bytes, "bf16", kinds[0], topology, c.count, phase, profile,
                            kinds, unit="block") for c in ops if c.group_size > 1)


def p2p_seconds(nbytes: float, pair, topology, profile: Profile) -> float:
    """One send of `nbytes` between two GPUs: a 2-rank broadcast moves exactly those bytes once (busbw factor 1)."""
    return call_cost("broadcast", nbytes, pair, topology, profile)[0] if nbytes else 0.0


def slowest_send(nbytes: float, mesh: Mesh, topology, profile: Profile) -> float:
    """The slowest send between neighbouring pipeline stages: pairs on the same two nodes price alike (across
    nodes), and so do pairs with the same local indices inside a node."""
    # pipelines some whole nodes apart hold alike pairs (alike_by_shift): the first of each kind is enough
    pairs = [(g[i], g[i + 1]) for g in alike_by_shift(mesh.groups("pp"), topology) for i in range(len(g) - 1)]
    return max(p2p_seconds(nbytes, pair, topology, profile) for pair in distinct_groups(pairs, topology))


def recompute_words(run: Run) -> str:
    """tensor_parallel's recompute mode for the run's checkpointing (every k-th block: priced as none for memory
    of the kept blocks, handled by the block share below)."""
    return "full" if run.checkpointing == "full" else ("selective" if run.per_op_checkpointing else "none")


def block_cost(run: Run, topology, profile: Profile, mesh: Mesh) -> tuple[BlockCost, list[CollectiveCost]]:
    """One block, one micro-batch, on one TP x CP rank (module docstring), and its collectives (per block)."""
    model = run.model
    peak = peak_flops(topology, profile)
    rate = peak * profile.compute_efficiency
    tokens = run.micro_batch * run.seq_len // run.cp
    sms = topology.gpu_spec.sms if profile.gemm_form == "tiles" and not profile.peak_flops else 0
    at = linear_rate(run, topology, profile) or rate  # the block Linears in fp8 (kernels.py) or bf16
    linears = {n: linear_seconds(o, i, tokens, at, sms) for n, (o, i) in narrowed_linears(run).items()}
    attention_rate = profile.attention_rate(model.head_dim, run.seq_len, peak, run.micro_batch,
                                            model.num_heads // run.tp) or rate
    attention = attention_flops_per_token(model, run.seq_len) / model.num_layers * tokens / run.tp
    hbm = hardware.hbm_bytes_per_s(topology.gpu_spec.name) * profile.hbm_efficiency
    traffic = profile.compiled_activation_traffic if run.compile else profile.activation_traffic
    elem_f, elem_b = (traffic * x * tokens / run.tp / hbm for x in block_elementwise_bytes(model, False, run.compile))
    cast_f, cast_b = fp8_block_cast_bytes(run, tokens)
    elem_f, elem_b = elem_f + cast_f / hbm, elem_b + cast_b / hbm
    if run.attention == "unfused":  # the score GEMMs at the GEMM rate, the scores through HBM (kernels.py)
        share_f, share_b = attention_shares(run)
        scores = tokens * model.num_heads // run.tp * run.seq_len
        attn_f = share_f * attention / rate + SCORE_FORWARD_BYTES * scores / hbm
        attn_b = share_b * attention / rate + SCORE_BACKWARD_BYTES * scores / hbm
    else:
        attn_f = FLASH_FORWARD_SHARE * attention / attention_rate
        attn_b = FLASH_BACKWARD_SHARE * attention / attention_rate
    tp_ops = tp_block_collectives(seq=run.seq_len, micro_batch=run.micro_batch, hidden=model.hidden_size,
                                  tp=run.tp, cp=run.cp, sp=run.sequence_parallel)
    tp_groups = mesh_group_kinds(mesh, "tp", topology)
    tp_fwd = priced([c for c in tp_ops if c.phase == "forward"], tp_groups, topology, profile, FORWARD)
    tp_bwd = priced([c for c in tp_ops if c.phase == "backward"], tp_groups, topology, profile, BACKWARD)
    cp_ops = cp_ring_exchanges(seq=run.seq_len, micro_batch=run.micro_batch, kv_heads=model.num_kv_heads,
                               head_dim=model.head_dim, cp=run.cp, tp=run.tp)
    cp_groups = mesh_group_kinds(mesh, "cp", topology)
    cp_fwd = sum(p2p_seconds(c.size_bytes, cp_groups[0][:2], topology, profile) * c.count
                 for c in cp_ops if c.phase == "forward")
    cp_bwd = sum(p2p_seconds(c.size_bytes, cp_groups[0][:2], topology, profile) * c.count
                 for c in cp_ops if c.phase == "backward")
    tp_f, tp_b = sum(c.time_s for c in tp_fwd), sum(c.time_s for c in tp_bwd)
    cp_f, cp_b = max(cp_fwd - attn_f, 0.0), max(cp_bwd - attn_b, 0.0)  # the ring hides behind the attention
    forward = sum(f for f, _, _ in linears.values()) + attn_f + elem_f + tp_f + cp_f
    dx = sum(d for _, d, _ in linears.values()) + attn_b + elem_b + tp_b + cp_b
    dw = sum(w for _, _, w in linears.values())
    # recompute inside the backward: a block recomputed whole ("full"; every k-th block, its share) reruns its
    # forward, collectives too; per-op selective the out and up projections (recompute_flops_per_token's choice)
    # and every cheap op (step.rerun_share)
    if run.per_op_checkpointing:
        rerun = ("out",) if model.family == "gpt2" else ("out", "up")
        dx += sum(linears[n][0] for n in rerun) + elem_f
        if run.attention == "unfused":  # the attention core keeps no scores: rerun (Megatron's selective recompute)
            dx += attn_f
        rerun_comm, rerun_elem = 0.0, elem_f
    else:
        share = rerun_block_share(run)
        dx += share * forward
        rerun_comm, rerun_elem = share * (tp_f + cp_f), share * elem_f
    return (BlockCost(forward_s=forward, input_grad_s=dx, weight_grad_s=dw,
                      comm_s=tp_f + tp_b + cp_f + cp_b + rerun_comm, memory_s=elem_f + elem_b + rerun_elem),
            list(tp_fwd + tp_bwd))


def fp8_block_cast_bytes(run: Run, tokens: int) -> tuple[float, float]:
    """(forward, backward) HBM bytes of one block's fp8 casts on one rank, one micro-batch (kernels.py): the narrowed
    Linears' inputs and output gradients, the weights cast once per micro-batch (with pp FSDP gathers once a step:
    counted per micro-batch all the same)."""
    if run.precision != "fp8":
        return 0.0, 0.0
    shapes = narrowed_linears(run).values()
    weights = fp8_weight_cast_bytes(run.model, run.fp8_recipe, run.spec.fsdp, run.shard_size) / run.model.num_layers \
        / run.tp
    return (FP8_CAST_BYTES * tokens * sum(i for _, i in shapes) + weights,
            FP8_CAST_BYTES * tokens * sum(o for o, _ in shapes))


def rerun_block_share(run: Run) -> float:
    """Of the blocks, the share recomputed whole in the backward: all with "full", 1/k with every k-th block."""
    if run.checkpointing == "full":
        return 1.0
    if run.checkpointing == "selective" and not run.per_op_checkpointing:
        return 1.0 / int(run.selective_ac_option)
    return 0.0


def head_cost(run: Run, topology, profile: Profile) -> tuple[float, float, float]:
    """(forward, input gradient, weight gradient) seconds of the output layer (vocabulary / tp columns) and the
    vocabulary-parallel fp32 loss on the last stage, one micro-batch."""
    model = run.model
    peak = peak_flops(topology, profile)
    rate = peak * profile.compute_efficiency
    tokens = run.micro_batch * run.seq_len // run.cp
    sms = topology.gpu_spec.sms if profile.gemm_form == "tiles" and not profile.peak_flops else 0
    f, dx, dw = linear_seconds(model.vocab_size // run.tp, model.hidden_size, tokens, rate, sms)
    hbm = hardware.hbm_bytes_per_s(topology.gpu_spec.name) * profile.hbm_efficiency
    logits = tokens * model.vocab_size / run.tp
    forward, total = loss_bytes(run.loss)
    return f + forward * logits / hbm, dx + (total - forward) * logits / hbm, dw


def stage_params(run: Run, split: LayerSplit, rank: int) -> float:
    """Parameters a pipeline rank holds (its layers, the embedding on rank 0, the output layer on the last; a tied
    embedding on both), before the tp split."""
    model = run.model
    params = split.layers_on_rank(rank) * model.layer_params
    embedding = model.vocab_size * model.hidden_size
    if rank == 0:
        params += model.embedding_params
    if rank == run.pp - 1:
        params += embedding + model.hidden_size  # output layer (or its tied copy) and the final norm
    if run.pp == 1 and model.tied_embeddings:
        params -= embedding
    return params


_MEMO: dict[tuple, object] = {}  # a planner prices many runs that share a mesh: each collective once


def memoized(key: tuple, topology, profile: Profile, compute):
    """compute() once per key on this topology and profile (the topology's identity and name, the profile's
    fingerprint), the memo emptied when it grows past 4096 entries."""
    full = (id(topology), topology.name, profile.fingerprint, *key)
    if full not in _MEMO:
        if len(_MEMO) > 4096:
            _MEMO.clear()
        _MEMO[full] = compute()
    return _MEMO[full]


def dp_collectives(run: Run, topology, profile: Profile, mesh: Mesh, local_params: float) -> list[CollectiveCost]:
    """The data-parallel collectives of one optimizer step on one rank's `local_params` (after the tp split)."""
    return list(memoized(("dp", mesh, run.strategy, run.grad_accum, local_params, run.precision, run.fp8_recipe),
                         topology, profile,
                         lambda: _dp_collectives(run, topology, profile, mesh, local_params)))


def _dp_collectives(run: Run, topology, profile: Profile, mesh: Mesh, local_params: float) -> list[CollectiveCost]:
    out: list[CollectiveCost] = []
    if run.spec.fsdp:
        # without pp, FSDP2 gathers and reduce-scatters every micro-batch (zero3 gathers again in backward); with pp,
        # torchtitan keeps the stage gathered (reshard_after_forward False) and the schedule syncs the gradients
        # on the last micro-batch only: once a step
        passes = run.grad_accum if run.pp == 1 else 1
        fsdp = list(mesh_group_kinds(mesh, "fsdp", topology))
        if len(fsdp[0]) > 1:
            gathered = all_gather_bytes_per_param(run) * local_params  # bf16, or the Linears in fp8 (kernels.py)
            dtype = "bf16" if gathered == 2 * local_params else "fp8"
            out.append(collective("all_gather", gathered, dtype, fsdp[0], topology, passes, FORWARD, profile,
                                  list(fsdp), unit="stage"))
            if run.pp == 1 and run.spec.reshard_after_forward:
                out.append(collective("all_gather", gathered, dtype, fsdp[0], topology, passes, BACKWARD,
                                      profile, list(fsdp), unit="stage"))
            out.append(collective("reduce_scatter", 4 * local_params, "fp32", fsdp[0], topology, passes, BACKWARD,
                                  profile, list(fsdp), unit="stage"))
        reps = list(mesh_group_kinds(mesh, "dp_replicate", topology))
        if len(reps[0]) > 1:
            out.append(collective("all_reduce", 4 * local_params / len(fsdp[0]), "fp32", reps[0], topology, 1,
                                  BACKWARD, profile, list(reps), unit="stage"))
        return out
    loss = list(mesh_group_kinds(mesh, "loss", topology))
    if len(loss[0]) > 1:
        out.append(collective("all_reduce", 4 * local_params, "fp32", loss[0], topology, 1, BACKWARD, profile,
                              list(loss), unit="stage"))
        if run.spec.sharded:  # zero1: the owners broadcast their updated parameters
            out.append(collective("all_gather", 4 * local_params, "fp32", loss[0], topology, 1, AFTER_STEP, profile,
                                  list(loss), unit="stage"))
    return out


def activation_bytes_per_layer(run: Run) -> float:
    """Bytes one layer keeps for one micro-batch on one rank (tensor_parallel's terms; torchtitan keeps the
    all-gathered linear inputs with sequence parallel)."""
    model, recompute = run.model, recompute_words(run)
    sp = run.sequence_parallel and run.tp > 1
    scores = 0.0
    if run.attention == "unfused" and recompute == "none":  # Korthikanti et al.'s 5 a s^2 b / t (kernels.py)
        scores = SCORE_SAVED_BYTES * run.micro_batch * run.seq_len // run.cp * model.num_heads / run.tp * run.seq_len
    if model.family == "gpt2":
        return scores + gpt_activation_terms(seq=run.seq_len, micro_batch=run.micro_batch, hidden=model.hidden_size,
                                             heads=model.num_heads, tp=run.tp, cp=run.cp, sp=sp,
                                             recompute=recompute).total
    return scores + llama_activation_terms(seq=run.seq_len, micro_batch=run.micro_batch, hidden=model.hidden_size,
                                  heads=model.num_heads, kv_heads=model.num_kv_heads, ffn=model.intermediate_size,
                                  head_dim=model.head_dim, tp=run.tp, cp=run.cp, sp=sp, sp_regather=False,
                                  recompute=recompute).total


def loss_bytes_on_rank(run: Run, tokens: int) -> float:
    """The logits and loss on the last pipeline rank, its vocabulary / tp: plain the fp32 and bf16 logits of every
    token, chunked the bf16 logits and one chunk's fp32, fused one chunk's bf16 logits, the input gradient and the
    output weight's gradient (kernels.py)."""
    vocab, hidden = run.model.vocab_size / run.tp, run.model.hidden_size
    chunk = loss_chunk_tokens(run.model, tokens, run.loss)
    if run.loss == "plain":
        return tokens * vocab * (4 + 2)  # fp32 + bf16 logits
    if run.loss == "chunked":
        return tokens * vocab * 2 + chunk * vocab * 4
    return chunk * vocab * 2 + tokens * hidden * 2 + vocab * hidden * 2


def rank_memory(run: Run, split: LayerSplit, profile: Profile, gpu_memory_bytes: int):
    """The memory breakdown of the pipeline rank with the most bytes alive, and that rank: its parameters, gradients
    and optimizer states, the layers' worth of activations alive at its peak under the schedule, the logits on the
    last rank, FSDP's two unsharded blocks."""
    model = run.model
    tokens = run.micro_batch * run.seq_len // run.cp
    per_layer = activation_bytes_per_layer(run)
    # full recompute: the block being recomputed holds its whole activations once
    rerun = activation_bytes_per_layer(replace(run, checkpointing="none")) if run.checkpointing == "full" else 0.0
    best = None
    for rank in range(run.pp):
        state = pytorch_state_bytes(stage_params(run, split, rank) / run.tp, run.spec, run.shard_size)
        if run.virtual_stages == 1:  # one stage a rank: its layers x the micro-batches it holds (exact)
            alive = split.layers[rank] * in_flight(run.pp_schedule, run.pp, run.grad_accum, 1, rank)
        else:  # chunks of different sizes: walk the order
            alive = peak_activation_layers(run.pp_schedule, split, run.grad_accum, rank)
        acts = alive * per_layer + rerun
        logits = loss_bytes_on_rank(run, tokens) if rank == run.pp - 1 else 0.0
        buffers = {}
        if run.spec.fsdp and run.pp > 1:  # torchtitan keeps the stage gathered from forward to backward with pp
            buffers = {"unsharded bf16 params (the stage)": 2 * stage_params(run, split, rank) / run.tp}
        elif run.spec.fsdp:
            buffers = {"unsharded bf16 params (2 blocks)": 2 * 2 * model.layer_params / run.tp}
            if run.precision == "fp8" and run.fp8_recipe == "rowwise" and run.spec.reshard_after_forward:
                buffers["fp8 rowwise: gathered bf16 block weights kept for backward"] = \
                    2.0 * fp8_linear_params(model) / run.tp
        total = sum(state.values()) + acts + logits + sum(buffers.values())
        if best is None or total > best[0]:
            stages = split.stages_of(rank)
            name = f"pipeline rank {rank} (stage{'s' if len(stages) > 1 else ''} {', '.join(map(str, stages))})"
            best = (total, rank, state, {name: (state["grads"], acts, logits, buffers)})
    assert best is not None, "a pipeline has at least one rank"
    _, rank, state, phase = best
    memory = breakdown_at_peak(phase, state["params"], state["optimizer"], gpu_memory_bytes, profile,
                               workspace=CUBLAS_WORKSPACE_BYTES)
    return memory, rank


def predict_parallel(run: Run, topology, profile: Profile, exact: bool = True) -> Prediction:
    """Step time and memory per GPU of a placed run with tp x pp x cp > 1 (module docstring). exact False prices
    the pipeline as if every stage were the slowest (the closed form, no replay: a planner's first pass)."""
    model, m = run.model, run.grad_accum
    mesh = mesh_of(run)
    split = run.layer_split
    block, tp_collectives = block_cost(run, topology, profile, mesh)
    head_f, head_dx, head_dw = head_cost(run, topology, profile)
    stages = run.pp * run.virtual_stages
    last = stages - 1
    fwd = [n * block.forward_s + (head_f if s == last else 0.0) for s, n in enumerate(split.layers)]
    dx = [n * block.input_grad_s + (head_dx if s == last else 0.0) for s, n in enumerate(split.layers)]
    dw = [n * block.weight_grad_s + (head_dw if s == last else 0.0) for s, n in enumerate(split.layers)]
    send_s = 0.0
    if run.pp > 1:  # the slowest pair of neighbouring stage GPUs sets the hop
        nbytes = pp_send_bytes(seq=run.seq_len, micro_batch=run.micro_batch, hidden=model.hidden_size, tp=run.tp,
                               cp=run.cp, sp=run.sequence_parallel and run.tp > 1)
        send_s = memoized(("send", mesh, nbytes), topology, profile,
                          lambda: slowest_send(nbytes, mesh, topology, profile))
    if not exact:  # every stage as the slowest, and the sends as a fill-and-drain cost: closed forms only
        slowest = max(range(stages), key=lambda i: fwd[i] + dx[i] + dw[i])
        fwd, dx, dw = ([x[slowest]] * stages for x in (fwd, dx, dw))
        send_s, pipe_send = 0.0, 2 * (stages - 1) * send_s
    else:
        pipe_send = 0.0
    if run.pp_schedule == "zb-h1":
        pipe = pipeline_time("zb-h1", run.pp, m, 1, fwd, dx, dw, send_s=send_s)
    else:
        pipe = pipeline_time(run.pp_schedule, run.pp, m, run.virtual_stages, fwd,
                             [a + b for a, b in zip(dx, dw)], 0.0, send_s=send_s)
    # the data-parallel dimension, once per optimizer step, on the rank with the most parameters
    local = max(stage_params(run, split, r) for r in range(run.pp)) / run.tp
    dp = dp_collectives(run, topology, profile, mesh, local)
    overlap = profile.overlap.get(run.strategy, 0.0)
    heaviest = max(range(run.pp), key=lambda r: split.layers_on_rank(r))
    rank_fwd = sum(fwd[s] for s in split.stages_of(heaviest))
    rank_bwd = sum(dx[s] + dw[s] for s in split.stages_of(heaviest))
    dp_fwd = sum(c.time_s for c in dp if c.phase == FORWARD)
    dp_bwd = sum(c.time_s for c in dp if c.phase == BACKWARD)
    dp_after = sum(c.time_s for c in dp if c.phase == AFTER_STEP)
    dp_exposed = exposed_time(dp_fwd, rank_fwd, overlap) + exposed_time(dp_bwd, rank_bwd, overlap) + dp_after
    hbm = hardware.hbm_bytes_per_s(topology.gpu_spec.name) * profile.hbm_efficiency
    optimizer_s = ADAMW_FUSED_BYTES_PER_PARAM * local / run.shard_size / hbm
    step = pipe.step_s + pipe_send + dp_exposed + optimizer_s

    tp_per_micro = split.layers_on_rank(heaviest) * block.comm_s  # TP and CP exposed, one micro-batch
    memory_per_micro = split.layers_on_rank(heaviest) * block.memory_s
    exposed = m * tp_per_micro + dp_exposed
    blocks = split.layers_on_rank(heaviest) * m  # block passes of the busiest rank in a step
    rerun = rerun_block_share(run)  # the forward's TP collectives again, in the backward's recompute
    collectives = tuple(replace(c, count=c.count * blocks, time_s=c.time_s * blocks) for c in tp_collectives)
    collectives += tuple(replace(c, phase=BACKWARD, count=round(c.count * blocks * rerun),
                                 time_s=c.time_s * blocks * rerun, unit="block rerun")
                         for c in tp_collectives if rerun and c.phase == FORWARD) + tuple(dp)
    compute_s = m * (rank_fwd + rank_bwd - tp_per_micro - memory_per_micro)
    memory, peak_rank = rank_memory(run, split, profile,
                                    topology.gpus[0].memory_bytes or topology.gpu_spec.memory_bytes)
    tokens_step = run.global_batch * run.seq_len
    per_gpu = tokens_step / step / run.num_gpus
    peak = mfu_peak_flops(run, topology, profile)
    phases = (PhaseCost("forward", m * rank_fwd, 0.0, 0.0, 0.0), PhaseCost("backward", m * rank_bwd, 0.0, 0.0, 0.0),
              PhaseCost("optimizer", optimizer_s + dp_after, 0.0, dp_after, 0.0))
    bottleneck = topology.bottleneck_gbps(run.gpus)
    mesh_info = {"tp": run.tp, "pp": run.pp, "cp": run.cp, "dp_shard": run.dp_shard, "dp_replicate": run.dp_replicate,
                 "sequence_parallel": run.sequence_parallel and run.tp > 1, "schedule": run.pp_schedule,
                 "virtual_stages": run.virtual_stages, "grad_accum": m, "global_batch": run.global_batch,
                 "layers_per_stage": list(split.layers), "bubble_s": pipe.bubble_s,
                 "bubble_fraction": pipe.bubble_fraction, "pipeline_method": pipe.method, "send_s": send_s,
                 "peak_stage": peak_rank, "peak_rank": run.gpus[mesh_rank(mesh, peak_rank)]}
    return Prediction(
        run=run, topology=topology.name, step_time_s=step, tokens_per_s=per_gpu * run.num_gpus,
        tokens_per_s_per_gpu=per_gpu,
        time=TimeBreakdown(compute_s, sum(c.time_s for c in collectives), exposed, collectives, m * memory_per_micro,
                           optimizer_s,
                           m * rank_fwd, m * rank_bwd, phases=phases),
        memory=memory, fits=fits(memory, profile),
        bottleneck_gbps=None if bottleneck == math.inf else bottleneck,
        islands_spanned=len(topology.islands_spanned(run.gpus)),
        mfu=training_flops_per_token(model, run.seq_len) * tokens_step / run.num_gpus / step / peak,
        profile_fingerprint=profile.fingerprint, compile_s=profile.compile_s if run.compile else 0.0,
        mesh=mesh_info, mfu_peak_flops=peak,
    )


def mesh_rank(mesh: Mesh, pp_rank: int) -> int:
    """The first global rank of pipeline rank `pp_rank` (pp is the outermost dimension)."""
    return pp_rank * (len(mesh.gpus) // mesh.pp)


def accumulate(prediction: Prediction, run: Run, host_spread: float = 0.0) -> Prediction:
    """A data-parallel run with grad_accum micro-batches per optimizer step, from its one-micro-batch prediction:
    every micro-batch's forward and backward as predicted (FSDP2 gathers and reduce-scatters each one, as torchtitan
    runs it), but DDP's family all-reduces once (no_sync on the others, which run without their exposed
    communication), and the optimizer step once."""
    m = run.grad_accum
    if m == 1:
        return prediction
    phases = {p.phase: p for p in prediction.time.phases}
    fwd, bwd, opt = (max(phases[k].gpu_s, phases[k].host_s) for k in ("forward", "backward", "optimizer"))
    quiet_bwd = max(phases["backward"].gpu_s - (phases["backward"].exposed_comm_s if run.spec.autocast else 0.0),
                    phases["backward"].host_s)
    step = m * fwd + (m - 1) * quiet_bwd + bwd + opt

    def at(scale: float) -> float:  # the step with the host `scale` x as fast (Profile.host_spread)
        def phase(p, gpu=None):
            return max(phases[p].host_s * scale, phases[p].gpu_s if gpu is None else gpu)
        quiet = phases["backward"].gpu_s - (phases["backward"].exposed_comm_s if run.spec.autocast else 0.0)
        return m * phase("forward") + (m - 1) * phase("backward", quiet) + phase("backward") + phase("optimizer")
    tokens = run.tokens * m
    per_gpu = tokens / step
    host = m * (phases["forward"].host_s + phases["backward"].host_s) + phases["optimizer"].host_s
    wait = m * (phases["forward"].host_wait_s + phases["backward"].host_wait_s) + phases["optimizer"].host_wait_s
    return replace(prediction, run=run, step_time_s=step, tokens_per_s=per_gpu * run.num_gpus,
                   tokens_per_s_per_gpu=per_gpu, mfu=prediction.mfu * prediction.step_time_s * m / step,
                   time=replace(prediction.time, host_s=host, host_wait_s=wait,
                                step_range_s=(at(1 - host_spread), at(1 + host_spread)) if host_spread else ()),
                   mesh={"tp": 1, "pp": 1, "cp": 1, "dp_shard": run.dp_shard, "dp_replicate": run.dp_replicate,
                         "schedule": run.pp_schedule, "virtual_stages": 1, "grad_accum": m,
                         "global_batch": run.global_batch, "bubble_s": 0.0, "peak_stage": 0})
