"""`topowise plan --mesh`: the fastest tp x pp x cp x data-parallel meshes for one global batch
(planner/mesh_search.py)."""

from __future__ import annotations

import argparse
import json

from topowise.units import GIB


def launch_plan(pred, topo, why: str):
    """The best mesh as an export's LaunchPlan (its nodes, the network's kind and NICs where it spans nodes)."""
    from topowise.export import LaunchPlan

    nodes = len(topo.nodes_spanned(pred.run.gpus))
    network = getattr(topo, "network", None)
    return LaunchPlan(run=pred.run, topology=topo.name, step_time_s=pred.step_time_s, tokens_per_s=pred.tokens_per_s,
                      peak_memory_bytes=pred.memory.peak_bytes, gpu_memory_bytes=pred.memory.gpu_memory_bytes,
                      islands_spanned=pred.islands_spanned, node_gpus=getattr(topo, "gpus_per_node", topo.num_gpus),
                      why=why, num_nodes=nodes, network=network.kind if network and nodes > 1 else "",
                      nic_names=tuple(n.name for n in topo.node.nics) if network and nodes > 1 else ())


def export_best(kind: str, found, topo) -> str:
    """The fastest mesh the launcher can run, as `kind` (a faster one it cannot, zb-h1 say, is passed over); the
    fastest one's refusal when it runs none."""
    from topowise.errors import UsageError
    from topowise.export import render

    first = None
    for pred in found.ranked:
        try:
            return render(kind, launch_plan(pred, topo, found.why))
        except UsageError as exc:
            first = first or exc
    raise first


def run_mesh(args: argparse.Namespace, top: int | None, inputs, global_batch: int | None) -> int:
    """plan --mesh: `inputs` is plan's checked (model, topology, planner keywords)."""
    from topowise.planner.mesh_search import search_mesh

    model, topo, kwargs = inputs
    gpus = kwargs["gpus"] or (topo.best_subset(kwargs["num_gpus"]) if kwargs["num_gpus"] else topo.indices)
    found = search_mesh(topo, model, tuple(gpus), seq_len=kwargs["seq_len"],
                        global_batch=global_batch, profile=kwargs["profile"],
                        top=top)
    if found.best is None:  # an answer, not bad input: exit 1, one line
        import sys

        print(f"topowise: nothing fits {model.name} on {len(gpus)} GPUs of {topo.name} with any mesh at --seq-len "
              f"{kwargs['seq_len']} ({found.considered} considered, {found.pruned_by_memory} over the GPU's memory); "
              "try more GPUs or nodes, a shorter --seq-len or a smaller --global-batch", file=sys.stderr)
        return 1
    exported = export_best(args.export, found, topo) if args.export else None
    if args.json:
        print(json.dumps({"why": found.why, "considered": found.considered, "pruned_by_memory": found.pruned_by_memory,
                          "plans": [p.to_dict() for p in found.ranked],
                          **({"export": {"kind": args.export, "text": exported}} if exported else {})}, indent=2))
        return 0
    show_meshes(model, gpus, topo, found, stderr=exported is not None, wide=getattr(args, "wide", False))
    if exported is not None:
        print(exported, end="")
    return 0


def show_meshes(model, gpus, topo, found, stderr: bool = False, wide: bool = False) -> None:
    """The ranked meshes as a table fitted to the screen (on stderr beside an export on stdout)."""
    from rich import box

    from topowise.cli.console import Col, mesh_cell, print_table, prose, screen_console

    out = screen_console(stderr=stderr)
    best = found.best.run
    prose(out, f"{model.name} on {len(gpus)} GPUs of {topo.name}, global batch {best.global_batch} x "
               f"{best.seq_len:,} tokens: {found.considered} meshes considered, {found.pruned_by_memory} do not fit; "
               f"{found.why}")
    cols = [Col("mesh"), Col("strategy"), Col("schedule"), Col("recompute", key=False), Col("mbs", "right", key=False),
            Col("m", "right", key=False), Col("step s", "right"),
            Col("tokens/s", "right"), Col("MFU", "right", key=False), Col("peak GiB", "right"),
            Col("peak\nstage", "right", key=False)]
    rows = [[mesh_cell(r.tp, r.pp, r.cp, r.dp), r.strategy, r.pp_schedule if r.pp > 1 else "-", r.checkpointing,
             str(r.micro_batch), str(r.grad_accum), f"{p.step_time_s:.2f}", f"{p.tokens_per_s:,.0f}", f"{p.mfu:.1%}",
             f"{p.memory.peak_bytes / GIB:.1f}", str((p.mesh or {}).get("peak_stage", 0))]
            for p in found.ranked for r in (p.run,)]
    print_table(out, cols, rows, wide=wide, box=box.SIMPLE_HEAD, show_edge=False, collapse_padding=True)
    prose(out, "mesh: tensor (tp), context (cp), pipeline (pp) and data-parallel (dp) degrees, - for data "
               "parallelism alone; mbs: micro-batch; m: micro-batches per step")
