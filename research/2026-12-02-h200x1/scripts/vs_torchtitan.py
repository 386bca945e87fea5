"""topowise's bench transformer beside torchtitan's Llama 3 model class, same dimensions, one GPU.

For each shape, each model (ours in its GQA variants, torchtitan's, and optionally an earlier
version of ours loaded from a file) runs warm-up + timed training steps under the same dtype policy:

  autocast   fp32 weights, torch.autocast(bf16): bench train's ddp and zero1 (and torchtitan's
             single-GPU policy without FSDP)
  fsdp-bf16  FSDP2 fully_shard on each block and the root over a one-GPU mesh, bf16 parameters in
             compute, fp32 gradient reduction: bench train's zero2/zero3 and torchtitan's default

Each step: forward, fp32 cross-entropy over the bf16 logits, backward, fused AdamW, zero_grad. Step
time is the median of CUDA-event times; peak memory is torch.cuda.max_memory_allocated. torchtitan
is a benchmark dependency only (pip install 'topowise[reference]'); its model is built from its own
model arguments (torchtitan 0.2.2, the newest release that runs on torch 2.11: 0.3.0 imports
DataParallelMeshDims, which torch 2.11 lacks) with attn_type "sdpa" (cuDNN attention first, then
flash, then math: its priority; enable_gqa).

    python research/2026-12-02-h200x1/scripts/vs_torchtitan.py --out DIR [--shapes llama3.2-1b:1x8192,...] [--steps 8]
        [--models ours:sdpa:cudnn,file:PATH,torchtitan] [--profile 2]

Writes DIR/vs_torchtitan.jsonl (one record per shape x policy x model) and prints a table last:
step time, tokens/s, ours / torchtitan's step time (below 1.0: ours is faster).
"""

from __future__ import annotations

import argparse
import functools
import gc
import importlib.util
import json
import os
import statistics
import sys
import time
import types
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from topowise.models import transformer as ours_module  # noqa: E402
from topowise.models.spec import ModelSpec, load_model  # noqa: E402

RESULTS = Path(__file__).resolve().parents[3] / "research/2026-12-01-h200x1/smallvocab"
DEFAULT_SHAPES = (f"{RESULTS}/llama-0.37b.json:8x1024,{RESULTS}/llama-0.95b.json:4x2048,"
                  "llama3.2-1b:1x8192")


def parse_shapes(text: str) -> list[tuple[ModelSpec, int, int]]:
    out = []
    for item in text.split(","):
        model, _, size = item.rpartition(":")
        mb, seq = (int(x) for x in size.split("x"))
        out.append((load_model(model), mb, seq))
    return out


def _stub_datasets() -> None:
    """torchtitan's package imports its data loaders (Hugging Face `datasets`) on the way to the model
    class; the model needs none of it, so an empty module stands in when `datasets` is not installed."""
    try:
        import datasets  # noqa: F401
    except ImportError:
        for name in ("datasets", "datasets.distributed"):
            stub = types.ModuleType(name)
            stub.Dataset = stub.IterableDataset = object
            stub.load_dataset = stub.split_dataset_by_node = lambda *a, **k: None
            sys.modules[name] = stub


def torchtitan_model(spec: ModelSpec, seq_len: int) -> nn.Module:
    """torchtitan's Llama 3 Transformer with `spec`'s dimensions, on the meta device (torchtitan 0.2.x:
    TransformerModelArgs, separate wq/wk/wv and w1/w3, complex rotary in fp32, SDPA with enable_gqa
    and cuDNN attention first)."""
    _stub_datasets()
    from torchtitan.models.llama3.model.args import TransformerModelArgs
    from torchtitan.models.llama3.model.model import Transformer

    # FeedForward's width is multiple_of x ceil(int(8 dim / 3) / multiple_of): multiple_of = the
    # intermediate size gives it exactly when it is at least 8/3 of the width (every Llama shape)
    if spec.intermediate_size < int(8 * spec.hidden_size / 3) or spec.tied_embeddings:
        raise ValueError(f"{spec.name}: intermediate size below 8/3 x width, or tied embeddings")
    args = TransformerModelArgs(dim=spec.hidden_size, n_layers=spec.num_layers, n_heads=spec.num_heads,
                                n_kv_heads=spec.num_kv_heads, vocab_size=spec.vocab_size,
                                multiple_of=spec.intermediate_size, ffn_dim_multiplier=None, norm_eps=1e-5,
                                rope_theta=500000, max_seq_len=seq_len, attn_type="sdpa")
    with torch.device("meta"):
        model = Transformer(args)
    if sum(p.numel() for p in model.parameters()) != spec.params:
        raise ValueError(f"torchtitan's model has {sum(p.numel() for p in model.parameters())} parameters, "
                         f"{spec.name} {spec.params}")
    return model


@functools.cache
def load_file(path: str):
    """A models/transformer.py variant from a file (its build_model is what runs), loaded once."""
    spec_ = importlib.util.spec_from_file_location(f"variant_{Path(path).stem}", path)
    module = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(module)
    return module


