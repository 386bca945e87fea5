import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topowise import hardware
from topowise.errors import UsageError
from topowise.topology.cluster import Cluster, load_cluster, make_cluster, parse_cluster_name
from topowise.topology.fabric import NetworkSpec
from topowise.topology.model import Wiring
from topowise.topology.presets import load_preset, preset_names

EXAMPLES = ["4x hgx-h100-8+ib-ndr", "2x h100-nvl-8+roce-200", "4x pcie-l40s-8+eth-100", "3x h200-x2+ib-hdr"]


def test_name_parsing():
    assert parse_cluster_name("4x hgx-h100-8+ib-ndr") == (4, "hgx-h100-8", "ib-ndr")
    assert parse_cluster_name("2x pcie-l40s-8+eth-100x2") == (2, "pcie-l40s-8", "eth-100x2")
    assert parse_cluster_name("hgx-h100-8") is None
    assert load_cluster("hgx-h100-8") is None  # a plain node preset is not a cluster


def test_hgx_ndr_defaults_one_nic_per_gpu():
    c = load_cluster("4x hgx-h100-8+ib-ndr")
    assert (c.num_nodes, c.gpus_per_node, c.num_gpus) == (4, 8, 32)
    assert c.network == NetworkSpec("ib-ndr", 8, hardware.NIC_GBPS["ib-ndr"], True)
    assert c.network_gbps_per_gpu == hardware.NIC_GBPS["ib-ndr"]
    assert c.name == "4x hgx-h100-8+ib-ndr"


def test_ethernet_default_and_explicit_count():
    one = load_cluster("4x pcie-l40s-8+eth-100")
    four = load_cluster("4x pcie-l40s-8+eth-100x4")
    assert one.network.nics_per_node == 1 and not one.network.rail_optimized
    assert four.network_gbps_per_gpu == pytest.approx(4 * one.network_gbps_per_gpu)
    assert one.network_gbps_per_gpu == pytest.approx(hardware.NIC_GBPS["eth-100"] / 8)


@pytest.mark.parametrize("text,msg", [("4x no-such-node+ib-ndr", "unknown node preset"),
                                      ("4x hgx-h100-8+carrier-pigeon", "unknown network"),
                                      ("0x hgx-h100-8+ib-ndr", "at least 1")])
def test_bad_cluster_names(text, msg):
    with pytest.raises(UsageError, match=msg):
        load_cluster(text)


def test_global_numbering_and_links():
    c = load_cluster("2x h100-nvl-8+roce-200")
    node = load_preset("h100-nvl-8")
    assert c.node_of(7) == 0 and c.node_of(8) == 1
    assert c.nodes_spanned([0, 9, 15]) == (0, 1)
    # inside node 1 the link is node-local link (0, 1) renumbered
    inner = c.link(8, 9)
    assert (inner.a, inner.b, inner.kind, inner.gbps) == (8, 9, "NV", node.link(0, 1).gbps)
    cross = c.link(3, 12)
    assert cross.kind == "NET" and cross.gbps == c.network_gbps_per_gpu
    assert c.gpu(13).index == 13 and c.gpu(13).name == node.gpu(5).name
    with pytest.raises(UsageError, match="not in cluster"):
        c.gpu(16)


def test_islands_are_each_nodes_islands_shifted():
    c = load_cluster("2x h100-nvl-8+roce-200")
    assert c.islands() == ((0, 1), (2, 3), (4, 5), (6, 7), (8, 9), (10, 11), (12, 13), (14, 15))
    assert c.island_of(11) == (10, 11)
    assert c.islands_spanned([1, 9]) == ((0, 1), (8, 9))


def test_bottleneck_across_nodes_is_min_of_node_ring_and_nics():
    c = load_cluster("2x dgx-a100-8+ib-hdr")
    # DGX A100 x N with 8x HDR 200G: ~192 GB/s busbw, the sum of the node's NICs (NVIDIA/nccl issue 1576)
    assert c.bottleneck_gbps(c.indices) == pytest.approx(8 * hardware.NIC_GBPS["ib-hdr"])
    # inside one node the node's own answer
    assert c.bottleneck_gbps(range(8)) == load_preset("dgx-a100-8").bottleneck_gbps(range(8))
    # one GPU per node: that GPU's share of the NICs
    assert c.bottleneck_gbps([0, 8]) == pytest.approx(c.network_gbps_per_gpu)
    # an L40S node ring (PCIe) is faster than one 100G port: the network is the bottleneck
    slow = load_cluster("2x pcie-l40s-8+eth-100")
    assert slow.bottleneck_gbps(slow.indices) == pytest.approx(hardware.NIC_GBPS["eth-100"])
    assert slow.bottleneck_gbps(slow.indices) < slow.bottleneck_gbps(range(8))


