"""Planning across regions (planner/regions.py): HSDP with a shard group per region, only its all-reduce on
the WAN, and the gradient accumulation that brings the WAN's share of a step under a target."""

import pytest

from topowise.cli.main import main
from topowise.models.spec import load_model
from topowise.planner import regions
from topowise.planner.search import plan
from topowise.topology import load_topology

PRESET = "two-region-h100"  # topology/cluster.py: 2 regions of 2 HGX H100 nodes, a 100 Gb/s, 30 ms WAN


@pytest.fixture(scope="module")
def two_regions():
    return load_topology(PRESET)


@pytest.fixture(scope="module")
def planned(two_regions):
    return plan(load_model("llama3.2-1b"), two_regions, num_gpus=32, micro_batches=(1,), seq_len=1024, top=3)


def test_the_preset_has_two_regions_of_sixteen_gpus(two_regions):
    assert regions.region_groups(two_regions) == (tuple(range(16)), tuple(range(16, 32)))
    assert regions.region_sizes(two_regions) == (16,)
    assert regions.region_groups(load_topology("4x hgx-h100-8+ib-ndr")) == ()  # one region


def test_two_regions_plan_hsdp_with_the_all_reduce_across_regions(planned, two_regions):
    best = planned.best
    assert best.strategy == "hsdp" and best.shard_group_size == 16  # a shard group per region
    groups = regions.collective_groups(best.prediction, two_regions)
    assert len(two_regions.regions_spanned(groups["all_reduce"])) == 2
    assert len(two_regions.regions_spanned(groups["all_gather"])) == 1
    cost = regions.wan_cost(best.prediction, two_regions)
    assert cost.ops == ("all_reduce",) and 0 < cost.wan_s < best.prediction.step_time_s
    assert "only the all-reduce crosses the WAN" in best.why
    assert any(n.startswith("2 regions: hsdp with a shard group per region") for n in planned.notes)


def test_fsdp_across_the_wan_stays_a_candidate_priced_with_its_all_gathers(planned, two_regions):
    fsdp = next(p for p in planned.ranked if p.strategy == "zero3" and len(p.gpus) == 32)
    cost = regions.wan_cost(fsdp.prediction, two_regions)
    assert "all_gather" in cost.ops and cost.wan_s > cost.deferrable_s
    assert fsdp.prediction.tokens_per_s < planned.best.prediction.tokens_per_s


def test_accumulation_is_the_fewest_micro_batches_under_the_target(planned, two_regions):
    pred = planned.best.prediction
    for target in (0.2, 0.1, 0.05, 0.01):
        cost = regions.wan_cost(pred, two_regions, target)
        k = cost.micro_batches
        assert cost.share_at(k) <= target + 1e-12
        assert k == 1 or cost.share_at(k - 1) > target
    assert regions.wan_cost(pred, two_regions, 0.01).micro_batches > regions.wan_cost(pred, two_regions,
                                                                                        0.1).micro_batches


def test_share_at_one_micro_batch_is_the_steps_own_share():
    cost = regions.WanCost(step_s=1.0, wan_s=0.5, deferrable_s=0.5, optimizer_s=0.1, target=0.1,
                           micro_batches=None, ops=("all_reduce",))
    assert cost.share_at(1) == pytest.approx(0.5)
    # T(k) = k (1 - 0.5 - 0.1) + 0.1 + 0.5; share = 0.5 / T(k) <= 0.1 from k = 11
    assert regions.accumulation(cost) == 11 and cost.share_at(11) == pytest.approx(0.5 / (11 * 0.4 + 0.6))


def test_plan_cli_takes_the_wan_share(capsys):
    argv = ["plan", "--model", "llama3.2-1b", "--topology", PRESET, "--num-gpus", "32", "--micro-batch", "1",
            "--seq-len", "1024", "--top", "1"]
    assert main([*argv, "--wan-share", "0.02"]) == 0
    assert "under 2%" in capsys.readouterr().out
    assert main([*argv, "--wan-share", "1.5"]) == 2
    assert "between 0 and 1" in capsys.readouterr().err


def test_plan_json_carries_the_wan_cost(capsys):
    import json

    assert main(["plan", "--model", "llama3.2-1b", "--topology", PRESET, "--num-gpus", "32", "--micro-batch", "1",
                 "--seq-len", "1024", "--top", "1", "--json"]) == 0
    wan = json.loads(capsys.readouterr().out)["plans"][0]["wan"]
    assert wan["ops"] == ["all_reduce"] and wan["target_share"] == 0.1
    assert wan["wan_share_at_micro_batches"] <= 0.1 < wan["wan_share"]
