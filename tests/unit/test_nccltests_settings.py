"""`topowise nccl-tests --fabric pcie|nvlink`, `--nvls on|off` and one GPU per node, each against a figure
published or recorded in tests/data/published/nccl-tests/settings.json (what each figure is, and which default
constant was fitted to it, is written beside it there)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from topowise import nccltests
from topowise.costmodel.profile import default_profile
from topowise.errors import UsageError
from topowise.topology import load_topology

ROOT = Path(__file__).resolve().parents[2]
FIGURES = json.loads((ROOT / "tests/data/published/nccl-tests/settings.json").read_text())["figures"]
WITHIN = 0.12  # the largest miss the nccl-tests comparisons allow for a published figure (docs/nccl-tests.md)


def expected_busbw(figure: dict, **setting) -> float:
    source = figure["topology"]
    topo = load_topology(str(ROOT / source) if source.endswith(".json") else source)
    chosen = {**figure["setting"], **setting}
    topo, profile = nccltests.with_settings(topo, default_profile(), chosen.get("fabric", "nvlink"),
                                            chosen.get("nvls"))
    gpus = nccltests.pick_gpus(topo, figure["num_gpus"])
    row = nccltests.expected_row(figure["op"], figure["bytes"], gpus, topo, profile, chosen.get("algo", "auto"))
    return row.busbw_gbps


@pytest.mark.parametrize("figure", FIGURES, ids=[f["id"] for f in FIGURES])
def test_each_setting_gives_the_figure_it_was_run_with(figure):
    assert expected_busbw(figure) == pytest.approx(figure["busbw_gbps"], rel=WITHIN)


def test_p2p_off_is_the_host_path_and_not_the_nvlink_figure():
    pcie, nvlink = (next(f for f in FIGURES if f["id"] == i) for i in
                    ("h200x2-p2p-off-all-reduce-1g", "h200x2-p2p-on-all-reduce-1g"))
    assert expected_busbw(pcie) < nvlink["busbw_gbps"] / 5 < expected_busbw(nvlink)


def test_nvls_off_gives_the_ring_figure_on_the_same_board():
    nvls = next(f for f in FIGURES if f["id"] == "h100x8-nvls-all-reduce")
    ring = next(f for f in FIGURES if f["id"] == "h100x8-ring-all-reduce")
    off = expected_busbw(nvls, nvls="off")
    assert off == pytest.approx(ring["busbw_gbps"], rel=WITHIN) and off < expected_busbw(nvls)


def test_nvls_off_also_turns_off_nvls_tree_across_nodes():
    topo = load_topology("2x hgx-h100-8+ib-ndr")
    on = nccltests.expected_row("all_reduce", 2**32, tuple(range(16)), topo, default_profile())
    _, profile = nccltests.with_settings(topo, default_profile(), "nvlink", "off")
    off = nccltests.expected_row("all_reduce", 2**32, tuple(range(16)), topo, profile)
    assert on.algorithm.startswith("nvlstree") and not off.algorithm.startswith("nvlstree")


def test_one_gpu_per_node_is_held_to_its_pcie_link_not_its_four_nics():
    """nccl-tests #232: 2 nodes x 1 H100 with 4 NDR NICs (4 x 48 GB/s); every size the thread shows is met."""
    tree = next(f for f in FIGURES if f["id"] == "h100x1-2nodes-tree-32m")
    topo = load_topology(str(ROOT / tree["topology"]))
    measured = nccltests.parse_output((ROOT / "tests/data/nccl_tests/h100x2-1gpu-per-node-tree_nccl-tests-232.txt")
                                      .read_text())
    result = nccltests.compare(measured, topo, 2, algorithm="tree")
    assert all(abs(r.ratio - 1) < WITHIN for r in result["rows"]), [(r.bytes, r.ratio) for r in result["rows"]]
    ring = nccltests.expected_row("all_reduce", 2**30, (0, 1), topo, algorithm="ring")
    assert ring.busbw_gbps <= 48.0  # NCCL's rate of one PCIe Gen5 x16 link, not the 4 NICs' 192 GB/s
    assert ring.bound == "gpu-pcie"


def test_nvls_on_where_the_board_has_none_is_refused_with_the_reason():
    with pytest.raises(UsageError, match="no NVLink SHARP"):
        nccltests.with_settings(load_topology("dgx-a100-8"), default_profile(), "nvlink", "on")
    with pytest.raises(UsageError, match="--fabric pcie takes NVLink away"):
        nccltests.with_settings(load_topology("hgx-h100-8"), default_profile(), "pcie", "on")


def test_the_flags_reach_the_command(capsys):
    from topowise.cli import main

    args = ["nccl-tests", "--topology", "hgx-h100-8", "--ops", "all_reduce", "-b", "4G", "-e", "4G", "--json"]
    busbw = {}
    for extra in ([], ["--nvls", "off"], ["--fabric", "pcie"]):
        assert main.main(args + extra) == 0
        busbw[" ".join(extra)] = json.loads(capsys.readouterr().out)["tables"]["all_reduce"][0]["busbw_gbps"]
    assert busbw[""] > busbw["--nvls off"] > busbw["--fabric pcie"]
