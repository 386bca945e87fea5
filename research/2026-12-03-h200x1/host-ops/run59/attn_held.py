"""The causal attention held for seconds at long sequences (as a 16k-32k token step keeps the GPU on it), against
the same shape in a burst: its rate, SM clock and power (NVML, 10 ms samples). attn_probe.py (run56) held six
shapes of 2048-8192 tokens; these go to 32768."""
import json, sys, threading, time
from pathlib import Path
sys.path.insert(0, str(Path.cwd())); sys.path.insert(0, str(Path.cwd() / "benchmarks"))
import pynvml, torch
import torch.nn.functional as F
from kernel_rates import _sdpa_kernels

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

SHAPES = [("llama3.2-1b", 2, 4096, 32, 8, 64), ("llama3.2-1b", 1, 8192, 32, 8, 64),
          ("llama3.2-1b", 1, 16384, 32, 8, 64), ("llama3.2-1b", 1, 32768, 32, 8, 64),
          ("smollm2-360m", 1, 32768, 15, 5, 64), ("smollm2-135m", 1, 16384, 9, 3, 64),
          ("qwen3-0.6b", 1, 32768, 16, 8, 128), ("hd128-h32", 1, 16384, 32, 8, 128)]
rows = []
for name, b, t, h, kv, hd in SHAPES:
    q = torch.randn(b, t, h, hd, device="cuda", dtype=torch.bfloat16).transpose(1, 2).requires_grad_()
    k = torch.randn(b, t, kv, hd, device="cuda", dtype=torch.bfloat16).transpose(1, 2).requires_grad_()
    v = torch.randn(b, t, kv, hd, device="cuda", dtype=torch.bfloat16).transpose(1, 2).requires_grad_()
    gqa = {"enable_gqa": True} if kv != h else {}
    def call():
        with _sdpa_kernels():
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, **gqa)
        return torch.autograd.grad(o, (q, k, v), torch.ones_like(o))
    for _ in range(3): call()
    torch.cuda.synchronize(); time.sleep(1.5)
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.time(); e0.record()
    call()
    e1.record(); torch.cuda.synchronize(); t1 = time.time()
    burst_s = e0.elapsed_time(e1) / 1e3; bclk = window(t0 - 0.02, t1 + 0.02)
    reps = max(2, int(1.0 / burst_s))
    t0 = time.time()
    while time.time() - t0 < 2.5:
        for _ in range(reps // 4 + 1): call()
        torch.cuda.synchronize()
    t2 = time.time(); e0.record()
    for _ in range(reps): call()
    e1.record(); torch.cuda.synchronize(); t3 = time.time()
    held_s = e0.elapsed_time(e1) / 1e3 / reps; hclk = window(t2, t3)
    f = 12.0 * h * hd * t * b * t
    rows.append({"shape": name, "b": b, "t": t, "h": h, "kv": kv, "hd": hd, "burst_s": burst_s, "burst_sm_mhz": bclk[0],
                 "burst_w": bclk[1], "held_s": held_s, "held_sm_mhz": hclk[0], "held_w": hclk[1]})
    print(f"held {name:13s} {b}x{t:<6d} burst {f/burst_s/989e12:.3f} at {bclk[0]:5.0f} MHz | held {f/held_s/989e12:.3f} "
          f"at {hclk[0]:5.0f} MHz {hclk[1]:4.0f} W | ratio {burst_s/held_s:.3f}", flush=True)
    del q, k, v; torch.cuda.empty_cache()
    json.dump(rows, open(OUT / "attn_held.json", "w"), indent=1)
stop = True
