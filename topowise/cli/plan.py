"""`topowise plan`: rank strategies and GPU placements, say why, export a launch config."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from topowise.cli.flags import add_kernel_arguments, add_model_arguments, add_wide_argument
from topowise.cli.whatif_flags import add_whatif_arguments, prices_from_args
from topowise.errors import UsageError
from topowise.topology.model import ascii_int

EXPORTS = ("torchrun", "slurm", "accelerate", "deepspeed", "torchtitan", "megatron")


def add_plan_arguments(parser: argparse.ArgumentParser, required: bool = True) -> None:
    """The flags that describe what to plan (shared with `topowise launch`)."""
    parser.add_argument("--model", required=required, metavar="M",
                        help="a model preset, a config.json path, or module:function (docs/model-profile.md)")
    parser.add_argument("--topology", required=required, metavar="T", help="a topology preset or file")
    parser.add_argument("--gpu-name", metavar="NAME",
                        help="GPU model for `nvidia-smi topo -m` text, which does not name it (e.g. H100)")
    parser.add_argument("--num-gpus", metavar="K", help="plan for K GPUs (default: each island size and the node)")
    parser.add_argument("--gpus", metavar="LIST", help="plan on exactly these GPUs, e.g. 0,1 or 0-3")
    parser.add_argument("--micro-batch", metavar="B", help="micro-batch per GPU (default: try 1, 2, 4, 8)")
    parser.add_argument("--seq-len", metavar="L", default="4096", help="sequence length (default 4096)")
    parser.add_argument("--compile", action="store_true",
                        help="consider compiled candidates too (torch.compile of each block) and say whether "
                             "compiling changes which strategy wins")
    add_model_arguments(parser, "pcie: as if NVLink were not there (exports set NCCL_P2P_DISABLE=1)")
    add_kernel_arguments(parser)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_plan_arguments(parser)
    parser.add_argument("--top", metavar="N", help="show the N best plans (default 5)")
    parser.add_argument("--export", choices=EXPORTS, help="render the best plan for this launcher")
    parser.add_argument("--out", metavar="FILE", help="write the export here instead of printing it")
    parser.add_argument("--save-plan", metavar="FILE", help="write the best plan as JSON for `topowise launch --plan`")
    parser.add_argument("--json", action="store_true", help="print JSON")
    add_wide_argument(parser)
    add_whatif_arguments(parser)
    parser.add_argument("--mesh", action="store_true",
                        help="search tensor, pipeline and context parallelism too (tp x pp x cp x data-parallel)")
    parser.add_argument("--global-batch", metavar="N",
                        help="with --mesh: sequences per optimizer step (default 2 a GPU)")
    parser.add_argument("--wan-share", metavar="F",
                        help="a cluster across regions: the WAN's share of a step that the reasons size gradient "
                             "accumulation for (default 0.1)")


def whole_number(text: str | None, flag: str) -> int | None:
    """The flag's integer (None when not given); what it must be is for whoever takes it (Run: --micro-batch)."""
    if text is None:
        return None
    try:
        return ascii_int(text)
    except ValueError:
        raise UsageError(f"{flag} {text!r} is not a positive integer (e.g. {flag} 2)") from None


def positive_int(text: str | None, flag: str) -> int | None:
    value = whole_number(text, flag)
    if value is not None and value < 1:
        raise UsageError(f"{flag} {text!r} is not a positive integer (e.g. {flag} 2)")
    return value


def plan_from_args(args: argparse.Namespace, top: int = 5):
    """(PlanResult, Topology) for the plan flags."""
    from topowise.planner.search import plan

    model, topo, kwargs = plan_inputs(args)
    return plan(model, topo, top=top, **kwargs), topo


