"""`topowise predict`: step time and memory per GPU for one strategy on one GPU placement."""

from __future__ import annotations

import argparse
import json

from topowise.cli.flags import (
    add_checkpointing_arguments,
    add_kernel_arguments,
    add_mesh_arguments,
    add_model_arguments,
    add_wide_argument,
)
from topowise.cli.whatif_flags import add_whatif_arguments, prices_from_args
from topowise.planner.explain import misaligned_vocab_note
from topowise.units import GIB


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, metavar="M",
                        help="a model preset, a Hugging Face config.json, or module:function (docs/model-profile.md)")
    parser.add_argument("--topology", required=True, metavar="T",
                        help="a topology preset, `topowise topo --json` output or `nvidia-smi topo -m` text")
    parser.add_argument("--gpu-name", metavar="NAME",
                        help="GPU model for `nvidia-smi topo -m` text, which does not name it (e.g. H100)")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--gpus", metavar="LIST", help="the GPUs to use, e.g. 0,1 or 0-3")
    which.add_argument("--num-gpus", type=int, metavar="K", help="use the K GPUs with the fastest ring")
    parser.add_argument("--strategy", required=True, metavar="S", help="ddp, zero1, zero2, zero3 (fsdp) or hsdp")
    parser.add_argument("--micro-batch", type=int, default=1, metavar="B", help="sequences per GPU per step (1)")
    parser.add_argument("--seq-len", type=int, default=4096, metavar="L", help="tokens per sequence (4096)")
    parser.add_argument("--activation-checkpointing", action="store_true",
                        help="recompute each block in backward (= --checkpointing full)")
    add_checkpointing_arguments(parser)
    parser.add_argument("--compile", action="store_true",
                        help="torch.compile each block (as bench train --compile): fused elementwise work, fewer "
                             "saved activations, a compile time paid once per launch")
    parser.add_argument("--shard-group-size", type=int, metavar="G",
                        help="hsdp: GPUs per shard group (default: the GPUs per NVLink island)")
    add_model_arguments(parser, "pcie: predict as if NVLink were not there")
    add_mesh_arguments(parser)
    add_kernel_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print JSON")
    add_whatif_arguments(parser)
    add_wide_argument(parser)


def prediction_from_args(args: argparse.Namespace):
    """(Prediction, Profile): parse and check the arguments, then predict (no rendering here)."""
    from topowise.costmodel.predict import predict

    run, topo, profile = run_from_args(args)
    return predict(run, topo, profile), profile


def run_from_args(args: argparse.Namespace):
    """(Run, topology, Profile) from the predict flags, checked."""
    from topowise.cli.flags import (
        checkpointing_from_args,
        kernels_from_args,
        mesh_from_args,
        model_from_args,
        power_limited,
    )
    from topowise.costmodel.profile import default_profile
    from topowise.costmodel.profile_store import resolve_profile
    from topowise.errors import UsageError
    from topowise.run import Run
    from topowise.topology import load_topology
    from topowise.topology.model import parse_gpu_list

    model = model_from_args(args)  # a preset, a config.json, or module:function (with --model-profile)
    topo = power_limited(load_topology(args.topology, args.gpu_name, need_gpu_model=True), args)
    if args.gpus is not None:
        gpus = parse_gpu_list(args.gpus, topo)
    else:
        if args.num_gpus < 1 or args.num_gpus > topo.num_gpus:
            raise UsageError(f"--num-gpus {args.num_gpus}: topology {topo.name!r} has {topo.num_gpus} GPUs; "
                             f"choose 1 to {topo.num_gpus}")
        gpus = topo.best_subset(args.num_gpus)
    mode, option = checkpointing_from_args(args)
    run = Run(model=model, gpus=gpus, strategy=args.strategy, micro_batch=args.micro_batch, seq_len=args.seq_len,
              checkpointing=mode, selective_ac_option=option, fabric=args.fabric,
              shard_group_size=args.shard_group_size, engine=args.engine, compile=args.compile,
              **mesh_from_args(args), **kernels_from_args(args))
    profile = resolve_profile(args.profile, [topo.gpus[0].name], args.force_profile) or default_profile()
    return run, topo, profile


