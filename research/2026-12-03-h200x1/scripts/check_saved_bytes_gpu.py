"""What a block keeps for its backward, counted by autograd's saved-tensor hooks inside the model as bench train
builds it (saved_bytes.py --setting model, of 2026-12-02), against costmodel/memory.py, to the byte, two blocks. No
timing is asserted. On a CUDA machine, from the repository root:
`python -m pytest -q research/2026-12-03-h200x1/scripts/check_saved_bytes_gpu.py` (head-dim/run46 and
compiled-memory/run38 ran the same counts).

Blocks whose heads are not hidden_size / heads wide (research/configs/mistral-nemo-l8.json: 32 heads of 128 from
5120) and Qwen3's blocks (research/configs/qwen3-0.6b.json: head_dim 128 and an RMSNorm over each query and key
head) eager and under both precisions; compiled blocks under DDP in the pieces DDP's buckets cut."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from topowise.costmodel.memory import activation_bytes_per_token_per_layer  # noqa: E402
from topowise.models.spec import load_model  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
RESEARCH = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(RESEARCH / "2026-12-02-h200x1" / "scripts"))


@pytest.mark.parametrize("config", ["qwen3-0.6b", "mistral-nemo-l8"])
@pytest.mark.parametrize("autocast", [True, False], ids=["autocast", "bf16"])
def test_blocks_keep_what_the_memory_model_says(config, autocast):
    from saved_bytes import measure_in_model

    spec = dataclasses.replace(load_model(str(RESEARCH / "configs" / f"{config}.json")), num_layers=2)
    row = measure_in_model(spec, 4, 1024, autocast, "eager", ddp=False, device="cuda")
    assert row["measured_per_token"] == activation_bytes_per_token_per_layer(spec, autocast=autocast), row


@pytest.mark.parametrize("name", ["llama3.2-1b", "qwen2.5-0.5b", "gpt2"])
def test_compiled_blocks_under_ddp_keep_what_ddp_optimizers_pieces_say(name, tmp_path):
    """Under DDP (ddp, zero1: autocast, fp32 weights) Dynamo compiles a block in the pieces DDP's buckets cut
    (memory.ddp_compiled_pieces): llama3.2-1b's MLP in three, qwen2.5-0.5b's in one, GPT-2's GELU output
    kept. Each block's saved bytes per token, counted by autograd's hooks inside the model (two blocks)."""
    import torch.distributed as dist
    from saved_bytes import measure_in_model

    from topowise.costmodel.memory import activation_bytes_per_token_per_layer
    from topowise.models.spec import load_model

    spec = dataclasses.replace(load_model(name), num_layers=2)
    dist.init_process_group("nccl", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        for mode in ("eager", "compiled"):
            row = measure_in_model(spec, 4, 1024, True, mode, ddp=True, device="cuda")
            assert row["measured_per_token"] == activation_bytes_per_token_per_layer(
                spec, autocast=True, compiled=mode == "compiled"), row
    finally:
        dist.destroy_process_group()
