"""DeepSpeed's host constants in costmodel/profile.py are deepspeed_host.py's fit of deepspeed/run26 (llama3.2-1b
and qwen2.5-0.5b at 128 tokens). A check of this study, run from the repository root:
`python -m pytest -q research/2026-12-02-h200x1/scripts/check_deepspeed_host.py`."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from topowise.costmodel.profile import DEEPSPEED_HOST_S_PER_LAYER, DEEPSPEED_HOST_S_PER_STEP
from topowise.measure.records import read_records

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from deepspeed_host import fit  # noqa: E402

RUN26 = HERE.parent / "deepspeed/run26/deepspeed.jsonl"


def records(path: Path) -> list[dict]:
    return [r for r in read_records(path, kind="train") if r["status"] == "ok"]


def test_the_defaults_are_the_fit_of_llama_and_qwen_at_128_tokens():
    got = fit(records(RUN26), {"llama3.2-1b", "qwen2.5-0.5b"}, 128)
    for strategy, phases in got.items():
        for phase, seconds in phases.items():
            key = f"deepspeed/{strategy}/{phase}"
            table = DEEPSPEED_HOST_S_PER_STEP if phase == "optimizer" else DEEPSPEED_HOST_S_PER_LAYER
            assert table[key] == pytest.approx(seconds, abs=1e-6), key
