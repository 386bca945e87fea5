"""The network catalog: every row sourced and consistent; NCCL's socket transport's limits; custom links."""

import pytest

from topowise import hardware
from topowise.cli.main import main
from topowise.costmodel.network import Group, algorithm_time_s, collective_time_s
from topowise.costmodel.profile import default_profile
from topowise.errors import UsageError
from topowise.topology.cluster import load_cluster, make_cluster
from topowise.topology.fabric import NetworkSpec, network_spec, with_socket_threads
from topowise.topology.presets import load_preset
from topowise.units import MIB

PROFILE = default_profile()


def test_catalog_has_the_networks_people_buy():
    for g in (1, 10, 25, 50, 100, 200, 400, 800):
        assert f"eth-{g}" in hardware.NETWORKS
    for name in ("roce-100", "roce-200", "roce-400", "roce-800", "ib-hdr", "ib-ndr", "ib-xdr"):
        assert name in hardware.NETWORKS
    for name, kind in hardware.NETWORKS.items():
        assert kind.name == name and kind.source and kind.label
        assert 0 < kind.busbw_gbps <= kind.line_gbps  # NCCL never beats the line
        assert kind.transport in ("ib", "roce", "socket")
        assert (kind.latency_us == 0) == (kind.transport != "socket")  # the tuner's figures are RDMA's
        assert hardware.NIC_GBPS[name] == kind.busbw_gbps


def test_existing_rdma_figures_are_kept():
    # measured per NIC: NDR 46-49 (nccl-tests issue 290), HDR ~24 (issue 267); RoCE as the same line rate
    assert (hardware.NIC_GBPS["ib-ndr"], hardware.NIC_GBPS["ib-hdr"]) == (48.0, 24.0)
    assert (hardware.NIC_GBPS["roce-400"], hardware.NIC_GBPS["roce-200"]) == (48.0, 24.0)
    assert hardware.NIC_GBPS["roce-100"] == 12.0


def test_ethernet_without_roce_runs_over_sockets():
    # below ~25 Gb/s the line binds (TCP payload 1448 of 1538 bytes per frame); above it NCCL's default
    # 2 channels x 1 thread x 2.0 GB/s do
    assert hardware.NIC_GBPS["eth-1"] == pytest.approx(0.125 * 1448 / 1538, rel=1e-3)
    assert hardware.NIC_GBPS["eth-10"] == pytest.approx(1.25 * 1448 / 1538, rel=1e-3)
    assert hardware.NIC_GBPS["eth-100"] == pytest.approx(2 * hardware.SOCKET_THREAD_GBPS)
    assert hardware.NIC_GBPS["eth-800"] == hardware.NIC_GBPS["eth-100"]  # sockets, not the line, bind
    rates = [hardware.NIC_GBPS[f"eth-{g}"] for g in (1, 10, 25, 50, 100, 200, 400, 800)]
    assert rates == sorted(rates)


def test_socket_threads_and_sockets_follow_nccls_limits():
    line = 50.0  # 400G Ethernet
    assert hardware.socket_busbw_gbps(line, 0, 1) == pytest.approx(4.0)  # NCCL's default on a generic NIC
    assert hardware.socket_busbw_gbps(line, 2, 8) == pytest.approx(2 * 2 * 2.0)  # AWS's default 2 x 8
    assert hardware.socket_busbw_gbps(line, 4, 1) == pytest.approx(2 * 4 * 2.0)
    # a 512 KiB step in 64 KiB tasks keeps at most 8 sockets busy: 16 threads move no more than 8
    assert hardware.socket_busbw_gbps(line, 16, 4) == pytest.approx(2 * 8 * 2.0)
    assert hardware.socket_busbw_gbps(line, 16, 4) == hardware.socket_busbw_gbps(line, 8, 1)
    assert hardware.socket_busbw_gbps(1.25, 16, 4) == pytest.approx(1.25 * hardware.TCP_PAYLOAD_FRACTION)
    net = with_socket_threads(network_spec("eth-400"), 4, 2)
    assert (net.socket_threads, net.socks_per_thread, net.gbps_per_nic) == (4, 2, pytest.approx(16.0))
    with pytest.raises(UsageError, match="0-16 socket threads"):
        with_socket_threads(network_spec("eth-400"), 17, 1)
    with pytest.raises(UsageError, match="at most 64 sockets"):
        with_socket_threads(network_spec("eth-400"), 16, 5)
    with pytest.raises(UsageError, match="RDMA"):
        with_socket_threads(network_spec("ib-ndr"), 2, 2)