def plan_inputs(args: argparse.Namespace):
    """(model, topology, the planner's keyword arguments but `top`) from the plan flags, checked."""
    from topowise.cli.flags import model_from_args, power_limited
    from topowise.planner.regions import region_groups
    from topowise.topology import load_topology
    from topowise.topology.model import parse_gpu_list

    num_gpus = positive_int(args.num_gpus, "--num-gpus")
    micro_batch = whole_number(args.micro_batch, "--micro-batch")  # Run says what a micro-batch must be
    seq_len = positive_int(args.seq_len, "--seq-len")
    model = model_from_args(args)  # a preset, a config.json, or module:function (with --model-profile)
    if getattr(model, "model_profile", None) is not None:  # measured at one micro-batch: plan at that one
        micro_batch = model.model_profile.micro_batch if micro_batch is None else micro_batch
    topo = power_limited(load_topology(args.topology, getattr(args, "gpu_name", None), need_gpu_model=True), args)
    if num_gpus is not None and num_gpus > topo.num_gpus:
        raise UsageError(f"--num-gpus {num_gpus} is more than topology {topo.name!r} has ({topo.num_gpus} GPUs)")
    gpus = parse_gpu_list(args.gpus, topo) if args.gpus else None
    from topowise.costmodel.profile_store import resolve_profile

    if getattr(args, "force_profile", False) and not args.profile:  # it forces a --profile FILE onto other GPUs
        raise UsageError("--force-profile applies to a --profile FILE calibrated on another GPU: add --profile, "
                         "or drop --force-profile")
    profile = resolve_profile(args.profile, [topo.gpus[0].name], getattr(args, "force_profile", False))
    kwargs = {}
    if getattr(args, "wan_share", None) is not None:
        kwargs["wan_share"] = _fraction(args.wan_share, "--wan-share")
        if not region_groups(topo):  # the WAN's share sizes accumulation across regions; none to size here
            raise UsageError(f"--wan-share applies to a cluster across regions (the WAN's share of a step); "
                             f"{topo.name!r} has one region: drop --wan-share")
    kwargs["compile_choices"] = compile_choices(model, bool(getattr(args, "compile", False)))
    kwargs.update(planned_kernels(args))
    return model, topo, {**kwargs, "num_gpus": num_gpus, "gpus": gpus,
                         "micro_batches": None if micro_batch is None else (micro_batch,), "seq_len": seq_len,
                         "profile": profile, "fabric": args.fabric, "engine": getattr(args, "engine", "pytorch")}


def planned_kernels(args: argparse.Namespace) -> dict:
    """{"kernels": Run keywords} where --precision, --loss or --attention is not its default; {} otherwise."""
    from topowise.cli.flags import kernels_from_args
    from topowise.run import KERNEL_DEFAULTS

    kernels = kernels_from_args(args)
    if kernels == KERNEL_DEFAULTS:
        return {}
    if getattr(args, "mesh", False):
        raise UsageError("--precision, --loss and --attention are not planned with --mesh yet: predict a mesh with "
                         "`topowise predict --tp ... --precision ...`")
    return {"kernels": kernels}


def compile_choices(model, asked: bool) -> tuple[bool, ...]:
    """Eager only; with --compile eager and compiled; a model profile: how it was profiled (its times are
    of that one)."""
    profiled = getattr(model, "model_profile", None)
    if profiled is not None:
        if asked and not profiled.compile:
            raise UsageError(f"{profiled.path} was profiled without --compile: profile again with --compile to "
                             "plan compiled runs")
        return (bool(profiled.compile),)
    return (False, True) if asked else (False,)


