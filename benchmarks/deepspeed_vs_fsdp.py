"""DeepSpeed ZeRO-1/2/3 against FSDP2 ZeRO-2/3 on the same model, data and optimizer, with NVLink
and without (--fabric pcie): throughput, memory, predicted vs measured, and a comparison in words
computed from the numbers.

    PYTHONPATH=. python3 benchmarks/deepspeed_vs_fsdp.py --out-dir research
    python3 benchmarks/deepspeed_vs_fsdp.py --device cpu --model tiny --seq-len 64 --steps 2 --warmup 1 --out-dir /tmp/x

Writes OUT_DIR/deepspeed-vs-fsdp.jsonl (one `bench train` record per run, appended as each finishes)
and OUT_DIR/deepspeed-vs-fsdp.md (machine, command, table, sentences); prints the table and the
sentences. DeepSpeed must import (pip install 'topowise[deepspeed]'); it builds no op here (the
client optimizer is torch's fused AdamW), which the script checks by listing torch's extension
directory before and after.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shlex
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from topowise.expectations import train_expected  # noqa: E402
from topowise.measure import train  # noqa: E402
from topowise.measure.machine import live_topology  # noqa: E402
from topowise.units import GIB  # noqa: E402

RUNS = (("pytorch", "zero2,zero3"), ("deepspeed", ",".join(train.DEEPSPEED_STRATEGIES)))
NAME = "deepspeed-vs-fsdp"


def label(r: dict) -> str:
    return f"{'DeepSpeed' if r['engine'] == 'deepspeed' else 'FSDP2'} {r['strategy']}"


def find(records, engine, strategy, fabric):
    for r in records:
        if r["engine"] == engine and r["strategy"] == strategy and r["fabric"] == fabric and r["status"] == "ok":
            return r
    return None


def compare(a: float, b: float, more: str, less: str, what: str) -> str:
    """a against b in words: '12% faster than' within a factor of 1.5, else '2.31x the tokens/s of'."""
    ratio = a / b
    if 1 / 1.5 < ratio < 1.5:
        return f"{abs(ratio - 1) * 100:.0f}% {more if ratio >= 1 else less} than"
    return f"{ratio:.2f}x the {what} of"


def table(records: list[dict]) -> str:
    head = ("run", "fabric", "status", "ms/step", "tok/s/GPU", "MFU", "alloc GiB", "pred ms (err)",
            "pred GiB (err)", "last loss")
    rows = [head]
    for r in records:
        p = r.get("predicted") or {}
        ok = r["status"] == "ok"
        err = lambda e: "" if e is None else f" ({100 * e:+.0f}%)"
        pred_mem = p.get("allocated_bytes", p.get("peak_memory_bytes"))
        rows.append((
            label(r), r["fabric"], r["status"],
            f"{r['step_time_s'] * 1e3:.1f}" if ok else "-",
            f"{r['tokens_per_s_per_gpu']:,.0f}" if ok else "-",
            f"{100 * r['mfu']:.1f}%" if ok and r.get("mfu") else "-",
            f"{r['peak_memory_bytes'] / GIB:.2f}" if ok and r.get("peak_memory_bytes") else "-",
            f"{p['step_time_s'] * 1e3:.1f}{err(p.get('step_time_error'))}" if "step_time_s" in p else "-",
            f"{pred_mem / GIB:.2f}{err(p.get('peak_memory_error'))}" if pred_mem else "-",
            f"{r['losses'][-1]:.4f}" if ok and r["losses"] else "-",
        ))
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |" for row in rows]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def sentences(records: list[dict], fabrics: tuple[str, ...]) -> list[str]:
    """The comparison in words, every number from the records."""
    out = []
    for fabric in fabrics:
        where = "With NVLink" if fabric == "nvlink" else "Without NVLink (NCCL_P2P_DISABLE=1)"
        for strategy in ("zero2", "zero3"):
            ds, fs = find(records, "deepspeed", strategy, fabric), find(records, "pytorch", strategy, fabric)
            if not (ds and fs):
                continue
            speed = compare(ds["tokens_per_s_per_gpu"], fs["tokens_per_s_per_gpu"], "faster", "slower", "tokens/s")
            text = (f"{where}, DeepSpeed {strategy} runs {ds['tokens_per_s_per_gpu']:,.0f} tokens/s per GPU, "
                    f"{speed} "
                    f"FSDP2 {strategy} ({fs['tokens_per_s_per_gpu']:,.0f})")
            if ds.get("peak_memory_bytes") and fs.get("peak_memory_bytes"):
                text += (f", and allocates {ds['peak_memory_bytes'] / GIB:.1f} GiB at its peak, "
                         f"{compare(ds['peak_memory_bytes'], fs['peak_memory_bytes'], 'more', 'less', 'memory')} "
                         f"FSDP2's {fs['peak_memory_bytes'] / GIB:.1f} GiB")
            out.append(text + ".")
        z1, z2 = find(records, "deepspeed", "zero1", fabric), find(records, "deepspeed", "zero2", fabric)
        if z1 and z2 and z1.get("peak_memory_bytes") and z2.get("peak_memory_bytes"):
            out.append(f"{where}, DeepSpeed zero1 allocates "
                       f"{(z1['peak_memory_bytes'] - z2['peak_memory_bytes']) / GIB:+.2f} "
                       f"GiB against its zero2 (with contiguous_gradients both keep only their gradient "
                       f"partition) and runs at "
                       f"{z1['tokens_per_s_per_gpu'] / z2['tokens_per_s_per_gpu']:.2f}x its speed.")
    if len(fabrics) > 1:
        slow = []
        for engine in ("pytorch", "deepspeed"):
            for strategy in ("zero1", "zero2", "zero3"):
                nv, pc = find(records, engine, strategy, "nvlink"), find(records, engine, strategy, "pcie")
                if nv and pc:
                    slow.append((pc["step_time_s"] / nv["step_time_s"], f"{label(nv)}"))
        if slow:
            slow.sort()
            listed = ", ".join(f"{name} {ratio:.2f}x" for ratio, name in slow)
            out.append(f"Without NVLink a step takes this many times its NVLink time: {listed}; "
                       f"{slow[-1][1]} depends on NVLink the most, {slow[0][1]} the least.")
    for engine, name in (("pytorch", "FSDP2"), ("deepspeed", "DeepSpeed")):
        errs = [r["predicted"]["step_time_error"] for r in records
                if r["engine"] == engine and r["status"] == "ok"
                and (r.get("predicted") or {}).get("step_time_error") is not None]
        mems = [r["predicted"]["peak_memory_error"] for r in records
                if r["engine"] == engine and r["status"] == "ok"
                and (r.get("predicted") or {}).get("peak_memory_error") is not None]
        if errs:
            out.append(f"The cost model's {name} step times are off by "
                       f"{100 * min(errs):+.0f}% to {100 * max(errs):+.0f}%"
                       + (f", its allocated memory by {100 * min(mems):+.0f}% to "
                          f"{100 * max(mems):+.0f}%" if mems else "")
                       + f" ({len(errs)} runs).")
    for fabric in fabrics:
        done = [r for r in records if r["fabric"] == fabric and r["status"] == "ok"]
        if len(done) > 1:
            check = train.compare_losses(done)
            names = ", ".join(label(r) for r in done)
            out.append(f"Losses on {fabric} ({names}): " + (
                f"agree step by step within {100 * check.max_rel_diff:.2f}% (tolerance {100 * check.rtol:g}%)."
                if check.agree else f"DIVERGE: {check.message()}"))
    failed = [f"{label(r)} on {r['fabric']}: {r['status']} ({r.get('error', '')[:120]})"
              for r in records if r["status"] != "ok"]
    if failed:
        out.append("Did not finish: " + "; ".join(failed) + ".")
    return out


def extension_builds() -> set[str]:
    root = Path(os.environ.get("TORCH_EXTENSIONS_DIR", Path.home() / ".cache" / "torch_extensions"))
    return {str(p) for p in root.glob("*/*")} if root.is_dir() else set()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llama3.2-1b")
    parser.add_argument("--seq-len", type=int, default=8192)
    parser.add_argument("--micro-batch", type=int, default=1)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--fabrics", default="nvlink,pcie")
    parser.add_argument("--device", default=None, help="cuda (default when a GPU is visible) or cpu")
    parser.add_argument("--nproc", type=int, default=None)
    parser.add_argument("--topology", default=None, help="preset or file for predictions (default: live NVML)")
    parser.add_argument("--timeout", type=float, default=150.0, help="seconds per run")
    parser.add_argument("--out-dir", default="research")
    args = parser.parse_args(argv)

    os.environ.setdefault("DS_BUILD_OPS", "0")  # the ranks inherit it: DeepSpeed must not JIT-build ops
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    jsonl = out_dir / f"{NAME}.jsonl"
    fabrics = tuple(f.strip() for f in args.fabrics.split(",") if f.strip())
    topology = None
    builds_before = extension_builds()
    started = time.monotonic()
    records: list[dict] = []
    for fabric in fabrics:
        for engine, strategies in RUNS:
            request = train.make_request(model=args.model, strategies=strategies, micro_batch=args.micro_batch,
                                         seq_len=args.seq_len, steps=args.steps, warmup=args.warmup, fabric=fabric,
                                         device=args.device, nproc=args.nproc, timeout_s=args.timeout,
                                         out=str(jsonl), engine=engine)
            if topology is None and request.cases[0].device == "cuda":
                if args.topology:
                    from topowise.topology import load_topology

                    topology = load_topology(args.topology)
                else:
                    topology = live_topology()
            done, _ = train.bench_train(request, lambda case: train_expected(case, topology))
            for r in done:
                print(f"[{time.monotonic() - started:6.1f} s] {label(r)} {fabric}: {r['status']}"
                      + (f", {r['step_time_s'] * 1e3:.1f} ms/step" if r["status"] == "ok" else
                         f": {r.get('error', '')[:200]}"), flush=True)
            records.extend(done)
    new_builds = sorted(extension_builds() - builds_before)
    text = table(records)
    words = sentences(records, fabrics)
    print()
    print(text)
    print()
    for s in words:
        print("- " + s)
    print(f"\nop builds during the run: {', '.join(new_builds) if new_builds else 'none'}")
    first = next((r for r in records if r["status"] == "ok"), records[0] if records else {})
    command = "python3 benchmarks/deepspeed_vs_fsdp.py " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    md = [f"# DeepSpeed ZeRO against FSDP2: {args.model}",
          "",
          f"- machine: {first.get('world_size', '?')} x {first.get('gpu_name') or first.get('device', '?')}, "
          f"{platform.node() or 'unknown host'}",
          f"- date: {datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}",
          f"- versions: torch {first.get('torch_version')}, NCCL {first.get('nccl_version')}, DeepSpeed "
          f"{next((r.get('deepspeed_version') for r in records if r.get('deepspeed_version')), '?')}",
          f"- command: `{command}` (from the repository root)",
          f"- micro-batch {args.micro_batch} x {args.seq_len} tokens, {args.warmup} warm-up + {args.steps} timed "
          f"steps (median), bf16, AdamW; raw records: `{jsonl.name}`",
          f"- op builds during the run: {', '.join(new_builds) if new_builds else 'none'}",
          "",
          text,
          "",
          "alloc GiB: torch.cuda.max_memory_allocated, the largest rank; pred: the cost model "
          "(`predict --engine deepspeed` for DeepSpeed rows), error relative to the measurement.",
          "",
          "## In words",
          "",
          *[f"- {s}" for s in words],
          ""]
    (out_dir / f"{NAME}.md").write_text("\n".join(md))
    print(f"wrote {jsonl} and {out_dir / (NAME + '.md')} in {time.monotonic() - started:.0f} s")
    return 0 if records and all(r["status"] == "ok" for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
