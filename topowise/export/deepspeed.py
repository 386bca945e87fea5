"""DeepSpeed: a config JSON (ZeRO stage, buckets sized to the link, bf16, micro-batch).

Each strategy runs as its `deepspeed_stage` in the registry (topowise.run): ddp -> stage 0, zero1/2/3
-> stage 1/2/3, hsdp -> stage 3 with ZeRO++ hpZ (`zero_hpz_partition_size` = the shard group):
DeepSpeed's nearest form, a secondary parameter shard inside each NVLink island so the backward
all-gathers stay there (MiCS, the exact HSDP analogue, is gone from DeepSpeed 0.19).

Buckets are sized to the link by the cost model (`costmodel.deepspeed.bucket_elements`), which also
predicts what DeepSpeed does with them.
"""

from __future__ import annotations

import json

from topowise.costmodel.deepspeed import bucket_elements
from topowise.export.plan import LaunchPlan
from topowise.run import STRATEGIES


def zero_config(strategy: str, *, micro_batch: int, link_gbps: float | None, nproc: int,
                shard_group_size: int | None = None, gradient_clipping: float = 1.0) -> dict:
    """The DeepSpeed config for one strategy from plain values (the export and `bench train
    --engine deepspeed` both use it). hpZ only where it changes something: hsdp with more than one
    shard group (a shard group of the whole world is plain ZeRO-3)."""
    spec = STRATEGIES[strategy]
    stage = spec.deepspeed_stage or 0
    zero: dict = {"stage": stage}
    if stage > 0:
        zero.update(overlap_comm=True, contiguous_gradients=True,
                    reduce_bucket_size=bucket_elements(link_gbps, 2))  # bf16 gradients reduced (DeepSpeed's default)
    if stage in (1, 2):
        zero["allgather_bucket_size"] = bucket_elements(link_gbps, 2)  # bf16 parameters gathered
    if stage == 3:
        zero["stage3_prefetch_bucket_size"] = bucket_elements(link_gbps, 2)
    if spec.replicated and shard_group_size and shard_group_size < nproc:
        zero["zero_hpz_partition_size"] = shard_group_size
    config = {
        "train_micro_batch_size_per_gpu": micro_batch,
        "gradient_accumulation_steps": 1,
        "bf16": {"enabled": True},
        "zero_optimization": zero,
        # always written: DeepSpeed 0.19 clips at 1.0 when the key is absent; 0 turns clipping off
        "gradient_clipping": gradient_clipping,
        "wall_clock_breakdown": False,
    }
    return config


def deepspeed_config(plan: LaunchPlan) -> dict:
    return zero_config(plan.run.strategy, micro_batch=plan.run.micro_batch, link_gbps=plan.link_gbps, nproc=plan.nproc,
                       shard_group_size=plan.run.shard_group_size)


def deepspeed_config_json(plan: LaunchPlan) -> str:
    return json.dumps(deepspeed_config(plan), indent=2) + "\n"
