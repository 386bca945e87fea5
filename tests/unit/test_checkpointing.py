"""Activation checkpointing modes: none | selective (per op, or every k-th block) | full, as torchtitan
names them, in Run, bench train's flags, the model's wrap, the cost model, the planner and the exports."""

from __future__ import annotations

import argparse
from types import SimpleNamespace

import pytest

from topowise import hardware
from topowise.cli.flags import add_checkpointing_arguments, checkpointing_from_args
from topowise.costmodel.memory import (
    CUBLAS_WORKSPACE_BYTES,
    activation_bytes_per_token_per_layer,
    autocast_block_cast_params,
    autocast_cast_params,
    block_input_bytes_per_token,
    estimate_memory,
    recast_blocks,
    saved_activation_bytes_per_token,
    selective_kept_bytes_per_token_per_layer,
)
from topowise.costmodel.predict import predict
from topowise.costmodel.profile import default_profile
from topowise.costmodel.step import AUTOCAST_FORWARD_BYTES_PER_PARAM, recompute_flops_per_token, rerun_share
from topowise.errors import UsageError
from topowise.models.spec import ModelSpec, load_model
from topowise.run import Run
from topowise.topology.presets import load_preset

H200X2 = load_preset("h200-x2")
LLAMA_1B = load_model("llama3.2-1b")


def run(mode="none", option="op", strategy="ddp", gpus=(0,)) -> Run:
    return Run(LLAMA_1B, gpus, strategy, seq_len=8192, checkpointing=mode, selective_ac_option=option)


# --- Run ------------------------------------------------------------------------------------------
def test_modes_and_the_legacy_flag_agree_and_round_trip():
    assert (run().checkpointing, run().activation_checkpointing) == ("none", False)
    full = run("full")
    assert (full.checkpointing, full.activation_checkpointing) == ("full", True)
    sel = run("selective")
    assert sel.activation_checkpointing is True and sel.checkpoint_words == "selective (per op)"
    assert Run.from_dict(dict(run().to_dict(), activation_checkpointing="selective")) == sel  # a mode's name
    assert run("selective", "2").checkpoint_words == "selective (every 2nd block)"
    assert run("selective", 1).checkpointing == "full"  # every block
    for r in (run(), full, sel, run("selective", "3")):
        assert Run.from_dict(r.to_dict()) == r
    legacy = full.to_dict()
    del legacy["checkpointing"], legacy["selective_ac_option"]  # a JSON written before the modes
    assert Run.from_dict(legacy).checkpointing == "full"


@pytest.mark.parametrize("kw,match", [
    ({"checkpointing": "some"}, "valid: none, selective, full"),
    ({"checkpointing": "selective", "selective_ac_option": "0"}, "positive integer"),
    ({"checkpointing": "selective", "selective_ac_option": "every"}, "positive integer"),
])
def test_bad_modes_are_refused_with_the_valid_ones(kw, match):
    with pytest.raises(UsageError, match=match):
        Run(LLAMA_1B, (0,), "ddp", **kw)


