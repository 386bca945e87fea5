"""The bench-train speed target: llama3.2-1b at 8192 tokens per GPU per step on every GPU here.

    PYTHONPATH=. python3 benchmarks/train_mfu.py --out research/train_mfu_2xh200.jsonl

Runs `bench train` (the same library the CLI calls) over NVLink (ddp, zero1, zero2, zero3, hsdp)
and with --fabric pcie (NCCL_P2P_DISABLE=1; ddp, zero1, zero2, zero3), then prints one table:
MFU against the bf16 8192^3 matmul rate measured in the same run, and the target each must reach
over NVLink (ddp, zero2, zero3: 50%; zero1: 45%). The PCIe rows have no target: they show what
the wiring costs. Exit status 1 when an NVLink target is missed or the losses disagree.
"""

from __future__ import annotations

import argparse
import sys

from topowise.expectations import train_expected
from topowise.measure import train
from topowise.measure.machine import live_topology
from topowise.run import STRATEGY_NAMES
from topowise.units import GIB

TARGETS = {"ddp": 0.50, "zero1": 0.45, "zero2": 0.50, "zero3": 0.50}  # of the measured matmul rate


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llama3.2-1b")
    parser.add_argument("--micro-batch", type=int, default=1)
    parser.add_argument("--seq-len", type=int, default=8192)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--fabrics", default="nvlink,pcie")
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--out", default=None, help="append every record (JSONL)")
    args = parser.parse_args()

    rows, missed, disagree = [], [], []
    topology = live_topology()
    for fabric in args.fabrics.split(","):
        strategies = ",".join(s for s in STRATEGY_NAMES if fabric == "nvlink" or s != "hsdp")  # PCIe: no hsdp
        request = train.make_request(model=args.model, strategies=strategies, micro_batch=args.micro_batch,
                                     seq_len=args.seq_len, steps=args.steps, warmup=args.warmup, fabric=fabric,
                                     compile=args.compile, out=args.out, timeout_s=300)
        records, check = train.bench_train(
            request, lambda case: train_expected(case, topology), lambda event, case, rec: print(
                f"{case.run.strategy} {fabric}: " + ("running" if event == "start" else rec["status"]), flush=True))
        print(check.message())
        if not check.agree:
            disagree.append(fabric)
        rows += records

    print()
    print(f"{'strategy':8} {'fabric':6} {'status':7} {'ms/step':>8} {'tok/s/GPU':>10} {'MFU':>6} {'target':>6} "
          f"{'MFU sheet':>9} {'alloc GiB':>9} {'pred ms':>8}  verdict")
    for r in rows:
        mfu = r.get("mfu_measured_peak")
        target = TARGETS.get(r["strategy"]) if r["fabric"] == "nvlink" else None
        verdict = "" if target is None else ("PASS" if mfu and mfu >= target else "MISS")
        if verdict == "MISS":
            missed.append(f"{r['strategy']} ({r['fabric']})")
        pred = (r.get("predicted") or {}).get("step_time_s")
        print(f"{r['strategy']:8} {r['fabric']:6} {r['status']:7} {_f(r['step_time_s'], 1e3, 8, 1)} "
              f"{_f(r['tokens_per_s_per_gpu'], 1, 10, 0)} {_f(mfu, 100, 5, 1)}% {_f(target, 100, 5, 0)}% "
              f"{_f(r['mfu'], 100, 8, 1)}% {_f(r['peak_memory_bytes'], 1 / GIB, 9, 2)} {_f(pred, 1e3, 8, 1)}  "
              f"{verdict}{' ' + r.get('error', '') if r['status'] != 'ok' else ''}")
    peak = next((r["peak_flops_measured"] for r in rows if r.get("peak_flops_measured")), None)
    sheet = next((r["peak_flops_datasheet"] for r in rows if r.get("peak_flops_datasheet")), None)
    print(f"MFU: model FLOPs (6N + 12LHQT) x tokens/s over the measured bf16 8192^3 matmul rate "
          f"({_f(peak, 1e-12, 0, 0).strip()} TFLOP/s on rank 0); MFU sheet: over the datasheet "
          f"({_f(sheet, 1e-12, 0, 0).strip()} TFLOP/s)")
    if missed:
        print("targets missed: " + ", ".join(missed))
    if disagree:
        print("losses disagree on: " + ", ".join(disagree))
    return 1 if missed or disagree else 0


def _f(value, scale, width, digits) -> str:
    return f"{'-':>{width}}" if value is None else f"{value * scale:>{width}.{digits}f}"


if __name__ == "__main__":
    sys.exit(main())
