"""`topowise bench comm` with gloo on 2 CPU processes: the real measuring code, end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from topowise.errors import UsageError
from topowise.measure import collectives as coll
from topowise.measure.records import read_records

REQUIRED = ("kind", "op", "bytes", "dtype", "world_size", "time_s", "algbw_gbps", "busbw_gbps", "wrong",
            "backend", "fabric", "transport", "nccl_version", "expected_busbw_gbps", "timestamp")


def bench(tmp_path, *args, fault=None, timeout=120):
    env = dict(os.environ)
    env.pop("TOPOWISE_TEST_FAULT", None)
    if fault:
        env["TOPOWISE_TEST_FAULT"] = fault
    return subprocess.run([sys.executable, "-m", "topowise", "bench", "comm", "--backend", "gloo", "--nproc", "2",
                           *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.dist
def test_sweep_records_resume_and_corruption(tmp_path):
    out = tmp_path / "comm.jsonl"
    first = bench(tmp_path, "--min-bytes", "4K", "--max-bytes", "8K", "--iters", "3", "--warmup", "1",
                  "--out", str(out), "--matrix", "--matrix-bytes", "16K")
    assert first.returncode == 0, first.stderr
    rows = read_records(out, kind="collective")
    assert {(r["op"], r["bytes"]) for r in rows} == {(op, b) for op in coll.OPS for b in (4096, 8192)}
    for r in rows:
        assert all(k in r for k in REQUIRED), r
        assert r["wrong"] == 0, r
        assert r["world_size"] == 2 and r["backend"] == "gloo" and r["count"] * 4 == r["bytes"]
        assert r["busbw_gbps"] == pytest.approx(r["algbw_gbps"] * coll.bus_factor(r["op"], 2), abs=2e-3)
        assert r["algbw_gbps"] == pytest.approx(r["bytes"] / r["time_s"] / 1e9, abs=2e-3)
    ratio = {r["op"]: r["busbw_gbps"] / r["algbw_gbps"] for r in rows if r["bytes"] == 8192 and r["algbw_gbps"] > 0.01}
    for op, value in ratio.items():  # 2(n-1)/n = 1 for all_reduce and 1/2 for the chunked ops at n = 2
        assert value == pytest.approx({"all_reduce": 1.0, "broadcast": 1.0, "sendrecv": 1.0}.get(op, 0.5), rel=0.2)
    pairs = read_records(out, kind="p2p")
    assert {(p["src"], p["dst"], p["mode"]) for p in pairs} == {(0, 1, "uni"), (1, 0, "uni"), (0, 1, "bi"), (1, 0, "bi")}
    assert (tmp_path / "comm.matrix.png").stat().st_size > 1000
    assert "busbw" in first.stdout and "# Out of bounds values : 0 OK" in first.stdout

    # --resume runs only the new size; a spoiled result is counted and fails the run.
    second = bench(tmp_path, "--min-bytes", "4K", "--max-bytes", "16K", "--iters", "2", "--warmup", "0",
                   "--out", str(out), "--resume", fault="corrupt:sendrecv")
    assert second.returncode == 1, second.stderr
    assert "wrong results" in second.stderr
    rows = read_records(out, kind="collective")
    keys = [(r["op"], r["bytes"]) for r in rows]
    assert len(keys) == len(set(keys)) == len(coll.OPS) * 3
    wrong = {r["op"]: r["wrong"] for r in rows if r["bytes"] == 16384}
    assert wrong == {op: (3 if op == "sendrecv" else 0) for op in coll.OPS}


@pytest.mark.dist
def test_a_rank_that_raises_ends_the_run_with_its_message(tmp_path):
    done = bench(tmp_path, "--ops", "all_reduce,reduce_scatter", "--min-bytes", "4K", "--max-bytes", "4K",
                 "--iters", "2", fault="raise:reduce_scatter")
    assert done.returncode == 1
    assert "rank 1: RuntimeError: injected failure in reduce_scatter" in done.stderr
    assert "reduce_scatter of 4 KiB" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.dist
def test_a_hung_collective_ends_at_the_timeout_naming_the_case(tmp_path):
    done = bench(tmp_path, "--ops", "all_gather", "--min-bytes", "4K", "--max-bytes", "4K", "--iters", "2",
                 "--timeout", "3", fault="hang:all_gather", timeout=90)
    assert done.returncode != 0
    assert "timeout" in done.stderr.lower() and "all_gather of 4 KiB" in done.stderr


@pytest.mark.parametrize("args, words", [
    (["--ops", "all_reduce,allscatter"], "unknown collective 'allscatter'"),
    (["--min-bytes", "4M", "--max-bytes", "1M"], "larger than --max-bytes"),
    (["--min-bytes", "lots"], "not a size"),
    (["--max-bytes", "1.5"], "whole number"),
    (["--factor", "1"], "--factor"),
    (["--dtype", "int8"], "--dtype"),
    (["--resume"], "--resume needs --out"),
    (["--ops", "none"], "nothing to do"),
])
def test_bad_arguments_exit_2_with_a_clear_message(args, words, capsys):
    from topowise.cli.main import main

    assert main(["bench", "comm", "--backend", "gloo", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("topowise: error:") and words in err


# --- the pure parts the runs rely on ---------------------------------------------------------------
def test_sizes_and_sweep():
    assert coll.parse_size("1M") == coll.parse_size("1MiB") == 2**20
    assert coll.parse_size("64MiB") == 64 * 2**20 and coll.parse_size("1G") == 2**30
    assert coll.parse_size("1GB") == 10**9 and coll.parse_size("4096") == 4096
    assert coll.size_sweep(2**20, 2**30) == tuple(2**k for k in range(20, 31))
    assert coll.size_sweep(1000, 1000) == (1000,)
    with pytest.raises(UsageError):
        coll.parse_size("1Mx")


def test_bus_factors_follow_nccl_tests():
    assert coll.bus_factor("all_reduce", 8) == pytest.approx(1.75)
    assert coll.bus_factor("all_gather", 8) == coll.bus_factor("reduce_scatter", 8) == pytest.approx(0.875)
    assert coll.bus_factor("all_to_all", 4) == pytest.approx(0.75)
    assert coll.bus_factor("broadcast", 8) == coll.bus_factor("sendrecv", 8) == 1.0
    assert coll.case_elements("all_gather", 4100, 3, 4) == 1023  # 1025 elements, down to a multiple of 3


@pytest.mark.parametrize("op", coll.OPS)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_expected_values_match_a_simulated_collective(op, dtype):
    """Build each rank's output the way the collective defines it and check count_wrong agrees."""
    import torch

    n, count = 3, 3 * 70
    amp = coll.data_amplitude(dtype, n)
    keys = [coll.data_key(0, r, op, count * 4) for r in range(n)]
    data = [coll.pattern(k, 0, count, amp, "cpu") for k in keys]
    c = count // n
    for me in range(n):
        if op == "all_reduce":
            out = sum(data)
        elif op == "all_gather":
            out = torch.cat([d[:c] for d in data])
        elif op == "reduce_scatter":
            out = sum(d[me * c:(me + 1) * c] for d in data)
        elif op == "all_to_all":
            out = torch.cat([d[me * c:(me + 1) * c] for d in data])
        elif op == "broadcast":
            out = data[0]
        else:
            out = data[(me - 1) % n]
        out = out.to(getattr(torch, dtype))
        segs = coll.expected_segments(op, me, n, count)
        assert coll.count_wrong(out, segs, keys, amp) == 0
        out[5] += 1
        assert coll.count_wrong(out, segs, keys, amp) == 1


