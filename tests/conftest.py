"""Markers by folder: tests/dist start processes (`dist`), tests/gpu need CUDA (`gpu`, skipped without it).
Fixtures: the records measured on 2x H200 that the cost model's tests compare with.

Fast lane: pytest -m "not dist and not gpu and not reference". Everything a CPU machine runs: pytest.
"""

import json
import os
import shutil
from pathlib import Path

import pytest

if "PYTEST_XDIST_WORKER" in os.environ:  # pytest -n N: N workers share the cores, one thread each
    os.environ.setdefault("OMP_NUM_THREADS", "1")

HERE = Path(__file__).parent
BY_FOLDER = {HERE / "dist": pytest.mark.dist, HERE / "gpu": pytest.mark.gpu}
H200X2_RESULTS = HERE / "data" / "records" / "2026-11-30-h200x2"
# `topowise validate` runs of the current cost model: run 10 (its calibration is the default profile), 16, 17
VALIDATION_RUNS = ("run10", "run16", "run17")


def have_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(config, items):
    for item in items:
        for folder, mark in BY_FOLDER.items():
            if folder in item.path.parents:
                item.add_marker(mark)
    if any("gpu" in item.keywords for item in items) and not have_cuda():
        skip = pytest.mark.skip(reason="needs a CUDA GPU")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)


@pytest.fixture
def topowise_bin():
    return shutil.which("topowise")


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="session")
def h200_train_records() -> list[dict]:
    """bench train on 2x H200 (run 2): llama3.2-1b, 1 x 8192 tokens, five strategies over NVLink and
    four over PCIe (no hsdp: one shard group of two is zero3)."""
    return read_jsonl(H200X2_RESULTS / "run2" / "train.jsonl")


@pytest.fixture(scope="session")
def h200_validation_records() -> list[tuple]:
    """(Run, measured) for every case `topowise validate` measured in VALIDATION_RUNS; measured holds
    step_time_s, peak_memory_bytes (max allocated over the timed steps) and the run's folder name."""
    from topowise.models.spec import load_model
    from topowise.run import Run, checkpointing_of

    out = []
    for folder in VALIDATION_RUNS:
        for rec in read_jsonl(H200X2_RESULTS / folder / "validate.jsonl"):
            assert rec["status"] == "ok", rec
            run = Run(model=load_model(rec["model"]), gpus=tuple(range(rec["world_size"])), strategy=rec["strategy"],
                      micro_batch=rec["micro_batch"], seq_len=rec["seq_len"], fabric=rec["fabric"],
                      checkpointing=checkpointing_of(rec))
            out.append((run, dict(rec["measured"], run=folder)))
    return out


@pytest.fixture
def plan_file(tmp_path, capsys):
    """A plan saved by `topowise plan --save-plan` (llama3.2-1b on 2 GPUs of h100-nvl-8), for launch's tests."""
    from topowise.cli.main import main

    path = tmp_path / "plan.json"
    assert main(["plan", "--model", "llama3.2-1b", "--topology", "h100-nvl-8", "--num-gpus", "2",
                 "--save-plan", str(path), "--json"]) == 0
    capsys.readouterr()
    return path
