import math

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from topowise import hardware
from topowise.costmodel import collectives, comm, network
from topowise.costmodel.network import (
    Group,
    algorithm_time_s,
    collective_time_s,
    crossover_bytes,
    describe_group,
    network_traffic,
    step_collectives,
)
from topowise.costmodel.profile import default_profile
from topowise.errors import UsageError
from topowise.topology.cluster import load_cluster, make_cluster
from topowise.topology.fabric import NetworkSpec
from topowise.topology.presets import load_preset
from topowise.units import GIB, KIB, MIB

PROFILE = default_profile()


def cluster(nodes, node="hgx-h100-8", net="ib-ndr", nics=0):
    return make_cluster(load_preset(node), nodes, NetworkSpec(net, nics, hardware.NIC_GBPS[net],
                                                              net != "eth-100"))


def test_tree_latency_is_nccls_formula():
    # 4 nodes x 8 GPUs on NVLink, LL tree: base 6.8 + 2 ((8-1) x 0.6 + log2(4) x 5.0) us (tuning.cc)
    g = Group(ranks=32, nodes=4, per_node=8, intra_gbps=478.0, intra_hw="NVLink", net_gbps=384.0)
    t = algorithm_time_s("all_reduce", 0, g, "tree", "LL", 300.0)
    assert t == pytest.approx((6.8 + 2 * (7 * 0.6 + 2 * 5.0)) * 1e-6)


def test_ring_latency_is_nccls_formula():
    # Simple ring all-reduce on 2 nodes x 8: 2(n-1) = 30 steps, 2N = 4 of them on the network,
    # intra steps at max(3.4, 3 x 1.0 net overhead), then the x1.4 plateau factor (tuning.cc)
    g = Group(ranks=16, nodes=2, per_node=8, intra_gbps=478.0, intra_hw="NVLink", net_gbps=384.0)
    t = algorithm_time_s("all_reduce", 0, g, "ring", "Simple", 300.0)
    assert t == pytest.approx((8.4 + 26 * 3.4 + 4 * 14.0) * 1.4 * 1e-6)


def test_ring_bandwidth_term_is_busbw_convention():
    # large all-gather: time ~ S (n-1)/n / busbw
    g = Group(ranks=16, nodes=2, per_node=8, intra_gbps=478.0, intra_hw="NVLink", net_gbps=100.0)
    t0 = algorithm_time_s("all_gather", 0, g, "ring", "Simple", 100.0)
    t1 = algorithm_time_s("all_gather", GIB, g, "ring", "Simple", 100.0)
    assert t1 - t0 == pytest.approx(GIB * 15 / 16 / 100e9)


def test_tree_serves_all_reduce_only():
    g = describe_group(range(32), cluster(4))
    assert algorithm_time_s("all_gather", MIB, g, "tree", "Simple", 100.0) is None
    t, detail = collective_time_s("all_gather", MIB, range(32), cluster(4), PROFILE, algorithm="tree")
    assert detail["algorithm"] == "ring"  # NCCL_ALGO=tree leaves all-gather on ring


def test_dgx_a100_busbw_matches_published_measurement():
    # DGX A100 x N, 8x HDR 200G per node: ~192 GB/s all_reduce busbw (NVIDIA/nccl issue 1576)
    c = load_cluster("2x dgx-a100-8+ib-hdr")
    t, detail = collective_time_s("all_reduce", GIB, c.indices, c, PROFILE)
    busbw = GIB / t * 2 * (c.num_gpus - 1) / c.num_gpus / 1e9
    assert detail["bound"] == "network"
    assert 0.9 * 192 < busbw <= 192.0 + 1e-6


def test_ring_wins_large_messages_on_few_nodes():
    c = cluster(2, "dgx-a100-8")  # no NVLink SHARP: ring and tree only (NVLS-Tree: test_nvls_tree.py)
    _, detail = collective_time_s("all_reduce", GIB, c.indices, c, PROFILE)
    assert detail["algorithm"] == "ring"
    assert detail["times_s"]["ring"] < detail["times_s"]["tree"]


