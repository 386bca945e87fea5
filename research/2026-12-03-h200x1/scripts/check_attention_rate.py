"""The attention constants of the default profile are the fits of the records they cite: kernel_rates.py's fit of
kernels/run16 (2026-12-02) and attention_shape.py's of attention/run56. A check of this study, run from the
repository root: `python -m pytest -q research/2026-12-03-h200x1/scripts/check_attention_rate.py`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from topowise.costmodel.profile import (
    ATTENTION_BLOCK_OFFSET,
    ATTENTION_EFFICIENCY,
    ATTENTION_SEQ_OFFSET,
    SEQUENCE_FORM_EFFICIENCY,
    SEQUENCE_FORM_OFFSET,
)

HERE = Path(__file__).resolve().parent
RESEARCH = HERE.parents[1]
sys.path[:0] = [str(HERE), str(RESEARCH / "2026-12-02-h200x1" / "scripts")]
KERNELS = RESEARCH / "2026-12-02-h200x1" / "kernels" / "run16"
PROBE = RESEARCH / "2026-12-03-h200x1" / "attention" / "run56"


def test_the_sequence_form_is_the_fit_of_run16s_kernels():
    kernel_rates = pytest.importorskip("kernel_rates")
    rows = [json.loads(line) for line in (KERNELS / "kr" / "kernel_rates.jsonl").read_text().splitlines() if line]
    offset, effs, rms = kernel_rates.fit_attention(rows)
    assert offset == SEQUENCE_FORM_OFFSET
    assert {str(d): round(e, 3) for d, e in effs.items()} == SEQUENCE_FORM_EFFICIENCY
    assert rms < 0.05


def test_defaults_are_the_fit_of_the_probed_kernels():
    """attention/run56's 176 shapes fitted as attention_shape.py fits them give the defaults; the form holds on the
    six traced steps' shapes (1.3% rms) and on run16's 36 rows of another day (4.4%), where the form without the
    thread blocks, fitted the same way, misses by 7.1% and 6.8%."""
    import attention_shape as a

    rows = a.rows_of(PROBE / "attn.json")
    grid, six = [r for r in rows if r["shape"] == "grid"], [r for r in rows if r["shape"] != "grid"]
    t0, w0, effs, rms = a.fit_form(grid, range(0, 3001, 50))
    assert (t0, w0) == (ATTENTION_SEQ_OFFSET, ATTENTION_BLOCK_OFFSET)
    assert {str(d): round(e, 3) for d, e in effs.items()} == ATTENTION_EFFICIENCY
    assert rms < 0.045
    assert a.rms(a.errors(six, t0, w0, effs)) < 0.015 and a.rms(a.errors(a.run16_rows(), t0, w0, effs)) < 0.045
    s0, _, s_effs, _ = a.fit_form(grid)
    assert a.rms(a.errors(six, s0, 0, s_effs)) > 0.06 and a.rms(a.errors(a.run16_rows(), s0, 0, s_effs)) > 0.06
