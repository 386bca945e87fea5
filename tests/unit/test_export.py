"""Exports: each one read back by its own tool's parser where that installs on CPU."""

import json
import re
import shlex
import shutil
import subprocess
from dataclasses import replace

import pytest

from topowise.costmodel.deepspeed import MAX_BUCKET_ELEMENTS, bucket_elements
from topowise.errors import UsageError
from topowise.export import KINDS, LaunchPlan, load_plan_file, render
from topowise.export.deepspeed import deepspeed_config
from topowise.export.torchrun import launch_config, script_args, torchrun_script
from topowise.export.torchtitan import torchtitan_args
from topowise.models.spec import load_model
from topowise.run import Run


def make_plan(strategy="zero3", gpus=(0, 1), shard=None, fabric="nvlink", islands=1, link=318.75, node=8,
              ac=False, micro_batch=2, engine="pytorch"):
    run = Run(model=load_model("llama3.1-8b"), gpus=tuple(gpus), strategy=strategy, micro_batch=micro_batch,
              seq_len=4096, checkpointing="full" if ac else "none", shard_group_size=shard, fabric=fabric,
              engine=engine)
    return LaunchPlan(run=run, topology="h100-nvl-8", step_time_s=1.5, tokens_per_s=5461.0,
                      peak_memory_bytes=70 * 2**30, gpu_memory_bytes=94 * 10**9, link_gbps=link,
                      islands_spanned=islands, node_gpus=node, why="because")


ALL = [make_plan("ddp"), make_plan("zero1"), make_plan("zero2"), make_plan("zero3", ac=True),
       make_plan("hsdp", gpus=range(8), shard=2, islands=4, link=63.0)]


# --- the plan file -------------------------------------------------------------------------------
@pytest.mark.parametrize("plan", ALL, ids=lambda p: p.run.strategy)
def test_plan_file_round_trips(plan, tmp_path):
    path = tmp_path / "plan.json"
    path.write_text(plan.to_json())
    data = json.loads(path.read_text())
    assert data["format"] == "topowise.plan" and data["version"] == 1
    assert data["nproc"] == plan.nproc and data["env"]["CUDA_VISIBLE_DEVICES"] == ",".join(map(str, plan.run.gpus))
    assert load_plan_file(str(path)) == plan


@pytest.mark.parametrize("text", ['{"format": "topowise.topology", "version": 1}', "[1, 2]", "not json",
                                  '{"format": "topowise.plan", "version": 9}',
                                  '{"format": "topowise.plan", "version": 1, "plan": {}}'])
def test_foreign_plan_file_is_usage_error(text, tmp_path):
    path = tmp_path / "x.json"
    path.write_text(text)
    with pytest.raises(UsageError):
        load_plan_file(str(path))


def test_plan_file_strategy_and_shard_group_are_checked_as_a_run(tmp_path):
    path = tmp_path / "plan.json"
    data = make_plan("zero3").to_dict()
    data["plan"]["strategy"] = "fsdp"  # the alias reads back as its strategy
    path.write_text(json.dumps(data))
    assert load_plan_file(str(path)).run.strategy == "zero3"
    data["plan"]["strategy"] = "zero4"
    path.write_text(json.dumps(data))
    with pytest.raises(UsageError, match="unknown strategy 'zero4'"):
        load_plan_file(str(path))
    data = make_plan("hsdp", gpus=range(8), shard=2).to_dict()
    data["plan"]["shard_group_size"] = 3
    path.write_text(json.dumps(data))
    with pytest.raises(UsageError, match="does not divide 8 GPUs"):
        load_plan_file(str(path))


def test_plan_file_written_before_the_modes_and_the_model_spec_reads_as_its_run(tmp_path):
    """A plan with the checkpointing flag alone and the model by name: full checkpointing, the preset's shape."""
    path = tmp_path / "plan.json"
    data = make_plan("zero3", ac=True).to_dict()
    del data["model_spec"], data["plan"]["checkpointing"], data["plan"]["selective_ac_option"]
    path.write_text(json.dumps(data))
    assert load_plan_file(str(path)) == make_plan("zero3", ac=True)
    data["model"] = "no-such-model"
    path.write_text(json.dumps(data))
    with pytest.raises(UsageError, match="'no-such-model' does not load here"):
        load_plan_file(str(path))


