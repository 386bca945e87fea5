"""`bench train`, rank side, with tensor, pipeline or context parallelism: the mesh as torchtitan composes it.

One DeviceMesh named (pp, dp_replicate, dp_shard, cp, tp) from the Run's degrees, then, in torchtitan's
order (torchtitan/models/llama3/infra/parallelize.py, pipeline.py): the layers of this rank's pipeline
stages cut out of the full model, tensor parallelism on them (`parallelize_module`, colwise / rowwise, with
sequence parallel where the Run says so), activation checkpointing, compile, FSDP2 `fully_shard` over the
data-parallel dimensions, and a `torch.distributed.pipelining` schedule over the stages. Gradient
accumulation: the Run's grad_accum micro-batches per optimizer step (the pipeline's micro-batches with pp).

Every rank builds the full model from the case's seed first, so that the weights are those DDP starts from,
and micro-batch j of data-parallel rank d draws the tokens DDP's rank d * grad_accum + j draws: the losses
agree with DDP's over dp x grad_accum processes (tests/dist/test_model_parallel.py).

The bench model's q, k and v are one Linear, whose rows are [all q heads; all k heads; all v heads]. Colwise
sharding cuts rows into tp contiguous blocks, so the rows are first reordered rank by rank ([q, k, v heads of
rank 0; of rank 1; ...]): each rank's block is then a q, k, v projection of heads / tp and kv_heads / tp
heads, the layout the attention's forward reads with its head counts divided by tp. The same weights,
permuted: the arithmetic is DDP's.

Context parallelism needs CUDA: PyTorch's context_parallel replaces the flash / efficient / cuDNN SDPA
kernels by ring attention, and a CPU has none of those kernels (its SDPA is the math one).
"""

from __future__ import annotations

import statistics
from contextlib import nullcontext

import torch
import torch.nn as nn
import torch.nn.functional as F

from topowise.measure import steps
from topowise.measure import strategies as S
from topowise.measure.train import MESH_DIMS, TrainCase
from topowise.run import Run


def mesh_shape(run: Run) -> tuple[int, ...]:
    """The degrees of MESH_DIMS for `run`: hsdp's replicas and shard group, or all of dp sharded (zero1-3)
    or replicated (ddp)."""
    return run.pp, run.dp_replicate, run.dp_shard, run.cp, run.tp


def schedule_class(name: str):
    """The torch.distributed.pipelining schedule of a Run's pp_schedule, and whether it runs several
    stages per rank."""
    from torch.distributed.pipelining import schedules

    return {"1f1b": (schedules.Schedule1F1B, False),
            "interleaved-1f1b": (schedules.ScheduleInterleaved1F1B, True),
            "zb-h1": (schedules.ScheduleInterleavedZeroBubble, True)}[name]


