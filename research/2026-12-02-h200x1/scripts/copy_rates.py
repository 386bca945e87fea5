"""The per-parameter copies and casts of a training step timed alone, over a model's parameter shapes.

    python research/2026-12-02-h200x1/scripts/copy_rates.py --models llama3.2-1b,llama3.2-3b --out DIR
    python research/2026-12-02-h200x1/scripts/copy_rates.py --summary DIR/copy_rates.jsonl      # no GPU: each pass's rate share

costmodel/step.py prices each copy a strategy makes per parameter by its bytes over one memory-bound
rate (the fused AdamW's and the fp32 loss's, Profile.hbm_efficiency). A traced step suggested that the
copies do not all reach it. This times each one alone, issued as the step issues it, on random data of
the model's parameter shapes (the bench transformer, topowise/models/transformer.py):

  pass          as issued by                                 per tensor                        bytes/elem
  adamw         torch.optim.AdamW(fused=True).step()         all parameters (the reference)    28
  cast_down     autocast's weight cast, FSDP2's shard cast   fp32 -> bf16, each parameter       6
  cast_up       autocast's gradient back to fp32             bf16 -> fp32, each parameter       6
  bucket_copy   DDP: torch.mul(grad, 1/world, out=bucket)    fp32, each parameter               8
  chunk_cat     FSDP2: torch._chunk_cat into the fp32         bf16 -> fp32, each block's grads   6
                reduce-scatter input
  copy_out      FSDP2: split_with_sizes_copy of the           bf16, each block                   4
                all-gather output into the parameters
  memcpy        NCCL's reduce-scatter of one rank             fp32 device-to-device, each block  8

Each is the GPU time of its kernels (torch.profiler's device events, as research/2026-12-02-h200x1/scripts/kernel_rates.py takes
them: a host slower than many small kernels does not count) over `--reps` passes. One JSON line per
model to DIR/copy_rates.jsonl: each pass's seconds, bytes and bytes per second, and its share of the
AdamW pass's rate. Prints a table last. Exit status 2 on bad input.
"""

from __future__ import annotations

import argparse
import datetime
import json
import socket
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

RESULTS_FILE = "copy_rates.jsonl"
BYTES_PER_ELEMENT = {"adamw": 28, "cast_down": 6, "cast_up": 6, "bucket_copy": 8, "chunk_cat": 6, "copy_out": 4,
                     "memcpy": 8}


def parameter_groups(name: str) -> list[list[tuple[int, ...]]]:
    """The bench transformer's parameter shapes, one group per block and one for the rest (embedding,
    final norm, output layer), as FSDP2 wraps them."""
    import torch

    from topowise.models.spec import load_model
    from topowise.models.transformer import Transformer

    with torch.device("meta"):
        model = Transformer(load_model(name), 128)
    in_blocks = {id(p) for layer in model.layers for p in layer.parameters()}
    rest = [tuple(p.shape) for p in model.parameters() if id(p) not in in_blocks]
    return [[tuple(p.shape) for p in layer.parameters()] for layer in model.layers] + [rest]