def parse(*argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("--activation-checkpointing", action="store_true")
    add_checkpointing_arguments(parser)
    return checkpointing_from_args(parser.parse_args(list(argv)))


def test_flags():
    assert parse() == ("none", "op")
    assert parse("--activation-checkpointing") == ("full", "op")
    assert parse("--checkpointing", "selective") == ("selective", "op")
    assert parse("--checkpointing", "selective", "--selective-ac-option", "2") == ("selective", "2")
    with pytest.raises(UsageError, match="means --checkpointing full"):
        parse("--activation-checkpointing", "--checkpointing", "selective")
    with pytest.raises(UsageError, match="applies to --checkpointing selective"):
        parse("--selective-ac-option", "2")


# --- the wrap: what selective keeps is what the memory model counts ------------------------------
def test_selective_policy_keeps_the_odd_matmuls_and_attention():
    """Run one block under a dispatch log, ask the policy about every operator it ran, and add up the
    outputs it keeps: they are the qkv, gate and down products and SDPA's outputs, the bytes that
    selective_kept_bytes_per_token_per_layer counts (less the block's input, which checkpoint keeps)."""
    torch = pytest.importorskip("torch")
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves
    from torch.utils.checkpoint import CheckpointPolicy

    from topowise.measure.strategies import selective_checkpoint_policy
    from topowise.models.transformer import build_model

    class Log(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            nbytes = sum(t.untyped_storage().nbytes() for t in tree_leaves(out) if isinstance(t, torch.Tensor))
            self.ops.append((func, nbytes, args))
            return out

    spec = ModelSpec("t", "llama", 100, 128, 1, 8, 2, 256, True)
    model = build_model(spec, 64, "cpu", 0).to(torch.bfloat16)
    x = torch.randn(2, 64, 128, dtype=torch.bfloat16, requires_grad=True)
    cos, sin = model.rope_cos, model.rope_sin
    with Log() as log:
        model.layers[0](x, cos, sin)
    policy = selective_checkpoint_policy()
    kept = [(f, n, a) for f, n, a in log.ops if policy(SimpleNamespace(is_recompute=False), f, *a)
            == CheckpointPolicy.MUST_SAVE]
    block = model.layers[0]
    weights = block.attn.qkv.weight, block.mlp.gate.weight, block.mlp.down.weight
    mm = [a[1].shape for f, _, a in kept if f == torch.ops.aten.mm.default]
    assert mm == [w.t().shape for w in weights]  # the 1st (qkv), 3rd (gate) and 5th (down) of the five
    assert sum(n for _, n, _ in kept) / (2 * 64) == (selective_kept_bytes_per_token_per_layer(spec)
                                                    - block_input_bytes_per_token(spec))


def test_every_mode_gives_the_gradients_of_none():
    torch = pytest.importorskip("torch")
    from topowise.measure.strategies import apply_checkpointing
    from topowise.models.transformer import build_model

    spec = ModelSpec("t", "llama", 300, 32, 3, 4, 2, 64, False)
    tokens = torch.randint(0, 300, (2, 17), generator=torch.Generator().manual_seed(0))
    grads = {}
    for mode, option in (("none", "op"), ("selective", "op"), ("selective", "2"), ("full", "op")):
        model = build_model(spec, 16, "cpu", seed=0)
        apply_checkpointing(model, mode, option)
        wrapped = [i for i, b in enumerate(model.layers) if hasattr(b, "_checkpoint_wrapped_module")]
        assert wrapped == {"none": [], "full": [0, 1, 2]}.get(mode, [0, 2] if option == "2" else [0, 1, 2])
        loss = torch.nn.functional.cross_entropy(model(tokens[:, :-1]).flatten(0, 1), tokens[:, 1:].flatten())
        loss.backward()
        grads[(mode, option)] = {n.replace("._checkpoint_wrapped_module", ""): p.grad
                                 for n, p in model.named_parameters()}
    reference = grads[("none", "op")]
    for key, got in grads.items():
        assert all(torch.allclose(got[n], reference[n], atol=1e-6) for n in reference), key


# --- the cost model ------------------------------------------------------------------------------
def test_memory_and_recompute_sit_between_none_and_full():
    kept = {m: saved_activation_bytes_per_token(run(*m), autocast=False)[0]
            for m in (("none", "op"), ("selective", "2"), ("selective", "op"), ("full", "op"))}
    layers, per_layer = LLAMA_1B.num_layers, activation_bytes_per_token_per_layer(LLAMA_1B)
    assert kept[("none", "op")] == layers * per_layer
    assert kept[("full", "op")] == layers * block_input_bytes_per_token(LLAMA_1B)
    assert kept[("selective", "2")] == 8 * block_input_bytes_per_token(LLAMA_1B) + 8 * per_layer
    assert kept[("none", "op")] > kept[("selective", "2")] > kept[("selective", "op")] > kept[("full", "op")]
    # recompute: a forward of every block (full), of every 2nd (k=2), the output projections (per op)
    full = recompute_flops_per_token(run("full"))
    assert recompute_flops_per_token(run("selective", "2")) == pytest.approx(full / 2)
    assert recompute_flops_per_token(run("selective")) == 2 * layers * (2048 * 2048 + 2048 * 8192)  # out, up
    assert recompute_flops_per_token(run()) == 0
    preds = {m: predict(run(m, strategy="zero3", gpus=(0, 1)), H200X2) for m in ("none", "selective", "full")}
    assert (preds["none"].memory.peak_bytes > preds["selective"].memory.peak_bytes
            > preds["full"].memory.peak_bytes)
    assert preds["none"].step_time_s < preds["selective"].step_time_s < preds["full"].step_time_s


def test_recomputed_blocks_rerun_their_elementwise_work():
    """Every mode that recomputes charges the forward's share of the blocks' elementwise traffic again in
    proportion to what it reruns: per op all blocks' cheap ops, full all blocks, every 2nd block half."""
    assert [rerun_share(run(*m)) for m in (("none", "op"), ("selective", "op"), ("full", "op"), ("selective", "2"),
                                           ("selective", "3"))] == [0.0, 1.0, 1.0, 0.5, 6 / 16]
    bound = {m: predict(run(*m), H200X2).time.memory_bound_s for m in (("none", "op"), ("full", "op"),
                                                                        ("selective", "2"))}
    assert bound[("full", "op")] > bound[("none", "op")]
    assert bound[("selective", "2")] - bound[("none", "op")] == pytest.approx(
        (bound[("full", "op")] - bound[("none", "op")]) / 2)


def test_recomputed_blocks_weight_copies_live_in_autocasts_cache_only():
    """Under autocast the bf16 weight copies of blocks that checkpointing reruns are not saved for backward:
    alive to the forward's end (autocast's cache), gone at the loss, cast again by the rerun."""
    assert [recast_blocks(run(*m)) for m in (("none", "op"), ("selective", "op"), ("full", "op"),
                                             ("selective", "2"))] == [0, 16, 16, 8]
    block = autocast_block_cast_params(LLAMA_1B)
    assert 16 * block + LLAMA_1B.vocab_size * LLAMA_1B.hidden_size == autocast_cast_params(LLAMA_1B)

    def phases(mode, option="op", strategy="ddp", tokens=8192):
        r = Run(LLAMA_1B, (0,), strategy, seq_len=tokens, checkpointing=mode, selective_ac_option=option)
        return estimate_memory(r, gpu_memory_bytes=141e9, profile=default_profile())

    at_loss = phases("full")  # the 12 V bytes of fp32 loss buffers per token outweigh the cache
    assert at_loss.peak_phase == "loss backward"
    workspace = {"cuBLAS workspace": CUBLAS_WORKSPACE_BYTES}  # alive in every phase
    assert at_loss.buffers == {"autocast bf16 weight copies": 2 * LLAMA_1B.vocab_size * LLAMA_1B.hidden_size,
                               **workspace}
    assert phases("none").buffers == {"autocast bf16 weight copies": 2 * autocast_cast_params(LLAMA_1B), **workspace}
    assert phases("full").allocated_bytes == pytest.approx(phases("none").allocated_bytes
                                                           - 16 * 8192 * (activation_bytes_per_token_per_layer(
                                                               LLAMA_1B, autocast=True)
                                                               - block_input_bytes_per_token(LLAMA_1B, True))
                                                           - 2 * 16 * block, abs=16)
    assert phases("full", strategy="zero3").buffers.keys() <= {"root unsharded bf16 gradient",
                                                                  "root fp32 reduce-scatter input", *workspace}


def test_the_rerun_casts_its_blocks_weights_again(monkeypatch):
    import topowise.costmodel.step as step

    with_casts = predict(run("full"), H200X2).time.memory_bound_s
    monkeypatch.setattr(step, "recast_blocks", lambda r: 0)
    without = predict(run("full"), H200X2).time.memory_bound_s
    hbm = hardware.hbm_bytes_per_s(H200X2.gpu_spec.name) * default_profile().hbm_efficiency
    assert (with_casts - without) * hbm == pytest.approx(
        AUTOCAST_FORWARD_BYTES_PER_PARAM * 16 * autocast_block_cast_params(LLAMA_1B))


# --- plan and exports ----------------------------------------------------------------------------
def test_plan_predicts_selective_candidates():
    from topowise.planner.candidates import enumerate_candidates

    cands = enumerate_candidates(H200X2, LLAMA_1B, seq_len=8192, num_gpus=2, micro_batches=(1,))
    runs = [c.run for c in cands]
    assert {(r.checkpointing, r.selective_ac_option if r.checkpointing == "selective" else "") for r in runs} == {
        ("none", ""), ("selective", "op"), ("selective", "2"), ("full", "")}
    # per op and every 2nd block are two groups: a miss of one does not stop the other's micro-batches
    assert len({c.group_key for c in cands}) == len({(c.group_key[:3]) for c in cands}) * 4


def test_plan_takes_every_2nd_block_where_per_ops_python_sets_the_step():
    """The deep, narrow config on one H200 at 8 x 2048 tokens: per-op selective's host work makes it
    host-bound, every 2nd block recomputed whole waits on the host far less, and is ranked above it."""
    from pathlib import Path

    from topowise.planner.candidates import enumerate_candidates
    from topowise.planner.search import evaluate, rank

    narrow = load_model(str(Path(__file__).parents[2] / "tests/data/configs/llama-deep-narrow.json"))
    fits, _, _ = evaluate(H200X2, enumerate_candidates(H200X2, narrow, seq_len=2048, gpus=(0,), micro_batches=(8,)),
                          profile=None)
    every = {(p.run.checkpointing, p.run.selective_ac_option): p for p in fits}
    per_op, every_2 = every[("selective", "op")], every[("selective", "2")]
    assert per_op.prediction.host_bound
    assert every_2.prediction.time.host_wait_s < 0.5 * per_op.prediction.time.host_wait_s
    ranked = [p for p in sorted(fits, key=lambda p: -p.prediction.tokens_per_s) if p.run.checkpointing == "selective"]
    assert ranked[0] is every_2 and rank([per_op, every_2])[0] is every_2


def test_torchtitan_export_names_the_mode_and_option():
    from topowise.export.torchtitan import torchtitan_args

    spec = SimpleNamespace(sharded=("optimizer",), replicated=False, reshard_after_forward=True)
    base = {"nproc": 8, "spec": spec, "shard_group_size": None, "micro_batch": 2, "seq_len": 8192}
    args = torchtitan_args(SimpleNamespace(nproc=8, spec=spec, run=SimpleNamespace(
        **{k: v for k, v in base.items() if k not in ("nproc", "spec")}, checkpointing="selective",
        selective_ac_option="op")))
    assert args[args.index("--activation_checkpoint.mode") + 1] == "selective"
    assert args[args.index("--activation_checkpoint.selective_ac_option") + 1] == "op"
    from topowise.export.plan import LaunchPlan

    legacy = torchtitan_args(LaunchPlan(run=run("full", strategy="zero3", gpus=tuple(range(8))), topology="t"))
    assert legacy[legacy.index("--activation_checkpoint.mode") + 1] == "full"
    assert "--activation_checkpoint.selective_ac_option" not in legacy


def test_autograd_keeps_no_weight_cast_of_a_block_checkpointing_reruns():
    """memory.recast_blocks' premise: under autocast, what a checkpointed block saves for backward holds no
    bf16 copy of its weights (checkpointing recomputes the cast), so past autocast's cache only the blocks
    not rerun and the output layer keep one."""
    torch = pytest.importorskip("torch")
    from topowise.measure.strategies import apply_checkpointing
    from topowise.models.transformer import build_model

    spec = ModelSpec("t", "llama", 300, 32, 3, 4, 2, 64, False)
    # 2 x 12 tokens: no activation reshaped to two dimensions has a weight's shape
    tokens = torch.randint(0, 300, (2, 13), generator=torch.Generator().manual_seed(0))
    kept = {}
    for mode, option in (("none", "op"), ("selective", "op"), ("selective", "2"), ("full", "op")):
        model = build_model(spec, 16, "cpu", seed=0)
        apply_checkpointing(model, mode, option)
        # the matmuls keep each weight's cast as its transpose
        shapes = {tuple(p.t().shape) for n, p in model.named_parameters() if p.dim() == 2 and ".layers." in f".{n}"}
        packed = []

        def pack(t, packed=packed):
            if t.dtype == torch.bfloat16 and t.dim() == 2:
                packed.append(tuple(t.shape))
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), torch.autocast("cpu", torch.bfloat16):
            model(tokens[:, :-1])
        kept[(mode, option)] = (sum(s in shapes for s in packed), packed.count((32, 300)))
    # five Linear weights a block (qkv, out, gate, up, down); the output layer's cast in every mode
    assert kept == {("none", "op"): (15, 1), ("selective", "op"): (0, 1), ("selective", "2"): (5, 1),
                    ("full", "op"): (0, 1)}
    run_of = {m: Run(spec, (0,), "ddp", seq_len=16, checkpointing=m[0], selective_ac_option=m[1]) for m in kept}
    assert {m: 5 * (3 - recast_blocks(r)) for m, r in run_of.items()} == {m: k[0] for m, k in kept.items()}
