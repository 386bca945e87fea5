"""Calibration fits recover known parameters from synthetic measurements; profiles round-trip;
fingerprints refuse a profile of another machine unless forced."""

from __future__ import annotations

import json
import sys
from dataclasses import replace

import pytest

from topowise import calibrate as cal
from topowise.costmodel.comm import busbw_factor
from topowise.costmodel.profile import Profile, default_profile, load_profile
from topowise.errors import UsageError
from topowise.topology.model import build

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
    links = {f: cal.link_class(topo, (0, 1), f) for f in ("nvlink", "pcie")}
    assert links == {"nvlink": ("NV", 478.125), "pcie": ("PCIe", 63.0)}
    fits = {(f.link, f.op): f for f in cal.fit_comm(recs, links)}
    assert set(fits) == {("NV", "all_reduce"), ("PCIe", "all_gather"), ("NV", "broadcast")}
    for key, (eff, alpha) in {("NV", "all_reduce"): (0.62, 23e-6), ("PCIe", "all_gather"): (0.41, 40e-6),
                              ("NV", "broadcast"): (0.5, 15e-6)}.items():
        assert fits[key].efficiency == pytest.approx(eff, rel=1e-6)
        assert fits[key].latency_s == pytest.approx(alpha, rel=1e-5)
        assert fits[key].max_residual < 1e-9
    profile = cal.apply_comm_fits(default_profile(), list(fits.values()), "test")
    assert profile.comm("PCIe", "all_gather") == pytest.approx((0.41, 40e-6), rel=1e-4)
    assert profile.sources["comm_efficiency.PCIe/all_gather"].startswith("calibrated (test)")
    # an op not measured keeps its default and its source
    assert profile.comm("PCIe", "reduce_scatter") == default_profile().comm("PCIe", "reduce_scatter")


def test_alpha_beta_with_noise_stays_close_and_skips_wrong_results(topo):
    recs = comm_records("reduce_scatter", "nvlink", 478.125, 0.55, 30e-6)
    for k, r in enumerate(recs):
        r["time_s"] *= 1 + (0.02 if k % 2 else -0.02)
    bad = dict(recs[-1], time_s=recs[-1]["time_s"] * 10, wrong=12)  # a wrong result must not count
    fits = cal.fit_comm(recs + [bad], {"nvlink": ("NV", 478.125)})
    assert len(fits) == 1 and fits[0].points == len(recs)
    assert fits[0].efficiency == pytest.approx(0.55, rel=0.05)
    assert fits[0].latency_s == pytest.approx(30e-6, rel=0.3)


def test_alpha_beta_without_visible_latency_is_bandwidth_only():
    alpha, beta = cal.fit_alpha_beta([(x, 2.0 * x) for x in (1.0, 2.0, 4.0)])
    assert alpha == 0.0 and beta == pytest.approx(2.0)


# --- step time: compute efficiency and overlap --------------------------------------------------
TRUE = dict(compute_efficiency=0.57, overlap={"ddp": 0.6, "zero1": 0.6, "zero2": 0.85, "zero3": 0.75, "hsdp": 0.8})


def synthetic_train(topo, cases, truth: Profile):
    predict_one = cal.predictor(topo)
    out = []
    for model, strategy, mb, seq, fabric in cases:
        o = cal.Observation(model, strategy, mb, seq, fabric, False, 2, None, 1.0, None, None)
        p = predict_one(truth, o)
        out.append({"kind": "train", "status": "ok", "model": model, "strategy": strategy, "micro_batch": mb,
                    "seq_len": seq, "fabric": fabric, "world_size": 2, "step_time_s": p.step_time_s,
                    "peak_memory_bytes": p.memory.allocated_bytes, "reserved_bytes": None})
    return out


CAL_CASES = [(c.model, c.strategy, c.micro_batch, c.seq_len, c.fabric) for c in cal.GPU_CALIBRATION.cases]


