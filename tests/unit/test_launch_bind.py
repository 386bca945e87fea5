"""launch binds what the doctor found: torchrun's --numa-binding where this PyTorch has it, else the wrapper;
NCCL_IB_HCA only where the NICs' names run against PCI order; the flight recorder into the run folder."""

from __future__ import annotations

import json
import os
import pickle
import shlex
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from topowise.cli.main import main
from topowise.doctor import bind, snapshot
from topowise.export import LaunchPlan
from topowise.models.spec import load_model
from topowise.monitor.hang import read_dumps
from topowise.run import Run

DATA = Path(__file__).parents[1] / "data" / "doctor"
HGX = DATA / "healthy_hgx_h100.json"


def _plan_file(tmp_path, gpus=(2, 3, 4, 5)) -> Path:
    run = Run(model=load_model("llama3.1-8b"), gpus=gpus, strategy="zero3", micro_batch=1, seq_len=4096)
    path = tmp_path / "plan.json"
    path.write_text(LaunchPlan(run=run, topology="hgx-h100-8", node_gpus=8).to_json())
    return path


def _dry_run(tmp_path, capsys, monkeypatch, *extra, torch_numa=True, numactl=True, snap=HGX):
    monkeypatch.setattr(bind, "torch_has_numa_binding", lambda: torch_numa)
    monkeypatch.setattr(bind, "have_numactl", lambda: numactl)
    snapshot_flag = ["--snapshot", str(snap)] if snap else []  # --no-bind reads none
    rc = main(["launch", "--plan", str(_plan_file(tmp_path)), *snapshot_flag, "--run-dir",
               str(tmp_path / "run"), *extra, "--dry-run", "--", "train.py", "--lr", "1"])
    assert rc == 0
    out = capsys.readouterr()
    words = shlex.split(out.out)
    start = words.index("torchrun")
    env = dict(w.split("=", 1) for w in words[:start])
    return words[start:], env, out.err


def test_torchrun_binds_itself_where_it_can(tmp_path, capsys, monkeypatch):
    argv, env, err = _dry_run(tmp_path, capsys, monkeypatch)
    assert argv == ["torchrun", "--standalone", "--nnodes=1", "--nproc-per-node=4", "--numa-binding=node",
                    "train.py", "--lr", "1"]
    assert not any(k.startswith("TOPOWISE_BIND") for k in env)
    assert "GPU2 on node 0" in err and "GPU4 on node 1" in err
    assert not (tmp_path / "run").exists()  # a dry run writes nothing


def test_the_wrapper_binds_each_rank_to_its_gpus_node(tmp_path, capsys, monkeypatch):
    argv, env, err = _dry_run(tmp_path, capsys, monkeypatch, torch_numa=False, numactl=True)
    assert "--numa-binding=node" not in argv
    tail = argv[argv.index("--no-python") + 1:]
    assert tail == [sys.executable, "-m", "topowise.doctor.bind", sys.executable, "train.py", "--lr", "1"]
    assert env["TOPOWISE_BIND_NODES"] == "0,0,1,1"  # GPUs 2,3 on socket 0, GPUs 4,5 on socket 1
    snap = snapshot.load(HGX)
    node_cpus = dict(snap.cpus.numa_nodes)
    assert env["TOPOWISE_BIND_CPUS"].split(";") == [node_cpus[0], node_cpus[0], node_cpus[1], node_cpus[1]]
    assert "has no --numa-binding" in err


def test_one_numa_node_binds_nothing(tmp_path, capsys, monkeypatch):
    one = snapshot.Snapshot.from_dict(json.loads(HGX.read_text()))
    one = replace(one, cpus=replace(one.cpus, numa_nodes=((0, "0-223"),)))
    path = tmp_path / "one.json"
    path.write_text(one.to_json())
    argv, env, err = _dry_run(tmp_path, capsys, monkeypatch, snap=path)
    assert argv[4:] == ["train.py", "--lr", "1"] and "TOPOWISE_BIND_NODES" not in env
    assert "nothing to bind" in err


