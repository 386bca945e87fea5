"""What one bench transformer block keeps for its backward, measured, beside what the memory model says.

    python research/2026-12-02-h200x1/scripts/saved_bytes.py --models llama3.2-1b,research/configs/llama-0.37b.json \
        --shapes 1x8192,8x1024 --modes eager,compiled,selective --out DIR

One block on the GPU, as bench train runs it: "autocast" is ddp's and zero1's (fp32 weights and residual
stream under torch.autocast to bf16), "bf16" is FSDP2's (bf16 weights, no autocast). Per mode: eager;
`compiled` (torch.compile(block, fullgraph=True, dynamic=False): bench train's --compile, whose blocks
all see one shape); `selective` (torchtitan's per-op policy, measure/strategies.py). Each forward runs on
a fresh input (the residual stream, a leaf); what the CUDA caching allocator holds after it, less the
block's output, is what the block keeps for its backward. That holds two parts that do not grow with
the batch (autocast's bf16 weight copies, the rotary table), so the block runs at the shape's batch b and
at b/2 (b >= 2) and the bytes per token are the difference over the tokens between them, plus the
block's input, which the memory model counts as kept by the block (here it was allocated before).
Writes DIR/saved_bytes.jsonl (one line per model, shape, precision and mode) and prints a table.

`--setting model` measures the blocks where bench train runs them instead: the whole model built as the
step builds it (build_model, then bench train's apply_compile for `compiled`), the embedding's output as
the first block's input, the rotary tables sliced from the model's buffers, autocast around the whole
forward, and `--ddp` wraps it in DistributedDataParallel (one process). Each block's saved tensors are
counted by autograd's saved-tensor hooks (each storage once, the block's input among them) in a forward
after two warm-up steps, a fresh model at b and at b/2, and the median block's bytes per token are the
difference over the tokens between them.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import torch  # noqa: E402

from topowise.costmodel import memory  # noqa: E402
from topowise.models.spec import load_model  # noqa: E402
from topowise.models.transformer import Block, rotary_tables  # noqa: E402


def held_bytes(block, spec, batch: int, seq: int, autocast: bool) -> int:
    """Bytes the allocator holds after one forward of `block` beyond its input and its output."""
    dtype = torch.float32 if autocast else torch.bfloat16
    cos, sin = rotary_tables(seq, spec.head_dim, device="cuda")
    x = torch.randn(batch, seq, spec.hidden_size, device="cuda", dtype=dtype, requires_grad=True)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
        y = block(x, cos, sin)
    torch.cuda.synchronize()
    held = torch.cuda.memory_allocated() - before - y.numel() * y.element_size()
    y.float().sum().backward()  # frees what was saved (and compiles the backward on the first call)
    del x, y
    torch.cuda.synchronize()
    return held


def measure(spec, batch: int, seq: int, autocast: bool, mode: str) -> dict:
    from topowise.measure import strategies as S

    torch._dynamo.reset()
    block = Block(spec).cuda().to(torch.float32 if autocast else torch.bfloat16)
    if mode == "selective":
        holder = torch.nn.Module()
        holder.layers = torch.nn.ModuleList([block])
        S.apply_checkpointing(holder, "selective", "op")
        block = holder.layers[0]
    elif mode == "compiled":
        block = torch.compile(block, fullgraph=True, dynamic=False)
    if batch < 2:
        raise ValueError("the batch must be 2 or more (the bytes per token are a difference over b/2)")
    half = batch // 2
    for b in (half, batch):  # warm both shapes (compiles each, as bench train's one shape compiles once)
        held_bytes(block, spec, b, seq, autocast)
    full, part = held_bytes(block, spec, batch, seq, autocast), held_bytes(block, spec, half, seq, autocast)
    tokens = (batch - half) * seq
    r = 4 if autocast else 2
    measured = (full - part) / tokens + r * spec.hidden_size
    if mode == "selective":
        modelled = memory.selective_kept_bytes_per_token_per_layer(spec, autocast)
    else:
        modelled = memory.activation_bytes_per_token_per_layer(spec, autocast, compiled=mode == "compiled")
    return table_row(spec, batch, seq, autocast, mode, full, part, measured, modelled)


def table_row(spec, batch: int, seq: int, autocast: bool, mode: str, held: int, held_half: int,
              measured: float, modelled: float, **extra) -> dict:
    """One line of saved_bytes.jsonl: the bytes per token measured beside memory.py's, and the gap."""
    h, i = spec.hidden_size, spec.intermediate_size
    return {"model": spec.name, "batch": batch, "seq_len": seq, "precision": "autocast" if autocast else "bf16",
            "mode": mode, **extra, "held_bytes": held, "held_bytes_half_batch": held_half,
            "measured_per_token": measured, "modelled_per_token": modelled, "hidden_size": h,
            "intermediate_size": i, "gap_in_h": (modelled - measured) / h, "gap_in_i": (modelled - measured) / i}