def build(kind: str, spec: ModelSpec, seq_len: int, before) -> nn.Module:
    """kind: ours:<gqa mode>, before, file:PATH or torchtitan; materialised on the GPU in fp32."""
    if kind == "torchtitan":
        model = torchtitan_model(spec, seq_len)
        model.to_empty(device="cuda")
        with torch.no_grad():
            model.init_weights(buffer_device=torch.device("cuda"))
        return model
    if kind.startswith("file:"):
        return load_file(kind[5:]).build_model(spec, seq_len, "cuda", seed=0)
    module = before if kind == "before" else ours_module
    if kind.startswith("ours:"):  # ours:<gqa mode>[:cudnn]
        parts = kind.split(":")
        ours_module.GQA_MODE = parts[1]
        ours_module.SDPA_PRIORITY = parts[2] if len(parts) > 2 else None
    return module.build_model(spec, seq_len, "cuda", seed=0)


def blocks(model: nn.Module):
    layers = model.layers
    return list(layers.values()) if isinstance(layers, nn.ModuleDict) else list(layers)


def wrap(model: nn.Module, policy: str) -> nn.Module:
    if policy == "fsdp-bf16":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mesh = init_device_mesh("cuda", (1,))
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for block in blocks(model):
            fully_shard(block, mesh=mesh, mp_policy=mp, reshard_after_forward=True)
        fully_shard(model, mesh=mesh, mp_policy=mp, reshard_after_forward=True)
    return model


def train_step(model: nn.Module, optimizer, tokens: torch.Tensor, autocast: bool) -> torch.Tensor:
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
        logits = model(tokens[:, :-1])
    loss = F.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten())
    del logits
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.detach()


def time_steps(model: nn.Module, policy: str, vocab: int, mb: int, seq: int, warmup: int, steps: int,
               profile_steps: int = 0) -> dict:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    gen = torch.Generator(device="cuda").manual_seed(0)
    tokens = torch.randint(0, vocab, (warmup + steps, mb, seq + 1), device="cuda", generator=gen)
    autocast = policy == "autocast"
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(warmup + steps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(warmup + steps)]
    losses, issue = [], []
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    for i in range(warmup + steps):
        starts[i].record()
        t0 = time.perf_counter()
        losses.append(train_step(model, optimizer, tokens[i], autocast))
        issue.append(time.perf_counter() - t0)  # the host's time to queue the step (no sync inside)
        ends[i].record()
    torch.cuda.synchronize()
    times = [s.elapsed_time(e) / 1e3 for s, e in zip(starts, ends)][warmup:]
    record = {"step_time_s": statistics.median(times), "step_times_s": times,
              "host_issue_s": statistics.median(issue[warmup:]),
              "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
              "losses": [float(x) for x in losses]}
    if profile_steps:
        record["profile"] = profile(lambda: train_step(model, optimizer, tokens[-1], autocast), profile_steps)
    return record


# kernel name fragments -> what the kernel does; the first match wins
KERNEL_KINDS = (("attention", ("flash", "fmha", "cudnn", "sdpa", "attn")),
                ("matmul", ("gemm", "nvjet", "cutlass", "xmma", "sm90_", "sm100_")),
                ("optimizer", ("multi_tensor", "fused_adam", "adam")),
                ("nccl", ("nccl",)),
                ("copy/cat", ("copy", "cat", "memcpy", "memset", "fill")),
                ("reduction", ("reduce", "norm", "softmax", "cross_entropy", "nll")),
                ("elementwise", ("elementwise", "vectorized", "unrolled", "index")))


def kernel_kind(name: str) -> str:
    low = name.lower()
    return next((kind for kind, parts in KERNEL_KINDS if any(p in low for p in parts)), "other")


