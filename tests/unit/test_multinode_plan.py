"""predict, plan and the exports on a Cluster (collectives across nodes priced by costmodel/network.py)."""

import json
import shlex

import pytest

from topowise import hardware
from topowise.cli.main import main
from topowise.costmodel.predict import predict
from topowise.errors import UsageError
from topowise.export import LaunchPlan, render
from topowise.export.torchrun import launch_config
from topowise.models.spec import load_model
from topowise.planner.search import plan
from topowise.run import Run
from topowise.topology import load_topology

MODEL = load_model("llama3.1-8b")


def step(topology, gpus, strategy, **kw):
    return predict(Run(model=MODEL, gpus=gpus, strategy=strategy, **kw), topology)


def test_collectives_across_nodes_are_priced_on_the_network():
    c = load_topology("2x hgx-h100-8+ib-ndr")
    p = step(c, c.indices, "zero3")
    assert {x.link for x in p.time.collectives} == {"NET"}
    inside = step(c, range(8), "zero3")
    assert "NET" not in {x.link for x in inside.time.collectives}
    h = step(c, c.indices, "hsdp", shard_group_size=8)
    links = {(x.op, x.link) for x in h.time.collectives}
    assert ("all_reduce", "NET") in links and ("all_gather", "NV") in links  # gathers stay in the node


def test_more_nodes_never_speed_up_a_step_at_fixed_per_gpu_work():
    times = []
    for nodes in (1, 2, 8, 32):
        c = load_topology(f"{nodes}x pcie-l40s-8+eth-100")
        times.append(step(c, c.indices, "zero3", checkpointing="full").step_time_s)
    assert times == sorted(times)


def test_hsdp_beats_fsdp_across_many_nodes():
    # 1024 GPUs: FSDP's all-gathers and reduce-scatters are rings over 1024 ranks (NCCL has no tree for
    # them), HSDP's are rings of 8 inside a node plus one all-reduce across 128 nodes
    c = load_topology("128x hgx-h100-8+ib-ndr")
    z3 = step(c, c.indices, "zero3")
    h = step(c, c.indices, "hsdp", shard_group_size=8)
    assert h.step_time_s < z3.step_time_s
    small = load_topology("2x hgx-h100-8+ib-ndr")
    assert (step(small, small.indices, "zero3").step_time_s
            < step(small, small.indices, "hsdp", shard_group_size=8).step_time_s)


def test_plan_ranks_across_nodes_with_reasons():
    c = load_topology("2x hgx-h100-8+ib-ndr")
    result = plan(MODEL, c, num_gpus=16, top=3)
    assert result.plans
    best = result.plans[0]
    assert len(best.gpus) == 16 and c.nodes_spanned(best.gpus) == (0, 1)
    assert all(a.prediction.tokens_per_s >= b.prediction.tokens_per_s for a, b in zip(result.plans, result.plans[1:]))
    assert "network between nodes" in best.why or "NVLink" in best.why


def _launch_plan(name="4x dgx-a100-8+ib-hdr", gpus=32):
    c = load_topology(name)
    result = plan(MODEL, c, num_gpus=gpus, top=1)
    return LaunchPlan.from_plan(result.best, result, c)


def test_launch_plan_across_nodes_round_trips():
    lp = _launch_plan()
    assert lp.num_nodes == 4 and lp.nproc_per_node == 8 and lp.network == "ib-hdr"
    assert lp.env["NCCL_IB_HCA"] == ",".join(f"mlx5_{i}" for i in range(8))  # the DGX preset names its HCAs
    assert lp.env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"
    again = LaunchPlan.from_dict(json.loads(lp.to_json()))
    assert again == lp


def test_slurm_export_across_nodes():
    text = render("slurm", _launch_plan())
    assert "#SBATCH --nodes=4" in text and "#SBATCH --gpus-per-node=8" in text
    srun = text[text.index("srun "):].replace("\\\n", " ")
    words = shlex.split(srun)
    assert "--nproc-per-node=8" in words and "--rdzv-backend=c10d" in words
    assert "export NCCL_IB_HCA=mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_7" in text


def test_torchrun_export_one_line_per_node_and_launch_refuses():
    lp = _launch_plan("2x hgx-h100-8+ib-ndr", 16)
    text = render("torchrun", lp)
    commands = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert [shlex.split(c)[-1] for c in commands] == ["train.py", "train.py"]
    assert ["--node-rank=0" in c for c in commands] == [True, False]
    assert all("--nnodes=2" in c and "--rdzv-backend=c10d" in c for c in commands)
    assert "NCCL_IB_HCA" in text  # presets do not know HCA names: the script says where to set them
    with pytest.raises(UsageError, match="spans 2 nodes"):
        launch_config(lp, ["train.py"])
    with pytest.raises(UsageError, match="across 2 nodes"):
        render("accelerate", lp)


def test_topo_cli_shows_cluster_tiers(capsys):
    assert main(["topo", "--preset", "4x pcie-l40s-8+eth-100", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["network_gbps_per_gpu"] == pytest.approx(hardware.NIC_GBPS["eth-100"] / 8)
    assert [t["tier"] for t in report["tiers"]] == ["PCIe", "network"]
    assert main(["topo", "--preset", "2x hgx-h100-8+ib-ndr"]) == 0
    out = capsys.readouterr().out
    assert "48 GB/s per GPU" in out and "NVLink" in out
