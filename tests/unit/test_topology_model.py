"""The wiring model: NVLink islands, the bottleneck a collective sees, presets, GPU lists."""

import pytest

from topowise.errors import UsageError
from topowise.topology.model import Topology, build, parse_gpu_list
from topowise.topology.presets import load_preset, preset_names

NVLINK4_GBPS = 26.5625  # one NVLink 4 link, one direction, as `nvidia-smi nvlink -s` reports it on an H200
PCIE5_X16_GBPS = 63.0  # PCIe Gen5 x16, one direction, after 128b/130b encoding


@pytest.mark.parametrize("name", preset_names())
def test_presets_round_trip_json(name):
    topo = load_preset(name)
    again = Topology.from_dict(topo.to_dict())
    assert again.to_dict() == topo.to_dict()


def test_nvl_pairs_are_islands_joined_by_pcie():
    nvl = load_preset("h100-nvl-8")  # H100 NVL: bridges join GPUs in pairs (NV12)
    assert nvl.islands() == ((0, 1), (2, 3), (4, 5), (6, 7))
    assert nvl.best_subset(2) in nvl.islands()
    assert nvl.bottleneck_gbps((0, 1)) == 12 * NVLINK4_GBPS
    # a ring over two bridged pairs must cross PCIe: the whole ring runs at its rate
    assert nvl.bottleneck_gbps((0, 1, 2, 3)) == nvl.bottleneck_gbps((0, 2)) == PCIE5_X16_GBPS
    assert len(nvl.islands_spanned((1, 2))) == 2


def test_four_way_bridge_sums_links_and_switch_does_not():
    nvl = load_preset("h200-nvl-8")  # H200 NVL: 4-way bridges, NV6 between each pair of the four
    assert nvl.islands() == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert nvl.bottleneck_gbps((0, 1)) == 6 * NVLINK4_GBPS
    assert nvl.bottleneck_gbps((0, 1, 2, 3)) == 3 * 6 * NVLINK4_GBPS  # each GPU drives its three peers at once
    hgx = load_preset("hgx-h100-8")  # NVSwitch: a GPU's 18 links go to the switch whatever the group
    assert hgx.bottleneck_gbps(range(8)) == hgx.bottleneck_gbps((0, 1)) == 18 * NVLINK4_GBPS


def test_without_nvlink_has_no_islands():
    topo = load_preset("hgx-h200-8").without_nvlink()
    assert all(len(i) == 1 for i in topo.islands())
    assert topo.bottleneck_gbps((0, 1)) == topo.pcie_gbps == PCIE5_X16_GBPS


def test_ring_prefers_fast_links_in_hybrid_mesh():
    # a 4-cycle of NVLink with slow diagonals: the best ring uses only the NVLink edges
    kinds = {(0, 1): "NV", (1, 2): "NV", (2, 3): "NV", (0, 3): "NV", (0, 2): "SYS", (1, 3): "SYS"}
    topo = build("cycle", "Tesla V100-SXM2-32GB", kinds, nvlink_counts=dict.fromkeys(kinds, 1))
    assert topo.bottleneck_gbps(range(4)) == 25.0  # one NVLink 2 link: 25 GB/s each way


@pytest.mark.parametrize("text,msg", [("0,0", "twice"), ("9", "out of range"), ("a", "not a GPU index")])
def test_bad_gpu_lists(text, msg):
    with pytest.raises(UsageError, match=msg):
        parse_gpu_list(text, load_preset("h100-nvl-8"))


def test_gpu_list_ranges():
    assert parse_gpu_list("0,2-4", load_preset("h100-nvl-8")) == (0, 2, 3, 4)
