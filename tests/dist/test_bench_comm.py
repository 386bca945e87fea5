"""`topowise bench comm` with gloo on 2 CPU processes: the real measuring code, end to end."""

from __future__ import annotations

import functools
import json
from dataclasses import replace

import pytest
import rank_faults

from topowise.cli.main import main
from topowise.errors import UsageError
from topowise.measure import comm
from topowise.measure.records import read_records
from topowise.units import busbw_factor

REQUIRED = ("kind", "op", "bytes", "dtype", "world_size", "time_s", "algbw_gbps", "busbw_gbps", "wrong",
            "backend", "fabric", "transport", "nccl_version", "expected_busbw_gbps", "timestamp")


def bench(capsys, *args):
    """`topowise bench comm --backend gloo --nproc 2 ARGS` in this process: (status, stdout, stderr)."""
    status = main(["bench", "comm", "--backend", "gloo", "--nproc", "2", *args])
    out = capsys.readouterr()
    return status, out.out, out.err


def with_fault(monkeypatch, fault: str) -> None:
    """The ranks run tests/dist/rank_faults.py's entry, which injects `fault` on the last rank."""
    for key, value in rank_faults.env_with_faults(fault).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(comm, "run_comm", functools.partial(comm.run_comm, entry=rank_faults.COMM_ENTRY))


@pytest.mark.dist
def test_sweep_records_resume_and_corruption(tmp_path, capsys, monkeypatch):
    out = tmp_path / "comm.jsonl"
    status, stdout, stderr = bench(capsys, "--min-bytes", "4K", "--max-bytes", "8K", "--iters", "3", "--warmup", "1",
                                   "--out", str(out), "--matrix", "--matrix-bytes", "16K")
    assert status == 0, stderr
    rows = read_records(out, kind="collective")
    assert {(r["op"], r["bytes"]) for r in rows} == {(op, b) for op in comm.OPS for b in (4096, 8192)}
    for r in rows:
        assert all(k in r for k in REQUIRED), r
        assert r["wrong"] == 0, r
        assert r["world_size"] == 2 and r["backend"] == "gloo" and r["count"] * 4 == r["bytes"]
        assert r["busbw_gbps"] == pytest.approx(r["algbw_gbps"] * busbw_factor(r["op"], 2), abs=2e-3)
        assert r["algbw_gbps"] == pytest.approx(r["bytes"] / r["time_s"] / 1e9, abs=2e-3)
    ratio = {r["op"]: r["busbw_gbps"] / r["algbw_gbps"] for r in rows if r["bytes"] == 8192 and r["algbw_gbps"] > 0.01}
    for op, value in ratio.items():  # 2(n-1)/n = 1 for all_reduce and 1/2 for the chunked ops at n = 2
        assert value == pytest.approx({"all_reduce": 1.0, "broadcast": 1.0, "sendrecv": 1.0}.get(op, 0.5), rel=0.2)
    pairs = read_records(out, kind="p2p")
    assert {(p["src"], p["dst"], p["mode"]) for p in pairs} == {
        (0, 1, "uni"), (1, 0, "uni"), (0, 1, "bi"), (1, 0, "bi")}
    assert (tmp_path / "comm.matrix.png").stat().st_size > 1000
    assert "busbw" in stdout and "# Out of bounds values : 0 OK" in stdout
    assert "backend gloo, dtype float32" in stdout and "nvlink" not in stdout  # gloo runs on no NCCL fabric

    # --resume runs only the new size; a spoiled result is counted and fails the run.
    with_fault(monkeypatch, "corrupt:sendrecv")
    status, stdout, stderr = bench(capsys, "--min-bytes", "4K", "--max-bytes", "16K", "--iters", "2", "--warmup", "0",
                                   "--out", str(out), "--resume")
    assert status == 1, stderr
    assert "wrong results" in stderr and "--resume: 12 case(s) already in" in stdout
    rows = read_records(out, kind="collective")
    keys = [(r["op"], r["bytes"]) for r in rows]
    assert len(keys) == len(set(keys)) == len(comm.OPS) * 3
    wrong = {r["op"]: r["wrong"] for r in rows if r["bytes"] == 16384}
    assert wrong == {op: (3 if op == "sendrecv" else 0) for op in comm.OPS}


@pytest.mark.dist
def test_a_rank_that_raises_ends_the_run_with_its_message(capsys, monkeypatch):
    with_fault(monkeypatch, "raise:reduce_scatter")
    status, _, stderr = bench(capsys, "--ops", "all_reduce,reduce_scatter", "--min-bytes", "4K", "--max-bytes", "4K",
                              "--iters", "2")
    assert status == 1
    assert "rank 1: RuntimeError: injected failure in reduce_scatter" in stderr
    assert "reduce_scatter of 4 KiB" in stderr
    assert "Traceback" not in stderr


@pytest.mark.dist
def test_a_hung_collective_ends_at_the_timeout_naming_the_case(capsys, monkeypatch):
    with_fault(monkeypatch, "hang:all_gather")
    status, _, stderr = bench(capsys, "--ops", "all_gather", "--min-bytes", "4K", "--max-bytes", "4K", "--iters", "2",
                              "--timeout", "3")
    assert status != 0
    assert "timeout" in stderr.lower() and "all_gather of 4 KiB" in stderr


