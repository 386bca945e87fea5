"""`bench train --engine deepspeed`: ZeRO-1/2/3 as DeepSpeed runs them, on the same model, data and
optimizer as the PyTorch engine (topowise.measure.train_rank), with the same step loop, metrics and records.

What is the same: the transformer built from the ModelSpec and seed on every rank before wrapping,
the synthetic batches seeded by (seed, step, rank), AdamW (betas 0.9/0.95, weight decay, lr; torch's
fused CUDA kernel, foreach on CPU) handed to DeepSpeed as a client optimizer (so DeepSpeed builds no
op of its own: no ninja, no nvcc), the float32 cross-entropy of the bf16 logits, CUDA-event timing,
the OOM handling and the loss check (train_rank.rank_main and the parent side are shared).

How DeepSpeed holds the training state here (bf16 enabled, grad_accum_dtype left unset, the config
from topowise.export.deepspeed.zero_config without gradient clipping, as the PyTorch engine has none):
- zero1 / zero2 (DeepSpeedZeroOptimizer): the model itself in bf16 (2 bytes per parameter, every
  rank), fp32 master weights and AdamW m, v for this rank's partition; gradients in bf16. Backward
  hooks copy each gradient into a contiguous bucket of reduce_bucket_size elements (two of them with
  overlap_comm) that is all-reduced in bf16 on a side stream (use_multi_rank_bucket_allreduce, the
  default); each rank copies its slice into a contiguous partition buffer (zero1 too, with
  contiguous_gradients). After the step every rank all-gathers the updated bf16 parameters (one
  all_gather_into_tensor; allgather_bucket_size is used only where that collective is missing).
- zero3 (DeepSpeedZeroOptimizer_Stage3): bf16 parameter partitions gathered per submodule in
  forward and again in backward (prefetched up to stage3_prefetch_bucket_size elements; tensors under
  stage3_param_persistence_threshold, the norms, stay whole), bf16 gradients reduce-scattered in
  reduce_bucket_size buckets into bf16 partitions, fp32 master weights and m, v per partition.
The cost model's DeepSpeed terms (topowise.costmodel.deepspeed) assume the same.
"""

from __future__ import annotations

import os

from topowise.measure.train import DEEPSPEED_INSTALL_HINT

CPU_BUCKET_ELEMENTS = 1_000_000  # on CPU (tests) no link to size buckets for; small buffers


def engine_config(strategy: str, *, micro_batch: int, world_size: int, link_gbps: float | None,
                  device: str) -> dict:
    """The DeepSpeed config the bench runs: the export's (buckets sized to the link), no gradient
    clipping (the PyTorch engine clips nothing), no periodic logging. On CPU the buckets are small."""
    from topowise.export.deepspeed import zero_config

    config = zero_config(strategy, micro_batch=micro_batch, link_gbps=link_gbps, nproc=world_size,
                         gradient_clipping=0.0)
    zero = config["zero_optimization"]
    if device == "cpu":
        for key in ("reduce_bucket_size", "allgather_bucket_size", "stage3_prefetch_bucket_size"):
            if key in zero:
                zero[key] = CPU_BUCKET_ELEMENTS
    config["train_batch_size"] = micro_batch * world_size
    config["steps_per_print"] = 2**31 - 1
    return config


def link_gbps_here(world_size: int, fabric: str) -> float | None:
    """Line rate of the ring over the first `world_size` GPUs of this machine (None if unknown)."""
    from topowise.measure.machine import live_topology

    topo = live_topology()
    if topo is None or topo.num_gpus < world_size:
        return None
    try:
        topo = topo.restricted_to(range(world_size))
        if fabric == "pcie":
            topo = topo.without_nvlink()
        gbps = topo.bottleneck_gbps(tuple(range(world_size)))
    except Exception:  # noqa: BLE001 - buckets fall back to DeepSpeed's defaults
        return None
    return None if gbps == float("inf") else gbps


def train_deepspeed(case, rank, trace_dir: str | None = None) -> dict:
    """One strategy's run on this rank through deepspeed.initialize; the same result dict as
    train_rank.train_pytorch."""
    device_type = "cuda" if case.device == "cuda" else "cpu"
    # before the import: DeepSpeed picks its accelerator then; never JIT-build ops
    os.environ.setdefault("DS_ACCELERATOR", device_type)
    os.environ.setdefault("DS_BUILD_OPS", "0")
    import torch.nn.functional as F

    try:
        import deepspeed
    except ImportError as exc:
        raise RuntimeError(f"DeepSpeed could not be imported on this rank ({exc}): {DEEPSPEED_INSTALL_HINT}") from None
    compatible_ops = getattr(getattr(deepspeed, "ops", None), "__compatible_ops__", None)
    if device_type == "cpu" and compatible_ops is not None:
        # DS_BUILD_OPS=0 notwithstanding, the CPU accelerator JIT-builds a shared-memory all-reduce (about a
        # minute of g++) on a machine's first run; marked incompatible, its collectives go through gloo
        compatible_ops["deepspeed_shm_comm"] = False

    from topowise.measure import steps
    from topowise.measure import strategies as S

    measured_peak, model = steps.prepare_case(case, rank)
    optimizer = S.make_optimizer(model.parameters(), lr=case.lr, weight_decay=case.weight_decay,
                                 device_type=device_type)
    link = link_gbps_here(rank.world_size, case.run.fabric) if device_type == "cuda" else None
    config = engine_config(case.run.strategy, micro_batch=case.run.micro_batch, world_size=rank.world_size,
                           link_gbps=link, device=device_type)
    # the process group is already up (train_rank.rank_main): DeepSpeed's comm layer wraps it
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    del model, optimizer  # the engine holds them

    inputs, targets = steps.synthetic_batches(case, rank.rank, case.run.model.vocab_size, rank.device)
    host: list[tuple[float, float, float]] = []  # per step: host seconds in forward, backward, optimizer

    def forward(step: int):
        logits = engine(inputs[step])  # bf16 weights: bf16 logits, as FSDP2's
        return F.cross_entropy(logits.flatten(0, 1).float(), targets[step].flatten())

    def one_step(step: int):  # engine.step(): the optimizer step and zero_grad
        return steps.phased_step(host, lambda: forward(step), engine.backward, engine.step)

    peaks: list[int] = []
    marks: list[float] = []
    total = case.warmup + case.steps
    times, losses = steps.timed_steps(total, one_step, device_type == "cuda", peaks, trace_dir, marks)
    extra = {"deepspeed_version": deepspeed.__version__, "deepspeed_config": config,
             "host_phase_s": steps.host_phases(host[case.warmup:], rank)}
    return steps.step_result(case, rank, times, losses, measured_peak, extra, step_peaks=peaks, marks=marks)
