"""Flags that several verbs take with one meaning: the cost model's profile, the engine, the fabric."""

from __future__ import annotations

import argparse

from topowise.errors import UsageError
from topowise.run import ENGINES, FABRICS


def add_model_arguments(parser: argparse.ArgumentParser, fabric_help: str) -> None:
    parser.add_argument("--fabric", choices=FABRICS, default="nvlink", help=fabric_help)
    parser.add_argument("--profile", metavar="FILE", help="a calibrated cost-model profile (topowise calibrate; "
                        "default: the cached one of this machine, when the topology has its GPUs)")
    parser.add_argument("--force-profile", action="store_true", help="use --profile even if calibrated on another GPU")
    parser.add_argument("--engine", choices=ENGINES, default="pytorch",
                        help="whose ZeRO: pytorch (DDP, ZeroRedundancyOptimizer, FSDP2) or deepspeed (default pytorch)")
    parser.add_argument("--model-profile", metavar="FILE",
                        help="a model profile (topowise profile): its measured compute, activations and host time "
                             "replace the analytic ones; --model module:function names the model profiled")
    parser.add_argument("--power-limit", type=float, metavar="W",
                        help="every GPU's power limit in watts (nvidia-smi -pl), at most the part's rated power: "
                             "compute runs at the clock the limit allows (clock ~ power^(1/3)); default the rated "
                             "power")


def _ascii_number(kind):
    """argparse's type=int or type=float, reading ASCII digits only: int() and float() take any script's
    digits, so --tp ٢ would be 2 and --num-gpus ８ 8, a number nobody meant to type."""
    def parse(text: str):
        if not str(text).isascii():
            raise argparse.ArgumentTypeError(f"{text!r} is not a number in ASCII digits 0-9")
        return kind(text)

    parse.__name__ = kind.__name__  # argparse names the type in its message: "invalid int value"
    return parse


_ASCII_TYPES = {int: _ascii_number(int), float: _ascii_number(float)}


def ascii_numbers(parser: argparse.ArgumentParser) -> None:
    """Every type=int and type=float flag of `parser` and its sub-verbs reads ASCII digits only."""
    for action in parser._actions:
        if action.type in _ASCII_TYPES:
            action.type = _ASCII_TYPES[action.type]
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                ascii_numbers(sub)


def power_limited(topology, args: argparse.Namespace):
    """The topology with --power-limit on its GPUs (a property of the hardware, carried by the node so a
    cluster's nodes all have it); unchanged without the flag."""
    from dataclasses import replace

    from topowise import hardware

    watts = getattr(args, "power_limit", None)
    if watts is None:
        return topology
    hardware.check_power_limit(topology.node.gpu_spec, watts)
    node = replace(topology.node, power_limit_w=watts)
    return node if topology.node is topology else replace(topology, node=node)


def model_from_args(args: argparse.Namespace):
    """--model (a preset, a config.json, module:function), with --model-profile."""
    from topowise.models.spec import load_model

    if getattr(args, "model_profile", None):
        from topowise.costmodel.profiled import load_model_profile, profiled_model

        return profiled_model(load_model_profile(args.model_profile), args.model)
    return load_model(args.model)


def add_checkpointing_arguments(parser: argparse.ArgumentParser) -> None:
    """--checkpointing MODE and --selective-ac-option (torchtitan's activation_checkpoint.mode and
    selective_ac_option); --activation-checkpointing, where a verb has it, stays "full"."""
    from topowise.run import CHECKPOINTING

    parser.add_argument("--checkpointing", choices=CHECKPOINTING, default=None,
                        help="activation checkpointing: none, selective (per op: keep the matmul and attention "
                             "outputs, recompute the rest; or every k-th block, --selective-ac-option k) or full "
                             "(recompute every block); default none, full with --activation-checkpointing")
    parser.add_argument("--selective-ac-option", default=None, metavar="op|K",
                        help="with --checkpointing selective: op (per op, default) or an integer k (every k-th block)")


def checkpointing_from_args(args: argparse.Namespace) -> tuple[str, str]:
    """(mode, selective option) from --checkpointing, --selective-ac-option and --activation-checkpointing."""
    from topowise.run import normalize_checkpointing

    legacy = bool(getattr(args, "activation_checkpointing", False))
    mode = args.checkpointing or ("full" if legacy else "none")
    if legacy and mode != "full":
        raise UsageError(f"--activation-checkpointing means --checkpointing full, not {mode}: give one of them")
    if args.selective_ac_option is not None and mode != "selective":  # given at all, even "op": it would be ignored
        raise UsageError(f"--selective-ac-option applies to --checkpointing selective, not {mode}")
    return normalize_checkpointing(mode, args.selective_ac_option or "op")


