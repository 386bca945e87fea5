"""Regions joined by a WAN: the two-region preset, the WAN's rate after encryption, its latency, HSDP across it."""

import json
from dataclasses import replace

import pytest

from topowise.cli.main import main
from topowise.costmodel import collectives, encryption
from topowise.costmodel.network import collective_time_s, wan_gbps_effective, wan_share
from topowise.costmodel.predict import predict
from topowise.costmodel.profile import default_profile
from topowise.errors import UsageError
from topowise.models.spec import load_model
from topowise.run import Run
from topowise.topology import load_topology
from topowise.topology.cluster import Cluster, load_cluster
from topowise.topology.fabric import WAN_CIPHERS, WanSpec
from topowise.units import MIB

PROFILE = default_profile()


def test_two_region_preset():
    c = load_cluster("two-region-h100")
    assert c.name == "two-region-h100" and c.num_nodes == 4 and c.regions == (2, 2)
    assert c.wan == WanSpec(100 / 8, 30.0, "aes-gcm", 8)
    assert c.gpus_by_region() == (tuple(range(16)), tuple(range(16, 32)))
    assert c.region_of(15) == 0 and c.region_of(16) == 1 and c.regions_spanned([0, 31]) == (0, 1)
    assert [t["tier"] for t in c.tiers()] == ["NVLink", "PCIe", "network", "WAN"]
    tiers = {label: (gbps, pairs) for label, gbps, pairs in c.bandwidth_tiers()}
    assert tiers["WAN"] == (12.5 / 16, 16 * 16) and sum(p for _, p in tiers.values()) == 32 * 31 // 2
    assert c.link(0, 16).gbps == 12.5 / 16 and c.link(0, 8).gbps == 48.0  # across regions / inside one
    same = load_cluster("2x (2x hgx-h100-8+ib-ndr) + wan-100gbit-30ms-aes-gcm")
    assert replace(same, name="two-region-h100") == c
    assert WAN_CIPHERS == encryption.CIPHERS


def test_region_names_that_are_wrong_say_the_syntax():
    with pytest.raises(UsageError, match=r"wan-<rate>gbit-<rtt>ms"):
        load_cluster("2x (2x hgx-h100-8+ib-ndr) + wan-100gbps-30ms")
    with pytest.raises(UsageError, match="at least 2 regions"):
        load_cluster("1x (2x hgx-h100-8+ib-ndr) + wan-100gbit-30ms")
    with pytest.raises(UsageError, match="inside the parentheses"):
        load_cluster("2x (hgx-h100-8) + wan-100gbit-30ms")
    c = load_cluster("two-region-h100")
    with pytest.raises(UsageError, match="needs a WAN"):
        replace(c, wan=None)
    with pytest.raises(UsageError, match="WAN cipher"):
        WanSpec(1.0, 1.0, "rot13")
    three = load_cluster("3x (1x hgx-h100-8+ib-ndr) + wan-10gbit-80ms-chacha20-2cores")
    assert three.regions == (1, 1, 1) and three.wan == WanSpec(1.25, 80, "chacha20", 2)


def test_topo_json_reads_back(tmp_path, capsys):
    assert main(["topo", "--preset", "two-region-h100", "--json"]) == 0
    text = capsys.readouterr().out
    path = tmp_path / "two.json"
    path.write_text(text)
    back = load_topology(str(path))
    assert isinstance(back, Cluster) and back == load_cluster("two-region-h100")
    assert json.loads(text)["wan"] == {"gbps": 12.5, "rtt_ms": 30.0, "cipher": "aes-gcm", "cores": 8}
    assert main(["topo", "--preset", "two-region-h100"]) == 0
    out = capsys.readouterr().out
    assert "WAN" in out and "NVLink" in out and "network" in out and "30 ms" in out


