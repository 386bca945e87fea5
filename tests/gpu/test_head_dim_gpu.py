"""Blocks whose heads are not hidden_size / heads wide (benchmarks/configs/mistral-nemo-l8.json: 32 heads of
128 from 5120) and Qwen3's blocks (benchmarks/configs/qwen3-0.6b.json: head_dim 128 and an RMSNorm over each
query and key head) keep for their backward what costmodel/memory.py says, to the byte, eager and under both
precisions (pytest -m gpu on a CUDA machine). Counted by autograd's saved-tensor hooks inside the model as
bench train builds it (benchmarks/saved_bytes.py --setting model), two blocks. No timing is asserted."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from topowise.costmodel.memory import activation_bytes_per_token_per_layer  # noqa: E402
from topowise.models.spec import load_model  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("config", ["qwen3-0.6b", "mistral-nemo-l8"])
@pytest.mark.parametrize("autocast", [True, False], ids=["autocast", "bf16"])
def test_blocks_keep_what_the_memory_model_says(config, autocast):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from saved_bytes import measure_in_model

    spec = dataclasses.replace(load_model(str(ROOT / "benchmarks" / "configs" / f"{config}.json")), num_layers=2)
    row = measure_in_model(spec, 4, 1024, autocast, "eager", ddp=False, device="cuda")
    assert row["measured_per_token"] == activation_bytes_per_token_per_layer(spec, autocast=autocast), row