def add_mesh_arguments(parser: argparse.ArgumentParser) -> None:
    """--tp, --pp, --cp, --pp-schedule, --virtual-stages, --grad-accum, --no-sequence-parallel (torchtitan's
    [parallelism] degrees, named short)."""
    from topowise.costmodel.pipeline import SCHEDULES

    parser.add_argument("--tp", type=int, default=1, metavar="T", help="tensor-parallel degree (1)")
    parser.add_argument("--pp", type=int, default=1, metavar="P", help="pipeline-parallel degree (1)")
    parser.add_argument("--cp", type=int, default=1, metavar="C", help="context-parallel degree (1)")
    parser.add_argument("--pp-schedule", choices=SCHEDULES, help="pipeline schedule, with --pp (1f1b)")
    parser.add_argument("--virtual-stages", type=int, default=1, metavar="V",
                        help="model chunks per pipeline rank, with interleaved-1f1b (1)")
    parser.add_argument("--grad-accum", type=int, default=1, metavar="M",
                        help="micro-batches per optimizer step (1); the pipeline's micro-batches with --pp")
    parser.add_argument("--no-sequence-parallel", dest="sequence_parallel", action="store_false",
                        help="with --tp: all-reduce whole activations (Megatron without --sequence-parallel); "
                             "default on, as torchtitan's TP plan always runs it")


def mesh_from_args(args: argparse.Namespace) -> dict:
    """The Run keywords of the mesh flags; a flag that would shape nothing at tp 1 or pp 1 is refused."""
    if args.tp == 1 and not args.sequence_parallel:
        raise UsageError("--no-sequence-parallel acts on a tensor-parallel group: add --tp 2 or more, or drop it")
    if args.pp == 1 and (args.pp_schedule is not None or args.virtual_stages != 1):
        flag = "--pp-schedule" if args.pp_schedule is not None else "--virtual-stages"
        raise UsageError(f"{flag} shapes a pipeline: add --pp 2 or more, or drop it")
    return {"tp": args.tp, "pp": args.pp, "cp": args.cp, "pp_schedule": args.pp_schedule or "1f1b",
            "virtual_stages": args.virtual_stages, "grad_accum": args.grad_accum,
            "sequence_parallel": args.sequence_parallel}


def add_wide_argument(parser: argparse.ArgumentParser) -> None:
    """--wide: every column of the tables, however wide the screen (by default a table narrower than the
    screen drops to the columns that answer the question, or turns to one record per block)."""
    parser.add_argument("--wide", action="store_true",
                        help="show every column of the tables, wider than the screen if need be (default: fit the "
                             "screen, or 80 columns when piped unless COLUMNS is set)")


def add_kernel_arguments(parser: argparse.ArgumentParser) -> None:
    """--precision, --fp8-recipe, --loss, --attention (Run's kernel settings; torchtitan's float8 recipe names)."""
    from topowise.run import ATTENTIONS, FP8_RECIPES, KERNEL_DEFAULTS, LOSSES, PRECISIONS

    parser.add_argument("--precision", choices=PRECISIONS, default=KERNEL_DEFAULTS["precision"],
                        help="the block Linears' GEMMs: bf16, or fp8 as torchtitan's float8 (torchao Float8Linear; "
                             "the output layer and attention stay bf16); MFU is then over the fp8 peak (bf16)")
    parser.add_argument("--fp8-recipe", choices=FP8_RECIPES, default=None,
                        help="with --precision fp8: tensorwise (FSDP2 gathers the weights in fp8) or rowwise "
                             "(default tensorwise)")
    parser.add_argument("--loss", choices=LOSSES, default=KERNEL_DEFAULTS["loss"],
                        help="cross-entropy: plain (fp32 over the whole logits, F.cross_entropy(logits.float()); "
                             "torchtitan), chunked (a chunk of tokens at a time: torchtune; llm-foundry's "
                             "fused_crossentropy kernel is priced so) or fused (Liger's fused linear cross-entropy: "
                             "no whole logits) (plain)")
    parser.add_argument("--attention", choices=ATTENTIONS, default=KERNEL_DEFAULTS["attention"],
                        help="flash (fused kernel) or unfused (the S x S scores in memory, as Megatron-LM in 2021) "
                             "(flash)")


def kernels_from_args(args: argparse.Namespace) -> dict:
    """The Run keywords of the kernel flags; --fp8-recipe without --precision fp8 is refused."""
    from topowise.run import KERNEL_DEFAULTS

    precision = getattr(args, "precision", KERNEL_DEFAULTS["precision"])
    recipe = getattr(args, "fp8_recipe", None)
    if recipe is not None and precision != "fp8":
        raise UsageError(f"--fp8-recipe {recipe} applies to --precision fp8, not {precision}")
    return {"precision": precision, "fp8_recipe": recipe or KERNEL_DEFAULTS["fp8_recipe"],
            "loss": getattr(args, "loss", KERNEL_DEFAULTS["loss"]),
            "attention": getattr(args, "attention", KERNEL_DEFAULTS["attention"])}
