"""What the cost model expects of a measurement, joined to it here, above topowise.measure.

- bench comm: the expected busbw of every case of a sweep (`with_expected_busbw`), from the cost
  model's collective time (topowise.costmodel.comm: latency + bytes x busbw factor over the
  bottleneck link's line rate x the profile's achieved fraction). The cost model prices the
  collectives training issues; the two others are priced as the one whose busbw they track:
  all_to_all as all_gather (every rank sends (n-1)/n of S, one chunk to each peer) and sendrecv as
  all_reduce (every rank sends S over its link at once, as a ring all-reduce does at each step). On
  2x H200 (NV18), 1 to 64 MiB, bench comm measured sendrecv at 0.88-1.23x all_reduce's busbw and
  all_to_all at 0.98-1.43x all_gather's nccl-tests rows; broadcast's rate would have flagged a
  healthy sendrecv (63% of it at 8 MiB).
- bench train: the predicted step time and memory of a case, and the model FLOPs per token that
  MFU divides by (`train_expected`).
"""

from __future__ import annotations

import math
from dataclasses import replace

from topowise.costmodel.comm import collective_time, group_link
from topowise.costmodel.flops import training_flops_per_token
from topowise.costmodel.predict import predict
from topowise.costmodel.profile import Profile, default_profile
from topowise.measure.comm import CommConfig, case_bytes, expected_key, group_gpus
from topowise.measure.train import Expected, TrainCase
from topowise.topology.model import Topology
from topowise.units import busbw_factor

PRICED_AS = {"all_to_all": "all_gather", "sendrecv": "all_reduce"}


def with_expected_busbw(cfg: CommConfig, world: int, *, multi_node: bool = False,
                        profile: Profile | None = None) -> CommConfig:
    """`cfg` with the expected busbw (GB/s) of each of its cases and where it comes from; unchanged
    where nothing can be said: no topology, gloo, one process, several nodes (the network's pace is
    the NCCL log's to tell), or GPUs the topology does not cover."""
    if cfg.backend != "nccl" or multi_node or world < 2 or not cfg.topology:
        return cfg
    topo = Topology.from_dict(cfg.topology)
    if cfg.fabric == "pcie":
        topo = topo.without_nvlink()
    try:
        line, link = group_link(topo, group_gpus(cfg, world))
    except Exception:  # a topology of other GPUs: no expectation rather than a crash
        return cfg
    if not line or math.isinf(line):
        return cfg
    prof = profile or default_profile()
    expected = {}
    for op in cfg.ops:
        priced = PRICED_AS.get(op, op)
        for size in cfg.sizes:
            nbytes = case_bytes(op, size, world, cfg.dtype)
            t = collective_time(priced, nbytes, world, line, link, prof)
            if t > 0 and math.isfinite(t):
                expected[expected_key(op, nbytes)] = nbytes * busbw_factor(priced, world) / t / 1e9
    if not expected:
        return cfg
    source = f"cost model (topowise.costmodel.comm, {'--profile' if profile else 'default profile'})"
    priced_as = [f"{op} as {PRICED_AS[op]}" for op in cfg.ops if op in PRICED_AS]
    if priced_as:
        source += "; " + ", ".join(priced_as)
    return replace(cfg, expected=expected, expected_from=source)


def train_expected(case: TrainCase, topology=None, profile: Profile | None = None) -> Expected:
    """The cost model's step time and peak memory for `case` on the first GPUs of `topology` (or the
    reason there is none), and the model FLOPs per token (6N + 12 L H Q T, PaLM appendix B)."""
    run = case.run
    flops = training_flops_per_token(run.model, run.seq_len, run.activation_checkpointing)
    if case.device != "cuda":
        return Expected({"note": "CPU run: the cost model predicts GPUs only"}, flops)
    if topology is None:
        return Expected({"note": "no topology (CPU run, or no --topology and no live discovery): no prediction"},
                        flops)
    try:
        pred = predict(replace(run, gpus=tuple(topology.indices[:run.num_gpus])), topology, profile)
    except Exception as exc:  # noqa: BLE001 - the measurement stands even if the prediction fails
        return Expected({"note": f"prediction failed: {type(exc).__name__}: {exc}"}, flops)
    predicted = {"step_time_s": pred.step_time_s, "peak_memory_bytes": pred.memory.peak_bytes,
                 "tokens_per_s_per_gpu": pred.tokens_per_s_per_gpu, "fits": pred.fits}
    # peak_bytes adds the CUDA context and allocator slack; allocated_bytes is what
    # torch.cuda.max_memory_allocated measures, so that is the one compared
    if pred.memory.allocated_bytes:
        predicted["allocated_bytes"] = pred.memory.allocated_bytes
    # where the step goes, for bench train --trace's breakdown (predicted beside measured)
    predicted["exposed_comm_s"] = pred.time.exposed_comm_s
    predicted["host_wait_s"] = pred.time.host_wait_s
    if pred.time.phases:
        predicted["phases"] = {c.phase: {"gpu_s": c.gpu_s, "host_s": c.host_s, "exposed_comm_s": c.exposed_comm_s,
                                         "host_wait_s": c.host_wait_s} for c in pred.time.phases}
    return Expected(predicted, flops)
