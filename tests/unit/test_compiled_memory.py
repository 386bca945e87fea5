"""What a compiled block keeps for backward: under DDP, Dynamo's DDPOptimizer compiles the block in pieces cut
where DDP's gradient buckets end, and Inductor recomputes an output in the backward only inside one piece
(memory.compiled_saved_less). The pieces are checked against torch's own splitting; the bytes against the
per-block and whole-step measurements of one H200 (tests/data/records/2026-12-03-h200x1/compiled-memory)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from replay import memory_errors

from topowise.calibrate.fit import observation_from, predictor
from topowise.costmodel import memory
from topowise.costmodel.profile import default_profile
from topowise.measure.records import read_records, steady_peak_bytes
from topowise.models.spec import load_model
from topowise.topology import load_topology

RUN38 = Path(__file__).parents[2] / "tests/data/records/2026-12-03-h200x1/compiled-memory/run38"
CONFIGS = Path(__file__).parents[2] / "tests/data/configs"
MODELS = ["llama3.2-1b", "qwen2.5-0.5b", "gpt2", str(CONFIGS / "llama-0.37b.json"),
          str(CONFIGS / "llama-deep-narrow.json"), str(CONFIGS / "llama-2.46b-gqa.json")]


def dynamo_pieces(spec, tmp_path) -> list[list[str]]:
    """The parameterised operations of each piece DDPOptimizer hands the backend, one Block inside a
    one-process gloo DDP, compiled with a backend that records its graphs and runs them as they are."""
    import torch
    import torch.distributed as dist

    from topowise.models.transformer import Block, rotary_tables

    pieces: list[list[str]] = []

    def recording_backend(gm, example_inputs):
        names = [n.target for n in gm.graph.nodes if n.op == "placeholder"]
        ops = []
        for name in names:  # e.g. l_self_modules_mlp_modules_gate_parameters_weight_: Block's mlp.gate
            found = re.search(r"_modules_(\w+?)_parameters_(?:weight|bias)", name)
            op = found and found.group(1).split("_modules_")[-1]
            if op and op not in ops:
                ops.append(op)
        pieces.append(ops)
        return gm.forward

    holder = torch.nn.Module()
    holder.block = Block(spec)
    holder.forward = lambda x, cos, sin: holder.block(x, cos, sin)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        ddp = torch.nn.parallel.DistributedDataParallel(holder)
        holder.block = torch.compile(holder.block, backend=recording_backend, fullgraph=True)
        torch._dynamo.reset()
        cos, sin = rotary_tables(8, spec.head_dim)
        ddp(torch.randn(1, 8, spec.hidden_size), cos, sin)
    finally:
        dist.destroy_process_group()
    return pieces


def modelled_param_pieces(spec) -> list[list[str]]:
    weighted = {name for name, nbytes in memory.block_ops(spec) if nbytes}
    return [[op for op in piece if op in weighted] for piece in memory.ddp_compiled_pieces(spec)]


@pytest.mark.parametrize("model", MODELS)
def test_the_pieces_are_those_dynamos_ddp_optimizer_compiles(model, tmp_path):
    pytest.importorskip("torch")
    spec = load_model(model)
    assert dynamo_pieces(spec, tmp_path) == modelled_param_pieces(spec)


def test_silu_and_the_shared_cast_are_saved_only_inside_one_piece():
    one_b, narrow = load_model("llama3.2-1b"), load_model(str(CONFIGS / "llama-0.37b.json"))
    h, i = narrow.hidden_size, narrow.intermediate_size
    # 0.37B: gate, SiLU, up and the product in one piece (the block's three pieces cut before out and down)
    assert memory.compiled_saved_less(narrow, under_ddp=True) == 2 * i + 2 * h
    # llama3.2-1b: gate | up | down each fill a 25 MiB bucket alone, so SiLU's output crosses to the product
    assert memory.compiled_saved_less(one_b, under_ddp=True) == 0
    # FSDP2 (bf16, no DDP): one graph, no autocast casts
    assert memory.compiled_saved_less(one_b, under_ddp=False) == 2 * one_b.intermediate_size
    assert memory.compiled_saved_less(load_model("gpt2"), under_ddp=False) == 0  # GELU's output is kept


def test_each_blocks_bytes_as_measured_in_the_steps_setting():
    rows = [json.loads(line) for line in (RUN38 / "saved_bytes.jsonl").read_text().splitlines()]
    assert len(rows) == 8 and all("error" not in r for r in rows)
    for r in rows:
        spec = load_model({"configs/llama-deep-narrow": str(CONFIGS / "llama-deep-narrow.json")}.get(r["model"],
                                                                                                    r["model"]))
        modelled = memory.activation_bytes_per_token_per_layer(spec, r["precision"] == "autocast",
                                                               compiled=r["mode"] == "compiled")
        assert r["measured_per_token"] == modelled, r


def test_compiled_steps_memory_within_one_percent():
    predict_one = predictor(load_topology("h200-x2"))
    records = read_records(str(RUN38 / "train.jsonl"), kind="train")
    assert len(records) == 4
    for r in records:
        p = predict_one(default_profile(), observation_from(r))
        error = p.memory.allocated_bytes / steady_peak_bytes(r) - 1
        assert -0.01 < error < 0.01, (r["model"], r["strategy"], error)


def test_every_compiled_record_of_todays_block_as_the_readme_says():
    # README: "the 33 compiled records of 2026-12-02/03 above 128 tokens lie within -0.8..-0.0%" (the bench
    # block changed on 2026-12-02; the compiled records of 2026-12-01 are of the block before). At 1 x 128
    # (run41) the compiled runs are over by what their eager twins are over (+0.1..+2.5%).
    errors = memory_errors("2026-12-0[23]-h200x1/**/train*.jsonl",
                           lambda r: r.get("compile") and r["micro_batch"] * r["seq_len"] > 128)
    assert len(errors) == 33
    assert round(100 * min(errors), 1) >= -0.8 and round(100 * max(errors), 1) <= -0.0, errors
