"""Calibration fits recover known parameters from synthetic measurements (records the cost model itself
made with known parameters); the case sets; the validation summary and plot; profiles round-trip."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from topowise.calibrate.cases import (
    GPU_CALIBRATION,
    GPU_VALIDATION,
    HOST_FLOOR_TOKENS,
    Case,
    calibration_plan,
    validation_plan,
)
from topowise.calibrate.fit import (
    HOST_BOUND_FRACTION,
    UNSTEADY_SPREAD,
    CommFit,
    Observation,
    apply_comm_fits,
    fit_alpha_beta,
    fit_comm,
    fit_host,
    fit_memory,
    fit_parameters,
    fit_profile,
    fit_step_time,
    observations_from,
    predictor,
    step_spread,
)
from topowise.calibrate.launch import ENTRY, measure, rank_config
from topowise.calibrate.machine import link_class
from topowise.calibrate.validate import ValidationRow, meets_target, plot_validation, summarize
from topowise.costmodel.profile import Profile, default_profile, load_profile
from topowise.topology.model import build
from topowise.units import busbw_factor

H200 = "NVIDIA H200"


@pytest.fixture(scope="module")
def topo():
    return build("h200x2", H200, {(0, 1): "NV"}, nvlink_counts={(0, 1): 18})


def comm_records(op, link_fabric, line_gbps, eff, alpha, n=2, sizes=None):
    sizes = sizes or [2**20 * 2**k for k in range(9)]
    return [{"kind": "collective", "op": op, "bytes": s, "world_size": n, "fabric": link_fabric, "wrong": 0,
             "time_s": alpha + s * busbw_factor(op, n) / (line_gbps * eff * 1e9)} for s in sizes]


# --- communication ----------------------------------------------------------------------------
def test_alpha_beta_recovers_latency_and_fraction(topo):
    recs = (comm_records("all_reduce", "nvlink", 478.125, 0.62, 23e-6)
            + comm_records("all_gather", "pcie", 63.0, 0.41, 40e-6)
            + comm_records("broadcast", "nvlink", 478.125, 0.5, 15e-6))
    links = {f: link_class(topo, (0, 1), f) for f in ("nvlink", "pcie")}
    assert links == {"nvlink": ("NV", 478.125), "pcie": ("PCIe", 63.0)}
    fits = {(f.link, f.op): f for f in fit_comm(recs, links)}
    assert set(fits) == {("NV", "all_reduce"), ("PCIe", "all_gather"), ("NV", "broadcast")}
    for key, (eff, alpha) in {("NV", "all_reduce"): (0.62, 23e-6), ("PCIe", "all_gather"): (0.41, 40e-6),
                              ("NV", "broadcast"): (0.5, 15e-6)}.items():
        assert fits[key].efficiency == pytest.approx(eff, rel=1e-6)
        assert fits[key].latency_s == pytest.approx(alpha, rel=1e-5)
        assert fits[key].max_residual < 1e-9
    profile = apply_comm_fits(default_profile(), list(fits.values()), "test")
    assert profile.comm("PCIe", "all_gather") == pytest.approx((0.41, 40e-6), rel=1e-4)
    assert profile.sources["comm_efficiency.PCIe/all_gather"].startswith("calibrated (test)")
    # an op not measured keeps its default and its source
    assert profile.comm("PCIe", "reduce_scatter") == default_profile().comm("PCIe", "reduce_scatter")


def test_alpha_beta_with_noise_stays_close_and_skips_wrong_results(topo):
    recs = comm_records("reduce_scatter", "nvlink", 478.125, 0.55, 30e-6)
    for k, r in enumerate(recs):
        r["time_s"] *= 1 + (0.02 if k % 2 else -0.02)
    bad = dict(recs[-1], time_s=recs[-1]["time_s"] * 10, wrong=12)  # a wrong result must not count
    fits = fit_comm(recs + [bad], {"nvlink": ("NV", 478.125)})
    assert len(fits) == 1 and fits[0].points == len(recs)
    assert fits[0].efficiency == pytest.approx(0.55, rel=0.05)
    assert fits[0].latency_s == pytest.approx(30e-6, rel=0.3)


def test_alpha_beta_is_the_weighted_least_squares_line():
    # sum(((alpha + beta x - t) / t)^2) is least where its gradient is zero: the 2x2 normal equations
    pts = [(x, 3e-6 + 1.7 * x * (1 + 0.03 * (-1) ** k)) for k, x in enumerate((1e-5, 4e-5, 2e-4, 1e-3, 5e-3))]
    w = [1 / t**2 for _, t in pts]
    sw, swx = sum(w), sum(wi * x for wi, (x, _) in zip(w, pts))
    swxx = sum(wi * x * x for wi, (x, _) in zip(w, pts))
    swt, swxt = sum(wi * t for wi, (_, t) in zip(w, pts)), sum(wi * x * t for wi, (x, t) in zip(w, pts))
    det = sw * swxx - swx * swx
    alpha, beta = fit_alpha_beta(pts)
    assert alpha == pytest.approx((swxx * swt - swx * swxt) / det, rel=1e-9)
    assert beta == pytest.approx((sw * swxt - swx * swt) / det, rel=1e-9)


def test_alpha_beta_without_visible_latency_is_bandwidth_only():
    alpha, beta = fit_alpha_beta([(x, 2.0 * x) for x in (1.0, 2.0, 4.0)])
    assert alpha == 0.0 and beta == pytest.approx(2.0)


# --- step time: compute efficiency and overlap --------------------------------------------------
TRUE = {"compute_efficiency": 0.57, "overlap": {"ddp": 0.6, "zero1": 0.6, "zero2": 0.85, "zero3": 0.75, "hsdp": 0.8}}


def synthetic_train(topo, cases, truth: Profile):
    predict_one = predictor(topo)
    out = []
    for model, strategy, mb, seq, fabric in cases:
        o = Observation(model, strategy, mb, seq, fabric, False, 2, None, 1.0, None, None)
        p = predict_one(truth, o)
        out.append({"kind": "train", "status": "ok", "model": model, "strategy": strategy, "micro_batch": mb,
                    "seq_len": seq, "fabric": fabric, "world_size": 2, "step_time_s": p.step_time_s,
                    "peak_memory_bytes": p.memory.allocated_bytes, "reserved_bytes": None})
    return out


CAL_CASES = [(c.model, c.strategy, c.micro_batch, c.seq_len, c.fabric) for c in GPU_CALIBRATION.cases]


def test_step_time_fit_recovers_efficiency_and_overlaps(topo):
    truth = replace(default_profile(), compute_efficiency=TRUE["compute_efficiency"], overlap=dict(TRUE["overlap"]),
                    hbm_efficiency=0.62)
    obs = observations_from(synthetic_train(topo, CAL_CASES, truth))
    start = default_profile()
    fitted, fit = fit_step_time(start, obs, predictor(topo), "synthetic")
    assert fitted.compute_efficiency == pytest.approx(0.57, abs=2e-3)
    assert fitted.hbm_efficiency == pytest.approx(0.62, abs=1e-2)
    for s in ("ddp", "zero1", "zero2", "zero3"):  # every strategy calibration ran
        assert fitted.overlap[s] == pytest.approx(TRUE["overlap"][s], abs=1e-2), s
    assert fitted.overlap["hsdp"] == fitted.overlap["zero3"]  # not run: inherits zero3's
    assert "zero3" in fitted.sources["overlap.hsdp"]
    assert fit.rms_error < 1e-4
    assert fitted.sources["compute_efficiency"].startswith("calibrated (synthetic)")


def test_step_spread_is_interquartile_range_over_median():
    assert step_spread([0.100, 0.100, 0.100, 0.100, 0.100]) == 0.0
    # sorted 0.10, 0.11, 0.12, 0.13, 0.15: quartiles at indices 1 and 3, median 0.12
    assert step_spread([0.15, 0.10, 0.13, 0.11, 0.12]) == pytest.approx((0.13 - 0.11) / 0.12)
    assert step_spread([0.1, 0.5]) == 0.0  # too few steps to judge
    assert step_spread(None) == 0.0


def test_host_stalled_run_is_left_out_of_the_step_time_fit(topo):
    truth = replace(default_profile(), compute_efficiency=TRUE["compute_efficiency"], overlap=dict(TRUE["overlap"]),
                    hbm_efficiency=0.62)
    recs = synthetic_train(topo, CAL_CASES, truth)
    for r in recs:  # steady runs: identical timed steps
        r["step_times_s"] = [r["step_time_s"]] * 5
    # one zero3 run 45% slower than the model and unsteady (as the small-block zero3 runs on the H200)
    stalled = next(r for r in recs if r["strategy"] == "zero3")
    t = stalled["step_time_s"] * 1.45
    stalled.update(step_time_s=t, step_times_s=[0.95 * t, 1.0 * t, t, 1.07 * t, 1.11 * t])
    obs = observations_from(recs)
    assert [o.step_spread > UNSTEADY_SPREAD for o in obs].count(True) == 1
    fitted, fit = fit_step_time(default_profile(), obs, predictor(topo), "synthetic")
    assert fit.observations == len(recs) - 1
    assert fitted.compute_efficiency == pytest.approx(0.57, abs=2e-3)
    assert fitted.overlap["zero3"] == pytest.approx(TRUE["overlap"]["zero3"], abs=1e-2)
    assert "(not steady)" in fitted.sources["compute_efficiency"]
    assert stalled["model"] in fitted.sources["overlap.zero3"]
    # kept in, the same run drags the fit away from the truth (what the H200 records showed)
    steady_again = [replace(o, step_spread=0.0) for o in obs]
    dragged, dragged_fit = fit_step_time(default_profile(), steady_again, predictor(topo), "synthetic")
    assert dragged_fit.rms_error > 0.05 and fit.rms_error < 1e-4
    moved = {"compute_efficiency": abs(dragged.compute_efficiency - 0.57) > 5e-3,
             "hbm_efficiency": abs(dragged.hbm_efficiency - 0.62) > 1e-2,
             **{f"overlap.{k}": abs(dragged.overlap[k] - v) > 1e-2 for k, v in TRUE["overlap"].items()
                if k != "hsdp"}}
    assert any(moved.values()), moved


def test_overlap_with_nothing_to_hide_is_reported_not_invented(topo):
    truth = replace(default_profile(), compute_efficiency=0.6)
    obs = observations_from(synthetic_train(topo, [("qwen2.5-0.5b", "ddp", 1, 4096, "nvlink"),
                                                       ("llama3.2-1b", "ddp", 1, 4096, "nvlink")], truth))
    # a single-GPU topology: no collectives, so overlap cannot show in any step time
    one = build("h200x1", H200, {})
    obs1 = [replace(o, world_size=1) for o in obs]
    one_truth = [predictor(one)(truth, o).step_time_s for o in obs1]
    obs1 = [replace(o, step_time_s=t) for o, t in zip(obs1, one_truth)]
    fitted, fit = fit_step_time(default_profile(), obs1, predictor(one), "single")
    assert "overlap.ddp" in fit.unidentified
    assert fitted.overlap["ddp"] == default_profile().overlap["ddp"]
    assert "not identified" in fitted.sources["overlap.ddp"]
    assert fitted.compute_efficiency == pytest.approx(0.6, abs=1e-3)


def test_fit_parameters_respects_bounds(topo):
    truth = replace(default_profile(), compute_efficiency=1.0)
    recs = synthetic_train(topo, [("llama3.2-1b", "ddp", 1, 4096, "nvlink")], truth)
    recs[0]["step_time_s"] *= 0.3  # faster than any efficiency <= 1 can explain
    obs = observations_from(recs)
    fit = fit_parameters(default_profile(), ["compute_efficiency"], obs,
                             lambda p, o: predictor(topo)(p, o).step_time_s, lambda o: o.step_time_s)
    assert fit.values["compute_efficiency"] == pytest.approx(1.0)


# --- memory ----------------------------------------------------------------------------------------
def test_memory_fit_recovers_activation_scale_and_slack(topo):
    truth = replace(default_profile(), activation_scale=1.13)
    recs = synthetic_train(topo, CAL_CASES, truth)
    for r in recs:
        r["reserved_bytes"] = r["peak_memory_bytes"] * 1.04
    fitted, fit = fit_memory(default_profile(), observations_from(recs), predictor(topo), "synthetic")
    assert fitted.activation_scale == pytest.approx(1.13, abs=1e-3)
    assert fitted.allocator_slack == pytest.approx(0.04, abs=1e-4)
    assert fit.max_error < 1e-4


def test_memory_fit_without_allocator_statistics_keeps_defaults(topo):
    recs = synthetic_train(topo, CAL_CASES[:2], default_profile())
    for r in recs:
        r["peak_memory_bytes"] = None
    fitted, fit = fit_memory(default_profile(), observations_from(recs), predictor(topo), "cpu")
    assert fit is None and fitted.activation_scale == 1.0
    assert "not calibrated" in fitted.sources["activation_scale"]


def test_fit_profile_end_to_end_from_records(topo):
    truth = replace(default_profile(), compute_efficiency=0.52, overlap=dict(TRUE["overlap"]), activation_scale=0.97)
    truth = apply_comm_fits(truth, [CommFit("NV", "all_reduce", 0.66, 25e-6, 478.125, 9, 1, 2, 0.0)], "t")
    recs = comm_records("all_reduce", "nvlink", 478.125, 0.66, 25e-6) + synthetic_train(topo, CAL_CASES, truth)
    recs.append({"kind": "matmul", "flops_per_s": 790e12, "n": 8192})
    profile, report = fit_profile(recs, topo, "device=cuda; name=NVIDIA H200", where="t")
    assert profile.comm("NV", "all_reduce")[0] == pytest.approx(0.66, rel=1e-4)
    assert profile.compute_efficiency == pytest.approx(0.52, abs=3e-3)
    assert profile.activation_scale == pytest.approx(0.97, abs=2e-3)
    assert profile.peak_flops == 0.0  # a GPU keeps its datasheet peak; the matmul rate is in the source
    assert "790 TFLOP/s" in profile.sources["peak_flops"]
    assert report["runs"] == len(CAL_CASES)
    # every fitted value says what it was fitted from
    for name in ("compute_efficiency", "overlap.ddp", "overlap.zero3", "activation_scale",
                 "comm_efficiency.NV/all_reduce", "latency_s.NV/all_reduce"):
        assert profile.sources[name].startswith("calibrated"), name


# --- the host, and the memory-bound passes timed alone ------------------------------------------------
PHASES = ("forward", "backward", "optimizer")


def host_truth(scale=1.0):
    """Host seconds per block: forward 3 ms, backward 4 ms, optimizer 0.5 ms, more for later strategies."""
    return {f"{s}/{p}": t * k * scale for k, s in zip((1.0, 1.1, 1.2, 1.3), ("ddp", "zero1", "zero2", "zero3"))
            for p, t in zip(PHASES, (3e-3, 4e-3, 0.5e-3))}


def test_host_fit_recovers_host_seconds_per_block_from_host_bound_runs(topo):
    from topowise.costmodel.host_ops import extra_ops, optimizer_scale, per_op_s
    from topowise.models.spec import load_model

    host = host_truth()
    truth = replace(default_profile(), host_s_per_layer=host)
    recs = synthetic_train(topo, CAL_CASES, truth)
    layers = lambda name: load_model(name).num_layers
    for r in recs:  # what bench train's host phase times are where the GPU keeps up: the host's own cost,
        # qwen2.5's blocks (q, k, v biases) dispatching a few operators and holding one tensor more than the
        # reference block
        spec, autocast = load_model(r["model"]), r["strategy"] in ("ddp", "zero1")
        r["host_phase_s"] = {p: (host[f"{r['strategy']}/{p}"] * (optimizer_scale(spec) if p == "optimizer" else 1)
                                 + extra_ops(spec, autocast, p) * per_op_s(host[f"ddp/{p}"], p)) * spec.num_layers
                             for p in PHASES}
    start = replace(default_profile(), host_s_per_layer={})
    obs = observations_from(recs)
    fitted, used = fit_host(start, obs, predictor(topo), layers, "synthetic")
    assert fitted.host_s_per_layer == pytest.approx(host)
    # every floor run (128 tokens) is host-bound; llama3.2-1b at 8192 tokens is not, so it is not used
    assert {(o.model, o.strategy) for o in used if o.seq_len == HOST_FLOOR_TOKENS} == {
        (m, s) for m in ("qwen2.5-0.5b", "llama3.2-1b") for s in ("ddp", "zero1", "zero2", "zero3")}
    assert not [o for o in used if o.model == "llama3.2-1b" and o.seq_len == 8192]
    assert "host-bound runs" in fitted.sources["host_s_per_layer.zero3/backward"]
    # a GPU-bound run's host times include waiting for the GPU: they must not be used
    assert all(predictor(topo)(replace(start), o).step_time_s < HOST_BOUND_FRACTION * o.step_time_s
               for o in used)


def test_measured_passes_set_hbm_efficiency_and_the_fit_finds_activation_traffic(topo):
    from topowise import hardware

    truth = replace(default_profile(), compute_efficiency=0.55, hbm_efficiency=0.7, activation_traffic=6.0,
                    overlap=dict(TRUE["overlap"]), host_s_per_layer={})
    sheet = hardware.hbm_bytes_per_s(H200)
    recs = synthetic_train(topo, CAL_CASES, truth) + [
        {"kind": "hbm_pass", "pass": "fused_adamw", "bytes_per_s": 0.68 * sheet},
        {"kind": "hbm_pass", "pass": "cross_entropy", "bytes_per_s": 0.72 * sheet}]
    start = replace(default_profile(), host_s_per_layer={}, activation_traffic=1.0, compute_efficiency=0.5)
    profile, report = fit_profile(recs, topo, "device=cuda; name=NVIDIA H200", where="t", base=start)
    assert profile.hbm_efficiency == pytest.approx(0.70, abs=1e-4)  # measured, not fitted
    assert "fused_adamw" in profile.sources["hbm_efficiency"] and "hbm_efficiency" not in report["step_time"]["values"]
    assert profile.activation_traffic == pytest.approx(6.0, rel=1e-2)
    assert profile.compute_efficiency == pytest.approx(0.55, abs=2e-3)


def test_validation_summary_splits_gpu_bound_and_host_bound_cases():
    gpu = row("ddp", 1.02, 1.0)
    host = replace(row("zero3", 1.0, 1.25), breakdown={"host_wait_s": 0.3})
    s = summarize([gpu, host])
    assert s["by_bound"]["gpu"] == {"cases": 1, "mean_abs_error": pytest.approx(0.02),
                                    "max_abs_error": pytest.approx(0.02)}
    assert s["by_bound"]["host"]["cases"] == 1 and s["by_bound"]["host"]["max_abs_error"] == pytest.approx(0.2)


# --- the case sets ---------------------------------------------------------------------------------
def test_a_case_on_gpus_is_a_run():
    from topowise.models.spec import load_model

    spec = load_model("llama3.2-1b")
    run = Case("llama3.2-1b", "zero3", 2, 2048, "pcie", True).run(spec, [0, 1])
    assert (run.model, run.gpus, run.strategy, run.micro_batch, run.seq_len) == (spec, (0, 1), "zero3", 2, 2048)
    assert run.fabric == "pcie" and run.activation_checkpointing and run.shard_group_size is None
    assert Case("llama3.2-1b", "hsdp", 1, 4096).run(spec, range(4), shard_group_size=2).shard_size == 2


def test_the_rank_entry_names_rank_main():
    import importlib

    module, _, func = ENTRY.partition(":")
    assert module == "topowise.calibrate.rank" and func == "rank_main"
    if importlib.util.find_spec("torch") is not None:  # rank.py imports torch
        assert callable(getattr(importlib.import_module(module), func))


def test_validation_cases_are_not_calibration_cases():
    for dev in ("cuda", "cpu"):
        used = {c.key for c in calibration_plan(dev).cases}
        assert not used & {c.key for c in validation_plan(dev).cases}


def test_gpu_validation_set_meets_the_target_shape():
    cases = GPU_VALIDATION.cases
    assert len(cases) >= 16
    assert {c.strategy for c in cases} >= {"ddp", "zero1", "zero2", "zero3", "hsdp"}
    assert {c.fabric for c in cases} == {"nvlink", "pcie"}
    assert len({c.model for c in cases}) >= 2 and len({c.micro_batch for c in cases}) >= 2


def test_rank_config_groups_strategies_per_shape(tmp_path):
    plan = GPU_CALIBRATION
    cfg = rank_config(plan, "pcie", [c for c in plan.cases if c.fabric == "pcie"], 2, tmp_path, "nccl", 600)
    assert [(t["model"], t["strategies"]) for t in cfg["train"]] == [
        ("qwen2.5-0.5b", "ddp"), ("qwen2.5-0.5b", "zero3"), ("llama3.2-1b", "ddp"), ("llama3.2-1b", "zero1"),
        ("llama3.2-1b", "zero2"), ("llama3.2-1b", "zero3")]
    assert all(t["fabric"] == "pcie" and t["out"].endswith("train.jsonl") for t in cfg["train"])
    assert cfg["comm"]["fabric"] == "pcie" and cfg["comm"]["sizes"][0] == 2**20 and cfg["comm"]["sizes"][-1] == 2**30


# --- validation summary ------------------------------------------------------------------------------
def row(strategy, pred, meas, fabric="nvlink", mem=(1.0, 1.0)):
    return ValidationRow(Case("m", strategy, 1, 4096, fabric), "ok", meas, pred, mem[1], mem[0], None, None, 2)


def test_summary_errors_and_ranking():
    rows = [row("ddp", 1.05, 1.0), row("zero3", 0.9, 1.0, mem=(1.1, 1.0)), row("zero2", 0.95, 0.96),
            row("ddp", 2.0, 2.0, "pcie"), row("zero3", 2.5, 2.2, "pcie")]
    s = summarize(rows)
    assert s["step_time"]["max_abs_error"] == pytest.approx(0.13636, rel=1e-3)
    assert s["peak_memory"]["max_abs_error"] == pytest.approx(0.1)
    groups = {g["group"]["fabric"]: g for g in s["ranking"]}
    # nvlink: zero3 predicted first, zero2 measured fastest (0.96); zero3 at 1.0 is 4.2% slower: a miss
    assert groups["nvlink"]["predicted_first"] == "zero3" and groups["nvlink"]["measured_fastest"] == "zero2"
    assert not groups["nvlink"]["ok"]
    assert groups["pcie"]["ok"] and s["ranking_ok"] is False
    target = meets_target(s)
    assert target["step max <= 10%"] is False and target["cases >= 16"] is False


def test_summary_names_unsteady_cases_but_still_counts_them():
    steady, stalled = row("zero2", 1.0, 1.0), replace(row("zero3", 1.0, 1.6), step_spread=0.08)
    s = summarize([steady, stalled])
    assert [u["case"] for u in s["unsteady"]] == ["m zero3 mb1 seq4096 nvlink"]
    assert s["unsteady"][0]["step_spread"] == 0.08
    assert s["step_time"]["max_abs_error"] == pytest.approx(0.375)  # the target still sees it
    assert stalled.to_record("fp")["measured"]["step_spread"] == 0.08


def test_scatter_plot_is_written(tmp_path):
    rows = [row("ddp", 1.05, 1.0, mem=(1.1e9, 1e9)), row("zero3", 0.9, 1.0, "pcie", mem=(2e9, 2.1e9))]
    path = plot_validation(rows, str(tmp_path / "v.png"), summarize(rows))
    assert (tmp_path / "v.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.endswith("v.png")


# --- profiles --------------------------------------------------------------------------------------
def test_calibrated_profile_round_trips_through_json(tmp_path, topo):
    truth = replace(default_profile(), compute_efficiency=0.61, activation_scale=1.02, peak_flops=1.5e11,
                    fingerprint="device=cuda; name=NVIDIA H200; count=2; driver=1; nccl=2; torch=3")
    truth = apply_comm_fits(truth, [CommFit("PCIe", "broadcast", 0.4, 3e-5, 63.0, 9, 1, 2, 0.0)], "t")
    path = tmp_path / "p.json"
    path.write_text(truth.to_json())
    back = load_profile(path)
    assert back == truth
    assert json.loads(path.read_text())["format"] == "topowise.profile"


# --- fit recovery through the CLI: records the model made, re-fitted and re-validated (no GPU needed) ---
def test_calibrate_from_records_recovers_the_profile_that_made_them(tmp_path, topo):
    from topowise.cli.main import main

    truth = replace(default_profile(), compute_efficiency=0.58, hbm_efficiency=0.7, overlap=dict(TRUE["overlap"]),
                    activation_scale=1.05)
    folder = tmp_path / "h200-records"
    folder.mkdir()
    fp = "device=cuda; name=NVIDIA H200; count=2; driver=580; nccl=2.28.3; torch=2.11.0"
    (folder / "meta.json").write_text(json.dumps({"fingerprint": fp, "topology": topo.to_dict(), "device": "cuda",
                                                  "nproc": 2, "started": "2026-11-30T02:00:00Z"}))
    recs = (comm_records("all_reduce", "nvlink", 478.125, 0.69, 20e-6)
            + comm_records("all_reduce", "pcie", 63.0, 0.44, 30e-6))
    with open(folder / "collectives.jsonl", "w") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in recs)
    truth = apply_comm_fits(truth, [CommFit("NV", "all_reduce", 0.69, 20e-6, 478.125, 9, 1, 2, 0),
                                        CommFit("PCIe", "all_reduce", 0.44, 30e-6, 63.0, 9, 1, 2, 0)], "t")
    with open(folder / "train.jsonl", "w") as fh:
        fh.writelines(json.dumps(dict(r, reserved_bytes=r["peak_memory_bytes"] * 1.02)) + "\n"
                      for r in synthetic_train(topo, CAL_CASES, truth))
    out = tmp_path / "h200.json"
    assert main(["calibrate", "--from-records", str(folder), "--out", str(out), "--no-cache", "--json"]) == 0
    profile = load_profile(out)
    assert profile.fingerprint == fp
    assert profile.compute_efficiency == pytest.approx(0.58, abs=5e-3)
    assert profile.activation_scale == pytest.approx(1.05, abs=5e-3)
    assert profile.allocator_slack == pytest.approx(0.02, abs=1e-3)
    # validation cases measured "elsewhere", re-evaluated here against the records' topology
    measured = tmp_path / "val-records"
    measured.mkdir()
    (measured / "meta.json").write_text((folder / "meta.json").read_text())
    val_cases = [(c.model, c.strategy, c.micro_batch, c.seq_len, c.fabric) for c in GPU_VALIDATION.cases
                 if c.strategy != "hsdp"]
    with open(measured / "train.jsonl", "w") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in synthetic_train(topo, val_cases, truth))
    assert main(["validate", "--profile", str(out), "--measured", str(measured / "train.jsonl"),
                 "--out", str(tmp_path / "v.jsonl"), "--no-plot", "--json"]) == 0
    rows = [json.loads(l) for l in (tmp_path / "v.jsonl").read_text().splitlines()]
    assert len(rows) == len(val_cases)
    assert max(abs(r["step_time_error"]) for r in rows) < 0.01  # the model itself made these numbers
    assert max(abs(r["peak_memory_error"]) for r in rows) < 0.01
    # a profile of another GPU is refused for these records unless forced
    other = tmp_path / "h100.json"
    other.write_text(replace(profile, fingerprint=fp.replace("NVIDIA H200", "NVIDIA H100 80GB HBM3")).to_json())
    assert main(["validate", "--profile", str(other), "--measured", str(measured / "train.jsonl"),
                 "--out", str(tmp_path / "w.jsonl"), "--no-plot"]) == 2
    assert main(["validate", "--profile", str(other), "--measured", str(measured / "train.jsonl"),
                 "--out", str(tmp_path / "w.jsonl"), "--no-plot", "--json", "--force-profile"]) == 0


def test_a_failed_fabric_does_not_stop_the_next(tmp_path, monkeypatch):
    import topowise.measure.launcher as launcher

    calls = []

    def fake_launch(entry, config, *, nproc, env=None, timeout_s=None, heartbeat=None, stderr_path=None):
        calls.append((config["fabric"], dict(env or {})))
        return 124 if config["fabric"] == "nvlink" else 0

    monkeypatch.setattr(launcher, "launch", fake_launch)
    problems = measure(GPU_CALIBRATION, 2, tmp_path, timeout_s=30)
    assert [f for f, _ in calls] == ["nvlink", "pcie"]
    assert "NCCL_P2P_DISABLE" not in calls[0][1] and calls[1][1]["NCCL_P2P_DISABLE"] == "1"
    assert len(problems) == 1 and "nvlink" in problems[0] and "no progress for 30 s" in problems[0]


def test_comm_fit_uses_sizes_from_the_plan_minimum(topo):
    small = comm_records("all_reduce", "nvlink", 478.125, 0.30, 5e-6, sizes=[2**20, 2**21, 2**22])
    large = comm_records("all_reduce", "nvlink", 478.125, 0.65, 25e-6, sizes=[2**k for k in range(23, 31)])
    fit = fit_comm(small + large, {"nvlink": ("NV", 478.125)}, min_bytes=GPU_CALIBRATION.fit_min_bytes)
    assert fit[0].points == len(large) and fit[0].efficiency == pytest.approx(0.65, rel=1e-6)
    assert fit_comm(small + large, {"nvlink": ("NV", 478.125)})[0].points == len(small) + len(large)




# --- replay of a config.json model's records: the record's own shape, else its path -----------------------
# big enough per block that the GPU, not the host, sets the step: the key/value heads show in the time
SMALL_LLAMA = {"model_type": "llama", "vocab_size": 32000, "hidden_size": 4096, "num_hidden_layers": 8,
               "num_attention_heads": 32, "intermediate_size": 11008, "max_position_embeddings": 4096}


def test_configs_sharing_a_folder_replay_each_with_its_own_shape(tmp_path, capsys):
    from topowise.cli.main import main
    from topowise.measure import train
    from topowise.models.spec import load_model
    from topowise.run import Run

    folder = tmp_path / "models"
    folder.mkdir()
    configs = {"gqa": dict(SMALL_LLAMA, num_key_value_heads=8), "mha": SMALL_LLAMA}  # grouped-query, and not
    for stem, cfg in configs.items():
        (folder / f"{stem}.json").write_text(json.dumps(cfg))
    profile = tmp_path / "profile.json"
    profile.write_text(default_profile().to_json())
    flags = ["--topology", "h200-x2", "--profile", str(profile), "--force-profile"]

    def predicted_by_predict(path):
        assert main(["predict", "--model", path, "--gpus", "0,1", "--strategy", "zero2", "--seq-len", "4096",
                     *flags, "--json"]) == 0
        return json.loads(capsys.readouterr().out)["step_time_s"]

    expected, records = {}, []
    for stem in configs:
        path = str(folder / f"{stem}.json")
        expected[load_model(path).name] = predicted_by_predict(path)
        case = train.TrainCase(Run(load_model(path), (0, 1), "zero2", seq_len=4096), steps=6, warmup=3)
        records.append(train.make_record(case, {"status": "ok", "step_time_s": 0.1, "step_times_s": [0.1] * 6,
                                                "peak_memory_bytes": 2**30, "reserved_bytes": 2**30,
                                                "gpu_name": "NVIDIA H200"}))
    assert set(expected) == {"models/gqa", "models/mha"} and expected["models/gqa"] != expected["models/mha"]
    assert records[0]["model_source"] == str((folder / "gqa.json").resolve())
    assert records[0]["model_spec"]["num_kv_heads"] == 8 and records[1]["model_spec"]["num_kv_heads"] == 32

    def replay(recs, name):
        measured = tmp_path / f"{name}.jsonl"
        measured.write_text("".join(json.dumps(r) + "\n" for r in recs))
        assert main(["validate", "--measured", str(measured), *flags, "--out", str(tmp_path / f"{name}-v.jsonl"),
                     "--no-plot", "--json"]) == 0
        return {c["model"]: c["predicted"]["step_time_s"] for c in json.loads(capsys.readouterr().out)["cases"]}

    # without the shape in the record, the path it names is read again
    assert replay([{k: v for k, v in r.items() if k != "model_spec"} for r in records], "by-path") == expected
    # with it, the config may be gone
    for stem in configs:
        (folder / f"{stem}.json").unlink()
    assert replay(records, "by-spec") == expected


def test_a_record_without_the_model_fields_replays_its_preset(topo):
    from topowise.calibrate.validate import compare
    from topowise.costmodel.predict import predict
    from topowise.measure.records import read_records
    from topowise.models.spec import load_model
    from topowise.run import Run
    from topowise.topology.presets import load_preset

    h200x2 = load_preset("h200-x2")
    old = read_records("tests/data/records/2026-11-30-h200x2/run16/validate-records/train.jsonl", kind="train")[0]
    assert "model_spec" not in old and "model_source" not in old
    (row,) = compare([old], default_profile(), h200x2)
    run = Run(load_model(old["model"]), (0, 1), old["strategy"], micro_batch=old["micro_batch"],
              seq_len=old["seq_len"])
    assert row.predicted_step_s == predict(run, h200x2, default_profile()).step_time_s
    # a new record of the same run carries the same shape, and replays the same
    new = dict(old, model_source=old["model"], model_spec=load_model(old["model"]).to_dict())
    assert compare([new], default_profile(), h200x2)[0].predicted_step_s == row.predicted_step_s


def test_committed_records_replay_without_the_paths_of_the_machine_that_measured_them():
    """A record of a config.json keeps the file's path where it ran (model_source, e.g. the GPU machine's checkout);
    every such committed record also carries the shape it trained (model_spec), which replays read first, so no
    replay opens a path of another machine."""
    from pathlib import Path

    from topowise.calibrate.fit import model_resolver, observation_from
    from topowise.measure.records import read_records

    results = Path(__file__).parents[2] / "tests" / "data" / "records"
    with_path = [(path, r) for path in sorted(results.rglob("*.jsonl")) for r in read_records(str(path), kind="train")
                 if r.get("model_source") and r.get("model_source") != r.get("model")]
    assert len(with_path) > 150  # 183 in the fixture set
    assert [str(p) for p, r in with_path if r.get("model_spec") is None] == []

    def refuse(ref):
        raise AssertionError(f"a replay opened {ref}")

    model_of = model_resolver(refuse)
    for _, r in with_path:
        model_of(observation_from(r))


def test_selective_every_k_and_per_op_are_different_cases():
    """Two records of one model and shape, checkpointed per op and every 2nd block, are two cases (validate
    --measured finds each again) in two ranking groups, and their labels say which is which."""
    per_op = Case("llama3.2-1b", "ddp", 1, 8192, activation_checkpointing="selective")
    every_2 = Case("llama3.2-1b", "ddp", 1, 8192, activation_checkpointing="selective", selective_ac_option="2")
    full = Case("llama3.2-1b", "ddp", 1, 8192, activation_checkpointing=True)
    assert len({per_op.key, every_2.key, full.key}) == 3 and per_op.group != every_2.group
    assert per_op.key == Case("llama3.2-1b", "ddp", 1, 8192, activation_checkpointing="selective").key
    assert [c.label.split(" nvlink ")[1] for c in (per_op, every_2, full)] == ["AC per op", "AC every 2", "AC full"]
    assert Case("llama3.2-1b", "ddp", 1, 8192).label == "llama3.2-1b ddp mb1 seq8192 nvlink"
    # validate's table has a fabric column, and a DeepSpeed twin reads apart from PyTorch's
    assert Case("llama3.2-1b", "zero3", 1, 8192, engine="deepspeed", compile=True).words(fabric=False) == \
        "llama3.2-1b zero3 mb1 seq8192 compiled deepspeed"
