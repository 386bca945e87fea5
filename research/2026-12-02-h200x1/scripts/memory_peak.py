"""What is alive at a bench train step's memory peak, by where it was allocated, beside the memory model's terms.

    python research/2026-12-02-h200x1/scripts/memory_peak.py --model research/configs/llama-wide-l8.json --strategy zero3 \
        --micro-batch 2 --seq-len 4096 --checkpointing selective --out DIR
    (--selective-ac-option K, --compile; one GPU, one process: no torchrun needed)

Runs the case as bench train's rank runs it (topowise.measure.steps.train_pytorch, world size 1) with the
CUDA caching allocator's history recorded from before the model is built, then replays every allocation
and free of the last step to find the moment the allocated bytes peaked and what was alive then. Each live
allocation is named by the innermost frame of its Python stack in topowise and the innermost in torch's
machinery (FSDP, checkpoint, the optimizer, compiled code); what autograd's C++ backward allocates (the
gradients) has no Python frame. Writes
DIR/memory_peak.jsonl (one line per case: the measured peak, the model's terms, the live bytes by name)
and prints the largest groups.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import torch  # noqa: E402

MARK_BYTES = 12_345 * 512 + 7  # rounded up by the allocator to a multiple of 512
MARK_ALLOCATED = (MARK_BYTES + 511) // 512 * 512
MECHANISMS = ("torch/distributed/", "torch/utils/checkpoint", "torch/optim/", "torch/_functorch/",
              "torch/_dynamo/", "torch/autograd/")


def frame_name(frames: list[dict]) -> str:
    """Where a block was allocated: the innermost frame in topowise, then (after " < ") the innermost one in
    torch's machinery (FSDP, checkpoint, the optimizer, compiled code); without either, the innermost
    frame; without any Python frame (autograd's C++ backward), "no Python frame"."""
    def first(places):
        for f in frames:
            name = f.get("filename", "")
            for place in places:
                if place in name:
                    return f"{name[name.index(place):]}:{f.get('name')}:{f.get('line')}"
        return None

    parts = [p for p in (first(("topowise/",)), first(MECHANISMS)) if p]
    if parts:
        return " < ".join(parts)
    return f"{frames[0].get('filename', '?')}:{frames[0].get('name')}" if frames else "no Python frame"


def live_at_peak(trace: list[dict], start: int) -> tuple[int, dict[int, tuple[int, str]]]:
    """Replay allocator events: the peak of allocated bytes from event `start` on, and what was alive then
    (addr -> (bytes, name)); events before `start` count toward what is alive."""
    alive: dict[int, tuple[int, list]] = {}
    total = peak = 0
    at_peak: dict[int, tuple[int, list]] = {}
    for i, e in enumerate(trace):
        action = e["action"]
        if action == "alloc":
            alive[e["addr"]] = (e["size"], e.get("frames", []))
            total += e["size"]
        elif action == "free_completed" and e["addr"] in alive:
            total -= alive.pop(e["addr"])[0]
        if i >= start and total > peak:
            peak, at_peak = total, dict(alive)
    return peak, {a: (size, frame_name(frames)) for a, (size, frames) in at_peak.items()}


def main(argv=None) -> int:
    from topowise.costmodel.memory import estimate_memory
    from topowise.costmodel.profile import default_profile
    from topowise.measure import steps
    from topowise.measure.rank import init_distributed
    from topowise.measure.train import TrainCase
    from topowise.models.spec import load_model
    from topowise.run import Run

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--strategy", default="ddp")
    p.add_argument("--micro-batch", type=int, default=1)
    p.add_argument("--seq-len", type=int, default=4096)
    p.add_argument("--checkpointing", default="none", choices=("none", "selective", "full"))
    p.add_argument("--selective-ac-option", default="op")
    p.add_argument("--compile", action="store_true")
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    for k, v in {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29533", "RANK": "0", "WORLD_SIZE": "1",
                 "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}.items():
        os.environ.setdefault(k, v)
    spec = load_model(a.model)
    run = Run(spec, (0,), a.strategy, micro_batch=a.micro_batch, seq_len=a.seq_len, checkpointing=a.checkpointing,
              compile=a.compile, selective_ac_option=a.selective_ac_option)
    case = TrainCase(run, steps=a.steps, warmup=a.warmup, device="cuda")
    rank = init_distributed("nccl")
    step_of = steps.phased_step

    def marked_step(*args, **kwargs):  # an allocation of a size no tensor has marks where each step starts
        torch.empty(MARK_BYTES, dtype=torch.uint8, device="cuda")  # freed at once
        return step_of(*args, **kwargs)

    steps.phased_step = marked_step
    torch.cuda.memory._record_memory_history(enabled="all", context="alloc", stacks="python", max_entries=2_000_000)
    result = steps.train_pytorch(case, rank)
    snapshot = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    trace = snapshot["device_traces"][0]
    marks = [i for i, e in enumerate(trace) if e["action"] == "alloc" and e["size"] in (MARK_BYTES, MARK_ALLOCATED)]
    peak, live = live_at_peak(trace, marks[-1])  # the last timed step
    groups: dict[str, int] = defaultdict(int)
    for size, name in live.values():
        groups[name] += size
    mem = estimate_memory(run, gpu_memory_bytes=torch.cuda.get_device_properties(0).total_memory,
                          profile=default_profile())
    row = {"model": spec.name, "strategy": a.strategy, "micro_batch": a.micro_batch, "seq_len": a.seq_len,
           "checkpointing": a.checkpointing, "selective_ac_option": a.selective_ac_option, "compile": a.compile,
           "replayed_peak_bytes": peak, "measured_steady_peak_bytes": result.get("steady_peak_memory_bytes"),
           "events": len(trace), "modelled": mem.to_dict(),
           "live_by_place": dict(sorted(groups.items(), key=lambda kv: -kv[1]))}
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "memory_peak.jsonl", "a") as f:
        f.write(json.dumps(row) + "\n")
    print(f"{spec.name} {a.strategy} {a.micro_batch}x{a.seq_len} {a.checkpointing}"
          f"{'' if a.selective_ac_option == 'op' else a.selective_ac_option}{' compiled' if a.compile else ''}: "
          f"replayed peak {peak / 2**30:.3f} GiB (steady peak measured "
          f"{(result.get('steady_peak_memory_bytes') or 0) / 2**30:.3f})")
    for name, size in list(row["live_by_place"].items())[:25]:
        print(f"  {size / 2**30:8.3f} GiB  {name}")
    torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
