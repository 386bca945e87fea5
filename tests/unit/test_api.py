"""The Python API as a user calls it: `import topowise` alone, no torch; each result is the CLI's --json
(with schema_version), frozen, and plain JSON."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_run import cli_output

import topowise

ROOT = Path(__file__).parents[2]
HIDE_TORCH = '''
import sys


class _NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _NoTorch())
'''
# what a user types: one import, a plan and a prediction
USER_SCRIPT = '''
import json, sys
import topowise
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("topowise", "torch", "numpy"))
topo = topowise.load_topology("h100-nvl-8")
run = topowise.Run(model=topowise.load_model("llama3.2-1b"), gpus=(0, 1), strategy="ddp")
prediction = topowise.predict(run, topo)
result = topowise.plan("llama3.2-1b", "h100-nvl-8", num_gpus=2)
print(json.dumps({"loaded": loaded, "step_time_s": prediction.step_time_s, "best": result.best.strategy,
                  "torch": "torch" in sys.modules}))
'''


def _as_json(data: dict) -> dict:
    """What --json prints of it, read back (tuples become lists, as in the CLI's output)."""
    return json.loads(json.dumps(data))


def _versioned(data: dict) -> dict:
    assert next(iter(data)) == "schema_version" and data["schema_version"] == topowise.SCHEMA_VERSION
    return data


def test_import_topowise_alone_plans_and_predicts_without_torch(tmp_path):
    (tmp_path / "sitecustomize.py").write_text(HIDE_TORCH)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
           "XDG_CACHE_HOME": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-c", USER_SCRIPT], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["loaded"] == ["topowise"]  # import topowise imports nothing more until a name is used
    assert out["torch"] is False
    assert out["step_time_s"] > 0 and out["best"]


@pytest.mark.parametrize("argv", [
    ["--model", "llama3.1-8b", "--topology", "hgx-h100-8", "--num-gpus", "8", "--strategy", "fsdp"],
    ["--model", "llama3.2-1b", "--topology", "pcie-l40s-8", "--gpus", "0,1,2,3", "--strategy", "hsdp",
     "--micro-batch", "2", "--seq-len", "2048", "--activation-checkpointing"],
    ["--model", "llama3.1-8b", "--topology", "2x hgx-h100-8+ib-ndr", "--num-gpus", "16", "--strategy", "fsdp",
     "--tp", "4", "--grad-accum", "2"],
])
def test_predict_is_predict_json(argv, capsys):
    code, out, err = cli_output(["predict", *argv, "--json"], capsys)
    assert code == 0, err
    flags = dict(zip(argv[::2], argv[1::2]))
    topo = topowise.load_topology(flags["--topology"])
    gpus = (tuple(int(g) for g in flags["--gpus"].split(",")) if "--gpus" in flags
            else topo.best_subset(int(flags["--num-gpus"])))
    run = topowise.Run(model=topowise.load_model(flags["--model"]), gpus=gpus, strategy=flags["--strategy"],
                       micro_batch=int(flags.get("--micro-batch", 1)), seq_len=int(flags.get("--seq-len", 4096)),
                       checkpointing="full" if "--activation-checkpointing" in argv else "none",
                       tp=int(flags.get("--tp", 1)), grad_accum=int(flags.get("--grad-accum", 1)))
    prediction = topowise.predict(run, topo)
    assert _versioned(_as_json(prediction.to_dict())) == json.loads(out)
    assert prediction.step_time_s == json.loads(out)["step_time_s"]


@pytest.mark.parametrize("topology, num_gpus", [("h100-nvl-8", 4), ("2x hgx-h100-8+ib-ndr", 16)])
def test_plan_is_plan_json(topology, num_gpus, capsys):
    code, out, err = cli_output(["plan", "--model", "llama3.1-8b", "--topology", topology, "--num-gpus",
                                 str(num_gpus), "--top", "3", "--json"], capsys)
    assert code == 0, err
    result = topowise.plan("llama3.1-8b", topology, num_gpus=num_gpus, top=3)
    assert _versioned(_as_json(result.to_dict())) == json.loads(out)
    assert result.best is not None and result.best.to_dict() == _as_json(result.to_dict())["plans"][0]
    assert result.best.prediction.tokens_per_s == json.loads(out)["plans"][0]["tokens_per_s"]


def test_plan_that_fits_nothing_says_what_would():
    result = topowise.plan("llama3.1-70b", "h100-nvl-8", num_gpus=1)
    assert result.best is None and result.plans == ()
    assert result.suggestion and result.infeasible


def test_study_is_study_json(tmp_path, capsys, monkeypatch):
    # the plots are the report's (test_study.py draws them); here the JSON is compared, so none is drawn
    monkeypatch.setattr("topowise.report.plots.write_plots", lambda study, out_dir: {})
    code, out, err = cli_output(["study", "--model", "tiny", "--topologies", "h100-nvl-8", "--num-gpus", "2",
                                 "--seq-len", "256", "--no-network-questions", "--out", str(tmp_path), "--json"],
                                capsys)
    assert code == 0, err
    got = topowise.study("tiny", ["h100-nvl-8"], num_gpus=2, seq_len=256, out=tmp_path / "api")
    assert _as_json(got.to_dict()) == json.loads(out)
    assert json.loads((tmp_path / "api" / "study.json").read_text()) == json.loads(out)
    assert (tmp_path / "api" / "report.md").is_file()


def test_all_is_what_is_importable():
    namespace: dict = {}
    exec("from topowise import *", namespace)
    assert set(namespace) - {"__builtins__"} == set(topowise.__all__)
    assert set(topowise.__all__) <= set(dir(topowise))
    with pytest.raises(AttributeError):
        topowise.not_a_name  # noqa: B018
    from topowise import hardware  # a submodule is still found beside the lazy names

    assert hardware.__name__ == "topowise.hardware"


def test_results_are_frozen_and_plain_json():
    topo = topowise.load_topology("hgx-h100-8")
    run = topowise.Run(model=topowise.load_model("llama3.2-1b"), gpus=(0, 1), strategy="zero2")
    prediction = topowise.predict(run, topo)
    result = topowise.plan("llama3.2-1b", topo, num_gpus=2, top=2)
    for value in (prediction, result, result.best, run):
        field = dataclasses.fields(value)[0].name
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(value, field, None)
    for data in (prediction.to_dict(), result.to_dict()):
        assert next(iter(data)) == "schema_version"
        # only JSON's types (a tuple becomes a list, as --json prints it): nothing to refuse, nothing lost
        text = json.dumps(data, allow_nan=False, default=lambda o: pytest.fail(f"not JSON: {o!r}"))
        assert json.loads(text) == _as_json(data)


def test_bad_input_is_one_usage_error():
    with pytest.raises(topowise.UsageError, match="unknown topology 'hgx-h100-9'"):
        topowise.load_topology("hgx-h100-9")
    with pytest.raises(topowise.UsageError, match="num_gpus 16"):
        topowise.plan("llama3.2-1b", "hgx-h100-8", num_gpus=16)


def _blocks(markdown: str, lang: str) -> list[str]:
    """The fenced blocks of a language (``` alone: output), in order."""
    parts = markdown.split("```")
    return [part[len(lang):].lstrip("\n") for part in parts[1::2] if part.split("\n", 1)[0] == lang]


@pytest.mark.parametrize("which", [0, 1])
def test_docs_examples_print_what_docs_say(which, capsys):
    text = (ROOT / "docs" / "api.md").read_text()
    code, printed = _blocks(text, "python")[which], _blocks(text, "")[which]
    exec(compile(code, "docs/api.md", "exec"), {})
    assert capsys.readouterr().out == printed