def test_tree_wins_small_messages_on_many_nodes():
    c = cluster(64)
    _, detail = collective_time_s("all_reduce", 64 * KIB, c.indices, c, PROFILE)
    assert detail["algorithm"] == "tree"
    assert detail["times_s"]["tree"] < detail["times_s"]["ring"] / 2


def test_forced_algorithm_is_used():
    c = cluster(8)
    t_ring, d_ring = collective_time_s("all_reduce", 4 * KIB, c.indices, c, PROFILE, algorithm="ring")
    t_auto, d_auto = collective_time_s("all_reduce", 4 * KIB, c.indices, c, PROFILE)
    assert d_ring["algorithm"] == "ring" and d_auto["algorithm"] == "tree"
    assert t_auto < t_ring
    with pytest.raises(UsageError, match="ring, tree, nvlstree or auto"):
        collective_time_s("all_reduce", 1, c.indices, c, PROFILE, algorithm="collnet")


@settings(max_examples=40, deadline=None)
@given(nodes=st.sampled_from([8, 16, 32, 64, 128]), node=st.sampled_from(["hgx-h100-8", "dgx-a100-8", "pcie-l40s-8"]),
       net=st.sampled_from(["ib-ndr", "ib-hdr", "roce-200", "eth-100"]), fraction=st.floats(0.01, 0.95))
def test_tree_beats_ring_below_the_crossover_on_many_nodes(nodes, node, net, fraction):
    c = cluster(nodes, node, net)
    group = describe_group(c.indices, c)
    cross = crossover_bytes(group, PROFILE)
    assume(cross is not None and cross > 64)
    below = max(1.0, cross * fraction)
    _, detail = collective_time_s("all_reduce", below, c.indices, c, PROFILE)
    assert detail["times_s"]["tree"] < detail["times_s"]["ring"]
    _, at = collective_time_s("all_reduce", cross, c.indices, c, PROFILE)
    assert at["times_s"]["ring"] <= at["times_s"]["tree"]


def test_crossover_grows_with_nodes():
    sizes = [crossover_bytes(describe_group(cluster(n).indices, cluster(n)), PROFILE) for n in (2, 8, 32)]
    assert sizes[0] < sizes[1] < sizes[2]


def _step_comm_s(strategy, params, c, shard=None):
    """Sum of the step's collectives (one of each) on the whole cluster."""
    members = c.indices
    shard = shard or c.gpus_per_node
    groups = network.strategy_groups(members, shard)
    return sum(collectives.call_cost(op, nbytes, groups[which], c, PROFILE)[0]
               for op, nbytes, which in step_collectives(strategy, params, shard))


@settings(max_examples=30, deadline=None)
@given(nodes=st.integers(1, 64), extra=st.integers(1, 64),
       node=st.sampled_from(["hgx-h100-8", "h100-nvl-8", "pcie-l40s-8", "dgx-a100-8"]),
       net=st.sampled_from(["ib-ndr", "ib-hdr", "roce-200", "eth-100"]),
       strategy=st.sampled_from(["ddp", "zero1", "zero2", "zero3", "hsdp"]),
       params=st.sampled_from([10**6, 10**8, 8 * 10**9, 70 * 10**9]), compute_s=st.floats(0.0, 10.0))
def test_more_nodes_never_make_a_step_faster_at_fixed_per_gpu_work(nodes, extra, node, net, strategy, params,
                                                                  compute_s):
    small, big = cluster(nodes, node, net), cluster(nodes + extra, node, net)
    assume(describe_group(big.indices, big).net_gbps <= describe_group(big.indices, big).intra_gbps)
    # fixed per-GPU work: the same compute per GPU; only the collectives change with the node count
    assert compute_s + _step_comm_s(strategy, params, big) >= compute_s + _step_comm_s(strategy, params, small) - 1e-12