def test_hsdp_replica_all_reduce_crosses_the_wan_at_its_rate():
    c = load_cluster("two-region-h100")
    model = load_model("llama3.1-8b")
    run = Run(model, c.indices, "hsdp", shard_group_size=16)  # a shard group per region
    pred = predict(run, c, PROFILE)
    costs = pred.time.collectives
    inside = [k for k in costs if k.op != "all_reduce"]
    across = [k for k in costs if k.op == "all_reduce"]
    assert inside and all(k.link != "NET" or k.group_size == 16 for k in inside)  # sharding stays in a region
    wan = min(c.wan.gbps, encryption.encrypted_gbps("aes-gcm", 8, PROFILE))
    assert wan_gbps_effective(c, PROFILE) == wan
    # 16 replica groups of 2 (one GPU per region) cross at once: each gets 1/16 of the WAN
    assert across and all(k.bandwidth_gbps == pytest.approx(wan / 16) for k in across)
    group = (0, 16)
    t, detail = collective_time_s("all_reduce", 64 * MIB, group, c, PROFILE)
    assert detail["bound"] == "wan" and detail["regions"] == 2 and detail["bus_gbps"] == pytest.approx(wan / 16)
    assert detail["wan_s"] > 0.9 * t and wan_share("all_reduce", 64 * MIB, group, c, PROFILE) > 0.9
    assert wan_share("all_reduce", 64 * MIB, (0, 8), c, PROFILE) == 0  # two nodes of one region
    # the same run in one region is far faster: the WAN's share is what the step pays for distance
    one = load_cluster("4x hgx-h100-8+ib-ndr")
    assert predict(run, one, PROFILE).step_time_s < pred.step_time_s
    assert c.one_region().wan is None and c.one_region().num_nodes == 4
    wan_s = collectives.wan_seconds(pred.run, c, PROFILE)
    replica_s = sum(k.time_s for k in across)
    local_replica_s = sum(k.time_s for k in predict(run, c.one_region(), PROFILE).time.collectives
                          if k.op == "all_reduce")
    assert wan_s == pytest.approx(replica_s - local_replica_s)  # only the replica all-reduce crosses
    assert collectives.wan_seconds(pred.run, one, PROFILE) == 0.0


def test_encryption_can_be_the_wans_limit():
    slow = replace(PROFILE, encryption_gbps_per_core={"aes-gcm": 0.5, "chacha20": 0.25})
    c = load_cluster("2x (1x hgx-h100-8+ib-ndr) + wan-400gbit-10ms-chacha20-4cores")
    assert wan_gbps_effective(c, slow) == pytest.approx(4 * 0.25)  # 1 GB/s of 50
    _, d = collective_time_s("all_reduce", 64 * MIB, c.indices, c, slow)
    assert d["bound"] == "wan" and d["bus_gbps"] == pytest.approx(1.0)  # every GPU of a region crosses
    plain = replace(c, wan=replace(c.wan, cipher="none"))
    assert wan_gbps_effective(plain, slow) == c.wan.gbps


def test_wan_latency_per_crossing():
    c = load_cluster("2x (1x hgx-h100-8+ib-ndr) + wan-100gbit-40ms")
    one_way = 20e-3
    t_ring, _ = collective_time_s("all_reduce", 0, c.indices, c, PROFILE, algorithm="ring")
    t_tree, _ = collective_time_s("all_reduce", 0, c.indices, c, PROFILE, algorithm="tree")
    assert 4 * one_way < t_ring < 4 * one_way + 1e-3  # 2R crossings of the ring's critical path
    assert 2 * one_way < t_tree < 2 * one_way + 1e-3  # down and up the tree once
    t_ag, _ = collective_time_s("all_gather", 0, c.indices, c, PROFILE)
    assert one_way < t_ag < one_way + 1e-3  # R - 1
    enc = load_cluster("2x (1x hgx-h100-8+ib-ndr) + wan-100gbit-40ms-aes-gcm")
    t_enc, _ = collective_time_s("all_reduce", 0, enc.indices, enc, PROFILE, algorithm="tree")
    assert t_enc - t_tree == pytest.approx(2 * encryption.encryption_latency_s("aes-gcm", PROFILE))


def test_collective_cost_across_regions_goes_through_the_network_model():
    c = load_cluster("two-region-h100")
    cost = collectives.collective("all_reduce", 64 * MIB, "fp32", (0, 16), c, 1, "backward", PROFILE,
                                  [(i, i + 16) for i in range(16)])
    t, _ = collective_time_s("all_reduce", 64 * MIB, (0, 16), c, PROFILE)
    assert cost.link == "NET" and cost.time_s == pytest.approx(t)
