"""Wrong input anywhere on the command line: one `topowise: error:` line naming what is wrong, exit 2,
no traceback; and the inputs that used to be accepted although they made no sense."""

import json
from pathlib import Path

import pytest
from cli_run import run_cli

from topowise.cli.main import main
from topowise.costmodel.predict import predict
from topowise.models.spec import PRESETS, ModelSpec
from topowise.run import MAX_SEQ_LEN, ROPE_STRETCH, Run
from topowise.topology import load_topology
from topowise.topology.presets import load_preset
from topowise.topology.smi_text import UNNAMED, parse_topo_text

DATA = Path(__file__).parent / "data"
SMI = DATA / "17_h200-x2_nv18.txt"  # `nvidia-smi topo -m` of 2x H200; names no GPU
LLAMA = {"model_type": "llama", "vocab_size": 128256, "hidden_size": 4096, "num_hidden_layers": 32,
         "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
         "max_position_embeddings": 8192}
PREDICT = ["predict", "--model", "tiny", "--topology", "h200-x2", "--num-gpus", "2", "--strategy", "ddp"]


@pytest.fixture
def files(tmp_path):
    """name -> path of the files the table below refers to as {name}."""
    def config(name, **change):
        path = tmp_path / name / "config.json"
        path.parent.mkdir()
        path.write_text(json.dumps(dict(LLAMA, **change)))
        return str(path)

    binary = tmp_path / "profile.bin"
    binary.write_bytes(bytes(range(256)) * 4)
    a_file = tmp_path / "a-file"
    a_file.write_text("not a folder\n")
    return {"smi": str(SMI), "binary": str(binary), "file": str(a_file), "under_file": str(a_file / "study"),
            "negative": config("negative", hidden_size=-4096), "zero_layers": config("zero", num_hidden_layers=0),
            "kv": config("kv", num_key_value_heads=5), "text_size": config("text", intermediate_size="14336"),
            "fraction": config("fraction", hidden_size=4096.5)}


