"""accelerate: a config YAML for `accelerate launch --config_file FILE`.

From the strategy's flags (topowise.run): ddp -> MULTI_GPU; the FSDP strategies (zero2/zero3/hsdp) ->
the FSDP plugin with fsdp_version 2 and the strategy's reshard_after_forward (False for zero2, True for
zero3 and hsdp, as in topowise's own benchmark), a replicated one (hsdp) adding a parallelism_config
with the replicate x shard mesh; zero1 (sharded, not FSDP) -> the DeepSpeed plugin at its stage, 1
(FSDP has no ZeRO-1). A plan predicted as DeepSpeed runs ZeRO (plan --engine deepspeed) uses the
DeepSpeed plugin at its stage for every sharded strategy.
Written without PyYAML: the values are flat scalars, so a small writer is enough.
"""

from __future__ import annotations

import json

from topowise.export.plan import LaunchPlan


def accelerate_settings(plan: LaunchPlan) -> dict:
    """The config as a dict (what the YAML says)."""
    config: dict = {
        "compute_environment": "LOCAL_MACHINE",
        "debug": False,
        "distributed_type": "MULTI_GPU",
        "downcast_bf16": "no",
        "gpu_ids": ",".join(str(g) for g in plan.run.gpus),
        "machine_rank": 0,
        "main_training_function": "main",
        "mixed_precision": "bf16",
        "num_machines": 1,
        "num_processes": plan.nproc,
        "rdzv_backend": "static",
        "same_network": True,
        "use_cpu": False,
    }
    spec = plan.spec
    if plan.nproc == 1:
        config["distributed_type"] = "NO"
    elif config_is_deepspeed(plan):
        config["distributed_type"] = "DEEPSPEED"
        config["deepspeed_config"] = {
            "zero_stage": spec.deepspeed_stage,
            "gradient_accumulation_steps": 1,
            "offload_optimizer_device": "none",
            "offload_param_device": "none",
            "zero3_init_flag": False,
        }
    elif spec.fsdp:
        config["distributed_type"] = "FSDP"
        config["fsdp_config"] = {
            "fsdp_version": 2,
            "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "fsdp_reshard_after_forward": spec.reshard_after_forward,
            "fsdp_state_dict_type": "SHARDED_STATE_DICT",
            "fsdp_offload_params": False,
            "fsdp_cpu_ram_efficient_loading": False,
            "fsdp_activation_checkpointing": plan.run.activation_checkpointing,
        }
        if spec.replicated and plan.run.shard_group_size:
            config["parallelism_config"] = {
                "parallelism_config_dp_replicate_size": plan.nproc // plan.run.shard_group_size,
                "parallelism_config_dp_shard_size": plan.run.shard_group_size,
                "parallelism_config_tp_size": 1,
                "parallelism_config_cp_size": 1,
            }
    return config


def config_is_deepspeed(plan: LaunchPlan) -> bool:
    """Whether the config runs DeepSpeed (zero1 always; every sharded strategy under --engine deepspeed)."""
    return plan.nproc > 1 and bool(plan.spec.sharded) and (not plan.spec.fsdp or plan.run.engine == "deepspeed")


def _scalar(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(str(value))  # a double-quoted JSON string is a valid YAML string


def accelerate_config(plan: LaunchPlan) -> str:
    lines = [f"# topowise plan: {plan.summary()}"]
    lines += [f"# warning: {w}" for w in plan.warnings]
    if plan.run.activation_checkpointing and config_is_deepspeed(plan):
        lines.append("# activation checkpointing: enable it in the model (e.g. gradient_checkpointing_enable())")
    if getattr(plan, "checkpointing", "") == "selective" and not config_is_deepspeed(plan):
        lines.append("# selective checkpointing is no accelerate option: fsdp_activation_checkpointing is full "
                     "(less memory, more recompute than planned); for per-op selective, wrap the blocks with "
                     "torch.utils.checkpoint.create_selective_checkpoint_contexts")
    if plan.spec.fsdp and plan.spec.reshard_after_forward and not config_is_deepspeed(plan) and plan.nproc > 1:
        # accelerate's fsdp2_prepare_model shards [final norm, lm_head] as one unit with reshard False, where
        # the prediction (topowise's bench) reshards every unit after forward
        lines.append("# accelerate keeps the final norm and output layer gathered from forward to backward: "
                     "2 bytes per output-layer parameter per GPU above the plan's memory")
    for key, value in accelerate_settings(plan).items():
        if isinstance(value, dict):
            lines.append(f"{key}:")
            lines += [f"  {k}: {_scalar(v)}" for k, v in value.items()]
        else:
            lines.append(f"{key}: {_scalar(value)}")
    return "\n".join(lines) + "\n"