def test_step_time_fit_recovers_efficiency_and_overlaps(topo):
    truth = replace(default_profile(), compute_efficiency=TRUE["compute_efficiency"], overlap=dict(TRUE["overlap"]),
                    hbm_efficiency=0.62)
    obs = cal.observations_from(synthetic_train(topo, CAL_CASES, truth))
    start = default_profile()
    fitted, fit = cal.fit_step_time(start, obs, cal.predictor(topo), "synthetic")
    assert fitted.compute_efficiency == pytest.approx(0.57, abs=2e-3)
    assert fitted.hbm_efficiency == pytest.approx(0.62, abs=1e-2)
    for s in ("ddp", "zero1", "zero2", "zero3"):  # every strategy calibration ran
        assert fitted.overlap[s] == pytest.approx(TRUE["overlap"][s], abs=1e-2), s
    assert fitted.overlap["hsdp"] == fitted.overlap["zero3"]  # not run: inherits zero3's
    assert "zero3" in fitted.sources["overlap.hsdp"]
    assert fit.rms_error < 1e-4
    assert fitted.sources["compute_efficiency"].startswith("calibrated (synthetic)")


def test_step_spread_is_interquartile_range_over_median():
    assert cal.step_spread([0.100, 0.100, 0.100, 0.100, 0.100]) == 0.0
    # sorted 0.10, 0.11, 0.12, 0.13, 0.15: quartiles at indices 1 and 3, median 0.12
    assert cal.step_spread([0.15, 0.10, 0.13, 0.11, 0.12]) == pytest.approx((0.13 - 0.11) / 0.12)
    assert cal.step_spread([0.1, 0.5]) == 0.0  # too few steps to judge
    assert cal.step_spread(None) == 0.0


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
    obs = cal.observations_from(recs)
    assert [o.step_spread > cal.UNSTEADY_SPREAD for o in obs].count(True) == 1
    fitted, fit = cal.fit_step_time(default_profile(), obs, cal.predictor(topo), "synthetic")
    assert fit.observations == len(recs) - 1
    assert fitted.compute_efficiency == pytest.approx(0.57, abs=2e-3)
    assert fitted.overlap["zero3"] == pytest.approx(TRUE["overlap"]["zero3"], abs=1e-2)
    assert "(not steady)" in fitted.sources["compute_efficiency"] and stalled["model"] in fitted.sources["overlap.zero3"]
    # kept in, the same run drags the fit away from the truth (what the H200 records showed)
    steady_again = [replace(o, step_spread=0.0) for o in obs]
    dragged, dragged_fit = cal.fit_step_time(default_profile(), steady_again, cal.predictor(topo), "synthetic")
    assert dragged_fit.rms_error > 0.05 and fit.rms_error < 1e-4
    assert abs(dragged.compute_efficiency - 0.57) > 5e-3


def test_overlap_with_nothing_to_hide_is_reported_not_invented(topo):
    truth = replace(default_profile(), compute_efficiency=0.6)
    obs = cal.observations_from(synthetic_train(topo, [("qwen2.5-0.5b", "ddp", 1, 4096, "nvlink"),
                                                       ("llama3.2-1b", "ddp", 1, 4096, "nvlink")], truth))
    # a single-GPU topology: no collectives, so overlap cannot show in any step time
    one = build("h200x1", H200, {})
    obs1 = [replace(o, world_size=1) for o in obs]
    one_truth = [cal.predictor(one)(truth, o).step_time_s for o in obs1]
    obs1 = [replace(o, step_time_s=t) for o, t in zip(obs1, one_truth)]
    fitted, fit = cal.fit_step_time(default_profile(), obs1, cal.predictor(one), "single")
    assert "overlap.ddp" in fit.unidentified
    assert fitted.overlap["ddp"] == default_profile().overlap["ddp"]
    assert "not identified" in fitted.sources["overlap.ddp"]
    assert fitted.compute_efficiency == pytest.approx(0.6, abs=1e-3)


