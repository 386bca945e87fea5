"""`monitor hang` on a real two-rank gloo job: rank 1 stops before an all_gather that rank 0 entered; both dump
their flight recorder, and `monitor hang` names rank 1 as the one that never entered it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from topowise.monitor import hang

pytest.importorskip("torch")

RANK = r"""
import os, sys, time
import torch
import torch.distributed as dist

rank, port, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
x = torch.ones(8)
dist.all_reduce(x)
if rank == 0:  # enters the all_gather; rank 1 never does
    parts = [torch.zeros(8) for _ in range(2)]
    work = dist.all_gather(parts, x, async_op=True)
    time.sleep(0.5)
with open(os.path.join(out, f"nccl_trace_rank_{rank}"), "wb") as f:
    f.write(torch._C._distributed_c10d._dump_fr_trace())
sys.stdout.flush()
os._exit(0)  # rank 0's all_gather never completes: leave without waiting for it
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_rank_that_stops_before_a_collective_is_named(tmp_path):
    port = str(_free_port())
    env = dict(os.environ, TORCH_FR_BUFFER_SIZE="64", OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, "-c", RANK, str(rank), port, str(tmp_path)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for rank in (0, 1)]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err[-2000:]
    dumps, _ = hang.read_dumps(tmp_path)
    (group,) = hang.analyze(dumps)
    assert [rank for rank, _ in group.behind] == [1]
    assert group.stuck_at is not None and group.stuck_at.op.endswith("all_gather")
    assert group.waiting == (0,)
