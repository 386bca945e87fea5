"""NCCL's NVLS-Tree across nodes: NVLink SHARP inside each node, a tree of the nodes on the network."""

from __future__ import annotations

from dataclasses import replace

import pytest

from topowise.costmodel import network
from topowise.costmodel.profile import default_profile
from topowise.topology import load_topology
from topowise.units import GIB, busbw_factor

PROFILE = default_profile()
NVLS_OFF = replace(PROFILE, nvls_enabled=False)


def busbw(topo_name: str, n: int, nbytes: float, profile=PROFILE, op="all_reduce", algorithm="auto"):
    topo = load_topology(topo_name)
    seconds, detail = network.collective_time_s(op, nbytes, topo.indices[:n], topo, profile, algorithm=algorithm)
    return nbytes / seconds / 1e9 * busbw_factor(op, n), detail


def test_hopper_boards_reduce_large_all_reduces_with_nvls_tree():
    bus, detail = busbw("4x hgx-h100-8+ib-ndr", 32, 8 * GIB)
    assert detail["algorithm"] == "nvlstree"
    ring, _ = busbw("4x hgx-h100-8+ib-ndr", 32, 8 * GIB, algorithm="ring")
    assert bus > ring
    # the network is the bound: 8 NDR NICs (48 GB/s each) per node, less the tree's latency
    assert 0.95 * 384 < bus <= 384


def test_two_nodes_count_the_network_twice_so_the_nvlink_side_binds():
    bus, detail = busbw("2x hgx-h100-8+ib-ndr", 16, 8 * GIB)
    assert detail["algorithm"] == "nvlstree"
    # comm.py's NVLS bus bandwidth over the node's 8 GPUs: line x efficiency x 2(k-1)/(k+1)
    in_node = 478.125 * PROFILE.nvls_efficiency * 2 * 7 / 9
    assert bus == pytest.approx(in_node, rel=0.03) and bus > 384


@pytest.mark.parametrize("topo, profile", [("4x dgx-a100-8+ib-hdr", PROFILE), ("4x hgx-h100-8+ib-ndr", NVLS_OFF)])
def test_no_nvls_tree_without_a_switch_that_reduces_or_with_nvls_off(topo, profile):
    _, detail = busbw(topo, 32, 8 * GIB, profile)
    assert detail["algorithm"] != "nvlstree" and detail["times_s"]["nvlstree"] is None
    forced, _ = busbw(topo, 32, 8 * GIB, profile, algorithm="nvlstree")  # NCCL falls back to ring
    ring, _ = busbw(topo, 32, 8 * GIB, profile, algorithm="ring")
    assert forced == ring


@pytest.mark.parametrize("op", ["all_gather", "reduce_scatter", "broadcast"])
def test_nvls_tree_serves_all_reduce_only(op):
    _, detail = busbw("4x hgx-h100-8+ib-ndr", 32, GIB, op=op)
    assert detail["times_s"]["nvlstree"] is None


def test_nvls_tree_latency_grows_with_the_log_of_the_nodes():
    small = [busbw(f"{n}x hgx-h100-8+ib-ndr", 8 * n, 64 * 1024, algorithm="nvlstree")[1]["times_s"]["nvlstree"]
             for n in (4, 16, 64)]
    assert small[0] < small[1] < small[2]
    # two more tree levels add 2 x 2 x 20.9 us of network hops each time
    assert small[1] - small[0] == pytest.approx(4 * 20.9e-6, rel=0.05)
