"""Each training strategy as one function of (model, process group or mesh, plain values).

How PyTorch holds training state here (the cost model in topowise/costmodel assumes the same):
- ddp: fp32 parameters, torch.autocast(bf16) compute, fp32 gradients, AdamW (fp32 exp_avg,
  exp_avg_sq), DDP(gradient_as_bucket_view=True, default buckets): all-reduce of fp32 gradients
  in 25 MB buckets, overlapped with the backward pass.
- zero1: ZeroRedundancyOptimizer(AdamW) over the same DDP: optimizer states sharded; after the
  step each rank broadcasts its updated fp32 parameter partition.
- zero2 / zero3: FSDP2 `fully_shard` on each transformer block and on the root,
  reshard_after_forward=False / True, MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32):
  fp32 sharded parameters, gradients and AdamW states; bf16 all-gathers, fp32 reduce-scatter.
- hsdp: FSDP2 on a 2-D DeviceMesh (replicate, shard), reshard_after_forward=True: reduce-scatter
  inside the shard group, then all-reduce across the replicas.

The caller initialises the full model identically on every rank before calling these, so every
strategy starts from the same weights (DDP also broadcasts rank 0's copy; fully_shard keeps each
rank's slice of it).
"""

from __future__ import annotations

import inspect

import torch
import torch.nn as nn

from topowise.run import Run

# None: DDP's default buckets, 25 MiB and a first one of 1 MiB (the cost model's, comm.ddp_bucket_ends). Giving
# bucket_cap_mb=25 is not the same: DDP then caps the first bucket at 25 MiB too (torch 2.11, measured with
# research/2026-12-02-h200x1/scripts/bucket_ready.py; torch/nn/parallel/distributed.py, is_using_default)
DDP_BUCKET_CAP_MB = None
DDP_PARAMETERS = frozenset(inspect.signature(torch.nn.parallel.DistributedDataParallel.__init__).parameters)


def apply_strategy(model: nn.Module, run: Run, world_size: int, *, device_type: str, lr: float,
                   weight_decay: float) -> tuple[nn.Module, torch.optim.Optimizer, dict]:
    """Wrap `model` as run.strategy runs it (its entry in topowise.run.STRATEGIES says how):
    (wrapped model, optimizer, the mesh's shape for the record: hsdp's shard group and replicas)."""
    spec = run.spec
    if not spec.fsdp:
        if "optimizer" in spec.sharded:
            wrapped, optimizer = apply_zero1(model, device_type=device_type, lr=lr, weight_decay=weight_decay)
        else:
            wrapped = apply_ddp(model, device_type=device_type)
            optimizer = make_optimizer(wrapped.parameters(), lr=lr, weight_decay=weight_decay, device_type=device_type)
        return wrapped, optimizer, {}
    from torch.distributed.device_mesh import init_device_mesh

    layout = {}
    if spec.replicated:
        shard = run.shard_group_size or world_size
        replicas = world_size // shard
        mesh = init_device_mesh(device_type, (replicas, shard), mesh_dim_names=("replicate", "shard"))
        wrapped = apply_hsdp(model, mesh)
        layout = {"shard_group_size": shard, "replicas": replicas}
    else:
        mesh = init_device_mesh(device_type, (world_size,), mesh_dim_names=("shard",))
        wrapped = apply_fsdp(model, mesh, reshard_after_forward=spec.reshard_after_forward)
    optimizer = make_optimizer(wrapped.parameters(), lr=lr, weight_decay=weight_decay, device_type=device_type)
    return wrapped, optimizer, layout


def make_optimizer(params, *, lr: float, weight_decay: float, device_type: str) -> torch.optim.Optimizer:
    """AdamW with its fused CUDA kernel (one launch for all parameters); the foreach form on CPU."""
    fast = {"fused": True} if device_type == "cuda" else {"foreach": True}
    return torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95), weight_decay=weight_decay, **fast)


def apply_ddp(model: nn.Module, process_group=None, *, device_type: str = "cuda",
              bucket_cap_mb: float | None = DDP_BUCKET_CAP_MB) -> nn.Module:
    """DistributedDataParallel with gradients as views into its all-reduce buckets (no copy)."""
    from torch.nn.parallel import DistributedDataParallel

    device_ids = [torch.cuda.current_device()] if device_type == "cuda" else None
    # No buffer broadcast before each forward: the only buffers are the rotary tables, identical on
    # every rank. Newer torch names it forward_sync_buffers and warns on broadcast_buffers.
    no_buffer_sync = ({"forward_sync_buffers": False} if "forward_sync_buffers" in DDP_PARAMETERS
                      else {"broadcast_buffers": False})
    return DistributedDataParallel(model, device_ids=device_ids, process_group=process_group,
                                   gradient_as_bucket_view=True, bucket_cap_mb=bucket_cap_mb, **no_buffer_sync)