def test_plan_file_micro_batch_is_checked_by_run(tmp_path):
    path = tmp_path / "plan.json"
    data = make_plan().to_dict()
    data["plan"]["micro_batch"] = 0
    path.write_text(json.dumps(data))
    with pytest.raises(UsageError, match="plan.json: --micro-batch must be at least 1, not 0"):
        load_plan_file(str(path))


def test_env_needs_no_nccl_variable_on_nvlink_and_p2p_off_only_for_pcie():
    assert make_plan().env == {"CUDA_VISIBLE_DEVICES": "0,1"}
    assert make_plan(fabric="pcie").env["NCCL_P2P_DISABLE"] == "1"
    assert not make_plan().warnings
    assert any("2 NVLink islands" in w for w in make_plan(islands=2).warnings)


def test_hsdp_shard_groups_are_consecutive_runs():
    assert make_plan("hsdp", gpus=range(8), shard=2).shard_groups == ((0, 1), (2, 3), (4, 5), (6, 7))
    assert make_plan("zero3").shard_groups == ()


# --- torchrun ------------------------------------------------------------------------------------
def test_launch_config_argv_and_env():
    argv, env = launch_config(make_plan(gpus=(2, 3)), ["python", "-m", "my.train", "--lr", "1e-4"])
    assert argv == ["torchrun", "--standalone", "--nnodes=1", "--nproc-per-node=2", "--no-python", "python", "-m",
                    "my.train", "--lr", "1e-4"]
    assert env["CUDA_VISIBLE_DEVICES"] == "2,3" and "NCCL_P2P_DISABLE" not in env


def test_script_args_forms():
    assert script_args(["train.py", "--x"]) == ["train.py", "--x"]
    assert script_args(["/usr/bin/python3", "train.py"]) == ["--no-python", "/usr/bin/python3", "train.py"]
    assert script_args(["bash", "run.sh"]) == ["--no-python", "bash", "run.sh"]
    with pytest.raises(UsageError):
        script_args([])
    with pytest.raises(UsageError):
        script_args(["python"])


def test_torchrun_script_is_shell_that_sets_env_first():
    text = torchrun_script(make_plan(fabric="pcie", gpus=(0, 2), islands=2), ["train.py", "--name", "a b"])
    command = [line for line in text.splitlines() if not line.startswith("#")]
    assert len(command) == 1
    words = shlex.split(command[0])
    start = words.index("torchrun")
    assert {"CUDA_VISIBLE_DEVICES=0,2", "NCCL_P2P_DISABLE=1", "OMP_NUM_THREADS=1"} <= set(words[:start])
    assert all("=" in w for w in words[:start])
    assert words[start:] == ["torchrun", "--standalone", "--nnodes=1", "--nproc-per-node=2", "train.py", "--name",
                             "a b"]
    assert "# warning: the plan spans 2 NVLink islands" in text


# --- Slurm ---------------------------------------------------------------------------------------
def _sbatch_options(text):
    return dict(re.match(r"#SBATCH --([\w-]+)(?:=(.*))?$", line).groups()
                for line in text.splitlines() if line.startswith("#SBATCH"))


@pytest.mark.parametrize("plan", ALL, ids=lambda p: p.run.strategy)
def test_sbatch_script_parses(plan, tmp_path):
    text = render("slurm", plan)
    assert text.startswith("#!/bin/bash\n")
    if shutil.which("bash"):
        path = tmp_path / "job.sbatch"
        path.write_text(text)
        subprocess.run(["bash", "-n", str(path)], check=True)
    opts = _sbatch_options(text)
    assert opts["nodes"] == "1"
    subset = plan.nproc < plan.node_gpus
    assert opts["gpus-per-node"] == str(plan.node_gpus if subset else plan.nproc)
    assert ("exclusive" in opts) == subset
    assert f"--nproc-per-node={plan.nproc}" in text and "--rdzv-backend=c10d" in text
    assert f"export CUDA_VISIBLE_DEVICES={','.join(map(str, plan.run.gpus))}" in text
    # nothing but #SBATCH lines may come before the first command, or sbatch ignores the rest
    head = text.splitlines()[1:len(opts) + 1]
    assert all(line.startswith("#SBATCH") for line in head)


