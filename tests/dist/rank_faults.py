"""Rank entries for the tests: the real ones with a failure injected, so the tests can see how a run
records an OOM, an error, a crash, a hang, a wrong result or a strategy that does not train.

The parent-side library functions take the rank entry as a parameter; the tests pass these
("rank_faults:train_rank", "rank_faults:comm_rank") with this folder on PYTHONPATH and the fault in
RANK_FAULTS:
- bench train: "zero1:oom,zero2:error,zero3:crash,hsdp:hang,ddp:diverge,ddp:join_fails_once", per
  strategy: raise an OOM or an error after wrapping, exit with no result, sleep past the timeout,
  never move the weights (learning rate 0), or die before joining the group on the first launch.
- bench comm: "corrupt:sendrecv" (the last rank spoils 3 elements of its output), "raise:OP",
  "hang:OP" (the last rank fails or sleeps in OP).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

FAULTS = "RANK_FAULTS"
HERE = str(Path(__file__).resolve().parent)
TRAIN_ENTRY = "rank_faults:train_rank"
COMM_ENTRY = "rank_faults:comm_rank"


def env_with_faults(faults: str) -> dict[str, str]:
    """What a test sets (monkeypatch.setenv) so the ranks find this module and its fault."""
    path = os.environ.get("PYTHONPATH", "")
    return {FAULTS: faults, "PYTHONPATH": HERE + (os.pathsep + path if path else "")}


def train_rank(config: dict) -> None:
    from topowise.measure import steps, strategies, train_rank
    from topowise.measure.train import TrainCase

    case = TrainCase.from_dict(config["case"])
    strategy = case.run.strategy
    kinds = [k for s, _, k in (item.partition(":") for item in os.environ.get(FAULTS, "").split(",")) if s == strategy]
    for kind in kinds:
        marker = Path(config["result_dir"]) / "join_failed"
        if kind == "join_fails_once" and not marker.exists():
            marker.touch()
            os._exit(4)  # before joining the group, as a lost rendezvous would
        if kind == "diverge":
            strategies.make_optimizer = _frozen(strategies.make_optimizer)
        if kind in ("oom", "error", "crash", "hang"):
            steps.timed_steps = lambda *args, kind=kind, **kw: _fail(kind)
    train_rank.rank_main(config)


def _frozen(make_optimizer):
    """make_optimizer with a learning rate of 0: the weights never move."""
    def make(params, **kw):
        return make_optimizer(params, **dict(kw, lr=0.0))

    return make


def _fail(kind: str):
    if kind == "oom":
        import torch

        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 3.50 GiB. GPU 0 has a total "
                                     "capacity of 139.81 GiB (injected)")
    if kind == "error":
        raise RuntimeError("injected failure")
    if kind == "crash":
        os._exit(3)  # no result file, no message: as a segfault or a killed process would leave it
    time.sleep(3600)


def comm_rank(config: dict) -> None:
    from topowise.measure import collectives

    kind, _, faulty_op = os.environ.get(FAULTS, "").partition(":")
    make_buffers = collectives.make_buffers

    def faulty_buffers(op, count, rank, n, dtype, device):
        buf = make_buffers(op, count, rank, n, dtype, device)
        if op != faulty_op or rank != n - 1:
            return buf

        def run_once():
            if kind == "raise":
                raise RuntimeError(f"injected failure in {op}")
            if kind == "hang":
                time.sleep(3600)
            buf.run_once()
            if kind == "corrupt":
                flat = buf.out.view(-1)
                flat[: min(3, flat.numel())] += 1000

        return collectives.Buffers(buf.inp, buf.out, run_once)

    collectives.make_buffers = faulty_buffers
    collectives.rank_main(config)
