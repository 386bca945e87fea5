"""A rank entry for the mesh's failure test: the real one, with rank R of strategy S killed by SIGKILL (as the
kernel's out-of-memory killer would) in its second step, mid-pipeline. MESH_KILL="S:R"."""

from __future__ import annotations

import os
import signal

KILL = "MESH_KILL"
ENTRY = "mesh_faults:train_rank"


def train_rank(config: dict) -> None:
    from topowise.measure import steps, train_rank
    from topowise.measure.train import TrainCase

    strategy, _, victim = os.environ.get(KILL, "").partition(":")
    case = TrainCase.from_dict(config["case"])
    if case.run.strategy == strategy and os.environ.get("RANK") == victim:
        calls = []
        real = steps.phased_step

        def phased_step(*args, **kwargs):
            calls.append(None)
            if len(calls) == 2:
                os.kill(os.getpid(), signal.SIGKILL)
            return real(*args, **kwargs)

        steps.phased_step = phased_step
    train_rank.rank_main(config)
