"""A training loop with topowise's StepMonitor around its step: the two lines are marked "monitor".

    torchrun --standalone --nproc-per-node 2 examples/train_with_monitor.py --steps 30 \
        --delay-rank 1 --delay-at 20 --delay-s 0.3
    topowise monitor summarize runs/monitor-demo

CPU (gloo) where no GPU is seen, one GPU per rank (NCCL) otherwise. --strategy ddp or fsdp (FSDP2's
fully_shard per block and root). --delay-* makes one rank slow at one step, as a slow data loader
(--delay-in data, before the step) or slow compute (--delay-in compute, inside the forward) would:
the other ranks wait for it in the step's collective, and the monitor says so on stderr.
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

from topowise.models.spec import load_model
from topowise.models.transformer import build_model
from topowise.monitor import StepMonitor


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny", help="a topowise model preset (tiny, llama3.2-1b, ...)")
    parser.add_argument("--strategy", choices=("ddp", "fsdp"), default="ddp")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--micro-batch", type=int, default=2)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--run-dir", default="runs/monitor-demo")
    parser.add_argument("--plan", help="a `topowise plan --save-plan` file: its predicted step beside the measured")
    parser.add_argument("--delay-rank", type=int, default=None)
    parser.add_argument("--delay-at", type=int, default=20)
    parser.add_argument("--delay-s", type=float, default=0.3)
    parser.add_argument("--delay-in", choices=("data", "compute"), default="data")
    return parser.parse_args()


def wrap(model, strategy, device):
    if strategy == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    for block in model.layers:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def main():
    args = parse_args()
    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    rank = dist.get_rank()
    spec = load_model(args.model)
    model = wrap(build_model(spec, args.seq_len, device.type, seed=0), args.strategy, device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    generator = torch.Generator().manual_seed(rank)

    mon = StepMonitor(args.run_dir, model=model, plan=args.plan)  # monitor: once, on every rank
    for step in range(args.steps):
        tokens = torch.randint(0, spec.vocab_size, (args.micro_batch, args.seq_len + 1), generator=generator)
        tokens = tokens.to(device)
        late = rank == args.delay_rank and step == args.delay_at
        if late and args.delay_in == "data":
            time.sleep(args.delay_s)  # a slow data loader on one rank
        with mon.step():  # monitor: around the step
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
                logits = model(tokens[:, :-1])
            if late and args.delay_in == "compute":
                time.sleep(args.delay_s)  # a slow rank's compute, before its backward
            loss = F.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten())
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    mon.close()  # every rank: the last steps' numbers are gathered here
    if rank == 0:
        print(f"{args.steps} steps of {args.model} ({args.strategy}, {dist.get_world_size()} ranks, "
              f"{device.type}); the monitor wrote {args.run_dir}: topowise monitor summarize {args.run_dir}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
