"""Every one-H200 training record of the bench transformer as it is since 2026-12-02 (every strategy, both
engines, compiled, checkpointed, 128 tokens to 32k), replayed through the default profile: the README's
memory claim, and the side that matters most, a plan that says "fits" must fit."""

from __future__ import annotations

from pathlib import Path

from topowise.calibrate.fit import observation_from, predictor
from topowise.costmodel.profile import default_profile
from topowise.measure.records import read_records, steady_peak_bytes
from topowise.topology import load_topology

RESULTS = Path(__file__).parents[2] / "docs/results"


def test_allocated_memory_of_every_one_gpu_record_as_the_readme_says():
    # README: "all 300 one-H200 training records ... 0.53% mean, -1.5..+3.2%" (a new run adds to the count)
    predict_one = predictor(load_topology("h200-x2"))
    errors = []
    for path in sorted(RESULTS.glob("2026-12-0[23]-h200x1/**/*.jsonl")):
        for r in read_records(str(path), kind="train"):
            if r.get("status", "ok") == "ok" and steady_peak_bytes(r):
                p = predict_one(default_profile(), observation_from(r))
                errors.append(p.memory.allocated_bytes / steady_peak_bytes(r) - 1)
    assert len(errors) == 300
    assert round(100 * sum(map(abs, errors)) / len(errors), 2) <= 0.53
    assert round(100 * min(errors), 1) >= -1.5 and round(100 * max(errors), 1) <= 3.2