def test_data_differs_between_ranks_and_is_small():
    a = coll.pattern(coll.data_key(0, 0, "all_reduce", 64), 0, 1000, 8, "cpu")
    b = coll.pattern(coll.data_key(0, 1, "all_reduce", 64), 0, 1000, 8, "cpu")
    assert (a != b).float().mean() > 0.8
    assert int(a.abs().max()) <= 8 and len(set(a.tolist())) == 17


def test_expectation_and_causes_from_a_preset():
    from topowise.topology import load_topology

    topo = load_topology("h200-x2")
    exp = coll.expectation_for(topo, (0, 1), "nvlink")
    assert exp.link == "NV" and exp.busbw_gbps("all_reduce", 2**30, 2) == pytest.approx(368, rel=0.02)
    pcie = coll.expectation_for(topo, (0, 1), "pcie")
    assert pcie.link == "PCIe" and pcie.busbw_gbps("all_reduce", 2**30, 2) < 63
    assert coll.expectation_for(topo, (0, 1), "nvlink", backend="gloo") is None
    causes = coll.likely_causes(fabric="nvlink", transport="SHM", environ={"NCCL_P2P_LEVEL": "PIX"},
                                topology=topo, gpus=(0, 1))
    assert any("NCCL_P2P_LEVEL=PIX" in c for c in causes) and any("SHM" in c for c in causes)
    assert coll.likely_causes(fabric="nvlink", transport="P2P/CUMEM", environ={}, topology=topo, gpus=(0, 1)) == []


def test_failure_message_names_the_case(tmp_path):
    from topowise.cli.bench_comm import failure_message

    (tmp_path / "state.json").write_text(json.dumps({"op": "all_reduce", "bytes": 64 * 2**20, "dtype": "bfloat16"}))
    msg = failure_message(124, str(tmp_path), 300)
    assert "all_reduce of 64 MiB (bfloat16)" in msg and "--timeout 300" in msg
    (tmp_path / "error.rank1.txt").write_text("rank 1: RuntimeError: boom")
    assert failure_message(1, str(tmp_path), 300).startswith("rank 1: RuntimeError: boom (during all_reduce")
