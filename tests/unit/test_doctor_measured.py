"""A snapshot `doctor --save-snapshot` wrote on a real GPU (one H100 SXM in a VM, 2026-12-05, see
research/2026-12-05-h100x1/README.md) reads back, and a healthy GPU passes every check."""

from __future__ import annotations

import json
from pathlib import Path

from topowise.cli.main import main
from topowise.doctor import checks, snapshot

MEASURED = Path(__file__).parents[1] / "data" / "doctor" / "measured"


def test_a_real_h100_snapshot_passes_every_check():
    snap = snapshot.load(MEASURED / "h100_sxm_vm_2026-12-05.json")
    found = checks.run_checks(snap)
    assert [(c.name, c.status) for c in found if c.status != "ok"] == []
    assert {"PCIe link", "NVLink", "clocks", "memory errors"} <= {c.name for c in found}
    pcie = next(c for c in found if c.name == "PCIe link")
    assert "Gen5 x16" in pcie.evidence


def test_the_real_snapshot_round_trips():
    text = (MEASURED / "h100_sxm_vm_2026-12-05.json").read_text()
    snap = snapshot.Snapshot.from_dict(json.loads(text))
    assert snapshot.Snapshot.from_dict(json.loads(snap.to_json())) == snap
    assert snap.to_json() + "\n" == text


def test_the_cli_exits_0_on_the_real_snapshot(capsys):
    assert main(["doctor", "--snapshot", str(MEASURED / "h100_sxm_vm_2026-12-05.json")]) == 0
    assert "0 fail, 0 warn" in capsys.readouterr().out