# --- DeepSpeed -----------------------------------------------------------------------------------
def test_bucket_sizes_follow_the_link():
    nvlink, pcie = bucket_elements(318.75, 4), bucket_elements(25.0, 4)
    assert pcie < nvlink <= MAX_BUCKET_ELEMENTS
    assert bucket_elements(None, 4) == MAX_BUCKET_ELEMENTS
    # 9 alpha B bytes: 9 * 29e-6 * 318.75e9 / 4 = 20.8e6 elements -> 21e6
    assert nvlink == 21_000_000


@pytest.mark.parametrize("plan,stage", list(zip(ALL, (0, 1, 2, 3, 3))), ids=[p.run.strategy for p in ALL])
def test_deepspeed_config_fields(plan, stage):
    cfg = json.loads(render("deepspeed", plan))
    assert cfg == deepspeed_config(plan)
    assert cfg["zero_optimization"]["stage"] == stage
    assert cfg["bf16"] == {"enabled": True}
    assert cfg["train_micro_batch_size_per_gpu"] == 2 and cfg["gradient_accumulation_steps"] == 1
    if plan.run.strategy == "hsdp":
        assert cfg["zero_optimization"]["zero_hpz_partition_size"] == 2


@pytest.mark.reference
@pytest.mark.parametrize("plan", ALL, ids=lambda p: p.run.strategy)
def test_deepspeed_accepts_the_config(plan):
    pytest.importorskip("deepspeed")
    from deepspeed.runtime.config import DeepSpeedConfig

    cfg = DeepSpeedConfig(json.loads(render("deepspeed", plan)))  # rejects unknown or removed keys
    assert cfg.zero_optimization_stage == deepspeed_config(plan)["zero_optimization"]["stage"]
    assert cfg.bfloat16_config.enabled and cfg.train_micro_batch_size_per_gpu == plan.run.micro_batch
    if plan.run.strategy == "hsdp":
        assert cfg.zero_config.zero_hpz_partition_size == plan.run.shard_group_size


# --- accelerate ----------------------------------------------------------------------------------
@pytest.mark.parametrize("plan", ALL, ids=lambda p: p.run.strategy)
def test_accelerate_yaml_is_valid_yaml(plan):
    yaml = pytest.importorskip("yaml")
    data = yaml.safe_load(render("accelerate", plan))
    assert data["num_processes"] == plan.nproc and data["gpu_ids"] == ",".join(map(str, plan.run.gpus))
    expected = {"ddp": "MULTI_GPU", "zero1": "DEEPSPEED", "zero2": "FSDP", "zero3": "FSDP", "hsdp": "FSDP"}
    assert data["distributed_type"] == expected[plan.run.strategy]


@pytest.mark.parametrize("plan", ALL + [make_plan("zero3", engine="deepspeed")],
                         ids=lambda p: p.run.strategy + ("-deepspeed" if p.run.engine == "deepspeed" else ""))
