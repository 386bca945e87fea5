"""The classic and the designed calibration side by side: how many runs pin each step-time parameter,
the condition number of their sensitivities, and the predicted GPU seconds (default profile, 2x H200).

    python research/2026-12-02-h200x1/scripts/calibration_design.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from topowise.calibrate.cases import GPU_CALIBRATION  # noqa: E402
from topowise.calibrate.design import (  # noqa: E402
    DESIGN_PARAMS,
    comm_sweep_seconds,
    design_cases,
    design_models,
    identifiability,
)
from topowise.costmodel.profile import default_profile  # noqa: E402
from topowise.models.spec import load_model  # noqa: E402
from topowise.topology import load_topology  # noqa: E402


def main() -> int:
    topo, profile, models = load_topology("h200-x2"), default_profile(), design_models()
    model_of = lambda name: models.get(name) or load_model(name)  # noqa: E731
    plans = (("classic (two presets)", GPU_CALIBRATION.cases, GPU_CALIBRATION.warmup, GPU_CALIBRATION.steps),
             ("designed (four configs)", design_cases(), 2, 4))
    print("| plan | cases | not host-bound | " + " | ".join(DESIGN_PARAMS) + " | condition | training s |")
    print("|---" * (5 + len(DESIGN_PARAMS)) + "|")
    for name, cases, warmup, steps in plans:
        r = identifiability(cases, model_of, topo, profile, warmup=warmup, steps=steps)
        print(f"| {name} | {len(cases)} | {len(r.runs)} | " + " | ".join(str(r.pinned_by[p]) for p in DESIGN_PARAMS)
              + f" | {r.condition:.1f} | {r.seconds:.0f} |")
    print(f"\ncomm sweep (both plans): about {comm_sweep_seconds(GPU_CALIBRATION):.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
