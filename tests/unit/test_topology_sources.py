"""Topology sources: `nvidia-smi topo -m` text (real dumps in data/), NVML (a fake module), and checks."""

import importlib.util
import re
import sys
from pathlib import Path

import pytest

from topowise.errors import UsageError
from topowise.topology import topology_from_text
from topowise.topology.checks import warnings
from topowise.topology.model import Topology
from topowise.topology.nvml import discover, normalize_bus_id
from topowise.topology.presets import load_preset
from topowise.topology.smi_text import parse_topo_text

DATA = Path(__file__).parent / "data"
DUMPS = sorted(p.name for p in DATA.glob("*.txt"))


def _load_fake():
    spec = importlib.util.spec_from_file_location("fake_nvml", DATA / "fake_nvml.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fake = _load_fake()


def parse(name, **kw) -> Topology:
    return parse_topo_text((DATA / name).read_text(), Path(name).stem, **kw)


def _index_rows():
    """INDEX.md's table: file -> (GPU count, islands). "{0-7}" and "{0,1}" are islands; none listed: singletons."""
    rows = {}
    for line in (DATA / "INDEX.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 4 or not cells[0].endswith(".txt"):
            continue
        n = int(cells[2])
        islands = []
        for group in re.findall(r"\{([^}]*)\}", cells[3]):
            members = []
            for part in group.split(","):
                lo, _, hi = part.partition("-")
                members.extend(range(int(lo), int(hi or lo) + 1))
            islands.append(tuple(members))
        covered = {g for isl in islands for g in isl}
        islands += [(g,) for g in range(n) if g not in covered]
        rows[cells[0]] = (n, tuple(sorted(islands)))
    return rows


INDEX = _index_rows()


def test_index_lists_every_dump():
    assert sorted(INDEX) == DUMPS


@pytest.mark.parametrize("name", DUMPS)
def test_dump_gives_the_islands_in_index(name):
    n, islands = INDEX[name]
    topo = parse(name)
    assert topo.num_gpus == n
    assert topo.islands() == islands
    assert len(topo.links) == n * (n - 1) // 2


@pytest.mark.parametrize("name,nvswitch", [
    ("01_h100-sxm-x8_nvswitch_no-nics.txt", True), ("02_dgx-a100_mlx5x12.txt", True),
    ("15_gb200-tray-x4_nv18.txt", True), ("04_a100-80gb-pcie-x4_nvlink-pairs.txt", False),
    ("06_v100-sxm2-x8_hybrid-cube-mesh_vastai_mlx5x1.txt", False), ("17_h200-x2_nv18.txt", False),
    ("11_rtx4090-x8_pcie-only_vastai.txt", False),
])
def test_nvswitch_inferred_only_where_links_exceed_a_gpu(name, nvswitch):
    assert parse(name).nvswitch is nvswitch


def test_four_way_bridge_is_not_a_switch():
    # H200 NVL: NV6 to each of 3 peers = 18 links, which one GPU has: a bridge, not a switch.
    lines = ["\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\tNUMA Affinity"]
    for i in range(4):
        lines.append(f"GPU{i}\t" + "\t".join(" X " if i == j else "NV6" for j in range(4)) + "\t0-31\t0")
    assert parse_topo_text("\n".join(lines), "nvl4").nvswitch is False


def test_nvlink_counts_and_rates_hybrid_cube_mesh():
    topo = parse("06_v100-sxm2-x8_hybrid-cube-mesh_vastai_mlx5x1.txt", gpu_name="Tesla V100-SXM2-32GB")
    assert topo.link(0, 3).nvlinks == 2 and topo.link(0, 3).gbps == 50.0  # NVLink 2: 25 GB/s per link
    assert topo.link(0, 1).nvlinks == 1 and topo.link(0, 1).gbps == 25.0
    assert topo.link(0, 5).kind == "SYS" and topo.link(0, 5).gbps == 15.75  # V100: PCIe gen 3
    assert sum(1 for l in topo.links if l.kind == "SYS") == 12
    assert [g.numa_node for g in topo.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]


def test_unknown_gpu_assumes_nvlink4_and_says_so():
    topo = parse("02_dgx-a100_mlx5x12.txt")
    assert topo.link(0, 1).gbps == pytest.approx(12 * 26.5625)
    assert "assumed NVLink 4" in topo.source and "PCIe gen 4" in topo.source
    a100 = parse("02_dgx-a100_mlx5x12.txt", gpu_name="NVIDIA A100-SXM4-80GB")
    assert a100.link(0, 1).gbps == 300.0 and "assumed" not in a100.source
    assert a100.gpus[0].name == "NVIDIA A100-SXM4-80GB"


def test_mlx5_columns_become_nics_with_nearest_gpus():
    topo = parse("02_dgx-a100_mlx5x12.txt")
    nics = {n.name: n.nearest_gpus for n in topo.nics}
    assert list(nics) == [f"mlx5_{i}" for i in range(12)]
    assert nics["mlx5_0"] == (0, 1) and nics["mlx5_8"] == (6, 7)
    assert nics["mlx5_4"] == ()  # SYS to every GPU: near none
    assert [g.numa_node for g in topo.gpus] == [3, 3, 1, 1, 7, 7, 5, 5]


def test_nic_legend_names_nics_and_numa_local_gpus_are_nearest():
    v100 = parse("06_v100-sxm2-x8_hybrid-cube-mesh_vastai_mlx5x1.txt")
    assert [(n.name, n.nearest_gpus) for n in v100.nics] == [("mlx5_2", (0, 1, 2, 3))]
    l40s = parse("13_l40s-x4_pcie_nics2.txt")
    assert [(n.name, n.nearest_gpus) for n in l40s.nics] == [("mlx5_0", (2, 3)), ("mlx5_1", (2, 3))]


def test_ansi_escapes_are_stripped():
    topo = parse("09_rtx-a6000-x3_one-nvlink-bridge.txt")
    assert topo.link(0, 1).nvlinks == 4 and topo.link(0, 2).kind == "NODE"


def test_tabs_and_spaces_parse_the_same():
    text = (DATA / "04_a100-80gb-pcie-x4_nvlink-pairs.txt").read_text()
    spaced = parse_topo_text(re.sub(r"\t", "    ", text), "x")
    tabbed = parse_topo_text(text, "x")
    assert spaced.links == tabbed.links and spaced.gpus == tabbed.gpus


def test_old_soc_name_reads_as_sys():
    topo = parse_topo_text("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tSOC\t0-7\nGPU1\tSOC\t X \t0-7\n", "old")
    assert topo.link(0, 1).kind == "SYS" and topo.gpus[0].numa_node is None


def test_parsed_text_round_trips_through_json():
    topo = parse("02_dgx-a100_mlx5x12.txt")
    again = topology_from_text(topo.to_json(), "json")
    assert again.to_dict() == topo.to_dict()


@pytest.mark.parametrize("text,msg", [
    ("hello world\nthis is not a topology\n", "line 1: expected the header"),
    ("\tGPU0\tGPU1\nGPU0\t X \tNV4\nhello\n", "line 3: expected a row starting with GPU<n> (GPU1), got 'hello'"),
    ("\tGPU0\tGPU1\nGPU0\t X \tNV4\n", "line 3: expected a row starting with GPU<n> (GPU1), got nothing"),
    ("\tGPU0\tGPU1\nGPU0\t X \tNV4\nGPU1\tNV4\t X \n\tGPU0\n", None),  # trailing junk after the matrix is ignored
    ("\tGPU0\tGPU1\nGPU0\t X \tFOO\nGPU1\tFOO\t X \n", "line 2: cell GPU0/GPU1 is 'FOO'"),
    ("\tGPU0\tGPU1\nGPU0\t X \nGPU1\tNV4\t X \n", "line 2: row GPU0 has 1 cells, expected 2"),
    ("\tGPU0\tGPU1\nGPU0\t X \tNV4\nGPU1\tSYS\t X \n", "line 3: GPU1/GPU0 is SYS but GPU0/GPU1 is NV4"),
    ("\tGPU0\tGPU2\n", "line 1: expected GPU columns GPU0, GPU1, ... first, in order"),
    ("\tGPU0\tmlx5_0\tGPU1\n", "line 1: expected GPU columns GPU0, GPU1, ... first, in order"),
    ("\tGPU0\tmlx5_0\nGPU0\t X \tPIX\n", "expected a row starting with the NIC mlx5_0"),
])
def test_bad_text_names_the_line(text, msg):
    if msg is None:
        assert parse_topo_text(text, "t").num_gpus == 2
        return
    with pytest.raises(UsageError, match=re.escape(msg)):
        parse_topo_text(text, "t")


# --- NVML ------------------------------------------------------------------------------------------

def test_nvml_h200_nvswitch_slice():
    nvml = fake.h200_nvswitch_slice()
    topo = discover(nvml)
    assert nvml.calls == ["init", "shutdown"]
    assert topo.nvswitch and topo.islands() == ((0, 1),)
    link = topo.link(0, 1)
    assert (link.kind, link.nvlinks, link.gbps) == ("NV", 18, pytest.approx(478.125))
    assert [g.pci_bus_id for g in topo.gpus] == ["0000:18:00.0", "0000:2a:00.0"]
    assert topo.gpus[0].name == "NVIDIA H200" and topo.gpus[1].numa_node == 0
    assert topo.pcie_gen == 5 and topo.gpus[0].memory_bytes == 150_754_820_096
    assert topo.bottleneck_gbps((0, 1)) == pytest.approx(478.125)


def test_nvml_bridged_pairs():
    topo = discover(fake.bridged_pairs_4(p2p_bad=[(0, 2)]))
    assert not topo.nvswitch
    assert topo.islands() == ((0, 1), (2, 3))
    assert (topo.link(0, 1).kind, topo.link(0, 1).nvlinks, topo.link(0, 1).gbps) == ("NV", 12, 300.0)
    assert topo.link(1, 2).kind == "SYS" and topo.link(1, 2).gbps == 31.5
    assert topo.link(0, 2).p2p_supported is False and topo.link(1, 3).p2p_supported is True
    assert [g.numa_node for g in topo.gpus] == [None] * 4  # no NUMA call, no such sysfs device


def test_nvml_without_remote_type_tells_gpus_by_bus_id():
    assert discover(fake.bridged_pairs_4(remote_type=False)).islands() == ((0, 1), (2, 3))
    nvml = fake.h200_nvswitch_slice()
    nvml.nvmlDeviceGetNvLinkRemoteDeviceType = None
    topo = discover(nvml)
    assert topo.nvswitch and topo.link(0, 1).nvlinks == 18


def test_nvml_pcie_only_uses_common_ancestor_and_width():
    gpus = [("NVIDIA L40S", f"0000:{b}:00.0") for b in ("01", "02", "81")]
    nvml = fake.FakeNVML(gpus, ancestors={(0, 1): 10, (0, 2): 50, (1, 2): 50}, pcie=(4, 8), numa=[0, 0, 1])
    topo = discover(nvml)
    assert [l.kind for l in topo.links] == ["PIX", "SYS", "SYS"]
    assert topo.link(0, 1).gbps == pytest.approx(31.5 / 2)  # x8
    assert [g.numa_node for g in topo.gpus] == [0, 0, 1]
    assert all(len(i) == 1 for i in topo.islands())


def test_nvml_no_gpus_or_no_library_says_what_to_do(monkeypatch):
    with pytest.raises(UsageError, match="no GPUs.*--preset NAME or --file PATH"):
        discover(fake.FakeNVML([]))
    with pytest.raises(UsageError, match="NVML could not start.*--preset NAME or --file PATH"):
        discover(fake.FakeNVML([], init_error="Driver Not Loaded"))
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with pytest.raises(UsageError, match="nvidia-ml-py.*--preset NAME or --file PATH"):
        discover()


def test_normalize_bus_id():
    assert normalize_bus_id("00000000:AB:00.0") == "0000:ab:00.0"
    assert normalize_bus_id("0000:ab:00.0") == "0000:ab:00.0"
    assert normalize_bus_id("") == ""


# --- checks ----------------------------------------------------------------------------------------

def _nvl8():
    return load_preset("h100-nvl-8")


def test_selection_spanning_islands_names_them_and_the_ratio():
    (w,) = warnings(_nvl8(), (1, 2), environ={})
    assert "span 2 NVLink islands ({0,1} {2,3})" in w
    assert "63 GB/s" in w and "318.75 GB/s" in w and "5.1x slower" in w
    assert warnings(_nvl8(), (0, 1), environ={}) == []


def test_whole_node_spanning_islands_warns_but_pcie_only_box_does_not():
    assert any("all 8 GPUs span 4 NVLink islands" in w for w in warnings(_nvl8(), environ={}))
    assert warnings(load_preset("pcie-l40s-8"), environ={}) == []
    assert warnings(load_preset("hgx-h100-8"), environ={}) == []


def test_p2p_unsupported_pair():
    topo = discover(fake.bridged_pairs_4(p2p_bad=[(0, 1)]))
    (w,) = warnings(topo, (0, 1), environ={})
    assert "P2P is reported unsupported between GPUs 0-1 (NV12)" in w
    assert warnings(topo, (2, 3), environ={}) == []


def test_p2p_disable_takes_nvlink_away():
    (w,) = warnings(load_preset("h200-x2"), environ={"NCCL_P2P_DISABLE": "1"})
    assert "NCCL_P2P_DISABLE=1 turns off NVLink" in w
    assert warnings(load_preset("h200-x2"), environ={"NCCL_P2P_DISABLE": "0"}) == []


@pytest.mark.parametrize("level", ["LOC", "0"])
def test_p2p_level_loc_takes_nvlink_away(level):
    (w,) = warnings(load_preset("h200-x2"), environ={"NCCL_P2P_LEVEL": level})
    assert "P2P is off on every pair, NVLink included" in w


@pytest.mark.parametrize("level", ["NVL", "PIX", "PXB", "PHB", "SYS", "1", "2", "3", "4", "5"])
def test_p2p_level_above_loc_keeps_nvlink(level):
    # NCCL uses P2P when path <= level and NVL is the nearest path after LOC (paths.cc)
    assert warnings(load_preset("h200-x2"), environ={"NCCL_P2P_LEVEL": level}) == []


def test_p2p_level_below_default_slows_pcie_pairs():
    topo = discover(fake.FakeNVML([("NVIDIA L40S", "0000:01:00.0"), ("NVIDIA L40S", "0000:02:00.0")],
                                  ancestors={(0, 1): 20}))  # PXB: P2P by NCCL's default
    (w,) = warnings(topo, environ={"NCCL_P2P_LEVEL": "PIX"})
    assert "turns off P2P on 1 PCIe pair(s)" in w and "PXB" in w
    assert warnings(topo, environ={"NCCL_P2P_LEVEL": "PXB"}) == []


def test_p2p_level_junk_is_reported():
    (w,) = warnings(load_preset("h200-x2"), environ={"NCCL_P2P_LEVEL": "nvlink"})
    assert "not a level NCCL knows" in w


def test_shm_disable_with_p2p_off():
    ws = warnings(load_preset("h200-x2"), environ={"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"})
    assert len(ws) == 2 and "NCCL_SHM_DISABLE=1 with P2P off" in ws[1]
    assert warnings(load_preset("h200-x2"), environ={"NCCL_SHM_DISABLE": "1"}) == []


@pytest.mark.parametrize("var", ["NCCL_ALGO", "NCCL_PROTO"])
def test_forced_algo_or_proto(var):
    (w,) = warnings(load_preset("h200-x2"), environ={var: "Ring" if var == "NCCL_ALGO" else "Simple"})
    assert w.startswith(f"{var}=") and "forced" in w


def test_ib_disable_only_matters_with_nics():
    (w,) = warnings(load_preset("dgx-a100-8"), environ={"NCCL_IB_DISABLE": "1"})
    assert "NCCL_IB_DISABLE=1" in w and "mlx5_0" in w
    assert warnings(load_preset("hgx-h100-8"), environ={"NCCL_IB_DISABLE": "1"}) == []


def test_cuda_visible_devices_hiding_gpus():
    (w,) = warnings(load_preset("hgx-h100-8"), environ={"CUDA_VISIBLE_DEVICES": "0,1"})
    assert "shows 2 of the 8 GPUs" in w
    assert warnings(load_preset("h200-x2"), environ={"CUDA_VISIBLE_DEVICES": "0,1"}) == []
    (w,) = warnings(load_preset("h200-x2"), environ={"CUDA_VISIBLE_DEVICES": ""})
    assert "shows 0 of the 2 GPUs" in w


def test_nvls_off_on_a_switch_board():
    (w,) = warnings(load_preset("hgx-h100-8"), environ={"NCCL_NVLS_ENABLE": "0"})
    assert "NVLink SHARP" in w
    assert warnings(load_preset("h200-x2"), environ={"NCCL_NVLS_ENABLE": "0"}) == []


def test_bandwidth_tiers_fastest_first():
    tiers = load_preset("h100-nvl-8").bandwidth_tiers()
    assert [t[0] for t in tiers] == ["NV12", "NODE", "SYS"]
    assert tiers[0][1] == pytest.approx(318.75) and tiers[0][2] == 4 and sum(t[2] for t in tiers) == 28