def test_no_bind_leaves_the_ranks_alone(tmp_path, capsys, monkeypatch):
    argv, env, _ = _dry_run(tmp_path, capsys, monkeypatch, "--no-bind", torch_numa=False, snap=None)
    assert argv[4:] == ["train.py", "--lr", "1"]
    assert not any(k.startswith(("TOPOWISE_BIND", "NCCL_IB_HCA")) for k in env)


def test_nic_names_against_pci_order_name_the_planned_gpus_rails(tmp_path, capsys, monkeypatch):
    snap = snapshot.load(HGX)
    assert bind.nic_env(snap, (2, 3)) == ({}, "")  # names in PCI order: NCCL needs no telling
    reversed_names = replace(snap, nics=tuple(replace(n, name=f"mlx5_{7 - i}") for i, n in enumerate(snap.nics)))
    path = tmp_path / "reversed.json"
    path.write_text(reversed_names.to_json())
    _, env, err = _dry_run(tmp_path, capsys, monkeypatch, snap=path)
    assert env["NCCL_IB_HCA"] == "=mlx5_5,mlx5_4,mlx5_3,mlx5_2"  # the NICs beside GPUs 2,3,4,5, exact names
    assert "against PCI order" in err


def test_flight_recorder_dumps_where_monitor_hang_reads(tmp_path, capsys, monkeypatch):
    _, env, err = _dry_run(tmp_path, capsys, monkeypatch)
    run_dir = tmp_path / "run"
    assert env["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1" and int(env["TORCH_NCCL_TRACE_BUFFER_SIZE"]) > 0
    assert env["TORCH_FR_DUMP_TEMP_FILE"] == env["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"]
    # PyTorch appends the rank to the prefix: monitor hang finds those files
    run_dir.mkdir()
    for rank in (0, 1):
        Path(env["TORCH_FR_DUMP_TEMP_FILE"] + str(rank)).write_bytes(pickle.dumps({"version": "2.4", "entries": []}))
    dumps, prefix = read_dumps(run_dir)
    assert sorted(dumps) == [0, 1] and prefix == bind.DUMP_PREFIX
    assert f"monitor hang {run_dir}" in err
    _, off, _ = _dry_run(tmp_path, capsys, monkeypatch, "--no-flight-recorder")
    assert not any(k.startswith("TORCH_") for k in off)


def test_wrapper_command_with_and_without_numactl():
    env = {"LOCAL_RANK": "2", "TOPOWISE_BIND_NODES": "0,0,1,1", "TOPOWISE_BIND_CPUS": "0-3;0-3;4-7;4-7"}
    argv, cpus = bind.bound_command(["python", "train.py"], env, "/usr/bin/numactl")
    assert argv == ["/usr/bin/numactl", "--cpunodebind=1", "--preferred=1", "python", "train.py"] and cpus is None
    argv, cpus = bind.bound_command(["python", "train.py"], env, None)
    assert argv == ["python", "train.py"] and cpus == {4, 5, 6, 7}
    assert bind.bound_command(["x"], {**env, "LOCAL_RANK": "5"}, None) == (["x"], None)  # no entry: unbound


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="Linux only")
def test_the_wrapper_sets_this_ranks_cpus(tmp_path):
    cpu = min(os.sched_getaffinity(0))
    env = dict(os.environ, LOCAL_RANK="1", TOPOWISE_BIND_NODES="0,0", TOPOWISE_BIND_CPUS=f"0-1023;{cpu}",
               PATH="/nonexistent", PYTHONPATH=str(Path(__file__).parents[2]))  # PATH: no numactl
    out = subprocess.run([sys.executable, "-m", "topowise.doctor.bind", sys.executable, "-c",
                          "import os; print(sorted(os.sched_getaffinity(0)))"], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"[{cpu}]"
