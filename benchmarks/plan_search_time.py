"""How long `topowise plan` takes to search: every preset node, and a 64-node cluster if one loads.

    python benchmarks/plan_search_time.py [--repeat 5] [--json]
    python benchmarks/plan_search_time.py --nodes 1000 32768 [--cases topo predict plan mesh]

Times `planner.search.plan` (candidates, predictions, ranking, explanations), not process start-up.
Prints the median of --repeat runs per case, the predictions made and how many fit.

--nodes times large clusters of hgx-h100-8 nodes on InfiniBand NDR instead, once each: `topo`'s report
(cluster_report), `predict` (llama3.1-8b, zero3 on every GPU), `plan` (llama3.1-8b, every GPU count) and
`plan --mesh`'s search (llama3.1-70b on every GPU), each from a fresh load of the cluster.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from topowise.errors import UsageError
from topowise.models.spec import load_model
from topowise.planner.search import plan
from topowise.topology import load_topology
from topowise.topology.presets import preset_names

MODELS = ("llama3.2-1b", "llama3.1-8b", "llama3.1-70b")
CLUSTERS = (("64x hgx-h100-8+ib-ndr", 512), ("64x hgx-h100-8+ib-ndr", None))


def load(topo_name: str):
    """A preset or file; failing that, a cluster name such as "64x hgx-h100-8+ib-ndr" if clusters exist."""
    try:
        return load_topology(topo_name)
    except UsageError:
        try:
            from topowise.topology.cluster import load_cluster
        except ImportError:
            raise UsageError(f"{topo_name!r}: no multi-node topology in this version") from None
        cluster = load_cluster(topo_name)
        if cluster is None:
            raise
        return cluster


def time_case(model_name: str, topo_name: str, num_gpus: int | None, repeat: int) -> dict:
    model, topo = load_model(model_name), load(topo_name)
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = plan(model, topo, num_gpus=num_gpus)
        times.append(time.perf_counter() - start)
    return {"model": model_name, "topology": topo_name, "num_gpus": num_gpus, "median_s": statistics.median(times),
            "max_s": max(times), "evaluated": result.evaluated, "feasible": result.feasible}


LARGE_CASES = ("topo", "predict", "plan", "mesh")


def time_large(nodes: int, case: str) -> dict:
    """One large-cluster case, timed once from a fresh load of the cluster (nothing remembered from another)."""
    from topowise.costmodel.predict import predict
    from topowise.planner.mesh_search import search_mesh
    from topowise.run import Run
    from topowise.topology.cluster import cluster_report, load_cluster

    name = f"{nodes}x hgx-h100-8+ib-ndr"
    start = time.perf_counter()
    cluster = load_cluster(name)
    assert cluster is not None, name
    if case == "topo":
        detail = f"{len(cluster_report(cluster)['islands'])} islands"
    elif case == "predict":
        pred = predict(Run(model=load_model("llama3.1-8b"), gpus=cluster.indices, strategy="zero3"), cluster)
        detail = f"{pred.tokens_per_s:,.0f} tokens/s"
    elif case == "plan":
        result = plan(load_model("llama3.1-8b"), cluster)
        detail = f"{result.evaluated} predicted, {result.feasible} fit"
    else:
        found = search_mesh(cluster, load_model("llama3.1-70b"), cluster.indices, seq_len=4096)
        detail = f"{found.considered} meshes, {found.pruned_by_memory} do not fit"
    return {"nodes": nodes, "case": case, "seconds": time.perf_counter() - start, "detail": detail}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--nodes", type=int, nargs="+", help="time these cluster sizes instead (see above)")
    parser.add_argument("--cases", nargs="+", choices=LARGE_CASES, default=list(LARGE_CASES))
    args = parser.parse_args()
    if args.nodes:
        print(f"{'nodes':>6} {'GPUs':>7} {'case':<8} {'seconds':>8}  result", flush=True)
        for nodes in args.nodes:
            for case in args.cases:
                r = time_large(nodes, case)
                print(f"{nodes:>6} {nodes * 8:>7} {case:<8} {r['seconds']:>8.2f}  {r['detail']}", flush=True)
        return
    rows = []
    for topo_name in preset_names():
        for model_name in MODELS:
            rows.append(time_case(model_name, topo_name, None, args.repeat))
    for topo_name, num_gpus in CLUSTERS:
        try:
            rows.append(time_case("llama3.1-70b", topo_name, num_gpus, 1))
        except (UsageError, AttributeError, TypeError, ValueError) as exc:  # multi-node may not be there yet
            rows.append({"model": "llama3.1-70b", "topology": topo_name, "num_gpus": num_gpus,
                         "error": f"{type(exc).__name__}: {exc}"})
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"{'topology':<24} {'model':<14} {'GPUs':>5} {'median ms':>10} {'max ms':>8} {'predicted':>9} {'fit':>5}")
    for r in rows:
        k = "all" if r["num_gpus"] is None else r["num_gpus"]
        if "error" in r:
            print(f"{r['topology']:<24} {r['model']:<14} {k:>5}  not run: {r['error']}")
            continue
        print(f"{r['topology']:<24} {r['model']:<14} {k:>5} {r['median_s'] * 1e3:>10.1f} {r['max_s'] * 1e3:>8.1f} "
              f"{r['evaluated']:>9} {r['feasible']:>5}")


if __name__ == "__main__":
    main()
