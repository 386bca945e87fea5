"""What-if networks: the same job on several networks between the nodes (topowise.whatif, --network)."""

import json

import pytest

from topowise.cli.main import main
from topowise.costmodel.predict import predict
from topowise.errors import UsageError
from topowise.models.spec import load_model
from topowise.run import Run
from topowise.topology import load_topology
from topowise.whatif import (
    compare_plans,
    compare_predictions,
    network_wait_s,
    on_network,
    parse_networks,
    require_cluster,
)

CLUSTER = "4x hgx-h100-8+ib-ndr"


def fails(capsys, argv) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("topowise: error: ") and err.count("\n") == 1 and "Traceback" not in err
    return err


def test_swapping_the_network_keeps_the_shape_and_takes_each_networks_nic_rule():
    cluster = load_topology(CLUSTER)
    eth = on_network(cluster, "eth-100")
    assert (eth.num_nodes, eth.gpus_per_node, eth.node.name) == (4, 8, "hgx-h100-8")
    assert eth.network.kind == "eth-100" and eth.network.nics_per_node == 1  # one port per node
    assert on_network(eth, "ib-ndr").network.nics_per_node == 8  # one NIC per GPU again
    assert on_network(cluster, "eth-100x4").network.nics_per_node == 4
    assert eth.name == "4x hgx-h100-8+eth-100"


def test_unknown_or_repeated_network_names_are_refused_with_the_known_ones():
    with pytest.raises(UsageError, match="unknown network; known: .*ib-ndr.*eth-100"):
        parse_networks("ib-ndr,token-ring")
    with pytest.raises(UsageError, match="twice"):
        parse_networks("ib-ndr,ib-ndr")
    assert parse_networks(" ib-ndr , eth-100x2 ") == ("ib-ndr", "eth-100x2")


def test_one_node_uses_no_network():
    with pytest.raises(UsageError, match="no network is used"):
        require_cluster(load_topology("hgx-h100-8"))
    with pytest.raises(UsageError, match="no network is used"):
        require_cluster(load_topology("1x hgx-h100-8+ib-ndr"))


def test_network_wait_is_the_exposed_communication_when_every_collective_crosses_nodes():
    model, cluster = load_model("llama3.2-1b"), load_topology(CLUSTER)
    slow = on_network(cluster, "eth-100")
    pred = predict(Run(model, tuple(range(32)), "zero3"), slow)
    assert all(c.link == "NET" for c in pred.time.collectives)
    assert network_wait_s(pred) == pytest.approx(pred.time.exposed_comm_s)
    inside = predict(Run(model, tuple(range(8)), "zero3"), slow)  # one node: no network
    assert network_wait_s(inside) == 0.0 and inside.time.exposed_comm_s > 0


def test_hsdp_waits_on_the_network_only_for_its_cross_node_all_reduce():
    model, cluster = load_model("llama3.2-1b"), on_network(load_topology(CLUSTER), "eth-100")
    pred = predict(Run(model, tuple(range(32)), "hsdp", shard_group_size=8), cluster)
    assert {c.link for c in pred.time.collectives if c.op == "all_reduce"} == {"NET"}
    assert 0 < network_wait_s(pred) < pred.time.exposed_comm_s + 1e-12


def test_a_slower_network_never_gives_more_tokens_or_less_waiting():
    model, cluster = load_model("llama3.2-1b"), load_topology(CLUSTER)
    run = Run(model, tuple(range(32)), "zero2")
    rows = compare_predictions(run, cluster, ("ib-ndr", "roce-200", "eth-100"))
    speeds = [r.tokens_per_s for r in rows]
    waits = [r.network_wait_fraction for r in rows]
    assert speeds == sorted(speeds, reverse=True) and waits == sorted(waits)
    assert rows[2].network_wait_fraction > 0.3  # 12 GB/s per node for 8 GPUs


def test_plan_on_each_network_takes_the_best_plan_of_each():
    model, cluster = load_model("llama3.2-1b"), load_topology(CLUSTER)
    rows = compare_plans(model, cluster, ("ib-ndr", "eth-100"), num_gpus=32, micro_batches=(1,))
    assert [r.network for r in rows] == ["ib-ndr", "eth-100"]
    assert all(r.gpus == 32 and r.nodes == 4 for r in rows)
    assert rows[0].tokens_per_s > rows[1].tokens_per_s
    assert rows[0].cost.usd_per_million_tokens < rows[1].cost.usd_per_million_tokens  # H100 prices known


def test_plan_network_json(capsys):
    assert main(["plan", "--model", "llama3.2-1b", "--topology", CLUSTER, "--num-gpus", "32", "--micro-batch", "1",
                 "--network", "ib-ndr,eth-100", "--gpu-hour-usd", "2", "--network-node-hour-usd",
                 "ib-ndr=1,eth-100=0.5", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    rows = {r["network"]: r for r in data["networks"]}
    assert set(rows) == {"ib-ndr", "eth-100"}
    for key in ("tokens_per_s", "tokens_per_s_per_gpu", "network_wait_fraction", "strategy", "cost"):
        assert key in rows["ib-ndr"]
    ib = rows["ib-ndr"]
    assert ib["cost"]["usd_per_hour"] == pytest.approx(32 * 2 + 4 * 1)
    assert ib["cost"]["usd_per_million_tokens"] == pytest.approx(68 / (ib["tokens_per_s"] * 3600) * 1e6)


def test_predict_network_table(capsys):
    assert main(["predict", "--model", "llama3.2-1b", "--topology", CLUSTER, "--num-gpus", "32", "--strategy",
                 "zero2", "--network", "ib-ndr,eth-100"]) == 0
    out = capsys.readouterr().out
    assert "network wait" in out and "eth-100" in out and "USD/1M" in out  # a two-line header on a screen


@pytest.mark.parametrize("argv,match", [
    (["plan", "--model", "tiny", "--topology", CLUSTER, "--network", "eth-7"], "unknown network; known:"),
    (["plan", "--model", "tiny", "--topology", "hgx-h100-8", "--network", "ib-ndr"], "no network is used"),
    (["predict", "--model", "tiny", "--topology", "hgx-h100-8", "--num-gpus", "2", "--strategy", "ddp",
      "--network", "ib-ndr"], "no network is used"),
    (["plan", "--model", "tiny", "--topology", CLUSTER, "--network", "ib-ndr", "--export", "slurm"], "--network"),
    (["plan", "--model", "tiny", "--topology", CLUSTER, "--network", "ib-ndr", "--gpu-hour-usd", "cheap"],
     "not a price"),
    (["plan", "--model", "tiny", "--topology", CLUSTER, "--network", "ib-ndr", "--network-node-hour-usd",
      "fddi=3"], "unknown network"),
], ids=["unknown", "one-node", "predict-one-node", "export", "bad-price", "price-for-unknown-network"])
def test_network_what_if_refusals(argv, match, capsys):
    assert match in fails(capsys, argv)
