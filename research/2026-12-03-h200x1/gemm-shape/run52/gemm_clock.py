"""A block GEMM's rate timed in a short burst (as kernel_rates.py times it) and sustained for seconds (as a training
step keeps the GPU busy), with the SM clock and power NVML reports during each."""
import sys, threading, time, json
import torch, pynvml
pynvml.nvmlInit(); H = pynvml.nvmlDeviceGetHandleByIndex(0)
PEAK = 989e12
samples = []
stop = False
def sample():
    while not stop:
        samples.append((time.time(), pynvml.nvmlDeviceGetClockInfo(H, pynvml.NVML_CLOCK_SM),
                        pynvml.nvmlDeviceGetPowerUsage(H) / 1000))
        time.sleep(0.01)
t = threading.Thread(target=sample, daemon=True); t.start()
def window(t0, t1):
    s = [x for x in samples if t0 <= x[0] <= t1]
    return (sum(x[1] for x in s) / len(s), sum(x[2] for x in s) / len(s)) if s else (0, 0)
SHAPES = [("llama3.2-1b gate fwd", 8192, 8192, 2048), ("llama3.2-1b out fwd", 8192, 2048, 2048),
          ("qwen2.5-0.5b out fwd", 8192, 896, 896), ("qwen2.5-0.5b up fwd", 8192, 4864, 896),
          ("llama3.2-3b up fwd", 8192, 8192, 3072), ("8192^3", 8192, 8192, 8192)]
out = []
for name, m, n, k in SHAPES:
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16); b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    flops = 2 * m * n * k
    time.sleep(1.0)  # let the clock recover between shapes
    for _ in range(3): a @ b.T
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.time(); e0.record()
    for _ in range(10): a @ b.T
    e1.record(); torch.cuda.synchronize(); t1 = time.time()
    burst = flops * 10 / (e0.elapsed_time(e1) / 1e3) / PEAK
    bclk = window(t0 - 0.02, t1 + 0.02)
    # sustained: 3 s of back-to-back calls, the last second timed
    reps = max(1, int(1.0 / (flops / (0.7 * PEAK))))
    t0 = time.time()
    while time.time() - t0 < 2.0:
        for _ in range(reps // 4 + 1): a @ b.T
        torch.cuda.synchronize()
    t2 = time.time(); e0.record()
    for _ in range(reps): a @ b.T
    e1.record(); torch.cuda.synchronize(); t3 = time.time()
    sus = flops * reps / (e0.elapsed_time(e1) / 1e3) / PEAK
    sclk = window(t2, t3)
    row = {"gemm": name, "m": m, "n": n, "k": k, "burst_rate": burst, "burst_sm_mhz": bclk[0], "burst_w": bclk[1],
           "sustained_rate": sus, "sustained_sm_mhz": sclk[0], "sustained_w": sclk[1]}
    out.append(row)
    print(f"{name:22s} burst {burst:.3f} of peak at {bclk[0]:5.0f} MHz {bclk[1]:4.0f} W | sustained {sus:.3f} at {sclk[0]:5.0f} MHz {sclk[1]:4.0f} W | ratio {sus / burst:.3f}", flush=True)
stop = True
json.dump(out, open(sys.argv[1], "w"), indent=1)
