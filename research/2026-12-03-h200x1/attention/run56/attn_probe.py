"""The causal attention as the bench transformer calls it (SDPA, cuDNN first, enable_gqa), timed alone over batch,
heads, sequence, head dim and GQA in bursts, as kernel_rates.py times it (profiler kernel sums); then six shapes held
for seconds, as a training step keeps the GPU busy, with NVML's SM clock and power; then the GPU's idle between
back-to-back kernels with and without the profiler."""
import json, sys, threading, time
from pathlib import Path
sys.path.insert(0, str(Path.cwd())); sys.path.insert(0, str(Path.cwd() / "benchmarks"))
import pynvml, torch
import torch.nn.functional as F
from kernel_rates import _sdpa_kernels, attention_seconds, kernel_seconds

OUT = Path(sys.argv[1])
pynvml.nvmlInit(); HANDLE = pynvml.nvmlDeviceGetHandleByIndex(0)
samples, stop = [], False
def sample():
    while not stop:
        samples.append((time.time(), pynvml.nvmlDeviceGetClockInfo(HANDLE, pynvml.NVML_CLOCK_SM),
                        pynvml.nvmlDeviceGetPowerUsage(HANDLE) / 1000)); time.sleep(0.01)
threading.Thread(target=sample, daemon=True).start()
def window(t0, t1):
    s = [x for x in samples if t0 <= x[0] <= t1]
    return (sum(x[1] for x in s) / len(s), sum(x[2] for x in s) / len(s)) if s else (0.0, 0.0)

def counted_flops(b, t, h, hd):  # kernel_rates' attention FLOPs (12 H hd T per token), forward and backward
    return 12.0 * h * hd * t * b * t

TRACED = [("cal-h2048-l8", 1, 8192, 32, 8, 64), ("cal-h1536-l12", 2, 4096, 12, 4, 128),
          ("cal-h1024-l16", 8, 2048, 16, 16, 64), ("smollm2-360m", 8, 4096, 15, 5, 64),
          ("smollm2-135m", 16, 4096, 9, 3, 64), ("llama3.2-1b", 2, 4096, 32, 8, 64)]
grid = [(f"grid", b, t, h, kv, hd) for hd in (64, 128) for h, kv in ((16, 16), (32, 8), (12, 4), (14, 2))
        for t in (1024, 2048, 4096, 8192, 16384) for b in (1, 2, 4, 8, 16) if b * t <= 65536]
rows = {"burst": [], "held": [], "gap": []}
print(f"{'shape':14s} {'B':>3s} {'T':>6s} {'H':>3s} {'kv':>3s} {'hd':>4s} {'fwd ms':>8s} {'bwd ms':>8s} {'rate':>6s}")
for name, b, t, h, kv, hd in TRACED + grid:
    try:
        s = attention_seconds(b, t, h, kv, hd, 3, 10)
    except Exception as exc:  # recorded, the probe goes on
        rows["burst"].append({"shape": name, "b": b, "t": t, "h": h, "kv": kv, "hd": hd, "error": repr(exc)[:200]})
        torch.cuda.empty_cache(); continue
    rate = counted_flops(b, t, h, hd) / (s["forward"] + s["backward"]) / 989e12
    rows["burst"].append({"shape": name, "b": b, "t": t, "h": h, "kv": kv, "hd": hd, "forward_s": s["forward"],
                          "backward_s": s["backward"], "rate_of_datasheet": rate})
    if name != "grid":
        print(f"{name:14s} {b:3d} {t:6d} {h:3d} {kv:3d} {hd:4d} {s['forward']*1e3:8.3f} {s['backward']*1e3:8.3f} {rate:6.3f}", flush=True)
    torch.cuda.empty_cache()
json.dump(rows, open(OUT / "attn.json", "w"), indent=1)

# held: fwd + bwd back to back for 2 s, the next second timed with events; a burst of 5 after a second's rest
for name, b, t, h, kv, hd in TRACED:
    q = torch.randn(b, t, h, hd, device="cuda", dtype=torch.bfloat16).transpose(1, 2).requires_grad_()
    k = torch.randn(b, t, kv, hd, device="cuda", dtype=torch.bfloat16).transpose(1, 2).requires_grad_()
    v = torch.randn(b, t, kv, hd, device="cuda", dtype=torch.bfloat16).transpose(1, 2).requires_grad_()
    gqa = {"enable_gqa": True} if kv != h else {}
    def call():
        with _sdpa_kernels():
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, **gqa)
        return torch.autograd.grad(o, (q, k, v), torch.ones_like(o))
    for _ in range(3): call()
    torch.cuda.synchronize(); time.sleep(1.0)
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.time(); e0.record()
    for _ in range(5): call()
    e1.record(); torch.cuda.synchronize(); t1 = time.time()
    burst_s = e0.elapsed_time(e1) / 1e3 / 5; bclk = window(t0 - 0.02, t1 + 0.02)
    reps = max(2, int(1.0 / burst_s))
    t0 = time.time()
    while time.time() - t0 < 2.0:
        for _ in range(reps // 4 + 1): call()
        torch.cuda.synchronize()
    t2 = time.time(); e0.record()
    for _ in range(reps): call()
    e1.record(); torch.cuda.synchronize(); t3 = time.time()
    held_s = e0.elapsed_time(e1) / 1e3 / reps; hclk = window(t2, t3)
    f = counted_flops(b, t, h, hd)
    rows["held"].append({"shape": name, "b": b, "t": t, "h": h, "kv": kv, "hd": hd, "burst_s": burst_s,
                         "burst_sm_mhz": bclk[0], "held_s": held_s, "held_sm_mhz": hclk[0], "held_w": hclk[1]})
    print(f"held {name:14s} burst {f/burst_s/989e12:.3f} at {bclk[0]:5.0f} MHz | held {f/held_s/989e12:.3f} at "
          f"{hclk[0]:5.0f} MHz {hclk[1]:4.0f} W | ratio {burst_s/held_s:.3f}", flush=True)
    del q, k, v; torch.cuda.empty_cache()
json.dump(rows, open(OUT / "attn.json", "w"), indent=1)

# the GPU's idle between back-to-back kernels: N elementwise adds timed with events, against their kernels' own
# durations from the profiler; and the same with the profiler running
from torch.profiler import ProfilerActivity, profile
for numel in (1 << 20, 1 << 23, 1 << 26):
    x = torch.randn(numel, device="cuda", dtype=torch.bfloat16); y = torch.randn_like(x); n = 400
    kernel = kernel_seconds(lambda: torch.add(x, y, out=x), 5, n)
    def timed():
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for _ in range(20): torch.add(x, y, out=x)
        e0.record()
        for _ in range(n): torch.add(x, y, out=x)
        e1.record(); torch.cuda.synchronize()
        return e0.elapsed_time(e1) / 1e3 / n
    plain = min(timed() for _ in range(3))
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]):
        traced = min(timed() for _ in range(3))
    rows["gap"].append({"numel": numel, "kernel_s": kernel, "per_call_s": plain, "per_call_profiled_s": traced})
    print(f"gap add {numel:>9d} elements: kernel {kernel*1e6:8.2f} us, per call {plain*1e6:8.2f} us (idle "
          f"{(plain-kernel)*1e6:5.2f}), under the profiler {traced*1e6:8.2f} us (idle {(traced-kernel)*1e6:5.2f})", flush=True)
stop = True
json.dump(rows, open(OUT / "attn.json", "w"), indent=1)
