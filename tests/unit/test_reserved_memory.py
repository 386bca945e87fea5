"""Reserved memory (what nvidia-smi shows: memory.reserved_bytes) and the first steps' extra, against the bench train
records of tests/data/records: FSDP2 reserves more above its allocated peak than DDP (Profile.fsdp_allocator_slack),
and only DDP (ddp, zero1 under PyTorch) holds a second gradient copy in its first steps."""

from __future__ import annotations

import json
import statistics

import pytest
from replay import RESULTS, finished

from topowise.calibrate.fit import observation_from, predictor
from topowise.costmodel.memory import reserved_bytes
from topowise.costmodel.predict import predict
from topowise.costmodel.profile import default_profile
from topowise.models.spec import load_model
from topowise.run import Run
from topowise.topology import load_topology


def reserved_errors(pattern: str, strategies: tuple[str, ...]) -> list[float]:
    """Predicted reserved bytes less the CUDA context / measured max_memory_reserved - 1, PyTorch runs on GPUs."""
    predict_one = predictor(load_topology("h200-x2"))
    out = []
    for r in finished(sorted(RESULTS.glob(pattern))):
        if r.get("engine", "pytorch") != "pytorch" or r["strategy"] not in strategies or not r.get("reserved_bytes"):
            continue
        pred = predict_one(default_profile(), observation_from(r))
        reserved = reserved_bytes(pred.memory, pred.run, default_profile())
        out.append((reserved - pred.memory.cuda_context_bytes) / r["reserved_bytes"] - 1)
    return out


@pytest.mark.parametrize("pattern", ["2026-11-30-h200x2/run2/train.jsonl",
                                     "2026-11-30-h200x2/run1[06]/validate-records/train.jsonl"])
def test_fsdp2_reserved_memory_on_two_gpus(pattern):
    """FSDP2 on 2x H200: with DDP's 5% slack (peak_bytes, which `fits` reads) the reserved peak is 10-19% under; with
    FSDP2's own slack every run is within 10%, none over by more than 1%."""
    errors = reserved_errors(pattern, ("zero2", "zero3", "hsdp"))
    assert errors and all(-0.10 < e < 0.01 for e in errors)
    assert statistics.median(errors) > -0.07


def test_ddp_reserved_memory_is_unchanged():
    """DDP's family keeps Profile.allocator_slack: its reserved peak, step 2's extra gradient copy included, is
    within 3% over and 4% under on 2x H200 (run 2)."""
    errors = reserved_errors("2026-11-30-h200x2/run2/train.jsonl", ("ddp",))
    assert errors and all(-0.04 < e < 0.03 for e in errors)


@pytest.mark.parametrize("strategy, engine, extra", [("ddp", "pytorch", True), ("zero1", "pytorch", True),
                                                      ("zero2", "pytorch", False), ("zero3", "pytorch", False),
                                                      ("zero2", "deepspeed", False), ("zero3", "deepspeed", False)])
def test_the_first_steps_extra_is_ddps_alone(strategy, engine, extra):
    """DDP rebuilds its buckets after step 1 (147 of the 198 ddp and zero1 records show a second fp32 gradient copy on
    step 2, none of the 210 FSDP2 and 37 DeepSpeed ones): only ddp and zero1 under PyTorch carry it."""
    run = Run(model=load_model("llama3.2-1b"), gpus=(0, 1), strategy=strategy, engine=engine)
    memory = predict(run, load_topology("h200-x2")).memory
    assert (memory.first_steps_extra_bytes == 4 * run.model.params) if extra else memory.first_steps_extra_bytes == 0


def test_the_fit_verdict_keeps_ddps_slack_and_the_table_shows_the_reserved_figure(capsys):
    """FSDP2's cache above allocated is reported, not counted against the GPU: peak_bytes keeps
    Profile.allocator_slack (the allocator gives its cache back before it runs out of memory)."""
    from topowise.cli.main import main

    argv = ["predict", "--model", "llama3.2-1b", "--topology", "h200-x2", "--num-gpus", "2", "--strategy", "zero3"]
    assert main([*argv, "--json"]) == 0
    memory = json.loads(capsys.readouterr().out)["memory"]
    assert memory["allocator_slack_bytes"] == pytest.approx(default_profile().allocator_slack
                                                            * memory["allocated_bytes"], abs=1)
    assert main(argv) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("reserved as nvidia-smi"))
    reserved = float(row.split()[-1])
    assert reserved > memory["peak_bytes"] / 2**30
