"""`topowise doctor`: every fault snapshot is named with its fix, the healthy boards pass, snapshots
round-trip, and the live read runs on a machine without GPUs."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from topowise.cli.main import main
from topowise.doctor import checks, read, snapshot
from topowise.errors import UsageError

DATA = Path(__file__).parents[1] / "data" / "doctor"
HEALTHY = ("healthy_hgx_h100", "healthy_nvl_h100")
# fixture -> (the check that must name it, its status, words its evidence must hold)
FAULTS = {
    "fault_pcie_gen3_x8": ("PCIe link", "fail", ("GPU3", "Gen3 x8")),
    "fault_nvlink_down": ("NVLink", "fail", ("GPU5", "link 7 down")),
    "fault_acs_on": ("PCIe ACS", "fail", ("root complex",)),
    "fault_nic_other_socket": ("NIC NUMA", "warn", ("GPU0-3", "NUMA 0")),
    "fault_nic_off_its_switch": ("NIC rails", "warn", ("GPU3",)),
    "fault_nccl_p2p_disable": ("NCCL_P2P_DISABLE", "fail", ("without",)),
    "fault_thermal_throttle": ("clocks", "fail", ("GPU2", "thermal", "91 C")),
    "fault_cpus_one_socket": ("CPUs", "warn", ("GPU4-7",)),
    "fault_nccl_nvls_disable": ("NCCL_NVLS_ENABLE", "warn", ("with NVLS",)),
    "fault_row_remap_pending": ("memory errors", "fail", ("GPU6", "pending")),
    "fault_iommu_translated": ("IOMMU", "warn", ("DMA-FQ",)),
}


def _load(name: str) -> snapshot.Snapshot:
    return snapshot.load(DATA / f"{name}.json")


@pytest.mark.parametrize("name", HEALTHY)
def test_healthy_boards_pass_every_check(name):
    found = checks.run_checks(_load(name))
    assert [c for c in found if c.status != "ok"] == []
    assert {"PCIe link", "NVLink", "clocks", "PCIe ACS", "NIC NUMA", "environment"} <= {c.name for c in found}


@pytest.mark.parametrize("name", FAULTS)
def test_each_fault_is_named_alone_with_its_fix(name):
    check_name, status, words = FAULTS[name]
    found = checks.run_checks(_load(name))
    bad = [c for c in found if c.status != "ok"]
    assert [(c.name, c.status) for c in bad] == [(check_name, status)]
    assert all(w in bad[0].evidence for w in words), bad[0].evidence
    assert bad[0].fix and bad[0].source


def test_p2p_disable_is_priced_by_the_cost_model():
    """On an NVSwitch board P2P off leaves the all-reduce at PCIe speed: far below the NVLink figure."""
    check = next(c for c in checks.run_checks(_load("fault_nccl_p2p_disable")) if c.name == "NCCL_P2P_DISABLE")
    found = re.search(r"(\d+) GB/s busbw with NVLink, (\d+) without", check.evidence)
    with_nvlink, without = map(float, found.groups())
    assert without < with_nvlink / 5


def test_a_link_nvml_no_longer_lists_counts_as_lost():
    """Against the board's design: a GPU that reports 17 links where its peers report 18."""
    snap = _load("healthy_hgx_h100")
    check = checks.check_nvlink(_with_gpu0(snap, nvlink_up=(True,) * 17))
    assert check.status == "fail" and "GPU0" in check.evidence


def test_links_no_bridge_wires_are_not_a_fault():
    """NVML lists a card's links even where no bridge joins them: down on every GPU alike is the design."""
    snap = _load("healthy_nvl_h100")
    from dataclasses import replace

    unwired = replace(snap, gpus=tuple(replace(g, nvlink_up=g.nvlink_up + (False,) * 6) for g in snap.gpus))
    assert checks.check_nvlink(unwired).status == "ok"
    no_bridge = replace(snap, gpus=tuple(replace(g, nvlink_up=(False,) * 18) for g in snap.gpus))
    assert checks.check_nvlink(no_bridge).status == "ok"


def test_nvls_off_on_a_board_without_nvls_costs_nothing():
    from dataclasses import replace

    nvl = replace(_load("healthy_nvl_h100"), environment={"NCCL_NVLS_ENABLE": "0"})
    assert [c.status for c in checks.run_checks(nvl) if c.name == "NCCL_NVLS_ENABLE"] == ["ok"]


