"""`topo` says the largest tensor-parallel degree a selection supports: its largest NVLink island, with why."""

from __future__ import annotations

import pytest

from tests.unit.cli_run import cli_output
from topowise.cli.topo import largest_tp
from topowise.topology import load_topology


@pytest.mark.parametrize("preset,gpus,degree,words", [
    ("hgx-h100-8", None, 8, "share one NVLink island"),
    ("h100-nvl-8", None, 2, "would cross PCIe"),  # the NVL bridge pairs
    ("gb200-nvl72", None, 72, "share one NVLink island"),
    ("pcie-l40s-8", None, 1, "no NVLink"),
    ("4x hgx-h100-8+ib-ndr", None, 8, "would cross the network"),
    ("hgx-h100-8", (0, 1, 2, 3), 4, "selected"),
    ("h100-nvl-8", (0, 1, 2), 1, "would cross PCIe"),  # 3 GPUs: no island holds a divisor of 3 above 1
    ("4x hgx-h100-8+ib-ndr", tuple(range(16)), 8, "would cross the network"),
])
def test_largest_tp(preset, gpus, degree, words):
    found, line = largest_tp(load_topology(preset), gpus)
    assert found == degree and line.startswith(f"largest TP degree {degree}: ") and words in line


def test_topo_prints_it_in_one_line(capsys):
    code, out, _ = cli_output(["topo", "--preset", "h100-nvl-8"], capsys)
    assert code == 0
    said = [line for line in out.splitlines() if line.startswith("largest TP degree")]
    assert said == ["largest TP degree 2: TP groups of 2 consecutive GPUs stay inside NVLink islands of 2; a larger "
                    "group would cross PCIe"]
    code, out, _ = cli_output(["topo", "--preset", "2x hgx-h100-8+ib-ndr", "--gpus", "0-3"], capsys)
    assert code == 0 and "largest TP degree 4: all 4 selected GPUs share one NVLink island" in out
