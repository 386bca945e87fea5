"""`topowise topo` and `topowise env` through the real entry point: output, JSON keys, bad input."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from topowise.cli.main import main

DATA = Path(__file__).parent / "data"


def _fake():
    spec = importlib.util.spec_from_file_location("fake_nvml", DATA / "fake_nvml.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fake = _fake()


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for var in ("NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL", "NCCL_ALGO", "NCCL_PROTO", "NCCL_IB_DISABLE",
                "NCCL_SHM_DISABLE", "NCCL_NVLS_ENABLE", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(var, raising=False)


def run_json(capsys, *argv):
    assert main(["topo", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def fails(capsys, *argv) -> str:
    """Exit status 2 and one line on stderr: `topowise: error: ...`."""
    assert main(list(argv)) == 2
    err = capsys.readouterr().err
    assert err.startswith("topowise: error: ") and err.count("\n") == 1 and "Traceback" not in err
    return err


def test_json_keys_and_selection(capsys):
    data = run_json(capsys, "--preset", "h100-nvl-8", "--gpus", "1,2")
    assert {"name", "gpus", "islands", "pairs", "warnings", "format", "version", "selection"} <= set(data)
    assert data["gpus"][0]["index"] == 0 and data["gpus"][0]["name"] == "NVIDIA H100 NVL"
    assert data["islands"] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert {"a", "b", "kind", "nvlinks", "gbps"} <= set(data["pairs"][0])
    sel = data["selection"]
    assert sel["gpus"] == [1, 2] and sel["islands_spanned"] == [[0, 1], [2, 3]]
    assert sel["bottleneck_gbps"] == 63.0 and sel["best_subset"] == [0, 1]
    assert any("span 2 NVLink islands" in w for w in data["warnings"])


def test_json_reads_back_with_file(capsys, tmp_path):
    first = run_json(capsys, "--preset", "dgx-a100-8")
    path = tmp_path / "topo.json"
    path.write_text(json.dumps(first))
    again = run_json(capsys, "--file", str(path))
    assert again == first


def test_smi_text_file_with_gpu_name(capsys):
    data = run_json(capsys, "--file", str(DATA / "04_a100-80gb-pcie-x4_nvlink-pairs.txt"),
                    "--gpu-name", "A100", "--gpus", "0,1")
    assert data["islands"] == [[0, 1], [2, 3]]
    assert data["pairs"][0]["gbps"] == 300.0 and data["selection"]["bottleneck_gbps"] == 300.0
    assert data["tiers"][0] == {"link": "NV12", "gbps": 300.0, "pairs": 2}


def test_table_output_shows_matrix_islands_tiers_and_warnings(capsys, monkeypatch):
    monkeypatch.setenv("NCCL_P2P_DISABLE", "1")
    assert main(["topo", "--preset", "h100-nvl-8", "--gpus", "1,2"]) == 0
    out = capsys.readouterr().out
    assert "NV12" in out and "GPU7" in out
    assert "{0,1}  {2,3}  {4,5}  {6,7}" in out
    assert "NVLink NV12 318.75 GB/s" in out and "PCIe NODE 63 GB/s" in out
    assert "best 2 GPUs here: 0,1" in out
    assert "NCCL_P2P_DISABLE=1" in out


V100 = str(DATA / "06_v100-sxm2-x8_hybrid-cube-mesh_vastai_mlx5x1.txt")


@pytest.mark.parametrize("source,gpus,warned", [
    # V100 hybrid cube-mesh: one NVLink island, yet 0 and 5 meet only through the CPUs (SYS, 15.75 GB/s)
    (["--file", V100, "--gpu-name", "V100"], "0,5", "GPUs 0,5 run a ring at 15.75 GB/s per direction (it must "
     "cross SYS, e.g. between GPUs 0 and 5), under half the 50 GB/s of the best 2 GPUs here (0,3)"),
    (["--file", V100, "--gpu-name", "V100"], "0,1,2,5", "under half the 100 GB/s of the best 4 GPUs here (0,1,2,3)"),
    (["--file", V100, "--gpu-name", "V100"], "0,3", None),  # the best pair
    (["--file", V100, "--gpu-name", "V100"], "0,1", None),  # NV1 at 25 GB/s: half the best, not under it
    (["--preset", "h100-nvl-8"], "0,2", "span 2 NVLink islands"),  # said once, by the island warning
], ids=["v100-0,5", "v100-0,1,2,5", "v100-best-pair", "v100-half-the-best", "nvl-across-islands"])
def test_selection_far_below_the_best_of_its_size_warns(capsys, source, gpus, warned):
    ws = run_json(capsys, *source, "--gpus", gpus)["warnings"]
    if warned is None:
        assert ws == []
    else:
        assert len(ws) == 1 and warned in ws[0]


def test_list_presets(capsys):
    assert main(["topo", "--list-presets"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(l.startswith("hgx-h100-8 ") and "NVSwitch" in l for l in lines)
    assert len(lines) >= 6
    # the named clusters too, each loadable by the name listed
    from topowise.topology import load_topology
    from topowise.topology.cluster import CLUSTER_PRESETS

    for name in CLUSTER_PRESETS:
        assert any(l.startswith(f"{name} ") for l in lines)
        assert load_topology(name).num_nodes > 1


def test_live_discovery_with_fake_nvml(capsys, monkeypatch):
    monkeypatch.setattr("topowise.topology.nvml._import_pynvml", fake.h200_nvswitch_slice)
    data = run_json(capsys, "--gpus", "0,1")
    assert data["nvswitch"] is True and data["pairs"][0]["nvlinks"] == 18
    assert data["gpus"][1]["pci_bus_id"] == "0000:2a:00.0"


# --- bad input: exit 2, one line ------------------------------------------------------------------

def test_unknown_preset_lists_valid_ones(capsys):
    err = fails(capsys, "topo", "--preset", "dgx-h100")
    assert "unknown topology preset 'dgx-h100'" in err and "hgx-h100-8" in err and "h200-x2" in err


def test_file_that_is_neither_names_the_line(capsys, tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("\n# my GPUs\nGPU0 GPU1\n")
    err = fails(capsys, "topo", "--file", str(path))
    assert "line 2: expected the header of `nvidia-smi topo -m`" in err


def test_truncated_topo_text_names_the_line(capsys, tmp_path):
    path = tmp_path / "cut.txt"
    path.write_text("\n".join((DATA / "01_h100-sxm-x8_nvswitch_no-nics.txt").read_text().splitlines()[:4]))
    err = fails(capsys, "topo", "--file", str(path))
    assert "line 5: expected a row starting with GPU<n> (GPU3), got nothing" in err


def test_empty_file(capsys, tmp_path):
    path = tmp_path / "empty.txt"
    path.write_text("  \n")
    assert "is empty" in fails(capsys, "topo", "--file", str(path))


def test_missing_file(capsys, tmp_path):
    assert "no such file" in fails(capsys, "topo", "--file", str(tmp_path / "nope.txt"))


def test_bad_json_file(capsys, tmp_path):
    path = tmp_path / "t.json"
    path.write_text('{"name": "x"}')
    assert "not a topowise topology" in fails(capsys, "topo", "--file", str(path))


@pytest.mark.parametrize("gpus,msg", [("0,9", "GPU 9 is out of range"), ("1,1", "names a GPU twice"),
                                      ("0,x", "'x' is not a GPU index"), ("3-1", "'3-1' is not a GPU index")])
def test_bad_gpu_lists(capsys, gpus, msg):
    assert msg in fails(capsys, "topo", "--preset", "h100-nvl-8", "--gpus", gpus)


def test_preset_and_file_together_is_refused(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["topo", "--preset", "h200-x2", "--file", "x"])
    assert exc.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_gpu_name_with_preset_is_refused(capsys):
    assert "--gpu-name applies" in fails(capsys, "topo", "--preset", "h200-x2", "--gpu-name", "H200")


def test_live_without_nvml_library(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    err = fails(capsys, "topo")
    assert "nvidia-ml-py" in err and "--preset NAME or --file PATH" in err


def test_live_without_gpus(capsys, monkeypatch):
    monkeypatch.setattr("topowise.topology.nvml._import_pynvml", lambda: fake.FakeNVML([]))
    assert "NVML found no GPUs" in fails(capsys, "topo")
    monkeypatch.setattr("topowise.topology.nvml._import_pynvml",
                        lambda: fake.FakeNVML([], init_error="Driver Not Loaded"))
    assert "Driver Not Loaded" in fails(capsys, "topo")


# --- env ------------------------------------------------------------------------------------------

def test_env_without_torch_or_nvml(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setenv("NCCL_DEBUG", "INFO")
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    monkeypatch.setenv("HOME_NOT_REPORTED", "x")
    assert main(["env", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["torch"]["version"] is None and "not importable" in data["torch"]["note"]
    assert data["nvidia"]["gpus"] == [] and "not installed" in data["nvidia"]["note"]
    assert data["environment"]["NCCL_DEBUG"] == "INFO" and data["environment"]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert "HOME_NOT_REPORTED" not in data["environment"]
    assert main(["env"]) == 0  # the table renders with pieces missing too
    assert "NCCL_DEBUG" in capsys.readouterr().out


def test_env_reads_driver_and_gpus_through_nvml():
    from topowise.envinfo import collect

    info = collect(environ={}, nvml=fake.h200_nvswitch_slice(), with_torch=False)
    assert info["nvidia"]["driver"] == "580.95.05" and info["nvidia"]["cuda_driver"] == "13.0"
    assert [g["name"] for g in info["nvidia"]["gpus"]] == ["NVIDIA H200"] * 2
    assert info["nvidia"]["gpus"][0]["memory_gib"] == pytest.approx(140.4, abs=0.1)


def test_env_nvml_init_failure_is_a_note():
    from topowise.envinfo import collect

    info = collect(environ={}, nvml=fake.FakeNVML([], init_error="Driver Not Loaded"), with_torch=False)
    assert info["nvidia"]["driver"] is None and "Driver Not Loaded" in info["nvidia"]["note"]


def test_help_and_topo_do_not_import_torch_or_matplotlib():
    code = ("import sys; from topowise.cli.main import main; main(['topo', '--preset', 'hgx-h100-8']);"
            "main(['topo', '--file', sys.argv[1], '--json']);"
            "bad = [m for m in ('torch', 'matplotlib') if m in sys.modules]; print('BAD', bad) if bad else None;"
            "raise SystemExit(1 if bad else 0)")
    result = subprocess.run([sys.executable, "-c", code, str(DATA / "02_dgx-a100_mlx5x12.txt")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout[-500:] + result.stderr[-2000:]