# argv (with {name} from `files`) -> words the one line must hold
CASES = [
    # argparse: the flag named, the verb's own help pointed at, one line
    (["plan", "--model"], ["argument --model: expected one argument", "`topowise plan --help`"]),
    (["predict", "--seq-len", "abc"], ["--seq-len", "invalid int value: 'abc'", "`topowise predict --help`"]),
    (["plan", "--model", "tiny", "--topology", "h200-x2", "--fabric", "x"], ["argument --fabric", "'nvlink'"]),
    (["bench", "comm", "--strategies", "ddp"], ["`topowise bench comm` has no flag --strategies",
                                                "`topowise bench train`", "`topowise bench comm --help`"]),
    (["bench", "comm", "--itres", "3"], ["no flag --itres", "did you mean --iters?"]),
    (["plan", "--model", "tiny", "--topology", "h200-x2", "extra"], ["unexpected argument 'extra'"]),
    (["nosuchverb"], ["unknown verb 'nosuchverb'", "predict"]),
    (["bench"], ["`topowise bench` needs a verb: one of comm, train"]),
    (["--nosuch"], ["`topowise` has no flag --nosuch"]),
    # tracebacks before
    (["topo", "--preset", "h100-nvl-8", "--gpus", "0-99999999999"], ["GPU 99999999999 is out of range", "0-7"]),
    ([*PREDICT, "--profile", "{binary}"], ["not a profile (binary"]),
    (["study", "--topologies", "h200-x2", "--out", "{file}"], ["--out", "is a file, not a folder"]),
    (["study", "--topologies", "h200-x2", "--out", "{under_file}"], ["--out", "cannot create the folder"]),
    # pasted `nvidia-smi topo -m` text: the GPU model
    (["plan", "--model", "tiny", "--topology", "{smi}"], ["does not name the GPU model", "--gpu-name", "H100"]),
    (["predict", "--model", "tiny", "--topology", "{smi}", "--num-gpus", "2", "--strategy", "ddp"],
     ["--gpu-name", "nvidia-smi -L"]),
    (["study", "--topologies", "{smi},h200-x2", "--out", "{under_file}"], ["--gpu-name"]),
    (["topo", "--file", "{smi}", "--gpu-name", "NoSuchGPU"], ["--gpu-name 'NoSuchGPU'", "H200, H200 NVL, H100"]),
    (["plan", "--model", "tiny", "--topology", "{smi}", "--gpu-name", "MI300X"], ["--gpu-name 'MI300X'", "A100"]),
    (["plan", "--model", "tiny", "--topology", "h200-x2", "--gpu-name", "H100"], ["--gpu-name applies to"]),
    (["study", "--topologies", "h200-x2", "--gpu-name", "H100", "--out", "{under_file}"], ["--gpu-name applies"]),
    # accepted nonsense before
    (["predict", "--model", "{negative}", "--topology", "h200-x2", "--num-gpus", "2", "--strategy", "ddp"],
     ["hidden_size is -4096", "positive integer"]),
    (["plan", "--model", "{zero_layers}", "--topology", "h200-x2"], ["num_hidden_layers is 0"]),
    (["plan", "--model", "{kv}", "--topology", "h200-x2"], ["num_attention_heads 32 is not a multiple of "
                                                           "num_key_value_heads 5"]),
    (["plan", "--model", "{text_size}", "--topology", "h200-x2"], ["intermediate_size is '14336'"]),
    (["plan", "--model", "{fraction}", "--topology", "h200-x2"], ["hidden_size is 4096.5"]),
    ([*PREDICT, "--seq-len", "99999999999999999999"], ["--seq-len 99,999,999,999,999,999,999", "or less"]),
    (["plan", "--model", "llama3.1-8b", "--topology", "h200-x2", "--seq-len", "600000"],
     ["524,288 tokens, the longest sequence topowise predicts", "524288 or less"]),
    (["predict", "--model", "gpt2", "--topology", "h200-x2", "--num-gpus", "2", "--strategy", "ddp"],
     ["gpt2 has 1024 learned positions", "not 4096"]),
    (["plan", "--model", "mistral-7b", "--topology", "h200-x2", "--seq-len", "300000"],
     ["8x mistral-7b's context of 32,768", "262144 or less"]),
    (["study", "--model", "gpt2", "--topologies", "h200-x2", "--out", "{under_file}"], ["1024 learned positions"]),
    # the micro-batch: one check (Run's), one message, wherever it is given
    (["plan", "--model", "tiny", "--topology", "h200-x2", "--micro-batch", "0"],
     ["--micro-batch must be at least 1, not 0"]),
    ([*PREDICT, "--micro-batch", "-1"], ["--micro-batch must be at least 1, not -1"]),
    (["plan", "--model", "tiny", "--topology", "h200-x2", "--micro-batch", "two"],
     ["--micro-batch 'two' is not a positive integer"]),
]


@pytest.mark.parametrize("argv, words", CASES, ids=[" ".join(a)[:60] for a, _ in CASES])
def test_wrong_input_is_one_line_and_exit_2(argv, words, files, capsys):
    code, err = run_cli([a.format(**files) for a in argv], capsys)
    assert code == 2, err
    assert len(err) == 1 and err[0].startswith("topowise: error: ") and "Traceback" not in err[0], err
    for w in words:
        assert w in err[0]


# --- the GPU model of pasted text -----------------------------------------------------------------

def _with(before: str = "", after: str = "") -> str:
    return before + SMI.read_text() + after


@pytest.mark.parametrize("text", [
    _with(before="GPU 0: NVIDIA H200 (UUID: GPU-0a1b)\nGPU 1: NVIDIA H200 (UUID: GPU-2c3d)\n\n"),
    _with(after="\nGPU 0: NVIDIA H200 (UUID: GPU-0a1b)\nGPU 1: NVIDIA H200 (UUID: GPU-2c3d)\n"),
    _with(before="==============NVSMI LOG==============\n\nAttached GPUs : 2\nGPU 00000000:18:00.0\n"
                 "    Product Name                          : NVIDIA H200\n"
                 "GPU 00000000:2A:00.0\n    Product Name                          : NVIDIA H200\n\n"),
    _with(after="|   0  NVIDIA H200                    On  |   00000000:18:00.0 Off |                    0 |\n"
                "|   1  NVIDIA H200                    On  |   00000000:2A:00.0 Off |                    0 |\n"),
], ids=["-L before", "-L after", "-q", "nvidia-smi table"])
def test_gpu_name_is_read_from_nvidia_smi_output_pasted_along(text):
    topo = parse_topo_text(text, "node")
    assert [g.name for g in topo.gpus] == ["NVIDIA H200", "NVIDIA H200"]
    assert topo.gpu_spec.name == "H200" and "GPU model unknown" not in topo.source