@pytest.mark.reference
def test_accelerate_launch_reads_the_config(plan, tmp_path):
    pytest.importorskip("accelerate")
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils import FullyShardedDataParallelPlugin, patch_environment
    from accelerate.utils.launch import prepare_multi_gpu_env

    path = tmp_path / "accelerate.yaml"
    path.write_text(render("accelerate", plan))
    args = launch_command_parser().parse_args(["--config_file", str(path), "train.py"])
    args, _defaults, _mp = _validate_launch_command(args)
    assert args.num_processes == plan.nproc and args.mixed_precision == "bf16"
    if plan.run.strategy == "ddp":
        assert args.multi_gpu
    elif plan.run.strategy == "zero1" or plan.run.engine == "deepspeed":
        assert args.use_deepspeed and int(args.zero_stage) == plan.spec.deepspeed_stage
    else:
        assert args.use_fsdp and int(args.fsdp_version) == 2
        env = prepare_multi_gpu_env(args)
        with patch_environment(**env):
            plugin = FullyShardedDataParallelPlugin()
        assert plugin.fsdp_version == 2
        assert plugin.reshard_after_forward is (plan.run.strategy != "zero2")
        assert plugin.activation_checkpointing is plan.run.activation_checkpointing
        if plan.run.strategy == "hsdp":
            assert env["PARALLELISM_CONFIG_DP_SHARD_SIZE"] == "2"
            assert env["PARALLELISM_CONFIG_DP_REPLICATE_SIZE"] == "4"


# --- torchtitan ----------------------------------------------------------------------------------
@pytest.mark.parametrize("plan,expected", [
    (make_plan("ddp"), {"replicate": "2", "shard": "1", "reshard": None}),
    (make_plan("zero2"), {"replicate": "1", "shard": "2", "reshard": "never"}),
    (make_plan("zero3"), {"replicate": "1", "shard": "2", "reshard": "always"}),
    (make_plan("hsdp", gpus=range(8), shard=4), {"replicate": "2", "shard": "4", "reshard": "always"}),
], ids=["ddp", "zero2", "zero3", "hsdp"])
def test_torchtitan_degrees(plan, expected):
    args = torchtitan_args(plan)
    flags = dict(zip(args[::2], args[1::2]))
    assert flags["--parallelism.data_parallel_replicate_degree"] == expected["replicate"]
    assert flags["--parallelism.data_parallel_shard_degree"] == expected["shard"]
    assert flags.get("--parallelism.fsdp_reshard_after_forward") == expected["reshard"]
    assert int(expected["replicate"]) * int(expected["shard"]) == plan.nproc
    assert flags["--training.local_batch_size"] == "2" and flags["--training.seq_len"] == "4096"
    assert flags["--activation_checkpoint.mode"] == "none"


def test_torchtitan_command_is_one_shell_command():
    text = render("torchtitan", make_plan("zero3", ac=True))
    command = " ".join(line for line in text.splitlines() if not line.startswith("#")).replace("\\", " ")
    words = shlex.split(command)
    assert words[:2] == ["CUDA_VISIBLE_DEVICES=0,1", "NGPU=2"]
    assert words[words.index("--activation_checkpoint.mode") + 1] == "full"


def test_unknown_export_kind():
    with pytest.raises(UsageError, match="valid: " + ", ".join(KINDS)):
        render("kubernetes", make_plan())


# --- plans predicted as DeepSpeed runs ZeRO (plan --engine deepspeed) -----------------------------
DEEPSPEED = [make_plan(s, engine="deepspeed") for s in ("zero1", "zero2", "zero3")]


@pytest.mark.parametrize("plan", DEEPSPEED, ids=lambda p: p.run.strategy)
def test_deepspeed_plan_round_trips_and_says_its_engine(plan, tmp_path):
    path = tmp_path / "plan.json"
    path.write_text(plan.to_json())
    assert json.loads(path.read_text())["plan"]["engine"] == "deepspeed"
    assert load_plan_file(str(path)) == plan
    stage = plan.spec.deepspeed_stage
    for kind in ("torchrun", "slurm", "accelerate"):
        assert f"as DeepSpeed runs it (ZeRO-{stage})" in render(kind, plan)


def test_plan_file_without_engine_reads_as_pytorch(tmp_path):
    data = make_plan().to_dict()
    del data["plan"]["engine"]
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data))
    assert load_plan_file(str(path)).run.engine == "pytorch"
    data["plan"]["engine"] = "deepspeed"
    data["plan"]["strategy"] = "ddp"
    path.write_text(json.dumps(data))
    with pytest.raises(UsageError, match="--engine deepspeed runs zero1, zero2, zero3, hsdp, not ddp"):
        load_plan_file(str(path))


