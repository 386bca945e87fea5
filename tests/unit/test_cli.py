"""The command line: --help, and `predict`'s JSON, table and errors (plan: test_planner.py, topo:
test_topo_cli.py, study: test_study.py)."""

import json

import pytest
from cli_run import run_cli

from topowise.cli.main import main

VERBS = ("env", "topo", "predict", "plan", "study", "bench", "calibrate", "validate", "launch")


def test_help_lists_every_verb(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert all(verb in out for verb in VERBS)


def test_predict_json_keys(capsys):
    assert main(["predict", "--model", "llama3.2-1b", "--topology", "h200-x2", "--num-gpus", "2",
                 "--strategy", "zero2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"model", "step_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "time", "memory", "fits"} <= set(out)
    assert {"name", "params"} <= set(out["model"])
    assert {"compute_s", "comm_s", "exposed_comm_s", "collectives"} <= set(out["time"])
    assert {"peak_bytes", "params_bytes", "grads_bytes", "optimizer_bytes", "activations_bytes"} <= set(out["memory"])
    assert out["model"] == {"name": "llama3.2-1b", "params": 1_235_814_400}
    assert (out["strategy"], out["gpus"], out["fits"]) == ("zero2", [0, 1], True)


def test_predict_fsdp_is_zero3(capsys):
    base = ["predict", "--model", "tiny", "--topology", "h200-x2", "--num-gpus", "2", "--json", "--strategy"]
    assert main([*base, "fsdp"]) == 0
    fsdp = json.loads(capsys.readouterr().out)
    assert main([*base, "zero3"]) == 0
    assert fsdp == json.loads(capsys.readouterr().out)


def _row(lines: list[str], name: str) -> str:
    """The value of the table row called `name` (its last column)."""
    (row,) = [line for line in lines if line.rsplit(None, 1)[0] == name]
    return row.split()[-1]


@pytest.mark.parametrize("argv", [
    ["--model", "tiny", "--topology", "h100-nvl-8", "--gpus", "0-3", "--strategy", "hsdp", "--fabric", "pcie"],
    ["--model", "llama3.2-1b", "--topology", "h200-x2", "--num-gpus", "2", "--strategy", "ddp", "--seq-len", "65536"],
], ids=["fits", "does-not-fit"])
def test_predict_table_shows_the_numbers_of_the_json(argv, capsys):
    """The table is the same prediction as --json: step time, tokens/s, every collective, the peak, and a
    verdict that follows from the peak against the usable memory (5% kept free by the default profile)."""
    assert main(["predict", *argv, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert main(["predict", *argv]) == 0
    lines = [line.strip() for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert _row(lines, "step") == f"{doc['step_time_s'] * 1e3:,.2f}"
    assert any(line.startswith(f"{doc['tokens_per_s']:,.0f} tokens/s ({doc['tokens_per_s_per_gpu']:,.0f} per GPU), "
                               f"MFU {doc['mfu']:.1%} of the bf16 dense peak") for line in lines)
    ops = {c["op"] for c in doc["time"]["collectives"]}
    assert sum(line.split()[0] in ops for line in lines) == len(doc["time"]["collectives"]) > 0
    memory = doc["memory"]
    assert _row(lines, "peak") == f"{memory['peak_bytes'] / 2**30:,.2f}"
    assert _row(lines, "GPU memory") == f"{memory['gpu_memory_bytes'] / 2**30:,.2f}"
    usable = 0.95 * memory["gpu_memory_bytes"]
    assert doc["fits"] == (memory["peak_bytes"] <= usable)
    verdict = lines[-1]
    assert verdict.startswith("fits: peak " if doc["fits"] else "does not fit: peak ")
    assert f"{memory['peak_bytes'] / 2**30:,.2f} GiB" in verdict and f"{usable / 2**30:,.2f} GiB usable" in verdict


@pytest.mark.parametrize("extra", [["--micro-batch", "0"], ["--seq-len", "-5"], ["--strategy", "zero9"],
                                   ["--num-gpus", "3"], ["--gpus", "0,7"]])
def test_predict_bad_input_exits_2(extra, capsys):
    args = ["predict", "--model", "tiny", "--topology", "h200-x2", "--strategy", "ddp"]
    if not any(a in ("--num-gpus", "--gpus") for a in extra):
        args += ["--num-gpus", "2"]
    args += extra
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("topowise: error:") and "Traceback" not in err


def test_a_mixture_of_experts_config_is_one_line_and_exit_2(tmp_path, capsys):
    config = {"model_type": "mixtral", "vocab_size": 32000, "hidden_size": 4096, "num_hidden_layers": 32,
              "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
              "num_local_experts": 8, "num_experts_per_tok": 2}
    (tmp_path / "config.json").write_text(json.dumps(config))
    code, err = run_cli(["predict", "--model", str(tmp_path), "--topology", "hgx-h100-8", "--num-gpus", "8",
                         "--strategy", "zero3"], capsys)
    assert code == 2 and len(err) == 1 and "num_local_experts 8: a mixture-of-experts model" in err[0]
