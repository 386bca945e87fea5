"""The host's time per block against the operators a block dispatches, model by model, in one process.

1. Count: the aten operators (all, and those that are not views) and the CUDA kernels one block adds in the
   forward and in the backward: the model built with 2 blocks less the model built with 1, at 1 x 128 tokens under
   autocast (bf16), as bench train's ddp step runs it.
2. Host: every model built whole on the GPU, then rounds over the models in turn (drift falls on every model
   alike): per round 2 warm-up + 8 timed steps of forward and backward at 1 x 128 tokens, the host's seconds in
   each phase (no synchronisation inside the step; the GPU waits for the host at this size), and the GPU's.
   No DDP wrapper and no optimizer: the model's own dispatch only.
"""
import json, statistics, sys, time
from dataclasses import replace
from pathlib import Path
sys.path.insert(0, str(Path.cwd()))
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.profiler import ProfilerActivity, profile
from topowise.models.spec import load_model
from topowise.models.transformer import build_model

OUT = Path(sys.argv[1])
DEV = "cuda" if torch.cuda.is_available() else "cpu"
if DEV == "cpu":
    torch.cuda.synchronize = lambda: None
MODELS = ["gpt2", "research/configs/smollm2-135m.json", "research/configs/llama-deep-narrow.json",
          "qwen2.5-0.5b", "research/configs/llama-0.37b.json", "research/configs/qwen3-0.6b.json",
          "llama3.2-1b", "research/configs/qwen3-1.7b.json", "llama3.2-3b",
          "research/configs/mistral-nemo-l8.json"]
ROUNDS, WARMUP, STEPS, TOKENS = (5, 2, 8, 128) if DEV == "cuda" else (1, 1, 2, 16)


class Count(TorchDispatchMode):
    def __init__(self):
        super().__init__(); self.ops = 0; self.views = 0; self.names = {}
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1; self.views += int(func.is_view)
        key = str(func.overloadpacket.__name__); self.names[key] = self.names.get(key, 0) + 1
        return func(*args, **(kwargs or {}))


def batch(spec):
    g = torch.Generator().manual_seed(0)
    t = torch.randint(0, spec.vocab_size, (1, TOKENS + 1), generator=g).to(DEV)
    return t[:, :-1], t[:, 1:]


def fwd(model, x):
    with torch.autocast(DEV, dtype=torch.bfloat16):
        logits = model(x)
    return logits


def counts(spec):
    per = {}
    for layers in (1, 2):
        s = replace(spec, num_layers=layers)
        model = build_model(s, TOKENS, DEV, seed=0); x, y = batch(s)
        for _ in range(2):  # warm: cuDNN plans, autocast caches
            F.cross_entropy(fwd(model, x).flatten(0, 1).float(), y.flatten()).backward(); model.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        cf, cb = Count(), Count()
        with cf:
            loss = F.cross_entropy(fwd(model, x).flatten(0, 1).float(), y.flatten())
        with cb:
            loss.backward()
        model.zero_grad(set_to_none=True); torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            logits = fwd(model, x); torch.cuda.synchronize(); t_mid = time.perf_counter()
            loss = F.cross_entropy(logits.flatten(0, 1).float(), y.flatten())
            loss.backward(); torch.cuda.synchronize()
        launches = sum(1 for e in prof.events() if e.name in ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx"))
        per[layers] = {"fwd_ops": cf.ops, "fwd_views": cf.views, "bwd_ops": cb.ops, "bwd_views": cb.views,
                       "launches": launches, "fwd_names": cf.names, "bwd_names": cb.names}
        del model; torch.cuda.empty_cache()
    d = {k: per[2][k] - per[1][k] for k in ("fwd_ops", "fwd_views", "bwd_ops", "bwd_views", "launches")}
    d["fwd_names"] = {k: per[2]["fwd_names"].get(k, 0) - per[1]["fwd_names"].get(k, 0) for k in per[2]["fwd_names"]}
    d["bwd_names"] = {k: per[2]["bwd_names"].get(k, 0) - per[1]["bwd_names"].get(k, 0) for k in per[2]["bwd_names"]}
    d["whole_1block"] = {k: per[1][k] for k in ("fwd_ops", "bwd_ops", "launches")}
    return d


rows = {}
for name in MODELS:
    spec = load_model(name)
    try:
        rows[name] = {"layers": spec.num_layers, "hidden": spec.hidden_size, "count": counts(spec)}
    except Exception as exc:
        rows[name] = {"error": repr(exc)[:300]}
    c = rows[name].get("count", {})
    print(f"count {name[-24:]:24s} fwd ops {c.get('fwd_ops')} (views {c.get('fwd_views')}) bwd ops {c.get('bwd_ops')} "
          f"(views {c.get('bwd_views')}) kernels fwd+bwd {c.get('launches')}", flush=True)
json.dump(rows, open(OUT / "host_probe.json", "w"), indent=1)

built = {}
for name in MODELS:
    if "error" in rows[name]:
        continue
    spec = load_model(name)
    built[name] = (build_model(spec, TOKENS, DEV, seed=0), *batch(spec))
    rows[name]["host"] = []

for r in range(ROUNDS):
    for name, (model, x, y) in built.items():
        hf, hb, gpu = [], [], []
        for step in range(WARMUP + STEPS):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            loss = F.cross_entropy(fwd(model, x).flatten(0, 1).float(), y.flatten())
            t1 = time.perf_counter()
            loss.backward()
            t2 = time.perf_counter()
            model.zero_grad(set_to_none=True); torch.cuda.synchronize()
            if step >= WARMUP:
                hf.append(t1 - t0); hb.append(t2 - t1); gpu.append(time.perf_counter() - t0)
        rows[name]["host"].append({"round": r, "forward_s": statistics.median(hf), "backward_s": statistics.median(hb),
                                   "step_s": statistics.median(gpu)})
    json.dump(rows, open(OUT / "host_probe.json", "w"), indent=1)

print(f"{'model':24s} {'L':>3s} {'fwd ops':>7s} {'bwd ops':>7s} {'kern':>5s} {'fwd ms/blk':>10s} {'bwd ms/blk':>10s} "
      f"{'us/op f':>7s} {'us/op b':>7s} {'spread':>6s}")
for name, row in rows.items():
    if "host" not in row:
        print(name, row.get("error")); continue
    L, c = row["layers"], row["count"]
    f = statistics.median(h["forward_s"] for h in row["host"]) / L
    b = statistics.median(h["backward_s"] for h in row["host"]) / L
    fs = [h["forward_s"] for h in row["host"]]
    print(f"{name[-24:]:24s} {L:3d} {c['fwd_ops']:7d} {c['bwd_ops']:7d} {c['launches']:5d} {f*1e3:10.3f} {b*1e3:10.3f} "
          f"{f/c['fwd_ops']*1e6:7.2f} {b/c['bwd_ops']*1e6:7.2f} {max(fs)/min(fs):6.3f}")
