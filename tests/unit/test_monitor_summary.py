"""The monitor's rules on plain numbers, `monitor summarize` on a hand-written run folder (no torch)."""

import json
import math

import pytest

from topowise.cli.main import main
from topowise.monitor import rules
from topowise.monitor.summary import summarize, verdict


def test_running_median_keeps_the_last_window():
    median = rules.RunningMedian(window=3)
    assert math.isnan(median.median)
    for value in (1.0, 100.0, 2.0, 3.0):
        median.add(value)
    assert median.median == 3.0  # of 100, 2, 3
    median.add(math.nan)  # an unknown value is not counted
    assert len(median) == 3


def test_spike_rule():
    assert rules.is_spike(2.1, 1.0, factor=2.0)
    assert not rules.is_spike(1.9, 1.0, factor=2.0)
    assert not rules.is_spike(5.0, math.nan)  # no median yet: not judged
    # waits: above 2x their median, above a quarter of the median step, and the step visibly long
    assert rules.is_wait_spike(0.3, 0.001, step_time=0.4, step_median=0.1)
    assert not rules.is_wait_spike(0.004, 0.001, step_time=0.104, step_median=0.1)  # 4x, but jitter
    assert not rules.is_wait_spike(0.3, 0.2, step_time=0.4, step_median=0.1)  # waits this long are usual
    assert not rules.is_wait_spike(0.03, 0.0, step_time=0.1, step_median=0.1)  # the step was not long


def test_waits_name_the_rank_that_started_late():
    # rank 1 started 0.3 s late: measured back from the common end, its step is 0.3 s shorter
    found = rules.waits(rules.Arrival(since_start=(0.41, 0.11, 0.40), since_ready=(0.35, 0.05, 0.34)))
    assert found.slowest_rank == 1 and found.late_at == "start"
    assert found.wait_s[0] == pytest.approx(0.30) and found.wait_s[1] == 0.0
    assert found.slow_by_s == pytest.approx(0.30)


def test_waits_name_the_rank_whose_compute_ended_late():
    # all started together; rank 0 became ready 0.2 s after rank 1
    found = rules.waits(rules.Arrival(since_start=(0.5, 0.5), since_ready=(0.01, 0.21)))
    assert found.slowest_rank == 0 and found.late_at == "compute"
    assert found.wait_s == (0.0, pytest.approx(0.2))


def write_run(folder, world=2, steps=12, slow_step=9, clocks=None):
    """Hand-written monitor files: rank 1 started step `slow_step` 250 ms late, rank 0 waited. `clocks`:
    (SM MHz, reason bits) per rank, every step."""
    for rank in range(world):
        lines = [{"kind": "start", "rank": rank, "world_size": world, "collective": "the gradient all-reduce",
                  "predicted_step_s": 0.1}]
        for step in range(steps):
            slow = step == slow_step
            times = [0.35, 0.1] if slow else [0.1, 0.1]
            waits = [0.25, 0.0] if slow else [0.0, 0.0]
            lines.append({"kind": "step", "step": step, "rank": rank, "world_size": world, "judged": step >= 3,
                          "step_time_s": times[rank], "wait_s": waits[rank], "slowest_rank": 1 if slow else 0,
                          "slow_by_s": 0.25 if slow else 0.0, "late_at": "start",
                          "collective": "the gradient all-reduce", "step_times_s": times, "waits_s": waits,
                          "spike": {"step_time": slow and rank == 0, "wait": slow and rank == 0},
                          **({"sm_mhz": [c[0] for c in clocks], "clock_reasons": [c[1] for c in clocks]}
                             if clocks else {})})
        (folder / f"monitor.rank{rank}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_summary_of_a_hand_written_run(tmp_path):
    write_run(tmp_path)
    summary = summarize(str(tmp_path))
    assert summary.world_size == 2 and summary.predicted_step_s == 0.1
    assert [s["step"] for s in summary.spike_steps] == [9]
    assert summary.spike_steps[0]["slowest_rank"] == 1 and summary.spike_steps[0]["waited"] == [0]
    assert summary.ranks[1].slowest_at_spikes == 1 and summary.ranks[0].slowest_at_spikes == 0
    assert summary.ranks[0].wait_spikes == 1 and summary.ranks[0].max_wait_s == 0.25
    assert verdict(summary)[0].startswith("Rank 1 is the slow one")


def test_summarize_cli_prints_the_tables_and_a_plot(tmp_path, capsys):
    write_run(tmp_path)
    assert main(["monitor", "summarize", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    step_row = next(line for line in out.splitlines() if line.strip().startswith("9 "))
    assert step_row.split()[1] == "1"  # the slow rank of step 9
    assert "Rank 1 is the slow one" in out
    assert (tmp_path / "monitor.png").stat().st_size > 0


def test_summarize_a_folder_without_monitor_files(tmp_path, capsys):
    assert main(["monitor", "summarize", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("topowise: error:") and "monitor.rank" in err


def test_a_rank_whose_gpu_ran_slow_is_said_so(tmp_path, capsys):
    write_run(tmp_path, clocks=[(1750.0, 0x4), (1300.0, 0x4 | 0x20)])  # rank 1: power limit and temperature
    summary = summarize(str(tmp_path))
    assert summary.ranks[1].median_sm_mhz == 1300 and summary.ranks[1].held_share == 1.0
    assert summary.ranks[0].held_share == 0.0  # the power limit alone is every busy H200's state
    said = [line for line in verdict(summary) if "MHz" in line]
    assert said == ["Rank 1's GPU ran at 1300 MHz (median SM clock as its steps ended) against the ranks' 1525; "
                    "temperature or a hardware slowdown held it down in 100% of its steps."]
    assert main(["monitor", "summarize", str(tmp_path), "--no-plot"]) == 0
    assert "SM" in capsys.readouterr().out
    plain = tmp_path / "plain"
    plain.mkdir()
    write_run(plain)
    assert not [line for line in verdict(summarize(str(plain))) if "MHz" in line]


def test_the_slow_one_is_the_rank_that_cost_the_most_waiting(tmp_path):
    # rank 0 is late by 5 ms at three steps (noise), rank 1 by 500 ms at one: rank 1 is named, rank 0 "also late"
    late = {5: (0, 0.005), 6: (0, 0.005), 7: (0, 0.005), 9: (1, 0.5)}
    for rank in range(2):
        lines = [{"kind": "start", "rank": rank, "world_size": 2, "collective": "the gradient all-reduce"}]
        for step in range(12):
            who, by = late.get(step, (0, 0.0))
            waits = [by if r != who else 0.0 for r in range(2)]
            times = [0.1 + by] * 2
            lines.append({"kind": "step", "step": step, "rank": rank, "world_size": 2, "judged": step >= 3,
                          "step_time_s": times[rank], "wait_s": waits[rank], "slowest_rank": who, "slow_by_s": by,
                          "late_at": "start", "collective": "the gradient all-reduce", "step_times_s": times,
                          "waits_s": waits, "spike": {"step_time": by > 0 and rank != who,
                                                      "wait": by > 0 and rank != who}})
        (tmp_path / f"monitor.rank{rank}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    summary = summarize(str(tmp_path))
    assert summary.ranks[0].slowest_at_spikes == 3 and summary.ranks[1].slowest_at_spikes == 1
    said = verdict(summary)
    assert said[0].startswith("Rank 1 is the slow one") and "rank 0 3x" in said[1]
