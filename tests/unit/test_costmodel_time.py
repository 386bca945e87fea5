import dataclasses
import json

import pytest
from hypothesis import given, settings, strategies as st

from topowise.cli.main import main
from topowise.costmodel import comm
from topowise.costmodel.flops import flops_params, hardware_flops_per_token, training_flops_per_token
from topowise.costmodel.profile import Profile, default_profile, load_profile
from topowise.costmodel.step import exposed_time, normalize_strategy, predict
from topowise.errors import UsageError
from topowise.models.spec import load_model
from topowise.topology.presets import load_preset

MIB, GIB = 1024**2, 1024**3
STRATS = ("ddp", "zero1", "zero2", "zero3", "hsdp")


# --- profile -------------------------------------------------------------------------------------
def test_default_comm_figures_from_the_h200_table():
    p = default_profile()
    assert p.comm_efficiency["NV/all_reduce"] == pytest.approx(329 / 478, abs=1e-3)
    assert p.comm_efficiency["PCIe/all_gather"] == pytest.approx(25.0 / 63, abs=1e-3)
    # 1 MiB all_reduce at n=2 (factor 1): 1 MiB/44.5 GB/s - 1 MiB/329 GB/s
    assert p.latency_s["NV/all_reduce"] == pytest.approx(MIB / 44.5e9 - MIB / 329e9, rel=1e-3)
    assert all(k in p.sources for k in ("compute_efficiency", "latency_s.NV/all_reduce", "overlap.ddp"))


def test_profile_round_trip_and_partial_file(tmp_path):
    p = default_profile()
    assert Profile.from_dict(json.loads(p.to_json())) == p
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"compute_efficiency": 0.4, "overlap": {"ddp": 0.5}, "fingerprint": "x"}))
    q = load_profile(path)
    assert (q.compute_efficiency, q.overlap["ddp"], q.fingerprint) == (0.4, 0.5, "x")
    assert q.overlap["zero3"] == p.overlap["zero3"]  # not in the file: the default
    path.write_text(json.dumps({"bogus": 1}))
    with pytest.raises(UsageError, match="unknown profile field"):
        load_profile(path)


# --- flops ---------------------------------------------------------------------------------------
def test_flops_worked_llama_1b():
    m = load_model("llama3.2-1b")  # tied: the output matmul counts, the lookup does not
    assert flops_params(m) == m.params
    n8 = load_model("llama3.1-8b")  # untied: the input embedding table is left out
    assert flops_params(n8) == n8.params - 128256 * 4096
    expected = 6 * m.params + 12 * 16 * 32 * 64 * 4096
    assert training_flops_per_token(m, 4096) == expected
    assert training_flops_per_token(m, 4096, True) == expected  # model FLOPs: MFU unchanged
    # executed: causal flash attention runs 7 of the 12 L H Q T (forward 2, backward 5)
    executed = 6 * m.params + 7 * 16 * 32 * 64 * 4096
    assert hardware_flops_per_token(m, 4096) == pytest.approx(executed)
    recompute = 2 * 16 * m.layer_params + 2 * 16 * 32 * 64 * 4096
    assert hardware_flops_per_token(m, 4096, True) == pytest.approx(executed + recompute)


# --- communication -------------------------------------------------------------------------------
def test_two_gpu_ddp_all_reduce_from_the_formula():
    p = default_profile()
    topo = load_preset("h200-x2")
    nbytes = 25 * MIB
    eff, alpha = p.comm("NV", "all_reduce")
    by_hand = alpha + nbytes * (2 * 1 / 2) / (478.125e9 * eff)
    line, link = comm.group_link(topo, (0, 1))
    assert (line, link) == (478.125, "NV")
    assert comm.collective_time("all_reduce", nbytes, 2, line, link, p) == pytest.approx(by_hand)
    # 8 GPUs: factor 2 x 7/8
    assert comm.busbw_factor("all_reduce", 8) == 1.75 and comm.busbw_factor("all_gather", 8) == 0.875


def test_ddp_buckets_cover_fp32_grads_and_big_embedding_is_last():
    m = load_model("llama3.2-1b")
    buckets = comm.ddp_buckets(m)
    assert sum(buckets) == 4 * m.params
    assert buckets[-1] >= 4 * 128256 * 2048  # the tied embedding's gradient is ready last
    assert all(b >= 25 * MIB for b in buckets[1:-1]) and buckets[0] >= MIB