def run(args: argparse.Namespace) -> int:
    if getattr(args, "network", None) is not None:
        return run_networks(args)
    prices_from_args(args)  # a wrong price says so first, then a right one is refused without --network
    refuse_network_flags(args)
    from topowise.api import predict as predict_run
    from topowise.costmodel.profiled import profiled_summary

    run_, topo, profile = run_from_args(args)
    result = predict_run(run_, topo, profile)  # the API's Prediction: --json prints its to_dict()
    prediction = result.detail
    measured = profiled_summary(prediction)  # None unless --model-profile: then the file, and estimate or not
    if args.json:
        data = result.to_dict()
        print(json.dumps(dict(data, **({"model_profile": measured} if measured else {})), indent=2))
    else:
        from topowise.costmodel.memory import reserved_bytes

        render(prediction, profile.memory_headroom, profile.host_spread,
               reserved=reserved_bytes(prediction.memory, prediction.run, profile))
        if measured:
            print(f"from model profile {measured['file']}: {measured['note']}")
    return 0


def refuse_network_flags(args: argparse.Namespace) -> None:
    """Without --network the prices and --wide would do nothing: they price and fit its comparison table
    (predict's own tables are printed whole)."""
    from topowise.errors import UsageError

    for flag, given in (("--gpu-hour-usd", args.gpu_hour_usd is not None),
                        ("--network-node-hour-usd", args.network_node_hour_usd is not None),
                        ("--wide", getattr(args, "wide", False))):
        if given:
            what = "fits" if flag == "--wide" else "prices"
            raise UsageError(f"{flag} {what} --network's comparison table (e.g. --network ib-ndr,eth-100 on a "
                             f"cluster): add --network, or drop {flag}")


def run_networks(args: argparse.Namespace) -> int:
    """predict --network a,b,...: the same run (strategy, GPUs, micro-batch) on each network, side by side."""
    from topowise.cli.plan import show_networks
    from topowise.whatif import compare_predictions, parse_networks, require_cluster

    networks = parse_networks(args.network)
    prices = prices_from_args(args)
    run_, topo, profile = run_from_args(args)
    require_cluster(topo)
    outcomes = compare_predictions(run_, topo, networks, profile=profile, prices=prices)
    notes = []
    if len(topo.nodes_spanned(run_.gpus)) < 2:
        notes.append(f"GPUs {','.join(map(str, run_.gpus))} lie on one node: the network between nodes is not "
                     "used, so every row is alike; give more GPUs (--num-gpus) to compare networks")
    if args.json:
        print(json.dumps({"model": {"name": run_.model.name, "params": run_.model.params}, "topology": topo.name,
                          "strategy": run_.strategy, "gpus": list(run_.gpus),
                          "networks": [o.to_dict() for o in outcomes], "prices": prices.to_dict(),
                          "notes": notes}, indent=2))
        return 0
    show_networks(f"{run_.model.name}: {run_.strategy} on {len(run_.gpus)} GPUs of {topo.name}, micro-batch "
                  f"{run_.micro_batch}, with each network between the nodes", outcomes, notes, wide=args.wide)
    return 0


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.2f}"


def _gib(nbytes: float) -> str:
    return f"{nbytes / GIB:,.2f}"


def headline(p) -> list[str]:
    """What was predicted, in three short lines: model and placement, the batch, the wiring."""
    from topowise.planner.explain import gpu_list, param_count

    engine = " as DeepSpeed runs it" if p.engine == "deepspeed" else ""
    hsdp = f" in shard groups of {p.shard_group_size}" if p.shard_group_size else ""
    ac = f", {p.run.checkpoint_words} activation checkpointing" if p.activation_checkpointing else ""
    ac += f", compiled (first step +{p.compile_s:.0f} s, once per launch)" if p.run.compile else ""
    islands = f"{p.islands_spanned} NVLink island{'s' if p.islands_spanned != 1 else ''} spanned"
    if p.bottleneck_gbps is None or p.bottleneck_gbps == float("inf"):
        wiring = "one GPU: no collectives between GPUs"
    else:
        wiring = f"{islands}; ring at {p.bottleneck_gbps:g} GB/s per direction (the slowest link's line rate)"
    where = f"GPU {p.gpus[0]}" if len(p.gpus) == 1 else f"GPUs {gpu_list(p.gpus)}"
    return [f"{p.model_name} ({param_count(p.params)} parameters): {p.strategy}{engine} on {where} "
            f"of {p.topology}{hsdp}",
            f"micro-batch {p.micro_batch} x {p.seq_len:,} tokens{ac}; fabric {p.fabric}{kernel_words(p.run)}",
            wiring]


