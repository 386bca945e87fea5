"""The GPUs' clocks during bench train's timed steps: sampled by the parent through NVML (a stand-in
here), kept for the ranks' GPUs and window, carried into the record and shown in the table."""

from __future__ import annotations

import dataclasses
import json
import time

import pytest
from rich.console import Console

from topowise.cli.bench_train import clock_note, train_table
from topowise.measure import gpu_clocks, train
from topowise.measure.gpu_clocks import (
    SW_POWER_CAP,
    SW_THERMAL,
    Board,
    ClockSampler,
    Sample,
    clocks_during,
    normalize_uuid,
    summarize,
)
from topowise.measure.train import TrainRequest, make_record, make_request, run_one


class FakeNvml:
    """Two GPUs: GPU 0 at the rated clock and idle, GPU 1 held at 1500 MHz by the power limit."""

    NVML_CLOCK_SM = 1

    def __init__(self, fail_init: bool = False):
        self.fail_init = fail_init
        self.shut = False

    def nvmlInit(self):
        if self.fail_init:
            raise RuntimeError("NVML Shared Library Not Found")

    def nvmlShutdown(self):
        self.shut = True

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetUUID(self, h):
        return f"GPU-AAAA-{h}".encode()

    def nvmlDeviceGetMaxClockInfo(self, h, kind):
        assert kind == self.NVML_CLOCK_SM
        return 1980

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return 700_000  # mW

    def nvmlDeviceGetClockInfo(self, h, kind):
        return 1980 if h == 0 else 1500

    def nvmlDeviceGetPowerUsage(self, h):
        return 90_000 if h == 0 else 699_000

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return 0x1 if h == 0 else SW_POWER_CAP


def test_uuids_compare_without_nvmls_prefix_or_case():
    assert normalize_uuid("GPU-3C7A-11") == normalize_uuid("3c7a-11") == "3c7a-11"


def test_only_the_boards_samples_inside_the_window_count():
    board = Board("a", 1980.0, 700.0)
    samples = [Sample(0.5, "a", 1980, 100, 0),  # before the window: warm-up
               Sample(1.0, "a", 1600, 690, SW_POWER_CAP), Sample(1.5, "a", 1800, 600, 0),
               Sample(2.0, "a", 1400, 680, SW_POWER_CAP | SW_THERMAL),
               Sample(1.5, "b", 300, 50, 0),  # another GPU
               Sample(2.5, "a", 345, 80, 0)]  # after the last step
    c = clocks_during(samples, board, (1.0, 2.0))
    assert c.samples == 3
    assert c.sm_mhz_mean == pytest.approx(1600) and c.sm_mhz_min == 1400 and c.max_sm_mhz == 1980
    assert c.power_w_mean == pytest.approx((690 + 600 + 680) / 3) and c.power_limit_w == 700
    assert c.power_capped_share == pytest.approx(2 / 3) and c.thermal_share == pytest.approx(1 / 3)
    assert clocks_during(samples, board, (3.0, 4.0)) is None


def test_summary_is_per_rank_gpu_and_none_without_where_or_when():
    boards = [Board("x", 1980.0, 700.0), Board("y", 1980.0, 700.0)]
    samples = [Sample(1.0, "x", 1900, 500, 0), Sample(1.0, "y", 1700, 700, SW_POWER_CAP)]
    got = summarize(samples, boards, ["GPU-Y", "gpu-x"], [0.0, 2.0])
    assert [c["uuid"] for c in got] == ["y", "x"] and got[0]["power_capped_share"] == 1.0
    assert summarize(samples, boards, None, [0.0, 2.0]) is None
    assert summarize(samples, boards, ["x"], None) is None
    assert summarize(samples, boards, ["z"], [0.0, 2.0]) is None  # a GPU of another node


def test_the_sampler_reads_every_gpu_until_the_block_ends():
    nvml = FakeNvml()
    with ClockSampler(interval_s=0.001, nvml=nvml) as sampler:
        start = time.time()
        time.sleep(0.05)
        end = time.time()
    assert nvml.shut
    assert [b.uuid for b in sampler.boards] == ["aaaa-0", "aaaa-1"] and sampler.boards[1].power_limit_w == 700
    got = sampler.summary(["aaaa-1", "GPU-AAAA-0"], [start, end])
    assert got[0]["sm_mhz_mean"] == 1500 and got[0]["power_capped_share"] == 1.0
    assert got[1]["sm_mhz_mean"] == 1980 and got[1]["power_capped_share"] == 0.0
    n = len(sampler.samples)
    time.sleep(0.01)
    assert len(sampler.samples) == n  # the thread stopped with the block


