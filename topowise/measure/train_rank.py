"""`bench train`, rank side: the entry point on every rank, and the PyTorch engine.

`rank_main` runs on every rank (started by train.bench_train through the launcher, or called in this
process inside a torchrun/srun job). It runs the case on its engine (PyTorch here: DDP,
ZeroRedundancyOptimizer, FSDP2; DeepSpeed: deepspeed_engine; a module:function model:
model_profile), each on the step loop of topowise.measure.steps, and writes the rank's result or its
failure into the result folder the parent reads.
"""

from __future__ import annotations

import json
import os
import sys
from contextlib import nullcontext
from pathlib import Path

from topowise.measure import steps
from topowise.measure import strategies as S
from topowise.measure.host_index import index_once
from topowise.measure.rank import destroy_process_group, init_distributed, node_labels, pin_to_cores, ranks_by_node
from topowise.measure.train import TrainCase


def rank_main(config: dict) -> None:
    """Entry point on every rank. Every rank writes its result (rank<R>.json) or its failure
    (rank<R>.failed.json) to config["result_dir"].

    Self-launched, a failing rank exits at once (torchrun then stops the others). Joined to a
    running job, it returns so the next strategy can run (that works when every rank failed alike,
    as with OOM; a failure on one rank alone leaves the others waiting until the process-group timeout).
    """
    case = TrainCase.from_dict(config["case"])
    self_launched = config.get("self_launched", True)
    if config.get("pin_cpus"):
        pin_to_cores()
    rank = init_distributed("nccl" if case.device == "cuda" else "gloo", timeout_s=float(config.get("timeout_s", 600)))
    result_dir = Path(config["result_dir"])
    (result_dir / f"rank{rank.rank}.started").touch()  # joined the group: what follows is the case's doing
    try:
        with _nvtx(config.get("nvtx", False)):  # --trace nsys: torch's ranges (topowise.step.N, ...) as NVTX
            if case.run.engine == "deepspeed":
                from topowise.measure.deepspeed_engine import train_deepspeed

                result = train_deepspeed(case, rank, config.get("trace"))
            else:
                result = train_pytorch(case, rank, config.get("trace"))
    except BaseException as exc:  # noqa: BLE001 - every failure is recorded, then the run goes on
        failure = steps.describe_failure(exc)
        _write_json(result_dir / f"rank{rank.rank}.failed.json", dict(failure, rank=rank.rank))
        if self_launched:
            sys.stderr.write(f"rank {rank.rank}: {failure['status']}: {failure['error']}\n")
            sys.stderr.flush()
            os._exit(1)
        _release_memory()
        return
    _write_json(result_dir / f"rank{rank.rank}.json", result)
    if self_launched:
        destroy_process_group()
    _release_memory()


def _nvtx(on: bool):
    """torch's named ranges and operators as NVTX ranges, for Nsight Systems (`bench train --trace nsys`)."""
    if not on:
        return nullcontext()
    import torch

    return torch.autograd.profiler.emit_nvtx(record_shapes=False)


def train_pytorch(case: TrainCase, rank, trace_dir: str | None = None) -> dict:
    """One strategy's run on this rank as PyTorch runs it (DDP, ZeroRedundancyOptimizer, FSDP2)."""
    if case.run.model.family == "callable":  # a module:function model: its own build, batch and loss
        from topowise.measure.model_profile import train_callable

        return train_callable(case, rank, trace_dir)
    if case.run.has_mesh:  # tensor, pipeline or context parallelism: the mesh as torchtitan composes it
        from topowise.measure.model_parallel import train_mesh

        return train_mesh(case, rank, trace_dir)
    import torch
    import torch.nn.functional as F

    device_type = "cuda" if case.device == "cuda" else "cpu"
    measured_peak, model = steps.prepare_case(case, rank)
    layout = node_labels(ranks_by_node(rank.world_size))  # which node holds which ranks (multi-node jobs)
    if device_type == "cuda":  # the host's speed in this process (launches, dispatch alone), beside its host phases
        layout["host_index"] = index_once("cuda").to_dict()
        layout["host_index_cpu"] = index_once("cpu").to_dict()
    wrapped, optimizer, mesh_layout = S.apply_strategy(model, case.run, rank.world_size, device_type=device_type,
                                                       lr=case.lr, weight_decay=case.weight_decay)
    layout.update(mesh_layout)

    inputs, targets = steps.synthetic_batches(case, rank.rank, case.run.model.vocab_size, rank.device)
    autocast = torch.autocast(device_type, dtype=torch.bfloat16) if case.run.spec.autocast else nullcontext()

    host: list[tuple[float, float, float]] = []  # per step: host seconds in forward, backward, optimizer

    def forward(step: int):
        with autocast:
            logits = wrapped(inputs[step])
        # float32 log-softmax of the bf16 logits: the same loss arithmetic on every strategy
        return F.cross_entropy(logits.flatten(0, 1).float(), targets[step].flatten())

    def optimizer_step():
        optimizer.step()
        wrapped.zero_grad(set_to_none=True)

    def one_step(step: int):
        return steps.phased_step(host, lambda: forward(step), lambda loss: loss.backward(), optimizer_step)

    peaks: list[int] = []
    marks: list[float] = []
    times, losses = steps.timed_steps(case.warmup + case.steps, one_step, device_type == "cuda", peaks, trace_dir,
                                      marks)
    layout["host_phase_s"] = steps.host_phases(host[case.warmup:], rank)
    return steps.step_result(case, rank, times, losses, measured_peak, layout, step_peaks=peaks, marks=marks)


def _release_memory() -> None:
    import gc

    gc.collect()
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except Exception:
        pass


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    tmp.replace(path)  # whole or absent: the parent never reads half a result