def profile(step, n: int) -> dict:
    """n steps under torch.profiler: GPU time per step by kernel kind and the 25 costliest kernels, and
    the wall time per step, so that what is not kernel time (the GPU waiting) shows as the gap."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    torch.cuda.synchronize()
    with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        for _ in range(n):
            step()
        torch.cuda.synchronize()
        wall = (time.perf_counter() - t0) / n
    kernels: dict[str, list[float]] = {}
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            entry = kernels.setdefault(event.name, [0.0, 0])
            entry[0] += event.device_time_total / 1e6 / n  # us -> s per step
            entry[1] += 1
    kinds: dict[str, float] = {}
    for name, (seconds, _) in kernels.items():
        kinds[kernel_kind(name)] = kinds.get(kernel_kind(name), 0.0) + seconds
    top = sorted(kernels.items(), key=lambda kv: -kv[1][0])[:25]
    return {"steps": n, "wall_s": wall, "kernel_s": sum(kinds.values()),
            "by_kind_s": dict(sorted(kinds.items(), key=lambda kv: -kv[1])),
            "top": [{"name": name[:160], "s": seconds, "calls_per_step": calls / n}
                    for name, (seconds, calls) in top]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", default=DEFAULT_SHAPES, help="model:MBxSEQ,... (default: 0.37B, 0.95B, 1B)")
    parser.add_argument("--models", default="before,ours:repeat,ours:expand,ours:sdpa,ours:sdpa:cudnn,torchtitan",
                        help="which models: ours:<gqa mode>[:cudnn] (the GQA modes are one model for MHA shapes), "
                             "before (needs --before), torchtitan")
    parser.add_argument("--policies", default="autocast,fsdp-bf16")
    parser.add_argument("--before", default=None, help="an earlier models/transformer.py to time beside")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="after timing, N steps under torch.profiler: GPU time by kernel kind and the "
                             "costliest kernels in each record, a comparison table at the end")
    parser.add_argument("--out", required=True, help="folder for vs_torchtitan.jsonl")
    args = parser.parse_args()

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    torch.distributed.init_process_group("nccl", rank=0, world_size=1)
    torch.cuda.set_device(0)
    before = load_file(args.before) if args.before and Path(args.before).is_file() else None
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for spec, mb, seq in parse_shapes(args.shapes):
        # torchtitan 0.2's Llama 3 has no weight tying: every implementation gets an untied output layer
        # (llama3.2-1b then has 1.50B parameters rather than 1.24B; the blocks are unchanged)
        spec = replace(spec, tied_embeddings=False)
        kinds = [k for k in args.models.split(",") if k]
        if spec.num_kv_heads == spec.num_heads:  # MHA: the GQA modes are one model
            kinds = list(dict.fromkeys(k.replace(":repeat", ":sdpa").replace(":expand", ":sdpa") for k in kinds))
        for policy in args.policies.split(","):
            for kind in kinds:
                if kind == "before" and before is None:
                    continue
                record = {"model": spec.name, "params": spec.params, "micro_batch": mb, "seq_len": seq,
                          "policy": policy, "implementation": kind, "gpu": torch.cuda.get_device_name(),
                          "torch": torch.__version__}
                t0 = time.perf_counter()
                try:
                    model = wrap(build(kind, spec, seq, before), policy)
                    record.update(time_steps(model, policy, spec.vocab_size, mb, seq, args.warmup, args.steps,
                                             args.profile))
                    record["status"] = "ok"
                except Exception as exc:  # noqa: BLE001 - recorded; the other models still run
                    record.update(status="error", error=f"{type(exc).__name__}: {exc}"[:600])
                record["wall_s"] = time.perf_counter() - t0
                model = None
                gc.collect()  # FSDP's hooks hold the last model in reference cycles
                torch.cuda.empty_cache()
                rows.append(record)
                with (out / "vs_torchtitan.jsonl").open("a") as f:
                    f.write(json.dumps(record) + "\n")
                print(json.dumps({k: record.get(k) for k in ("model", "policy", "implementation", "status",
                                                             "step_time_s", "error")}), flush=True)
    if args.profile:
        print_profiles(rows)
    print_table(rows)
    torch.distributed.destroy_process_group()
    return 0


def print_profiles(rows: list[dict]) -> None:
    """ms per step by kernel kind for every profiled record, and the wall time beside the kernel sum."""
    kinds = list(dict.fromkeys(k for r in rows if "profile" in r for k in r["profile"]["by_kind_s"]))
    print(f"{'model':<12} {'policy':<9} {'impl':<13} {'wall':>6} {'kern':>6} {'host':>6} "
          + " ".join(f"{k[:8]:>8}" for k in kinds))
    for r in rows:
        p = r.get("profile")
        if p:
            print(f"{r['model'][:12]:<12} {r['policy'][:9]:<9} {r['implementation'][-13:]:<13} "
                  f"{p['wall_s'] * 1e3:>6.1f} {p['kernel_s'] * 1e3:>6.1f} {r['host_issue_s'] * 1e3:>6.1f} "
                  + " ".join(f"{p['by_kind_s'].get(k, 0) * 1e3:>8.2f}" for k in kinds))


def print_table(rows: list[dict]) -> None:
    reference = {(r["model"], r["micro_batch"], r["seq_len"], r["policy"]): r.get("step_time_s")
                 for r in rows if r["implementation"] == "torchtitan" and r["status"] == "ok"}
    print(f"{'model':<14} {'mb x seq':>9} {'policy':<10} {'implementation':<13} {'ms/step':>8} {'tok/s':>8} "
          f"{'peak GiB':>8} {'vs titan':>8}")
    for r in rows:
        ms = r.get("step_time_s")
        ref = reference.get((r["model"], r["micro_batch"], r["seq_len"], r["policy"]))
        ratio = f"{ms / ref:.3f}" if ms and ref else "-"
        tps = f"{r['micro_batch'] * r['seq_len'] / ms:,.0f}" if ms else r["status"]
        mem = f"{r['peak_allocated_bytes'] / 2**30:.2f}" if ms else "-"
        print(f"{r['model'][:14]:<14} {r['micro_batch']}x{r['seq_len']:<7} {r['policy']:<10} "
              f"{r['implementation']:<13} {ms * 1e3 if ms else 0:>8.1f} {tps:>8} {mem:>8} {ratio:>8}")


if __name__ == "__main__":
    raise SystemExit(main())
