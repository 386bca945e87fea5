"""Does the host's lead carry from one phase of a step into the next? One GPU, host and GPU in one launch.

    PYTHONPATH=. python3 research/2026-12-02-h200x1/scripts/host_runahead.py --out DIR            # on one GPU: measure, then compare
    python research/2026-12-02-h200x1/scripts/host_runahead.py --records DIR/records              # compare recorded runs (no GPU)

The cost model adds the host to the GPU phase by phase: each of forward, backward and optimizer takes
max(host, GPU), so a host that issued the backward early gains nothing in the optimizer. If nothing
synchronises between phases (bench train's loop never waits for the GPU), the host's lead should
carry: the pipeline bound is max over k of (host of the phases before k + GPU of the phases from k),
and with the lead carried over the step boundary too, max(host's total, GPU's total).

One launch (calibrate's joined form, one process on one GPU, so the host's speed is the same for all):
each model's strategies at 1 x 128 tokens, where the GPU keeps up and bench train's host phase
times are the host's alone, then at real shapes, then the 128-token runs again (the host per phase is
the mean of the two; their ratio shows how far the host drifted inside the launch). Each real case is
predicted with the default profile's GPU side and this launch's 128-token host per phase, combined the
three ways, beside the measured step. On one GPU there is no communication: the comparison is the
host's and the GPU's alone.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from topowise.calibrate.cases import Case, Plan  # noqa: E402
from topowise.calibrate.fit import model_resolver, observation_from, predictor, step_spread  # noqa: E402
from topowise.costmodel.profile import default_profile  # noqa: E402
from topowise.errors import UsageError  # noqa: E402
from topowise.topology.presets import load_preset  # noqa: E402

FLOOR_TOKENS = 128
PHASES = ("forward", "backward", "optimizer")
STRATEGIES = ("ddp", "zero2", "zero3")
SHAPES = {  # model -> real (micro-batch, sequence) shapes
    "qwen2.5-0.5b": ((2, 4096), (1, 4096), (2, 2048)),
    "research/configs/llama-0.37b.json": ((8, 1024), (4, 1024), (2, 2048)),
    "llama3.2-1b": ((2, 2048), (1, 2048)),
}


def plan(steps: int, reverse: bool = False) -> Plan:
    """Every floor, the real shapes, every floor again (the host's drift inside the launch)."""
    models = list(reversed(SHAPES)) if reverse else list(SHAPES)
    floors = [Case(m, s, 1, FLOOR_TOKENS) for m in models for s in STRATEGIES]
    cases = floors + [Case(m, s, mb, seq) for m in models for mb, seq in SHAPES[m] for s in STRATEGIES] + floors
    return Plan(device="cuda", fabrics=("nvlink",), comm_ops=(), comm_sizes=(), cases=tuple(cases),
                warmup=3, steps=steps)


# host and gpu: seconds per phase, in step order; `scale` stretches the host (a host-bound range)
def per_phase(host, gpu, scale=1.0):
    return sum(max(h * scale, g) for h, g in zip(host, gpu))


def run_ahead(host, gpu, scale=1.0):
    return max(sum(host[:k]) * scale + sum(gpu[k:]) for k in range(len(host) + 1))


def over_steps(host, gpu):
    return max(sum(host), sum(gpu))


def compare(records: list[dict]) -> list[dict]:
    """Each real-shape record beside its prediction under the three ways of adding the host."""
    seen: dict[tuple, list[dict]] = {}  # (model, strategy) -> host phases of its floors, in launch order
    for r in records:
        if r.get("status") == "ok" and r["micro_batch"] * r["seq_len"] == FLOOR_TOKENS:
            seen.setdefault((r["model"], r["strategy"]), []).append(r["host_phase_s"])
    floors = {key: {p: sum(f[p] for f in fs) / len(fs) for p in PHASES} for key, fs in seen.items()}
    drift = {key: sum(fs[-1].values()) / sum(fs[0].values()) for key, fs in seen.items()}
    predict_one, model_of = predictor(load_preset("h200-x2")), model_resolver()
    rows = []
    for r in records:
        floor = floors.get((r["model"], r["strategy"]))
        if r.get("status") != "ok" or r["micro_batch"] * r["seq_len"] == FLOOR_TOKENS or floor is None:
            continue
        o = observation_from(r)
        layers = model_of(o).num_layers
        host_terms = {f"{r['strategy']}/{p}": floor[p] / layers for p in PHASES}
        profile = replace(default_profile(), host_s_per_layer=dict(default_profile().host_s_per_layer, **host_terms))
        phases = predict_one(profile, o).time.phases
        host, gpu = [p.host_s for p in phases], [p.gpu_s for p in phases]
        rows.append({"model": model_of(o).name, "strategy": r["strategy"], "micro_batch": r["micro_batch"],
                     "seq_len": r["seq_len"], "measured_s": r["step_time_s"],
                     "spread": step_spread(r.get("step_times_s")),
                     "host_s": dict(zip(PHASES, host)), "gpu_s": dict(zip(PHASES, gpu)),
                     "measured_host_phase_s": r.get("host_phase_s"),
                     "floor_drift": drift[(r["model"], r["strategy"])],
                     "per_phase_s": per_phase(host, gpu), "run_ahead_s": run_ahead(host, gpu),
                     "over_steps_s": over_steps(host, gpu)})
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| model | strategy | mb x seq | measured ms | GPU fwd / bwd / opt | host fwd / bwd / opt (128 tokens) | "
             "per phase | run-ahead | over steps | last floor / first |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        m = r["measured_s"]
        err = lambda key: f"{r[key] * 1e3:.1f} ({100 * (r[key] / m - 1):+.1f}%)"
        g = " / ".join(f"{r['gpu_s'][p] * 1e3:.1f}" for p in PHASES)
        h = " / ".join(f"{r['host_s'][p] * 1e3:.1f}" for p in PHASES)
        shape = f"{r['micro_batch']} x {r['seq_len']}"
        lines.append(f"| {r['model']} | {r['strategy']} | {shape} | {m * 1e3:.1f} | {g} | {h} | "
                     f"{err('per_phase_s')} | {err('run_ahead_s')} | {err('over_steps_s')} | {r['floor_drift']:.2f} |")
    lines.append("")
    near = [r for r in rows if max(r["host_s"].values()) > 0 and r["per_phase_s"] > sum(r["gpu_s"].values())]
    for key in ("per_phase_s", "run_ahead_s", "over_steps_s"):
        errs = [abs(r[key] / r["measured_s"] - 1) for r in near]
        if errs:
            lines.append(f"{key[:-2]}: {len(errs)} cases where the host shows: mean |error| "
                         f"{100 * sum(errs) / len(errs):.1f}%, worst {100 * max(errs):.1f}%")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="measure on this machine's GPU 0 and write here")
    parser.add_argument("--records", help="compare the records in this folder (train.jsonl) without measuring")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--reverse", action="store_true", help="the models in the opposite order")
    args = parser.parse_args()
    if bool(args.out) == bool(args.records):
        print("error: give --out (measure) or --records (compare)", file=sys.stderr)
        return 2
    if args.out:
        from topowise.calibrate.launch import measure

        records = Path(args.out) / "records"
        problems = measure(plan(args.steps, args.reverse), 1, records, progress=print)
        print(f"problems: {problems or 'none'}")
    else:
        records = Path(args.records)
    try:
        rows = [json.loads(line) for line in (records / "train.jsonl").read_text().splitlines() if line.strip()]
        result = compare(rows)
    except (OSError, UsageError, KeyError, ValueError) as exc:
        print(f"error: {records}: {exc}", file=sys.stderr)
        return 2
    text = table(result)
    (records.parent / "host_runahead.md").write_text(text)
    (records.parent / "host_runahead.json").write_text(json.dumps(result, indent=1))
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
