"""Exports of plans with tensor, pipeline and context parallelism: Megatron-LM's arguments, torchtitan's
[parallelism], and the refusals of what cannot express them."""

import argparse
import importlib.util
import shlex
import sys
import types

import pytest

from topowise.errors import UsageError
from topowise.export import LaunchPlan, render
from topowise.export.megatron import megatron_args
from topowise.export.torchtitan import torchtitan_args
from topowise.models.spec import load_model
from topowise.run import Run


def mesh_plan(model="llama3.1-70b", gpus=64, strategy="zero1", **kwargs):
    run = Run(model=load_model(model), gpus=tuple(range(gpus)), strategy=strategy, micro_batch=1, seq_len=8192,
              **kwargs)
    return LaunchPlan(run=run, topology="8x hgx-h100-8+ib-ndr", step_time_s=2.0, tokens_per_s=1e5,
                      peak_memory_bytes=70 * 2**30, gpu_memory_bytes=80 * 2**30, node_gpus=8,
                      num_nodes=max(1, gpus // 8), network="ib-ndr")


def megatron_parser() -> argparse.ArgumentParser:
    """The arguments the export uses, as Megatron-LM's megatron/training/arguments.py declares them (its parser
    cannot be installed here: it imports megatron.core and torch's CUDA extensions)."""
    p = argparse.ArgumentParser()
    for name in ("--tensor-model-parallel-size", "--pipeline-model-parallel-size",
                 "--num-layers-per-virtual-pipeline-stage", "--context-parallel-size", "--micro-batch-size",
                 "--global-batch-size", "--recompute-num-layers", "--num-layers", "--hidden-size",
                 "--num-attention-heads", "--ffn-hidden-size", "--seq-length", "--max-position-embeddings",
                 "--num-query-groups"):
        p.add_argument(name, type=int)
    p.add_argument("--recompute-granularity", choices=["full", "selective"])
    p.add_argument("--recompute-method", choices=["uniform", "block"])
    p.add_argument("--normalization", choices=["LayerNorm", "RMSNorm"])
    p.add_argument("--position-embedding-type", choices=["learned_absolute", "rope"])
    for flag in ("--sequence-parallel", "--use-distributed-optimizer", "--use-torch-fsdp2", "--group-query-attention",
                 "--swiglu", "--disable-bias-linear", "--untie-embeddings-and-output-weights", "--bf16"):
        p.add_argument(flag, action="store_true")
    return p


def test_megatron_arguments_carry_the_mesh_and_the_batch():
    plan = mesh_plan(tp=8, pp=4, pp_schedule="interleaved-1f1b", virtual_stages=2, grad_accum=8, checkpointing="full")
    args = megatron_args(plan)
    # the parallelism part, in the order Megatron's docs list it, written out by hand
    assert args[:18] == ["--tensor-model-parallel-size", "8", "--pipeline-model-parallel-size", "4",
                         "--num-layers-per-virtual-pipeline-stage", "10", "--context-parallel-size", "1",
                         "--sequence-parallel", "--micro-batch-size", "1", "--global-batch-size", "16",
                         "--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers"]
    parsed = megatron_parser().parse_args(args)
    assert (parsed.tensor_model_parallel_size, parsed.pipeline_model_parallel_size, parsed.context_parallel_size,
            parsed.global_batch_size, parsed.num_query_groups) == (8, 4, 1, 16, 8)
    assert parsed.use_distributed_optimizer and parsed.untie_embeddings_and_output_weights
    # the whole command line is what a shell hands Megatron's parser
    text = render("megatron", plan)
    assert "--nnodes=8" in text and "--nproc-per-node=8" in text
    words = shlex.split(text.rsplit("pretrain_gpt.py", 1)[1].replace("\\\n", " "))
    assert megatron_parser().parse_args(words) == parsed


@pytest.mark.parametrize("kwargs, words", [
    ({"pp": 3, "tp": 8, "grad_accum": 3, "gpus": 48}, "80 layers do not split over pp 3 x v 1 = 3 chunks evenly"),
    ({"pp": 2, "tp": 8, "pp_schedule": "zb-h1", "grad_accum": 4, "gpus": 16}, "not zb-h1"),
    ({"strategy": "hsdp", "tp": 8, "gpus": 64, "shard_group_size": 4}, "an hsdp plan has no Megatron-LM argument"),
])
def test_megatron_refuses_what_it_cannot_run(kwargs, words):
    with pytest.raises(UsageError, match=words):
        megatron_args(mesh_plan(**kwargs))


@pytest.mark.parametrize("kind", ["deepspeed", "accelerate"])
def test_deepspeed_and_accelerate_refuse_a_mesh_in_one_line(kind):
    with pytest.raises(UsageError) as err:
        render(kind, mesh_plan(gpus=8, tp=8))
    assert str(err.value).count("\n") == 0 and "tp 8 x pp 1 x cp 1" in str(err.value)


@pytest.fixture
def torchtitan_config_manager(monkeypatch):
    """torchtitan's own ConfigManager, imported without torchtitan/__init__ (which pulls in triton kernels)."""
    found = importlib.util.find_spec("torchtitan")
    if found is None or importlib.util.find_spec("tyro") is None:
        pytest.skip("torchtitan is not installed")
    stub = types.ModuleType("torchtitan")
    stub.__path__ = list(found.submodule_search_locations)
    before = {k for k in sys.modules if k.startswith("torchtitan")}
    monkeypatch.setitem(sys.modules, "torchtitan", stub)
    from torchtitan.config.manager import ConfigManager

    yield ConfigManager
    for k in [k for k in sys.modules if k.startswith("torchtitan.") and k not in before]:
        del sys.modules[k]


@pytest.mark.reference
def test_torchtitan_parallelism_loads_through_its_config_manager(torchtitan_config_manager):
    plan = mesh_plan(strategy="zero3", tp=8, pp=4, pp_schedule="interleaved-1f1b", virtual_stages=2, grad_accum=8)
    config = torchtitan_config_manager().parse_args(torchtitan_args(plan))
    par, training = config.parallelism, config.training
    assert (par.data_parallel_replicate_degree, par.data_parallel_shard_degree, par.tensor_parallel_degree,
            par.pipeline_parallel_degree, par.context_parallel_degree) == (1, 2, 8, 4, 1)
    assert par.pipeline_parallel_schedule == "Interleaved1F1B" and par.pipeline_parallel_microbatch_size == 1
    # 8 pipeline micro-batches of 1 in a local batch of 8; dp 2: global 16, so no further accumulation
    assert (training.local_batch_size, training.global_batch_size) == (8, 16)
    # a data-parallel plan that accumulates: global = local x dp x 4
    acc = torchtitan_config_manager().parse_args(torchtitan_args(mesh_plan(gpus=8, strategy="zero3", grad_accum=4)))
    assert (acc.training.local_batch_size, acc.training.global_batch_size) == (1, 32)


def test_a_mesh_plan_round_trips_through_its_plan_file(tmp_path):
    from topowise.export import load_plan_file

    plan = mesh_plan(tp=8, pp=4, pp_schedule="interleaved-1f1b", virtual_stages=2, grad_accum=8)
    path = tmp_path / "plan.json"
    path.write_text(plan.to_json())
    again = load_plan_file(str(path))
    assert again == plan and (again.run.tp, again.run.pp, again.run.virtual_stages) == (8, 4, 2)
