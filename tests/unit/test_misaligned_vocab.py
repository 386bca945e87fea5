"""A vocabulary that is not a multiple of 8 (GPT-2's 50257): the output layer's GEMMs run cuBLAS's slow
`align1` kernels (step.head_rate), measured alone and in GPT-2's traced step on one H200
(tests/data/records/2026-12-03-h200x1/gpt2)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from topowise.calibrate.fit import observation_from, predictor
from topowise.costmodel import step
from topowise.costmodel.predict import predict
from topowise.costmodel.profile import default_profile
from topowise.measure.records import read_records
from topowise.models.spec import load_model
from topowise.run import Run
from topowise.topology import load_topology

GPT2 = Path(__file__).parents[2] / "tests/data/records/2026-12-03-h200x1/gpt2"
TOPO = load_topology("h200-x2")
DATASHEET = 989e12


def compute_s(model) -> float:
    return predict(Run(model, (0,), "ddp", micro_batch=8, seq_len=1024), TOPO, default_profile()).time.compute_s


def test_the_output_layer_of_a_misaligned_vocabulary_runs_at_the_misaligned_rate():
    gpt2 = load_model("gpt2")
    padded = replace(gpt2, vocab_size=50304)  # nanoGPT's padding
    profile = default_profile()
    rate = DATASHEET * profile.compute_efficiency
    head = 3 * 2.0 * gpt2.hidden_size * 8192  # forward and backward, per vocabulary entry
    expected = head * (gpt2.vocab_size / (DATASHEET * step.MISALIGNED_GEMM_EFFICIENCY) - padded.vocab_size / rate)
    assert compute_s(gpt2) - compute_s(padded) == pytest.approx(expected, rel=1e-6)
    assert expected > 0.010  # 12 ms of a 38 ms step
    assert step.head_rate(padded, rate, DATASHEET) == rate


def test_the_misaligned_rate_is_the_mean_of_the_two_measured_widths():
    rows = [json.loads(line) for line in (GPT2 / "run45/head_gemm.jsonl").read_text().splitlines()]
    misaligned = [r["head_mean"] / DATASHEET for r in rows if r["vocab"] % 8]
    aligned = [r["head_mean"] / DATASHEET for r in rows if r["vocab"] % 8 == 0]
    assert len(misaligned) == 2 and len(aligned) == 2
    assert sum(misaligned) / 2 == pytest.approx(step.MISALIGNED_GEMM_EFFICIENCY, abs=0.001)
    assert max(misaligned) < min(aligned) / 5  # five to six times slower than the same GEMMs padded


def test_gpt2s_traced_kernels_as_the_model_prices_them():
    """GPT-2 ddp 8 x 1024, traced: matmuls and attention 24.0 ms per step, the memory-bound kernels (elementwise,
    fp32 loss, copies) 13.4 ms. Before the term the model priced the matmuls at 9.4 ms and the step host-bound.
    The blocks' elementwise kernels counted one by one price the memory-bound kernels 2.6 ms short: 2.1 ms of the
    trace are two reductions over the tokens (LayerNorm's weight and bias gradients, the Linears' bias
    gradients in bf16) at a quarter of the HBM rate, which the count prices at the elementwise rate; the rest is
    the fitted traffic (1.05 per counted byte, where the kernels alone take 0.97-1.14 of the term)."""
    traced = json.loads((GPT2 / "kernels.json").read_text())
    kernels, names = traced["classes"], traced["kernels"]
    record = next(r for r in read_records(str(GPT2 / "train.jsonl"), kind="train") if r["strategy"] == "ddp")
    p = predictor(TOPO)(default_profile(), observation_from(record))
    assert p.time.compute_s == pytest.approx(kernels["matmul"] + kernels["attention"], rel=0.06)
    memory_bound = kernels["elementwise/other"] + kernels["loss"] + kernels["copy/set"]
    reductions = sum(t for n, t in names.items()
                     if "GammaBetaBackward" in n or ("reduce_kernel" in n and "BFloat16" in n))
    assert reductions == pytest.approx(2.1e-3, abs=0.05e-3)
    assert 0 < memory_bound - p.time.memory_bound_s < reductions + 0.8e-3
    assert p.step_time_s / record["step_time_s"] - 1 == pytest.approx(-0.107, abs=0.01)


def test_predict_says_what_padding_the_vocabulary_would_save(capsys):
    from cli_run import cli_output as cli

    base = ["predict", "--model", "gpt2", "--topology", "h200-x2", "--num-gpus", "1", "--strategy", "ddp",
            "--micro-batch", "8", "--seq-len", "1024"]
    code, out, _ = cli(base, capsys)
    assert code == 0 and "the vocabulary (50,257) is not a multiple of 8" in out and "padded to 50,304" in out
    plan = ["plan", "--model", "gpt2", "--topology", "h200-x2", "--num-gpus", "2", "--seq-len", "1024"]
    code, out, _ = cli(plan, capsys)
    out = " ".join(out.split())  # the reasons wrap at the screen's width
    assert code == 0 and "padded to 50,304 would take (as nanoGPT pads GPT-2's), on every candidate" in out
    code, out, _ = cli(base + ["--json"], capsys)
    assert json.loads(out)["time"]["misaligned_head_s"] > 0.010
    code, out, _ = cli(["predict", "--model", "llama3.2-1b", *base[3:]], capsys)
    assert "not a multiple of 8" not in out


def test_a_cpu_profile_prices_no_cublas_kernels():
    cpu = replace(default_profile(), peak_flops=2e12)  # calibrate on a CPU sets its measured peak
    p = predict(Run(load_model("gpt2"), (0,), "ddp", micro_batch=8, seq_len=1024), TOPO, cpu)
    assert p.time.misaligned_head_s == 0