def test_gen_below_max_at_idle_is_not_a_fault():
    """NVML reports a lower PCIe generation while the GPU idles (power saving); a lower width is a fault."""
    snap = _load("healthy_hgx_h100")
    idle_gen3 = _with_gpu0(snap, pcie_gen=3, clock_event_reasons=checks.GPU_IDLE)
    assert checks.check_pcie(idle_gen3).status == "ok"
    idle_x8 = _with_gpu0(snap, pcie_width=8, clock_event_reasons=checks.GPU_IDLE)
    assert checks.check_pcie(idle_x8).status == "fail"


def test_unreadable_acs_asks_for_root():
    from dataclasses import replace

    snap = _load("healthy_hgx_h100")
    unread = replace(snap, bridges=tuple(replace(b, acs_ctrl=None) for b in snap.bridges))
    check = checks.check_acs(unread)
    assert check.status == "warn" and "sudo" in check.fix


def _with_gpu0(snap, **changes):
    from dataclasses import replace

    return replace(snap, gpus=(replace(snap.gpus[0], **changes),) + snap.gpus[1:])


@pytest.mark.parametrize("name", HEALTHY + tuple(FAULTS))
def test_snapshot_round_trips(name):
    text = (DATA / f"{name}.json").read_text()
    snap = snapshot.Snapshot.from_dict(json.loads(text))
    assert snapshot.Snapshot.from_dict(json.loads(snap.to_json())) == snap
    assert snap.to_json() + "\n" == text


def test_a_file_that_is_no_snapshot_is_refused(tmp_path):
    path = tmp_path / "topo.json"
    path.write_text('{"format": "topowise-topology"}')
    with pytest.raises(UsageError, match="not a doctor snapshot"):
        snapshot.load(path)


