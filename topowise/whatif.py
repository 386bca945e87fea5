"""What-if networks: the same job on several networks between the nodes, side by side.

The cluster keeps its shape (node count, node preset, racks and regions where it has them); only the
network between the nodes changes, with that network's own NIC count rule (one NIC per GPU for
InfiniBand and RoCE, one per node for Ethernet unless the name says, e.g. eth-100x4). For each
network: tokens/s (total and per GPU), the share of the step spent waiting on the network, the best
strategy (plan) or the asked one (predict), and, with prices, the cost per million tokens.

"Waiting on the network" is the exposed communication of the collectives that cross nodes
(costmodel/exposure.py: each phase's exposed remainder shared among its hideable collectives by time).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from topowise import hardware
from topowise.costmodel.exposure import exposed_s
from topowise.errors import UsageError
from topowise.prices import Cost, Prices, job_cost
from topowise.topology import cluster as cluster_mod

INSIDE_NODE_LINKS = frozenset({"NV", "PCIe", "local"})  # comm.group_link's classes; anything else is a network


def known_networks() -> tuple[str, ...]:
    """The network kinds a cluster name may end in (hardware.NIC_GBPS's rows)."""
    return tuple(hardware.NIC_GBPS)


def parse_networks(text: str) -> tuple[str, ...]:
    """"ib-ndr,roce-400,eth-100x2" -> the names, each checked; an unknown one is a one-line error."""
    names = tuple(n.strip() for n in str(text).split(",") if n.strip())
    if not names:
        raise UsageError(f"--network names no network; give some of: {', '.join(known_networks())}")
    for name in names:
        if cluster_mod.network_spec(name) is None:
            raise UsageError(f"--network {name!r}: unknown network; known: {', '.join(known_networks())} "
                             "(optionally with a NIC count per node, e.g. eth-100x2)")
    if len(set(names)) != len(names):
        raise UsageError("--network names a network twice")
    return names


def check_prices_networks(prices: Prices) -> None:
    unknown = [k for k in prices.network_node_hour_usd if cluster_mod.network_spec(k) is None]
    if unknown:
        raise UsageError(f"--network-node-hour-usd {unknown[0]!r}: unknown network; known: "
                         f"{', '.join(known_networks())}")


def require_cluster(wiring, what: str = "--network"):
    """The wiring as a cluster of two or more nodes: a network what-if on one node compares nothing."""
    if not isinstance(wiring, cluster_mod.Cluster) or wiring.num_nodes < 2:
        nodes = getattr(wiring, "num_nodes", 1)
        raise UsageError(f"{what} compares networks between nodes, but {wiring.name!r} is {nodes} node: no network "
                         "is used; give a cluster, e.g. '4x hgx-h100-8+ib-ndr'")
    return wiring


def on_network(cluster, name: str):
    """The same cluster with network `name` between its nodes (its own NIC count rule), renamed to say so."""
    spec = cluster_mod.network_spec(name)
    if spec is None:
        raise UsageError(f"unknown network {name!r}; known: {', '.join(known_networks())}")
    if spec.nics_per_node == 0:  # one NIC per GPU
        spec = replace(spec, nics_per_node=cluster.gpus_per_node)
    plain = not getattr(cluster, "regions", ()) and getattr(cluster.layout, "is_default", True)
    label = f"{cluster.num_nodes}x {cluster.node.name}+{name}" if plain else f"{cluster.name} [network {name}]"
    return replace(cluster, network=spec, name=label, source=f"{cluster.source}; network swapped to {name} (what-if)")


def is_network(c) -> bool:
    return c.link not in INSIDE_NODE_LINKS


def network_wait_s(pred) -> float:
    """Of the predicted step, the exposed communication of collectives that cross nodes (costmodel/exposure.py)."""
    return exposed_s(pred, is_network)


@dataclass(frozen=True)
class NetworkOutcome:
    """One network's row: the job on the cluster with that network."""

    network: str  # as asked: "ib-ndr", "eth-100x2"
    label: str
    cluster: str
    nics_per_node: int
    node_gbps: float  # GB/s per direction of one node's NICs together
    strategy: str | None  # None: nothing fits
    shard_group_size: int | None = None
    micro_batch: int | None = None
    activation_checkpointing: bool | None = None
    gpus: int = 0
    nodes: int = 0
    step_time_s: float | None = None
    tokens_per_s: float | None = None
    tokens_per_s_per_gpu: float | None = None
    network_wait_s: float | None = None
    cost: Cost | None = None
    note: str = ""

    @property
    def network_wait_fraction(self) -> float | None:
        if self.network_wait_s is None or not self.step_time_s:
            return None
        return self.network_wait_s / self.step_time_s

    def to_dict(self) -> dict:
        return {"network": self.network, "label": self.label, "cluster": self.cluster,
                "nics_per_node": self.nics_per_node, "node_gbps": self.node_gbps, "strategy": self.strategy,
                "shard_group_size": self.shard_group_size, "micro_batch": self.micro_batch,
                "activation_checkpointing": self.activation_checkpointing, "gpus": self.gpus, "nodes": self.nodes,
                "step_time_s": self.step_time_s, "tokens_per_s": self.tokens_per_s,
                "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu, "network_wait_s": self.network_wait_s,
                "network_wait_fraction": self.network_wait_fraction,
                "cost": self.cost.to_dict() if self.cost else None, "note": self.note}

    @classmethod
    def from_dict(cls, d: dict) -> NetworkOutcome:
        keep = {k: v for k, v in d.items() if k not in ("network_wait_fraction", "cost")}
        return cls(**keep, cost=Cost(**d["cost"]) if d.get("cost") else None)


def outcome(name: str, cluster, pred, prices: Prices | None, note: str = "") -> NetworkOutcome:
    """The row for one prediction (None: nothing fits) on `cluster`, the cluster with network `name`;
    prices None: the default prices."""
    net = cluster.network
    base = NetworkOutcome(name, net.label, cluster.name, net.nics_per_node, net.node_gbps, None, note=note)
    if pred is None:
        return base
    nodes = len(cluster.nodes_spanned(pred.gpus))
    cost = job_cost(prices or Prices(), gpu_name=cluster.gpu_spec.name, gpus=len(pred.gpus), nodes=nodes,
                    network_kind=net.kind if nodes > 1 else None, nics_per_node=net.nics_per_node,
                    tokens_per_s=pred.tokens_per_s)
    return replace(base, strategy=pred.strategy, shard_group_size=pred.shard_group_size,
                   micro_batch=pred.micro_batch, activation_checkpointing=pred.activation_checkpointing,
                   gpus=len(pred.gpus), nodes=nodes, step_time_s=pred.step_time_s, tokens_per_s=pred.tokens_per_s,
                   tokens_per_s_per_gpu=pred.tokens_per_s_per_gpu, network_wait_s=network_wait_s(pred), cost=cost)


def compare_plans(model, cluster, networks: tuple[str, ...], *, prices: Prices | None = None,
                  **plan_args) -> tuple[NetworkOutcome, ...]:
    """The planner's best plan on the cluster with each network (plan_args as planner.search.plan takes)."""
    from topowise.planner.search import plan

    require_cluster(cluster)
    out = []
    for name in networks:
        wired = on_network(cluster, name)
        result = plan(model, wired, **dict(plan_args, top=1))
        best = result.best.prediction if result.best else None
        out.append(outcome(name, wired, best, prices, "" if best else "nothing fits"))
    return tuple(out)


def compare_predictions(run, cluster, networks: tuple[str, ...], *, profile=None,
                        prices: Prices | None = None) -> tuple[NetworkOutcome, ...]:
    """One run (strategy, GPUs, micro-batch) predicted on the cluster with each network."""
    from topowise.costmodel.predict import predict

    require_cluster(cluster)
    out = []
    for name in networks:
        wired = on_network(cluster, name)
        pred = predict(run, wired, profile)
        note = "" if pred.fits else "does not fit in GPU memory"
        out.append(outcome(name, wired, pred, prices, note))
    return tuple(out)


def single_node_note(outcomes) -> str | None:
    """When every row runs inside one node (the job fits there), the network changes nothing: say so."""
    rows = [o for o in outcomes if o.strategy is not None]
    if rows and all(o.nodes <= 1 for o in rows):
        return ("every network's best plan stays inside one node, so the network between nodes is not used "
                "and the rows are alike; give --num-gpus larger than a node to compare networks")
    return None
