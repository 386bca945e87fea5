"""Checkpointing's host work: the terms fitted from 128-token runs, then predicted beside measured on runs
no fit saw.

    python research/2026-12-02-h200x1/scripts/checkpointing_host.py [--fit FILE] [--check FILE ...]

--fit: bench train records at 128 tokens with --checkpointing none, selective (per op) and full, where the
host sets the step (default: research/2026-12-02-h200x1/recompute/run34/train.jsonl, its 128-token
runs). topowise.calibrate.fit's fit_host fits the plain host terms from the runs not checkpointed and
fit_checkpointing_host what checkpointing adds per block; printed as costmodel/profile.py holds them.
--check: records of checkpointed runs (default: recompute/run33, the runs of run34, run36 and run37 above 128 tokens and
modes/run29), each predicted with the default profile, with and without the checkpointing host terms,
beside its measured step; the host's range (Profile.host_spread) says whether a host-bound run lies inside.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from topowise.calibrate.fit import (  # noqa: E402
    CHECKPOINTING_HOST_KEYS,
    fit_host,
    observation_from,
    predictor,
    without_checkpointing_host,
)
from topowise.costmodel.profile import default_profile  # noqa: E402
from topowise.measure.records import read_records  # noqa: E402
from topowise.topology import load_topology  # noqa: E402

RESULTS = ROOT / "research/2026-12-02-h200x1"
FIT = RESULTS / "recompute/run34/train.jsonl"
CHECK = [RESULTS / "recompute/run33/train.jsonl", RESULTS / "recompute/run34/train.jsonl",
         RESULTS / "recompute/run36/train.jsonl", RESULTS / "recompute/run37/train.jsonl",
         RESULTS / "modes/run29/train.jsonl"]


def fit(path: Path, predict_one) -> None:
    obs = [observation_from(r) for r in read_records(str(path), kind="train") if r["seq_len"] == 128]
    profile, bound = fit_host(without_checkpointing_host(default_profile()), obs, predict_one, None, str(path))
    print(f"{len(bound)} host-bound runs of {len(obs)} at 128 tokens")
    for key, value in profile.host_s_per_layer.items():
        if key.startswith(CHECKPOINTING_HOST_KEYS):
            print(f'    "{key}": {1e3 * value:.3f}e-3,')
            print(f"        # {profile.sources['host_s_per_layer.' + key]}")


def check(paths: list[Path], predict_one) -> None:
    full = default_profile()
    without = without_checkpointing_host(full)
    print(f"{'run':<44}{'measured':>9}{'without':>9}{'err':>8}{'with':>8}{'err':>8}  host range, ms")
    for path in paths:
        for r in read_records(str(path), kind="train"):
            if (r.get("checkpointing") or "none") == "none" or r["seq_len"] == 128 or r.get("status", "ok") != "ok":
                continue
            o = observation_from(r)
            a, b = predict_one(without, o), predict_one(full, o)
            option = f" {r.get('selective_ac_option')}" if r["checkpointing"] == "selective" else ""
            mode = r["checkpointing"] + option
            name = f"{r['model'].split('/')[-1]} {r['strategy']} {r['micro_batch']}x{r['seq_len']} {mode}"
            low, high = b.time.step_range_s
            bound = "host-bound" if b.time.host_wait_s > 0 else "GPU-bound"
            inside = "inside" if low * (1 - 1e-9) <= r["step_time_s"] <= high * (1 + 1e-9) else "outside"
            print(f"{name:<44}{1e3 * r['step_time_s']:>9.1f}{1e3 * a.step_time_s:>9.1f}"
                  f"{100 * (a.step_time_s / r['step_time_s'] - 1):>+7.1f}%{1e3 * b.step_time_s:>8.1f}"
                  f"{100 * (b.step_time_s / r['step_time_s'] - 1):>+7.1f}%  {bound}"
                  + (f" {1e3 * low:.1f}-{1e3 * high:.1f} ({inside})" if b.time.host_wait_s > 0 else ""))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fit", type=Path, default=FIT)
    parser.add_argument("--check", type=Path, nargs="*", default=CHECK)
    args = parser.parse_args()
    predict_one = predictor(load_topology("h200-x2"))  # one GPU of it: the records ran on one H200
    try:
        fit(args.fit, predict_one)
        print()
        check(args.check, predict_one)
    except (OSError, KeyError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
