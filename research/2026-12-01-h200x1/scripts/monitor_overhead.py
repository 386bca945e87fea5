"""StepMonitor's overhead on a real training step: the same loop with and without the monitor, alternating.

    PYTHONPATH=. python3 -m torch.distributed.run --standalone --nproc-per-node 1 \
        research/2026-12-01-h200x1/scripts/monitor_overhead.py --model llama3.2-1b --seq-len 8192 --out monitor_overhead.json
    # CPU smoke test: ... --nproc-per-node 2 research/2026-12-01-h200x1/scripts/monitor_overhead.py --model tiny --seq-len 64

Per alternation: a block of --warmup + --steps steps without the monitor and one with it (the order
swaps every alternation), the step timed from outside by CUDA events (perf_counter on CPU) and read
after the block. A fresh StepMonitor per monitored block (its hooks are removed at close, so the
unmonitored blocks run without them); one gloo group for all. Prints the median over alternations of
(median monitored step / median plain step - 1) in %, and writes JSON to --out.
"""

import argparse
import json
import os
import statistics
import tempfile
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

from topowise.measure.strategies import make_optimizer
from topowise.models.spec import load_model
from topowise.models.transformer import build_model
from topowise.monitor import StepMonitor


def wrap(model, strategy, device, world):
    """As bench train runs it: DDP with 25 MB buckets and gradients as bucket views, or FSDP2 as zero3."""
    from topowise.measure.strategies import apply_ddp, apply_fsdp

    if strategy == "ddp":
        return apply_ddp(model, device_type=device.type)
    from torch.distributed.device_mesh import init_device_mesh

    return apply_fsdp(model, init_device_mesh(device.type, (world,)), reshard_after_forward=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llama3.2-1b")
    parser.add_argument("--strategy", choices=("ddp", "fsdp"), default="ddp")
    parser.add_argument("--micro-batch", type=int, default=1)
    parser.add_argument("--seq-len", type=int, default=8192)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--alternations", type=int, default=6)
    parser.add_argument("--gather-every", type=int, default=1)
    parser.add_argument("--out", default=None, help="JSON results")
    args = parser.parse_args()
    cuda = torch.cuda.is_available()
    if cuda:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    spec = load_model(args.model)
    model = wrap(build_model(spec, args.seq_len, device.type, seed=0), args.strategy, device, world)
    opt = make_optimizer(model.parameters(), lr=3e-4, weight_decay=0.1, device_type=device.type)
    g = torch.Generator().manual_seed(rank)
    tokens = torch.randint(0, spec.vocab_size, (4, args.micro_batch, args.seq_len + 1), generator=g).to(device)
    group = dist.new_group(backend="gloo") if world > 1 else None
    run_dir = tempfile.mkdtemp(prefix="monitor-overhead-")

    def train_step(i):
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
            logits = model(tokens[i % 4, :, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1).float(), tokens[i % 4, :, 1:].flatten())
        del logits
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    def mark():
        if cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def block(monitored):
        mon = StepMonitor(run_dir, model=model, group=group, gather_every=args.gather_every,
                          tensorboard=None, quiet=True) if monitored else None
        marks = []
        for i in range(args.warmup + args.steps):
            begin = mark()
            if mon is not None:
                with mon.step():
                    train_step(i)
            else:
                train_step(i)
            marks.append((begin, mark()))
        if cuda:
            torch.cuda.synchronize()
        if mon is not None:
            mon.close()
        times = [(a.elapsed_time(b) / 1e3) if cuda else b - a for a, b in marks[args.warmup:]]
        mine = torch.tensor([statistics.median(times)], dtype=torch.float64)
        if group is not None:
            dist.all_reduce(mine, op=dist.ReduceOp.MAX, group=group)  # the step is the slowest rank's
        return mine.item()

    block(False)  # warm everything once (allocator, autotuning)
    pairs = []
    for alternation in range(args.alternations):
        order = (False, True) if alternation % 2 == 0 else (True, False)
        result = {monitored: block(monitored) for monitored in order}
        pairs.append({"plain_step_s": result[False], "monitored_step_s": result[True],
                      "overhead_pct": 100 * (result[True] / result[False] - 1)})
    overhead = statistics.median(p["overhead_pct"] for p in pairs)
    if rank == 0:
        for p in pairs:
            print(f"plain {p['plain_step_s'] * 1e3:8.2f} ms  monitored {p['monitored_step_s'] * 1e3:8.2f} ms  "
                  f"{p['overhead_pct']:+6.2f}%", flush=True)
        print(f"StepMonitor overhead, {args.model} {args.strategy} x{world} mb {args.micro_batch} seq {args.seq_len} "
              f"on {device.type}: {overhead:+.2f}% (median of {len(pairs)} alternations)", flush=True)
        if args.out:
            doc = {"model": args.model, "strategy": args.strategy, "world_size": world, "device": device.type,
                   "gpu": torch.cuda.get_device_name() if cuda else None, "micro_batch": args.micro_batch,
                   "seq_len": args.seq_len, "steps": args.steps, "warmup": args.warmup,
                   "gather_every": args.gather_every, "torch": torch.__version__, "pairs": pairs,
                   "overhead_pct": overhead}
            with open(args.out, "w") as f:
                json.dump(doc, f, indent=2)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
