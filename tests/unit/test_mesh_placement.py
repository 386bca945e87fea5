"""Mesh dimensions placed on GPU lists: torchtitan's rank order, hand-worked, and its placement rules."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from topowise.errors import UsageError
from topowise.planner.mesh import DIMS, FLATTENED, build_mesh, groups_spanning, largest_contained_degree


def node(gpu):
    return gpu[0]


def test_hand_worked_16_gpus_pp2_dp2_tp4():
    # world 16 unflattened as (pp 2, dp_shard 2, tp 4), tp fastest, as torchtitan's DeviceMesh lays it out:
    # rank = pp * 8 + dp_shard * 4 + tp
    mesh = build_mesh(range(16), pp=2, dp_shard=2, tp=4)
    assert mesh.groups("tp") == ((0, 1, 2, 3), (4, 5, 6, 7), (8, 9, 10, 11), (12, 13, 14, 15))
    assert mesh.groups("dp_shard") == ((0, 4), (1, 5), (2, 6), (3, 7), (8, 12), (9, 13), (10, 14), (11, 15))
    assert mesh.groups("pp") == tuple((i, i + 8) for i in range(8))
    assert mesh.groups("cp") == tuple((i,) for i in range(16))
    assert mesh.coords(13) == {"pp": 1, "dp_replicate": 0, "dp_shard": 1, "cp": 0, "tp": 1}


def test_every_gpu_in_exactly_one_group_of_each_dimension():
    gpus = [(n, g) for n in range(4) for g in range(8)]
    for degrees in itertools.product((1, 2), (1, 2), (1, 2), (1, 2, 4)):
        pp, dp_replicate, cp, tp = degrees
        mesh = build_mesh(gpus, pp=pp, dp_replicate=dp_replicate, cp=cp, tp=tp)
        for dim in DIMS + tuple(FLATTENED):
            groups = mesh.groups(dim)
            flat = [g for group in groups for g in group]
            assert sorted(flat) == sorted(gpus)
            size = 1
            for d in FLATTENED.get(dim, (dim,)):
                size *= getattr(mesh, d)
            assert {len(g) for g in groups} == {size}


def test_tp_groups_are_contiguous_runs():
    gpus = [7, 3, 5, 1, 0, 2, 4, 6]  # any order the caller chose
    for tp in (1, 2, 4, 8):
        mesh = build_mesh(gpus, tp=tp)
        assert mesh.groups("tp") == tuple(tuple(gpus[i:i + tp]) for i in range(0, 8, tp))


def test_two_nodes_tp8_stays_inside_each_node_and_pp_crosses():
    gpus = [(n, g) for n in range(2) for g in range(8)]
    mesh = build_mesh(gpus, tp=8, pp=2)
    assert all(len({node(x) for x in g}) == 1 for g in mesh.groups("tp"))
    assert groups_spanning(mesh, "tp", node) == ()
    assert len(groups_spanning(mesh, "pp", node)) == 8
    # TP 16 cannot stay inside a node of 8: every group spans
    assert groups_spanning(build_mesh(gpus, tp=16), "tp", node) == (tuple(gpus),)


def test_largest_tp_kept_inside_islands():
    hgx = [(n, g) for n in range(2) for g in range(8)]
    assert largest_contained_degree(hgx, node) == 8
    # h100-nvl-8: NVLink bridges pair GPUs (0,1) (2,3) ...: TP is capped at 2 by the bridge pairs
    nvl = list(range(8))
    assert largest_contained_degree(nvl, lambda g: g // 2) == 2
    assert largest_contained_degree(nvl, lambda g: 0, limit=4) == 4
    assert largest_contained_degree([0, 2, 1, 3], lambda g: g // 2) == 1  # the order splits the pairs


def test_validation_carries_the_arithmetic():
    with pytest.raises(UsageError, match=r"dp_replicate 2 x dp_shard 3 x cp 1 x tp 4 x pp 1 = 24 GPUs, but 16 are"):
        build_mesh(range(16), dp_replicate=2, dp_shard=3, tp=4)
    with pytest.raises(UsageError, match=r"12 GPUs do not divide by dp_replicate 1 x cp 1 x tp 8 x pp 1 = 8"):
        build_mesh(range(12), tp=8)
    with pytest.raises(UsageError, match=r"names 3 more than once"):
        build_mesh([0, 1, 2, 3, 3, 5], tp=2)
    with pytest.raises(UsageError, match=r"unknown mesh dimension 'ep'"):
        build_mesh(range(4), tp=2).groups("ep")
    assert build_mesh(range(64), tp=8, pp=4).dp_shard == 2


def test_megatron_table1_rows_are_meshes_on_dgx_nodes():
    # SC'21 Table 1 (tests/data/published): each row's t x p x d fills its GPUs, and with GPUs listed
    # node by node (DGX A100, 8 per node) every TP group stays inside one node
    table = json.loads((Path(__file__).parents[1] / "data" / "published" / "megatron_sc21_table1.json").read_text())
    v, s = table["common"]["vocab"], table["common"]["seq"]
    for row in table["rows"]:
        gpus = [(n, g) for n in range(row["gpus"] // 8) for g in range(8)]
        mesh = build_mesh(gpus, tp=row["t"], pp=row["p"])
        assert mesh.dp_shard == row["d"] and groups_spanning(mesh, "tp", node) == ()
        # the transcription against the paper's own eq. 2 and its aggregate column
        l, h = row["layers"], row["hidden"]
        params = 12 * l * h**2 * (1 + 13 / (12 * h) + (v + s) / (12 * l * h))
        assert round(params / 1e9, 1) == pytest.approx(row["params_billion"], abs=0.051)
        slack = 0.5 * row["gpus"] / 1e3 + 0.05  # TFLOP/s per GPU printed whole, PFLOP/s to one decimal
        assert row["achieved_tflops_per_gpu"] * row["gpus"] / 1e3 == pytest.approx(row["aggregate_pflops"], abs=slack)
