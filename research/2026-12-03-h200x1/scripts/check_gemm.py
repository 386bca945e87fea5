"""The GEMM constants of costmodel/gemm.py against this study's and 2026-12-02's kernels, read by gemm_tiles.py and
gemm_shape_check.py. A check of these studies, run from the repository root:
`python -m pytest -q research/2026-12-03-h200x1/scripts/check_gemm.py`."""

from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path

from topowise.costmodel import gemm

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1] / "2026-12-02-h200x1" / "scripts")]
RUN16 = HERE.parents[1] / "2026-12-02-h200x1/kernels/run16/kr/kernel_rates.jsonl"
E = gemm.BEST_ALONE


def kernel_rows() -> list[tuple[str, float, float]]:
    """(pass, the form's rate, the measured rate) of every block GEMM of run16, both as shares of the datasheet."""
    from gemm_tiles import observations

    rows = []
    for o in observations(str(RUN16)):
        if o["phase"] == "grad_weight":
            form = E * gemm.weight_grad_share(o["rows"], o["cols"])
        else:
            form = E * gemm.tile_share(o["rows"], o["cols"], o["k"], 132)
        rows.append((o["phase"], form, o["rate"]))
    return rows


def rms(rows) -> float:
    return math.sqrt(statistics.mean(math.log(f / m) ** 2 for _, f, m in rows))


def test_the_constants_reproduce_the_gemms_timed_alone():
    """docs/calibration.md, "The GEMM rate by shape": the forward and input-gradient GEMMs of six models at six
    shapes 2.7% rms (one rate for all 7.3%), the weight gradients 4.7% (6.9%)."""
    rows = kernel_rows()
    data = [r for r in rows if r[0] != "grad_weight"]
    weight = [r for r in rows if r[0] == "grad_weight"]
    assert len(data) == 360 and len(weight) == 180
    assert round(100 * rms(data), 1) == 2.7 and round(100 * rms(weight), 1) == 4.7
    one = math.exp(statistics.mean(math.log(m) for _, _, m in data))
    assert rms([(p, one, m) for p, _, m in data]) > 2.5 * rms(data)


def test_the_power_limit_exponent_holds_in_traced_steps():
    """In the six traced steps of run53 and run54 (576-2048 wide) the GEMM kernels ask for one best rate within 1%
    with the power-limit exponent, and for rates 8% apart or more with the shares whole or with one rate for all."""
    from gemm_shape_check import traced_best_rates

    def spread(rates):
        return max(rates) / min(rates) - 1

    assert len(traced_best_rates(1.0)) == 6
    assert spread(traced_best_rates(gemm.POWER_LIMIT_EXPONENT)) < 0.01
    assert spread(traced_best_rates(1.0)) > 0.08 and spread(traced_best_rates(0.0)) > 0.08
