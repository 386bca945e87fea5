"""The 2026 boards and racks as presets, and clusters of nodes of any size."""

import pytest

from topowise.topology import load_topology
from topowise.topology.presets import load_preset


def test_hgx_b200_runs_a_ring_at_nvlink_5_twice_hopper():
    b200, h100 = load_preset("hgx-b200-8"), load_preset("hgx-h100-8")
    assert b200.num_gpus == 8 and len(b200.islands()) == 1
    assert b200.bottleneck_gbps(b200.indices) > 1.8 * h100.bottleneck_gbps(h100.indices)


def test_hgx_h800_has_the_h100_board_with_less_than_half_its_nvlink():
    h800, h100 = load_preset("hgx-h800-8"), load_preset("hgx-h100-8")
    assert h800.nvswitch and len(h800.islands()) == 1
    assert h800.bottleneck_gbps(h800.indices) < h100.bottleneck_gbps(h100.indices) / 2
    assert h800.gpu_spec.bf16_dense_flops == h100.gpu_spec.bf16_dense_flops


def test_hgx_h100_4_joins_each_pair_directly_and_a_gpu_gets_its_whole_nvlink_in_a_ring():
    four, eight = load_preset("hgx-h100-4"), load_preset("hgx-h100-8")
    assert four.num_gpus == 4 and not four.nvswitch and four.full_nvlink_mesh
    # 18 links split over 3 peers: a ring over all 4 uses every bridge, as a switch port would
    assert four.bottleneck_gbps(four.indices) == eight.bottleneck_gbps(eight.indices)
    # two GPUs alone use only the one bundle between them
    assert four.bottleneck_gbps((0, 1)) < four.bottleneck_gbps(four.indices)


@pytest.mark.parametrize("name", ["gb200-nvl72", "gb300-nvl72"])
def test_an_nvl72_rack_is_one_nvlink_island_of_72(name):
    rack = load_preset(name)
    assert rack.num_gpus == 72 and rack.islands() == (tuple(range(72)),) and rack.nvswitch
    assert rack.bottleneck_gbps(rack.indices) == rack.bottleneck_gbps((0, 71))
    # a Grace CPU per 2 GPUs, 2 Grace per tray of 4
    assert len({g.numa_node for g in rack.gpus}) == 36


def test_placement_on_a_72_gpu_island_stays_a_handful_of_subsets():
    rack = load_preset("gb200-nvl72")
    for k in (2, 8, 36, 64, 72):
        subsets = rack.candidate_subsets(k)
        assert 1 <= len(subsets) <= 2 and all(len(s) == k for s in subsets)
    assert rack.best_subset(72) == tuple(range(72))


def test_a_cluster_of_four_gpu_nodes():
    cluster = load_topology("16x hgx-h100-4+ib-ndr")
    assert cluster.num_gpus == 64 and cluster.gpus_per_node == 4 and cluster.num_nodes == 16
    assert len(cluster.islands()) == 16
    # across nodes the network, not NVLink, sets the ring's pace
    assert cluster.bottleneck_gbps(range(8)) < cluster.bottleneck_gbps(range(4))


def test_a_cluster_of_nvl72_racks_keeps_each_rack_one_island():
    cluster = load_topology("4x gb200-nvl72+ib-xdr")
    assert cluster.num_gpus == 288 and cluster.gpus_per_node == 72
    assert cluster.islands()[1] == tuple(range(72, 144))
    # a NIC per GPU (72 per rack) carries a ring across racks at NVLink's pace; 8 NICs per rack do not
    assert cluster.bottleneck_gbps(range(144)) == cluster.bottleneck_gbps(range(72))
    few = load_topology("4x gb200-nvl72+ib-xdrx8")
    assert few.bottleneck_gbps(range(144)) < few.bottleneck_gbps(range(72))