def test_without_nvml_nothing_is_sampled_and_nothing_fails():
    with ClockSampler(nvml=FakeNvml(fail_init=True)) as sampler:
        pass
    assert sampler.samples == [] and sampler.summary(["a"], [0.0, 1.0]) is None


CLOCKS = [{"uuid": "a", "samples": 40, "sm_mhz_mean": 1876.0, "sm_mhz_min": 1665.0, "max_sm_mhz": 1980.0,
           "power_w_mean": 426.0, "power_limit_w": 700.0, "power_capped_share": 0.83, "thermal_share": 0.0},
          {"uuid": "b", "samples": 40, "sm_mhz_mean": 1702.0, "sm_mhz_min": 1480.0, "max_sm_mhz": 1980.0,
           "power_w_mean": 690.0, "power_limit_w": 700.0, "power_capped_share": 0.97, "thermal_share": 0.05}]


def _case():
    return make_request(model="llama3.2-1b", strategies="ddp,zero3", device="cpu", nproc=2, steps=2,
                        warmup=1).cases[0]


def test_the_record_carries_the_clocks_and_the_table_shows_the_slowest_gpu():
    result = {"status": "ok", "step_time_s": 0.2, "step_times_s": [0.2], "losses": [1.0], "gpu_clocks": CLOCKS}
    record = make_record(_case(), result)
    assert record["gpu_clocks"] == CLOCKS
    text = _render(train_table([record]))
    assert "SM" in text and "1702" in text and "1876" not in text
    note = clock_note([record])
    assert "1980 MHz" in note and "700 W" in note and "97%" in note and "5%" in note
    plain = make_record(_case(), {k: v for k, v in result.items() if k != "gpu_clocks"})
    assert "SM" not in _render(train_table([plain])) and clock_note([plain]) is None


def _render(table) -> str:
    console = Console(width=100, record=True)
    console.print(table)
    return console.export_text()


def test_run_one_keeps_the_samples_of_the_ranks_gpus_and_timed_window(tmp_path, monkeypatch):
    case = _case()
    case = dataclasses.replace(case, device="cuda")
    request = TrainRequest((case,), 1, 30.0, None, None)

    def fake_launch(entry, config, *, nproc, env=None, timeout_s=None, log_path=None, wrap=None):
        start = time.time()
        time.sleep(0.05)
        rank0 = {"status": "ok", "step_time_s": 0.01, "gpu_uuids": ["GPU-AAAA-1"],
                 "timed_window_unix_s": [start, time.time()]}
        (tmp_path_of(config) / "rank0.json").write_text(json.dumps(rank0))
        return 0

    def tmp_path_of(config):
        from pathlib import Path

        return Path(config["result_dir"])

    monkeypatch.setattr(train.launcher, "launch", fake_launch)
    monkeypatch.setattr(train.launcher, "in_job", lambda: False)
    nvml = FakeNvml()
    monkeypatch.setattr(gpu_clocks, "_import_pynvml", lambda: nvml)
    monkeypatch.setattr(gpu_clocks, "INTERVAL_S", 0.001)
    result = run_one(case, request)
    assert [c["uuid"] for c in result["gpu_clocks"]] == ["aaaa-1"]
    assert result["gpu_clocks"][0]["sm_mhz_mean"] == 1500 and result["gpu_clocks"][0]["samples"] > 3
    cpu = run_one(_case(), TrainRequest((_case(),), 1, 30.0, None, None))
    assert "gpu_clocks" not in cpu  # a CPU run samples nothing


def test_timed_steps_mark_each_steps_issue_and_the_end():
    torch = pytest.importorskip("torch")
    from topowise.measure.steps import timed_steps

    marks: list[float] = []
    times, _ = timed_steps(3, lambda step: torch.tensor(float(step)), False, marks=marks)
    assert len(times) == 3 and len(marks) == 4 and marks == sorted(marks)


