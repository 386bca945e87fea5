"""The attention by its thread blocks (Profile.attention_form "thread-blocks") against the form before ("sequence"),
each with the GPU rates fitted again from the designed calibration's one-H200 runs as `compile_accuracy.py
--fit-eager` fits them, replayed on every one-H200 bench train record of 2026-12-02/03; and two ways of putting
the step's clock on the attention that the model does not take (no GPU).

    python research/2026-12-03-h200x1/scripts/attention_form_check.py

The traced steps ran their attention at 0.885-0.970 of its rate alone, as their mean SM clock over 1980 MHz said
(attention_shape.py). "x ce/best" slows it by compute_efficiency / gemm.BEST_ALONE (a full GEMM's rate in a step
over alone: the clock the GEMMs leave), "x 0.933" by the six steps' mean. Prints the fitted rates, the errors over
the records every variant prices GPU-bound (all, without the fitted records, compiled, eager, by sequence, by
model) and gemm-shape/run52's steps (predicted before they ran, signed).
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT / "tests" / "unit"))

import gemm_shape_check as shape  # noqa: E402
from replay import finished  # noqa: E402

from topowise.calibrate.fit import observation_from  # noqa: E402
from topowise.costmodel.gemm import BEST_ALONE  # noqa: E402
from topowise.costmodel.profile import (  # noqa: E402
    SEQUENCE_FORM_EFFICIENCY,
    SEQUENCE_FORM_OFFSET,
    Profile,
    default_profile,
)

RESULTS = ROOT / "research"  # the whole archive; tests/unit/replay.py reads only tests/data

IN_STEP_MEAN = 0.933  # the six traced steps' attention in the step / alone (attention_shape.py)


def slowed(profile: Profile, factor) -> Profile:
    """`profile` with its attention at factor(profile) of its rate alone (the variants the model does not take)."""
    rate = Profile.attention_rate

    def attention_rate(self, *args, **kwargs):
        alone = rate(self, *args, **kwargs)
        return None if alone is None else alone * factor(self)
    cls = type("Slowed", (Profile,), {"attention_rate": attention_rate})
    return cls(**{f: getattr(profile, f) for f in profile.__dataclass_fields__})


def main() -> int:
    sequence = replace(default_profile(), attention_form="sequence",
                       attention_efficiency=dict(SEQUENCE_FORM_EFFICIENCY), attention_seq_offset=SEQUENCE_FORM_OFFSET)
    variants = {"sequence": sequence, "thread-blocks": default_profile(),
                "x ce/best": slowed(default_profile(), lambda q: q.compute_efficiency / BEST_ALONE),
                "x 0.933": slowed(default_profile(), lambda q: IN_STEP_MEAN)}
    print("variant: compute_efficiency, activation_traffic, compiled traffic")
    profiles = {}
    for name, base in variants.items():  # replace() keeps a slowed profile's class through the fit
        profiles[name], rms = shape.refit(base)
        print(f"{name}:  {profiles[name].compute_efficiency:.4f} {profiles[name].activation_traffic:.4f} "
              f"{profiles[name].compiled_activation_traffic:.4f}  (fit rms {100 * rms:.2f}%)")
    records = [(str(p.relative_to(RESULTS)), r) for p in sorted(RESULTS.glob("2026-12-0[23]-h200x1/**/*.jsonl"))
               for r in finished([p]) if r["micro_batch"] * r["seq_len"] > 128
               and r.get("engine", "pytorch") == "pytorch"]
    preds = [{k: shape.PREDICT(p, observation_from(r)) for k, p in profiles.items()} for _, r in records]
    errors = [{k: p.step_time_s / r["step_time_s"] - 1 for k, p in ps.items()} for (_, r), ps in zip(records, preds)]
    gpu = [i for i, ps in enumerate(preds) if all(p.time.host_wait_s == 0 for p in ps.values())]

    def line(name: str, idx: list[int]) -> str:
        cells = [(statistics.mean(abs(errors[i][k]) for i in idx), max(abs(errors[i][k]) for i in idx))
                 for k in profiles]
        return f"  {name:30s} n={len(idx):3d}" + "".join(f"  {100 * m:5.2f}% {100 * w:4.1f}" for m, w in cells)
    print(f"mean / worst error, {'':24s}" + "".join(f"  {k:>11s}" for k in profiles))
    groups = {"every record GPU-bound in all": gpu,
              "  less the fitted ones": [i for i in gpu if not any(s in records[i][0] for s in shape.FITTED)],
              "  compiled": [i for i in gpu if records[i][1].get("compile")],
              "  eager": [i for i in gpu if not records[i][1].get("compile")],
              "  sequence >= 8192": [i for i in gpu if records[i][1]["seq_len"] >= 8192],
              "  sequence <= 2048": [i for i in gpu if records[i][1]["seq_len"] <= 2048]}
    for name, idx in groups.items():
        print(line(name, idx))
    print("by model, signed mean")
    by = defaultdict(list)
    for i in gpu:
        by[records[i][1]["model"].split("/")[-1]].append(i)
    for model, idx in sorted(by.items()):
        print(f"  {model:22s} n={len(idx):3d}" + "".join(
            f"  {k} {100 * statistics.mean(errors[i][k] for i in idx):+5.1f}%" for k in profiles))
    print("gemm-shape/run52, predicted before they ran (with the model of that day), signed")
    for i, (f, r) in enumerate(records):
        if "run52" in f:
            mode = "compiled" if r.get("compile") else "eager"
            print(f"  {r['model'].split('/')[-1]:18s} {r['strategy']:5s} {r['micro_batch']}x{r['seq_len']:<5} "
                  f"{mode:8s}" + "".join(f"  {100 * errors[i][k]:+5.1f}%" for k in profiles))
    return 0


if __name__ == "__main__":
    sys.exit(main())