@pytest.mark.parametrize("plan", DEEPSPEED, ids=lambda p: p.run.strategy)
def test_deepspeed_plan_exports_accelerate_with_its_deepspeed_plugin(plan):
    yaml = pytest.importorskip("yaml")
    data = yaml.safe_load(render("accelerate", plan))
    assert data["distributed_type"] == "DEEPSPEED" and "fsdp_config" not in data
    assert data["deepspeed_config"]["zero_stage"] == plan.spec.deepspeed_stage


@pytest.mark.parametrize("kind,plan,match", [
    ("torchtitan", make_plan("zero3", engine="deepspeed"), "torchtitan runs FSDP2, not DeepSpeed"),
    ("accelerate", make_plan("hsdp", gpus=range(8), shard=2, islands=4, link=63.0, engine="deepspeed"),
     "cannot express"),
], ids=["torchtitan", "accelerate-hsdp"])
def test_deepspeed_plan_is_not_exported_to_what_runs_fsdp(kind, plan, match):
    with pytest.raises(UsageError, match=match):
        render(kind, plan)
    assert json.loads(render("deepspeed", plan))["zero_optimization"]["stage"] == 3


def test_accelerate_says_where_its_fsdp2_wrapping_holds_more_than_predicted():
    """accelerate shards [final norm, lm_head] with reshard_after_forward False; the prediction reshards
    every unit under zero3 and hsdp, so those configs say so, and zero2 (nothing resharded) does not."""
    said = {p.run.strategy: "output layer gathered from forward to backward" in render("accelerate", p) for p in ALL}
    assert said == {"ddp": False, "zero1": False, "zero2": False, "zero3": True, "hsdp": True}
    assert "output layer gathered" not in render("accelerate", make_plan("zero3", engine="deepspeed"))


def test_deepspeed_json_has_its_plan_said_beside_it():
    """A DeepSpeed config is JSON: the plan's summary and warnings, which the other exports carry as comments, the
    checkpointing it fits with (a config cannot turn it on) and the engine it was predicted for come as notes."""
    from topowise.export import export_notes

    spread = make_plan("zero3", gpus=range(4), islands=2, link=63.0, ac=True)
    notes = export_notes("deepspeed", spread)
    assert notes[0].startswith("topowise plan: zero3 on GPUs 0,1,2,3") and "full activation checkpointing" in notes[0]
    assert any(n.startswith("warning: the plan spans 2 NVLink islands") for n in notes)
    assert any("full activation checkpointing, which a DeepSpeed config does not turn on" in n for n in notes)
    assert any("predicted as PyTorch's FSDP2 runs this strategy" in n for n in notes)
    deepspeed = make_plan("zero3", engine="deepspeed")
    per_op = export_notes("deepspeed", replace(deepspeed, run=replace(deepspeed.run, checkpointing="selective")))
    assert any("selective (per op) activation checkpointing" in n and "create_selective_checkpoint_contexts" in n
               for n in per_op)
    assert not any("FSDP2" in n for n in per_op)
    assert export_notes("deepspeed", make_plan("zero2", engine="deepspeed")) == (
        export_notes("deepspeed", make_plan("zero2", engine="deepspeed"))[0],)  # the summary alone
    assert all(export_notes(kind, spread) == () for kind in KINDS if kind != "deepspeed")


def test_plan_prints_deepspeed_json_whole_on_stdout_and_its_notes_on_stderr(capsys, tmp_path):
    from topowise.cli.main import main

    argv = ["plan", "--model", "llama3.1-8b", "--topology", "hgx-h100-8", "--num-gpus", "8", "--micro-batch", "8",
            "--export", "deepspeed"]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    config = json.loads(out[out.index("{\n"):])  # the table, then the config to the end
    assert config["zero_optimization"]["stage"] == 3
    assert "# the plan fits with full activation checkpointing" in err
    assert main([*argv, "--json"]) == 0
    assert any("activation checkpointing" in n for n in json.loads(capsys.readouterr().out)["export"]["notes"])