def _fraction(text: str, flag: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < 1:
        raise UsageError(f"{flag} {text!r}: give a fraction between 0 and 1, e.g. {flag} 0.1")
    return value


def refuse_idle_flags(args: argparse.Namespace) -> None:
    """A flag that would do nothing beside the others is refused, naming what it needs: --network compares
    the best data-parallel plan on each network, --mesh searches meshes for one global batch."""
    if args.network is not None:
        network_idle = {"--mesh": args.mesh, "--global-batch": args.global_batch is not None,
                        "--top": args.top is not None, "--wan-share": args.wan_share is not None}
        for flag in (f for f, idle in network_idle.items() if idle):
            raise UsageError(f"{flag} does nothing with --network, which compares the best data-parallel plan on "
                             f"each network: drop {flag}, or drop --network to plan on one network")
    elif args.mesh:
        mesh_idle = (  # (flag, given, why the mesh search leaves it out)
            ("--micro-batch", args.micro_batch is not None, "the mesh search tries micro-batches itself"),
            ("--compile", args.compile, "the mesh search plans eager runs"),
            ("--engine", args.engine != "pytorch", "the mesh search plans PyTorch"),
            ("--fabric", args.fabric != "nvlink", "the mesh search prices the topology's own links"),
            ("--wan-share", args.wan_share is not None, "the mesh search does not size accumulation for a WAN"),
            ("--save-plan", args.save_plan is not None, "a mesh is not saved as a plan yet"),
            ("--out", args.out is not None, "a mesh's export prints on stdout"))
        for flag, _, why in (m for m in mesh_idle if m[1]):
            raise UsageError(f"{flag} is not planned with --mesh ({why}): drop {flag}, or drop --mesh "
                             "to plan data parallelism")
    elif args.global_batch is not None:
        raise UsageError("--global-batch sets the sequences per optimizer step of the mesh search: add --mesh "
                         "(without it, plan ranks data-parallel runs of one micro-batch per GPU per step)")
    prices = [f for f, v in (("--gpu-hour-usd", args.gpu_hour_usd), ("--network-node-hour-usd",
                                                                       args.network_node_hour_usd)) if v is not None]
    if prices and args.network is None:
        raise UsageError(f"{prices[0]} prices the --network comparison: add --network (e.g. --network "
                         f"ib-ndr,eth-100 on a cluster), or drop {prices[0]}")


def run(args: argparse.Namespace) -> int:
    from topowise.export import LaunchPlan, export_notes, render

    prices_from_args(args)  # a wrong price says so first, then a right one is refused without --network
    refuse_idle_flags(args)
    top = 5 if args.top is None else positive_int(args.top, "--top")
    if getattr(args, "network", None) is not None:
        return run_networks(args)
    if getattr(args, "mesh", False):
        from topowise.cli.plan_mesh import run_mesh

        return run_mesh(args, top, plan_inputs(args), positive_int(args.global_batch, "--global-batch"))
    if args.out and not args.export:
        raise UsageError(f"--out {args.out} writes an export: give --export too ({', '.join(EXPORTS)}), "
                         "or --save-plan FILE to write the plan for `topowise launch --plan`")
    result, topo = plan_from_args(args, top=top)
    chosen = LaunchPlan.from_plan(result.best, result, topo) if result.best else None
    if chosen is not None and args.save_plan:  # the exports name the saved plan: TOPOWISE_PLAN
        chosen = chosen.with_path(args.save_plan)
    exported = render(args.export, chosen) if args.export and chosen else None
    notes = export_notes(args.export, chosen) if exported is not None else ()
    # an export printed on stdout (to be redirected into a file) is all that stdout holds: the rest to stderr
    to_stderr = bool(args.export) and not args.out
    if (args.export or args.save_plan) and chosen is None:
        _show(result, args.json, wide=args.wide)  # nothing is exported: stdout may hold why
        raise UsageError("nothing fits, so there is no plan to export or save (see the suggestion above)")
    if args.save_plan:
        _write(args.save_plan, chosen.to_json() + "\n")
    if exported is not None and args.out:
        _write(args.out, exported)
    from topowise.costmodel.profiled import profiled_summary

    measured = profiled_summary(result.plans[0].prediction) if result.plans else None  # --model-profile
    if args.json:
        data = _versioned(result)
        if measured:
            data["model_profile"] = measured
        if exported is not None:
            data["export"] = {"kind": args.export, "text": exported, "path": args.out, "notes": list(notes)}
        if args.save_plan:
            data["saved_plan"] = args.save_plan
        print(json.dumps(data, indent=2))
        return _nothing_fits(result, topo)
    out = _show(result, False, stderr=to_stderr, wide=args.wide)
    if measured:
        _prose(out, f"from model profile {measured['file']}: {measured['note']}")
    if exported is not None and not args.out:
        print(exported, end="")
    for what, path in (("plan", args.save_plan), (args.export, args.out)):
        if path:
            out.print(f"wrote {what} to {path}", soft_wrap=True, markup=False, highlight=False)  # a path: whole
    for note in notes:
        _prose(out, f"# {note}", rest="# ")
    return _nothing_fits(result, topo)


def _nothing_fits(result, topo) -> int:
    """0 where a plan fits; else 1, with one line on stderr: why, and what to try."""
    if result.best is not None:
        return 0
    print(f"topowise: {nothing_fits_line(result, topo)}", file=sys.stderr)
    return 1


def nothing_fits_line(result, topo) -> str:
    """Why nothing fits (the closest candidate's memory) and what would change it, each only where it
    was not tried already: more GPUs, checkpointing, a smaller micro-batch, a shorter sequence."""
    closest = result.infeasible[0] if result.infeasible else None
    gpus = max((len(i.run.gpus) for i in result.infeasible), default=0)
    why = (f"nothing fits {result.model} on {gpus} GPU{'s' if gpus != 1 else ''} of {result.topology}"
           if gpus else f"nothing fits {result.model} on {result.topology}")
    if closest is not None:
        why += (f": the closest, {closest.run.strategy} at micro-batch {closest.run.micro_batch}, needs "
                f"{closest.peak_memory_bytes / 2**30:,.1f} of {closest.gpu_memory_bytes / 2**30:,.1f} GiB")
    tries = []
    if gpus < topo.num_gpus and "Nothing on one" not in (result.suggestion or ""):  # planner.search.suggest
        tries.append("more GPUs (--num-gpus)")
    else:
        tries.append(f"more nodes (e.g. --topology '{2 * getattr(topo, 'num_nodes', 1)}x {topo.node.name}+ib-ndr')")
    if closest is not None and closest.run.checkpointing != "full":
        tries.append("--checkpointing full")
    if closest is not None and closest.run.micro_batch > 1:
        tries.append("a smaller --micro-batch")
    tries += ["a shorter --seq-len", "--mesh (tensor and pipeline parallelism)"]
    return f"{why}; try {', '.join(tries[:-1])} or {tries[-1]}"


def run_networks(args: argparse.Namespace) -> int:
    """plan --network a,b,...: the best plan of the same job on each network, side by side."""
    from topowise.whatif import compare_plans, parse_networks, require_cluster, single_node_note

    if args.export or args.save_plan or args.out:
        raise UsageError("--network compares networks; --export, --out and --save-plan write one plan: name the "
                         "network in --topology (e.g. '4x hgx-h100-8+roce-400') and drop --network")
    networks = parse_networks(args.network)
    prices = prices_from_args(args)
    model, topo, kwargs = plan_inputs(args)
    require_cluster(topo)
    if kwargs["num_gpus"] is None and kwargs["gpus"] is None:  # the same job: every GPU of the cluster
        kwargs["num_gpus"] = topo.num_gpus
    outcomes = compare_plans(model, topo, networks, prices=prices, **kwargs)
    notes = [n for n in (single_node_note(outcomes),) if n]
    if args.json:
        print(json.dumps({"model": model.name, "topology": topo.name, "seq_len": kwargs["seq_len"],
                          "networks": [o.to_dict() for o in outcomes], "prices": prices.to_dict(),
                          "notes": notes}, indent=2))
        return 0
    count = len(kwargs["gpus"]) if kwargs["gpus"] else kwargs["num_gpus"]
    show_networks(f"{model.name} on {count} GPUs of {topo.name} with each network between its {topo.num_nodes} "
                  "nodes (the best plan on each)", outcomes, notes, wide=args.wide)
    return 0


# the what-if table's headers on a screen: two lines where one would make the table wider
_SCREEN_HEADERS = {"NICs/node": "NICs\n/node", "GB/s/node": "GB/s\n/node", "GPUs (nodes)": "GPUs\n(nodes)",
                   "tokens/s/GPU": "tokens/s\n/GPU", "network wait": "network\nwait", "USD/1M tokens": "USD/1M\ntokens"}
# what the comparison answers (which network, and what it gives and costs): kept at any width
_NETWORK_KEYS = ("network", "GB/s/node", "strategy", "tokens/s", "network wait", "step ms", "USD/1M tokens")


def show_networks(title: str, outcomes, notes=(), wide: bool = False) -> None:
    """The what-if table (report.whatif's rows) with its notes under it, fitted to the screen."""
    from rich import box

    from topowise.cli.console import Col, print_table, screen_console
    from topowise.report.whatif import HEADERS, SOCKET_CAP_NOTE, price_notes, rows, socket_capped

    out = screen_console()
    out.print(f"[bold]{title}[/bold]", highlight=False)
    cols = [Col(_SCREEN_HEADERS.get(h, h), "left" if h in ("network", "strategy", "AC") else "right",
                key=h in _NETWORK_KEYS) for h in HEADERS]
    print_table(out, cols, rows(outcomes), wide=wide, box=box.SIMPLE_HEAD, show_edge=False, collapse_padding=True)
    _prose(out, "network wait: the share of the step spent on exposed communication between nodes; "
                "tokens/s: the whole job")
    capped = [o.network for o in outcomes if socket_capped(o.network)]  # their GB/s/node is NCCL's, not the line's
    socket = [f"{', '.join(capped)}: {SOCKET_CAP_NOTE.removeprefix('socket cap: ')}"] if capped else []
    for note in [*notes, *socket, *price_notes(outcomes)]:
        _prose(out, note, "- ", "  ")


def _write(path: str, text: str) -> None:
    try:
        Path(path).write_text(text)
    except OSError as exc:
        raise UsageError(f"{path}: cannot write ({exc.strerror})") from None


def checkpoint_cell(run) -> str:
    """The AC column, short enough for an 80-column table: torchtitan's mode and option for selective
    checkpointing ("sel:op", "sel:2"); the reasons under the table say it in words."""
    return f"sel:{run.selective_ac_option}" if run.checkpointing == "selective" else run.checkpointing


def _versioned(result) -> dict:
    """`plan --json`: to_dict() of the API's PlanResult for the planner's result (schema_version first)."""
    from topowise.api import PlanResult

    return PlanResult(detail=result).to_dict()


def _show(result, as_json: bool, stderr: bool = False, wide: bool = False):
    """The ranking table, the reasons, the notes and what does not fit; returns the console they went to."""
    if as_json:
        print(json.dumps(_versioned(result), indent=2))
        return None
    from rich import box

    from topowise.cli.console import Col, mesh_cell, print_table, screen_console
    from topowise.planner.explain import all_groups, gpu_list, plan_label

    out = screen_console(stderr=stderr)
    engine = " as DeepSpeed runs ZeRO" if result.engine == "deepspeed" else ""
    out.print(f"[bold]{result.model} on {result.topology}[/bold], seq {result.seq_len}{engine}"
              f"{' (PCIe what-if)' if result.fabric == 'pcie' else ''}", highlight=False)
    if result.plans:
        compiled = any(p.run.compile for p in result.ranked)  # a column only where compiling was a choice
        meshed = any(max(p.run.tp, p.run.pp, p.run.cp) > 1 for p in result.ranked)  # and the mesh where one is
        cols = [Col("#", "right"), *((Col("mesh"),) if meshed else ()), Col("strategy"),
                Col("GPUs (shard groups)"), Col("mb", "right", key=False), Col("AC", key=False),
                *((Col("compile", key=False),) if compiled else ()),
                Col("step ms", "right"), Col("tokens/s", "right"), Col("peak GiB", "right")]
        rows = []
        for i, p in enumerate(result.plans, 1):
            r, pred = p.run, p.prediction
            gpus = all_groups(p.gpus, p.shard_group_size) if p.shard_group_size else gpu_list(p.gpus)
            rows.append([str(i), *((mesh_cell(r.tp, r.pp, r.cp, r.dp),) if meshed else ()), p.strategy, gpus,
                         str(r.micro_batch), checkpoint_cell(r), *(("yes" if r.compile else "no",) if compiled else ()),
                         f"{pred.step_time_s * 1e3:,.0f}", f"{pred.tokens_per_s:,.0f}",
                         f"{pred.memory.peak_bytes / 2**30:.1f}"])
        print_table(out, cols, rows, wide=wide, box=box.SIMPLE_HEAD, show_edge=False, collapse_padding=True)
    _prose(out, rows_sentence(result))
    if result.plans:
        # the reasons are prose: under the table, numbered as its rows
        out.print("[bold]why[/bold]")
        for i, p in enumerate(result.plans, 1):
            _prose(out, p.why, f"{i:>2}. ", "    ")
    for note in result.notes:
        _prose(out, note, "- ", "  ")
    if result.infeasible:
        out.print(f"{len(result.infeasible)} candidates do not fit, e.g.:", highlight=False)
        for i in result.infeasible[:3]:
            # as the reasons name it
            _prose(out, f"{plan_label(i)}, micro-batch {i.run.micro_batch}{i.words}: {i.reason}", "  ", "    ")
    if result.suggestion:
        _prose(out, f"suggestion: {result.suggestion}")
    return out


def _prose(out, text: str, first: str = "", rest: str = "") -> None:
    from topowise.cli.console import prose

    prose(out, text, first, rest)


def rows_sentence(result) -> str:
    """What the rows are: one per distinct choice at its best micro-batch, and how many there were.

    `feasible` counts every micro-batch, checkpointing and placement variant that fits; the table
    shows one row per (strategy, shard groups, GPUs), placements predicted equally fast counted once."""
    choices, shown = len(result.ranked), len(result.plans)
    counted = (f"{result.feasible} of {result.evaluated} predicted candidates fit (micro-batch, checkpointing "
               "and placement variants)")
    if not choices:
        return f"{counted}."
    if choices == 1:
        return (f"{counted}; they are one choice of strategy, shard groups and GPUs, shown at its fastest "
                "micro-batch and checkpointing.")
    which = f"all {choices}" if shown == choices else f"the {shown} fastest of {choices}"
    more = "" if shown == choices else f" (--top {choices} shows all)"
    return (f"{counted}; the rows are {which} distinct choices of strategy, shard groups and GPUs{more}, "
            "each at its fastest micro-batch and checkpointing; placements predicted equally fast count once.")
