"""The run's kernels: --precision fp8 (torchtitan's float8 recipes), --loss plain|chunked|fused, --attention
flash|unfused (costmodel/kernels.py)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from topowise.cli.main import main
from topowise.costmodel.predict import predict
from topowise.errors import UsageError
from topowise.models.spec import ModelSpec, load_model
from topowise.run import Run
from topowise.topology import load_topology

H100 = load_topology("hgx-h100-8")
# llm-foundry's MPT-760M (scripts/train/yamls/pretrain/mpt-760m.yaml: d_model 1536, 12 heads, 24 layers, vocabulary
# 50368, expansion 4, tied embedding, ALiBi so no learned positions), as its H100 table ran it (benchmarking/README.md:
# 2048 tokens, 8 H100 80GB, micro-batch 24, accumulation 2, FULL_SHARD, no activation checkpointing)
MPT_760M = ModelSpec(name="mpt-760m", family="gpt2", vocab_size=50368, hidden_size=1536, num_layers=24, num_heads=12,
                     num_kv_heads=12, intermediate_size=6144, tied_embeddings=True, context_length=2048)


def run_of(model="llama3.1-8b", strategy="zero3", gpus=8, **kw) -> Run:
    spec = load_model(model) if isinstance(model, str) else model
    return Run(model=spec, gpus=tuple(range(gpus)), strategy=strategy, **kw)


def test_fp8_speeds_up_the_step_and_reports_mfu_over_the_fp8_peak():
    """fp8 on 8 H100: faster than bf16, but less than twice (attention, the output layer, casts, communication stay);
    MFU is over the fp8 dense peak, so it falls while tokens/s rises."""
    bf16 = predict(run_of(), H100)
    fp8 = predict(run_of(precision="fp8"), H100)
    assert bf16.step_time_s / 2 < fp8.step_time_s < bf16.step_time_s
    assert fp8.mfu_peak_flops == H100.gpu_spec.fp8_dense_flops > bf16.mfu_peak_flops == H100.gpu_spec.bf16_dense_flops
    assert fp8.mfu < bf16.mfu
    assert "fp8 dense peak" in fp8.mfu_peak_words


def test_fp8_is_refused_on_a_gpu_without_fp8_in_one_line(capsys):
    with pytest.raises(UsageError, match="A100 has no fp8"):
        predict(run_of(precision="fp8"), load_topology("dgx-a100-8"))
    code = main(["predict", "--model", "llama3.2-1b", "--topology", "dgx-a100-8", "--num-gpus", "8", "--strategy",
                 "zero3", "--precision", "fp8"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("topowise: error: --precision fp8")


def test_l40s_has_fp8():
    """The catalogue's fp8 peak: an L40S (Ada) runs fp8, faster than its bf16."""
    l40s = load_topology("pcie-l40s-8")
    assert predict(run_of("llama3.2-1b", precision="fp8"), l40s).step_time_s < predict(run_of("llama3.2-1b"),
                                                                                      l40s).step_time_s


def test_tensorwise_gathers_the_linears_in_fp8_rowwise_in_bf16():
    """FSDP2's all-gather: tensorwise with the float8 all-gather moves fewer bytes than bf16, rowwise as many."""
    def gathered(**kw):
        return sum(c.bytes * c.count for c in predict(run_of(**kw), H100).time.collectives if c.op == "all_gather")
    bf16, tensorwise = gathered(), gathered(precision="fp8")
    assert gathered(precision="fp8", fp8_recipe="rowwise") == bf16
    assert 0.5 * bf16 < tensorwise < 0.6 * bf16  # the block Linears are most of a Llama's weights


def test_rowwise_keeps_more_memory_than_tensorwise():
    """torchtitan measured rowwise above bf16 and tensorwise at bf16's on Llama 3 8B (8 H100); the model keeps the
    gathered bf16 block weights for rowwise (docs/costmodel.md)."""
    bf16 = predict(run_of(), H100).memory.peak_bytes
    tensorwise = predict(run_of(precision="fp8"), H100).memory.peak_bytes
    rowwise = predict(run_of(precision="fp8", fp8_recipe="rowwise"), H100).memory.peak_bytes
    assert tensorwise == bf16 < rowwise


def test_fp8_on_a_power_capped_gpu_is_slower():
    capped = load_topology("hgx-h100-8")
    node = replace(capped.node, power_limit_w=500)
    capped = node if capped.node is capped else replace(capped, node=node)
    assert capped.gpu_spec.fp8_dense_flops < H100.gpu_spec.fp8_dense_flops
    assert predict(run_of(precision="fp8"), capped).step_time_s > predict(run_of(precision="fp8"), H100).step_time_s


def test_mesh_runs_take_fp8_too():
    """tp x pp with fp8: faster than bf16 on the same mesh."""
    kw = {"model": "llama3.1-70b", "gpus": 32, "tp": 8, "pp": 4, "grad_accum": 8, "pp_schedule": "1f1b"}
    topo = load_topology("4x hgx-h100-8+ib-ndr")
    assert predict(run_of(**kw, precision="fp8"), topo).step_time_s < predict(run_of(**kw), topo).step_time_s


@pytest.mark.parametrize("loss", ["plain", "chunked", "fused"])
def test_llm_foundry_mpt_760m_fits_only_with_a_chunked_or_fused_loss(loss):
    """llm-foundry's MPT-760M at micro-batch 24 ran on 8 H100 80GB; with the loss over every token's fp32 logits
    (28 GiB of them) it would not fit, with its chunked (flash-attn's kernel) or a fused loss it does."""
    pred = predict(run_of(MPT_760M, micro_batch=24, seq_len=2048, grad_accum=2, loss=loss), H100)
    assert pred.fits == (loss != "plain")