def measure(name: str, warmup: int, reps: int) -> dict:
    """Seconds per pass of each copy over `name`'s parameters (GPU kernel time)."""
    import torch
    from kernel_rates import kernel_seconds

    groups = parameter_groups(name)
    elements = sum(torch.Size(s).numel() for g in groups for s in g)
    seconds: dict[str, float] = {}
    kernels: dict[str, dict[str, float]] = {}

    def timed(pass_name, fn):
        kernels[pass_name] = {}
        seconds[pass_name] = kernel_seconds(fn, warmup, reps, kernels[pass_name])

    fp32 = [torch.randn(s, device="cuda") for g in groups for s in g]
    params = [torch.nn.Parameter(t) for t in fp32]
    for p in params:
        p.grad = torch.randn_like(p)
    opt = torch.optim.AdamW(params, lr=1e-5, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    timed("adamw", opt.step)
    del opt
    for p in params:
        p.grad = None
    timed("cast_down", lambda: [t.to(torch.bfloat16) for t in fp32])
    bf16 = [t.to(torch.bfloat16) for t in fp32]
    timed("cast_up", lambda: [t.to(torch.float32) for t in bf16])
    buckets = [torch.empty_like(t) for t in fp32]
    timed("bucket_copy", lambda: [torch.mul(t, 0.5, out=b) for t, b in zip(fp32, buckets)])
    buckets.clear()  # lists emptied, not deleted: the timed lambdas hold them
    params.clear()

    by_group, start = [], 0
    for g in groups:
        by_group.append(bf16[start:start + len(g)])
        start += len(g)
    flat32 = [torch.empty(sum(t.numel() for t in g), device="cuda") for g in by_group]
    flat16 = [f.to(torch.bfloat16) for f in flat32]
    timed("chunk_cat", lambda: [torch._chunk_cat([t.reshape(-1) for t in g], 0, 1, out=f.view(1, -1))
                                for g, f in zip(by_group, flat32)])
    sizes = [[t.numel() for t in g] for g in by_group]
    outs = [[torch.empty(n, device="cuda", dtype=torch.bfloat16) for n in s] for s in sizes]
    timed("copy_out", lambda: [torch.split_with_sizes_copy(f, s, out=o) for f, s, o in zip(flat16, sizes, outs)])
    copies = [torch.empty_like(f) for f in flat32]
    timed("memcpy", lambda: [c.copy_(f) for c, f in zip(copies, flat32)])
    for tensors in (fp32, bf16, flat32, flat16, outs, copies):
        tensors.clear()
    torch.cuda.empty_cache()

    rates = {p: BYTES_PER_ELEMENT[p] * elements / s for p, s in seconds.items()}
    return {"model": name, "elements": elements, "tensors": sum(len(g) for g in groups), "groups": len(groups),
            "seconds": seconds, "bytes_per_element": BYTES_PER_ELEMENT, "bytes_per_s": rates,
            "share_of_adamw": {p: r / rates["adamw"] for p, r in rates.items()}, "kernels": kernels}


def summary(rows: list[dict]) -> str:
    """Each pass's rate (GB/s) per model, its share of the AdamW pass's, and the mean share."""
    passes = list(BYTES_PER_ELEMENT)
    lines = [f"{'model':<28}" + "".join(f"{p:>12}" for p in passes) + "   (GB/s)"]
    for r in rows:
        lines.append(f"{r['model'][-28:]:<28}" + "".join(f"{r['bytes_per_s'][p] / 1e9:>12.0f}" for p in passes))
    lines.append(f"{'share of adamw, mean':<28}" + "".join(
        f"{statistics.mean(r['share_of_adamw'][p] for r in rows):>12.3f}" for p in passes))
    lines.append(f"{'share of adamw, min-max':<28}" + "".join(
        f"{min(r['share_of_adamw'][p] for r in rows):>6.2f}-{max(r['share_of_adamw'][p] for r in rows):<5.2f}"
        for p in passes))
    return "\n".join(lines)


def main() -> int:
    if sys.argv[1:2] == ["--summary"]:
        try:
            rows = [json.loads(line) for f in sys.argv[2:] for line in Path(f).read_text().splitlines() if line]
            rows = [r for r in rows if "bytes_per_s" in r]
            if not rows:
                raise ValueError("no measured rows")
            print(summary(rows))
        except (OSError, ValueError, KeyError) as exc:
            print(f"error: --summary FILE...: {exc}", file=sys.stderr)
            return 2
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", required=True, help="comma-separated preset names or config.json paths")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    import torch
    from kernel_rates import checked_models

    from topowise.errors import UsageError
    try:
        if not torch.cuda.is_available():
            raise UsageError("copy_rates.py needs a CUDA GPU")
        if args.reps < 1 or args.warmup < 0:
            raise UsageError("--reps must be at least 1, --warmup at least 0")
        names = checked_models(args.models)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in names:
        try:
            r = measure(name, args.warmup, args.reps)
        except torch.cuda.OutOfMemoryError as exc:
            r = {"model": name, "status": "oom", "error": str(exc).splitlines()[0]}
            torch.cuda.empty_cache()
        r.update({"gpu": torch.cuda.get_device_name(), "host": socket.gethostname(), "torch": torch.__version__,
                  "time": datetime.datetime.now(datetime.timezone.utc).isoformat()})
        with open(out / RESULTS_FILE, "a") as f:
            f.write(json.dumps(r) + "\n")
        rows.append(r)
    measured = [r for r in rows if "bytes_per_s" in r]
    for r in rows:
        if r not in measured:
            print(f"{r['model']}: {r['status']}")
    if measured:
        print(summary(measured))
    return 0


if __name__ == "__main__":
    sys.exit(main())
