"""`doctor --measure`: measured pair matrices and all-reduces judged against the cost model (synthetic
measurements on the fixture boards' topologies; no GPU needed), and the skip on a machine without GPUs."""

from __future__ import annotations

import json
from itertools import combinations
from pathlib import Path

import pytest

from topowise.cli.main import main
from topowise.doctor import measure, measured, snapshot
from topowise.topology.model import Topology

DATA = Path(__file__).parents[1] / "data" / "doctor"


def _board(name: str = "healthy_hgx_h100") -> tuple[snapshot.Snapshot, Topology]:
    snap = snapshot.load(DATA / f"{name}.json")
    return snap, Topology.from_dict(snap.topology)


def _copy_records(gbps_of) -> list[dict]:
    """p2p copy records as bench comm writes them, both directions of every pair of 8 GPUs."""
    return [{"kind": "p2p", "method": "copy", "mode": "uni", "src": a, "dst": b, "gbps": gbps_of(a, b)}
            for a in range(8) for b in range(8) if a != b]


def _expected(topo) -> dict:
    return measured.expected_pair_gbps(topo, combinations(range(8), 2))


def test_a_healthy_matrix_passes():
    _, topo = _board()
    want = _expected(topo)
    found = measured.pair_bandwidths(_copy_records(lambda a, b: 0.95 * want[(min(a, b), max(a, b))]))
    check = measured.check_pairs(found, want)
    assert check.status == "ok", check.evidence
    assert "28 pair(s)" in check.evidence


def test_a_pair_at_30_percent_is_named():
    _, topo = _board()
    want = _expected(topo)
    found = {p: (0.30 if p == (2, 5) else 1.0) * e for p, e in want.items()}
    check = measured.check_pairs(found, want)
    assert check.status == "fail"  # under FAR_SHORT
    assert "GPU2-GPU5" in check.evidence and "30%" in check.evidence
    assert "GPU2 with" not in check.evidence  # GPU2 is sound with its six other partners: the pair is named
    assert "nvidia-smi topo -m" in check.fix


def test_a_gpu_short_with_every_partner_is_named_not_its_pairs():
    _, topo = _board()
    want = _expected(topo)
    found = {p: (0.125 if 3 in p else 0.97) * e for p, e in want.items()}  # GPU3 at Gen3 x8 of Gen5 x16
    check = measured.check_pairs(found, want)
    assert check.status == "fail"
    assert check.evidence.startswith("GPU3 with each of its 7 partners")
    assert "GPU0-GPU3" not in check.evidence
    assert "GPU3 itself" in check.fix


def test_between_far_short_and_short_is_a_warning():
    _, topo = _board()
    want = _expected(topo)
    found = {p: (0.6 if p == (0, 1) else 1.0) * e for p, e in want.items()}
    assert measured.check_pairs(found, want).status == "warn"


def test_the_faster_direction_of_a_pair_is_kept():
    """A first copy that pays for the peer mapping slows one direction only; a fault slows both."""
    found = measured.pair_bandwidths(_copy_records(lambda a, b: 112.0 if (a, b) == (0, 1) else 384.0))
    assert found[(0, 1)] == 384.0
    both_slow = measured.pair_bandwidths(_copy_records(lambda a, b: 40.0 if {a, b} == {0, 1} else 384.0))
    assert both_slow[(0, 1)] == 40.0


def test_a_pcie_board_expects_pcie_pairs():
    """On the NVL board a bridged pair is expected far faster than a pair over PCIe: a PCIe pair at PCIe speed
    is sound, a bridged pair at PCIe speed is named."""
    _, topo = _board("healthy_nvl_h100")
    want = measured.expected_pair_gbps(topo, [(0, 1), (0, 2), (1, 2)])
    assert want[(0, 1)] > 2 * want[(0, 2)]
    pcie = want[(0, 2)]
    check = measured.check_pairs({(0, 1): pcie, (0, 2): pcie, (1, 2): pcie}, want)
    assert check.status == "fail" and "GPU0-GPU1" in check.evidence and "GPU0-GPU2" not in check.evidence


def test_all_reduce_against_the_cost_model():
    snap, topo = _board()
    gpus = tuple(range(8))
    want = measured.expected_all_reduce_gbps(topo, gpus)
    assert measured.check_all_reduce(0.9 * want, want, gpus).status == "ok"
    slow = measured.check_all_reduce(0.3 * want, want, gpus)
    assert slow.status == "fail" and "30%" in slow.evidence and "GPU0-7" in slow.evidence
    # the node's result as bench comm's rank 0 writes it, judged whole
    result = {"p2p": _copy_records(lambda a, b: 300.0),
              "collectives": [{"op": "all_reduce", "bytes": measured.ALL_REDUCE_BYTES, "busbw_gbps": 0.3 * want}]}
    names = {c.name: c.status for c in measure.judge(snap, result, gpus)}
    assert names == {"GPU pairs": "ok", "all-reduce": "fail"}


def test_measure_without_gpus_says_so_and_exits_0(capsys):
    snap = snapshot.load(DATA / "healthy_hgx_h100.json")
    bare = snapshot.Snapshot.from_dict(dict(snap.to_dict(), gpus=[], topology=None, gpu_note="no GPU: test"))
    (check,) = measure.measure_node(bare)
    assert check.status == "ok" and "no GPU" in check.evidence


def test_cli_measure_on_a_machine_without_gpus(capsys):
    rc = main(["doctor", "--measure", "--json"])
    out = json.loads(capsys.readouterr().out)
    if out["checks"][0]["status"] == "ok":
        pytest.skip("this machine has GPUs")
    assert rc == 0
    assert out["checks"][-1]["name"] == "measured" and "skipped" in out["checks"][-1]["evidence"]


def test_measure_with_a_snapshot_is_refused(capsys):
    rc = main(["doctor", "--measure", "--snapshot", str(DATA / "healthy_hgx_h100.json")])
    assert rc == 2
    assert capsys.readouterr().err.startswith("topowise: error: --measure")


def test_visible_gpus_follow_cuda_visible_devices():
    assert measure.visible_gpus(2, {"CUDA_VISIBLE_DEVICES": "4,6"}) == (4, 6)
    assert measure.visible_gpus(2, {"CUDA_VISIBLE_DEVICES": "GPU-ab12,GPU-cd34"}) == (0, 1)
    assert measure.visible_gpus(3, {}) == (0, 1, 2)