def test_gpu_name_flag_wins_and_unnamed_text_says_so():
    assert parse_topo_text(_with(before="GPU 0: NVIDIA A100 (UUID: x)\n"), "n", gpu_name="H200").gpus[0].name == "H200"
    assert parse_topo_text(SMI.read_text(), "n").gpus[0].name == UNNAMED


def test_pasted_text_predicts_with_gpu_name(capsys):
    argv = ["predict", "--model", "tiny", "--topology", str(SMI), "--gpu-name", "H200", "--num-gpus", "2",
            "--strategy", "zero2", "--json"]
    assert main(argv) == 0
    pasted = json.loads(capsys.readouterr().out)
    assert main([*argv[:4], "h200-x2", *argv[7:]]) == 0  # the preset of the same machine
    preset = json.loads(capsys.readouterr().out)
    assert pasted["memory"]["gpu_memory_bytes"] == preset["memory"]["gpu_memory_bytes"]
    assert pasted["step_time_s"] == pytest.approx(preset["step_time_s"], rel=0.05)


def test_load_topology_refuses_unnamed_text_only_where_it_predicts():
    assert load_topology(str(SMI)).gpus[0].name == UNNAMED  # `topo` and `bench` take it as it is
    with pytest.raises(Exception, match="--gpu-name"):
        load_topology(str(SMI), need_gpu_model=True)


# --- sequence length --------------------------------------------------------------------------------

def _limit(spec: ModelSpec) -> int:
    if spec.max_positions:
        return spec.max_positions
    return min(MAX_SEQ_LEN, ROPE_STRETCH * spec.context_length) if spec.context_length else MAX_SEQ_LEN


@pytest.mark.parametrize("name", PRESETS)
def test_executed_flops_stay_under_the_peak_up_to_the_longest_sequence_taken(name):
    """What the GPU executes per second stays under its peak at any sequence taken. MFU itself counts the
    full T x T attention square (PaLM's count, flops.py) where the causal kernels run 7/12 of it, so at 4x a
    model's context, attention-bound, MFU may pass 1 while the executed rate cannot."""
    from topowise.costmodel.flops import hardware_flops_per_token

    spec = PRESETS[name]
    topo = load_preset("hgx-h100-8")
    pred = predict(Run(model=spec, gpus=tuple(range(8)), strategy="zero3", seq_len=_limit(spec)), topo)
    executed = hardware_flops_per_token(spec, _limit(spec)) * _limit(spec) / pred.step_time_s
    assert pred.mfu > 0 and executed < topo.gpu_spec.bf16_dense_flops


def test_presets_carry_their_published_context():
    assert {n: s.context_length for n, s in PRESETS.items() if n != "tiny"} == {
        "gpt2": 1024, "qwen2.5-0.5b": 32768, "llama3.2-1b": 131072, "llama3.2-3b": 131072,
        "llama3.1-8b": 131072, "llama3.1-70b": 131072, "qwen2.5-7b": 131072, "mistral-7b": 32768,
        "llama3.1-405b": 131072, "gpt3-175b": 2048}


def test_past_the_context_of_a_rotary_model_warns_once(capsys):
    spec = ModelSpec(name="warn-once", family="llama", vocab_size=512, hidden_size=64, num_layers=2, num_heads=4,
                     num_kv_heads=2, intermediate_size=128, context_length=1024)
    for _ in range(3):
        Run(model=spec, gpus=(0, 1), strategy="ddp", seq_len=2048)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("topowise: warning: --seq-len 2,048 is past warn-once's context")
    Run(model=spec, gpus=(0, 1), strategy="ddp", seq_len=1024)
    assert capsys.readouterr().err == ""


def test_records_without_a_context_length_still_load():
    old = {k: v for k, v in PRESETS["llama3.1-8b"].to_dict().items() if k != "context_length"}
    assert ModelSpec.from_dict(old).context_length == 0