def test_strategy_bytes_per_step():
    m = load_model("llama3.2-1b")
    topo = load_preset("hgx-h200-8")
    p = default_profile()
    gpus = tuple(range(8))

    def total(strategy, op, **kw):
        return sum(c.total_bytes for c in comm.strategy_collectives(m, topo, gpus, strategy, p, **kw) if c.op == op)

    assert total("ddp", "all_reduce") == pytest.approx(4 * m.params, abs=64)
    assert total("zero1", "broadcast") == pytest.approx(4 * m.params, abs=256)
    assert total("zero2", "all_gather") == pytest.approx(2 * m.params, abs=64)
    assert total("zero2", "reduce_scatter") == pytest.approx(4 * m.params, abs=64)
    assert total("zero3", "all_gather") == pytest.approx(2 * m.params + 2 * 16 * m.layer_params, abs=64)
    # hsdp in shard groups of 4: the replica all-reduce carries a quarter of the fp32 gradient
    assert total("hsdp", "all_reduce", shard_group_size=4) == pytest.approx(m.params, abs=64)


def test_hsdp_groups_follow_islands_and_replicas_cross_them():
    topo = load_preset("h100-nvl-8")
    groups = comm.shard_groups(topo, (0, 2, 1, 3), 2)
    assert groups == [(0, 1), (2, 3)]
    assert comm.replica_groups(groups) == [(0, 2), (1, 3)]
    m = load_model("llama3.2-1b")
    colls = comm.strategy_collectives(m, topo, (0, 1, 2, 3), "hsdp", default_profile(), 2)
    assert {c.link for c in colls if c.op == "all_reduce"} == {"PCIe"}
    assert {c.link for c in colls if c.op != "all_reduce"} == {"NV"}


# --- step ----------------------------------------------------------------------------------------
def test_exposed_time_overlap_rule():
    assert exposed_time(1.0, 2.0, 0.8) == pytest.approx(0.2)  # fits: (1 - e) of it shows
    assert exposed_time(3.0, 2.0, 0.8) == pytest.approx(1.0 + 0.4)  # spills: the excess shows whole


def test_step_adds_up_and_hsdp_default_group():
    m = load_model("llama3.2-1b")
    p = predict(m, load_preset("h100-nvl-8"), tuple(range(8)), "hsdp")
    t = p.time
    assert p.shard_group_size == 2  # the bridged pairs
    assert p.step_time_s == pytest.approx(t.compute_s + t.memory_bound_s + t.optimizer_s + t.exposed_comm_s)
    assert p.tokens_per_s == pytest.approx(8 * 4096 / p.step_time_s)
    assert predict(m, load_preset("h200-nvl-8"), (0, 1, 2), "hsdp").shard_group_size == 3  # one island
    assert predict(m, load_preset("h100-nvl-8"), (0, 2), "hsdp").shard_group_size == 2  # islands of 2
    with pytest.raises(UsageError, match="8 % 3 = 2"):
        predict(m, load_preset("h100-nvl-8"), tuple(range(8)), "hsdp", shard_group_size=3)


def test_host_term_takes_the_longer_of_host_and_gpu_in_each_phase():
    m = load_model("llama3.2-1b")
    topo, gpus = load_preset("h200-x2"), (0, 1)
    no_host = dataclasses.replace(default_profile(), host_s_per_layer={})
    big = predict(m, topo, gpus, "zero3", seq_len=8192, profile=no_host)
    t = big.time
    assert (t.host_s, t.host_wait_s) == (0.0, 0.0)
    assert big.step_time_s == pytest.approx(t.compute_s + t.memory_bound_s + t.optimizer_s + t.exposed_comm_s)
    # 10 ms per block in every phase: at 128 tokens the GPU keeps up and the host sets each phase
    slow = dataclasses.replace(no_host, host_s_per_layer={f"zero3/{p}": 0.010 for p in ("forward", "backward", "optimizer")})
    tiny = predict(m, topo, gpus, "zero3", seq_len=128, profile=slow)
    assert tiny.time.host_s == pytest.approx(3 * 0.010 * m.num_layers)
    assert tiny.step_time_s == pytest.approx(tiny.time.host_s)
    gpu_only = predict(m, topo, gpus, "zero3", seq_len=128, profile=no_host).step_time_s
    assert tiny.time.host_wait_s == pytest.approx(tiny.step_time_s - gpu_only)
    # hsdp runs zero3's code: it takes zero3's host cost when it has none of its own
    assert predict(m, topo, gpus, "hsdp", seq_len=128, profile=slow).step_time_s == pytest.approx(tiny.step_time_s)
    # phase by phase: a host slower than the GPU in the forward only adds the forward's difference
    fwd_only = dataclasses.replace(no_host, host_s_per_layer={"zero3/forward": 0.010})
    mixed = predict(m, topo, gpus, "zero3", seq_len=8192, profile=fwd_only)
    assert big.step_time_s < mixed.step_time_s < big.step_time_s + mixed.time.host_s
    assert mixed.time.host_wait_s == pytest.approx(mixed.step_time_s - big.step_time_s)
    # strategies without a host cost of their own are GPU-bound
    assert predict(m, topo, gpus, "ddp", seq_len=128, profile=slow).time.host_wait_s == 0.0


