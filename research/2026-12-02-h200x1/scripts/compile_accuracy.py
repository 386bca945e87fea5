"""Compiled and eager runs on one GPU: terms fitted from some, predicted beside measured on the rest.

    python research/2026-12-02-h200x1/scripts/compile_accuracy.py [--dir research/2026-12-01-h200x1/compile] [--fit]
    python research/2026-12-02-h200x1/scripts/compile_accuracy.py --dir DIR --fit-eager [--profile DIR/profile.json]

--fit prints the compiled terms (compiled_activation_traffic, compile_s, the "compiled/" host terms)
that topowise.calibrate.fit's fit_compiled and fit_host find in DIR/fit/*.jsonl, starting from the
default profile: what costmodel/profile.py's defaults are. --fit-eager fits the eager terms one GPU
identifies the way calibrate does (the host per block from the host-bound runs, then
compute_efficiency and activation_traffic by least squares over the GPU-bound ones, then the compiled
traffic from compiled twins if any; no communication, so the overlaps stay) from DIR/fit, prints them
and writes DIR/profile.json. Without
either: every record of DIR/fit and DIR/heldout predicted beside its measurement with the default
profile (or --profile), as a markdown table (DIR/accuracy.md, or DIR/accuracy-PROFILE.md), with the
error means by kind. Records are replayed from their own model shapes.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from topowise.calibrate.fit import (  # noqa: E402
    HOST_DOMINATED_FRACTION,
    fit_compiled,
    fit_host,
    fit_step_time,
    observations_from,
    predictor,
)
from topowise.costmodel.profile import Profile, default_profile, load_profile  # noqa: E402
from topowise.measure.records import read_records  # noqa: E402
from topowise.topology import load_topology  # noqa: E402

MARK = {True: "inside", False: "outside"}
TOPOLOGY = "h200-x2"  # one GPU of it: the records ran on one H200


def load(folder: Path) -> list[dict]:
    return [r for f in sorted(folder.glob("*.jsonl")) for r in read_records(f, kind="train")]


def fit(folder: Path) -> None:
    topo = load_topology(TOPOLOGY)
    obs = observations_from(load(folder / "fit"))
    predict_one = predictor(topo)
    where = f"one H200, {folder / 'fit'}"
    profile, bound = fit_host(default_profile(), obs, predict_one, None, where)
    profile, result = fit_compiled(profile, obs, predict_one, where)
    print(f"compiled_activation_traffic = {profile.compiled_activation_traffic}  (eager {profile.activation_traffic})")
    print(f"compile_s = {profile.compile_s}")
    print("compiled host-bound runs:", ", ".join(o.case.label for o in bound if o.compile))
    for key, value in sorted(profile.host_s_per_layer.items()):
        if key.startswith("compiled/"):
            print(f'    "{key}": {value * 1e3:.3f}e-3,')
    for name in ("compiled_activation_traffic", "compile_s"):
        print(f"{name}: {profile.sources.get(name)}")


def fit_eager(folder: Path) -> Profile:
    topo = load_topology(TOPOLOGY)
    obs = observations_from(load(folder / "fit"))
    predict_one = predictor(topo)
    where = f"one H200, {folder / 'fit'}"
    profile, bound = fit_host(default_profile(), [o for o in obs if not o.compile], predict_one, None, where)
    device_obs = [o for o in obs if o not in bound and not o.compile
                  and predict_one(profile, o).time.host_s <= HOST_DOMINATED_FRACTION * o.step_time_s]
    names = ["compute_efficiency", "activation_traffic"]
    profile, result = fit_step_time(profile, device_obs, predict_one, where, names)
    print(f"compute_efficiency = {profile.compute_efficiency}  activation_traffic = {profile.activation_traffic}  "
          f"(rms error {100 * result.rms_error:.1f}%, worst {100 * result.max_error:.1f}%)")
    if any(o.compile for o in obs):  # compiled twins: their traffic against the eager rates just fitted
        profile, compiled = fit_compiled(profile, obs, predict_one, where)
        print(f"compiled_activation_traffic = {profile.compiled_activation_traffic}  compile_s = {profile.compile_s}")
    print("host-bound runs:", ", ".join(o.case.label for o in bound))
    for key, value in sorted(profile.host_s_per_layer.items()):
        if not key.startswith("compiled/"):
            print(f'    "{key}": {value * 1e3:.3f}e-3,')
    for name in ("compute_efficiency", "activation_traffic"):
        print(f"{name}: {profile.sources.get(name)}")
    (folder / "profile.json").write_text(profile.to_json())
    return profile


def table(folder: Path, profile: Profile | None = None) -> str:
    topo = load_topology(TOPOLOGY)
    profile = profile or default_profile()
    predict_one = predictor(topo)
    rows, errors = [], {}
    for part in ("fit", "heldout"):
        for o in observations_from(load(folder / part)):
            p = predict_one(profile, o)
            step = p.step_time_s / o.step_time_s - 1
            mem = p.memory.allocated_bytes / o.peak_allocated_bytes - 1
            lo, hi = p.step_time_range_s
            kind = ("host-bound" if p.host_bound else "GPU-bound")
            inside = lo <= o.step_time_s <= hi
            errors.setdefault((part, o.compile, kind), []).append((abs(step), mem, inside))
            rows.append(f"| {part} | {o.model.split('/')[-1]} | {o.micro_batch}x{o.seq_len} | {o.strategy} | "
                        f"{'compiled' if o.compile else 'eager'}"
                        f"{' ' + p.run.checkpoint_words if p.run.activation_checkpointing else ''} | "
                        f"{1e3 * o.step_time_s:.1f} | {1e3 * p.step_time_s:.1f} | {100 * step:+.1f}% | {kind}"
                        f"{f' ({1e3 * lo:.0f}-{1e3 * hi:.0f} ms, {MARK[inside]})' if p.host_bound else ''}"
                        f" | {o.peak_allocated_bytes / 2**30:.2f} | {p.memory.allocated_bytes / 2**30:.2f} | "
                        f"{100 * mem:+.1f}% |")
    head = ("| set | model | mb x seq | strategy | mode | measured ms | predicted ms | error | bound (range) | "
            "measured GiB | predicted GiB | error |\n|" + "---|" * 12)
    summary = ["| set | mode | bound | cases | step error mean / max | inside the host range | "
               "memory error mean / min..max |",
               "|---|---|---|---|---|---|---|"]
    for (part, compiled, kind), e in sorted(errors.items()):
        steps, mems, inside = zip(*e)
        summary.append(f"| {part} | {'compiled' if compiled else 'eager'} | {kind} | {len(e)} | "
                       f"{100 * statistics.mean(steps):.1f}% / {100 * max(steps):.1f}% | "
                       f"{f'{sum(inside)} of {len(e)}' if kind == 'host-bound' else '-'} | "
                       f"{100 * statistics.mean(map(abs, mems)):.1f}% / "
                       f"{100 * min(mems):+.1f}..{100 * max(mems):+.1f}% |")
    return "\n".join([head, *rows, "", *summary, ""])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dir", default="research/2026-12-01-h200x1/compile")
    parser.add_argument("--fit", action="store_true", help="print the compiled terms the fit records give")
    parser.add_argument("--fit-eager", action="store_true",
                        help="fit the eager terms from DIR/fit, print them, write DIR/profile.json")
    parser.add_argument("--profile", default=None, help="the table with this profile, not the default")
    args = parser.parse_args()
    folder = Path(args.dir)
    if args.fit:
        fit(folder)
        return 0
    if args.fit_eager:
        fit_eager(folder)
        return 0
    profile = load_profile(args.profile) if args.profile else None
    text = table(folder, profile)
    (folder / (f"accuracy-{Path(args.profile).stem}.md" if args.profile else "accuracy.md")).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
