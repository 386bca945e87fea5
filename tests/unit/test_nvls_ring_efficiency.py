"""NVLink groups of more than two GPUs on an NVSwitch: the n-GPU ring's efficiency and NVLink SHARP
(comm.py), against the published 8-GPU nccl-tests figures; 2-GPU predictions exactly as calibrated."""

import copy
import dataclasses
import json

import pytest

from topowise.calibrate.fit import CommFit, apply_comm_fits, fit_comm
from topowise.costmodel import comm
from topowise.costmodel.predict import predict
from topowise.costmodel.profile import Profile, default_profile
from topowise.errors import UsageError
from topowise.models.spec import load_model
from topowise.run import Run
from topowise.topology.presets import load_preset
from topowise.units import GIB, KIB, MIB, busbw_factor

H100 = load_preset("hgx-h100-8")
H200 = load_preset("hgx-h200-8")
A100 = load_preset("dgx-a100-8")
NO_NVLS = dataclasses.replace(default_profile(), nvls_enabled=False)


def busbw(topo, n, op="all_reduce", profile=None, size=8 * GIB) -> float:
    """nccl-tests' busbw of one collective of `size` over the first n GPUs, as the model prices it."""
    profile = profile or default_profile()
    line, link = comm.group_link(topo, tuple(range(n)))
    return size * busbw_factor(op, n) / comm.collective_time(op, size, n, line, link, profile) / 1e9


def test_two_gpu_collectives_keep_the_calibrated_formula_exactly():
    p = default_profile()
    for topo in (H100, H200, A100):
        line, link = comm.group_link(topo, (0, 1))
        for op in ("all_reduce", "all_gather", "reduce_scatter", "broadcast"):
            eff, lat = p.comm("NV", op)
            for size in (KIB, MIB, GIB):
                plain = lat + size * busbw_factor(op, 2) / (line * eff * 1e9)
                assert comm.collective_time(op, size, 2, line, link, p) == plain
                assert comm.collective_time(op, size, 2, line, link, NO_NVLS) == plain


@pytest.mark.parametrize("topo,nvls,published", [
    (H100, True, 480.0),  # NVIDIA/nccl-tests issue 212: ~480 GB/s with NVLS (maintainer)
    (H100, False, 370.0),  # issue 212: ~370 with NCCL_ALGO=Ring; issue 309: 368.76 with NVLS off
    (H200, True, 475.0),  # issue 272
    (A100, True, 230.0),  # issues 149, 175: no NVLS on the A100's NVSwitch
])
def test_eight_gpu_all_reduce_meets_the_published_nccl_tests_figures(topo, nvls, published):
    profile = default_profile() if nvls else NO_NVLS
    assert busbw(topo, 8, profile=profile) == pytest.approx(published, rel=0.03)


def test_nvls_is_what_lifts_hopper_above_the_ring_and_only_for_all_reduce():
    line, link = comm.group_link(H100, range(8))
    assert link == "NV" and link.nvswitch and link.nvls
    a100_line, a100_link = comm.group_link(A100, range(8))
    assert a100_link.nvswitch and not a100_link.nvls  # NVSwitch gen 2 cannot reduce
    assert busbw(H100, 8) > busbw(H100, 8, profile=NO_NVLS) * 1.2
    for op in ("all_gather", "reduce_scatter", "broadcast"):
        assert busbw(H100, 8, op) == busbw(H100, 8, op, profile=NO_NVLS)
    assert comm.achieved_gbps("all_reduce", 8, line, link, default_profile()) > comm.achieved_gbps(
        "all_reduce", 8, line, link, NO_NVLS)


def test_small_messages_stay_on_the_ring_where_nvls_latency_is_higher():
    line, link = comm.group_link(H100, range(8))
    for size in (8 * KIB, 64 * KIB):
        assert (comm.collective_time("all_reduce", size, 8, line, link, default_profile())
                == comm.collective_time("all_reduce", size, 8, line, link, NO_NVLS))


def test_ring_scale_runs_from_the_two_gpu_calibration_to_the_published_eight():
    p = default_profile()
    line, link = comm.group_link(H100, range(8))
    scales = [comm.ring_scale("all_reduce", n, link, p) for n in range(2, 9)]
    assert scales[0] == 1.0 and scales[-1] == pytest.approx(p.nvswitch_ring_scale["all_reduce"])
    assert scales == sorted(scales)
    assert comm.ring_scale("broadcast", 8, link, p) == 1.0  # no published 8-GPU figure: as measured at 2
    assert comm.ring_scale("all_reduce", 8, "NV", p) == 1.0  # a plain class (no NVSwitch known)
    assert comm.ring_efficiency("all_gather", 64, link, p) <= 1.0


