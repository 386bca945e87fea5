"""`predict(run, topology, profile)`: the engine's formula for one run on one topology.

The engine (who runs the strategy: PyTorch's DDP/ZeroRedundancyOptimizer/FSDP2, or DeepSpeed's ZeRO)
is chosen from a table; each engine's module holds its formula. A `module:function` model is measured,
not counted: its compute, activations and host time come from its model profile (profiled.py).
"""

from __future__ import annotations

from dataclasses import replace

from topowise.costmodel.deepspeed import predict_deepspeed
from topowise.costmodel.parallel import accumulate, predict_parallel
from topowise.costmodel.prediction import Prediction
from topowise.costmodel.profile import Profile, default_profile
from topowise.costmodel.profiled import predict_profiled, require_profile
from topowise.costmodel.step import predict_pytorch
from topowise.errors import UsageError
from topowise.run import Run, place

ENGINES = {"pytorch": predict_pytorch, "deepspeed": predict_deepspeed}


def predict(run: Run, topology, profile: Profile | None = None) -> Prediction:
    """Step time and memory per GPU for `run` on `topology`, grad_accum micro-batches per optimizer step.
    fabric "pcie" predicts on the same GPUs with the NVLink links taken away. tp, pp or cp above 1: parallel.py."""
    if run.compile and run.engine != "pytorch":
        raise UsageError("--compile is modelled for the PyTorch engine only; DeepSpeed's own compile is not "
                         "(use --engine pytorch, or leave out --compile)")
    run = place(run, topology)  # on the real wiring, so a pcie what-if keeps hsdp's groups
    wired = topology.without_nvlink() if run.fabric == "pcie" else topology
    if run.model.family == "callable":
        if run.engine != "pytorch":
            raise UsageError(f"a module:function model is predicted from its model profile as PyTorch runs it, "
                             f"not as {run.engine} does: drop --engine {run.engine}")
        one = predict_profiled(require_profile(replace(run, grad_accum=1)), wired, profile or default_profile())
        return accumulate(one, run, (profile or default_profile()).host_spread)
    if run.has_mesh:
        return predict_parallel(run, wired, profile or default_profile())
    if run.grad_accum > 1:  # the engine's one micro-batch, accumulated
        chosen = profile or default_profile()
        return accumulate(ENGINES[run.engine](replace(run, grad_accum=1), wired, chosen), run, chosen.host_spread)
    return ENGINES[run.engine](run, wired, profile or default_profile())
