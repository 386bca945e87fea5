"""Inputs a careless or hostile user gives: each is one `topowise: error:` line and exit 2, never a
traceback, never accepted as if it made sense."""

import json
from pathlib import Path

import pytest
from cli_run import run_cli

from topowise.topology.presets import load_preset

DATA = Path(__file__).parent / "data"
SMI = DATA / "17_h200-x2_nv18.txt"  # `nvidia-smi topo -m` of 2x H200 (NV18)
NCCL = Path(__file__).parents[1] / "data" / "nccl_tests" / "h100x2-1gpu-per-node-tree_nccl-tests-232.txt"
PREDICT = ["predict", "--model", "tiny", "--topology", "h200-x2", "--num-gpus", "2", "--strategy", "ddp"]
ROW = ("     2097152        524288     float     sum      -1    113.2   18.53   18.53      0    93.35   22.46   "
       "22.46      0")


def _topology(tmp_path, name, change) -> str:
    """h200-x2 as `topo --json` writes it, with one thing changed by hand."""
    data = load_preset("h200-x2").to_dict()
    change(data)
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(data))
    return str(path)


def _pair(**fields):
    return lambda d: d["pairs"][0].update(fields)


def _gpu(**fields):
    return lambda d: d["gpus"][0].update(fields)


def _nccl(tmp_path, name, row) -> str:
    path = tmp_path / f"{name}.txt"
    path.write_text(NCCL.read_text().replace(ROW, row))
    return str(path)


