"""On a GPU machine: live NVML discovery agrees with parsing `nvidia-smi topo -m` on the same machine."""

import shutil
import subprocess

import pytest

pytestmark = pytest.mark.gpu


def _smi_topology():
    from topowise.topology.smi_text import parse_topo_text

    if shutil.which("nvidia-smi") is None:
        pytest.skip("nvidia-smi not on PATH")
    text = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True, check=True, timeout=60).stdout
    return parse_topo_text(text, "nvidia-smi")


def test_nvml_agrees_with_nvidia_smi_topo():
    pytest.importorskip("pynvml")
    from topowise.topology.nvml import discover

    live = discover()
    smi = _smi_topology()
    assert live.num_gpus == smi.num_gpus
    assert live.islands() == smi.islands()
    for link in smi.links:
        got = live.link(link.a, link.b)
        assert (got.kind, got.nvlinks) == (link.kind, link.nvlinks), f"GPU{link.a}-GPU{link.b}"
    # what NVML alone knows
    assert all(g.pci_bus_id and g.memory_bytes > 0 for g in live.gpus)
    if any(l.is_nvlink for l in live.links):
        assert all(l.gbps > 0 for l in live.links)


def test_nvml_names_a_known_gpu_and_pcie_rate():
    pytest.importorskip("pynvml")
    from topowise import hardware
    from topowise.topology.nvml import discover

    live = discover()
    assert live.gpus[0].name  # e.g. "NVIDIA H200"
    assert live.pcie_gen in hardware.PCIE_X16_GBPS
