"""The block GEMMs by shape (Profile.gemm_form "tiles") against one rate for every GEMM ("one-rate"), each fitted from
the designed calibration's one-H200 runs as `compile_accuracy.py --fit-eager` fits them, replayed on every one-H200
bench train record of 2026-12-02/03; and the same with each record's mean SM clock taken as its GEMMs' clock.

    python research/2026-12-03-h200x1/scripts/gemm_shape_check.py [--clock-ref 1720]

Prints, first, what best rate the GEMM kernels of each traced step of gemm-shape/run53 and run54 ask for, with each
GEMM's share raised to each exponent (1: the shares as timed alone; 0: one rate for all): the exponent that makes it
one rate for every width is the power limit's; and each of the default profile's terms against its kernels in
those steps. Then each form's fitted rates, the error over the records both forms price GPU-bound (all,
without the fitted records, compiled, eager, by model), the steps of gemm-shape/run52 (predicted before they ran),
and the records with a clock. No GPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "unit"))

from replay import finished  # noqa: E402

from topowise.calibrate.design import design_models  # noqa: E402
from topowise.calibrate.fit import (  # noqa: E402
    HOST_DOMINATED_FRACTION,
    fit_compiled,
    fit_host,
    fit_step_time,
    observation_from,
    observations_from,
    predictor,
)
from topowise.costmodel import gemm  # noqa: E402
from topowise.costmodel.flops import (  # noqa: E402
    FLASH_BACKWARD_SHARE,
    FLASH_FORWARD_SHARE,
    attention_flops_per_token,
    flops_params,
)
from topowise.costmodel.predict import predict  # noqa: E402
from topowise.costmodel.profile import Profile, default_profile  # noqa: E402
from topowise.measure.records import read_records  # noqa: E402
from topowise.models.spec import load_model  # noqa: E402
from topowise.run import Run  # noqa: E402
from topowise.topology import load_topology  # noqa: E402

RESULTS = ROOT / "research"  # the whole archive; tests/unit/replay.py reads only tests/data

H200 = RESULTS / "2026-12-02-h200x1"
FITTED = ("design/run22/fit", "timelines/run8/compiled")
PREDICT = predictor(load_topology("h200-x2"))


def load(folder: Path) -> list[dict]:
    return [r for f in sorted(folder.glob("*.jsonl")) for r in read_records(f, kind="train")]


SHAPE = RESULTS / "2026-12-03-h200x1/gemm-shape"
# (run, step, model: a preset, a config under research/configs or a design config, micro-batch, sequence), ddp
TRACED_STEPS = (("run54", "cal-h2048-l8", "design:cal-h2048-l8", 1, 8192),
                ("run54", "cal-h1536-l12", "design:cal-h1536-l12", 2, 4096),
                ("run54", "cal-h1024-l16", "design:cal-h1024-l16", 8, 2048),
                ("run53", "smollm2-360m", "research/configs/smollm2-360m.json", 8, 4096),
                ("run53", "smollm2-135m", "research/configs/smollm2-135m.json", 16, 4096),
                ("run53", "llama3.2-1b", "llama3.2-1b", 2, 4096))


def traced_model(name: str):
    if name.startswith("design:"):
        return design_models()[name.split(":", 1)[1]]
    return load_model(str(ROOT / name) if name.endswith(".json") else name)


def traced_classes(run: str, step: str) -> dict[str, float]:
    return json.loads((SHAPE / run / f"kernels-{step}.json").read_text())["classes"]


def traced_best_rates(exponent: float) -> list[float]:
    """Per traced step, the best rate (of the datasheet peak) at which the modelled matmuls take what its GEMM kernels
    took: the block Linears by shape ^ exponent, the output layer and the rest at the best rate."""
    rates = []
    for run, step, model_name, micro_batch, seq_len in TRACED_STEPS:
        traced = traced_classes(run, step)["matmul"]
        model, tokens = traced_model(model_name), micro_batch * seq_len
        blocks = sum(sum(p) for p in gemm.block_matmul_seconds(model, tokens, 1.0, 132, exponent).values())
        block_flops = 6.0 * tokens * sum(o * i for o, i in gemm.block_linears(model).values())
        rest = 6.0 * flops_params(model) * tokens - model.num_layers * block_flops
        rates.append((model.num_layers * blocks + rest) / traced / 989e12)
    return rates


def traced_terms() -> None:
    """Each of the default profile's terms against its kernels in each traced step (the kernels' seconds summed by
    class, as trace_kernels.py sums them), and the modelled GPU time against the step."""
    topology = load_topology("h200-x2")
    profile = default_profile()
    print(f"  {'step':14s} {'step ms':>7s}   model / traced: {'matmul':>6s} "
          f"{'attention':>9s} {'memory-bound':>12s} {'optimizer':>9s}   model GPU / step")
    for run, step, model_name, micro_batch, seq_len in TRACED_STEPS:
        k, spec = traced_classes(run, step), traced_model(model_name)
        measured = next(r["step_time_s"] for r in read_records(SHAPE / run / "train-traced.jsonl", kind="train")
                        if r["model"].split("/")[-1] == spec.name.split("/")[-1])
        p = predict(Run(model=spec, gpus=(0,), strategy="ddp", micro_batch=micro_batch, seq_len=seq_len), topology,
                    profile)
        peak = topology.gpu_spec.bf16_dense_flops
        rate = profile.attention_rate(spec.head_dim, seq_len, peak, micro_batch, spec.num_heads)
        attention = ((FLASH_FORWARD_SHARE + FLASH_BACKWARD_SHARE) * attention_flops_per_token(spec, seq_len)
                     * micro_batch * seq_len / rate)
        memory_bound = k["elementwise/other"] + k["loss"] + k["copy/set"]
        gpu = p.time.compute_s + p.time.memory_bound_s + p.time.optimizer_s
        matmul = p.time.compute_s - attention
        print(f"  {step:14s} {1e3 * measured:7.1f}   {'':15s} {matmul / k['matmul']:6.3f} "
              f"{attention / k['attention']:9.3f} {p.time.memory_bound_s / memory_bound:12.3f} "
              f"{p.time.optimizer_s / k['optimizer']:9.3f}   {gpu / measured:.3f}")


def refit(base: Profile) -> tuple[Profile, float]:
    """`base` with compute_efficiency, activation_traffic and the compiled traffic fitted again from the designed
    runs and the compiled twins, as the defaults were; and the eager fit's rms error."""
    obs = observations_from(load(H200 / FITTED[0]))
    profile, bound = fit_host(base, [o for o in obs if not o.compile], PREDICT, None, "one H200")
    device = [o for o in obs if o not in bound and not o.compile
              and PREDICT(profile, o).time.host_s <= HOST_DOMINATED_FRACTION * o.step_time_s]
    profile, result = fit_step_time(profile, device, PREDICT, "one H200", ["compute_efficiency", "activation_traffic"])
    compiled, _ = fit_compiled(profile, observations_from(load(H200 / FITTED[1])), PREDICT, "one H200")
    return replace(base, compute_efficiency=profile.compute_efficiency, activation_traffic=profile.activation_traffic,
                   compiled_activation_traffic=compiled.compiled_activation_traffic), result.rms_error