def test_best_subset_fills_fewest_nodes_evenly():
    c = load_cluster("4x hgx-h100-8+ib-ndr")
    assert c.best_subset(8) == tuple(range(8))
    assert c.best_subset(16) == tuple(range(16))
    assert c.nodes_spanned(c.best_subset(12)) == (0, 1)
    twelve = c.best_subset(12)
    assert sum(1 for g in twelve if g < 8) == 6  # 6 + 6, not 8 + 4
    nvl = load_cluster("2x h100-nvl-8+roce-200")
    assert nvl.best_subset(2) in nvl.islands()


def test_candidate_subsets_on_a_1_node_cluster_match_the_node():
    c = load_cluster("1x h100-nvl-8+ib-ndr")
    node = load_preset("h100-nvl-8")
    assert set(c.candidate_subsets(3)) == set(node.candidate_subsets(3))
    assert c.best_subset(4) == node.best_subset(4)


def test_large_cluster_is_lazy():
    c = load_cluster("64x hgx-h200-8+ib-ndr")
    assert c.num_gpus == 512
    assert c.bottleneck_gbps(c.indices) > 0
    assert len(c.best_subset(256)) == 256
    assert c.link(0, 511).kind == "NET"
    assert len(c.links) == 64 * 28  # only the links inside nodes exist as objects


@pytest.mark.parametrize("name", EXAMPLES)
def test_json_round_trip(name, tmp_path):
    c = load_cluster(name)
    again = Cluster.from_dict(json.loads(c.to_json()))
    assert again == c
    assert again.to_dict() == c.to_dict()
    path = tmp_path / "cluster.json"
    path.write_text(c.to_json())
    assert load_cluster(str(path)) == c


def test_json_errors_are_usage_errors():
    with pytest.raises(UsageError, match="not a topowise cluster"):
        Cluster.from_dict({"format": "topowise.topology"})
    data = load_cluster("2x hgx-h100-8+ib-ndr").to_dict()
    del data["network"]
    with pytest.raises(UsageError, match="missing or has a bad field"):
        Cluster.from_dict(data)


def test_restricted_and_without_nvlink():
    c = load_cluster("2x hgx-h100-8+ib-ndr")
    r = c.restricted_to([0, 1, 8, 9])
    assert r.indices == (0, 1, 8, 9) and r.num_gpus == 4
    assert r.islands() == ((0, 1), (8, 9))
    with pytest.raises(UsageError):
        r.gpu(2)
    p = c.without_nvlink()
    assert all(len(isl) == 1 for isl in p.islands())
    assert p.link(0, 1).kind != "NV"


def test_tiers_show_nvlink_pcie_network():
    tiers = load_cluster("4x hgx-h100-8+ib-ndr").tiers()
    assert [t["tier"] for t in tiers] == ["NVLink", "PCIe", "network"]
    assert tiers[-1]["gbps_per_gpu"] == hardware.NIC_GBPS["ib-ndr"]
    assert [t["tier"] for t in load_cluster("2x pcie-l40s-8+eth-100").tiers()] == ["PCIe", "network"]


@settings(max_examples=60, deadline=None)
@given(nodes=st.integers(1, 6), preset=st.sampled_from(["hgx-h100-8", "h100-nvl-8", "pcie-l40s-8", "h200-x2"]),
       data=st.data())
