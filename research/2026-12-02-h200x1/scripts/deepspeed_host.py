"""DeepSpeed's host time per phase, from `bench train --engine deepspeed` records; and the cost model's
DeepSpeed steps against measured ones.

    python research/2026-12-02-h200x1/scripts/deepspeed_host.py --fit FILE.jsonl --models llama3.2-1b,qwen2.5-0.5b
    python research/2026-12-02-h200x1/scripts/deepspeed_host.py --check FILE.jsonl [FILE.jsonl ...]

--fit: of the records' runs at --max-tokens tokens per GPU or fewer (where the GPU is idle most of the
step, so the host's phase times are what the host needs, not time blocked on the GPU), per strategy
the median over the runs of the forward's and the backward's host seconds per block, and of the
optimizer step's host seconds per step. The optimizer is per step because DeepSpeed's step works on
flat partitions (one fused AdamW over the flat fp32 partition for ZeRO-1/2), whatever the blocks.
These are topowise.costmodel.profile's DEEPSPEED_HOST_S_PER_LAYER and DEEPSPEED_HOST_S_PER_STEP.

--check: every DeepSpeed record predicted with the default profile (on the records' GPU, one node),
beside the measured step, with the error (topology h200-x2: the records' GPUs of it). Exit status 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from topowise.calibrate.validate import compare  # noqa: E402
from topowise.costmodel.profile import default_profile  # noqa: E402
from topowise.errors import UsageError  # noqa: E402
from topowise.models.spec import ModelSpec  # noqa: E402
from topowise.topology import load_topology  # noqa: E402

PHASES = ("forward", "backward", "optimizer")


def read(paths: list[str]) -> list[dict]:
    rows = []
    for path in paths:
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise UsageError(f"{path}: {exc.strerror}") from None
        rows += [json.loads(line) for line in text.splitlines() if line.strip()]
    return [r for r in rows if r.get("kind") == "train" and r.get("engine") == "deepspeed" and r.get("status") == "ok"]


def fit(records: list[dict], models: set[str] | None, max_tokens: int) -> dict[str, dict[str, float]]:
    """{strategy: {phase: seconds}}: forward and backward per block, the optimizer per step."""
    out: dict[str, dict[str, list[float]]] = {}
    for r in records:
        if r["tokens_per_step_per_gpu"] > max_tokens or (models and r["model"] not in models):
            continue
        blocks = ModelSpec.from_dict(r["model_spec"]).num_layers
        host = r.get("host_phase_s") or {}
        for phase in PHASES:
            if phase in host:
                per = host[phase] if phase == "optimizer" else host[phase] / blocks
                out.setdefault(r["strategy"], {}).setdefault(phase, []).append(per)
    return {s: {p: statistics.median(v) for p, v in phases.items()} for s, phases in out.items()}


def check(records: list[dict]) -> list[tuple]:
    rows = compare(records, default_profile(), load_topology("h200-x2"))  # one GPU of it where the records ran
    return [(r.case.model, r.case.strategy, f"{r.case.micro_batch}x{r.case.seq_len}", r.measured_step_s,
             r.predicted_step_s, r.step_error, r.breakdown["host_wait_s"]) for r in rows]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fit", nargs="+", metavar="FILE")
    parser.add_argument("--check", nargs="+", metavar="FILE")
    parser.add_argument("--models", default="", help="comma-separated record model names to fit from (default: all)")
    parser.add_argument("--max-tokens", type=int, default=128)
    args = parser.parse_args()
    try:
        if not args.fit and not args.check:
            raise UsageError("give --fit FILE... or --check FILE...")
        if args.fit:
            got = fit(read(args.fit), {m for m in args.models.split(",") if m}, args.max_tokens)
            if not got:
                raise UsageError(f"no DeepSpeed run at {args.max_tokens} tokens or fewer with host_phase_s "
                                 "in the files")
            print("strategy   forward ms/block  backward ms/block  optimizer ms/step")
            for strategy, phases in sorted(got.items()):
                print(f"{strategy:<10}" + "".join(f"{1e3 * phases.get(p, 0):>18.3f}" for p in PHASES))
        if args.check:
            rows = check(read(args.check))
            print(f"{'model':<24}{'strategy':<9}{'shape':>8}{'measured':>10}{'predicted':>11}{'error':>8}"
                  f"{'host wait':>11}")
            for model, strategy, shape, measured, predicted, err, wait in rows:
                print(f"{model:<24}{strategy:<9}{shape:>8}{1e3 * measured:>9.1f} {1e3 * predicted:>10.1f}"
                      f"{100 * err:>+7.1f}%{1e3 * wait:>10.1f}")
    except (UsageError, KeyError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
