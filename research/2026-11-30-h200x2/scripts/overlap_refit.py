"""The overlaps fitted again from the 2x H200 calibration records, then every validation record replayed.

    python research/2026-11-30-h200x2/scripts/overlap_refit.py [--out research/2026-11-30-h200x2/refit4]
    python research/2026-11-30-h200x2/scripts/overlap_refit.py --rates --out research/2026-11-30-h200x2/refit5

For each calibration run (run 10, run 16 of research/2026-11-30-h200x2): its records fitted the way
`calibrate --from-records` fits them, but the overlaps alone (overlap.ddp, .zero1, .zero2, .zero3), with
the GPU rates held at the values the bench transformer of that day was replayed with (tests/unit/
earlier_model.py: compute_efficiency 0.6027, activation_traffic 11.17), so that the form of the overlap
is the one thing that differs between two code versions run through this script. Then the validation
records of runs 4, 8, 9, 10, 13, 16 and 17 (shapes and days calibration did not see, except where a
run validates its own day) through each profile: step-time error, mean and worst, all cases and the
GPU-bound ones. Writes OUT/<run>.json (the profiles) and OUT/refit.md (the table).

--rates fits compute_efficiency and activation_traffic with the overlaps (as `calibrate` fits them; the
records' own form, one rate for all FLOPs), for when a term of the model outside the overlaps changed:
run 10's result is what tests/unit/earlier_model.py replays these records with.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "unit"))

from _pytest.monkeypatch import MonkeyPatch  # noqa: E402
from earlier_model import EARLIER_RATES, predict_earlier_model  # noqa: E402

from topowise.calibrate.fit import fit_profile  # noqa: E402
from topowise.calibrate.launch import read_records_dir  # noqa: E402
from topowise.calibrate.validate import compare, summarize  # noqa: E402
from topowise.costmodel.profile import default_profile  # noqa: E402
from topowise.measure.records import read_records  # noqa: E402
from topowise.topology.model import Topology  # noqa: E402

RESULTS = ROOT / "research" / "2026-11-30-h200x2"
CALIBRATIONS = ("run10", "run16")
VALIDATIONS = ("run4", "run8", "run9", "run10", "run13", "run16", "run17")
OVERLAPS = tuple(f"overlap.{s}" for s in ("ddp", "zero1", "zero2", "zero3"))


def topology_of(folder: Path) -> Topology:
    meta = folder / "meta.json"
    return Topology.from_dict(json.loads(meta.read_text())["topology"], str(meta))


def refit(run: str, rates: bool = False):
    records, meta = read_records_dir(RESULTS / run / "profile-records")
    base = replace(default_profile(), **EARLIER_RATES)
    names = (["compute_efficiency", "activation_traffic"] if rates else []) + list(OVERLAPS)
    return fit_profile(records, topology_of(RESULTS / run / "profile-records"), meta["fingerprint"], base=base,
                       fit_names=names, comm_min_bytes=int(meta["plan"].get("fit_min_bytes", 0)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(RESULTS / "refit4"))
    parser.add_argument("--rates", action="store_true", help="fit compute_efficiency and activation_traffic too")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    predict_earlier_model(MonkeyPatch())  # these records were measured with the earlier bench transformer
    lines = ["| calibration | overlaps fitted (ddp, zero1, zero2, zero3) | fit rms / worst | validated on | "
             "all cases: mean / worst | GPU-bound: mean / worst (cases) |", "|---|---|---|---|---|---|"]
    for run in CALIBRATIONS:
        profile, report = refit(run, args.rates)
        (out / f"{run}.json").write_text(json.dumps(profile.to_dict(), indent=1))
        fitted = ", ".join(f"{profile.overlap[s.split('.')[1]]:.3f}" for s in OVERLAPS)
        if args.rates:
            fitted += f" (compute_efficiency {profile.compute_efficiency:.4f}, activation_traffic " \
                      f"{profile.activation_traffic:.2f})"
        fit = f"{100 * report['step_time']['rms_error']:.1f}% / {100 * report['step_time']['max_error']:.1f}%"
        for val in VALIDATIONS:
            folder = RESULTS / val / "validate-records"
            rows = compare(read_records(str(folder / "train.jsonl"), kind="train"), profile, topology_of(folder))
            s = summarize(rows)
            gpu = s["by_bound"].get("gpu", {"mean_abs_error": 0.0, "max_abs_error": 0.0, "cases": 0})
            lines.append(f"| {run} | {fitted} | {fit} | {val} | {100 * s['step_time']['mean_abs_error']:.1f}% / "
                         f"{100 * s['step_time']['max_abs_error']:.1f}% | {100 * gpu['mean_abs_error']:.1f}% / "
                         f"{100 * gpu['max_abs_error']:.1f}% ({gpu['cases']}) |")
            fitted = fit = ""
    text = "\n".join(lines) + "\n"
    (out / "refit.md").write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