def test_links_agree_with_node_and_network(nodes, preset, data):
    c = make_cluster(load_preset(preset), nodes, NetworkSpec("ib-ndr", 0, 48.0))
    a = data.draw(st.integers(0, c.num_gpus - 1))
    b = data.draw(st.integers(0, c.num_gpus - 1).filter(lambda x: x != a))
    link = c.link(a, b)
    g = c.gpus_per_node
    if a // g == b // g:
        assert link.gbps == c.node.link(a % g, b % g).gbps
    else:
        assert link.kind == "NET" and link.gbps == pytest.approx(48.0)
    # a group's ring can never beat its slowest node's own ring or its network share
    k = data.draw(st.integers(2, c.num_gpus))
    chosen = c.best_subset(k)
    assert len(chosen) == k and len(set(chosen)) == k
    if len(c.nodes_spanned(chosen)) > 1:
        assert c.bottleneck_gbps(chosen) <= c.network_gbps(chosen) + 1e-9


def test_every_node_preset_makes_a_cluster():
    for name in preset_names():
        c = load_cluster(f"2x {name}+ib-ndr")
        assert c.num_gpus == 2 * load_preset(name).num_gpus
        assert all(c.link(a, b).kind == "NET" for a, b in itertools.product(range(2), range(c.gpus_per_node,
                                                                                            c.gpus_per_node + 2)))


def test_bandwidth_tiers_count_every_pair_once():
    c = load_cluster("3x hgx-h100-8+ib-ndr")
    tiers = c.bandwidth_tiers()
    assert sum(n for _, _, n in tiers) == 24 * 23 // 2
    assert tiers[-1][0] == "NET" and tiers[-1][2] == 24 * 23 // 2 - 3 * 28


def test_cluster_report_tiers_share_warnings_and_selection():
    from topowise.topology.cluster import cluster_report

    c = load_cluster("4x pcie-l40s-8+eth-100")
    r = cluster_report(c, [0, 1, 8, 9], environ={})
    share = hardware.NIC_GBPS["eth-100"] / 8  # one 100G port (TCP sockets) per node of 8 GPUs
    assert r["network_gbps_per_gpu"] == pytest.approx(share)
    assert [t["tier"] for t in r["tiers"]] == ["PCIe", "network"]
    assert any("network's pace" in w for w in r["warnings"])
    assert any("share NICs" in w for w in r["warnings"])
    sel = r["selection"]
    assert sel["nodes_spanned"] == [0, 1] and sel["gpus_per_node"] == {"0": 2, "1": 2}
    assert sel["bottleneck_gbps"] == pytest.approx(2 * share)  # two GPUs' shares of the NIC
    assert sel["best_subset_nodes"] == [0]
    assert Cluster.from_dict(r) == c  # the report reads back as the cluster (`topo --json` then `--file`)
    fast = cluster_report(load_cluster("2x hgx-h100-8+ib-ndr"), environ={})
    assert not any("network's pace" in w for w in fast["warnings"])  # 8x NDR: 384 GB/s against NVLink's 478


# --- one interface (Wiring) for a node and a cluster ---------------------------------------------
WIRING_MEMBERS = list(Wiring.__annotations__) + [
    name for name, value in vars(Wiring).items() if callable(value) and not name.startswith("_")]


@pytest.mark.parametrize("topo", [load_preset("h100-nvl-8"), load_cluster("2x h100-nvl-8+roce-200")],
                         ids=["topology", "cluster"])
def test_topology_and_cluster_answer_every_wiring_member(topo):
    missing = [name for name in WIRING_MEMBERS if not hasattr(topo, name)]
    assert not missing


def test_a_topology_is_one_node_of_itself():
    node = load_preset("h100-nvl-8")
    assert (node.num_nodes, node.gpus_per_node, node.node, node.network) == (1, 8, node, None)
    assert node.nodes_spanned((0, 5, 7)) == (0,)
    assert node.per_node((5, 0, 7)) == {0: (0, 5, 7)}
    assert node.network_gbps(range(8)) == float("inf")


def test_a_one_node_cluster_answers_as_its_node():
    node = load_preset("h100-nvl-8")
    one = load_cluster("1x h100-nvl-8+roce-200")
    for gpus in [(0, 1), (0, 2), (0, 1, 2, 3), tuple(range(8))]:
        assert one.bottleneck_gbps(gpus) == node.bottleneck_gbps(gpus)
        assert one.islands_spanned(gpus) == node.islands_spanned(gpus)
        assert one.nodes_spanned(gpus) == node.nodes_spanned(gpus) == (0,)
        assert one.per_node(gpus) == node.per_node(gpus)
    assert one.network is not None and node.network is None  # what tells `topo` to show the network
