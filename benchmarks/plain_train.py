"""A plain training loop to cross-check the MFU `bench train` reports: same model, same settings.

    PYTHONPATH=. python3 -m torch.distributed.run --standalone --nproc-per-node 2 \
        benchmarks/plain_train.py --model llama3.2-1b --micro-batch 1 --seq-len 8192

No harness: DDP (bf16 autocast, fp32 weights, 25 MB buckets) and then FSDP2 (fully_shard per block
and root, bf16 params, fp32 reduce) in one process group, fused AdamW, float32 loss from bf16
logits, CUDA events read once after the loop. Prints the median step time and MFU against both the
datasheet peak and a bf16 8192^3 matmul measured here. If this beats `bench train` by more than a
few percent on the same case, the harness has a bug.
"""

import argparse
import os
import statistics

import torch
import torch.distributed as dist
import torch.nn.functional as F

from topowise.hardware import gpu_spec
from topowise.models.spec import load_model
from topowise.models.transformer import build_model


def matmul_peak(n=8192, reps=20):
    a, b = (torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    for _ in range(5):
        a @ b
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        a @ b
    end.record()
    end.synchronize()
    return 2 * n**3 * reps / (start.elapsed_time(end) / 1e3)


def flops_per_token(spec, seq_len):
    """6N + 12 L H Q T (PaLM appendix B); N without the input embedding lookup (tied: counted once)."""
    n = spec.params - (0 if spec.tied_embeddings else spec.vocab_size * spec.hidden_size)
    return 6 * n + 12 * spec.num_layers * spec.num_heads * spec.head_dim * seq_len


def wrap(model, strategy, world):
    if strategy == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        return DDP(model, device_ids=[torch.cuda.current_device()], gradient_as_bucket_view=True,
                   bucket_cap_mb=25, broadcast_buffers=False), True
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh("cuda", (world,))
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for block in model.layers:
        fully_shard(block, mesh=mesh, mp_policy=policy, reshard_after_forward=True)
    fully_shard(model, mesh=mesh, mp_policy=policy, reshard_after_forward=True)
    return model, False


def run(strategy, args, spec, rank, world):
    model = build_model(spec, args.seq_len, "cuda", seed=0)
    model, autocast = wrap(model, strategy, world)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    total = args.warmup + args.steps
    g = torch.Generator().manual_seed(rank)
    tokens = (torch.rand((total, args.micro_batch, args.seq_len + 1), generator=g).pow(3) * spec.vocab_size)
    tokens = tokens.long().clamp_(max=spec.vocab_size - 1).cuda()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(total)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(total)]
    losses = []
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    for i in range(total):
        starts[i].record()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            logits = model(tokens[i, :, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1).float(), tokens[i, :, 1:].flatten())
        del logits
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.detach())
        ends[i].record()
    torch.cuda.synchronize()
    times = torch.tensor([s.elapsed_time(e) / 1e3 for s, e in zip(starts, ends)], device="cuda")
    dist.all_reduce(times, op=dist.ReduceOp.MAX)
    step = statistics.median(times.tolist()[args.warmup:])
    peak_mem = torch.cuda.max_memory_allocated()
    del model, opt
    torch.cuda.empty_cache()
    return step, torch.stack(losses).tolist(), peak_mem


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="llama3.2-1b")
    parser.add_argument("--micro-batch", type=int, default=1)
    parser.add_argument("--seq-len", type=int, default=8192)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--strategies", default="ddp,fsdp")
    args = parser.parse_args()
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    rank, world = dist.get_rank(), dist.get_world_size()
    spec = load_model(args.model)
    peak = matmul_peak()
    sheet = gpu_spec(torch.cuda.get_device_name()).bf16_dense_flops
    fpt = flops_per_token(spec, args.seq_len)
    for strategy in args.strategies.split(","):
        step, losses, mem = run(strategy, args, spec, rank, world)
        tps = args.micro_batch * args.seq_len / step
        if rank == 0:
            print(f"plain {strategy:5} world {world}: {step * 1e3:7.1f} ms/step, {tps:9,.0f} tok/s/GPU, "
                  f"MFU {100 * fpt * tps / peak:5.1f}% of measured {peak / 1e12:.0f} TFLOP/s, "
                  f"{100 * fpt * tps / sheet:5.1f}% of datasheet {sheet / 1e12:.0f}, "
                  f"peak alloc {mem / 1024**3:.2f} GiB (rank 0), loss {losses[0]:.4f} -> {losses[-1]:.4f}",
                  flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