def test_a_switchless_nvlink_mesh_and_pcie_keep_the_two_gpu_efficiency():
    pcie_line, pcie = comm.group_link(H100.without_nvlink(), range(8))
    assert pcie == "PCIe" and comm.ring_scale("all_reduce", 8, pcie, default_profile()) == 1.0
    assert not comm.uses_nvls("all_reduce", 8, pcie, default_profile())


def test_link_class_reads_and_stores_as_its_plain_name():
    line, link = comm.group_link(H100, range(8))
    assert link == "NV" and {link} == {"NV"} and json.dumps(link) == '"NV"'
    assert copy.deepcopy(link).nvls  # asdict deep-copies: the capability survives
    cost = comm.CollectiveCost("all_reduce", MIB, "fp32", 8, 1, link, 1.0, 1.0, "backward")
    assert json.loads(json.dumps(cost.to_dict()))["link"] == "NV"


def test_a_ddp_step_on_eight_hopper_gpus_gets_faster_and_two_gpus_do_not_move():
    def step(n, profile):
        run = Run(model=load_model("llama3.1-8b"), gpus=tuple(range(n)), strategy="ddp")
        return predict(run, H100, profile)

    with_nvls, without = step(8, default_profile()), step(8, NO_NVLS)
    assert with_nvls.time.comm_s < without.time.comm_s
    assert with_nvls.step_time_s <= without.step_time_s
    assert step(2, default_profile()).step_time_s == step(2, NO_NVLS).step_time_s


def test_nvls_switch_round_trips_and_refuses_a_non_boolean():
    assert Profile.from_dict(NO_NVLS.to_dict()).nvls_enabled is False
    with pytest.raises(UsageError, match="nvls_enabled must be true or false"):
        Profile.from_dict({"nvls_enabled": "no"})


def synthetic_sweep(topo, n, op, profile, transport="P2P/CUMEM"):
    """bench comm records the model itself would measure over n GPUs of `topo`."""
    line, link = comm.group_link(topo, tuple(range(n)))
    return [{"kind": "collective", "op": op, "bytes": s, "world_size": n, "wrong": 0, "fabric": "nvlink",
             "transport": transport, "time_s": comm.collective_time(op, s, n, line, link, profile)}
            for s in (8 * MIB, 64 * MIB, 512 * MIB, GIB)], {"nvlink": (link, line)}


def test_calibrating_an_eight_gpu_ring_stores_its_two_gpu_equivalent():
    truth = dataclasses.replace(NO_NVLS, comm_efficiency=dict(NO_NVLS.comm_efficiency, **{"NV/all_gather": 0.5}))
    records, links = synthetic_sweep(H100, 8, "all_gather", truth)
    fitted = apply_comm_fits(default_profile(), fit_comm(records, links), "test")
    assert fitted.comm_efficiency["NV/all_gather"] == pytest.approx(0.5, rel=1e-3)


def test_an_all_reduce_nvls_carried_does_not_become_the_ring_efficiency():
    records, links = synthetic_sweep(H100, 8, "all_reduce", default_profile(), transport="P2P/CUMEM + NVLS")
    fits = fit_comm(records, links)
    assert fits and all(isinstance(f, CommFit) and f.nvls_seen for f in fits)
    fitted = apply_comm_fits(default_profile(), fits, "test")
    assert fitted.comm_efficiency["NV/all_reduce"] == default_profile().comm_efficiency["NV/all_reduce"]
    assert "NVLink SHARP" in fitted.sources["comm_efficiency.NV/all_reduce"]


def test_an_efficiency_above_the_nominal_line_is_kept_and_the_scale_stops_at_the_line():
    cpu_like = dataclasses.replace(default_profile(), comm_efficiency=dict(default_profile().comm_efficiency,
                                                                           **{"NV/all_gather": 1.7}))
    line, link = comm.group_link(H100, range(8))
    assert comm.ring_efficiency("all_gather", 2, link, cpu_like) == 1.7
    assert comm.ring_efficiency("all_gather", 8, link, cpu_like) == 1.7
    near = dataclasses.replace(default_profile(), comm_efficiency=dict(default_profile().comm_efficiency,
                                                                       **{"NV/all_gather": 0.9}))
    assert comm.ring_efficiency("all_gather", 8, link, near) == 1.0


def test_a_machine_calibrated_with_nvls_off_predicts_without_it():
    from topowise.calibrate.fit import nvls_as_run

    off = nvls_as_run(default_profile(), "0", "here")
    assert off.nvls_enabled is False and off.sources["nvls_enabled"].startswith("calibrated (here)")
    for value in (None, "1", "2"):
        assert nvls_as_run(default_profile(), value, "here") == default_profile()
