"""The forward's share of the elementwise traffic and the host's run-ahead, replayed on the 2x H200 records.

    python research/2026-11-30-h200x2/scripts/split_host_check.py [--out research/2026-11-30-h200x2/refit4/split-host.md]

For the share of the blocks' elementwise traffic that runs in the forward (a half, the model's; a
third, measured on one H200) and two ways of combining the host with the GPU:
  per-phase  each phase (forward, backward, optimizer) takes max(host, GPU): nothing the host gains in
             one phase carries into the next (the model's);
  run-ahead  the host's lead carries across phases inside a step: the step is
             max over k of (host of phases < k + GPU of phases >= k), the pipeline bound;
the overlaps are fitted again from run 10's and run 16's calibration records (research/2026-11-30-h200x2/scripts/overlap_refit.py,
GPU rates held), and every validation record of runs 4-17 is replayed: step-time error of the cases
predicted GPU-bound and of those predicted host-bound (the model's flag: some phase waits for the host,
the same cases under both forms; with whether the measurement lies inside the range Profile.host_spread
gives), and the groups whose predicted-first strategy measured more than 3% slower than the fastest.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT.parents[1] / "2026-12-02-h200x1" / "scripts"))  # host_runahead

import overlap_refit as refit_mod  # noqa: E402
from _pytest.monkeypatch import MonkeyPatch  # noqa: E402
from host_runahead import per_phase, run_ahead  # noqa: E402

from topowise.calibrate import validate as validate_mod  # noqa: E402
from topowise.costmodel import step as step_mod  # noqa: E402
from topowise.measure.records import read_records  # noqa: E402

SHARES = (("a half", 1 / 2), ("a third", 1 / 3))


def replay(profile, combine, spread: float) -> dict:
    """Errors and ranking of every validation record under `profile`, the host combined by `combine`."""
    gpu_bound, host_bound, inside, misses, groups = [], [], 0, [], 0
    for val in refit_mod.VALIDATIONS:
        folder = refit_mod.RESULTS / val / "validate-records"
        records = [r for r in read_records(str(folder / "train.jsonl"), kind="train") if r.get("status") == "ok"]
        predict_one = validate_mod.predictor(refit_mod.topology_of(folder))
        by_group: dict = {}
        for r in records:
            o = validate_mod.observation_from(r)
            phases = predict_one(profile, o).time.phases
            host, gpu = [p.host_s for p in phases], [p.gpu_s for p in phases]
            step, low, high = (combine(host, gpu, s) for s in (1.0, 1 - spread, 1 + spread))
            error = step / r["step_time_s"] - 1
            if per_phase(host, gpu) <= sum(gpu):  # host-bound as the model flags it (its host wait), either form
                gpu_bound.append(error)
            else:
                host_bound.append(error)
                inside += low <= r["step_time_s"] <= high
            by_group.setdefault(o.case.group, {})[o.case.strategy] = (r["step_time_s"], step)
        for key, members in by_group.items():
            if len(members) < 2:
                continue
            groups += 1
            first = min(members, key=lambda s: members[s][1])
            fastest = min(members, key=lambda s: members[s][0])
            slower = members[first][0] / members[fastest][0] - 1
            if slower > 0.03:
                misses.append(f"{val} {key[0]} {key[1]}x{key[2]} {key[3]}: {first} first, {fastest} "
                              f"{100 * slower:.1f}% faster")
    mean = lambda xs: 100 * statistics.mean(map(abs, xs)) if xs else 0.0
    worst = lambda xs: 100 * max(map(abs, xs)) if xs else 0.0
    return {"gpu": f"{len(gpu_bound)}: {mean(gpu_bound):.2f}% / {worst(gpu_bound):.1f}%",
            "host": f"{len(host_bound)}: {mean(host_bound):.1f}% / {worst(host_bound):.1f}%",
            "inside": f"{inside}/{len(host_bound)}", "misses": misses, "groups": groups}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(refit_mod.RESULTS / "refit4" / "split-host.md"))
    out = Path(parser.parse_args().out)
    lines = ["| forward's share | fitted from | overlaps ddp / zero1 / zero2 / zero3 | host | GPU-bound: cases: "
             "mean / worst | host-bound: cases: mean / worst | inside the host range | ranking misses |",
             "|---|---|---|---|---|---|---|---|"]
    notes = []
    for name, share in SHARES:
        patch = MonkeyPatch()
        refit_mod.predict_earlier_model(patch)  # these records were measured with the earlier bench transformer
        patch.setattr(step_mod, "ELEMENTWISE_FORWARD_SHARE", share)
        for run in refit_mod.CALIBRATIONS:
            profile, _ = refit_mod.refit(run)
            fitted = " / ".join(f"{profile.overlap[s]:.3f}" for s in ("ddp", "zero1", "zero2", "zero3"))
            for host_name, combine in (("per-phase", per_phase), ("run-ahead", run_ahead)):
                s = replay(profile, combine, profile.host_spread)
                lines.append(f"| {name} | {run} | {fitted} | {host_name} | {s['gpu']} | {s['host']} | {s['inside']} | "
                             f"{len(s['misses'])}/{s['groups']} |")
                notes += [f"- {name}, {run}, {host_name}: {m}" for m in s["misses"]]
        patch.undo()
    text = "\n".join(lines + [""] + notes) + "\n"
    out.write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
