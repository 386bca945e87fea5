"""The aten operators (all; views) and CUDA kernels one block adds, forward and backward, in the two modes bench
train runs a model in: fp32 weights under autocast (ddp, zero1) and bf16 weights without it (FSDP2's zero2/zero3,
DeepSpeed): the model with 2 blocks less the model with 1, at 1 x 128 tokens."""
import json, sys
from dataclasses import replace
from pathlib import Path
from contextlib import nullcontext
sys.path.insert(0, str(Path.cwd()))
import torch, torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.profiler import ProfilerActivity, profile
from topowise.models.spec import load_model
from topowise.models.transformer import build_model

class Count(TorchDispatchMode):
    def __init__(self):
        super().__init__(); self.ops = 0; self.views = 0; self.names = {}
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1; self.views += int(func.is_view); k = func.overloadpacket.__name__
        self.names[k] = self.names.get(k, 0) + 1
        return func(*args, **(kwargs or {}))

def one(spec, layers, autocast):
    s = replace(spec, num_layers=layers); m = build_model(s, 128, "cuda", seed=0)
    if not autocast:
        m = m.to(torch.bfloat16)
    ctx = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if autocast else nullcontext
    x = torch.randint(0, s.vocab_size, (1, 129), device="cuda")
    def step():
        with ctx():
            logits = m(x[:, :-1])
        return F.cross_entropy(logits.flatten(0, 1).float(), x[:, 1:].flatten())
    for _ in range(2):
        step().backward(); m.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    cf, cb = Count(), Count()
    with cf:
        loss = step()
    with cb:
        loss.backward()
    m.zero_grad(set_to_none=True); torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        loss = step(); torch.cuda.synchronize()
    fk = sum(1 for e in prof.events() if e.name.startswith(("cudaLaunchKernel", "cuLaunchKernel")))
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        loss.backward(); torch.cuda.synchronize()
    bk = sum(1 for e in prof.events() if e.name.startswith(("cudaLaunchKernel", "cuLaunchKernel")))
    return {"fwd": cf.ops, "fwd_views": cf.views, "bwd": cb.ops, "bwd_views": cb.views, "fwd_kernels": fk,
            "bwd_kernels": bk, "fwd_names": cf.names, "bwd_names": cb.names}

rows = []
for name in ["llama3.2-1b", "research/configs/llama-0.37b.json", "qwen2.5-0.5b", "research/configs/qwen3-0.6b.json",
             "gpt2"]:
    spec = load_model(name)
    for autocast in (True, False):
        a, b = one(spec, 1, autocast), one(spec, 2, autocast)
        d = {k: b[k] - a[k] for k in ("fwd", "fwd_views", "bwd", "bwd_views", "fwd_kernels", "bwd_kernels")}
        d["fwd_names"] = {k: v - a["fwd_names"].get(k, 0) for k, v in b["fwd_names"].items() if v - a["fwd_names"].get(k, 0)}
        d["bwd_names"] = {k: v - a["bwd_names"].get(k, 0) for k, v in b["bwd_names"].items() if v - a["bwd_names"].get(k, 0)}
        d["outside_blocks"] = {k: a[k] - d[k] for k in ("fwd", "bwd", "fwd_kernels", "bwd_kernels")}
        rows.append({"model": name, "autocast": autocast, **d})
        print(f"{name[-22:]:22s} {'autocast' if autocast else 'bf16':8s} per block: fwd {d['fwd']:3d} ops ({d['fwd_views']} views, "
              f"{d['fwd_kernels']} kernels)  bwd {d['bwd']:3d} ops ({d['bwd_views']} views, {d['bwd_kernels']} kernels); "
              f"outside the blocks {d['outside_blocks']}", flush=True)
json.dump(rows, open(Path(sys.argv[1]) / "count_ops.json", "w"), indent=1)
