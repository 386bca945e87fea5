"""The frozen bench train records of tests/data/records replayed through today's cost model (the default profile),
for the tests that guard the README's accuracy sentences."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from topowise.calibrate.fit import observation_from, predictor
from topowise.costmodel.profile import default_profile
from topowise.measure.records import read_records, steady_peak_bytes
from topowise.topology import load_topology

RESULTS = Path(__file__).parents[2] / "tests" / "data" / "records"


def memory_errors(pattern: str, keep: Callable[[dict], bool] = lambda r: True) -> list[float]:
    """Predicted allocated memory / the steady step's measured - 1, for every finished record under
    tests/data/records matching `pattern` (a glob) that `keep` keeps."""
    predict_one = predictor(load_topology("h200-x2"))
    return [predict_one(default_profile(), observation_from(r)).memory.allocated_bytes / steady_peak_bytes(r) - 1
            for r in finished(sorted(RESULTS.glob(pattern))) if keep(r)]


def finished(paths: Iterable[Path]) -> list[dict]:
    return [r for path in paths for r in read_records(str(path), kind="train")
            if r.get("status", "ok") == "ok" and steady_peak_bytes(r)]
