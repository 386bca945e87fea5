"""`bench train --engine deepspeed`, parent side: requests, the missing-DeepSpeed message, records."""

import sys

import pytest

from topowise.errors import UsageError
from topowise.measure import train

pytest.importorskip("torch")


@pytest.fixture
def no_deepspeed(monkeypatch):
    monkeypatch.setitem(sys.modules, "deepspeed", None)  # as if not installed: import fails, find_spec is None


def test_missing_deepspeed_is_a_usage_error_with_the_install_hint(no_deepspeed):
    assert not train.deepspeed_available()
    with pytest.raises(UsageError, match=r"topowise\[deepspeed\]"):
        train.make_request(model="tiny", strategies="zero2", device="cpu", engine="deepspeed")
    train.make_request(model="tiny", strategies="zero2", device="cpu")  # the PyTorch engine needs none


def test_missing_deepspeed_on_the_command_line_exits_2_without_traceback(no_deepspeed, capsys):
    from topowise.cli.main import main

    assert main(["bench", "train", "--engine", "deepspeed", "--device", "cpu", "--model", "tiny"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("topowise: error:") and "pip install 'topowise[deepspeed]'" in err
    assert "Traceback" not in err


@pytest.mark.reference
def test_strategies_deepspeed_does_not_run_are_named():
    pytest.importorskip("deepspeed")
    with pytest.raises(UsageError, match="ddp, hsdp"):
        train.make_request(model="tiny", strategies="zero1,ddp,hsdp", device="cpu", engine="deepspeed")
    with pytest.raises(UsageError, match="unknown engine"):
        train.check_engine("megatron", ("zero1",))


@pytest.mark.reference
def test_request_and_record_carry_the_engine():
    pytest.importorskip("deepspeed")
    req = train.make_request(model="tiny", strategies="zero1,fsdp", device="cpu", engine="deepspeed", seq_len=32)
    assert [(c.run.strategy, c.run.engine) for c in req.cases] == [("zero1", "deepspeed"), ("zero3", "deepspeed")]
    case = req.cases[0]
    assert train.TrainCase.from_dict(case.to_dict()) == case
    result = {"status": "ok", "step_time_s": 0.5, "losses": [6.0, 5.9], "deepspeed_version": "0.19.8",
              "deepspeed_config": {"zero_optimization": {"stage": 1}}}
    rec = train.make_record(case, result)
    assert rec["engine"] == "deepspeed" and rec["deepspeed_version"] == "0.19.8"
    assert rec["deepspeed_config"]["zero_optimization"]["stage"] == 1
    default = train.make_request(model="tiny", strategies="zero1", device="cpu")
    assert default.cases[0].run.engine == "pytorch"


def test_deepspeed_buckets_follow_the_fabric_of_the_run(monkeypatch):
    """On a GPU the engine sizes DeepSpeed's buckets to the link the run uses: its fabric, read from the
    case's Run (a case has no fabric of its own)."""
    import dataclasses
    import types

    import torch

    from topowise.measure import deepspeed_engine, steps

    class Initialized(Exception):
        pass

    def initialize(**kwargs):
        raise Initialized(kwargs["config"])

    seen = []
    monkeypatch.setitem(sys.modules, "deepspeed", types.SimpleNamespace(initialize=initialize, __version__="0"))
    monkeypatch.setattr(deepspeed_engine, "link_gbps_here", lambda world, fabric: seen.append(fabric))
    monkeypatch.setattr(steps, "prepare_case", lambda case, rank: (0, torch.nn.Linear(2, 2)))
    monkeypatch.setattr(torch.optim, "AdamW", lambda params, **kw: object())  # no fused kernel on a CPU
    req = train.make_request(model="tiny", strategies="zero2", device="cpu", seq_len=32)
    case = req.cases[0]
    case = dataclasses.replace(case, device="cuda", run=dataclasses.replace(case.run, fabric="pcie"))
    with pytest.raises(Initialized):
        deepspeed_engine.train_deepspeed(case, types.SimpleNamespace(world_size=2, rank=0, device="cpu"))
    assert seen == ["pcie"]


def test_deepspeed_steps_time_the_host_by_phase(monkeypatch, tmp_path):
    """The engine's steps are timed phase by phase as the PyTorch engine's: host seconds in forward,
    backward and optimizer go into the result (the host term's measurement), with a stand-in DeepSpeed
    whose engine runs the model on a CPU process group of one."""
    import dataclasses
    import types

    import torch
    import torch.distributed as dist

    from topowise.measure import deepspeed_engine, steps

    calls = []

    class Engine:
        def __init__(self, model, optimizer):
            self.model, self.optimizer = model, optimizer

        def __call__(self, tokens):
            calls.append("forward")
            return self.model(tokens)

        def backward(self, loss):
            calls.append("backward")
            loss.backward()

        def step(self):
            calls.append("step")
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)

    def initialize(model, optimizer, config):
        return Engine(model, optimizer), None, None, None

    fake = types.SimpleNamespace(__version__="0", initialize=initialize)
    monkeypatch.setitem(sys.modules, "deepspeed", fake)
    req = train.make_request(model="tiny", strategies="zero2", device="cpu", seq_len=16, steps=2, warmup=1)
    case = dataclasses.replace(req.cases[0], run=dataclasses.replace(req.cases[0].run, engine="deepspeed"))
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        rank = types.SimpleNamespace(world_size=1, rank=0, device=torch.device("cpu"))
        result = deepspeed_engine.train_deepspeed(case, rank)
    finally:
        dist.destroy_process_group()
    assert calls == ["forward", "backward", "step"] * 3
    assert set(result["host_phase_s"]) == {"forward", "backward", "optimizer"}
    assert all(t > 0 for t in result["host_phase_s"].values())
    assert len(result["step_times_s"]) == 2 and steps.STEP_PHASES == ("forward", "backward", "optimizer")