@pytest.fixture
def files(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text('{"a":' * 100_000 + "1" + "}" * 100_000)  # past the JSON parser's recursion limit
    (tmp_path / "folder").mkdir()
    (tmp_path / "no-config").mkdir()
    out = {"deep": str(deep), "folder": str(tmp_path / "folder"), "no_config": str(tmp_path / "no-config"),
           "gpu42": _topology(tmp_path, "gpu42", _pair(b=42)),
           "neg_link": _topology(tmp_path, "neg", _pair(gbps=-5.0)),
           "nan_link": _topology(tmp_path, "nan", _pair(gbps=float("nan"))),
           "zero_link": _topology(tmp_path, "zero", _pair(gbps=0)),
           "neg_memory": _topology(tmp_path, "memneg", _gpu(memory_bytes=-1)),
           "nan_memory": _topology(tmp_path, "memnan", _gpu(memory_bytes=float("nan"))),
           "twice": _topology(tmp_path, "twice", lambda d: d["gpus"][1].update(index=0)),
           "warp": _topology(tmp_path, "warp", _pair(kind="WARP")),
           "nv999_json": _topology(tmp_path, "nv999", _pair(nvlinks=999)),
           "nv999": str(tmp_path / "nv999.txt"),
           "neg_time": _nccl(tmp_path, "negtime", ROW.replace("113.2", "-113.2")),
           "inf_busbw": _nccl(tmp_path, "infbus", ROW.replace("18.53   18.53", "18.53     inf")),
           "huge": _nccl(tmp_path, "huge", ROW.replace("     2097152", "100000000000000000000000000")),
           }
    Path(out["nv999"]).write_text(SMI.read_text().replace("NV18", "NV999"))
    return out


# argv (with {name} from `files`) -> words the one line must hold
CASES = [
    # tracebacks before: JSON nested past the parser's recursion limit, wherever JSON is read
    (["topo", "--file", "{deep}"], ["{deep}", "nested too deeply"]),
    ([*PREDICT, "--topology", "{deep}"], ["nested too deeply"]),
    ([*PREDICT, "--model", "{deep}"], ["nested too deeply"]),
    ([*PREDICT, "--profile", "{deep}"], ["nested too deeply"]),
    ([*PREDICT, "--model-profile", "{deep}"], ["--model-profile", "not JSON"]),
    (["launch", "--plan", "{deep}", "--dry-run", "--", "train.py"], ["not a topowise plan", "nested too deeply"]),
    (["topo", "--file", "{gpu42}"], ["names GPU 42", "GPUs 0,1"]),
    # nonsense accepted before: topology JSON edited by hand
    ([*PREDICT, "--topology", "{neg_link}"], ["pair 0-1 runs at -5.0 GB/s", "above 0"]),
    ([*PREDICT, "--topology", "{nan_link}"], ["pair 0-1 runs at nan GB/s"]),
    ([*PREDICT, "--topology", "{zero_link}"], ["pair 0-1 runs at 0 GB/s"]),
    ([*PREDICT, "--topology", "{neg_memory}"], ["GPU 0 memory_bytes is -1"]),
    ([*PREDICT, "--topology", "{nan_memory}"], ["GPU 0 memory_bytes is nan"]),
    ([*PREDICT, "--topology", "{twice}"], ["GPU 0 is listed twice"]),
    ([*PREDICT, "--topology", "{warp}"], ["link kind 'WARP'", "PIX"]),
    (["topo", "--file", "{nv999_json}"], ["bonds 999 NVLinks", "1 to 18"]),
    (["topo", "--file", "{nv999}", "--gpu-name", "H200"], ["'NV999'", "n 1 to 18"]),
    # cluster names
    (["topo", "--preset", "2x hgx-h100-8+ib-ndrx0"], ["0 NICs per node", "give 1 to", "e.g. ib-ndr"]),
    (["topo", "--preset", "2x hgx-h100-8+ib-ndrx1000"], ["1000 NICs per node"]),
    (["topo", "--preset", "100000000x hgx-h100-8+ib-ndr"], ["100,000,000 nodes", "at most"]),
    (["topo", "--preset", "16x hgx-h100-8+ib-ndr/rack=0"], ["rack= counts nodes, at least 1"]),
    (["topo", "--preset", "16x hgx-h100-8+ib-ndr/rack=4,rail=0"], ["rail= counts nodes"]),
    # run settings
    ([*PREDICT, "--gpu-hour-usd", "-5"], ["--gpu-hour-usd: '-5' is not a price"]),
    ([*PREDICT, "--gpu-hour-usd", "nan"], ["--gpu-hour-usd: 'nan'"]),
    ([*PREDICT, "--gpu-hour-usd", "inf"], ["--gpu-hour-usd: 'inf'"]),
    ([*PREDICT, "--checkpointing", "full", "--selective-ac-option", "op"],
     ["--selective-ac-option applies to --checkpointing selective, not full"]),
    # nccl-tests output that no run printed
    (["nccl-tests", "--topology", "hgx-h100-8", "--compare", "{neg_time}"], ["a time must be above 0"]),
    (["nccl-tests", "--topology", "hgx-h100-8", "--compare", "{inf_busbw}"], ["busbw must be >= 0 GB/s and finite"]),
    (["nccl-tests", "--topology", "hgx-h100-8", "--compare", "{huge}"], ["1e+26 bytes", "1 TiB"]),
    # messages that pointed the wrong way
    (["topo", "--file", "{folder}"], ["is a folder"]),
    ([*PREDICT, "--model", "{no_config}"], ["holds no config.json"]),
    (["validate", "--measured", "/nonexistent/runs.jsonl"], ["--measured /nonexistent/runs.jsonl: no such file"]),
    (["calibrate", "--only", "encryption", "--out", "{folder}", "--no-cache"], ["--out", "is a folder",
                                                                              "profile.json"]),
]


@pytest.mark.parametrize("argv, words", CASES, ids=[" ".join(a)[:60] for a, _ in CASES])
def test_hostile_input_is_one_line_and_exit_2(argv, words, files, capsys):
    code, err = run_cli([a.format(**files) for a in argv], capsys)
    assert code == 2, err
    assert len(err) == 1 and err[0].startswith("topowise: error: ") and "Traceback" not in err[0], err
    for w in words:
        assert w.format(**files) in err[0]


def test_calibrate_out_folder_leaves_nothing_beside_it(files, capsys):
    run_cli(["calibrate", "--only", "encryption", "--out", files["folder"], "--no-cache"], capsys)
    assert not Path(files["folder"] + ".tmp").exists()


@pytest.fixture
def plan_file(tmp_path, capsys):
    from topowise.cli.main import main

    path = tmp_path / "plan.json"
    assert main(["plan", "--model", "tiny", "--topology", "h200-x2", "--save-plan", str(path)]) == 0
    capsys.readouterr()
    return path


@pytest.mark.parametrize("gpus, words", [([-1, 1], "GPU -1: GPUs are numbered from 0"),
                                         ([0, 99], "GPU 99 is not on the plan's node of 2 GPUs")])
def test_launch_refuses_gpus_the_node_lacks(plan_file, gpus, words, capsys):
    data = json.loads(plan_file.read_text())
    data["plan"]["gpus"] = gpus
    plan_file.write_text(json.dumps(data))
    code, err = run_cli(["launch", "--plan", str(plan_file), "--dry-run", "--", "train.py"], capsys)
    assert code == 2 and len(err) == 1 and words in err[0], err


@pytest.mark.parametrize("command, words", [(["/nonexistent/binary"], "/nonexistent/binary: no such file"),
                                            (["no-such-program-here"], "not found on PATH"),
                                            (["missing_train.py"], "missing_train.py: no such script")])
def test_launch_refuses_a_command_that_does_not_exist(plan_file, command, words, capsys):
    code, err = run_cli(["launch", "--plan", str(plan_file), "--", *command], capsys)
    assert code == 2 and len(err) == 1 and words in err[0], err


def test_unknown_memory_still_loads_as_the_datasheets(tmp_path, capsys):
    """memory_bytes 0 is what a topology saved without the GPU's memory holds: the datasheet's, not an error."""
    path = _topology(tmp_path, "mem0", _gpu(memory_bytes=0))
    code, _ = run_cli([*PREDICT, "--topology", path], capsys)
    assert code == 0
