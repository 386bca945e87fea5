"""The description of a training run: validated once, with the arithmetic in the message, and the registry."""

import json

import pytest

from topowise.errors import UsageError
from topowise.models.spec import load_model
from topowise.run import STRATEGIES, STRATEGY_NAMES, Run, parse_strategies, place
from topowise.topology.presets import load_preset

TINY = load_model("tiny")


def test_the_registry_says_what_each_strategy_shards_as_the_zero_paper_names_it():
    # ZeRO (arXiv 1910.02054): stage 1 the optimizer states, 2 also gradients, 3 also parameters
    assert STRATEGY_NAMES == ("ddp", "zero1", "zero2", "zero3", "hsdp")
    assert STRATEGIES["ddp"].sharded == ()
    assert STRATEGIES["zero1"].sharded == ("optimizer",)
    assert STRATEGIES["zero2"].sharded == ("optimizer", "gradients")
    assert set(STRATEGIES["zero3"].sharded) == set(STRATEGIES["hsdp"].sharded) == {"optimizer", "gradients",
                                                                                     "parameters"}
    # FSDP2's reshard_after_forward: False for zero2, True for zero3 and hsdp; only hsdp replicates
    assert [s.reshard_after_forward for s in STRATEGIES.values()] == [False, False, False, True, True]
    assert [s.replicated for s in STRATEGIES.values()] == [False, False, False, False, True]
    # DDP and ZeroRedundancyOptimizer keep fp32 weights under autocast; FSDP2 gathers bf16
    assert [s.autocast for s in STRATEGIES.values()] == [True, True, False, False, False]
    assert [s.deepspeed_stage for s in STRATEGIES.values()] == [None, 1, 2, 3, 3]


def test_an_alias_becomes_its_strategy_and_a_gpu_list_a_tuple():
    run = Run(model=TINY, gpus=[0, 1], strategy="FSDP")
    assert run.strategy == "zero3" and run.gpus == (0, 1)
    assert parse_strategies("DDP, fsdp,zero3,hsdp") == ("ddp", "zero3", "hsdp")
    with pytest.raises(UsageError, match="--strategies is empty"):
        parse_strategies(" , ")


@pytest.mark.parametrize("kwargs, words", [
    ({"strategy": "zero4"}, "unknown strategy 'zero4'; valid strategies: ddp, zero1, zero2, zero3, hsdp"),
    ({"micro_batch": 0}, "--micro-batch must be at least 1, not 0"),
    ({"seq_len": -1}, "sequence length must be a positive number of tokens, not -1"),
    ({"fabric": "infiniband"}, "unknown fabric 'infiniband'; valid: nvlink, pcie"),
    ({"engine": "megatron"}, "unknown engine 'megatron'"),
    ({"engine": "deepspeed", "strategy": "ddp"}, "--engine deepspeed runs zero1, zero2, zero3, hsdp, not ddp"),
    ({"gpus": ()}, "no GPUs chosen"),
    ({"gpus": (0, 1, 1, 2)}, "names a GPU twice"),
    ({"shard_group_size": 2}, "a shard group size applies to hsdp, not zero3"),
    ({"strategy": "hsdp", "gpus": (0, 1, 2, 3, 4, 5), "shard_group_size": 4},
     "hsdp shard group size 4 does not divide 6 GPUs (6 % 4 = 2); choose one of 1, 2, 3, 6"),
])
def test_a_wrong_run_is_refused_with_what_would_be_right(kwargs, words):
    args = {"model": TINY, "gpus": (0, 1), "strategy": "zero3", **kwargs}
    with pytest.raises(UsageError) as err:
        Run(**args)
    assert words in str(err.value)


def test_each_strategy_splits_its_state_over_the_right_number_of_gpus():
    gpus = tuple(range(8))
    assert Run(model=TINY, gpus=gpus, strategy="ddp").shard_size == 1
    assert Run(model=TINY, gpus=gpus, strategy="zero1").shard_size == 8
    assert Run(model=TINY, gpus=gpus, strategy="zero3").shard_size == 8
    assert Run(model=TINY, gpus=gpus, strategy="hsdp", shard_group_size=4).shard_size == 4
    with pytest.raises(ValueError, match="place"):
        _ = Run(model=TINY, gpus=gpus, strategy="hsdp").shard_size  # unknown until the wiring says


def test_placing_hsdp_takes_the_nvlink_island_as_its_shard_group():
    nvl = load_preset("h100-nvl-8")  # NVLink bridges GPUs in pairs
    assert place(Run(model=TINY, gpus=(0, 1, 2, 3), strategy="hsdp"), nvl).shard_group_size == 2
    sxm = load_preset("hgx-h100-8")  # one NVSwitch island: a single shard group of every GPU
    assert place(Run(model=TINY, gpus=(0, 1, 2, 3), strategy="hsdp"), sxm).shard_group_size == 4
    given = Run(model=TINY, gpus=(0, 1, 2, 3), strategy="hsdp", shard_group_size=1)
    assert place(given, nvl).shard_group_size == 1  # given: kept
    with pytest.raises(UsageError, match="GPU 8"):
        place(Run(model=TINY, gpus=(7, 8), strategy="ddp"), nvl)