def saved_per_block(model, tokens, autocast: bool, device: str) -> list[int]:
    """Bytes of the distinct storages each block saves for its backward in one forward of `model`."""
    sizes: list[dict[int, int]] = []

    def pack(t):
        storage = t.untyped_storage()
        sizes[-1][storage.data_ptr()] = storage.nbytes()
        return t

    stack = []

    def enter(module, args):
        sizes.append({})
        stack.append(torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t))
        stack[-1].__enter__()

    def leave(module, args, output):
        stack.pop().__exit__(None, None, None)

    layers = (model.module if hasattr(model, "module") else model).layers
    handles = [h for layer in layers for h in (layer.register_forward_pre_hook(enter),
                                                layer.register_forward_hook(leave))]
    with torch.autocast(device, dtype=torch.bfloat16, enabled=autocast):
        logits = model(tokens)
    logits.float().sum().backward()
    for h in handles:
        h.remove()
    return [sum(d.values()) for d in sizes]


def measure_in_model(spec, batch: int, seq: int, autocast: bool, mode: str, ddp: bool, device: str) -> dict:
    """One row of the table for `--setting model`: the median block's bytes per token, measured and modelled."""
    from topowise.measure import strategies as S
    from topowise.models.transformer import build_model

    half = batch // 2
    held = {}
    for b in (half, batch):  # a fresh model and compilation per batch: one shape each, as in bench train
        torch._dynamo.reset()
        model = build_model(spec, seq, device, 0)
        if not autocast:
            model = model.to(torch.bfloat16)
        if mode == "compiled":
            S.apply_compile(model)
        if ddp:
            model = torch.nn.parallel.DistributedDataParallel(model)
        tokens = torch.randint(0, spec.vocab_size, (b, seq), device=device)
        for _ in range(2):  # warm-up: compiles the forward and the backward
            with torch.autocast(device, dtype=torch.bfloat16, enabled=autocast):
                out = model(tokens)
            out.float().sum().backward()
            del out
        per_block = saved_per_block(model, tokens, autocast, device)
        held[b] = sorted(per_block)[len(per_block) // 2]
        del model
        if device == "cuda":
            torch.cuda.empty_cache()
    measured = (held[batch] - held[half]) / ((batch - half) * seq)
    modelled = memory.activation_bytes_per_token_per_layer(spec, autocast, compiled=mode == "compiled")
    return table_row(spec, batch, seq, autocast, mode, held[batch], held[half], measured, modelled,
                     setting="model+ddp" if ddp else "model")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", required=True)
    p.add_argument("--shapes", default="1x8192,8x1024")
    p.add_argument("--modes", default="eager,compiled")
    p.add_argument("--precisions", default="autocast,bf16")
    p.add_argument("--setting", choices=("alone", "model"), default="alone")
    p.add_argument("--ddp", action="store_true", help="with --setting model: DistributedDataParallel, one process")
    p.add_argument("--layers", type=int, help="build each model with this many blocks (a block's bytes do not "
                   "depend on how many there are; compiling is per block either way)")
    p.add_argument("--device", default="cuda", help="with --setting model: cuda, or cpu (autocast on the CPU)")
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    if a.ddp:
        import torch.distributed as dist

        dist.init_process_group("nccl" if a.device == "cuda" else "gloo", init_method="tcp://127.0.0.1:29517",
                                rank=0, world_size=1)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in a.models.split(","):
        spec = load_model(name)
        if a.layers:
            spec = dataclasses.replace(spec, num_layers=a.layers)
        for shape in a.shapes.split(","):
            batch, seq = (int(v) for v in shape.split("x"))
            for precision in a.precisions.split(","):
                for mode in a.modes.split(","):
                    try:
                        if a.setting == "model":
                            row = measure_in_model(spec, batch, seq, precision == "autocast", mode, a.ddp,
                                                   a.device)
                        else:
                            row = measure(spec, batch, seq, precision == "autocast", mode)
                    except Exception as e:  # recorded, and the next case runs
                        row = {"model": spec.name, "batch": batch, "seq_len": seq, "precision": precision,
                               "mode": mode, "error": f"{type(e).__name__}: {str(e)[:300]}"}
                    rows.append(row)
                    with open(out / "saved_bytes.jsonl", "a") as f:
                        f.write(json.dumps(row) + "\n")
                    if torch.cuda.is_available():
                        torch.cuda.empty_cache()
    print(f"{'model':24s} {'shape':>8s} {'prec':8s} {'mode':9s} {'measured':>9s} {'model':>9s} "
          f"{'gap/h':>7s} {'gap/I':>7s}")
    for r in rows:
        head = f"{r['model'][-24:]:24s} {r['batch']}x{r['seq_len']:<6} {r['precision']:8s} {r['mode']:9s}"
        if "error" in r:
            print(f"{head} {r['error'][:60]}")
            continue
        print(f"{head} {r['measured_per_token']:9.0f} {r['modelled_per_token']:9.0f} {r['gap_in_h']:+7.2f} "
              f"{r['gap_in_i']:+7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
