"""torchtitan: the `torchtitan.train` overrides that express a plan.

Flag names as in torchtitan's config dataclasses (torchtitan/config/configs.py: ParallelismConfig,
ActivationCheckpointConfig, TrainingConfig; activation_checkpoint.mode none | selective | full and
selective_ac_option "op" or an integer k, as in torchtitan 0.1-0.2). The model itself comes from your torchtitan config
(`--module ... --config ...`, or `--job.config_file` in older releases); these flags override it.
"""

from __future__ import annotations

import shlex

from topowise.export.plan import LaunchPlan


def plan_checkpointing(plan: LaunchPlan) -> tuple[str, str]:
    """(mode, selective_ac_option) of the plan."""
    return plan.run.checkpointing, plan.run.selective_ac_option


def torchtitan_args(plan: LaunchPlan) -> list[str]:
    """The strategy as (data_parallel_replicate_degree, data_parallel_shard_degree,
    fsdp_reshard_after_forward). torchtitan has no ZeRO-1: its nearest is FSDP that keeps parameters
    gathered after forward (ZeRO-2)."""
    n, spec = plan.nproc, plan.spec
    if not spec.sharded:  # ddp
        replicate, shard, reshard = n, 1, None
    elif spec.replicated and plan.run.shard_group_size:  # hsdp
        replicate, shard, reshard = n // plan.run.shard_group_size, plan.run.shard_group_size, "always"
    else:
        replicate, shard, reshard = 1, n, "always" if spec.reshard_after_forward else "never"
    args = [
        "--parallelism.data_parallel_replicate_degree", str(replicate),
        "--parallelism.data_parallel_shard_degree", str(shard),
    ]
    if reshard and shard > 1:
        args += ["--parallelism.fsdp_reshard_after_forward", reshard]
    mode, option = plan_checkpointing(plan)
    args += ["--activation_checkpoint.mode", mode]
    if mode == "selective":
        args += ["--activation_checkpoint.selective_ac_option", option]
    args += [
        "--training.local_batch_size", str(plan.run.micro_batch),
        "--training.seq_len", str(plan.run.seq_len),
    ]
    return args


def torchtitan_command(plan: LaunchPlan) -> str:
    lines = [f"# topowise plan: {plan.summary()}"]
    lines += [f"# warning: {w}" for w in plan.warnings]
    if plan.spec.sharded and not plan.spec.fsdp:  # zero1
        lines.append("# torchtitan has no ZeRO-1; FSDP with reshard_after_forward=never (ZeRO-2) is the nearest")
    lines.append("# add your model's config: --module <recipes module> --config <function> (e.g. llama3_8b)")
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in plan.env.items())
    head = f"{env} NGPU={plan.nproc} torchrun --standalone --nnodes=1 --nproc-per-node={plan.nproc} -m torchtitan.train"
    args = torchtitan_args(plan)
    pairs = [f"  {args[i]} {shlex.quote(args[i + 1])}" for i in range(0, len(args), 2)]
    lines.append(" \\\n".join([head] + pairs))
    return "\n".join(lines) + "\n"
