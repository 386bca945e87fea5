"""Compiled and eager runs on one GPU: the compiled terms fitted from some, predicted beside measured on the rest.

    python benchmarks/compile_accuracy.py [--dir docs/results/2026-12-01-h200x1/compile] [--fit]

--fit prints the compiled terms (compiled_activation_traffic, compile_s, the "compiled/" host terms)
that topowise.calibrate.fit's fit_compiled and fit_host find in DIR/fit/*.jsonl, starting from the
default profile: what costmodel/profile.py's defaults are. Without it: every record of DIR/fit and
DIR/heldout predicted with the default profile beside its measurement, as a markdown table
(DIR/accuracy.md), with the error means by kind. Records are replayed from their own model shapes.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from topowise.calibrate.fit import fit_compiled, fit_host, observations_from, predictor  # noqa: E402
from topowise.costmodel.profile import default_profile  # noqa: E402
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


def table(folder: Path) -> str:
    topo = load_topology(TOPOLOGY)
    profile = default_profile()
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
    parser.add_argument("--dir", default="docs/results/2026-12-01-h200x1/compile")
    parser.add_argument("--fit", action="store_true", help="print the compiled terms the fit records give")
    args = parser.parse_args()
    folder = Path(args.dir)
    if args.fit:
        fit(folder)
        return 0
    text = table(folder)
    (folder / "accuracy.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
