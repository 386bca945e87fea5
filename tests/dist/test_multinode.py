"""Two "nodes" on one machine: two torchrun launches (--nnodes 2, one process each) meeting at a
localhost c10d rendezvous, as two hosts of a cluster would, each running topowise inside the job."""

import json
import os
import random
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from topowise.export.multinode import torchrun_node_argv

pytest.importorskip("torch")

pytestmark = pytest.mark.dist


def _free_port() -> int:
    """A free port below the kernel's ephemeral range: between this check and torchrun binding it, no
    socket that asks the kernel for any port (gloo's, another test's) can be handed this one."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for port in random.Random(uuid.uuid4().int).sample(range(max(1024, low - 10_000), low), 200):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port below the ephemeral range")


def _two_nodes(args: list[str], cwd, timeout: float = 240.0) -> list[subprocess.CompletedProcess]:
    """Start one torchrun per "node" (node ranks 0 and 1) and wait for both."""
    port, run_id = _free_port(), uuid.uuid4().hex[:8]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "SLURM_PROCID", "SLURM_NTASKS"):
        env.pop(key, None)  # the test itself must not look like a rank of some job
    procs = []
    for node_rank in (0, 1):
        # the per-node command `plan --export torchrun` writes for a 2-node plan, with localhost as node 0
        cmd = torchrun_node_argv(2, node_rank, 1, ["-m", "topowise", *args], head="127.0.0.1", port=port,
                                 run_id=run_id, torchrun=(sys.executable, "-m", "torch.distributed.run"))
        procs.append(subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    done = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=timeout)
            done.append(subprocess.CompletedProcess(p.args, p.returncode, out, err))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return done


def _records(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_bench_comm_across_two_nodes(tmp_path):
    out = tmp_path / "comm.jsonl"
    runs = _two_nodes(["bench", "comm", "--backend", "gloo", "--ops", "all_reduce,all_gather",
                       "--min-bytes", "4K", "--max-bytes", "64K", "--warmup", "1", "--iters", "3",
                       "--out", str(out)], tmp_path)
    for r in runs:
        assert r.returncode == 0, r.stderr[-2000:]
    records = _records(out)
    # one record per case (rank 0 writes), every case checked correct, both "nodes" in the group
    cases = [(r["op"], r["bytes"]) for r in records]
    assert len(cases) == len(set(cases)) == 2 * 5
    assert all(r["world_size"] == 2 and r["wrong"] == 0 for r in records)
    assert all(r["time_s"] > 0 for r in records)
    for r in records:
        if "nodes" in r:  # node labels: two hosts of one process each, so every row crosses nodes
            assert r["nodes"] == 2 and r.get("scope", "inter-node") == "inter-node"


def test_bench_train_across_two_nodes(tmp_path):
    out = tmp_path / "train.jsonl"
    runs = _two_nodes(["bench", "train", "--device", "cpu", "--model", "tiny", "--strategies", "ddp,zero3",
                       "--seq-len", "32", "--steps", "2", "--warmup", "1", "--out", str(out)], tmp_path)
    for r in runs:
        assert r.returncode == 0, r.stderr[-2000:]
    records = _records(out)
    assert [r["strategy"] for r in records] == ["ddp", "zero3"]
    assert all(r["status"] == "ok" and r["world_size"] == 2 for r in records)
    assert all(r["nodes"] == 2 and r["scope"] == "inter-node" for r in records)  # each node's ranks labelled
    # the same model, data and seed: ddp and zero3 must see the same losses across the two nodes
    ddp, zero3 = (r["losses"] for r in records)
    assert len(ddp) == len(zero3) >= 2
    assert all(abs(a - b) <= 0.02 * abs(a) for a, b in zip(ddp, zero3))


def test_bench_comm_algo_runs_once_per_nccl_algo(tmp_path):
    """--algo ring,tree: one run per NCCL_ALGO, records labelled (gloo ignores NCCL_ALGO: labels only)."""
    out = tmp_path / "algo.jsonl"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS"):
        env.pop(key, None)
    done = subprocess.run([sys.executable, "-m", "topowise", "bench", "comm", "--backend", "gloo", "--nproc", "2",
                           "--ops", "all_reduce", "--min-bytes", "4K", "--max-bytes", "8K", "--warmup", "1",
                           "--iters", "2", "--algo", "ring,tree", "--out", str(out)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    records = _records(out)
    assert [(r["algo"], r["bytes"]) for r in records] == [
        ("Ring", 4096), ("Ring", 8192), ("Tree", 4096), ("Tree", 8192)]
    assert all(r["scope"] == "intra-node" and r["nodes"] == 1 for r in records)


def test_bench_comm_algo_list_inside_a_job_is_refused(tmp_path):
    runs = _two_nodes(["bench", "comm", "--backend", "gloo", "--ops", "all_reduce", "--min-bytes", "4K",
                       "--max-bytes", "4K", "--algo", "ring,tree"], tmp_path)
    assert all(r.returncode != 0 for r in runs)  # the rank exits 2; torchrun reports a failed worker
    assert all("NCCL_ALGO once" in r.stderr for r in runs)