def test_fit_parameters_respects_bounds(topo):
    truth = replace(default_profile(), compute_efficiency=1.0)
    recs = synthetic_train(topo, [("llama3.2-1b", "ddp", 1, 4096, "nvlink")], truth)
    recs[0]["step_time_s"] *= 0.3  # faster than any efficiency <= 1 can explain
    obs = cal.observations_from(recs)
    fit = cal.fit_parameters(default_profile(), ["compute_efficiency"], obs,
                             lambda p, o: cal.predictor(topo)(p, o).step_time_s, lambda o: o.step_time_s)
    assert fit.values["compute_efficiency"] == pytest.approx(1.0)


# --- memory ----------------------------------------------------------------------------------------
def test_memory_fit_recovers_activation_scale_and_slack(topo):
    truth = replace(default_profile(), activation_scale=1.13)
    recs = synthetic_train(topo, CAL_CASES, truth)
    for r in recs:
        r["reserved_bytes"] = r["peak_memory_bytes"] * 1.04
    fitted, fit = cal.fit_memory(default_profile(), cal.observations_from(recs), cal.predictor(topo), "synthetic")
    assert fitted.activation_scale == pytest.approx(1.13, abs=1e-3)
    assert fitted.allocator_slack == pytest.approx(0.04, abs=1e-4)
    assert fit.max_error < 1e-4


def test_memory_fit_without_allocator_statistics_keeps_defaults(topo):
    recs = synthetic_train(topo, CAL_CASES[:2], default_profile())
    for r in recs:
        r["peak_memory_bytes"] = None
    fitted, fit = cal.fit_memory(default_profile(), cal.observations_from(recs), cal.predictor(topo), "cpu")
    assert fit is None and fitted.activation_scale == 1.0
    assert "not calibrated" in fitted.sources["activation_scale"]


