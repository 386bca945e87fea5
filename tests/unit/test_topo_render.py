"""What `topowise topo` prints, row by row: the link matrix, NICs, the selection and the cluster view."""

from pathlib import Path

import pytest

from tests.unit.cli_run import cli_output

DATA_A100 = str(Path(__file__).parent / "data" / "02_dgx-a100_mlx5x12.txt")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for var in ("NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL", "NCCL_ALGO", "NCCL_PROTO", "NCCL_IB_DISABLE",
                "NCCL_SHM_DISABLE", "NCCL_NVLS_ENABLE", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(var, raising=False)


def topo_text(capsys, *argv) -> list[str]:
    code, out, err = cli_output(["topo", *argv], capsys)
    assert code == 0 and err == ""
    return out.splitlines()


def test_each_matrix_row_shows_that_gpus_links_and_numa_node(capsys):
    # h200-nvl-8: GPUs 0-3 and 4-7 are two bridge domains (NV6), SYS between them, one NUMA node each
    lines = topo_text(capsys, "--preset", "h200-nvl-8")
    rows = {line.split()[0]: line.split()[1:] for line in lines if line.strip().startswith("GPU")
            and line.split()[1] in ("X", "NV6", "SYS")}
    assert sorted(rows) == [f"GPU{i}" for i in range(8)]
    for i in range(8):
        *cells, numa = rows[f"GPU{i}"]
        same = [j for j in range(8) if j // 4 == i // 4 and j != i]
        assert cells[i] == "X"
        assert all(cells[j] == "NV6" for j in same)
        assert all(cells[j] == "SYS" for j in range(8) if j not in same and j != i)
        assert numa == str(i // 4)
    # the second line of each row: GB/s under each link
    assert any(line.split() == ["159", "159", "159", "63", "63", "63", "63"] for line in lines)


def test_nics_are_listed_with_their_nearest_gpus(capsys):
    lines = topo_text(capsys, "--file", DATA_A100, "--gpu-name", "A100")
    nics = [line for line in lines if line.startswith("NIC ")]
    assert len(nics) == 12
    assert "NIC mlx5_0: nearest GPUs 0,1" in nics and "NIC mlx5_9: nearest GPUs 6,7" in nics
    assert "NIC mlx5_4: nearest GPUs none" in nics


@pytest.mark.parametrize("preset,gpus,selection,best", [
    ("h100-nvl-8", "1,2", "selection GPUs 1,2: 2 NVLink islands spanned ({0,1}  {2,3}), ring at 63 GB/s per direction",
     "  best 2 GPUs here: 0,1 at 318.75 GB/s"),
    ("h100-nvl-8", "0,1", "selection GPUs 0,1: 1 NVLink island spanned ({0,1}), ring at 318.75 GB/s per direction",
     "  this is already the best choice of that many GPUs"),
    ("hgx-h100-8", "0", "selection GPUs 0: 1 NVLink island spanned ({0,1,2,3,4,5,6,7}), one GPU, no ring",
     "  this is already the best choice of that many GPUs"),
], ids=["across-islands", "best-pair", "one-gpu"])
def test_selection_says_its_ring_and_the_best_choice(capsys, preset, gpus, selection, best):
    lines = topo_text(capsys, "--preset", preset, "--gpus", gpus)
    at = lines.index(selection)
    assert lines[at + 1] == best


def test_no_warnings_is_said(capsys):
    lines = topo_text(capsys, "--preset", "hgx-h100-8")
    assert lines[-1] == "no warnings" and not any(line.startswith("warning") for line in lines)
    assert "largest TP degree 8: all 8 GPUs share one NVLink island" in lines


def test_cluster_lists_a_row_per_tier_then_the_selection(capsys):
    lines = topo_text(capsys, "--preset", "two-region-h100", "--gpus", "6-9")
    tiers = [line.split()[0] for line in lines if line.startswith("  ") and "GB/s per GPU" in line]
    assert tiers == ["NVLink", "PCIe", "network", "WAN"]
    wan = next(line for line in lines if line.startswith("  WAN"))
    assert "0.781 GB/s per GPU" in wan and "round trip 30 ms" in wan
    selection = next(line for line in lines if line.startswith("selection"))
    assert selection.startswith("selection 4 GPUs on node(s) 0,1: ring at")
    assert selection.endswith("the best 4 sit on node(s) 0")
