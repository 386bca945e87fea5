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
    from topowise.errors import UsageError
    from topowise.planner.mesh_search import search_mesh

    model, topo, kwargs = inputs
    gpus = kwargs["gpus"] or (topo.best_subset(kwargs["num_gpus"]) if kwargs["num_gpus"] else topo.indices)
    found = search_mesh(topo, model, tuple(gpus), seq_len=kwargs["seq_len"],
                        global_batch=global_batch, profile=kwargs["profile"],
                        top=top)
    if found.best is None:
        raise UsageError(f"no mesh of {model.name} fits {len(gpus)} GPUs of {topo.name} at --seq-len "
                         f"{kwargs['seq_len']}: give more GPUs or a shorter sequence")
    exported = export_best(args.export, found, topo) if args.export else None
    if args.json:
        print(json.dumps({"why": found.why, "considered": found.considered, "pruned_by_memory": found.pruned_by_memory,
                          "plans": [p.to_dict() for p in found.ranked],
                          **({"export": {"kind": args.export, "text": exported}} if exported else {})}, indent=2))
        return 0
    best = found.best.run
    print(f"{model.name} on {len(gpus)} GPUs of {topo.name}, global batch {best.global_batch} x {best.seq_len:,} "
          f"tokens: {found.considered} meshes considered, {found.pruned_by_memory} do not fit; {found.why}")
    print(f"{'tp':>3} {'pp':>3} {'cp':>3} {'dp':>4} {'strategy':>8} {'recompute':>9} {'mbs':>3} {'m':>4} "
          f"{'schedule':>16} {'step s':>8} {'tokens/s':>10} {'MFU':>6} {'peak GiB':>8} {'peak stage':>10}")
    for p in found.ranked:
        r, mesh = p.run, p.mesh or {}
        print(f"{r.tp:>3} {r.pp:>3} {r.cp:>3} {r.dp:>4} {r.strategy:>8} {r.checkpointing:>9} {r.micro_batch:>3} "
              f"{r.grad_accum:>4} {r.pp_schedule if r.pp > 1 else '-':>16} {p.step_time_s:>8.2f} "
              f"{p.tokens_per_s:>10,.0f} {p.mfu:>6.1%} {p.memory.peak_bytes / GIB:>8.1f} "
              f"{mesh.get('peak_stage', 0):>10}")
    if exported is not None:
        print(exported, end="")
    return 0