def test_single_node_groups_are_comm_pys():
    c = cluster(2, "h100-nvl-8")
    t, bus = collectives.call_cost("all_reduce", 64 * MIB, (0, 1, 2, 3), c, PROFILE)
    line, link = comm.group_link(load_preset("h100-nvl-8"), (0, 1, 2, 3))
    assert t == pytest.approx(comm.collective_time("all_reduce", 64 * MIB, 4, line, link, PROFILE))
    assert bus == pytest.approx(line * PROFILE.comm(link, "all_reduce")[0])
    # the same on a plain node topology
    t2, _ = collectives.call_cost("all_reduce", 64 * MIB, (0, 1, 2, 3), load_preset("h100-nvl-8"), PROFILE)
    assert t2 == pytest.approx(t)
    with pytest.raises(ValueError, match="one node"):  # network.py prices groups across nodes only
        collective_time_s("all_reduce", 64 * MIB, (0, 1, 2, 3), c, PROFILE)


def test_network_traffic_per_strategy():
    c = cluster(4)
    p = 10**9
    ddp = network_traffic("ddp", p, c.indices, c)
    n = 32
    assert ddp["bytes_per_gpu"] == pytest.approx(2 * (n - 1) / n * 4 * p / 8)
    z3 = network_traffic("zero3", p, c.indices, c)
    z2 = network_traffic("zero2", p, c.indices, c)
    hsdp = network_traffic("hsdp", p, c.indices, c, shard_group=8)
    # hsdp keeps reduce-scatter and all-gathers inside the node: only the shard's all-reduce crosses
    assert hsdp["bytes_per_gpu"] == pytest.approx(2 * 3 / 4 * 4 * p / 8)
    # HSDP sends less than FSDP (zero3), a little more than zero2 (8 P/k against 6 P/k); zero3's bf16
    # gathers and fp32 reduce-scatter add up to DDP's fp32 all-reduce (8 P (n-1)/n each)
    assert z2["bytes_per_gpu"] < hsdp["bytes_per_gpu"] < z3["bytes_per_gpu"]
    assert z3["bytes_per_gpu"] == pytest.approx(ddp["bytes_per_gpu"])
    hpz = network_traffic("hpz", p, c.indices, c, engine="deepspeed")
    assert z2["bytes_per_gpu"] == pytest.approx(hpz["bytes_per_gpu"])  # hpZ: backward gather stays in the node
    assert network_traffic("ddp", p, range(8), c)["bytes_per_gpu"] == 0.0
    with pytest.raises(UsageError, match="DeepSpeed"):
        network_traffic("hpz", p, c.indices, c)


def test_hsdp_beats_fsdp_across_nodes_on_a_slow_network():
    c = cluster(8, "hgx-h100-8", "eth-100", nics=1)
    assert _step_comm_s("hsdp", 8 * 10**9, c) < _step_comm_s("zero3", 8 * 10**9, c)


def test_unknown_op_is_usage_error():
    with pytest.raises(UsageError, match="unknown collective"):
        collective_time_s("all_to_all", 1, range(16), cluster(2), PROFILE)


def test_zero_bytes_cost_latency_only():
    c = cluster(4)
    t, _ = collective_time_s("all_reduce", 0, c.indices, c, PROFILE)
    assert 0 < t < 1e-3 and math.isfinite(t)


def test_collective_across_nodes_is_network_pys():
    c = cluster(2)
    groups = [tuple(range(s, 16, 8)) for s in range(8)]  # HSDP replica groups: one GPU per node
    cost = collectives.collective("all_reduce", 64 * MIB, "fp32", groups[0], c, 3, "backward", PROFILE, groups)
    t, detail = collective_time_s("all_reduce", 64 * MIB, groups[0], c, PROFILE)
    assert cost.link == "NET" and cost.group_size == 2 and cost.count == 3
    assert cost.time_s == pytest.approx(3 * t)
    assert cost.bandwidth_gbps == pytest.approx(c.network_gbps_per_gpu)  # one GPU per node: its NIC share
    assert collectives.spans_nodes(c, groups[0]) and not collectives.spans_nodes(c, range(8))
    assert not collectives.spans_nodes(load_preset("hgx-h100-8"), range(8))
