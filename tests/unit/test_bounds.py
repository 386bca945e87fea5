"""Numbers past any real job, model or machine, and text read too loosely: each is one `topowise: error:` line
that names the bound, exit 2; a real value at the edge still runs."""

import json
from pathlib import Path

import pytest
from cli_run import run_cli

from topowise.topology.presets import load_preset

DATA = Path(__file__).parent / "data"
CONFIG = Path(__file__).parents[1] / "data" / "configs" / "smollm2-135m.json"
PREDICT = ["predict", "--model", "tiny", "--topology", "h200-x2", "--num-gpus", "2", "--strategy", "ddp"]
PREDICT_H100 = ["predict", "--model", "llama3.1-8b", "--topology", "hgx-h100-8", "--num-gpus", "8",
                "--strategy", "zero3"]
HUGE = "99999999999999999999"


def _one_line(code, err, *words):
    assert code == 2, err
    assert len(err) == 1 and err[0].startswith("topowise: error: "), err
    for w in words:
        assert w in err[0], err[0]


@pytest.mark.parametrize("argv, words", [
    ([*PREDICT, "--micro-batch", HUGE], ["--micro-batch", "at most 65,536"]),
    ([*PREDICT, "--grad-accum", HUGE], ["--grad-accum", "at most 16,384"]),
    ([*PREDICT, "--pp", "2", "--pp-schedule", "interleaved-1f1b", "--virtual-stages", HUGE],
     ["--virtual-stages", "at most 2", "layer"]),
    ([*PREDICT, "--gpu-hour-usd", HUGE], ["--gpu-hour-usd", "at most 1000 USD an hour"]),
    (["plan", "--model", "tiny", "--topology", "h200-x2", "--micro-batch", HUGE], ["--micro-batch", "at most 65,536"]),
    (["plan", "--model", "tiny", "--topology", "2x hgx-h100-8+ib-ndr", "--network", "ib-ndr,eth-100",
      "--gpu-hour-usd", HUGE], ["at most 1000 USD"]),
], ids=["micro-batch", "grad-accum", "virtual-stages", "gpu-hour-usd", "plan micro-batch", "plan gpu-hour-usd"])
def test_run_numbers_past_any_job_are_refused(argv, words, capsys):
    _one_line(*run_cli(argv, capsys), *words)


@pytest.mark.parametrize("argv", [
    [*PREDICT, "--micro-batch", "65536", "--seq-len", "8"],
    [*PREDICT, "--grad-accum", "16384"],
    ["predict", "--model", "tiny", "--topology", "2x hgx-h100-8+ib-ndr", "--num-gpus", "16", "--strategy", "ddp",
     "--network", "ib-ndr,eth-100", "--gpu-hour-usd", "1000"],
    ["predict", "--model", "tiny", "--topology", "h200-x2", "--num-gpus", "2", "--strategy", "ddp", "--pp", "2",
     "--pp-schedule", "interleaved-1f1b", "--virtual-stages", "2", "--grad-accum", "2"],
], ids=["micro-batch", "grad-accum", "gpu-hour-usd", "one layer per chunk"])
def test_run_numbers_at_the_bound_still_predict(argv, capsys):
    code, err = run_cli(argv, capsys)
    assert code == 0, err


def _config(tmp_path, name, **change) -> str:
    path = tmp_path / name
    path.write_text(json.dumps({**json.loads(CONFIG.read_text()), **change}))
    return str(path)


@pytest.mark.parametrize("field, value", [("vocab_size", 10**15), ("hidden_size", 10**9), ("num_hidden_layers", 10**6),
                                          ("intermediate_size", 10**12), ("max_position_embeddings", 10**12)])
def test_model_config_sizes_past_any_model_are_refused(field, value, tmp_path, capsys):
    path = _config(tmp_path, "huge.json", **{field: value})
    _one_line(*run_cli([*PREDICT, "--model", path], capsys), path, f"{field} is {value:,}", "give at most")


def test_model_folder_with_a_huge_vocabulary_is_refused(tmp_path, capsys):
    (tmp_path / "m").mkdir()
    _config(tmp_path, "m/config.json", vocab_size=10**15)
    _one_line(*run_cli([*PREDICT, "--model", str(tmp_path / "m")], capsys), "vocab_size", "at most 4,194,304",
              "262k")


def test_the_largest_real_vocabulary_still_loads(tmp_path, capsys):
    path = _config(tmp_path, "gemma3-vocab.json", vocab_size=262_144)
    code, err = run_cli([*PREDICT, "--model", path], capsys)
    assert code == 0, err


def _topology(tmp_path, change, name="edited.json", preset="h200-x2") -> str:
    data = load_preset(preset).to_dict()
    change(data)
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


@pytest.mark.parametrize("verb", ["topo", "predict"])
@pytest.mark.parametrize("change, words", [
    (lambda d: d["pairs"][0].update(gbps=1e30), ["pair 0-1 runs at 1e+30 GB/s", "at most 10,000 GB/s", "900"]),
    (lambda d: d["gpus"][0].update(memory_bytes=1e40), ["GPU 0 memory_bytes is 1e+40", "4 TiB", "288 GB"]),
    (lambda d: d.update(power_limit_w=5), ["power_limit_w 5", "minimum of 200 W"]),
], ids=["1e30 GB/s link", "1e40-byte memory", "5 W power limit"])
def test_topology_json_past_any_part_is_refused(verb, change, words, tmp_path, capsys):
    path = _topology(tmp_path, change)
    argv = ["topo", "--file", path] if verb == "topo" else [*PREDICT, "--topology", path]
    _one_line(*run_cli(argv, capsys), *words)