def test_fit_profile_end_to_end_from_records(topo):
    truth = replace(default_profile(), compute_efficiency=0.52, overlap=dict(TRUE["overlap"]), activation_scale=0.97)
    truth = cal.apply_comm_fits(truth, [cal.CommFit("NV", "all_reduce", 0.66, 25e-6, 478.125, 9, 1, 2, 0.0)], "t")
    recs = comm_records("all_reduce", "nvlink", 478.125, 0.66, 25e-6) + synthetic_train(topo, CAL_CASES, truth)
    recs.append({"kind": "matmul", "flops_per_s": 790e12, "n": 8192})
    profile, report = cal.fit_profile(recs, topo, "device=cuda; name=NVIDIA H200", where="t")
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
    from topowise.models.spec import load_model

    host = host_truth()
    truth = replace(default_profile(), host_s_per_layer=host)
    recs = synthetic_train(topo, CAL_CASES, truth)
    layers = lambda name: load_model(name).num_layers
    for r in recs:  # what bench train's host phase times are where the GPU keeps up: the host's own cost
        r["host_phase_s"] = {p: host[f"{r['strategy']}/{p}"] * layers(r["model"]) for p in PHASES}
    start = replace(default_profile(), host_s_per_layer={})
    obs = cal.observations_from(recs)
    fitted, used = cal.fit_host(start, obs, cal.predictor(topo), layers, "synthetic")
    assert fitted.host_s_per_layer == pytest.approx(host)
    # every floor run (128 tokens) is host-bound; llama3.2-1b at 8192 tokens is not, so it is not used
    assert {(o.model, o.strategy) for o in used if o.seq_len == cal.HOST_FLOOR_TOKENS} == {
        (m, s) for m in ("qwen2.5-0.5b", "llama3.2-1b") for s in ("ddp", "zero1", "zero2", "zero3")}
    assert not [o for o in used if o.model == "llama3.2-1b" and o.seq_len == 8192]
    assert "host-bound runs" in fitted.sources["host_s_per_layer.zero3/backward"]
    # a GPU-bound run's host times include waiting for the GPU: they must not be used
    assert all(cal.predictor(topo)(replace(start), o).step_time_s < cal.HOST_BOUND_FRACTION * o.step_time_s
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
    profile, report = cal.fit_profile(recs, topo, "device=cuda; name=NVIDIA H200", where="t", base=start)
    assert profile.hbm_efficiency == pytest.approx(0.70, abs=1e-4)  # measured, not fitted
    assert "fused_adamw" in profile.sources["hbm_efficiency"] and "hbm_efficiency" not in report["step_time"]["values"]
    assert profile.activation_traffic == pytest.approx(6.0, rel=1e-2)
    assert profile.compute_efficiency == pytest.approx(0.55, abs=2e-3)


def test_validation_summary_splits_gpu_bound_and_host_bound_cases():
    gpu = row("ddp", 1.02, 1.0)
    host = replace(row("zero3", 1.0, 1.25), breakdown={"host_wait_s": 0.3})
    s = cal.summarize([gpu, host])
    assert s["by_bound"]["gpu"] == {"cases": 1, "mean_abs_error": pytest.approx(0.02), "max_abs_error": pytest.approx(0.02)}
    assert s["by_bound"]["host"]["cases"] == 1 and s["by_bound"]["host"]["max_abs_error"] == pytest.approx(0.2)


# --- the case sets ---------------------------------------------------------------------------------
def test_validation_cases_are_not_calibration_cases():
    for dev in ("cuda", "cpu"):
        used = {c.key for c in cal.calibration_plan(dev).cases}
        assert not used & {c.key for c in cal.validation_plan(dev).cases}


def test_gpu_validation_set_meets_the_target_shape():
    cases = cal.GPU_VALIDATION.cases
    assert len(cases) >= 16
    assert {c.strategy for c in cases} >= {"ddp", "zero1", "zero2", "zero3", "hsdp"}
    assert {c.fabric for c in cases} == {"nvlink", "pcie"}
    assert len({c.model for c in cases}) >= 2 and len({c.micro_batch for c in cases}) >= 2


def test_rank_config_groups_strategies_per_shape(tmp_path):
    plan = cal.GPU_CALIBRATION
    cfg = cal.rank_config(plan, "pcie", [c for c in plan.cases if c.fabric == "pcie"], 2, tmp_path, "nccl", 600)
    assert [(t["model"], t["strategies"]) for t in cfg["train"]] == [
        ("qwen2.5-0.5b", "ddp"), ("qwen2.5-0.5b", "zero3"), ("llama3.2-1b", "ddp"), ("llama3.2-1b", "zero1"),
        ("llama3.2-1b", "zero2"), ("llama3.2-1b", "zero3")]
    assert all(t["fabric"] == "pcie" and t["out"].endswith("train.jsonl") for t in cfg["train"])
    assert cfg["comm"]["fabric"] == "pcie" and cfg["comm"]["sizes"][0] == 2**20 and cfg["comm"]["sizes"][-1] == 2**30


# --- validation summary ------------------------------------------------------------------------------
def row(strategy, pred, meas, fabric="nvlink", mem=(1.0, 1.0)):
    return cal.ValidationRow(cal.Case("m", strategy, 1, 4096, fabric), "ok", meas, pred, mem[1], mem[0], None, None, 2)


def test_summary_errors_and_ranking():
    rows = [row("ddp", 1.05, 1.0), row("zero3", 0.9, 1.0, mem=(1.1, 1.0)), row("zero2", 0.95, 0.96),
            row("ddp", 2.0, 2.0, "pcie"), row("zero3", 2.5, 2.2, "pcie")]
    s = cal.summarize(rows)
    assert s["step_time"]["max_abs_error"] == pytest.approx(0.13636, rel=1e-3)
    assert s["peak_memory"]["max_abs_error"] == pytest.approx(0.1)
    groups = {g["group"]["fabric"]: g for g in s["ranking"]}
    # nvlink: zero3 predicted first, zero2 measured fastest (0.96); zero3 at 1.0 is 4.2% slower: a miss
    assert groups["nvlink"]["predicted_first"] == "zero3" and groups["nvlink"]["measured_fastest"] == "zero2"
    assert not groups["nvlink"]["ok"]
    assert groups["pcie"]["ok"] and s["ranking_ok"] is False
    target = cal.meets_target(s)
    assert target["step max <= 10%"] is False and target["cases >= 16"] is False


def test_summary_names_unsteady_cases_but_still_counts_them():
    steady, stalled = row("zero2", 1.0, 1.0), replace(row("zero3", 1.0, 1.6), step_spread=0.08)
    s = cal.summarize([steady, stalled])
    assert [u["case"] for u in s["unsteady"]] == ["m zero3 mb1 seq4096 nvlink"]
    assert s["unsteady"][0]["step_spread"] == 0.08
    assert s["step_time"]["max_abs_error"] == pytest.approx(0.375)  # the target still sees it
    assert stalled.to_record("fp")["measured"]["step_spread"] == 0.08


def test_scatter_plot_is_written(tmp_path):
    rows = [row("ddp", 1.05, 1.0, mem=(1.1e9, 1e9)), row("zero3", 0.9, 1.0, "pcie", mem=(2e9, 2.1e9))]
    path = cal.plot_validation(rows, str(tmp_path / "v.png"), cal.summarize(rows))
    assert (tmp_path / "v.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.endswith("v.png")


# --- profiles, fingerprints, cache --------------------------------------------------------------------
def test_calibrated_profile_round_trips_through_json(tmp_path, topo):
    truth = replace(default_profile(), compute_efficiency=0.61, activation_scale=1.02, peak_flops=1.5e11,
                    fingerprint="device=cuda; name=NVIDIA H200; count=2; driver=1; nccl=2; torch=3")
    truth = cal.apply_comm_fits(truth, [cal.CommFit("PCIe", "broadcast", 0.4, 3e-5, 63.0, 9, 1, 2, 0.0)], "t")
    path = tmp_path / "p.json"
    path.write_text(truth.to_json())
    back = load_profile(path)
    assert back == truth
    assert json.loads(path.read_text())["format"] == "topowise.profile"


class FakeNvml:
    """Just what the fingerprint asks NVML."""

    class NVMLError(Exception):
        pass

    def __init__(self, name=H200, count=2, driver="580.95.05", fail=False):
        self.name, self.count, self.driver, self.fail = name, count, driver, fail

    def nvmlInit(self):
        if self.fail:
            raise self.NVMLError("Driver Not Loaded")

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetCount(self):
        return self.count

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetName(self, h):
        return self.name.encode()

    def nvmlSystemGetDriverVersion(self):
        return self.driver


def test_fingerprint_text_parses_back_and_hashes_stably():
    fp = cal.machine_fingerprint("cuda", FakeNvml())
    text = cal.fingerprint_text(fp)
    assert cal.parse_fingerprint(text) == {k: str(v) for k, v in fp.items()}
    assert cal.fingerprint_hash(text) == cal.fingerprint_hash(text) and len(cal.fingerprint_hash(text)) == 16
    assert cal.machine_fingerprint("cuda", FakeNvml(fail=True)) is None
    assert cal.machine_fingerprint("cpu")["device"] == "cpu"


def test_profile_of_another_machine_is_refused_unless_forced():
    here = cal.machine_fingerprint("cuda", FakeNvml())
    other = cal.fingerprint_text(dict(here, driver="550.54.15", count=8))
    profile = replace(default_profile(), fingerprint=other)
    with pytest.raises(UsageError) as err:
        cal.check_profile_for_machine(profile, here, "h200.json")
    msg = str(err.value)
    assert "driver: 580.95.05 here, 550.54.15 in the profile" in msg and "count: 2 here, 8" in msg
    assert "--force-profile" in msg
    cal.check_profile_for_machine(profile, here, "h200.json", force=True)  # forced: accepted
    cal.check_profile_for_machine(replace(profile, fingerprint=cal.fingerprint_text(here)), here, "x")
    cal.check_profile_for_machine(default_profile(), here, "defaults")  # the defaults are valid anywhere
    with pytest.raises(UsageError, match="--force-profile"):
        cal.check_profile_for_machine(profile, None, "h200.json")


def test_profile_of_another_gpu_is_refused_for_a_topology_unless_forced():
    profile = replace(default_profile(), fingerprint=cal.fingerprint_text(cal.machine_fingerprint("cuda", FakeNvml())))
    cal.check_profile_for_gpu(profile, H200, "p.json")
    with pytest.raises(UsageError, match="NVIDIA H100 80GB HBM3.*--force-profile"):
        cal.check_profile_for_gpu(profile, "NVIDIA H100 80GB HBM3", "p.json")
    cal.check_profile_for_gpu(profile, "NVIDIA H100 80GB HBM3", "p.json", force=True)
    cpu = replace(default_profile(), fingerprint=cal.fingerprint_text(cal.machine_fingerprint("cpu")))
    with pytest.raises(UsageError, match="calibrated on CPU "):
        cal.check_profile_for_gpu(cpu, H200, "cpu.json")
    cal.check_profile_for_gpu(cpu, cal.cpu_topology(2).gpus[0].name, "cpu.json")  # the CPU it was made on


def test_cached_profile_is_found_only_for_this_machine(tmp_path):
    env = {"XDG_CACHE_HOME": str(tmp_path)}
    assert cal.find_cached_profile(environ=env, nvml=FakeNvml()) is None  # empty cache
    fp = cal.fingerprint_text(cal.machine_fingerprint("cuda", FakeNvml()))
    path = cal.cache_path(fp, env)
    assert path.parent == tmp_path / "topowise" / "profiles"
    path.parent.mkdir(parents=True)
    path.write_text(replace(default_profile(), compute_efficiency=0.44, fingerprint=fp).to_json())
    found = cal.find_cached_profile(environ=env, nvml=FakeNvml())
    assert found and found[0].compute_efficiency == 0.44 and found[1] == path
    assert cal.find_cached_profile(H200, environ=env, nvml=FakeNvml()) is not None
    assert cal.find_cached_profile("NVIDIA H100", environ=env, nvml=FakeNvml()) is None  # another GPU's topology
    assert cal.find_cached_profile(environ=env, nvml=FakeNvml(driver="999")) is None  # another driver
    assert cal.find_cached_profile(environ=env, nvml=FakeNvml(fail=True)) is None  # no NVML


def test_cache_lookup_is_quick_and_never_imports_torch(tmp_path):
    import subprocess

    code = ("import sys, time; t = time.time(); from topowise.calibrate import find_cached_profile; "
            "r = find_cached_profile(); print(r is None, 'torch' in sys.modules, round(time.time() - t, 2))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={"XDG_CACHE_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"})
    none, torch_loaded, _seconds = out.stdout.split()
    assert none == "True" and torch_loaded == "False", out.stderr


def test_cache_dir_defaults_to_home_cache(monkeypatch):
    assert cal.cache_dir({"XDG_CACHE_HOME": "/x"}) == cal.Path("/x/topowise/profiles")
    assert str(cal.cache_dir({})).endswith(".cache/topowise/profiles")


# --- offline: re-fit recorded GPU runs, validate recorded runs (no GPU here) --------------------------
def test_refit_and_validate_recorded_gpu_runs_offline(tmp_path, topo):
    from topowise.cli.main import main

    truth = replace(default_profile(), compute_efficiency=0.58, hbm_efficiency=0.7, overlap=dict(TRUE["overlap"]),
                    activation_scale=1.05)
    folder = tmp_path / "h200-records"
    folder.mkdir()
    fp = "device=cuda; name=NVIDIA H200; count=2; driver=580; nccl=2.28.3; torch=2.11.0"
    (folder / "meta.json").write_text(json.dumps({"fingerprint": fp, "topology": topo.to_dict(), "device": "cuda",
                                                  "nproc": 2, "started": "2026-11-30T02:00:00Z"}))
    recs = comm_records("all_reduce", "nvlink", 478.125, 0.69, 20e-6) + comm_records("all_reduce", "pcie", 63.0, 0.44, 30e-6)
    with open(folder / "collectives.jsonl", "w") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in recs)
    truth = cal.apply_comm_fits(truth, [cal.CommFit("NV", "all_reduce", 0.69, 20e-6, 478.125, 9, 1, 2, 0),
                                        cal.CommFit("PCIe", "all_reduce", 0.44, 30e-6, 63.0, 9, 1, 2, 0)], "t")
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
    val_cases = [(c.model, c.strategy, c.micro_batch, c.seq_len, c.fabric) for c in cal.GPU_VALIDATION.cases
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
    problems = cal.measure(cal.GPU_CALIBRATION, 2, tmp_path, timeout_s=30)
    assert [f for f, _ in calls] == ["nvlink", "pcie"]
    assert "NCCL_P2P_DISABLE" not in calls[0][1] and calls[1][1]["NCCL_P2P_DISABLE"] == "1"
    assert len(problems) == 1 and "nvlink" in problems[0] and "no progress for 30 s" in problems[0]


def test_comm_fit_uses_sizes_from_the_plan_minimum(topo):
    small = comm_records("all_reduce", "nvlink", 478.125, 0.30, 5e-6, sizes=[2**20, 2**21, 2**22])
    large = comm_records("all_reduce", "nvlink", 478.125, 0.65, 25e-6, sizes=[2**k for k in range(23, 31)])
    fit = cal.fit_comm(small + large, {"nvlink": ("NV", 478.125)}, min_bytes=cal.GPU_CALIBRATION.fit_min_bytes)
    assert fit[0].points == len(large) and fit[0].efficiency == pytest.approx(0.65, rel=1e-6)
    assert cal.fit_comm(small + large, {"nvlink": ("NV", 478.125)})[0].points == len(small) + len(large)


def test_predict_and_plan_pick_the_cached_profile_of_this_machine(tmp_path, monkeypatch, capsys):
    from topowise.cli.main import main

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(cal, "gpu_inventory", lambda nvml=None: (H200, 2, "580.95.05"))
    fp = cal.fingerprint_text(cal.machine_fingerprint("cuda"))
    path = cal.cache_path(fp)
    path.parent.mkdir(parents=True)
    path.write_text(replace(default_profile(), compute_efficiency=0.25, fingerprint=fp).to_json())
    args = ["predict", "--model", "llama3.2-1b", "--num-gpus", "2", "--strategy", "ddp", "--json"]
    assert main(args + ["--topology", "hgx-h200-8"]) == 0
    cached = json.loads(capsys.readouterr().out)
    assert cached["profile_fingerprint"] == fp
    assert main(args + ["--topology", "hgx-h100-8"]) == 0  # another GPU model: the defaults
    assert json.loads(capsys.readouterr().out)["profile_fingerprint"] == ""
    assert main(["plan", "--model", "llama3.2-1b", "--topology", "hgx-h200-8", "--num-gpus", "2", "--json"]) == 0
    capsys.readouterr()
    # an explicit profile of another GPU is refused for a topology, unless forced
    assert main(args + ["--topology", "hgx-h100-8", "--profile", str(path)]) == 2
    assert "--force-profile" in capsys.readouterr().err
    assert main(args + ["--topology", "hgx-h100-8", "--profile", str(path), "--force-profile"]) == 0
