"""One step's phase from a bench train trace, in time order: the host's blocking calls (any CUDA runtime call over
0.2 ms: synchronisations, copies back, cudaMalloc and cudaFree) and the GPU's kernels launched inside the phase's host range, in ms from the phase's host start; and
where the GPU was when the host entered the phase (the backlog). No torch.
    python phase_timeline.py TRACE.json.gz [--phase optimizer] [--step -2]"""
import argparse, gzip, json, re
p = argparse.ArgumentParser(); p.add_argument("trace"); p.add_argument("--phase", default="optimizer")
p.add_argument("--step", type=int, default=-2); a = p.parse_args()
ev = [e for e in json.load(gzip.open(a.trace))["traceEvents"] if e.get("ph") == "X"]
steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if re.fullmatch(r"topowise\.step\.\d+", e.get("name", ""))
               and e.get("cat") in ("user_annotation", "cpu_op"))
s0, s1 = steps[a.step]
ph = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("name") == f"topowise.{a.phase}" and s0 <= e["ts"] <= s1
      and e.get("cat") in ("user_annotation", "cpu_op")]
h0, h1 = ph[0]
launch = {e["args"]["correlation"]: e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")
          and "correlation" in e.get("args", {})}
gpu = sorted((e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")), key=lambda e: e["ts"])
mine = [e for e in gpu if (l := launch.get(e.get("args", {}).get("correlation"))) and h0 <= l["ts"] <= h1]
before = [e for e in gpu if e["ts"] < h0 + 1e9 and (l := launch.get(e.get("args", {}).get("correlation")))
          and l["ts"] < h0]
last_before = max((e["ts"] + e["dur"] for e in before), default=h0)
print(f"{a.trace}: step {a.step}, phase {a.phase}: host range {(h1 - h0) / 1e3:.2f} ms; the GPU finished the work "
      f"launched before it {(last_before - h0) / 1e3:+.2f} ms after the host entered it")
block = [e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver") and h0 <= e["ts"] <= h1
         and e["dur"] > 200]  # any runtime call that held the host over 0.2 ms: a sync, a copy back, cudaMalloc/Free
items = [(e["ts"], "host", e) for e in block] + [(e["ts"], "gpu", e) for e in mine]
run = None
def flush():
    global run
    if run:
        print(f"  gpu  {(run[0] - h0) / 1e3:8.2f} .. {(run[1] - h0) / 1e3:8.2f}  {run[2]:4d} kernels {run[3] / 1e3:7.2f} ms busy"
              + (f"  largest: {run[4][:70]} {run[5] / 1e3:.2f} ms" if run[5] > 200 else ""))
    run = None
for ts, kind, e in sorted(items, key=lambda x: x[0]):
    if kind == "host":
        flush(); print(f"  host {(ts - h0) / 1e3:8.2f} .. {(ts + e['dur'] - h0) / 1e3:8.2f}  {e['name']} (blocks {e['dur'] / 1e3:.2f} ms)")
    else:
        if run is None:
            run = [ts, ts + e["dur"], 0, 0.0, "", 0.0]
        run[1] = max(run[1], ts + e["dur"]); run[2] += 1; run[3] += e["dur"]
        if e["dur"] > run[5]:
            run[4], run[5] = e["name"], e["dur"]
flush()
nxt = [e["ts"] for e in gpu if e["ts"] > h1 and (l := launch.get(e.get("args", {}).get("correlation"))) and l["ts"] > h1]
print(f"  host leaves the phase at {(h1 - h0) / 1e3:.2f} ms; the GPU's next kernel starts at "
      f"{((min(nxt) if nxt else h1) - h0) / 1e3:.2f} ms")
ops = sorted((e for e in ev if e.get("cat") in ("cpu_op", "python_function", "user_annotation") and h0 <= e["ts"] <= h1
              and e.get("dur", 0) > 2000 and not e.get("name", "").startswith("topowise.")), key=lambda e: e["ts"])
for e in ops[:30]:
    print(f"  op   {(e['ts'] - h0) / 1e3:8.2f} .. {(e['ts'] + e['dur'] - h0) / 1e3:8.2f}  {e['name'][:90]} ({e['cat']})")