def test_the_loss_terms_shrink_in_order():
    peaks = {loss: predict(run_of("llama3.2-1b", gpus=2, micro_batch=4, loss=loss), H100).memory for loss in
             ("plain", "chunked", "fused")}
    logits = {loss: m.logits_bytes if m.peak_phase == "loss backward" else 0 for loss, m in peaks.items()}
    assert peaks["plain"].peak_bytes > peaks["chunked"].peak_bytes >= peaks["fused"].peak_bytes
    assert logits["plain"] > logits["chunked"]
    # fused moves fewer bytes per logit than the fp32 loss: never slower
    assert (predict(run_of("llama3.2-1b", gpus=2, micro_batch=4, loss="fused"), H100).step_time_s
            < predict(run_of("llama3.2-1b", gpus=2, micro_batch=4), H100).step_time_s)


def test_unfused_attention_costs_time_and_memory():
    flash = predict(run_of("llama3.2-1b", gpus=2), H100)
    unfused = predict(run_of("llama3.2-1b", gpus=2, attention="unfused"), H100)
    assert unfused.step_time_s > flash.step_time_s
    assert unfused.memory.activations_bytes > flash.memory.activations_bytes



def test_selective_checkpointing_reruns_the_unfused_attention_core():
    """Megatron's selective recompute: the scores are not kept, the attention core runs again in the backward."""
    kept = predict(run_of("llama3.2-1b", gpus=2, attention="unfused"), H100)
    rerun = predict(run_of("llama3.2-1b", gpus=2, attention="unfused", checkpointing="selective"), H100)
    flash = predict(run_of("llama3.2-1b", gpus=2, checkpointing="selective"), H100)
    assert rerun.memory.activations_bytes < kept.memory.activations_bytes
    assert rerun.step_time_s > max(kept.step_time_s, flash.step_time_s)


def test_unfused_attention_grows_with_the_square_of_the_sequence():
    """Per token, the scores grow with the sequence: the unfused attention's extra time per token doubles from 4k to
    8k tokens at the same tokens per step more than a flash kernel's."""
    def per_token(seq, attention):
        pred = predict(run_of("llama3.2-1b", gpus=1, strategy="ddp", micro_batch=8192 // seq, seq_len=seq,
                              attention=attention), H100)
        return pred.step_time_s
    extra = {seq: per_token(seq, "unfused") - per_token(seq, "flash") for seq in (2048, 4096)}
    assert extra[4096] > 1.5 * extra[2048]


def test_defaults_leave_json_and_records_as_they_were():
    """A run at the default kernels writes none of their keys (plans and records read as before); others round-trip."""
    assert not {"precision", "fp8_recipe", "loss", "attention"} & set(run_of().to_dict())
    custom = run_of(precision="fp8", fp8_recipe="rowwise", loss="fused", attention="unfused")
    assert Run.from_dict(json.loads(json.dumps(custom.to_dict()))) == custom
    assert "precision" not in predict(run_of(), H100).to_dict()
    assert predict(custom, H100).to_dict()["precision"] == "fp8"


@pytest.mark.parametrize("kw, message", [
    ({"fp8_recipe": "rowwise"}, "applies to precision fp8"),
    ({"precision": "fp4"}, "unknown precision"),
    ({"loss": "liger"}, "unknown loss"),
    ({"precision": "fp8", "engine": "deepspeed"}, "modelled for --engine pytorch"),
])
def test_settings_are_checked_when_the_run_is_built(kw, message):
    with pytest.raises(UsageError, match=message):
        run_of("llama3.2-1b", gpus=2, **kw)


def test_predict_flags_reach_the_prediction(capsys):
    argv = ["predict", "--model", "llama3.2-1b", "--topology", "hgx-h100-8", "--num-gpus", "2", "--strategy",
            "zero3", "--precision", "fp8", "--fp8-recipe", "rowwise", "--loss", "chunked"]
    assert main([*argv, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["precision"], doc["fp8_recipe"], doc["loss"], doc["attention"]) == ("fp8", "rowwise", "chunked",
                                                                                     "flash")
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "fp8 (rowwise), loss chunked" in text and "of the fp8 dense peak, 1,979 TFLOP/s" in text
    assert main(["predict", *argv[1:9], "--fp8-recipe", "rowwise"]) == 2
    assert "applies to --precision fp8" in capsys.readouterr().err


def test_plan_takes_the_kernels_from_the_cli_and_the_api(capsys):
    """plan --precision fp8 ranks fp8 candidates (faster on H100 than bf16's best); the API's plan takes the same."""
    from topowise import api

    base = ["plan", "--model", "llama3.2-1b", "--topology", "hgx-h100-8", "--num-gpus", "2", "--micro-batch", "1",
            "--json"]
    assert main(base) == 0
    bf16 = json.loads(capsys.readouterr().out)["plans"][0]
    assert main([*base, "--precision", "fp8"]) == 0
    fp8 = json.loads(capsys.readouterr().out)["plans"][0]
    assert fp8["tokens_per_s"] > bf16["tokens_per_s"]
    best = api.plan("llama3.2-1b", "hgx-h100-8", num_gpus=2, micro_batch=1, precision="fp8").best
    assert best is not None and best.run.precision == "fp8"
    assert best.tokens_per_s == pytest.approx(fp8["tokens_per_s"])
