"""Distance: racks apart, switch hops and fibre enter the latency terms of NCCL's ring and tree."""

import json
import math

import pytest

from topowise import hardware
from topowise.costmodel.network import collective_time_s, describe_group
from topowise.costmodel.predict import predict
from topowise.costmodel.profile import default_profile
from topowise.errors import UsageError
from topowise.models.spec import load_model
from topowise.run import Run
from topowise.topology import load_topology
from topowise.topology.cluster import Cluster, load_cluster
from topowise.topology.fabric import Layout, parse_layout
from topowise.units import MIB

PROFILE = default_profile()
HOP = hardware.SWITCH_HOP_US["ib"]


def test_a_plain_cluster_name_is_one_rack():
    c = load_cluster("4x hgx-h100-8+ib-ndr")
    assert c.layout == Layout() and c.layout.is_default
    assert c.ring_extra_us(c.indices) == 0 and c.tree_extra_us(c.indices) == 0
    g = describe_group(c.indices, c)
    assert (g.ring_extra_us, g.tree_extra_us, g.regions) == (0.0, 0.0, 1)
    # a layout that keeps every node in one rack prices the same as the plain name
    same = load_cluster("4x hgx-h100-8+ib-ndr/rack=4,apart=500m")
    run = Run(load_model("llama3.2-1b"), tuple(range(32)), "zero2")
    assert predict(run, same).step_time_s == predict(run, c).step_time_s


def test_layout_syntax():
    assert parse_layout("rack=4,apart=100m,hops=3") == Layout(4, 100.0, 3)
    assert parse_layout("rack=2, apart=2km") == Layout(2, 2000.0, 3)
    assert parse_layout("hops=1") == Layout(0, 0.0, 1)
    for bad in ("racks=4", "rack=four", "apart=100 miles", "rack="):
        with pytest.raises(UsageError, match="rack=<nodes per rack>"):
            parse_layout(bad)
    with pytest.raises(UsageError, match="at least 1 switch hop"):
        Layout(4, 10.0, 0)


def test_hop_latency_is_switches_and_fibre():
    c = load_cluster("8x hgx-h100-8+ib-ndr/rack=2,apart=100m,hops=3")
    assert c.hop_extra_us(0, 1) == 0  # same rack: the tuner's own rack-local hop
    # next rack: 2 more switches (leaf-spine-leaf against one leaf) and 100 m of fibre at 5 ns/m
    assert c.hop_extra_us(1, 2) == pytest.approx(2 * HOP + 100 * 5e-3)
    assert c.hop_extra_us(0, 7) == pytest.approx(2 * HOP + 300 * 5e-3)
    # ring: its slowest hop (the wrap from the last rack to the first); tree: the farthest two racks
    assert c.ring_extra_us(c.indices) == pytest.approx(c.hop_extra_us(7, 0))
    assert c.tree_extra_us(c.indices) == pytest.approx(c.hop_extra_us(0, 7))
    assert c.ring_extra_us(range(16)) == 0  # two nodes of one rack
    # light in fibre: 1 km adds 5 us per step
    far = load_cluster("2x hgx-h100-8+ib-ndr/rack=1,apart=1km,hops=1")
    assert far.hop_extra_us(0, 1) == pytest.approx(5.0)


def test_distance_enters_ring_and_tree_latency():
    near = load_cluster("8x hgx-h100-8+ib-ndr")
    far = load_cluster("8x hgx-h100-8+ib-ndr/rack=2,apart=100m")
    extra = far.ring_extra_us(far.indices)
    t_near, _ = collective_time_s("all_reduce", MIB, near.indices, near, PROFILE, algorithm="ring")
    t_far, _ = collective_time_s("all_reduce", MIB, far.indices, far, PROFILE, algorithm="ring")
    assert t_far - t_near == pytest.approx(2 * 8 * extra * 1e-6)  # 2N network steps of the ring
    t_near, _ = collective_time_s("all_reduce", MIB, near.indices, near, PROFILE, algorithm="tree")
    t_far, _ = collective_time_s("all_reduce", MIB, far.indices, far, PROFILE, algorithm="tree")
    assert t_far - t_near == pytest.approx(2 * math.log2(8) * far.tree_extra_us(far.indices) * 1e-6)
    # all-gather: N - 1 network steps
    a, _ = collective_time_s("all_gather", MIB, near.indices, near, PROFILE)
    b, _ = collective_time_s("all_gather", MIB, far.indices, far, PROFILE)
    assert b - a == pytest.approx(7 * extra * 1e-6)


def test_layout_reads_back_from_json(tmp_path):
    c = load_cluster("8x hgx-h100-8+roce-400/rack=2,apart=30m,hops=1")
    assert c.layout == Layout(2, 30.0, 1) and c.hop_extra_us(0, 2) == pytest.approx(30 * 5e-3)
    path = tmp_path / "c.json"
    path.write_text(json.dumps(c.to_dict()))
    back = load_topology(str(path))
    assert isinstance(back, Cluster) and back == c
    assert any("racks 30 m apart" in t["scope"] for t in c.tiers())


def test_rail_groups_span_racks_one_switch_apart():
    c = load_cluster("8x hgx-h100-8+ib-ndr/rack=2,apart=10m,rail=4")
    assert c.layout == Layout(2, 10.0, 3, 4)
    assert c.hop_extra_us(1, 2) == pytest.approx(10 * 5e-3)  # next rack, same rail switches: fibre only
    assert c.hop_extra_us(3, 4) == pytest.approx(2 * HOP + 10 * 5e-3)  # another rail group: up the spine
    assert c.tree_extra_us(c.indices) == pytest.approx(2 * HOP + 30 * 5e-3)  # node 0 to node 7
    # one NIC per node is no rail fabric: every rack is its own switch domain
    plain = load_cluster("8x hgx-h100-8+eth-100/rack=2,apart=10m,rail=4")
    assert plain.hop_extra_us(1, 2) == pytest.approx(2 * hardware.SWITCH_HOP_US["socket"] + 10 * 5e-3)
    assert parse_layout("rail=32") == Layout(0, 0.0, 3, 32)