def test_cli_exit_status_follows_the_worst_check(capsys):
    assert main(["doctor", "--snapshot", str(DATA / "fault_nvlink_down.json")]) == 1
    assert main(["doctor", "--snapshot", str(DATA / "fault_nic_other_socket.json")]) == 0  # a warn passes
    capsys.readouterr()
    assert main(["doctor", "--json", "--snapshot", str(DATA / "fault_pcie_gen3_x8.json")]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "fail"
    assert {"name", "status", "evidence", "fix", "source"} <= set(out["checks"][0])


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    missing = tmp_path / "none.json"
    assert main(["doctor", "--snapshot", str(missing)]) == 2
    with pytest.raises(SystemExit) as exited:  # argparse: the two flags exclude each other
        main(["doctor", "--snapshot", str(missing), "--save-snapshot", str(tmp_path / "x.json")])
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert all(line.startswith("topowise: error: ") for line in err) and len(err) == 2


def test_fixtures_are_what_their_script_writes():
    """Each fixture is the healthy board with one field changed, as make_snapshots.py says."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_snapshots", DATA / "make_snapshots.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    made = module.snapshots()
    assert set(made) == set(HEALTHY) | set(FAULTS)
    for name, snap in made.items():
        assert snap == _load(name), name


def test_table_fits_80_columns(capsys):
    main(["doctor", "--snapshot", str(DATA / "fault_acs_on.json")])
    lines = capsys.readouterr().out.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= 80
    assert any("PCIe ACS" in line and "fail" in line for line in lines)


def test_live_read_without_gpus_exits_0_and_still_checks(tmp_path, capsys):
    saved = tmp_path / "live.json"
    rc = main(["doctor", "--json", "--save-snapshot", str(saved)])
    snap = snapshot.load(saved)  # what was read, written whole
    if snap.gpus:
        pytest.skip("this machine has GPUs: the no-GPU path is what this test is for")
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    names = [c["name"] for c in out["checks"]]
    assert out["checks"][0]["evidence"].startswith("no GPU")
    assert {"CPUs", "IOMMU", "environment"} <= set(names)
    assert snap.cpus.count >= 1


def test_live_read_records_the_environment_and_a_fake_gpu(tmp_path):
    """The reader with an NVML stand-in: the fields land in the snapshot; a call the driver refuses is None."""
    fake = _FakeNvml()
    snap = read.read(environ={"NCCL_P2P_DISABLE": "1", "HOME": "/root"}, nvml=fake, sys_root=tmp_path,
                     proc_root=tmp_path)
    assert snap.environment == {"NCCL_P2P_DISABLE": "1"}
    (gpu,) = snap.gpus
    assert (gpu.name, gpu.pcie_gen, gpu.pcie_width, gpu.pcie_max_width) == ("NVIDIA H100 80GB HBM3", 5, 8, 16)
    assert gpu.nvlink_up == (True, False)
    assert gpu.temperature_c is None  # NVMLError from the driver: recorded as unknown
    assert gpu.remapped_rows_pending is True
    assert snap.topology is not None and snap.topology["gpus"][0]["pci_bus_id"] == "0000:1b:00.0"
    # x8 of x16 fails; one GPU alone has no peer to say its down link is a fault rather than unwired
    assert [c.status for c in checks.run_checks(snap) if c.name in ("PCIe link", "NVLink")] == ["fail", "ok"]


class _FakeNvml:
    class NVMLError(Exception):
        pass

    NVML_FEATURE_ENABLED = 1

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def nvmlSystemGetDriverVersion(self):
        return b"550.90.07"

    def nvmlDeviceGetCount(self):
        return 1

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetName(self, h):
        return "NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetPciInfo(self, h):
        return SimpleNamespace(busId=b"00000000:1B:00.0")

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(total=80 * 2**30)

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        return 5

    def nvmlDeviceGetCurrPcieLinkWidth(self, h):
        return 8

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        return 5

    def nvmlDeviceGetMaxPcieLinkWidth(self, h):
        return 16

    def nvmlDeviceGetNvLinkState(self, h, link):
        if link >= 2:
            raise self.NVMLError("no such link")
        return 1 if link == 0 else 0

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h, link):
        raise self.NVMLError("Not Supported")

    def nvmlDeviceGetTemperature(self, h, sensor):
        raise self.NVMLError("Not Supported")

    def nvmlDeviceGetRemappedRows(self, h):
        return (0, 0, 1, 0)


# --- node pairs in rounds --------------------------------------------------------------------------------
@pytest.mark.parametrize("nodes", [2, 5, 8, 64])
def test_rounds_pair_every_node_once_per_round_and_every_pair_once(nodes):
    from itertools import combinations

    from topowise.doctor.rounds import pair_rounds

    schedule = pair_rounds(nodes)
    assert len(schedule) == (nodes - 1 if nodes % 2 == 0 else nodes)
    for pairs in schedule:
        ends = [n for p in pairs for n in p]
        assert len(ends) == len(set(ends))  # nobody in two pairs of one round
        assert len(pairs) == nodes // 2
    met = [p for pairs in schedule for p in pairs]
    assert sorted(met) == list(combinations(range(nodes), 2))
    assert pair_rounds(nodes, rounds=1) == schedule[:1]


def _measure(schedule, slow: set[int], expected: float = 40.0) -> dict:
    return {p: expected * (0.5 if slow & set(p) else 0.97) for pairs in schedule for p in pairs}


def test_a_slow_node_is_named_alone_after_three_rounds():
    from topowise.doctor.rounds import pair_rounds, slow_nodes

    found = slow_nodes(_measure(pair_rounds(16, rounds=3), {11}), expected_gbps=40.0)
    assert [(s.node, s.alone) for s in found] == [(11, True)]
    assert found[0].evidence.count("20 of 40 GB/s") == 3


def test_one_round_cannot_tell_the_ends_of_a_slow_pair_apart():
    from topowise.doctor.rounds import pair_rounds, slow_nodes

    schedule = pair_rounds(8, rounds=1)
    partner = next(b if a == 2 else a for a, b in schedule[0] if 2 in (a, b))
    found = slow_nodes(_measure(schedule, {2}), expected_gbps=40.0)
    assert sorted((s.node, s.alone) for s in found) == sorted([(2, False), (partner, False)])
    assert slow_nodes(_measure(pair_rounds(8), set()), expected_gbps=40.0) == []


def test_readme_shows_doctor_output_on_the_fault_it_names(capsys):
    """Every line of the README's doctor block (but the cut) is a line of the command's output."""
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    section = readme[readme.index("## Before a launch: doctor"):]
    block = section[section.index("```\n") + 4:section.index("\n```", section.index("```\n") + 4)]
    command = re.search(r"`topowise (doctor --snapshot \S+)`", section).group(1).split()
    command[-1] = str(Path(__file__).parents[2] / command[-1])  # wherever pytest runs from
    assert main(command) == 1
    out = capsys.readouterr().out.splitlines()
    shown = [line for line in block.splitlines() if line != "..."]
    assert shown and all(line in out for line in shown), [line for line in shown if line not in out]