def test_bad_inputs_are_usage_errors():
    m = load_model("tiny")
    topo = load_preset("h200-x2")
    with pytest.raises(UsageError, match="valid strategies"):
        normalize_strategy("zero4")
    assert normalize_strategy("FSDP") == "zero3"
    for kwargs in ({"micro_batch": 0}, {"seq_len": -1}, {"fabric": "ib"}):
        with pytest.raises(UsageError):
            predict(m, topo, (0, 1), "ddp", **kwargs)


def _scaled(topo, factor):
    links = tuple(dataclasses.replace(l, gbps=l.gbps * factor) for l in topo.links)
    return dataclasses.replace(topo, links=links)


@settings(max_examples=40, deadline=None)
@given(strategy=st.sampled_from(STRATS), preset=st.sampled_from(["hgx-h100-8", "h100-nvl-8", "h200-nvl-8",
                                                                   "pcie-l40s-8"]),
       n=st.sampled_from([2, 4, 8]), factor=st.floats(0.01, 1.0), model=st.sampled_from(["tiny", "llama3.2-1b"]))
def test_slower_links_never_faster_steps(strategy, preset, n, factor, model):
    m = load_model(model)
    topo = load_preset(preset)
    gpus = topo.best_subset(n)
    fast = predict(m, topo, gpus, strategy)
    slow = predict(m, _scaled(topo, factor), gpus, strategy, shard_group_size=fast.shard_group_size)
    assert slow.step_time_s >= fast.step_time_s * (1 - 1e-12)


@settings(max_examples=40, deadline=None)
@given(strategy=st.sampled_from(STRATS), preset=st.sampled_from(["h100-nvl-8", "h200-nvl-8"]),
       data=st.data(), model=st.sampled_from(["tiny", "llama3.2-1b", "llama3.1-8b"]))
def test_inside_an_island_never_slower_than_spanning(strategy, preset, data, model):
    topo = load_preset(preset)
    island = data.draw(st.sampled_from(topo.islands()))
    k = data.draw(st.integers(2, len(island)))
    inside = island[:k]
    outside = tuple(data.draw(st.permutations([g for g in topo.indices if g not in island]))[: k - 1])
    spanning = (island[0],) + outside
    m = load_model(model)
    near = predict(m, topo, inside, strategy)
    # the same layout on both placements (hsdp's default group would differ: one per island)
    far = predict(m, topo, spanning, strategy, shard_group_size=near.shard_group_size)
    assert near.step_time_s <= far.step_time_s


@settings(max_examples=40, deadline=None)
@given(strategy=st.sampled_from(STRATS), preset=st.sampled_from(["hgx-h200-8", "h100-nvl-8", "h200-x2",
                                                                   "dgx-a100-8"]),
       n=st.sampled_from([2, 4, 8]), model=st.sampled_from(["tiny", "llama3.2-1b"]))
def test_pcie_never_faster_than_nvlink(strategy, preset, n, model):
    topo = load_preset(preset)
    gpus = topo.best_subset(min(n, topo.num_gpus))
    m = load_model(model)
    assert (predict(m, topo, gpus, strategy, fabric="pcie").step_time_s
            >= predict(m, topo, gpus, strategy).step_time_s)


# --- predict CLI ---------------------------------------------------------------------------------
def test_predict_json_keys(capsys):
    assert main(["predict", "--model", "llama3.2-1b", "--topology", "h200-x2", "--num-gpus", "2",
                 "--strategy", "zero2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"model", "step_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "time", "memory", "fits"} <= set(out)
    assert {"name", "params"} <= set(out["model"])
    assert {"compute_s", "comm_s", "exposed_comm_s", "collectives"} <= set(out["time"])
    assert {"peak_bytes", "params_bytes", "grads_bytes", "optimizer_bytes", "activations_bytes"} <= set(out["memory"])


def test_predict_table_renders(capsys):
    assert main(["predict", "--model", "tiny", "--topology", "h100-nvl-8", "--gpus", "0-3",
                 "--strategy", "hsdp", "--fabric", "pcie"]) == 0
    out = capsys.readouterr().out
    assert "Step time" in out and "Memory per GPU" in out and "fits" in out


@pytest.mark.parametrize("extra", [["--micro-batch", "0"], ["--seq-len", "-5"], ["--strategy", "zero9"],
                                   ["--num-gpus", "3"], ["--gpus", "0,7"]])
def test_predict_bad_input_exits_2(extra, capsys):
    args = ["predict", "--model", "tiny", "--topology", "h200-x2", "--strategy", "ddp"]
    if not any(a in ("--num-gpus", "--gpus") for a in extra):
        args += ["--num-gpus", "2"]
    args += extra
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("topowise: error:") and "Traceback" not in err
