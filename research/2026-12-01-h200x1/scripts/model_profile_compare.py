"""Predicted (from each model profile) beside measured (bench train) for the runs of
research/2026-12-01-h200x1/scripts/model_profile_1gpu.sh: one markdown table, to stdout.

    python3 research/2026-12-01-h200x1/scripts/model_profile_compare.py DIR [--topology hgx-h200-8]

DIR holds profile-*.json and train.jsonl. Each profile predicts the one-GPU run (GPU 0 of the
topology) of every strategy it profiled; bench train's record of the same model, micro-batch and
strategy is the measurement: its median step time and its steady-step peak allocated memory
(torch.cuda.max_memory_allocated in the last timed step, measure.records.steady_peak_bytes) against the
prediction's allocated bytes.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from topowise.costmodel.predict import predict
from topowise.costmodel.profiled import load_model_profile, profiled_model
from topowise.measure.records import steady_peak_bytes
from topowise.run import Run
from topowise.topology import load_topology


def rows(folder: Path, topology: str) -> list[dict]:
    topo = load_topology(topology)
    train = [json.loads(line) for line in (folder / "train.jsonl").read_text().splitlines() if line.strip()]
    out = []
    for path in sorted(folder.glob("profile-*.json")):
        mp = load_model_profile(path)
        model = profiled_model(mp)
        for strategy, figures in mp.strategies.items():
            if figures.get("status", "ok") != "ok":
                continue
            pred = predict(Run(model, (topo.indices[0],), strategy, micro_batch=mp.micro_batch, seq_len=mp.seq_len),
                           topo)
            rec = next((t for t in train if t["model"] == model.name and t["micro_batch"] == mp.micro_batch
                        and t["strategy"] == strategy and t["status"] == "ok"), None)
            measured = rec["step_time_s"] if rec else None
            mem = steady_peak_bytes(rec) if rec else None
            out.append({"model": model.name, "micro_batch": mp.micro_batch, "strategy": strategy,
                        "predicted_s": pred.step_time_s, "measured_s": measured,
                        "step_error": pred.step_time_s / measured - 1 if measured else None,
                        "predicted_bytes": pred.memory.allocated_bytes, "measured_bytes": mem,
                        "memory_error": pred.memory.allocated_bytes / mem - 1 if mem else None,
                        "host_wait_share": pred.time.host_wait_s / pred.step_time_s,
                        "profile_step_s": figures["step_s"], "profile_wall_s": mp.wall_s})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder")
    parser.add_argument("--topology", default="hgx-h200-8")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    found = rows(Path(args.folder), args.topology)
    if args.json:
        print(json.dumps(found, indent=1))
        return
    pct = lambda x: "-" if x is None else f"{x:+.1%}"  # noqa: E731
    print("| model | micro-batch | strategy | predicted ms | measured ms | error | GPU waits for host "
          "| predicted GiB | measured GiB | error | profile's own step ms | profile wall s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in found:
        ms = "-" if r["measured_s"] is None else f"{r['measured_s'] * 1e3:.2f}"
        gib = "-" if r["measured_bytes"] is None else f"{r['measured_bytes'] / 2**30:.2f}"
        print(f"| {r['model']} | {r['micro_batch']} | {r['strategy']} | {r['predicted_s'] * 1e3:.2f} | {ms} | "
              f"{pct(r['step_error'])} | {r['host_wait_share']:.0%} | {r['predicted_bytes'] / 2**30:.2f} | {gib} | "
              f"{pct(r['memory_error'])} | {r['profile_step_s'] * 1e3:.2f} | {r['profile_wall_s']:.1f} |")
    steps = [abs(r["step_error"]) for r in found if r["step_error"] is not None]
    mems = [abs(r["memory_error"]) for r in found if r["memory_error"] is not None]
    if steps:
        print(f"\nstep time: mean |error| {sum(steps) / len(steps):.1%}, worst {max(steps):.1%} over {len(steps)} runs")
    if mems:
        print(f"memory: mean |error| {sum(mems) / len(mems):.1%}, worst {max(mems):.1%}")


if __name__ == "__main__":
    main()
