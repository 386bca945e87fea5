"""DeepSpeed: a config JSON (ZeRO stage, buckets sized to the link, bf16, micro-batch).

ddp -> stage 0, zero1/2/3 -> stage 1/2/3. hsdp -> stage 3 with ZeRO++ hpZ (`zero_hpz_partition_size`
= the shard group): DeepSpeed's nearest form, a secondary parameter shard inside each NVLink island
so the backward all-gathers stay there (MiCS, the exact HSDP analogue, is gone from DeepSpeed 0.19).

Buckets: a collective of S bytes over a link of B bytes/s with start-up latency alpha runs at
S / (S + alpha B) of the link rate, so S = 9 alpha B reaches 90%. Larger buckets buy nothing but
memory and a later start of the overlap.
"""

from __future__ import annotations

import json

from topowise.export import LaunchPlan

# Start-up latency of an NCCL collective: all_reduce on 2x H200 NV18 takes 79.5 us at 16 MiB and
# 3.26 ms at 1 GiB (facts.md nccl-tests table), a line t = alpha + S/B with alpha = 29 us, B = 332 GB/s.
ALPHA_S = 29e-6
TARGET_EFFICIENCY = 0.9
MIN_BUCKET_ELEMENTS = 1_000_000  # below this, per-bucket launch overhead dominates whatever the link
MAX_BUCKET_ELEMENTS = 500_000_000  # DeepSpeed's own default reduce/allgather bucket size
STAGES = {"ddp": 0, "zero1": 1, "zero2": 2, "zero3": 3, "hsdp": 3}


def bucket_elements(link_gbps: float | None, bytes_per_element: int) -> int:
    """Elements per bucket so one collective reaches TARGET_EFFICIENCY of the link (rounded to 1e6)."""
    if not link_gbps or link_gbps == float("inf"):
        return MAX_BUCKET_ELEMENTS  # one GPU or an unknown link: DeepSpeed's default
    ratio = TARGET_EFFICIENCY / (1 - TARGET_EFFICIENCY)
    size_bytes = ratio * ALPHA_S * link_gbps * 1e9
    elements = round(size_bytes / bytes_per_element / 1e6) * 1_000_000
    return int(min(max(elements, MIN_BUCKET_ELEMENTS), MAX_BUCKET_ELEMENTS))


def zero_config(strategy: str, *, micro_batch: int, link_gbps: float | None, nproc: int,
                shard_group_size: int | None = None, gradient_clipping: float = 1.0) -> dict:
    """The DeepSpeed config for one strategy from plain values (the export and `bench train
    --engine deepspeed` both use it). hpZ only where it changes something: hsdp with more than one
    shard group (a shard group of the whole world is plain ZeRO-3)."""
    stage = STAGES[strategy]
    zero: dict = {"stage": stage}
    if stage > 0:
        zero.update(overlap_comm=True, contiguous_gradients=True,
                    reduce_bucket_size=bucket_elements(link_gbps, 2))  # bf16 gradients reduced (DeepSpeed's default)
    if stage in (1, 2):
        zero["allgather_bucket_size"] = bucket_elements(link_gbps, 2)  # bf16 parameters gathered
    if stage == 3:
        zero["stage3_prefetch_bucket_size"] = bucket_elements(link_gbps, 2)
    if strategy == "hsdp" and shard_group_size and shard_group_size < nproc:
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
    return zero_config(plan.strategy, micro_batch=plan.micro_batch, link_gbps=plan.link_gbps, nproc=plan.nproc,
                       shard_group_size=plan.shard_group_size)


def deepspeed_config_json(plan: LaunchPlan) -> str:
    return json.dumps(deepspeed_config(plan), indent=2) + "\n"
