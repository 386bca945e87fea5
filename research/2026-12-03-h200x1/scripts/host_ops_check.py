"""The host's time per block against the operators the block dispatches (costmodel/host_ops.py), and the records
replayed with the term and without it (no GPU).

    python research/2026-12-03-h200x1/scripts/host_ops_check.py [--probe research/2026-12-03-h200x1/host-ops/run59/host_probe.json]

1. The probe (host_probe.py, one process, ten models at 1 x 128 tokens, five rounds over the models in turn): per
   model its operators (the blocks' and those outside them), the host's seconds of the fastest round and of the
   median round per forward and backward, and the price per operator they give; the price from the Llama-style
   blocks alone, and what it says of GPT-2's and Qwen3's blocks.
2. Every one-H200 bench train record (2026-12-01..03, PyTorch engine, eager, no checkpointing) at 512 tokens or fewer
   per step, where the GPU waits for the host: the host's measured seconds per phase against the model's, with the
   operator term and without it, by block family; and the steps' errors.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "unit"))

from replay import finished  # noqa: E402

from topowise.calibrate.fit import observation_from, predictor  # noqa: E402
from topowise.costmodel import step as step_mod  # noqa: E402
from topowise.costmodel.profile import default_profile  # noqa: E402
from topowise.topology import load_topology  # noqa: E402

RESULTS = ROOT / "research"  # the whole archive; tests/unit/replay.py reads only tests/data

PROBE = RESULTS / "2026-12-03-h200x1/host-ops/run59/host_probe.json"
FLOOR_TOKENS = 512
PREDICT = predictor(load_topology("h200-x2"))


def family(spec) -> str:
    if spec.family == "gpt2":
        return "gpt2"
    return "qwen3 (q/k norms)" if spec.qk_norm else "qwen2 (qkv bias)" if spec.qkv_bias else "llama"


def probe_table(path: Path) -> None:
    rows = json.loads(path.read_text())
    print(f"{'model':24s} {'L':>3s} {'ops f/b':>9s} {'out f/b':>8s} {'fastest f/b ms':>15s} {'median f/b ms':>14s} "
          f"{'us/op fastest f/b':>18s}")
    price: dict[str, list[tuple[float, float]]] = defaultdict(list)
    per_model = {}
    for name, row in rows.items():
        if "host" not in row:
            continue
        c, L = row["count"], row["layers"]
        out_f, out_b = c["whole_1block"]["fwd_ops"] - c["fwd_ops"], c["whole_1block"]["bwd_ops"] - c["bwd_ops"]
        ops_f, ops_b = out_f + L * c["fwd_ops"], out_b + L * c["bwd_ops"]
        fast = min(h["forward_s"] for h in row["host"]), min(h["backward_s"] for h in row["host"])
        med = (statistics.median(h["forward_s"] for h in row["host"]),
               statistics.median(h["backward_s"] for h in row["host"]))
        kind = "gpt2" if name == "gpt2" else "qwen3" if "qwen3" in name else "llama"
        price[kind].append((fast[0] / ops_f, fast[1] / ops_b))
        per_model[name] = (kind, ops_f, ops_b, fast)
        print(f"{name[-24:]:24s} {L:3d} {c['fwd_ops']:4d}/{c['bwd_ops']:<4d} {out_f:3d}/{out_b:<4d} "
              f"{fast[0] * 1e3:7.1f}/{fast[1] * 1e3:<7.1f} {med[0] * 1e3:6.1f}/{med[1] * 1e3:<7.1f} "
              f"{fast[0] / ops_f * 1e6:8.1f}/{fast[1] / ops_b * 1e6:<8.1f}")
    llama = [statistics.median(p[i] for p in price["llama"]) for i in (0, 1)]
    print(f"\nprice per operator from the Llama-style blocks (median, fastest round): forward {llama[0] * 1e6:.1f} us, "
          f"backward {llama[1] * 1e6:.1f} us; the other families at that price:")
    for name, (kind, ops_f, ops_b, fast) in per_model.items():
        if kind != "llama":
            print(f"  {name[-24:]:24s} forward {ops_f * llama[0] / fast[0] - 1:+6.1%}  backward "
                  f"{ops_b * llama[1] / fast[1] - 1:+6.1%}  (per block as the reference block: "
                  f"{fast[0] / ops_f * 1e6:.1f} / {fast[1] / ops_b * 1e6:.1f} us)")


@contextmanager
def without_the_term():
    """The model with every block priced as the reference block (no operator or tensor term)."""
    saved = step_mod.extra_ops, step_mod.optimizer_scale
    step_mod.extra_ops, step_mod.optimizer_scale = (lambda model, autocast, phase: 0.0), (lambda model: 1.0)
    try:
        yield
    finally:
        step_mod.extra_ops, step_mod.optimizer_scale = saved


def eager_records(at_floor: bool) -> list[dict]:
    """Eager one-H200 PyTorch records of 2026-12-01..03, no checkpointing, of the bench transformer: those at
    FLOOR_TOKENS tokens or fewer a step (with host phase times), or those above."""
    return [r for r in finished(sorted(RESULTS.glob("2026-12-0[123]-h200x1/**/*.jsonl")))
            if r.get("world_size") == 1 and r.get("engine", "pytorch") == "pytorch" and not r.get("compile")
            and not r.get("activation_checkpointing") and not str(r["model"]).startswith("examples.")
            and (r["micro_batch"] * r["seq_len"] <= FLOOR_TOKENS) == at_floor
            and (r.get("host_phase_s") or not at_floor)]


def both_forms(r: dict):
    """The record predicted by the default profile with the operator term and without it."""
    o = observation_from(r)
    with_term = PREDICT(default_profile(), o)
    with without_the_term():
        return with_term, PREDICT(default_profile(), o)


def replay() -> None:
    records = eager_records(at_floor=True)
    by: dict[tuple[str, str], list] = defaultdict(list)
    for r in records:
        with_term, without = both_forms(r)
        spec = with_term.run.model
        for phase in ("forward", "backward"):
            measured = r["host_phase_s"][phase]
            host = {ph.phase: ph.host_s for ph in with_term.time.phases}[phase]
            host0 = {ph.phase: ph.host_s for ph in without.time.phases}[phase]
            by[(family(spec), phase)].append((host / measured - 1, host0 / measured - 1))
        by[(family(spec), "step")].append((with_term.step_time_s / r["step_time_s"] - 1,
                                           without.step_time_s / r["step_time_s"] - 1))
    print(f"\n{len(records)} records at {FLOOR_TOKENS} tokens or fewer a step (eager, PyTorch engine, one H200): "
          "the host's seconds per phase, predicted / measured - 1, mean (mean |error|), with the operator term and "
          "without; the step's error likewise")
    print(f"{'blocks':20s} {'runs':>4s} {'phase':9s} {'with the term':>22s} {'without':>22s}")
    for fam in ("llama", "qwen2 (qkv bias)", "qwen3 (q/k norms)", "gpt2"):
        for phase in ("forward", "backward", "step"):
            pairs = by.get((fam, phase), [])
            if not pairs:
                continue
            cols = []
            for i in (0, 1):
                e = [p[i] for p in pairs]
                cols.append(f"{statistics.mean(e):+7.1%} ({statistics.mean(abs(x) for x in e):5.1%})")
            print(f"{fam:20s} {len(pairs):4d} {phase:9s} {cols[0]:>22s} {cols[1]:>22s}")


def host_bound_steps() -> None:
    """Every eager one-H200 record above the floor that either form calls host-bound: the step's error."""
    print(f"\nabove {FLOOR_TOKENS} tokens, the records either form calls host-bound: step predicted / measured - 1")
    print(f"{'model':24s} {'strategy':8s} {'shape':>8s} {'measured':>9s} {'with the term':>22s} {'without':>22s}")
    errors: list[tuple[float, float]] = []
    for r in eager_records(at_floor=False):
        with_term, without = both_forms(r)
        if not (with_term.host_bound or without.host_bound):
            continue
        pair = (with_term.step_time_s / r["step_time_s"] - 1, without.step_time_s / r["step_time_s"] - 1)
        errors.append(pair)
        flag = ["host-bound" if p.host_bound else "GPU-bound" for p in (with_term, without)]
        print(f"{str(r['model'])[-24:]:24s} {r['strategy']:8s} {r['micro_batch']}x{r['seq_len']:<6d} "
              f"{r['step_time_s'] * 1e3:7.1f}ms {pair[0]:+7.1%} {flag[0]:>10s}   {pair[1]:+7.1%} {flag[1]:>10s}")
    if errors:
        print(f"{'mean |error|':42s} {statistics.mean(abs(e[0]) for e in errors):7.1%}{'':15s}"
              f"{statistics.mean(abs(e[1]) for e in errors):7.1%}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probe", type=Path, default=PROBE)
    args = parser.parse_args()
    probe_table(args.probe)
    replay()
    host_bound_steps()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
