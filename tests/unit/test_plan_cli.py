"""`plan` and `predict` through the entry point: what they refuse, what they export for which engine, and
memory verdicts that add up (the 5% kept free is said wherever the verdict depends on it)."""

import json
import re

import pytest

from topowise.cli.main import main

NVL = ["--topology", "h100-nvl-8"]
SMALL = ["plan", "--model", "llama3.2-1b", *NVL, "--num-gpus", "2"]


def fails(capsys, argv) -> str:
    """Exit status 2 and one line on stderr: `topowise: error: ...`."""
    assert main(argv) == 2
    captured = capsys.readouterr()
    err = captured.err
    assert err.startswith("topowise: error: ") and err.count("\n") == 1 and "Traceback" not in err
    return err


@pytest.mark.parametrize("argv,match", [
    ([*SMALL, "--out", "x.sh"], "--out x.sh writes an export: give --export too"),
    ([*SMALL, "--engine", "deepspeed", "--export", "torchtitan"], "torchtitan runs FSDP2, not DeepSpeed"),
    (["plan", "--model", "llama3.2-1b", *NVL, "--gpus", "0-7", "--engine", "deepspeed", "--micro-batch", "1",
      "--top", "20", "--export", "torchtitan"], "predicted as DeepSpeed runs it"),
], ids=["out-without-export", "deepspeed-to-torchtitan", "deepspeed-8-gpus-to-torchtitan"])
def test_plan_refuses_in_one_line(argv, match, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert match in fails(capsys, argv)
    assert not list(tmp_path.iterdir())  # nothing written


def test_deepspeed_plan_exports_accelerate_with_the_deepspeed_plugin(capsys, tmp_path):
    out, saved = tmp_path / "accelerate.yaml", tmp_path / "plan.json"
    assert main([*SMALL, "--engine", "deepspeed", "--export", "accelerate", "--out", str(out),
                 "--save-plan", str(saved)]) == 0
    text = out.read_text()
    assert 'distributed_type: "DEEPSPEED"' in text and "fsdp_config" not in text
    plan = json.loads(saved.read_text())
    stage = {"zero1": 1, "zero2": 2, "zero3": 3}[plan["plan"]["strategy"]]
    assert f"zero_stage: {stage}" in text and plan["plan"]["engine"] == "deepspeed"
    assert "as DeepSpeed runs it" in text.splitlines()[0]
    printed = capsys.readouterr().out
    assert f"wrote accelerate to {out}" in printed and "as DeepSpeed runs ZeRO" in printed


def test_pytorch_plan_still_exports_fsdp(tmp_path):
    out = tmp_path / "accelerate.yaml"
    assert main([*SMALL, "--export", "accelerate", "--out", str(out)]) == 0
    text = out.read_text()
    assert text.startswith("# topowise plan: zero2 on GPUs 0,1") and 'distributed_type: "FSDP"' in text


# --- memory verdicts -----------------------------------------------------------------------------
def test_infeasible_reasons_count_the_headroom_even_past_the_whole_gpu(capsys):
    assert main(["plan", "--model", "llama3.1-8b", *NVL, "--num-gpus", "2", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    over_the_gpu = [i for i in data["infeasible"] if i["peak_memory_bytes"] > 94e9]
    assert over_the_gpu
    for miss in data["infeasible"]:
        need, have, usable, over = (float(x.replace(",", "")) for x in re.match(
            r"needs ([\d,.]+) GiB, the GPU has ([\d,.]+) GiB of which ([\d,.]+) GiB is usable with 5% kept free "
            r"\(over by ([\d,.]+) GiB\)$", miss["reason"]).groups())
        assert abs(need - usable - over) <= 0.11  # "over by" is against the usable part, and says so


def test_an_infeasible_candidate_names_its_checkpointing_and_shard_groups(capsys):
    # llama3.1-8b zero3 on 4 H100 NVL at micro-batch 4: per-op selective checkpointing fits (82.7 GiB), every
    # 2nd block does not (94.3 GiB); the line that says it does not fit must say which
    argv = ["plan", "--model", "llama3.1-8b", *NVL, "--num-gpus", "4"]
    assert main(argv) == 0
    text = " ".join(capsys.readouterr().out.split())  # the lines wrap at the screen's width
    assert "zero3 on GPUs 0-3, micro-batch 4, selective (every 2nd block) checkpointing: needs" in text
    # on 8 H100 SXM at micro-batch 8 two hsdp candidates miss: the lines tell them apart by their shard groups
    assert main(["plan", "--model", "llama3.1-8b", "--topology", "hgx-h100-8", "--num-gpus", "8",
                 "--micro-batch", "8"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    hsdp = re.findall(r"hsdp with shard groups (\S+), micro-batch 8, full checkpointing: needs", text)
    assert sorted(hsdp) == ["{0,1},{2,3},{4,5},{6,7}", "{0-3},{4-7}"]
    assert main([*argv, "--json"]) == 0
    misses = json.loads(capsys.readouterr().out)["infeasible"]
    every_2nd = [m for m in misses if m["checkpointing"] == "selective" and m["selective_ac_option"] == "2"]
    assert every_2nd and all(m["compile"] is False for m in misses)


@pytest.mark.parametrize("strategy,seq_len,fits", [("zero2", "8192", False), ("zero3", "4096", True)])
def test_predict_verdict_names_the_usable_memory(strategy, seq_len, fits, capsys):
    # llama3.1-8b zero2 on 8x H100 NVL at 8192 tokens: a peak of 83.65 GiB under the GPU's 87.54 GiB does not
    # fit the 83.17 usable
    argv = ["predict", "--model", "llama3.1-8b", *NVL, "--gpus", "0-7", "--strategy", strategy, "--seq-len", seq_len]
    assert main(argv) == 0
    verdict = capsys.readouterr().out.strip().splitlines()[-1]
    assert main([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["fits"] is fits
    peak, gpu = data["memory"]["peak_bytes"] / 2**30, data["memory"]["gpu_memory_bytes"] / 2**30
    assert verdict.startswith("fits: " if fits else "does not fit: ")
    assert f"peak {peak:,.2f} GiB" in verdict and f"{gpu * 0.95:,.2f} GiB usable ({gpu:,.2f} GiB less 5% kept free)" \
        in verdict


def test_nothing_fits_names_the_parameters_in_words(capsys):
    assert main(["plan", "--model", "llama3.1-70b", *NVL]) == 1  # nothing fits
    out = " ".join(capsys.readouterr().out.split())
    assert "16 bytes x 70.55B parameters" in out and "0 of " in out