def fitted(form: str) -> Profile:
    """The default profile's GPU rates fitted again in `form`, as the defaults were."""
    profile, rms = refit(replace(default_profile(), gemm_form=form))
    print(f"{form:9s} compute_efficiency {profile.compute_efficiency:.4f}  activation_traffic "
          f"{profile.activation_traffic:.4f}  compiled {profile.compiled_activation_traffic:.4f}  "
          f"(fit rms {100 * rms:.2f}%)")
    return profile


def line(name: str, errors: list[float]) -> str:
    if not errors:
        return f"{name} -"
    return (f"{name} n={len(errors):3d} mean {100 * statistics.mean(map(abs, errors)):.2f}% "
            f"signed {100 * statistics.mean(errors):+.2f}% worst {100 * max(map(abs, errors)):.1f}%")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clock-ref", type=float, default=1720.0,
                        help="MHz the fitted rate is taken to hold at, for the clock-scaled replay")
    args = parser.parse_args()
    print("the best rate each traced step's GEMM kernels ask for (gemm-shape/run54, run53: "
          + ", ".join(step for _, step, _, _, _ in TRACED_STEPS) + ")")
    for exponent in (1.0, gemm.POWER_LIMIT_EXPONENT, 0.0):
        print(f"  shares ^ {exponent:.2f}: " + "  ".join(f"{r:.3f}" for r in traced_best_rates(exponent)))
    print("the default profile's terms against their kernels in the traced steps")
    traced_terms()
    forms = {form: fitted(form) for form in ("one-rate", "tiles")}
    rows = []
    for path in sorted(RESULTS.glob("2026-12-0[23]-h200x1/**/*.jsonl")):
        for r in finished([path]):
            if r["micro_batch"] * r["seq_len"] <= 128 or r.get("engine", "pytorch") != "pytorch":
                continue
            o = observation_from(r)
            rows.append((str(path.relative_to(RESULTS)), r, {k: PREDICT(p, o) for k, p in forms.items()}))

    def err(r, p):
        return p.step_time_s / r["step_time_s"] - 1

    both = [(f, r, ps) for f, r, ps in rows if all(p.time.host_wait_s == 0 for p in ps.values())]
    groups = {"every record both forms price GPU-bound": both,
              "  less the records the rates were fitted from": [t for t in both if not any(s in t[0] for s in FITTED)],
              "  compiled": [t for t in both if t[1].get("compile")],
              "  eager": [t for t in both if not t[1].get("compile")]}
    for name, group in groups.items():
        print(name)
        for form in forms:
            print("    " + line(f"{form:9s}", [err(r, ps[form]) for _, r, ps in group]))
    print("by model, signed mean (range):")
    by = defaultdict(list)
    for _, r, ps in both:
        by[r["model"].split("/")[-1]].append({k: err(r, p) for k, p in ps.items()})
    for model, es in sorted(by.items()):
        print(f"  {model:24s} n={len(es):3d} " + "  ".join(
            f"{k} {100 * statistics.mean(e[k] for e in es):+5.1f}% ({100 * min(e[k] for e in es):+.1f}.."
            f"{100 * max(e[k] for e in es):+.1f})" for k in forms))
    print("gemm-shape/run52, predicted before they ran (research/2026-12-03-h200x1/gemm-shape/run52):")
    for f, r, ps in rows:
        if "run52" in f:
            clock = (r.get("gpu_clocks") or [{}])[0].get("sm_mhz_mean", 0)
            mode = "compiled" if r.get("compile") else "eager"
            print(f"  {r['model'].split('/')[-1]:18s} {r['strategy']:5s} {r['micro_batch']}x{r['seq_len']} "
                  f"{mode:8s} {1e3 * r['step_time_s']:6.1f} ms at {clock:4.0f} MHz"
                  + "".join(f"  {k} {100 * err(r, p):+5.1f}%" for k, p in ps.items()))
    print(f"records with a recorded SM clock, host wait under 2% of the step; '@clock': compute_efficiency x clock / "
          f"{args.clock_ref:.0f} MHz")
    clocked = defaultdict(list)
    for f, r, ps in rows:
        clock = (r.get("gpu_clocks") or [{}])[0].get("sm_mhz_mean")
        if not clock or "trace" in f:
            continue
        scaled = {f"{k}@clock": PREDICT(replace(p, compute_efficiency=p.compute_efficiency * clock / args.clock_ref),
                                        observation_from(r)) for k, p in forms.items()}
        every = dict(ps, **scaled)
        if any(p.time.host_wait_s > 0.02 * p.step_time_s for p in every.values()):
            continue
        for k, p in every.items():
            clocked[k].append((err(r, p), "run52" in f))
    for k, es in clocked.items():
        print("    " + line(f"{k:15s}", [e for e, _ in es]) + "   run52: "
              + line("", [e for e, new in es if new]).strip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