def test_a_run_round_trips_through_json_with_its_model():
    run = Run(model=load_model("qwen2.5-0.5b"), gpus=(0, 1), strategy="hsdp", micro_batch=2, seq_len=1024,
              checkpointing="full", compile=True, fabric="pcie", shard_group_size=2, engine="deepspeed")
    again = Run.from_dict(json.loads(json.dumps(run.to_dict())))
    assert again == run and again.model.params == run.model.params
    assert run.to_dict()["activation_checkpointing"] is True  # the key JSON had before the modes stays


@pytest.mark.parametrize("legacy, mode", [
    ({"activation_checkpointing": True}, "full"),  # written before the modes: the flag alone
    ({"activation_checkpointing": False}, "none"),
    ({"activation_checkpointing": "selective"}, "selective"),  # a mode's name in the flag
    ({"activation_checkpointing": True, "checkpointing": "selective"}, "selective"),  # both, as written now
])
def test_json_with_the_flag_that_predates_the_modes_is_read_once_into_the_mode(legacy, mode):
    data = {k: v for k, v in Run(model=TINY, gpus=(0, 1), strategy="zero3").to_dict().items()
            if k not in ("checkpointing", "activation_checkpointing")}
    assert Run.from_dict({**data, **legacy}).checkpointing == mode


def test_json_with_two_different_modes_is_refused():
    data = dict(Run(model=TINY, gpus=(0, 1), strategy="zero3").to_dict(), activation_checkpointing="selective",
                checkpointing="full")
    with pytest.raises(UsageError, match="give one mode"):
        Run.from_dict(data)


def test_a_run_takes_no_checkpointing_flag_only_the_mode():
    with pytest.raises(TypeError):
        Run(model=TINY, gpus=(0, 1), strategy="zero3", activation_checkpointing=True)  # type: ignore[call-arg]


LLAMA70 = load_model("llama3.1-70b")


@pytest.mark.parametrize("kwargs, words", [
    ({"tp": 3}, "64 attention heads do not split over tp 3: 64 % 3 = 1"),
    ({"tp": 16}, "8 KV heads do not split over tp 16: 8 % 16 = 8"),
    ({"tp": 5}, "48 GPUs do not divide by tp 5 x pp 1 x cp 1 = 5 (they leave 3)"),
    ({"ep": 2}, "expert parallelism is not modelled: give ep 1, not 2"),
    ({"cp": 8, "seq_len": 4104}, "sequence 4104 does not split over 2 x cp 8 = 16 chunks"),
    ({"pp": 4, "pp_schedule": "interleaved-1f1b", "virtual_stages": 2, "grad_accum": 6},
     "6 micro-batches over pp 4 leave 2; use 4 or 8"),
    ({"pp": 2, "virtual_stages": 2}, "1f1b runs one stage per rank; virtual stages 2 need interleaved-1f1b"),
    ({"pp_schedule": "gpipe"}, "unknown pipeline schedule 'gpipe'"),
    ({"grad_accum": 0}, "grad accum must be a whole number of at least 1, not 0"),
    ({"tp": 2, "engine": "deepspeed"}, "modelled for --engine pytorch"),
    ({"pp": 96, "gpus": tuple(range(96))}, "80 layers + embedding + output = 82 layer-equivalents do not fill pp 96"),
])
def test_a_wrong_mesh_is_refused_with_its_arithmetic(kwargs, words):
    args = {"model": LLAMA70, "gpus": tuple(range(48)), "strategy": "zero3", **kwargs}
    with pytest.raises(UsageError) as err:
        Run(**args)
    assert words in str(err.value)


def test_the_mesh_leaves_the_data_parallel_rest_and_round_trips_through_json():
    run = Run(model=LLAMA70, gpus=tuple(range(64)), strategy="zero3", tp=8, pp=4, pp_schedule="interleaved-1f1b",
              virtual_stages=2, grad_accum=8)
    assert (run.dp, run.dp_shard, run.dp_replicate, run.shard_size, run.global_batch) == (2, 2, 1, 2, 16)
    assert Run.from_dict(json.loads(json.dumps(run.to_dict()))) == run
    # a run without a mesh writes the JSON it wrote before the mesh existed
    plain = Run(model=TINY, gpus=(0, 1), strategy="ddp")
    assert not {"tp", "pp", "cp", "grad_accum", "pp_schedule"} & set(plain.to_dict())
    assert Run.from_dict(plain.to_dict()) == plain