def kernel_words(run) -> str:
    """"; fp8 (tensorwise), loss fused, attention unfused": the kernel settings away from their defaults."""
    from topowise.run import KERNEL_DEFAULTS

    words = []
    if run.precision != KERNEL_DEFAULTS["precision"]:
        words.append(f"{run.precision} ({run.fp8_recipe})")
    words += [f"{k} {getattr(run, k)}" for k in ("loss", "attention") if getattr(run, k) != KERNEL_DEFAULTS[k]]
    return f"; {', '.join(words)}" if words else ""


def mesh_line(p) -> str:
    """"tp 8 x pp 4 x cp 1 x dp 2 (shard 2, replicate 1); interleaved-1f1b, 2 virtual stages, 8 micro-batches a
    step (global batch 16); bubble 313 ms (13%); memory peaks on pipeline rank 0"."""
    m = p.mesh
    pipeline = ""
    if m["pp"] > 1:
        virtual = f", {m['virtual_stages']} virtual stages" if m["virtual_stages"] > 1 else ""
        pipeline = (f"; {m['schedule']}{virtual}, layers per stage {','.join(map(str, m['layers_per_stage']))}, "
                    f"bubble {_ms(m['bubble_s'])} ms ({m['bubble_fraction']:.0%}); memory peaks on pipeline rank "
                    f"{m['peak_stage']}")
    sp = ", sequence parallel" if m.get("sequence_parallel") else ""
    micro = "micro-batches" if m["grad_accum"] > 1 else "micro-batch"
    return (f"mesh tp {m['tp']}{sp} x pp {m['pp']} x cp {m['cp']} x dp {p.run.dp} (shard {m['dp_shard']}, "
            f"replicate {m['dp_replicate']}); {m['grad_accum']} {micro} a step (global batch {m['global_batch']})"
            f"{pipeline}")


def memory_verdict(p, headroom: float) -> str:
    """"fits: peak 71.53 GiB of the 83.16 GiB usable (87.54 GiB less 5% kept free)": the verdict is
    against the usable part, so the headroom is said with it."""
    m = p.memory
    peak, have = m.peak_bytes / GIB, m.gpu_memory_bytes / GIB
    usable = have * (1.0 - headroom)
    of = (f"the {usable:,.2f} GiB usable ({have:,.2f} GiB less {headroom:.0%} kept free)" if headroom > 0
          else f"the GPU's {have:,.2f} GiB")
    if p.fits:
        return f"fits: peak {peak:,.2f} GiB of {of}"
    return f"does not fit: peak {peak:,.2f} GiB is {peak - usable:,.2f} GiB over {of}"


def compiled_memory_note(p) -> str:
    """What compiling changes in the saved activations, and why (memory.compiled_saved_less)."""
    from topowise.costmodel.memory import compiled_saved_less, ddp_compiled_pieces

    model, under_ddp = p.run.model, not p.run.spec.fsdp
    less = compiled_saved_less(model, under_ddp)
    note = f"compiled: each block keeps {less:,.0f} bytes per token fewer than eager"
    if under_ddp:
        note += (f"; under DDP Dynamo compiles it in {len(ddp_compiled_pieces(model))} pieces cut at DDP's gradient "
                 "buckets and recomputes only inside a piece")
    return note


def _table(title: str):
    from rich import box
    from rich.table import Table

    # at least as wide as its title, which rich would otherwise wrap over a narrow table's width
    return Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, collapse_padding=True,
                 pad_edge=False, min_width=len(title))


