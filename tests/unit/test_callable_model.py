"""`--model module:function`: the contract's checks (each failure one line, exit 2), the parameter
count and blocks read on the meta device, the loss, and the spec's round trip through a Run."""

from __future__ import annotations

import itertools
import re
import sys
import textwrap

import pytest
import torch
import torch.nn as nn
from cli_run import run_cli

from topowise.errors import UsageError
from topowise.models import callable as C
from topowise.models.spec import CallableSpec, ModelSpec, is_callable_reference, load_model
from topowise.run import Run

TINY = "examples.models.llama:build_tiny"
_names = itertools.count()


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """Write a module of the user's (a fresh name each time) into the current folder; its name."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))

    def write(source: str) -> str:
        name = f"user_models_{next(_names)}"
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        return name

    yield write
    for name in [n for n in sys.modules if n.startswith("user_models_")]:
        del sys.modules[name]


def test_callable_references_are_told_from_presets_and_files(tmp_path):
    assert is_callable_reference("examples.models.llama:build")
    assert not is_callable_reference("llama3.2-1b")
    assert not is_callable_reference("models/config.json")
    assert not is_callable_reference(":build") and not is_callable_reference("examples.models.llama:")


def test_the_example_is_described_on_the_meta_device_with_its_exact_count():
    spec = load_model(TINY)
    model, _batch, _loss = __import__("examples.models.llama", fromlist=["x"]).build_tiny()
    assert spec.params == sum(p.numel() for p in model.parameters())
    assert spec.wrap_class == "Block" and len(spec.blocks) == 2
    assert spec.blocks[0] == sum(p.numel() for p in model.layers[0].parameters())
    assert spec.root_params == spec.params - sum(spec.blocks)
    assert sum(spec.tensors) == spec.params
    assert spec.accepts == ("micro_batch", "seq_len")


def test_the_blocks_are_the_repeated_class_holding_the_most_parameters():
    class Big(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Sequential(nn.Linear(64, 64), nn.Linear(64, 64))  # inside a block: not a candidate

    model = nn.Module()
    model.blocks = nn.ModuleList([Big(), Big(), Big()])
    model.head = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 8))  # repeated, fewer parameters
    model.stem = nn.Linear(512, 512)  # the most parameters, in no list
    assert C.block_class(model) == "Big"
    name, found = C.find_blocks(model)
    assert name == "Big" and [q for q, _ in found] == ["blocks.0", "blocks.1", "blocks.2"]
    assert [q for q, _ in C.find_blocks(model, "Sequential")[1]] == ["blocks.0.w", "blocks.1.w", "blocks.2.w",
                                                                       "head"]  # outermost only, in order
    with pytest.raises(UsageError, match="--wrap-class Conv2d: no module of that class.*Big"):
        C.find_blocks(model, "Conv2d")


def test_the_loss_is_the_output_mean_unless_a_loss_fn_is_given():
    model = nn.Linear(4, 2)
    x = torch.ones(3, 4)
    assert torch.allclose(C.forward_loss(model, x), model(x).float().mean())
    assert torch.allclose(C.forward_loss(model, (x,)), model(x).float().mean())
    assert C.forward_loss(model, x, lambda m, b: m(b).sum() * 0 + 7).item() == 7


def test_a_callable_spec_travels_in_a_run_as_the_bench_sends_it():
    spec = load_model(TINY)
    run = Run(spec, (0, 1), "zero3", micro_batch=2, seq_len=32)
    again = Run.from_dict(run.to_dict())
    assert isinstance(again.model, CallableSpec) and again.model == spec
    assert ModelSpec.from_dict(spec.to_dict()) == spec


@pytest.mark.parametrize("source, attr, expected", [
    (None, "nowhere_at_all:build", "no module named 'nowhere_at_all'"),
    ("def other():\n    pass\n", "build", r"has no 'build' \(it has: other\)"),
    ("def build():\n    return 42\n", "build", r"returned int; it must return \(model, example_batch\)"),
    ("def build():\n    raise RuntimeError('bad shape')\n", "build", "raised RuntimeError: bad shape"),
    ("import torch\ndef build():\n    return 'model', torch.ones(2)\n", "build", "returned a str as the model"),
    ("raise ValueError('broken import')\n", "build", "importing user_models_\\d+ raised ValueError: broken import"),
    ("import torch\ndef build():\n    return torch.nn.Linear(2, 2), torch.ones(2), 3\n", "build", "loss_fn is a int"),
])
@pytest.mark.parametrize("verb", ["predict", "plan", "profile"])
def test_a_bad_callable_is_one_line_and_exit_2(user_module, capsys, source, attr, expected, verb):
    ref = attr if source is None else f"{user_module(source)}:{attr}"
    argv = {"predict": ["predict", "--model", ref, "--topology", "hgx-h200-8", "--num-gpus", "2", "--strategy", "ddp"],
            "plan": ["plan", "--model", ref, "--topology", "hgx-h200-8"],
            "profile": ["profile", "--model", ref, "--device", "cpu"]}[verb]
    code, err = run_cli(argv, capsys)
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("topowise: error: --model ") and re.search(expected, err[0]), err[0]


def test_predict_without_a_profile_says_how_to_make_one(capsys):
    code, err = run_cli(["predict", "--model", TINY, "--topology", "hgx-h200-8", "--num-gpus", "2",
                         "--strategy", "ddp"], capsys)
    assert code == 2 and len(err) == 1
    assert "topowise profile --model examples.models.llama:build_tiny" in err[0] and "--model-profile" in err[0]