def apply_zero1(model: nn.Module, process_group=None, *, device_type: str = "cuda", lr: float,
                weight_decay: float) -> tuple[nn.Module, torch.optim.Optimizer]:
    """DDP plus ZeroRedundancyOptimizer(AdamW): returns (wrapped model, sharded optimizer)."""
    from torch.distributed.optim import ZeroRedundancyOptimizer

    ddp = apply_ddp(model, process_group, device_type=device_type)
    fast = {"fused": True} if device_type == "cuda" else {"foreach": True}
    optimizer = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.AdamW,
                                        process_group=process_group, lr=lr, betas=(0.9, 0.95),
                                        weight_decay=weight_decay, **fast)
    return ddp, optimizer


def apply_fsdp(model: nn.Module, mesh, *, reshard_after_forward: bool, param_dtype=torch.bfloat16,
               reduce_dtype=torch.float32) -> nn.Module:
    """FSDP2: `fully_shard` each block, then the root (embedding, final norm, output projection).

    reshard_after_forward=False is ZeRO-2 (parameters stay gathered from forward to backward),
    True is ZeRO-3. A 1-D mesh shards over all ranks; a 2-D (replicate, shard) mesh is HSDP.
    """
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype)
    for block in model.layers:
        fully_shard(block, mesh=mesh, mp_policy=policy, reshard_after_forward=reshard_after_forward)
    # The root's own parameters are needed again at once by the backward: FSDP2 keeps them gathered.
    fully_shard(model, mesh=mesh, mp_policy=policy, reshard_after_forward=reshard_after_forward)
    return model


def apply_hsdp(model: nn.Module, mesh_2d, **kwargs) -> nn.Module:
    """HSDP: FSDP2 over a 2-D DeviceMesh named ("replicate", "shard"), ZeRO-3 inside each shard group."""
    if mesh_2d.ndim != 2:
        raise ValueError(f"apply_hsdp needs a 2-D (replicate, shard) mesh, not {mesh_2d.ndim}-D")
    return apply_fsdp(model, mesh_2d, reshard_after_forward=True, **kwargs)


def apply_activation_checkpointing(model: nn.Module) -> None:
    """Recompute each block's activations in the backward (non-reentrant checkpoint), in place."""
    apply_checkpointing(model, "full")


def apply_checkpointing(model: nn.Module, mode: str, option: str = "op") -> None:
    """Activation checkpointing as torchtitan applies it (torchtitan/distributed/activation_checkpoint.py),
    in place, before the strategy's wrap: "full" wraps every block in a non-reentrant checkpoint;
    "selective" with option "op" wraps every block in a selective one (`selective_checkpoint_policy`),
    with an integer k every k-th block (0, k, 2k, ...) in a full one; "none" leaves the model alone.
    No block draws random numbers (no dropout): the RNG state is not saved and restored."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    if mode == "none":
        return
    if mode == "selective" and option == "op":
        from torch.utils.checkpoint import create_selective_checkpoint_contexts

        def contexts():
            return create_selective_checkpoint_contexts(selective_checkpoint_policy())

        wrap = lambda block: checkpoint_wrapper(block, context_fn=contexts, preserve_rng_state=False)
        chosen = range(len(model.layers))
    else:
        every = 1 if mode == "full" else int(option)
        wrap = lambda block: checkpoint_wrapper(block, preserve_rng_state=False)
        chosen = range(0, len(model.layers), every)
    for index in chosen:
        model.layers[index] = wrap(model.layers[index])


def saved_ops() -> set:
    """The operators whose outputs selective checkpointing keeps: torchtitan's _save_list (matrix
    products, the SDPA kernels, FSDP's reduce-scatter, max), with addmm counted as a matrix product
    (a Linear with a bias: Qwen2's qkv, GPT-2's) so that every block keeps the same products."""
    aten = torch.ops.aten
    names = ("mm", "addmm", "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention",
             "_scaled_dot_product_efficient_attention", "_scaled_dot_product_flash_attention_for_cpu", "max")
    ops = {getattr(aten, name).default for name in names if hasattr(aten, name)}
    ops.add(torch.ops._c10d_functional.reduce_scatter_tensor.default)
    return ops


def selective_checkpoint_policy():
    """torchtitan's per-op policy (SelectiveAC): keep what `saved_ops` lists, except every second matrix
    product of the block's forward (counted separately in the forward and in the recompute, so both see
    the same products), and recompute everything else (norms, rotary, SwiGLU's elementwise work, casts)."""
    from torch.utils.checkpoint import CheckpointPolicy

    save = saved_ops()
    mm_ops = (torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.linear.default)
    counts = {"forward": 0, "recompute": 0}

    def policy(ctx, func, *args, **kwargs):
        key = "recompute" if ctx.is_recompute else "forward"
        if func in mm_ops:
            counts[key] += 1
        if func in save and not (func in mm_ops and counts[key] % 2 == 0):
            return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE

    return policy


def apply_compile(model: nn.Module) -> None:
    """torch.compile each block separately (the blocks are alike: one compilation, reused), in place."""
    for index, block in enumerate(model.layers):
        model.layers[index] = torch.compile(block, fullgraph=True)