class Stage(nn.Module):
    """A contiguous run of the bench transformer's layers: with the embedding on the first stage, the
    final norm and output projection on the last (Transformer.forward's arithmetic, cut)."""

    rope_cos: torch.Tensor
    rope_sin: torch.Tensor

    def __init__(self, model: nn.Module, layers: range, *, first: bool, last: bool):
        super().__init__()
        self.embed = model.embed if first else None
        self.positions = model.positions if first else None
        self.layers = nn.ModuleList(model.layers[i] for i in layers)
        self.norm = model.norm if last else None
        self.lm_head = (model.lm_head if model.lm_head is not None else _TiedHead(model.embed)) if last else None
        self.register_buffer("rope_cos", model.rope_cos, persistent=False)
        self.register_buffer("rope_sin", model.rope_sin, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.embed is not None:
            tokens = x
            x = self.embed(tokens)
            if self.positions is not None:
                x = x + self.positions(torch.arange(tokens.shape[1], device=tokens.device))
        for layer in self.layers:  # the attention cuts the tables to its (whole) sequence
            x = layer(x, self.rope_cos, self.rope_sin)
        if self.norm is not None and self.lm_head is not None:
            x = self.lm_head(self.norm(x))
            if hasattr(x, "full_tensor"):  # a tied head under TP: the logits as a DTensor, sharded over vocab
                x = x.full_tensor()
        return x


class _TiedHead(nn.Module):
    """The output projection that reuses the embedding's weight (tied embeddings)."""

    def __init__(self, embed: nn.Embedding):
        super().__init__()
        self.embed = [embed]  # a list: not a submodule, so the weight is counted (and sharded) once

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.embed[0].weight
        if hasattr(x, "redistribute"):  # sequence parallel: the norm's output, sharded over the sequence
            from torch.distributed.tensor import Replicate

            x = x.redistribute(placements=[Replicate()])
        return F.linear(x, weight)


def stage_layers(run: Run, pp_rank: int) -> list[tuple[int, range]]:
    """(virtual stage index, its transformer layers) of pipeline rank `pp_rank`."""
    split = run.layer_split
    starts = [sum(split.layers[:s]) for s in range(len(split.layers))]
    return [(s, range(starts[s], starts[s] + split.layers[s])) for s in split.stages_of(pp_rank)]


def reorder_qkv_for_tp(attn: nn.Module, tp: int) -> None:
    """The fused qkv Linear's rows regrouped rank by rank (the module docstring says why), in place; the
    attention then counts its heads per rank."""
    heads, kv, d = attn.heads, attn.kv_heads, attn.head_dim
    q_rows = torch.arange(heads * d).view(tp, -1)
    k_rows = (heads * d + torch.arange(kv * d)).view(tp, -1)
    v_rows = ((heads + kv) * d + torch.arange(kv * d)).view(tp, -1)
    order = torch.cat([torch.cat((q_rows[r], k_rows[r], v_rows[r])) for r in range(tp)])
    with torch.no_grad():
        attn.qkv.weight.copy_(attn.qkv.weight[order])
        if attn.qkv.bias is not None:
            attn.qkv.bias.copy_(attn.qkv.bias[order])
    attn.heads, attn.kv_heads = heads // tp, kv // tp


def apply_tp(stage: Stage, tp_mesh, sequence_parallel: bool) -> None:
    """torchtitan's Llama plan: q/k/v, gate and up colwise, the attention output and down rowwise; with
    sequence parallel the norms shard the sequence (SequenceParallel), the embedding returns its shard of
    the sequence and every block's input is gathered before attention and the MLP. Without it, the norms,
    the embedding and the output layer stay whole on every rank (the same gradients on each)."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    tp = tp_mesh.size()
    if sequence_parallel:
        top = {}
        if stage.embed is not None:
            top["embed"] = RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1))
        if stage.norm is not None:
            top["norm"] = SequenceParallel()
            if isinstance(stage.lm_head, nn.Linear):
                top["lm_head"] = ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate())
        if top:
            parallelize_module(stage, tp_mesh, top)
    elif stage.norm is not None and isinstance(stage.lm_head, nn.Linear):
        parallelize_module(stage, tp_mesh, {"lm_head": ColwiseParallel(output_layouts=Replicate())})
    for block in stage.layers:
        reorder_qkv_for_tp(block.attn, tp)
        plan = {"attn.qkv": ColwiseParallel(), "mlp.gate": ColwiseParallel(), "mlp.up": ColwiseParallel()}
        if sequence_parallel:
            plan.update({
                "attn_norm": SequenceParallel(), "mlp_norm": SequenceParallel(),
                "attn": PrepareModuleInput(input_layouts=(Shard(1), None, None),
                                           desired_input_layouts=(Replicate(), None, None)),
                "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
                "attn.out": RowwiseParallel(output_layouts=Shard(1)),
                "mlp.down": RowwiseParallel(output_layouts=Shard(1)),
            })
        else:
            plan.update({"attn.out": RowwiseParallel(), "mlp.down": RowwiseParallel()})
        parallelize_module(block, tp_mesh, plan)


def dp_mesh_of(mesh, run: Run):
    """The mesh FSDP2 shards over (torchtitan's dp_shard x cp, with dp_replicate as HSDP's replicas), or
    None when there is no data parallelism (dp 1, cp 1)."""
    if run.dp * run.cp == 1:
        return None
    shard = mesh["dp_shard", "cp"]._flatten("dp_shard_cp") if run.cp > 1 else mesh["dp_shard"]
    if run.dp_replicate == 1:
        return shard
    if run.cp > 1:
        return mesh["dp_replicate", "dp_shard_cp"]
    return mesh["dp_replicate", "dp_shard"]


def build_stages(case: TrainCase, rank, mesh) -> tuple[list[tuple[int, Stage]], bool]:
    """This rank's stages, parallelised in torchtitan's order (TP, checkpointing, compile, FSDP2), and
    whether they compute under autocast (no FSDP2 mixed precision to cast them)."""
    from topowise.models.transformer import build_model

    run = case.run
    model = build_model(run.model, run.seq_len, rank.device, case.seed)  # every rank: DDP's weights
    pp_rank = mesh["pp"].get_local_rank()
    total = run.pp * run.virtual_stages
    stages = []
    for index, layers in stage_layers(run, pp_rank):
        stage = Stage(model, layers, first=index == 0, last=index == total - 1)
        if run.tp > 1:
            apply_tp(stage, mesh["tp"], run.sequence_parallel)
        S.apply_checkpointing(stage, run.checkpointing, run.selective_ac_option)
        if run.compile:
            S.apply_compile(stage)
        stages.append((index, stage))
    dp_mesh = dp_mesh_of(mesh, run)
    if dp_mesh is not None:
        for _, stage in stages:
            S.apply_fsdp(stage, dp_mesh, reshard_after_forward=run.spec.reshard_after_forward)
    return stages, dp_mesh is None and run.model.family != "callable"


def train_mesh(case: TrainCase, rank, trace_dir: str | None = None) -> dict:
    """One case with tp, pp or cp above 1 on this rank: the step loop of topowise.measure.steps, the
    result every rank writes, and this rank's own place, time and peak in "ranks"."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    run = case.run
    device_type = "cuda" if case.device == "cuda" else "cpu"
    if run.cp > 1 and device_type != "cuda":
        raise RuntimeError("context parallelism needs CUDA (ring attention over the flash / efficient / cuDNN "
                           "SDPA kernels); a CPU run has only the math kernel")
    measured_peak = steps.measure_matmul_flops() if device_type == "cuda" else None
    mesh = init_device_mesh(device_type, mesh_shape(run), mesh_dim_names=MESH_DIMS)
    coords = {name: mesh[name].get_local_rank() for name in MESH_DIMS}
    stages, autocast_on = build_stages(case, rank, mesh)
    params = [p for _, stage in stages for p in stage.parameters()]
    # DTensor and plain parameters (TP without sequence parallel leaves the norms whole) in separate groups:
    # the foreach and fused kernels take one kind per call
    groups = [{"params": [p for p in params if hasattr(p, "device_mesh") == dt]} for dt in (True, False)]
    optimizer = S.make_optimizer([g for g in groups if g["params"]], lr=case.lr, weight_decay=case.weight_decay,
                                 device_type=device_type)
    autocast = torch.autocast(device_type, dtype=torch.bfloat16) if autocast_on else nullcontext()

    dp_index = coords["dp_replicate"] * run.dp_shard + coords["dp_shard"]
    inputs, targets = micro_batches(case, dp_index, rank.device)  # (steps, grad_accum, micro_batch, seq)
    cp_slice = _cp_slicer(run, coords["cp"])

    def loss_fn(logits, target):  # float32 log-softmax of the bf16 logits, as every strategy computes it
        return F.cross_entropy(logits.flatten(0, 1).float(), target.flatten())

    last = any(index == run.pp * run.virtual_stages - 1 for index, _ in stages)
    host: list[tuple[float, float, float]] = []
    if run.pp > 1:
        schedule = make_schedule(run, stages, mesh, rank.device, loss_fn)

        def forward_backward(step: int):
            x, y = inputs[step].flatten(0, 1), targets[step].flatten(0, 1)  # grad_accum x micro_batch rows
            losses: list = []
            with autocast:
                if coords["pp"] == 0:
                    schedule.step(cp_slice(x), target=cp_slice(y) if last else None, losses=losses)
                else:
                    schedule.step(target=cp_slice(y) if last else None, losses=losses)
            return torch.stack(losses).mean().detach() if losses else torch.zeros((), device=rank.device)
    else:
        only = stages[0][1]

        def forward_backward(step: int):
            total = torch.zeros((), device=rank.device)
            for j in range(run.grad_accum):
                with autocast:
                    loss = loss_fn(only(cp_slice(inputs[step, j])), cp_slice(targets[step, j]))
                (loss / run.grad_accum).backward()
                total += loss.detach()
            return total / run.grad_accum

    def optimizer_step():
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    def one_step(step: int):
        # the pipeline's forward and backward are one schedule call: the phases are (both, 0, optimizer)
        return steps.phased_step(host, lambda: forward_backward(step), lambda loss: None, optimizer_step)

    peaks: list[int] = []
    marks: list[float] = []
    times, losses = steps.timed_steps(case.warmup + case.steps, one_step, device_type == "cuda", peaks, trace_dir,
                                      marks, probe=lambda: probe_groups(mesh, run, rank.device))
    losses = global_losses(losses, last, run, rank.device)
    mine = {"rank": rank.rank, "stages": [index for index, _ in stages], "mesh": coords,
            "step_time_s": statistics.median(times[case.warmup:]),
            "peak_memory_bytes": max(peaks) if peaks else None, "peak_rss_bytes": _peak_rss_bytes()}
    everyone: list = [None] * rank.world_size
    dist.all_gather_object(everyone, mine)
    layout = {"mesh": dict(zip(MESH_DIMS, mesh_shape(run))), "pp_schedule": run.pp_schedule if run.pp > 1 else None,
              "layer_split": list(run.layer_split.layers), "grad_accum": run.grad_accum,
              "sequence_parallel": run.sequence_parallel and run.tp > 1, "ranks": everyone,
              # which process group is which mesh dimension: the profiler names a collective's group, not its dimension
              "process_groups": {mesh.get_group(d).group_name: d for d, n in zip(MESH_DIMS, mesh_shape(run)) if n > 1},
              "host_phase_s": steps.host_phases(host[case.warmup:], rank)}
    return steps.step_result(case, rank, times, losses, measured_peak, layout, step_peaks=peaks, marks=marks)


PROBE_NUMEL = 1 << 20  # 4 MB of float32: long enough (ms on gloo) that the second probe finds the first running
PROBE_ROUNDS = 3  # a pair that both landed on one thread (its first done before the second came) is tried again


def probe_groups(mesh, run: Run, device) -> None:
    """Under --trace, before the first step: on each mesh dimension's group, two all-reduces in flight at once,
    inside a range named topowise.probe.<dimension>. A gloo group runs its collectives on its own two worker
    threads and its trace events name neither group nor dimension; with the first probe still running, the
    second goes to the group's other thread, so that the trace reader (topowise.measure.timeline) learns which
    threads are which dimension's. On NCCL the profiler names each collective's group itself; the probes are
    then only two small collectives outside the steps."""
    import torch.distributed as dist
    from torch.profiler import record_function

    first, second = torch.zeros(PROBE_NUMEL, device=device), torch.zeros(1, device=device)
    for name, size in zip(MESH_DIMS, mesh_shape(run)):
        if size == 1:
            continue
        group = mesh.get_group(name)
        with record_function(f"topowise.probe.{name}"):
            for _ in range(PROBE_ROUNDS):
                works = [dist.all_reduce(first, group=group, async_op=True),
                         dist.all_reduce(second, group=group, async_op=True)]
                for work in works:
                    work.wait()


def make_schedule(run: Run, stages: list[tuple[int, Stage]], mesh, device, loss_fn):
    """The pipeline schedule over this rank's stages (PipelineStage on the pp dimension's group)."""
    from torch.distributed.pipelining import PipelineStage

    cls, multi = schedule_class(run.pp_schedule)
    total = run.pp * run.virtual_stages
    pipe = [PipelineStage(stage, index, total, device, group=mesh.get_group("pp")) for index, stage in stages]
    return cls(pipe if multi else pipe[0], n_microbatches=run.grad_accum, loss_fn=loss_fn)


def micro_batches(case: TrainCase, dp_index: int, device):
    """(inputs, targets), each (steps, grad_accum, micro_batch, seq): micro-batch j of data-parallel rank d
    holds what DDP's rank d * grad_accum + j draws (steps.synthetic_batches)."""
    ga = case.run.grad_accum
    drawn = [steps.synthetic_batches(case, dp_index * ga + j, case.run.model.vocab_size, device) for j in range(ga)]
    return torch.stack([x for x, _ in drawn], dim=1), torch.stack([y for _, y in drawn], dim=1)


def _cp_slicer(run: Run, cp_rank: int):
    """cp > 1: this rank's part of the sequence (CUDA only; refused before). cp 1: the batch as it is."""
    if run.cp == 1:
        return lambda t: t
    raise NotImplementedError("context parallelism is not run by bench train yet")


def global_losses(losses: list, last: bool, run: Run, device) -> list:
    """Each step's loss as the mean over the last pipeline stage's ranks (the others computed none), the
    same value on every rank, so that steps.step_result's mean over ranks keeps it."""
    import torch.distributed as dist

    mine = torch.stack(losses).double() if last else torch.zeros(len(losses), dtype=torch.float64, device=device)
    dist.all_reduce(mine, op=dist.ReduceOp.SUM)
    return list(mine / (run.num_gpus // run.pp))


def _peak_rss_bytes() -> int | None:
    """This process's peak resident memory (the CPU's only per-rank peak; ru_maxrss is KiB on Linux)."""
    try:
        import resource
    except ImportError:  # not on Windows
        return None
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
