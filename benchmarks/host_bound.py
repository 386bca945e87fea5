"""Is a training step bound by the GPU or by the host (Python, hooks, kernel launches)?

    PYTHONPATH=. python3 benchmarks/host_bound.py --out-dir $OUT/host

In an eager step with no synchronisation, the host issues kernels ahead of the GPU; a step then
takes max(host time, GPU time). Shrinking the tokens shrinks the GPU time but not the host's (the
same operations on smaller tensors), so the step time at a few tokens is a floor set by the host,
and a sweep over tokens shows where the GPU takes over. One launch over NVLink (calibrate's
joined form: every case in one process group): three models x four strategies at 128 tokens, and
qwen2.5-0.5b at micro-batch 2 over 512..4096 tokens with ddp, zero2 and zero3 (--models, --seqs).

Then, on one GPU, the two memory-bound passes the cost model times with one HBM efficiency, each
timed alone: torch's fused AdamW step over the parameter shapes of a model (bytes moved / time),
and the fp32 cross-entropy (forward + backward) over bf16 logits. Prints a table; writes JSONL.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from topowise.calibrate.cases import Case, Plan
from topowise.calibrate.fit import step_spread
from topowise.calibrate.launch import measure
from topowise.measure.passes import adamw_pass, loss_pass

FLOOR_TOKENS = 128


def plan(steps: int, models: list[str], seqs: list[int]) -> Plan:
    floor = [Case(m, s, 1, FLOOR_TOKENS) for m in models for s in ("ddp", "zero1", "zero2", "zero3")]
    sweep = [Case("qwen2.5-0.5b", s, 2, seq) for seq in seqs for s in ("ddp", "zero2", "zero3")]
    return Plan(device="cuda", fabrics=("nvlink",), comm_ops=(), comm_sizes=(), cases=tuple(floor + sweep),
                warmup=3, steps=steps)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", required=True)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--skip-train", action="store_true")
    parser.add_argument("--skip-passes", action="store_true")
    parser.add_argument("--models", default="qwen2.5-0.5b,llama3.2-1b,llama3.2-3b")
    parser.add_argument("--seqs", default="512,1024,2048,4096", help="qwen2.5-0.5b micro-batch 2 sweep")
    args = parser.parse_args()
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)

    passes = [] if args.skip_passes else [adamw_pass(m) for m in ("qwen2.5-0.5b", "llama3.2-1b", "llama3.2-3b")]
    passes += [] if args.skip_passes else [loss_pass(v, t) for v, t in ((151936, 8192), (128256, 4096), (128256, 8192))]
    with open(out / "passes.jsonl", "a") as fh:
        for p in passes:
            fh.write(json.dumps(p) + "\n")
    for p in passes:
        print(f"{p['pass']:14} {p.get('model') or p['vocab']:>14} {p['seconds'] * 1e3:8.2f} ms  "
              f"{p['bytes_per_s'] / 1e9:7.0f} GB/s")

    if not args.skip_train:
        import torch

        torch.cuda.empty_cache()
        t0 = time.time()
        problems = measure(plan(args.steps, args.models.split(","), [int(x) for x in args.seqs.split(",")]), 2,
                           out / "records", progress=print)
        print(f"training runs took {time.time() - t0:.0f} s; problems: {problems or 'none'}")
        rows = [json.loads(line) for line in (out / "records" / "train.jsonl").read_text().splitlines()]
        print(f"{'model':14} {'strategy':8} {'mb':>3} {'seq':>5} {'ms/step':>8} "
              f"{'spread':>7}  host ms: fwd / bwd / opt")
        for r in rows:
            times = r.get("step_times_s") or [0]
            spread = step_spread(times) if r.get("status") == "ok" else float("nan")
            host = r.get("host_phase_s") or {}
            print(f"{r['model']:14} {r['strategy']:8} {r['micro_batch']:3} {r['seq_len']:5} "
                  f"{(r.get('step_time_s') or 0) * 1e3:8.1f} {spread * 100:6.1f}%  "
                  + " / ".join(f"{host.get(p, 0) * 1e3:.1f}" for p in ("forward", "backward", "optimizer")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
