"""Every process topowise starts: torchrun for the ranks of a measurement, a `topowise` command as a child.

`launch("topowise.measure.collectives:rank_main", config, nproc=2)` either calls the entry point in
this process (we are already one rank of a job: torchrun set RANK, or srun set SLURM_PROCID) or starts
torchrun with `python -m topowise.measure.launcher ENTRY CONFIG.json` on `nproc` local processes.
The entry point takes the config dict and joins the process group itself (topowise.measure.rank).
`run_topowise(args)` runs `python -m topowise ARGS` in a process group of its own, so that a
timeout stops it with every rank it started. Nothing here imports torch.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

from topowise.errors import UsageError

TIMED_OUT = 124  # the status `launch` and `run_topowise` return when they stopped a run at its timeout
TORCH_INSTALL_HINT = "pip install 'topowise[bench]'"


def have_torch() -> bool:
    """Whether this Python can import torch, without importing it (that takes seconds)."""
    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        return False


def require_torch(what: str, instead: str = "") -> None:
    """A one-line UsageError before anything starts when this Python has no PyTorch (the quick-start
    install), instead of a rank's or torchrun's traceback later; `instead`: what works without it."""
    if not have_torch():
        raise UsageError(f"{what} needs PyTorch, which this Python does not have: {TORCH_INSTALL_HINT}"
                         + (f" ({instead})" if instead else ""))


def in_job() -> bool:
    """True inside torchrun (RANK) or an srun step with several tasks (SLURM_PROCID)."""
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return True
    return "SLURM_PROCID" in os.environ and int(os.environ.get("SLURM_NTASKS", "1")) > 1


def job_size() -> tuple[int, int] | None:
    """(world size, processes on this node) of the torchrun/srun job this process is a rank of; None outside one."""
    if not in_job():
        return None
    env = os.environ
    world = int(env["WORLD_SIZE"] if "WORLD_SIZE" in env else env["SLURM_NTASKS"])
    local = env.get("LOCAL_WORLD_SIZE") or env.get("SLURM_NTASKS_PER_NODE", "").split("(")[0] or world
    return world, int(local)


def torchrun_command(entry: str, config_path: str, nproc: int, wrap: list[str] | None = None) -> list[str]:
    """The command that starts `entry` on `nproc` local ranks (a pure function: tested). `wrap`: a
    command each rank runs under (`nsys profile ...`): torchrun then starts `WRAP python -m ...`."""
    if wrap:
        return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
                "--no-python", *wrap, sys.executable, "-m", "topowise.measure.launcher", entry, config_path]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
            "-m", "topowise.measure.launcher", entry, config_path]


def nsys_command(output_base: str) -> list[str]:
    """`nsys profile` for one rank, its report at OUTPUT_BASE<rank>.nsys-rep (nsys expands %q{RANK}):
    CUDA, NVTX (the ranks emit torch's ranges as NVTX) and OS runtime calls, no CPU sampling."""
    return ["nsys", "profile", "--trace=cuda,nvtx,osrt", "--sample=none", "--cpuctxsw=none",
            "--force-overwrite=true", "-o", f"{output_base}%q{{RANK}}"]


def launch(entry: str, config: dict, *, nproc: int, env: dict[str, str] | None = None,
           timeout_s: float | None = None, heartbeat: str | None = None, stderr_path: str | None = None,
           log_path: str | None = None, on_wait: Callable[[], None] | None = None,
           wrap: list[str] | None = None) -> int:
    """Run `entry(config)` on every rank; returns the exit status (0 when all ranks succeeded).

    timeout_s bounds the whole run, or, with `heartbeat` (a file the ranks rewrite as they make
    progress), the time since that file last changed: a long sweep may run for as long as it keeps
    moving, a hung call ends. On timeout the ranks are stopped and TIMED_OUT (124) is returned.
    stderr_path receives the ranks' and torchrun's stderr instead of the terminal; log_path their
    stdout and stderr both. on_wait is called about twice a second while the ranks run. wrap: a
    command each rank runs under (nsys_command); ignored inside a job (the job started the ranks).
    """
    if in_job():
        if env:
            os.environ.update(env)  # e.g. NCCL_P2P_DISABLE for --fabric pcie; read at NCCL init
        call_entry(entry, config)
        return 0
    if nproc < 1:
        raise UsageError(f"--nproc must be at least 1, not {nproc}")
    require_torch("measuring")
    with tempfile.NamedTemporaryFile("w", suffix=".json", prefix="topowise-", delete=False) as f:
        json.dump(config, f)
        config_path = f.name
    child_env = dict(os.environ, **(env or {}))  # multicast switches (NCCL_NVLS_ENABLE, ...) pass through
    child_env.setdefault("OMP_NUM_THREADS", "1")
    child_env.setdefault("PYTHONUNBUFFERED", "1")
    log = open(log_path, "wb") if log_path else None
    err = open(stderr_path, "w") if stderr_path and not log else None
    try:
        outputs = {"stdout": log, "stderr": subprocess.STDOUT} if log else {"stderr": err}
        command = torchrun_command(entry, config_path, nproc, wrap)
        return _run(command, child_env, timeout_s, heartbeat, on_wait, outputs)
    finally:
        for fh in (log, err):
            if fh:
                fh.close()
        os.unlink(config_path)


def run_topowise(args: list[str], *, env: dict[str, str] | None = None, timeout_s: float | None = None) -> int:
    """`python -m topowise ARGS` as a child with `env` (None: this environment); its exit status, or
    TIMED_OUT (124) when it ran past timeout_s and was stopped with every process it started."""
    return _run([sys.executable, "-m", "topowise", *args], env, timeout_s, None, None, {})


def _run(cmd: list[str], env: dict | None, timeout_s: float | None, heartbeat: str | None,
         on_wait: Callable[[], None] | None, outputs: dict) -> int:
    # A session of its own, so that a timeout can stop the child and every process it started.
    proc = subprocess.Popen(cmd, env=env, start_new_session=True, **outputs)
    try:
        return _wait(proc, timeout_s, heartbeat, on_wait)
    except BaseException:
        _stop(proc)
        raise


def _wait(proc: subprocess.Popen, timeout_s: float | None, heartbeat: str | None,
          on_wait: Callable[[], None] | None) -> int:
    started = time.monotonic()
    while True:
        try:
            return proc.wait(timeout=0.5)
        except subprocess.TimeoutExpired:
            pass
        if on_wait:
            on_wait()
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
            return TIMED_OUT


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


def call_entry(entry: str, config: dict) -> None:
    """Import "module:function" and call it with the config."""
    module, _, func = entry.partition(":")
    getattr(importlib.import_module(module), func)(config)


if __name__ == "__main__":  # one rank, started by torchrun from `launch`
    with open(sys.argv[2]) as fh:
        call_entry(sys.argv[1], json.load(fh))
