"""bench comm computes, then renders: comm_request resolves the flags into a typed CommRequest before any rank
starts, and header_lines are the `#` lines above the table."""

import argparse
import dataclasses

import pytest

from topowise.cli import bench_comm
from topowise.errors import UsageError
from topowise.measure import comm


def parsed(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    bench_comm.add_arguments(parser)
    return parser.parse_args(list(argv))


@pytest.fixture(autouse=True)
def outside_a_job(monkeypatch):
    monkeypatch.setattr("topowise.measure.launcher.require_torch", lambda verb: None)  # nothing is measured here
    monkeypatch.setattr(bench_comm, "in_job", lambda: False)
    monkeypatch.setattr(bench_comm, "job_size", lambda: None)
    monkeypatch.setattr("topowise.measure.rank.cuda_device_count", lambda: 0)


def test_the_request_is_the_sweep_the_flags_ask_for(tmp_path):
    request = bench_comm.comm_request(parsed("--backend", "gloo", "--ops", "all_reduce,broadcast", "--min-bytes",
                                             "1K", "--max-bytes", "8K", "--factor", "4", "--algo", "ring,tree",
                                             "--matrix", "--out", str(tmp_path / "c.jsonl")))
    assert dataclasses.is_dataclass(request) and request.nproc == 2  # gloo: two processes unless told
    assert request.algos == ("Ring", "Tree")
    cfg = request.config
    assert cfg.ops == ("all_reduce", "broadcast") and cfg.sizes == (1024, 4096) and cfg.backend == "gloo"
    assert cfg.out == str(tmp_path / "c.jsonl") and request.plot == str(tmp_path / "c.matrix.png")
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.nproc = 3


def test_the_request_refuses_before_anything_starts():
    with pytest.raises(UsageError, match="needs CUDA GPUs"):
        bench_comm.comm_request(parsed("--backend", "nccl"))
    with pytest.raises(UsageError, match="two or more processes"):
        bench_comm.comm_request(parsed("--backend", "gloo", "--nproc", "1"))


def test_header_lines_name_nccl_and_the_expected_busbw():
    cfg = comm.CommConfig(ops=("all_reduce",), sizes=(1024,), dtype="float32", warmup=1, iters=2, backend="nccl",
                          fabric="pcie")
    meta = {"world_size": 2, "backend": "nccl", "fabric": "pcie", "dtype": "float32", "iters": 2, "warmup": 1,
            "nccl_version": None, "transport": "SHM", "expected": None, "notes": ["a note"]}
    lines = bench_comm.header_lines([{"algo": "Tree"}], cfg, meta, {"nodes": {"a": [0], "b": [1]}})
    assert lines == [
        "# topowise bench comm: world size 2, backend nccl, fabric pcie, dtype float32, 1 warmup + 2 timed calls "
        "per case",
        "# NCCL version unknown, transport SHM",
        "# expected busbw: no topology for this group (give --topology)",
        "# 2 nodes: a: ranks 0; b: ranks 1 -- every row below is inter-node",
        "# NCCL_ALGO=Tree",
        "# a note",
    ]
    gloo = bench_comm.header_lines([], dataclasses.replace(cfg, backend="gloo"), dict(meta, backend="gloo"), None)
    assert gloo == ["# topowise bench comm: world size 2, backend gloo, dtype float32, 1 warmup + 2 timed calls "
                    "per case", "# a note"]