def test_topology_json_at_todays_largest_parts_still_loads(tmp_path, capsys):
    def largest(d):  # NVLink 5's 900 GB/s a direction, B300's 288 GB
        d["pairs"][0].update(gbps=900.0)
        for g in d["gpus"]:
            g.update(memory_bytes=288e9)
    code, err = run_cli([*PREDICT, "--topology", _topology(tmp_path, largest)], capsys)
    assert code == 0, err


@pytest.mark.parametrize("watts, words", [("5", ["--power-limit 5", "minimum of 200 W", "200 to 700 W"]),
                                          ("199", ["minimum of 200 W"])])
def test_power_limit_below_the_boards_minimum_is_refused(watts, words, capsys):
    _one_line(*run_cli([*PREDICT_H100, "--power-limit", watts], capsys), *words)


def test_power_limit_without_a_documented_minimum_has_a_floor(capsys):
    argv = ["predict", "--model", "llama3.1-8b", "--topology", "pcie-l40s-8", "--num-gpus", "8", "--strategy", "zero3",
            "--power-limit", "50"]
    _one_line(*run_cli(argv, capsys), "L40S", "a fifth of its rated 350 W")


def test_power_limit_at_the_boards_minimum_still_predicts(capsys):
    code, err = run_cli([*PREDICT_H100, "--power-limit", "200"], capsys)
    assert code == 0, err


# Python's int(), float() and \d read any script's digits: "٠,١" was GPUs 0 and 1
@pytest.mark.parametrize("argv, words", [
    (["topo", "--preset", "hgx-h100-8", "--gpus", "\u0660,\u0661"], ["--gpus", "ASCII digits"]),
    (["topo", "--preset", "hgx-h100-8", "--gpus", "\u0660-\u0663"], ["--gpus", "ASCII digits"]),
    ([*PREDICT[:-4], "--num-gpus", "\u0662", "--strategy", "ddp"], ["--num-gpus", "ASCII digits 0-9"]),
    ([*PREDICT, "--tp", "\uff12"], ["--tp", "ASCII digits 0-9"]),
    ([*PREDICT, "--power-limit", "\u0665\u0660\u0660"], ["--power-limit", "ASCII digits 0-9"]),
    ([*PREDICT, "--gpu-hour-usd", "\u0662.\u0665"], ["--gpu-hour-usd", "not a price"]),
    (["plan", "--model", "tiny", "--topology", "h200-x2", "--micro-batch", "\u0662"], ["--micro-batch"]),
    (["topo", "--preset", "\u0661\u0660x hgx-h100-8+ib-ndr"], ["unknown topology"]),
    (["topo", "--preset", "2x hgx-h100-8+ib-ndrx\u0662"], ["unknown topology"]),
    (["topo", "--preset", "16x hgx-h100-8+ib-ndr/rack=\u0664"], ["cluster layout"]),
    (["nccl-tests", "--topology", "hgx-h100-8", "--min-bytes", "\u0668M"], ["--min-bytes"]),
], ids=["--gpus list", "--gpus range", "--num-gpus", "--tp fullwidth", "--power-limit", "--gpu-hour-usd",
        "plan --micro-batch", "cluster nodes", "cluster NICs", "cluster layout", "nccl-tests size"])
def test_numbers_in_other_scripts_digits_are_refused(argv, words, capsys):
    _one_line(*run_cli(argv, capsys), *words)


def test_ascii_gpu_lists_still_work(capsys):
    code, err = run_cli(["topo", "--preset", "hgx-h100-8", "--gpus", "0,1,4-5"], capsys)
    assert code == 0, err


SMI = DATA / "17_h200-x2_nv18.txt"  # `nvidia-smi topo -m` of 2x H200 (NV18), with its legend
SMI_NICS = DATA / "13_l40s-x4_pcie_nics2.txt"  # 4x L40S and 2 NICs, with a NIC Legend


@pytest.mark.parametrize("cut, words", [
    (lambda s: s[: len(s) // 2], ["stops inside the legend", "cut short"]),  # the sweep's smi-half.txt
    (lambda s: s[:100], ["line 3: row GPU1 ends after 1 of the 3 cells", "cut short"]),
    (lambda s: s.replace("GPU0\tGPU1\tCPU", "GPU0\tCPU", 1), ["more path cells than the header has columns"]),
    (lambda s: s.replace("GPU1", "GPU\u0661"), ["expected GPU columns GPU0, GPU1"]),
], ids=["cut in the legend", "cut in the last row", "header lost a column", "GPU column in Arabic digits"])
def test_topo_text_whose_rows_and_columns_do_not_match_is_refused(cut, words, tmp_path, capsys):
    path = tmp_path / "smi-half.txt"
    path.write_text(cut(SMI.read_text()))
    _one_line(*run_cli(["topo", "--file", str(path)], capsys), *words)


def test_topo_text_whose_nic_legend_was_cut_is_refused(tmp_path, capsys):
    path = tmp_path / "smi-nics.txt"
    text = SMI_NICS.read_text()
    path.write_text(text[: text.index("NIC1: ")])
    _one_line(*run_cli(["topo", "--file", str(path), "--gpu-name", "L40S"], capsys), "NIC Legend lacks NIC1")


@pytest.mark.parametrize("keep", [lambda s: s, lambda s: s[: s.index("Legend:")]], ids=["whole", "matrix alone"])
def test_whole_topo_text_or_its_matrix_alone_still_reads(keep, tmp_path, capsys):
    path = tmp_path / "smi.txt"
    path.write_text(keep(SMI.read_text()))
    code, err = run_cli(["topo", "--file", str(path), "--gpu-name", "H200"], capsys)
    assert code == 0, err
