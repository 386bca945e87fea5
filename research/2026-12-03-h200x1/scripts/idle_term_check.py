"""A term for the GPU's idle between kernels, tried and not taken (no GPU).

    python research/2026-12-03-h200x1/scripts/idle_term_check.py [FORWARD_MS BACKWARD_MS]     # per block, default 0.057 0.100

The traced steps of gemm-shape/run53 and run54 idle with the next kernel launched for 0.055-0.060 ms per block in the
forward and 0.093-0.110 in the backward (bench train's breakdown, "other"), whatever the width and the tokens, and
attention/run56 found the same idle without the profiler. This adds it to every GPU-bound step (a block recomputed
whole idles its forward's again), fits the GPU rates again as the defaults were (gemm_shape_check.refit) and replays
every one-H200 record beside the model without it; then run52's and run57's steps, predicted before they ran.
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT / "tests" / "unit"))

import gemm_shape_check as shape  # noqa: E402
from replay import finished  # noqa: E402

from topowise.calibrate.fit import observation_from  # noqa: E402
from topowise.costmodel import predict as predict_module  # noqa: E402
from topowise.costmodel.profile import default_profile  # noqa: E402

RESULTS = ROOT / "research"  # the whole archive; tests/unit/replay.py reads only tests/data


def main() -> int:
    forward_s, backward_s = (float(v) / 1e3 for v in (sys.argv[1:3] if len(sys.argv) == 3 else ("0.057", "0.100")))
    plain = predict_module.ENGINES["pytorch"]

    def with_idle(run, topology, profile):
        p = plain(run, topology, profile)
        blocks = run.model.num_layers
        idle = (forward_s + backward_s) * blocks + (forward_s * blocks if run.checkpointing != "none" else 0.0)
        return replace(p, step_time_s=p.step_time_s + idle) if p.time.host_wait_s == 0 else p

    records = [(str(p.relative_to(RESULTS)), r) for p in sorted(RESULTS.glob("2026-12-0[23]-h200x1/**/*.jsonl"))
               for r in finished([p]) if r["micro_batch"] * r["seq_len"] > 128
               and r.get("engine", "pytorch") == "pytorch"]
    preds = {}
    for name, engine in (("without", plain), ("with idle", with_idle)):
        predict_module.ENGINES["pytorch"] = engine
        try:
            profile, rms = shape.refit(default_profile())
            preds[name] = [shape.PREDICT(profile, observation_from(r)) for _, r in records]
        finally:
            predict_module.ENGINES["pytorch"] = plain
        print(f"{name:10s} compute_efficiency {profile.compute_efficiency:.4f}  activation_traffic "
              f"{profile.activation_traffic:.4f}  compiled {profile.compiled_activation_traffic:.4f}  "
              f"(fit rms {100 * rms:.2f}%)")

    def err(i: int, name: str) -> float:
        return preds[name][i].step_time_s / records[i][1]["step_time_s"] - 1

    gpu = [i for i in range(len(records)) if all(ps[i].time.host_wait_s == 0 for ps in preds.values())]
    groups = {"every record GPU-bound in both": gpu,
              "  less the fitted ones": [i for i in gpu if not any(s in records[i][0] for s in shape.FITTED)],
              "  compiled": [i for i in gpu if records[i][1].get("compile")],
              "run52 (predicted before)": [i for i, (f, _) in enumerate(records) if "run52" in f],
              "run57, GPU-set (predicted before)": [i for i, (f, r) in enumerate(records) if "run57" in f
                                                    and "qwen3" not in r["model"]]}
    for label, idx in groups.items():
        print(f"{label:36s} n={len(idx):3d}" + "".join(
            f"  {name} {100 * statistics.mean(abs(err(i, name)) for i in idx):.2f}%" for name in preds))
    for i, (f, r) in enumerate(records):
        if "run52" in f or "run57" in f:
            print(f"  {f.split('/')[1]:10s} {r['model'].split('/')[-1]:18s} {r['strategy']:5s} "
                  f"{r['micro_batch']}x{r['seq_len']:<6d}" + "".join(f"  {name} {100 * err(i, name):+5.1f}%"
                                                                   for name in preds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
