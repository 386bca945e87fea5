"""`topowise doctor` across nodes on CPU: four gloo processes, each playing a node as torchrun starts them with
one process per node (RANK, WORLD_SIZE, GROUP_RANK); rank 0 gathers every node's checks (node 1 runs on a
fault snapshot) and the node pairs measured in rounds name the node made slow through the test hook."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from topowise.doctor.nodes import SLOW_HOOK

pytest.importorskip("torch")

DATA = Path(__file__).parents[1] / "data" / "doctor"
NODES = 4
SLOW = 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(*flags: str, slow: dict[int, str] | None = None, snapshots: dict[int, str] | None = None):
    port = str(_free_port())
    procs = []
    for rank in range(NODES):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(NODES), LOCAL_RANK="0", LOCAL_WORLD_SIZE="1",
                   GROUP_RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=port, OMP_NUM_THREADS="1")
        env.pop(SLOW_HOOK, None)
        if slow and rank in slow:
            env[SLOW_HOOK] = slow[rank]
        snap = ["--snapshot", snapshots[rank]] if snapshots and rank in snapshots else []
        procs.append(subprocess.Popen([sys.executable, "-m", "topowise", "doctor", *snap, *flags], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=180) for p in procs]
    return [(p.returncode, out, err) for p, (out, err) in zip(procs, outs)]


def test_rank_0_gathers_every_node_and_names_the_slow_one():
    healthy, fault = str(DATA / "healthy_hgx_h100.json"), str(DATA / "fault_pcie_gen3_x8.json")
    done = _run("--json", slow={SLOW: "0.05"},
                snapshots={0: healthy, 1: fault, 2: healthy, 3: healthy})
    for rank, (rc, out, err) in enumerate(done):
        assert rc in (0, 1), f"rank {rank}: {err[-2000:]}"
        if rank:
            assert out == ""  # rank 0 speaks for the job
    rc, out, err = done[0]
    data = json.loads(out)
    assert rc == 1 and data["status"] == "fail"
    names = [n["name"] for n in data["nodes"]]
    assert names == [f"node{i} ({socket.gethostname()})" for i in range(NODES)]
    statuses = {n["node"]: n["status"] for n in data["nodes"]}
    assert statuses == {0: "ok", 1: "fail", 2: "ok", 3: "ok"}  # node 1's own fault, gathered from it
    pcie = next(c for c in data["nodes"][1]["checks"] if c["name"] == "PCIe link")
    assert "GPU3" in pcie["evidence"]
    pairs = data["node_pairs"]
    assert pairs["status"] == "fail"
    assert "6 pairs in 3 round(s)" in pairs["evidence"]
    assert f"node{SLOW} ({socket.gethostname()}) slow with every partner" in pairs["evidence"]
    assert pairs["evidence"].count("slow with every partner") == 1
    assert f"check node{SLOW}" in pairs["fix"]


def test_without_a_slow_node_the_pairs_pass_and_the_table_fits():
    done = _run("--rounds", "2")
    rc, out, err = done[0]
    assert rc in (0, 1), err[-2000:]
    assert all(r[1] == "" for r in done[1:])
    lines = out.splitlines()
    assert lines[0].startswith(f"topowise doctor: {NODES} node(s)")
    assert max(len(line) for line in lines) <= 80
    row = next(line for line in lines if line.startswith("node pairs"))
    assert "4 pairs in 2 round(s)" in out and "slow with every partner" not in out, row
