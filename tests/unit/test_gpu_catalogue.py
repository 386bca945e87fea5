"""The GPU catalogue as bought: names reported by NVML find their row, every row is sourced, and a power
limit prices a GPU at the clock it allows."""

import json
import re
from pathlib import Path

import pytest
from cli_run import cli_output

from topowise import hardware
from topowise.errors import UsageError
from topowise.topology.model import Topology
from topowise.topology.presets import load_preset

SOURCES = Path(__file__).resolve().parents[2] / "docs" / "sources.md"


@pytest.mark.parametrize(("reported", "row"), [
    ("NVIDIA H100 80GB HBM3", "H100"),
    ("NVIDIA H100 PCIe", "H100 PCIe"),
    ("NVIDIA H100 NVL", "H100 NVL"),
    ("NVIDIA H200", "H200"),
    ("NVIDIA H20", "H20"),
    ("NVIDIA H800", "H800"),
    ("NVIDIA A100-SXM4-80GB", "A100"),
    ("NVIDIA A100-SXM4-40GB", "A100 40GB"),
    ("NVIDIA A100-PCIE-40GB", "A100 40GB"),
    ("NVIDIA L4", "L4"),
    ("NVIDIA L40S", "L40S"),
    ("NVIDIA B200", "B200"),
    ("NVIDIA GB200", "GB200"),
    ("NVIDIA GB300", "GB300"),
])
def test_a_reported_name_finds_its_own_row(reported, row):
    assert hardware.gpu_spec(reported).name == row


def test_a_short_key_is_not_found_inside_a_longer_model_number():
    # "L4" is in "L40", "H20" in "H200": neither may claim them
    assert hardware.gpu_spec("NVIDIA L40").name != "L4"
    assert not hardware.gpu_spec("NVIDIA L40").memory_bytes


def test_the_40gb_a100_has_half_the_memory_and_the_same_rate():
    small, large = hardware.gpu_spec("NVIDIA A100-SXM4-40GB"), hardware.gpu_spec("NVIDIA A100-SXM4-80GB")
    assert small.memory_bytes * 2 == large.memory_bytes
    assert small.bf16_dense_flops == large.bf16_dense_flops
    assert hardware.hbm_bytes_per_s(small.name) < hardware.hbm_bytes_per_s(large.name)


def test_h800_is_an_h100_with_less_nvlink():
    h800, h100 = hardware.GPUS["H800"], hardware.GPUS["H100"]
    assert h800.bf16_dense_flops == h100.bf16_dense_flops
    assert h800.nvlink_gbps < h100.nvlink_gbps / 2


def test_blackwell_rows_have_nvlink_5_at_twice_hopper_per_gpu():
    for key in ("B200", "B300", "GB200", "GB300"):
        spec = hardware.GPUS[key]
        assert spec.nvlink_gen == 5 and spec.nvlink_gbps == 2 * hardware.GPUS["H100"].nvlink_gbps
        assert spec.bf16_dense_flops > 2 * hardware.GPUS["H100"].bf16_dense_flops


def test_every_row_has_a_source_a_rating_and_a_line_in_sources_md():
    text = SOURCES.read_text()
    section = text[text.index("## GPU catalogue"):]
    for key, spec in hardware.GPUS.items():
        assert spec.source and spec.memory_bytes > 0 and spec.bf16_dense_flops > 0, key
        assert re.search(rf"^\| {re.escape(key)} \|", section, re.M), f"{key}: no row in docs/sources.md"


def test_no_limit_or_the_rated_one_leaves_the_row_as_it_is():
    spec = hardware.GPUS["H100"]
    assert hardware.at_power_limit(spec, 0) is spec
    assert hardware.at_power_limit(spec, spec.tdp_w).bf16_dense_flops == spec.bf16_dense_flops


def test_a_lower_limit_lowers_the_rate_but_less_than_in_proportion():
    spec = hardware.GPUS["H100"]
    rates = [hardware.at_power_limit(spec, w).bf16_dense_flops for w in (700, 600, 500, 300)]
    assert rates == sorted(rates, reverse=True) and len(set(rates)) == 4
    # the clock falls slower than the power (voltage falls with it): 500 W keeps more than 500/700 of the rate
    assert rates[2] / rates[0] > 500 / 700
    assert hardware.at_power_limit(spec, 500).rated_bf16_dense_flops == spec.bf16_dense_flops


@pytest.mark.parametrize("watts", [0, -5, 701])
def test_a_limit_the_part_cannot_take_is_refused(watts):
    with pytest.raises(UsageError):
        hardware.check_power_limit(hardware.GPUS["H100"], watts)


def test_a_limit_on_a_part_of_unknown_rating_is_refused():
    with pytest.raises(UsageError, match="rated power"):
        hardware.check_power_limit(hardware.GPUS["V100"], 200)


def test_the_topology_carries_the_limit_through_json():
    topo = load_preset("hgx-h100-8")
    assert "power_limit_w" not in topo.to_dict()
    from dataclasses import replace

    capped = replace(topo, power_limit_w=500.0)
    back = Topology.from_dict(json.loads(capped.to_json()))
    assert back.power_limit_w == 500.0
    assert back.gpu_spec.bf16_dense_flops < topo.gpu_spec.bf16_dense_flops


def _step(capsys, *extra):
    code, out, err = cli_output(["predict", "--model", "llama3.1-8b", "--topology", "hgx-h100-8", "--num-gpus", "8",
                                 "--strategy", "zero3", "--json", *extra], capsys)
    assert code == 0, err
    return json.loads(out)["step_time_s"]


def test_predict_prices_a_capped_gpu_slower_and_the_rated_limit_as_no_flag(capsys):
    default = _step(capsys)
    assert _step(capsys, "--power-limit", "700") == default
    assert _step(capsys, "--power-limit", "500") > default


def test_predict_refuses_a_limit_above_the_rating(capsys):
    code, _, err = cli_output(["predict", "--model", "llama3.1-8b", "--topology", "hgx-h100-8", "--num-gpus", "8",
                               "--strategy", "zero3", "--power-limit", "900"], capsys)
    assert code == 2 and err.startswith("topowise: error: --power-limit 900")


def test_a_memory_size_variant_is_the_same_silicon_and_another_model_is_not():
    assert hardware.same_silicon(hardware.GPUS["A100 40GB"], hardware.GPUS["A100"])
    assert hardware.same_silicon(hardware.GPUS["H100 96GB"], hardware.GPUS["H100"])
    assert not hardware.same_silicon(hardware.GPUS["H800"], hardware.GPUS["H100"])
    assert not hardware.same_silicon(hardware.GPUS["H100 PCIe"], hardware.GPUS["H100"])
