"""One H200's runs predicted by the cost model now and as it was before the kernel-level terms.

    python research/2026-12-02-h200x1/scripts/attention_accuracy.py [--out research/2026-12-02-h200x1/design/accuracy]

The records: the classic step-time fit's runs (research/2026-12-02-h200x1/model-change/fit:
llama3.2-1b and qwen2.5-0.5b at 1 x 8192, and their 128-token floors) with the compiled twins the
compiled traffic is fitted from (timelines/run8/compiled); runs no fit saw: model-change/heldout (the
0.95B, 2.46B GQA and llama3.2-3b shapes), timelines/run9/heldout (eager and compiled twins of the 0.95B
and 2.46B configs) and kernels/run16/long.jsonl (16k and 32k tokens); and four of those shapes measured
again (design/run22/heldout). The default profile's eager rates are the designed fit's
(design/run22/fit: four config shapes none of these share), so for it the classic fit's runs
are unseen too. Two models: now (the default profile: matmuls at compute_efficiency, the causal
attention at Profile.attention_rate, the per-parameter copies at their measured rates) and before (one
rate for all FLOPs, 0.6612, traffic 10.03, compiled 8.0433, each fitted from the classic fit's records in
that form, FSDP2 costing 4 bytes per parameter per gather alone: step.py's other FSDP2 constants set to
0, and every copy at the memory-bound rate). Runs predicted host-bound, and runs whose timed steps
spread over 5% (as calibrate leaves them out), are not in the tables. Writes OUT/accuracy.md (every run,
both predictions) and prints the summary last.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from _pytest.monkeypatch import MonkeyPatch  # noqa: E402

from topowise.calibrate.fit import UNSTEADY_SPREAD, observations_from, predictor  # noqa: E402
from topowise.costmodel import step as step_mod  # noqa: E402
from topowise.costmodel.profile import default_profile  # noqa: E402
from topowise.measure.records import read_records  # noqa: E402
from topowise.topology import load_topology  # noqa: E402

H200 = ROOT / "research" / "2026-12-02-h200x1"
SETS = {"classic fit": [H200 / "model-change/fit/train.jsonl", H200 / "model-change/fit/train-1b.jsonl",
                H200 / "model-change/fit/train-compiled.jsonl", H200 / "timelines/run8/compiled/train.jsonl"],
        "held out": [H200 / "model-change/heldout/train.jsonl", H200 / "model-change/heldout/train-0.95b.jsonl",
                     H200 / "model-change/heldout/train-compiled.jsonl", H200 / "timelines/run9/heldout/train.jsonl",
                     H200 / "kernels/run16/long.jsonl"],
        "held out, again": [H200 / "design/run22/heldout/train.jsonl"]}
# the default profile's GPU terms before the attention term, fitted in that form from the same records
BEFORE_FSDP = ("FSDP_CAST_BYTES_PER_SHARD_PARAM", "FSDP_REDUCE_COPY_IN_BYTES_PER_PARAM",
               "ONE_RANK_REDUCE_SCATTER_BYTES_PER_PARAM")
# and every copy at the memory-bound rate (before research/2026-12-02-h200x1/scripts/copy_rates.py timed each one)
LOGICAL_BYTES = {"AUTOCAST_BYTES_PER_PARAM": 20, "AUTOCAST_FORWARD_BYTES_PER_PARAM": 6,
                 "FSDP_COPY_OUT_BYTES_PER_PARAM": 4}
ONE_RATE = {"compute_efficiency": 0.6612, "activation_traffic": 10.03, "compiled_activation_traffic": 8.0433,
            "elementwise_form": "saved-bytes", "gemm_form": "one-rate",
            "attention_efficiency": {}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(H200 / "design" / "accuracy"))
    out = Path(parser.parse_args().out)
    out.mkdir(parents=True, exist_ok=True)
    predict_one = predictor(load_topology("h200-x2"))  # one GPU of it: the records ran on one H200
    profiles = {"now": default_profile(), "before": replace(default_profile(), **ONE_RATE)}

    def predict_as(name, o):
        if name == "now":
            return predict_one(profiles[name], o)
        patch = MonkeyPatch()
        for constant in BEFORE_FSDP:
            patch.setattr(step_mod, constant, 0)
        for constant, nbytes in LOGICAL_BYTES.items():
            patch.setattr(step_mod, constant, nbytes)
        try:
            return predict_one(profiles[name], o)
        finally:
            patch.undo()

    rows = ["| set | model | mb x seq | strategy | mode | measured ms | now: predicted, error | "
            "before: predicted, error |", "|---|---|---|---|---|---|---|---|"]
    errors: dict = {}
    unsteady: list[str] = []
    for part, files in SETS.items():
        records = [r for f in files for r in read_records(f, kind="train")]
        for o in observations_from(records):
            preds = {name: predict_as(name, o) for name in profiles}
            if any(p.host_bound for p in preds.values()):
                continue  # the host sets these steps: not what the attention term is about
            if (o.step_spread or 0.0) > UNSTEADY_SPREAD:
                unsteady.append(f"{o.case.label} (spread {100 * o.step_spread:.0f}%)")
                continue  # drifted inside its launch, as calibrate leaves such runs out
            cells = []
            for name, p in preds.items():
                e = p.step_time_s / o.step_time_s - 1
                errors.setdefault((part, o.compile, name), []).append(e)
                cells.append(f"{1e3 * p.step_time_s:.1f}, {100 * e:+.1f}%")
            mode = ("compiled" if o.compile else "eager") + (" full" if o.activation_checkpointing else "")
            rows.append(f"| {part} | {o.model.split('/')[-1]} | {o.micro_batch}x{o.seq_len} | {o.strategy} | {mode} | "
                        f"{1e3 * o.step_time_s:.1f} | {cells[0]} | {cells[1]} |")
    summary = ["| set | mode | GPU-bound runs | now: mean / worst | before: mean / worst |",
               "|---|---|---|---|---|"]
    for part in SETS:
        for compiled in (False, True):
            a, b = errors.get((part, compiled, "now")), errors.get((part, compiled, "before"))
            if not a:
                continue
            fmt = lambda e: f"{100 * statistics.mean(map(abs, e)):.1f}% / {100 * max(map(abs, e)):.1f}%"
            summary.append(f"| {part} | {'compiled' if compiled else 'eager'} | {len(a)} | {fmt(a)} | {fmt(b)} |")
    summary.append(f"\nLeft out, timed steps spread over {100 * UNSTEADY_SPREAD:.0f}%: {', '.join(unsteady) or 'none'}")
    text = "\n".join(rows + [""] + summary) + "\n"
    (out / "accuracy.md").write_text(text)
    print("\n".join(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
