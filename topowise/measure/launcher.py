"""Run a measurement on every rank: self-launch under torchrun, or join a running torchrun/srun job.

`launch("topowise.measure.collectives:main", config, nproc=2)` either calls the entry point in this
process (we are already one rank of a job: torchrun set RANK, or srun set SLURM_PROCID) or starts
torchrun with `python -m topowise.measure.launcher ENTRY CONFIG.json` on `nproc` local processes.
The entry point takes the config dict and calls `init_distributed` itself.
"""

from __future__ import annotations

import datetime
import importlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

from topowise.errors import UsageError


@dataclass(frozen=True)
class Rank:
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    backend: str
    device: str  # "cuda:N" or "cpu"

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def in_job() -> bool:
    """True inside torchrun (RANK) or an srun step with several tasks (SLURM_PROCID)."""
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return True
    return "SLURM_PROCID" in os.environ and int(os.environ.get("SLURM_NTASKS", "1")) > 1


def _env_from_slurm() -> None:
    """srun sets SLURM_*; torch.distributed reads RANK/WORLD_SIZE/MASTER_ADDR. MASTER_ADDR must be exported."""
    if "RANK" in os.environ or "SLURM_PROCID" not in os.environ:
        return
    os.environ.setdefault("RANK", os.environ["SLURM_PROCID"])
    os.environ.setdefault("WORLD_SIZE", os.environ["SLURM_NTASKS"])
    os.environ.setdefault("LOCAL_RANK", os.environ.get("SLURM_LOCALID", "0"))
    os.environ.setdefault("LOCAL_WORLD_SIZE", os.environ.get("SLURM_NTASKS_PER_NODE", "1").split("(")[0])
    os.environ.setdefault("MASTER_PORT", "29500")
    if "MASTER_ADDR" not in os.environ:
        raise UsageError("inside srun, export MASTER_ADDR (the first node's hostname) before topowise bench")


def cores_for_local_rank(cpus: list[int], local_rank: int, local_world_size: int) -> list[int]:
    """This rank's equal, disjoint slice of the CPUs the job may use (the leftover go to no one)."""
    per = len(cpus) // max(local_world_size, 1)
    if per == 0:
        return cpus  # fewer CPUs than ranks: nothing to split
    return cpus[local_rank * per:(local_rank + 1) * per]


def pin_to_cores() -> list[int] | None:
    """With TOPOWISE_BENCH_PIN=1: every thread of this rank onto its own slice of the CPUs, so the
    ranks' Python threads neither share a core nor migrate across the machine. Threads made later
    (NCCL's, autograd's) inherit it. Returns the cores, or None where pinning is off or unsupported."""
    if os.environ.get("TOPOWISE_BENCH_PIN") != "1" or not hasattr(os, "sched_setaffinity"):
        return None
    cores = cores_for_local_rank(sorted(os.sched_getaffinity(0)), int(os.environ.get("LOCAL_RANK", "0")),
                                 int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cores)
        except OSError:
            pass  # a thread that ended meanwhile
    return cores


def init_distributed(backend: str, timeout_s: float = 300.0) -> Rank:
    """Join the process group torchrun (or srun) described in the environment."""
    import torch
    import torch.distributed as dist

    _env_from_slurm()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = "cpu"
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
        device = f"cuda:{local_rank}"
    if not dist.is_initialized():
        kwargs = {"device_id": torch.device(device)} if backend == "nccl" else {}
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_s), **kwargs)
    return Rank(dist.get_rank(), dist.get_world_size(), local_rank,
                int(os.environ.get("LOCAL_WORLD_SIZE", dist.get_world_size())), backend, device)


def torchrun_command(entry: str, config_path: str, nproc: int) -> list[str]:
    """The command that starts `entry` on `nproc` local ranks (a pure function: tested)."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
            "-m", "topowise.measure.launcher", entry, config_path]


def launch(entry: str, config: dict, *, nproc: int, env: dict[str, str] | None = None,
           timeout_s: float | None = None, heartbeat: str | None = None, stderr_path: str | None = None) -> int:
    """Run `entry(config)` on every rank; returns the exit status (0 when all ranks succeeded).

    timeout_s bounds the whole run, or, with `heartbeat` (a file the ranks rewrite as they make
    progress), the time since that file last changed: a long sweep may run for as long as it keeps
    moving, a hung call ends. On timeout the ranks are stopped and 124 is returned. stderr_path, when
    given, receives the ranks' and torchrun's stderr instead of the terminal.
    """
    if in_job():
        if env:
            os.environ.update(env)  # e.g. NCCL_P2P_DISABLE for --fabric pcie; read at NCCL init
        _call(entry, config)
        return 0
    if nproc < 1:
        raise UsageError(f"--nproc must be at least 1, not {nproc}")
    with tempfile.NamedTemporaryFile("w", suffix=".json", prefix="topowise-", delete=False) as f:
        json.dump(config, f)
        config_path = f.name
    child_env = dict(os.environ, **(env or {}))  # multicast switches (NCCL_NVLS_ENABLE, ...) pass through
    child_env.setdefault("OMP_NUM_THREADS", "1")
    child_env.setdefault("PYTHONUNBUFFERED", "1")
    err = open(stderr_path, "w") if stderr_path else None
    try:
        # A session of its own, so that a timeout can stop torchrun and every rank it started.
        proc = subprocess.Popen(torchrun_command(entry, config_path, nproc), env=child_env, stderr=err,
                                start_new_session=True)
        try:
            status = _wait(proc, timeout_s, heartbeat)
            if status == 124 and heartbeat is None:
                sys.stderr.write(f"topowise: error: {entry} did not finish within {timeout_s:.0f} s\n")
            return status
        except BaseException:
            _stop(proc)
            raise
    finally:
        if err:
            err.close()
        os.unlink(config_path)


def _wait(proc: subprocess.Popen, timeout_s: float | None, heartbeat: str | None) -> int:
    started = time.monotonic()
    while True:
        try:
            return proc.wait(timeout=0.5)
        except subprocess.TimeoutExpired:
            pass
        if timeout_s is None:
            continue
        since = started
        if heartbeat:
            try:  # wall-clock mtime -> the same monotonic scale
                since = max(started, time.monotonic() - (time.time() - os.path.getmtime(heartbeat)))
            except OSError:
                pass
        if time.monotonic() - since > timeout_s:
            _stop(proc)
            return 124


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the process group we started (torchrun and its ranks), SIGKILL if it lingers."""
    for sig, grace in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        if proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            continue


def _call(entry: str, config: dict) -> None:
    module, _, func = entry.partition(":")
    getattr(importlib.import_module(module), func)(config)


if __name__ == "__main__":  # one rank, started by torchrun from `launch`
    with open(sys.argv[2]) as fh:
        _call(sys.argv[1], json.load(fh))
