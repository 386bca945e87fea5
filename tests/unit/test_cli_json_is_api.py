"""`--json` of predict and plan is to_dict() of the object the API returns: predict's JSON branch calls the API
(a change to the API's result shows in the CLI's output), and plan's output equals the API's, schema_version
first (docs/api.md)."""

from __future__ import annotations

import json

import pytest
from cli_run import cli_output

import topowise
from topowise import api

PREDICT = ["predict", "--model", "llama3.2-1b", "--topology", "h100-nvl-8", "--num-gpus", "2", "--strategy",
           "zero2", "--micro-batch", "2", "--json"]


def test_predict_json_prints_the_api_result(capsys, monkeypatch):
    seen = []
    original = api.Prediction.to_dict

    def marked(self):
        seen.append(self)
        return dict(original(self), marked=True)

    monkeypatch.setattr(api.Prediction, "to_dict", marked)
    code, out, err = cli_output(PREDICT, capsys)
    assert code == 0, err
    printed = json.loads(out)
    assert printed["marked"] is True and len(seen) == 1
    assert isinstance(seen[0], topowise.Prediction)
    assert printed["step_time_s"] == seen[0].step_time_s


def test_predict_json_is_to_dict(capsys):
    flags = dict(zip(PREDICT[1:-1:2], PREDICT[2:-1:2]))
    topo = topowise.load_topology(flags["--topology"])
    run = topowise.Run(model=topowise.load_model(flags["--model"]), gpus=topo.best_subset(2),
                       strategy=flags["--strategy"], micro_batch=2)
    expected = json.loads(json.dumps(topowise.predict(run, topo).to_dict()))
    code, out, err = cli_output(PREDICT, capsys)
    assert code == 0, err
    printed = json.loads(out)
    assert printed == expected and next(iter(printed)) == "schema_version"
    assert printed["schema_version"] == topowise.SCHEMA_VERSION


@pytest.mark.parametrize("argv, kwargs", [
    (["--num-gpus", "2", "--micro-batch", "2", "--seq-len", "2048"],
     {"num_gpus": 2, "micro_batch": 2, "seq_len": 2048}),
    (["--gpus", "0,1,2,3", "--top", "2", "--fabric", "pcie"], {"gpus": (0, 1, 2, 3), "top": 2, "fabric": "pcie"}),
])
def test_plan_json_is_to_dict(argv, kwargs, capsys):
    code, out, err = cli_output(["plan", "--model", "llama3.2-1b", "--topology", "hgx-h100-8", *argv, "--json"],
                                capsys)
    assert code == 0, err
    expected = json.loads(json.dumps(topowise.plan("llama3.2-1b", "hgx-h100-8", **kwargs).to_dict()))
    printed = json.loads(out)
    assert printed == expected and next(iter(printed)) == "schema_version"
