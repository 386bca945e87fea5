"""Megatron-LM: the `pretrain_gpt.py` arguments that express a plan.

Argument names as in Megatron-LM's megatron/training/arguments.py (and its docs' parallelism guide):
--tensor-model-parallel-size, --pipeline-model-parallel-size, --num-layers-per-virtual-pipeline-stage,
--context-parallel-size, --sequence-parallel, --micro-batch-size, --global-batch-size, --recompute-granularity
(full with --recompute-method uniform / block and --recompute-num-layers; selective: Megatron's own, the attention
core). Megatron's rank order "tp-cp-ep-dp-pp" is the mesh topowise placed (topology/mesh.py). The data-parallel
strategy: ddp as is, zero1 and zero2 as --use-distributed-optimizer (Megatron shards the optimizer states and
the fp32 main parameters), zero3 as --use-torch-fsdp2; hsdp has no Megatron argument.
"""

from __future__ import annotations

import shlex

from topowise.costmodel.pipeline import split_layers
from topowise.errors import UsageError
from topowise.export.plan import LaunchPlan


def recompute_args(plan: LaunchPlan) -> list[str]:
    """Checkpointing as Megatron's recompute arguments: full every layer (uniform, 1 layer a chunk); every k-th
    block as block recompute of that share of each stage's layers; per-op selective as Megatron's selective."""
    run = plan.run
    if run.checkpointing == "full":
        return ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]
    if run.checkpointing == "selective" and run.selective_ac_option != "op":
        per_stage = run.model.num_layers // (run.pp * run.virtual_stages)
        return ["--recompute-granularity", "full", "--recompute-method", "block", "--recompute-num-layers",
                str(-(-per_stage // int(run.selective_ac_option)))]
    if run.checkpointing == "selective":
        return ["--recompute-granularity", "selective"]
    return []


def megatron_args(plan: LaunchPlan) -> list[str]:
    """The plan as Megatron-LM arguments (flags alone are one element; others a name then its value)."""
    run, model = plan.run, plan.run.model
    if run.spec.replicated:
        raise UsageError("an hsdp plan has no Megatron-LM argument (Megatron shards over the whole data-parallel "
                         "group): plan zero1, zero2 or zero3 for a Megatron export")
    if run.pp_schedule == "zb-h1":
        raise UsageError("Megatron-LM runs 1f1b and interleaved-1f1b, not zb-h1: plan with --pp-schedule 1f1b or "
                         "interleaved-1f1b for a Megatron export")
    # Megatron splits layers evenly over pp x virtual stages (refused with the arithmetic otherwise)
    split = split_layers(model.num_layers, run.pp, run.virtual_stages, even=True)
    args = ["--tensor-model-parallel-size", str(run.tp), "--pipeline-model-parallel-size", str(run.pp)]
    if run.virtual_stages > 1:
        args += ["--num-layers-per-virtual-pipeline-stage", str(split.layers[0])]
    args += ["--context-parallel-size", str(run.cp)]
    if run.sequence_parallel and run.tp > 1:
        args.append("--sequence-parallel")
    args += ["--micro-batch-size", str(run.micro_batch), "--global-batch-size", str(run.global_batch)]
    args += recompute_args(plan)
    if run.strategy in ("zero1", "zero2"):
        args.append("--use-distributed-optimizer")
    elif run.strategy == "zero3":
        args.append("--use-torch-fsdp2")
    args += ["--num-layers", str(model.num_layers), "--hidden-size", str(model.hidden_size),
             "--num-attention-heads", str(model.num_heads), "--ffn-hidden-size", str(model.intermediate_size),
             "--seq-length", str(run.seq_len), "--max-position-embeddings", str(max(run.seq_len,
                                                                                    model.context_length))]
    if model.num_kv_heads != model.num_heads:
        args += ["--group-query-attention", "--num-query-groups", str(model.num_kv_heads)]
    if model.family != "gpt2":  # a Llama block: RMSNorm, SwiGLU, rotary positions, no biases, untied output
        args += ["--normalization", "RMSNorm", "--swiglu", "--position-embedding-type", "rope",
                 "--disable-bias-linear"]
        if not model.tied_embeddings:
            args.append("--untie-embeddings-and-output-weights")
    args.append("--bf16")
    return args


def megatron_command(plan: LaunchPlan) -> str:
    """One torchrun command per node running Megatron-LM's pretrain_gpt.py with the plan's arguments."""
    lines = [f"# topowise plan: {plan.summary()}"]
    lines += [f"# warning: {w}" for w in plan.warnings]
    lines.append("# add your data and tokenizer: --data-path ... --tokenizer-type ... (Megatron-LM's pretrain_gpt.py)")
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in plan.env.items())
    nodes = f"--nnodes={plan.num_nodes} --node-rank=$NODE_RANK --master-addr=$MASTER_ADDR --master-port=29500" \
        if plan.num_nodes > 1 else "--standalone --nnodes=1"
    head = f"{env} torchrun {nodes} --nproc-per-node={plan.nproc_per_node} pretrain_gpt.py"
    args = megatron_args(plan)
    pairs, i = [], 0
    while i < len(args):
        if i + 1 < len(args) and not args[i + 1].startswith("--"):
            pairs.append(f"  {args[i]} {shlex.quote(args[i + 1])}")
            i += 2
        else:
            pairs.append(f"  {args[i]}")
            i += 1
    lines.append(" \\\n".join([head] + pairs))
    return "\n".join(lines) + "\n"
