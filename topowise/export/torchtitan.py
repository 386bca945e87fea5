"""torchtitan: the `torchtitan.train` overrides that express a plan.

Flag names as in torchtitan's config dataclasses (torchtitan/config/configs.py: ParallelismConfig,
ActivationCheckpointConfig, TrainingConfig; activation_checkpoint.mode none | selective | full and
selective_ac_option "op" or an integer k, as in torchtitan 0.1-0.2). The model itself comes from your torchtitan config
(`--module ... --config ...`, or `--job.config_file` in older releases); these flags override it.
"""

from __future__ import annotations

import shlex

from topowise.errors import UsageError
from topowise.export.plan import LaunchPlan


def plan_checkpointing(plan: LaunchPlan) -> tuple[str, str]:
    """(mode, selective_ac_option) of the plan."""
    return plan.run.checkpointing, plan.run.selective_ac_option


def torchtitan_args(plan: LaunchPlan) -> list[str]:
    """The strategy as (data_parallel_replicate_degree, data_parallel_shard_degree,
    fsdp_reshard_after_forward). torchtitan has no ZeRO-1: its nearest is FSDP that keeps parameters
    gathered after forward (ZeRO-2)."""
    # the data-parallel GPUs: all of them without tp, pp, cp (a plan-like object without a mesh has no `dp`)
    n, spec = getattr(plan.run, "dp", plan.nproc), plan.spec
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
    if getattr(plan.run, "has_mesh", False) or getattr(plan.run, "grad_accum", 1) > 1:
        args = mesh_args(plan, args)
    return args


# topowise's schedules by torchtitan's names (torch.distributed.pipelining's schedule classes)
SCHEDULE_NAMES = {"1f1b": "1F1B", "interleaved-1f1b": "Interleaved1F1B"}


def mesh_args(plan: LaunchPlan, args: list[str]) -> list[str]:
    """tp, pp (its schedule, micro-batch size and stages), cp and the global batch (torchtitan accumulates
    global / (local x dp) micro-batches; with pp the local batch is split into micro-batches of
    pipeline_parallel_microbatch_size)."""
    run = plan.run
    if run.pp_schedule not in SCHEDULE_NAMES:
        raise UsageError(f"torchtitan has no one-stage-per-rank {run.pp_schedule} schedule (PyTorch's zero-bubble "
                         "schedules run 2 or more stages per rank): plan with --pp-schedule 1f1b or interleaved-1f1b")
    out = args + ["--parallelism.tensor_parallel_degree", str(run.tp),
                  "--parallelism.context_parallel_degree", str(run.cp)]
    if run.pp > 1:
        if "--parallelism.fsdp_reshard_after_forward" in out:  # torchtitan's default keeps the stage gathered with pp
            out[out.index("--parallelism.fsdp_reshard_after_forward") + 1] = "default"
        out += ["--parallelism.pipeline_parallel_degree", str(run.pp),
                "--parallelism.pipeline_parallel_schedule", SCHEDULE_NAMES[run.pp_schedule],
                "--parallelism.pipeline_parallel_microbatch_size", str(run.micro_batch)]
        # torchtitan's default is 2 stages per rank for interleaved schedules; other counts by layers per stage
        if run.virtual_stages not in (1, 2):
            stages = run.pp * run.virtual_stages
            per = -(-(run.model.num_layers + 2) // stages)
            if -(-(run.model.num_layers + 2) // per) != stages:
                raise UsageError(f"torchtitan sets virtual stages by layers per stage: no count gives "
                                 f"{stages} stages over {run.model.num_layers} layers + 2; use 2 virtual stages")
            out += ["--parallelism.pipeline_parallel_layers_per_stage", str(per)]
        local = run.micro_batch * run.grad_accum  # the pipeline's micro-batches, one optimizer step
        out[out.index("--training.local_batch_size") + 1] = str(local)
    out += ["--training.global_batch_size", str(run.global_batch)]
    return out


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