@pytest.mark.parametrize("args, words", [
    (["--ops", "all_reduce,allscatter"], "unknown collective 'allscatter'"),
    (["--min-bytes", "4M", "--max-bytes", "1M"], "larger than --max-bytes"),
    (["--min-bytes", "lots"], "not a size"),
    (["--max-bytes", "1.5"], "whole number"),
    (["--factor", "1"], "--factor"),
    (["--dtype", "int8"], "--dtype"),
    (["--resume"], "--resume needs --out"),
    (["--ops", "none"], "nothing to do"),
    (["--device", "cuda"], "--device cuda runs --backend nccl, not gloo"),
    (["--fabric", "pcie"], "gloo does not use NCCL"),
])
def test_bad_arguments_exit_2_with_a_clear_message(args, words, capsys):
    assert main(["bench", "comm", "--backend", "gloo", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("topowise: error:") and words in err


# --- the pure parts the runs rely on ---------------------------------------------------------------
def test_sizes_and_sweep():
    assert comm.parse_size("1M") == comm.parse_size("1MiB") == 2**20
    assert comm.parse_size("64MiB") == 64 * 2**20 and comm.parse_size("1G") == 2**30
    assert comm.parse_size("1GB") == 10**9 and comm.parse_size("4096") == 4096
    assert comm.size_sweep(2**20, 2**30) == tuple(2**k for k in range(20, 31))
    assert comm.size_sweep(1000, 1000) == (1000,)
    with pytest.raises(UsageError):
        comm.parse_size("1Mx")


def test_bus_factors_follow_nccl_tests():
    assert busbw_factor("all_reduce", 8) == pytest.approx(1.75)
    assert busbw_factor("all_gather", 8) == busbw_factor("reduce_scatter", 8) == pytest.approx(0.875)
    assert busbw_factor("all_to_all", 4) == pytest.approx(0.75)
    assert busbw_factor("broadcast", 8) == busbw_factor("sendrecv", 8) == 1.0
    assert comm.case_elements("all_gather", 4100, 3, 4) == 1023  # 1025 elements, down to a multiple of 3


@pytest.mark.parametrize("op", comm.OPS)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_expected_values_match_a_simulated_collective(op, dtype):
    """Build each rank's output the way the collective defines it and check count_wrong agrees."""
    import torch

    from topowise.measure import collectives as coll

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
    from topowise.measure import collectives as coll

    a = coll.pattern(coll.data_key(0, 0, "all_reduce", 64), 0, 1000, 8, "cpu")
    b = coll.pattern(coll.data_key(0, 1, "all_reduce", 64), 0, 1000, 8, "cpu")
    assert (a != b).float().mean() > 0.8
    assert int(a.abs().max()) <= 8 and len(set(a.tolist())) == 17


def test_expected_busbw_from_the_cost_model_and_causes_from_a_preset():
    from topowise.costmodel.comm import collective_time, group_link
    from topowise.costmodel.profile import default_profile
    from topowise.expectations import with_expected_busbw
    from topowise.topology import load_topology

    topo = load_topology("h200-x2")
    cfg = comm.CommConfig(ops=("all_reduce", "all_to_all", "sendrecv"), sizes=(2**20, 2**30), topology=topo.to_dict(),
                          gpus=(0, 1))
    nv = with_expected_busbw(cfg, 2)
    line, link = group_link(topo, (0, 1))
    for op, priced in (("all_reduce", "all_reduce"), ("all_to_all", "all_gather"), ("sendrecv", "all_reduce")):
        t = collective_time(priced, 2**30, 2, line, link, default_profile())
        assert nv.expected[comm.expected_key(op, 2**30)] == pytest.approx(2**30 * busbw_factor(op, 2) / t / 1e9)
    assert 300 < nv.expected[comm.expected_key("all_reduce", 2**30)] < 478  # most of NV18's 478 GB/s at 1 GiB
    assert nv.expected[comm.expected_key("all_reduce", 2**20)] < nv.expected[comm.expected_key("all_reduce", 2**30)]
    assert "cost model" in nv.expected_from and "sendrecv as all_reduce" in nv.expected_from
    pcie = with_expected_busbw(replace(cfg, fabric="pcie"), 2)
    assert pcie.expected[comm.expected_key("all_reduce", 2**30)] < 63
    assert with_expected_busbw(replace(cfg, backend="gloo"), 2).expected == {}
    assert with_expected_busbw(cfg, 2, multi_node=True).expected == {}
    causes = comm.likely_causes(fabric="nvlink", transport="SHM", environ={"NCCL_P2P_LEVEL": "PIX"},
                                topology=topo, gpus=(0, 1))
    assert any("NCCL_P2P_LEVEL=PIX" in c for c in causes) and any("SHM" in c for c in causes)
    assert comm.likely_causes(fabric="nvlink", transport="P2P/CUMEM", environ={}, topology=topo, gpus=(0, 1)) == []


def test_failure_message_names_the_case(tmp_path):
    (tmp_path / "state.json").write_text(json.dumps({"op": "all_reduce", "bytes": 64 * 2**20, "dtype": "bfloat16"}))
    msg = comm.failure_message(124, str(tmp_path), 300)
    assert "all_reduce of 64 MiB (bfloat16)" in msg and "--timeout 300" in msg
    (tmp_path / "error.rank1.txt").write_text("rank 1: RuntimeError: boom")
    assert comm.failure_message(1, str(tmp_path), 300).startswith("rank 1: RuntimeError: boom (during all_reduce")
