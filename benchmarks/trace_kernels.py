"""A training step's GPU time by kernel, from a `bench train --trace` timeline (no torch needed).

    python benchmarks/trace_kernels.py DIR/<strategy>/rank0.trace.json.gz [--skip 2] [--phase P] [--json OUT.json]

Each kernel, copy and set on the GPU is assigned to the step whose host range (`topowise.step.N`) holds
the runtime call that launched it (the profiler's correlation id), so a GPU that lags its host does not
move work between steps. Steps before `--skip` (warm-up: lazy initialisation, autotuning) are left out.
With --phase (forward, backward or optimizer) only the kernels launched inside that phase's host range
(topowise.forward / backward / optimizer) count.
Prints, per step on average, the GPU seconds of each class the cost model has a term for: matmuls,
attention, the fp32 loss over the vocabulary (softmax, log-softmax, nll), the optimizer (multi-tensor
apply: fused AdamW), NCCL, copies and sets, and the rest (the blocks' elementwise kernels, casts, norms);
with --json, every kernel name's seconds per step too.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
from pathlib import Path

CLASSES = (  # first match wins; lower-case substrings of the kernel name
    ("nccl", ("nccl",)),
    ("attention", ("fmha", "flash", "cudnn", "attention", "sdpa")),
    ("matmul", ("gemm", "nvjet", "cutlass", "sm90_xmma", "cublas")),
    ("loss", ("softmax", "nll_loss", "cross_entropy", "log_softmax")),
    ("optimizer", ("multi_tensor_apply", "fused_adam", "adam")),
    ("copy/set", ("memcpy", "memset")),
)


def kernel_class(name: str) -> str:
    low = name.lower()
    for cls, keys in CLASSES:
        if any(k in low for k in keys):
            return cls
    return "elementwise/other"


def per_step(trace: dict, skip: int, phase: str | None = None) -> tuple[int, dict[str, float]]:
    """(steps counted, seconds per step by kernel name); with `phase`, of the kernels the host launched inside
    that phase's range only."""
    events = trace.get("traceEvents", [])
    steps = []  # (start, end, index) of the host ranges topowise.step.N
    phases = []  # (start, end) of the host ranges topowise.<phase>
    launches = {}  # correlation id -> host ts of the launching runtime call
    for e in events:
        if e.get("ph") != "X":
            continue
        name, cat = e.get("name", ""), e.get("cat", "")
        m = re.fullmatch(r"topowise\.step\.(\d+)", name)
        if m and cat in ("user_annotation", "cpu_op"):
            steps.append((e["ts"], e["ts"] + e.get("dur", 0), int(m.group(1))))
        elif phase and name == f"topowise.{phase}" and cat in ("user_annotation", "cpu_op"):
            phases.append((e["ts"], e["ts"] + e.get("dur", 0)))
        elif cat in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {}):
            launches[e["args"]["correlation"]] = e["ts"]
    kept = [s for s in steps if s[2] >= skip]
    if not kept:
        raise ValueError(f"no topowise.step.N range at or after step {skip} in the trace")
    totals: dict[str, float] = {}
    for e in events:
        if e.get("ph") != "X" or e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        launched = launches.get(e.get("args", {}).get("correlation"))
        if launched is None or not any(a <= launched <= b for a, b, _ in kept):
            continue
        if phase and not any(a <= launched <= b for a, b in phases):
            continue
        totals[e["name"]] = totals.get(e["name"], 0.0) + e.get("dur", 0) / 1e6
    return len(kept), {k: v / len(kept) for k, v in totals.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace")
    parser.add_argument("--skip", type=int, default=2, help="leave out steps before this one (default 2)")
    parser.add_argument("--phase", choices=("forward", "backward", "optimizer"),
                        help="only the kernels launched inside this phase's host range")
    parser.add_argument("--json", help="write the per-kernel and per-class seconds per step here")
    args = parser.parse_args()
    try:
        with gzip.open(args.trace, "rt") if args.trace.endswith(".gz") else open(args.trace) as f:
            trace = json.load(f)
        count, kernels = per_step(trace, args.skip, args.phase)
    except (OSError, ValueError, json.JSONDecodeError) as exc:
        print(f"error: {args.trace}: {exc}", file=sys.stderr)
        return 2
    classes: dict[str, float] = {}
    for name, seconds in kernels.items():
        classes[kernel_class(name)] = classes.get(kernel_class(name), 0.0) + seconds
    if args.json:
        Path(args.json).write_text(json.dumps({"trace": args.trace, "steps": count, "classes": classes,
                                               "kernels": kernels}, indent=1))
    what = f", the {args.phase}'s kernels" if args.phase else ""
    print(f"{args.trace}: {count} steps{what}; GPU ms per step by class, total {1e3 * sum(classes.values()):.1f}")
    for cls, seconds in sorted(classes.items(), key=lambda x: -x[1]):
        print(f"  {cls:<20}{1e3 * seconds:9.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
