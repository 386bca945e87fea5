"""The designed validation's cases predicted before they are measured, and those predictions beside a measurement.

    python research/2026-12-04-predicted-h200x2/design_predictions.py [--profile default|FILE] [--out predictions.jsonl]
    python research/2026-12-04-predicted-h200x2/design_predictions.py --predicted predictions.jsonl --measured validation.jsonl [...]

The first form predicts every case of `validate --design --compile` (calibrate/design.py: 41 cases on two GPUs,
none sharing a block with a calibration model) on the h200-x2 preset (2x H200 SXM, NV18) with a profile, and
writes one JSON line per case: the case, the predicted step, its host range, the exposed communication, the
allocated memory, and whether the host sets the step. Written before the cases run, the file fixes what the model
of that tree says, so a later measurement checks that model and not one changed after seeing the numbers.

The second form pairs the written predictions with measured records (`validate --out` lines or bench train
records) by case and prints each error and the issue's targets: the default profile within 8% mean on the
GPU-bound cases, every host-bound case inside its range, memory within 3% mean and never 3% under, the
first-ranked strategy of every group measured fastest or within 3% of it.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, fields
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from topowise.calibrate.cases import Case  # noqa: E402
from topowise.calibrate.design import VALIDATION_CONFIGS, validation_cases  # noqa: E402
from topowise.calibrate.fit import observation_from  # noqa: E402
from topowise.calibrate.validate import RANK_TOLERANCE, ValidationRow, summarize  # noqa: E402
from topowise.costmodel.predict import predict  # noqa: E402
from topowise.costmodel.profile import default_profile, load_profile  # noqa: E402
from topowise.models.spec import load_model, spec_from_hf_config  # noqa: E402
from topowise.topology import load_topology  # noqa: E402
from topowise.units import GIB  # noqa: E402

TOPOLOGY = "h200-x2"
CASE_FIELDS = tuple(f.name for f in fields(Case))


def model_name(model: str) -> str:
    """A case's model as the predictions name it: a design config's path (…/configs/<name>/config.json) by its
    folder, a preset by itself."""
    path = Path(model)
    return path.parent.name if path.name == "config.json" else model


def case_of(record: dict) -> Case:
    """The case a prediction row or a validate line is of (the fields it has; Case's defaults for the rest)."""
    return Case(**{f: model_name(record[f]) if f == "model" else record[f] for f in CASE_FIELDS if f in record})


def case_key(record: dict) -> tuple:
    return case_of(record).key


def predict_cases(profile_arg: str) -> list[dict]:
    """One dict per designed validation case (compiled twins included): the case and what `profile` predicts."""
    topo = load_topology(TOPOLOGY)
    profile = default_profile() if profile_arg == "default" else load_profile(profile_arg)
    rows = []
    for case in validation_cases(compile=True):
        spec = (spec_from_hf_config(VALIDATION_CONFIGS[case.model], name=case.model)
                if case.model in VALIDATION_CONFIGS else load_model(case.model))
        p = predict(case.run(spec, topo.indices[:2]), topo, profile)
        low, high = p.step_time_range_s
        rows.append({"model": case.model, "strategy": case.strategy, "micro_batch": case.micro_batch,
                     "seq_len": case.seq_len, "fabric": case.fabric,
                     "activation_checkpointing": case.activation_checkpointing, "compile": case.compile,
                     "label": case.label, "group": list(map(str, case.group)),
                     "predicted": {"step_time_s": p.step_time_s, "step_range_s": [low, high],
                                   "host_bound": p.host_bound, "exposed_comm_s": p.time.exposed_comm_s,
                                   "host_wait_s": p.time.host_wait_s, "allocated_bytes": p.memory.allocated_bytes,
                                   "peak_bytes": p.memory.peak_bytes, "fits": p.fits, "mfu": p.mfu}})
    return rows


def first_in_groups(rows: list[dict]) -> dict[tuple, str]:
    """Per group of cases differing only in strategy (two or more), the strategy predicted fastest."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault(tuple(r["group"]), []).append(r)
    return {g: min(m, key=lambda r: r["predicted"]["step_time_s"])["strategy"]
            for g, m in groups.items() if len(m) > 1}


def print_predictions(rows: list[dict], profile_arg: str) -> None:
    firsts = first_in_groups(rows)
    print(f"# {len(rows)} cases on {TOPOLOGY}, profile {profile_arg}; * = predicted first of its group")
    print(f"{'case':58s} {'step ms':>8s} {'host range ms':>15s} {'exp. comm':>9s} {'alloc GiB':>9s}")
    for r in rows:
        p = r["predicted"]
        rng = "{:.1f}-{:.1f}".format(*(1e3 * x for x in p["step_range_s"])) if p["host_bound"] else "GPU-bound"
        star = "*" if firsts.get(tuple(r["group"])) == r["strategy"] else " "
        print(f"{r['label']:57s}{star} {1e3 * p['step_time_s']:8.1f} {rng:>15s} "
              f"{1e3 * p['exposed_comm_s']:9.1f} {p['allocated_bytes'] / GIB:9.2f}")
    bound = sum(r["predicted"]["host_bound"] for r in rows)
    print(f"# {bound} of {len(rows)} predicted host-bound; {len(firsts)} groups")


def measured_steps(paths: list[str]) -> dict[tuple, dict]:
    """Case key -> {step_time_s, allocated_bytes} of every finished record (validation or train lines)."""
    out = {}
    for path in paths:
        for line in Path(path).read_text().splitlines():
            r = json.loads(line)
            if r.get("status") != "ok":
                continue
            if r.get("kind") == "validation":
                m = r["measured"]
                out[case_key(r)] = {"step_time_s": m["step_time_s"], "allocated_bytes": m["peak_memory_bytes"]}
            elif r.get("kind") == "train":  # read as validate reads it: its case, its steady peak
                o = observation_from(r)
                out[case_key(asdict(o.case))] = {"step_time_s": o.step_time_s,
                                                 "allocated_bytes": o.peak_allocated_bytes}
    return out


def compare(rows: list[dict], measured: dict[tuple, dict]) -> None:
    """Each predicted case that was measured: its errors; then the targets, item by item, as validate's summary
    computes them (its errors, host ranges and ranking)."""
    paired = [ValidationRow(
        case_of(r), "ok", m["step_time_s"], p["step_time_s"], m["allocated_bytes"], p["allocated_bytes"], None,
        p["peak_bytes"], 2,
        # host-set as predict flagged it (its wait over 5% of the step), not wherever the host waits at all
        {"host_wait_s": p["host_wait_s"] if p["host_bound"] else 0.0, "step_range_s": p["step_range_s"]})
        for r in rows if (m := measured.get(case_key(r))) for p in (r["predicted"],)]
    print(f"# {len(paired)} of {len(rows)} predicted cases measured")
    print(f"{'case':58s} {'pred ms':>8s} {'meas ms':>8s} {'error':>7s} {'memory':>7s}  host range")
    for v in paired:
        low, high = v.breakdown["step_range_s"]
        where = "" if not v.breakdown["host_wait_s"] else "inside" if low <= v.measured_step_s <= high else "OUTSIDE"
        print(f"{v.case.label:58s} {1e3 * v.predicted_step_s:8.1f} {1e3 * v.measured_step_s:8.1f} "
              f"{100 * v.step_error:+6.1f}% {100 * v.memory_error:+6.1f}%  {where}")
    summary = summarize(paired)
    gpu, host, memory = summary["by_bound"]["gpu"], summary["by_bound"]["host"], summary["peak_memory"]
    pct = lambda x: 100 * x if x is not None else float("nan")  # noqa: E731
    print(f"GPU-bound step: {gpu['cases']} cases, mean {pct(gpu['mean_abs_error']):.1f}% (target 8% for the default "
          f"profile, 4% calibrated), worst {pct(gpu['max_abs_error']):.1f}% (8% calibrated)")
    print(f"host-bound: {host['cases']} cases, outside their range: "
          f"{host.get('in_range', {}).get('outside') or 'none'}")
    print(f"memory: mean {pct(memory['mean_abs_error']):.1f}% (3%), worst {pct(memory['max_abs_error']):.1f}% (6%), "
          f"least {pct(memory['least_error']):+.1f}% (not under -3%)")
    slower = [g["slower_by"] for g in summary["ranking"]]
    print(f"ranking: {len(slower)} groups, first-ranked slower than the fastest by at most "
          f"{pct(max(slower, default=None)):.1f}% (within {100 * RANK_TOLERANCE:.0f}%: "
          f"{sum(g['ok'] for g in summary['ranking'])} of {len(slower)})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="default", help="'default' (the built-in profile) or a profile file")
    ap.add_argument("--out", help="write the predictions here, one JSON line per case")
    ap.add_argument("--predicted", help="predictions written earlier (this script's --out)")
    ap.add_argument("--measured", nargs="*", default=[], help="validate --out lines or bench train records")
    args = ap.parse_args()
    if args.predicted:
        rows = [json.loads(line) for line in Path(args.predicted).read_text().splitlines()]
    else:
        rows = predict_cases(args.profile)
        if args.out:
            Path(args.out).write_text("".join(json.dumps(r) + "\n" for r in rows))
    print_predictions(rows, args.profile if not args.predicted else args.predicted)
    if args.measured:
        compare(rows, measured_steps(args.measured))


if __name__ == "__main__":
    main()