def render(p, headroom: float | None = None, host_spread: float | None = None, reserved: int | None = None) -> None:
    """The prediction as tables; `headroom`: the profile's share of GPU memory kept free, `host_spread`:
    how much the host's speed moves between launches (both the default profile's when not given); `reserved`: what
    nvidia-smi would show (memory.reserved_bytes), a row of its own where it is not the peak."""
    from topowise.cli.console import column, console, print_whole
    from topowise.costmodel.profile import default_profile

    if headroom is None:
        headroom = default_profile().memory_headroom
    out = console()
    first, *rest = headline(p)
    out.print(f"[bold]{first}[/]", highlight=False)
    for line in rest:
        out.print(line, highlight=False)
    if p.mesh:
        out.print(mesh_line(p), highlight=False)
    t = p.time
    time = _table("Step time")
    column(time, "part")
    column(time, "ms", justify="right")
    for name, value in (("compute", t.compute_s), ("memory-bound (loss, casts, copies, elementwise)", t.memory_bound_s),
                        ("optimizer step", t.optimizer_s), ("communication, all", t.comm_s),
                        ("communication, exposed", t.exposed_comm_s),
                        ("host (Python) to issue the step", t.host_s), ("GPU waiting for the host", t.host_wait_s)):
        time.add_row(name, _ms(value))
    time.add_row("[bold]step[/]", f"[bold]{_ms(p.step_time_s)}[/]")
    print_whole(out, time)
    if p.host_bound:
        from topowise.costmodel.host_ops import operators_note
        from topowise.costmodel.step import dispatch_autocast

        lo, hi = p.step_time_range_s
        spread = default_profile().host_spread if host_spread is None else host_spread
        less = ("DeepSpeed's ZeRO-3 issues about twice FSDP2's work per block; its ZeRO-1/2 issue less but "
                "spend some 35 ms in the optimizer step" if p.engine == "deepspeed"
                else "ddp issues less per block than FSDP")
        if p.run.per_op_checkpointing:
            less += "; per-op selective checkpointing runs Python on every operator, every k-th block less"
        ops = operators_note(p.run.model, dispatch_autocast(p.run), p.run.compile)
        if ops:
            less += f"; {ops}"
        out.print(f"[yellow]host-bound: the GPU waits {_ms(t.host_wait_s)} ms per step for Python to issue work "
                  f"(more tokens per step hide it; {less}). The host's speed moves "
                  f"between launches, so expect {_ms(lo)}-{_ms(hi)} ms (the host up to "
                  f"{spread:.0%} faster or slower: the profile's host_spread)[/]", highlight=False)
    peak = f" of {p.mfu_peak_words}" if p.mfu_peak_words else ""
    out.print(f"{p.tokens_per_s:,.0f} tokens/s ({p.tokens_per_s_per_gpu:,.0f} per GPU), MFU {p.mfu:.1%}{peak}",
              highlight=False)
    vocab_note = misaligned_vocab_note(p)
    if vocab_note:
        out.print(f"[yellow]{vocab_note}[/]", highlight=False)
    if t.collectives:
        coll = _table("Collectives per step (group: GPUs in each; GB/s: bus bandwidth)")
        for col, just in (("op", "left"), ("phase", "left"), ("dtype", "left"), ("MB each", "right"),
                          ("count", "right"), ("group", "right"), ("link", "left"), ("GB/s", "right"),
                          ("ms", "right")):
            column(coll, col, justify=just)
        for c in t.collectives:
            coll.add_row(c.op, c.phase, c.dtype, f"{c.bytes / 1e6:,.1f}", str(c.count), str(c.group_size), c.link,
                         f"{c.bandwidth_gbps:,.1f}", _ms(c.time_s))
        print_whole(out, coll)
    m = p.memory
    mem = _table(f"Memory per GPU at the peak ({m.peak_phase})")
    column(mem, "term")
    column(mem, "GiB", justify="right")
    for name, value in (("parameters", m.params_bytes), ("gradients", m.grads_bytes),
                        ("optimizer states", m.optimizer_bytes), ("activations", m.activations_bytes),
                        ("logits and loss", m.logits_bytes)):
        mem.add_row(name, _gib(value))
    for name, value in m.buffers.items():
        mem.add_row(name, _gib(value))
    mem.add_row("allocated (max_memory_allocated)", _gib(m.allocated_bytes))
    mem.add_row("allocator slack", _gib(m.allocator_slack_bytes))
    mem.add_row("CUDA context", _gib(m.cuda_context_bytes))
    if m.first_steps_extra_bytes:
        mem.add_row("step 2 only: DDP bucket rebuild", _gib(m.first_steps_extra_bytes))
    mem.add_row("[bold]peak[/]", f"[bold]{_gib(m.peak_bytes)}[/]")
    if reserved and reserved != m.peak_bytes:
        mem.add_row("reserved as nvidia-smi shows it (FSDP2's cache above allocated)", _gib(reserved))
    mem.add_row("GPU memory", _gib(m.gpu_memory_bytes))
    if headroom > 0:
        mem.add_row(f"usable ({headroom:.0%} kept free)", _gib(m.gpu_memory_bytes * (1.0 - headroom)))
    print_whole(out, mem)
    if p.run.compile:
        out.print(compiled_memory_note(p), highlight=False)
    verdict = memory_verdict(p, headroom)
    style = "green" if p.fits else "red"
    word, _, tail = verdict.partition(":")
    out.print(f"[{style}]{word}[/]:{tail}", highlight=False)

