"""Compare `topowise bench comm` results with NCCL's own nccl-tests on the 2x H200 machine.

    python3 benchmarks/comm_vs_nccl_tests.py RESULTS.jsonl [MORE.jsonl ...]

Prints, for every (fabric, op, size) that both have, our busbw, nccl-tests' busbw and the percentage,
and checks the speed targets: >= 97% at 64 MiB and above, >= 80% at 1 MiB. Exit status 1 when a target
is missed (a benchmark script, not a test: numbers are never asserted in the test suite).
"""

from __future__ import annotations

import argparse
import json
import sys

MIB = 2**20
# nccl-tests all_reduce_perf / all_gather_perf / reduce_scatter_perf -g 2, float, out-of-place busbw GB/s
# on the 2x H200 (NV18) machine, NCCL 2.28 (docs/sources.md).
NCCL_TESTS = {
    "nvlink": {
        "all_reduce": {1: 44.5, 16: 211, 64: 267, 256: 299, 1024: 329},
        "all_gather": {1: 22.6, 16: 151, 64: 212, 256: 244, 1024: 267},
        "reduce_scatter": {1: 22.1, 16: 157, 64: 208, 256: 237, 1024: 274},
    },
    "pcie": {  # NCCL_P2P_DISABLE=1
        "all_reduce": {1: 15.9, 16: 26.8, 64: 27.4, 256: 27.5, 1024: 27.7},
        "all_gather": {1: 12.5, 16: 24.0, 64: 24.7, 256: 24.9, 1024: 25.0},
    },
}


def target_pct(mib: float) -> float | None:
    if mib >= 64:
        return 97.0
    if mib == 1:
        return 80.0
    return None


def compare(records: list[dict]) -> list[dict]:
    rows = []
    for r in records:
        if r.get("kind") != "collective" or r.get("world_size") != 2 or r.get("backend") != "nccl":
            continue
        mib = r["bytes"] / MIB
        ref = NCCL_TESTS.get(r.get("fabric", "nvlink"), {}).get(r["op"], {}).get(mib)
        if ref is None:
            continue
        pct = 100.0 * r["busbw_gbps"] / ref
        target = target_pct(mib)
        rows.append({"fabric": r.get("fabric"), "op": r["op"], "mib": mib, "dtype": r["dtype"],
                     "busbw": r["busbw_gbps"], "nccl_tests": ref, "pct": pct, "target": target,
                     "ok": target is None or pct >= target, "wrong": r["wrong"], "graph": r.get("graph")})
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    records = []
    for path in args.files:
        with open(path) as fh:
            for line in fh:
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
    rows = compare(records)
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(f"{'fabric':7} {'op':15} {'size':>9} {'dtype':9} {'busbw':>8} {'nccl-tests':>10} {'%':>7} "
              f"{'target':>7} {'graph':>5} {'wrong':>5}")
        for r in rows:
            target = f">={r['target']:.0f}%" if r["target"] else ""
            mark = "" if r["ok"] else "  MISS"
            print(f"{r['fabric']:7} {r['op']:15} {r['mib']:>5.0f} MiB {r['dtype']:9} {r['busbw']:8.1f} "
                  f"{r['nccl_tests']:10.1f} {r['pct']:6.1f}% {target:>7} "
                  f"{str(bool(r['graph'])):>5} {r['wrong']:5d}{mark}")
        missed = [r for r in rows if not r["ok"]]
        print(f"# {len(rows)} cases compared, {len(missed)} below target"
              + ("" if rows else " (no 2-GPU nccl records with nccl-tests figures)"))
    return 1 if any(not r["ok"] or r["wrong"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