def test_calibrate_adds_the_clocks_to_its_training_records(tmp_path, monkeypatch):
    # calibrate's ranks write their records inside the launch; the parent samples and adds the clocks after
    from topowise.calibrate.cases import GPU_CALIBRATION
    from topowise.calibrate.launch import measure
    from topowise.measure import launcher

    def fake_launch(entry, config, *, nproc, env=None, timeout_s=None, heartbeat=None, stderr_path=None):
        start = time.time()
        time.sleep(0.03)
        with open(config["train"][0]["out"], "a") as f:
            f.write(json.dumps({"kind": "train", "fabric": config["fabric"], "gpu_uuids": ["GPU-AAAA-1"],
                                "timed_window_unix_s": [start, time.time()]}) + "\n")
            f.write(json.dumps({"kind": "train", "fabric": config["fabric"], "status": "oom"}) + "\n")
            if config["fabric"] == GPU_CALIBRATION.fabrics[-1]:
                f.write('{"kind": "train", "cut sh')  # a rank killed mid-line
        return 0

    monkeypatch.setattr(launcher, "launch", fake_launch)
    monkeypatch.setattr(gpu_clocks, "_import_pynvml", lambda: FakeNvml())
    monkeypatch.setattr(gpu_clocks, "INTERVAL_S", 0.001)
    assert measure(GPU_CALIBRATION, 2, tmp_path, timeout_s=30) == []
    lines = (tmp_path / "train.jsonl").read_text().splitlines()
    assert lines[-1] == '{"kind": "train", "cut sh'  # kept as it was
    records = [json.loads(line) for line in lines[:-1]]
    sampled = [r for r in records if "gpu_uuids" in r]
    assert len(sampled) == len(GPU_CALIBRATION.fabrics) and len(records) == 2 * len(sampled)
    # each launch's record gets the clocks of its own window, once
    assert all(r["gpu_clocks"][0]["uuid"] == "aaaa-1" and r["gpu_clocks"][0]["sm_mhz_mean"] == 1500 for r in sampled)
    assert all("gpu_clocks" not in r for r in records if "gpu_uuids" not in r)
    assert not list(tmp_path.glob("*.tmp"))


def test_a_rank_whose_gpu_ran_slow_is_named_with_what_held_it_down():
    from topowise.monitor.rules import clock_cause

    words = gpu_clocks.reason_words
    cause = clock_cause([1750.0, 1320.0, 1760.0], [SW_POWER_CAP, SW_THERMAL | SW_POWER_CAP, SW_POWER_CAP], 1, words)
    assert cause == ("its GPU's SM clock was 1320 MHz, the ranks' median 1750 "
                     "(held down by the power limit and temperature)")
    assert clock_cause([1750.0, 1700.0], [0, 0], 1, words) is None  # within 5% of the median: not the cause
    assert clock_cause([float("nan"), float("nan")], [0, 0], 1, words) is None  # no NVML (CPU)
    assert clock_cause([1750.0, float("nan")], [0, 0], 0, words) is None  # one clock known: nothing to compare


def test_the_monitor_reads_its_own_gpu_by_uuid():
    nvml = FakeNvml()
    clock = gpu_clocks.DeviceClock.open("aaaa-1", nvml=nvml)
    assert clock.read() == (1500.0, SW_POWER_CAP)
    clock.close()
    assert nvml.shut
    assert gpu_clocks.DeviceClock.open("bbbb-0", nvml=FakeNvml()) is None  # not on this node
    assert gpu_clocks.DeviceClock.open("aaaa-1", nvml=FakeNvml(fail_init=True)) is None


def test_clocks_over_runs_in_words():
    from topowise.measure.gpu_clocks import clocks_over, describe_clocks

    records = [{"gpu_clocks": CLOCKS}, {"gpu_clocks": [dict(CLOCKS[0], sm_mhz_mean=1960.0, power_capped_share=0.9)]},
               {"status": "oom"}]
    over = clocks_over(records)
    assert over["runs"] == 2 and over["sm_mhz_mean_min"] == 1702 and over["sm_mhz_mean_max"] == 1960
    assert describe_clocks(over) == ("SM 1702-1960 MHz mean per run (rated 1980); the power limit held them down "
                                     "in 90-97% of the samples, temperature or a hardware slowdown in up to 5%")
    assert clocks_over([{"status": "oom"}]) is None