def test_socket_latency_enters_every_network_step():
    node = load_preset("hgx-h100-8")
    rdma = make_cluster(node, 4, NetworkSpec("roce-100", 1, 4.0, False))
    sock = make_cluster(node, 4, NetworkSpec("eth-100", 1, 4.0, False))
    assert sock.network.transport == "socket" and sock.network.latency_us == hardware.SOCKET_LATENCY_US
    t_rdma, d = collective_time_s("all_reduce", MIB, rdma.indices, rdma, PROFILE, algorithm="ring")
    t_sock, _ = collective_time_s("all_reduce", MIB, sock.indices, sock, PROFILE, algorithm="ring")
    # ring all-reduce on 4 nodes: 2N = 8 network steps, each 15 us slower; same protocol either way
    assert t_sock - t_rdma == pytest.approx(8 * hardware.SOCKET_LATENCY_US * 1e-6)
    g = Group(32, 4, 8, 478.0, "NVLink", 4.0, tree_extra_us=15.0)
    base = Group(32, 4, 8, 478.0, "NVLink", 4.0)
    assert algorithm_time_s("all_reduce", 0, g, "tree", "LL", 4.0) - algorithm_time_s(
        "all_reduce", 0, base, "tree", "LL", 4.0) == pytest.approx(2 * 2 * 15e-6)  # 2 x log2(4) levels


def test_custom_link_by_rate_and_latency():
    c = load_cluster("2x hgx-h100-8+custom-25gbit-5us")
    net = c.network
    assert net.transport == "socket" and net.nics_per_node == 1
    assert net.gbps_per_nic == pytest.approx(hardware.socket_busbw_gbps(25 / 8))
    assert net.latency_us == pytest.approx(hardware.SOCKET_LATENCY_US + 5)  # the link's 5 us on top of TCP's own
    rdma = load_cluster("2x hgx-h100-8+custom-200gbit-2.5us-rdmax4").network
    assert (rdma.transport, rdma.nics_per_node, rdma.latency_us) == ("roce", 4, 2.5)
    assert rdma.gbps_per_nic == pytest.approx(25 * hardware.RDMA_DERATE)
    assert load_cluster("2x hgx-h100-8+eth-10x2").network.nics_per_node == 2
    for bad in ("custom-25gbps-5us", "custom-25gbit", "custom-fast"):
        with pytest.raises(UsageError, match=r"custom-<rate>gbit-<latency>us"):
            load_cluster(f"2x hgx-h100-8+{bad}")


def test_malformed_custom_link_is_a_one_line_error(capsys):
    assert main(["topo", "--preset", "2x hgx-h100-8+custom-25gbps-5us"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("topowise: error:") and "custom-25gbit-5us" in err[0]


def test_docs_catalog_matches_the_table():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "networks.md").read_text()
    rows = {line.split("|")[1].strip().strip("`"): line.split("|") for line in text.splitlines()
            if line.startswith("| `")}
    for name, kind in hardware.NETWORKS.items():
        cells = [c.strip() for c in rows[name]]
        assert (cells[3], cells[4], cells[5], cells[6]) == (f"{kind.line_gbps:g}", f"{kind.busbw_gbps:g}",
                                                            f"{kind.latency_us:g}", kind.transport), name
