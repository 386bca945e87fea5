import shlex
import shutil
import subprocess

import pytest

from topowise.export.multinode import (
    nccl_network_env,
    network_notes,
    sbatch_multinode,
    torchrun_node_argv,
    torchrun_per_node,
)

SCRIPT = ["train.py", "--config", "a b.toml"]


def _sbatch_directives(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        if line.startswith("#SBATCH "):
            key, _, value = line[len("#SBATCH "):].partition("=")
            out[key] = value
    return out


def _srun_words(text: str) -> list[str]:
    """The srun command, continuation lines joined, split as a shell would."""
    lines = text.splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith("srun "))
    joined = ""
    for line in lines[start:]:
        joined += line.rstrip("\\").strip() + " "
        if not line.endswith("\\"):
            break
    return shlex.split(joined)


def _flags(words: list[str]) -> dict[str, str]:
    return dict(w[2:].split("=", 1) for w in words if w.startswith("--") and "=" in w)


def test_sbatch_asks_for_n_nodes_and_runs_torchrun_per_node():
    text = sbatch_multinode(4, 8, 8, SCRIPT, {"NCCL_IB_HCA": "mlx5_0,mlx5_1"}, job_name="hsdp")
    assert text.startswith("#!/bin/bash\n")
    d = _sbatch_directives(text)
    assert d["--nodes"] == "4" and d["--ntasks-per-node"] == "1" and d["--gpus-per-node"] == "8"
    words = _srun_words(text)
    assert words[:2] == ["srun", "torchrun"]
    flags = _flags(words)
    assert flags["nnodes"] == "$SLURM_NNODES" and flags["nproc-per-node"] == "8"
    assert flags["rdzv-backend"] == "c10d" and flags["rdzv-endpoint"] == "$head_node:29500"
    assert flags["rdzv-id"] == "$SLURM_JOB_ID"
    assert words[-3:] == SCRIPT
    assert "export NCCL_IB_HCA=mlx5_0,mlx5_1" in text.splitlines()
    assert 'head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)' in text


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_scripts_are_valid_shell():
    for text in (sbatch_multinode(2, 8, 8, SCRIPT, {}), torchrun_per_node(3, 8, SCRIPT, {"NCCL_IB_HCA": "mlx5_0"})):
        done = subprocess.run(["bash", "-n"], input=text, text=True, capture_output=True)
        assert done.returncode == 0, done.stderr


def test_torchrun_per_node_one_command_per_node_same_rendezvous():
    text = torchrun_per_node(3, 8, SCRIPT, {"NCCL_IB_HCA": "mlx5_0"}, summary="hsdp", notes=["n"])
    commands = [l for l in text.splitlines() if l and not l.startswith("#")]
    assert len(commands) == 3
    seen = []
    for line in commands:
        words = shlex.split(line)
        assert words[0] == "NCCL_IB_HCA=mlx5_0" and words[1] == "torchrun"
        flags = _flags(words)
        assert flags["nnodes"] == "3" and flags["nproc-per-node"] == "8" and flags["rdzv-backend"] == "c10d"
        assert flags["rdzv-endpoint"] == "$HEAD_NODE:29500" and flags["rdzv-id"] == "topowise"
        assert words[-3:] == SCRIPT
        seen.append(int(flags["node-rank"]))
    assert seen == [0, 1, 2]


def test_node_argv_is_plain_words():
    argv = torchrun_node_argv(2, 1, 4, ["-m", "pkg"], head="10.0.0.1", port=1234, run_id="r")
    assert argv == ["torchrun", "--nnodes=2", "--node-rank=1", "--nproc-per-node=4", "--rdzv-backend=c10d",
                    "--rdzv-endpoint=10.0.0.1:1234", "--rdzv-id=r", "-m", "pkg"]


def test_nccl_network_env_only_what_is_known():
    assert nccl_network_env("ib-ndr", ["mlx5_0", "mlx5_1", "eno1"]) == {"NCCL_IB_HCA": "mlx5_0,mlx5_1"}
    assert nccl_network_env("ib-ndr", []) == {}
    assert nccl_network_env("eth-100", ["mlx5_0"]) == {}  # plain Ethernet: sockets, no HCA list
    assert nccl_network_env("eth-100", [], socket_ifname="ens5") == {"NCCL_SOCKET_IFNAME": "ens5"}
    notes = network_notes("ib-ndr", {})
    assert any("NCCL_IB_HCA" in n for n in notes) and any("NCCL_SOCKET_IFNAME" in n for n in notes)
    assert not any("NCCL_IB_HCA" in n for n in network_notes("eth-100", {}))
