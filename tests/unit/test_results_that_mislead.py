"""Results that read as measured and met when they are not: each refused, or said for what it is
(validate with no GPU-bound case, a second validate into one folder, monitor summarize without rank 0's
file, a calibration whose fit misses its own runs, a model profile made on the CPU, a model whose
forward fails, an example batch the function sizes itself)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from topowise.errors import UsageError


# --- validate ------------------------------------------------------------------------------------
def test_a_target_item_about_gpu_bound_cases_says_none_was_measured():
    from topowise.cli.validate import target_item

    none = {"by_bound": {"gpu": {"cases": 0}, "host": {"cases": 3}}}
    text = target_item("GPU-bound step MAE <= 4%", True, none)
    assert "no GPU-bound case measured" in text and "yes" not in text and "[red]no[/]" not in text
    some = {"by_bound": {"gpu": {"cases": 2}, "host": {"cases": 0}}}
    assert target_item("GPU-bound step MAE <= 4%", True, some).endswith("yes[/]")


def test_a_second_validate_into_one_folder_names_the_flags_and_overwrite_starts_empty(tmp_path, monkeypatch):
    from topowise.calibrate import validate as V
    from topowise.calibrate.machine import cpu_topology
    from topowise.costmodel.profile import default_profile

    folder = tmp_path / "v-records"
    folder.mkdir()
    (folder / "train.jsonl").write_text('{"kind": "train"}\n')
    args = {"profile": default_profile(), "device": "cpu", "nproc": 2, "out": str(tmp_path / "v.jsonl"),
            "plot": None, "make_plot": False, "topology": cpu_topology(2)}
    with pytest.raises(UsageError) as refused:
        V.validate(**args)
    assert "--measured" in str(refused.value) and "--overwrite" in str(refused.value)

    def measure(plan, nproc, records, **kw):  # stands in for the runs: what the folder holds when they start
        raise RuntimeError(sorted(p.name for p in records.iterdir()))

    monkeypatch.setattr(V, "measure", measure)
    with pytest.raises(RuntimeError) as started:
        V.validate(**args, overwrite=True)
    assert started.value.args[0] == ["meta.json"]  # the new run's meta.json alone: the old records are gone


# --- monitor summarize ---------------------------------------------------------------------------
def test_summarize_without_rank_0s_file_says_so_and_does_not_call_rank_0_slow(tmp_path, capsys):
    from test_monitor_summary import write_run

    from topowise.cli.main import main
    from topowise.monitor.summary import summarize, verdict

    write_run(tmp_path)  # rank 1 started step 9 late; rank 0 waited (and alone flagged it)
    (tmp_path / "monitor.rank0.jsonl").unlink()
    summary = summarize(str(tmp_path))
    assert summary.missing_ranks == [0]
    lines = verdict(summary)
    assert "monitor.rank0.jsonl" in lines[0] and not any("Rank 0 is the slow one" in line for line in lines)
    assert main(["monitor", "summarize", str(tmp_path), "--no-plot"]) == 0
    out = capsys.readouterr().out
    assert "Missing: monitor.rank0.jsonl" in out and "Rank 0 is the slow one" not in out


def test_a_rank_named_late_by_the_others_whose_file_is_missing_is_not_called_the_slow_one(tmp_path):
    from topowise.monitor.summary import summarize, verdict

    # rank 1's own records: it waited at step 9 for rank 0, how late unknown (slow_by_s null)
    lines = [{"kind": "start", "rank": 1, "world_size": 2, "collective": "the all-reduce"}]
    for step in range(12):
        slow = step == 9
        lines.append({"kind": "step", "step": step, "rank": 1, "world_size": 2, "step_time_s": 0.35 if slow else 0.1,
                      "wait_s": 0.25 if slow else 0.0, "slowest_rank": 0, "slow_by_s": None, "late_at": "start",
                      "step_times_s": [None, 0.1], "waits_s": [None, 0.0], "spike": {"wait": slow}})
    (tmp_path / "monitor.rank1.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    said = verdict(summarize(str(tmp_path)))
    assert not any(line.startswith("Rank 0 is the slow one") for line in said)
    assert any("rank 0 (its own file is missing) was late" in line for line in said)


# --- calibrate -----------------------------------------------------------------------------------
@pytest.fixture
def fitted_with(monkeypatch, tmp_path):
    """calibrate --from-records on a stand-in fit whose step-time rms error is the given one."""
    from topowise.calibrate import driver
    from topowise.calibrate.machine import cpu_topology
    from topowise.costmodel.profile import default_profile

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    meta = {"fingerprint": "device=cpu; name=test cpu", "topology": cpu_topology(2).to_dict(), "started": "2026"}
    monkeypatch.setattr(driver, "read_records_dir", lambda folder: ([], meta))

    def fit(rms):
        report = {"step_time": {"observations": 3, "rms_error": rms, "max_error": rms * 1.5}, "memory": None}
        monkeypatch.setattr(driver, "fit_profile", lambda *a, **k: (default_profile(), dict(report)))
        return driver

    return fit


def test_a_fit_missing_its_own_runs_by_more_than_the_bound_is_not_cached(fitted_with, tmp_path):
    from topowise.calibrate.fit import POOR_FIT_RMS

    driver = fitted_with(POOR_FIT_RMS + 0.15)
    out = tmp_path / "cpu.json"
    result = driver.calibrate(device="cpu", nproc=0, out=str(out), records=None, from_records=str(tmp_path))
    assert result.cache_path is None and not (tmp_path / "cache").exists()
    assert out.is_file() and result.profile_path == str(out)  # --out still gets it
    (said,) = [w for w in result.report["warnings"] if "not cached" in w]
    assert "--keep-poor-fit" in said and f"{100 * POOR_FIT_RMS:g}%" in said and str(out) in said
    kept = driver.calibrate(device="cpu", nproc=0, out=None, records=None, from_records=str(tmp_path),
                            keep_poor_fit=True)
    assert kept.cache_path and Path(kept.cache_path).is_file()


def test_a_fit_within_the_bound_is_cached_as_before(fitted_with, tmp_path):
    from topowise.calibrate.fit import POOR_FIT_RMS

    driver = fitted_with(POOR_FIT_RMS - 0.05)
    result = driver.calibrate(device="cpu", nproc=0, out=None, records=None, from_records=str(tmp_path))
    assert result.cache_path and Path(result.cache_path).is_file()
    assert not [w for w in result.report["warnings"] if "not cached" in w]


def test_calibrate_cli_exits_0_with_the_warning_and_writes_nowhere_without_out(fitted_with, tmp_path, capsys):
    from topowise.calibrate.fit import POOR_FIT_RMS
    from topowise.cli.main import main

    fitted_with(POOR_FIT_RMS + 0.15)
    assert main(["calibrate", "--from-records", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert "profile: not written" in captured.out
    warning = [line for line in captured.err.splitlines() if "not cached" in line]
    assert len(warning) == 1 and warning[0].startswith("topowise: warning:") and "--out FILE keeps it" in warning[0]
    assert not (tmp_path / "cache").exists()


# --- profile -------------------------------------------------------------------------------------
MODELS = '''
import torch
import torch.nn as nn


class Broken(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(4, 4)

    def forward(self, x):
        raise RuntimeError("shapes (3x4) and (5x4) do not multiply\\nsecond line")


def broken(micro_batch: int = 2):
    return Broken(), torch.randn(micro_batch, 4)


def small(micro_batch: int = 2):
    return nn.Sequential(nn.Linear(4, 1)), torch.randn(micro_batch, 4)  # no repeated block: no hooks


class Clicks(nn.Module):
    def __init__(self):
        super().__init__()
        self.table = nn.EmbeddingBag(100, 4, mode="sum")
        self.top = nn.Linear(4, 1)

    def forward(self, ids):
        return self.top(self.table(ids))


def clicks():  # a recommendation-style batch the function sizes itself: 256 samples x 8 ids, no tokens
    return Clicks(), torch.randint(0, 100, (256, 8))
'''


@pytest.fixture
def models(tmp_path, monkeypatch, request):
    """A module of small models in the working folder (profile imports module:function from there)."""
    name = f"mislead_{request.node.name[:40].replace('[', '_').replace(']', '_')}"
    (tmp_path / f"{name}.py").write_text(MODELS)
    monkeypatch.chdir(tmp_path)
    return name


def test_profile_of_a_model_whose_forward_fails_exits_2_and_writes_nothing(models, tmp_path, capsys):
    from topowise.cli.main import main

    out = tmp_path / "p.json"
    assert main(["profile", "--model", f"{models}:broken", "--device", "cpu", "--strategies", "ddp,zero3",
                 "--steps", "1", "--warmup", "0", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("topowise: profiling on the CPU is for testing")
    assert err[-1].startswith("topowise: error:") and "shapes (3x4) and (5x4) do not multiply" in err[-1]
    assert "second line" not in err[-1] and not out.exists()


def test_profile_on_the_cpu_says_so_first_and_reports_every_step(models, capsys):
    from topowise.cli.main import main

    assert main(["profile", "--model", f"{models}:small", "--device", "cpu", "--strategies", "ddp",
                 "--steps", "2", "--warmup", "1", "--json"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert "for testing" in err[0]
    steps = [line for line in err[1:] if line.startswith("topowise: ddp: step ")]
    assert len(steps) == 1 + 2 + 1  # warm-up, timed, the per-block step
    assert steps[-1].startswith("topowise: ddp: step 4 of 4")


def test_an_example_batch_sized_by_the_function_is_its_micro_batch_in_samples(models, tmp_path, capsys):
    from topowise.cli.main import main

    out = tmp_path / "clicks.json"
    assert main(["profile", "--model", f"{models}:clicks", "--device", "cpu", "--strategies", "ddp",
                 "--steps", "1", "--warmup", "0", "--out", str(out)]) == 0
    assert "micro-batch 256 samples" in capsys.readouterr().out
    data = json.loads(out.read_text())
    assert data["micro_batch"] == 256 and data["seq_len"] == 1
    # the same figures as if measured on an H200: predict names the unit
    data.update(device="cuda", device_name="NVIDIA H200", matmul_flops=790e12, memory_bytes_per_s=4.2e12)
    out.write_text(json.dumps(data))
    assert main(["predict", "--model-profile", str(out), "--model", f"{models}:clicks", "--topology", "hgx-h200-8",
                 "--num-gpus", "1", "--strategy", "ddp", "--micro-batch", "256", "--seq-len", "1", "--json"]) == 0
    said = json.loads(capsys.readouterr().out)["model_profile"]
    assert said["unit"] == "samples" and "samples/s" in said["note"]


def test_a_micro_batch_the_function_cannot_take_is_refused(models, capsys):
    from topowise.cli.main import main

    assert main(["profile", "--model", f"{models}:clicks", "--device", "cpu", "--micro-batch", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "takes no micro_batch" in err and "256 samples" in err


def test_a_strategy_that_failed_is_shown_with_its_error(capsys):
    from topowise.cli.model_profile import render

    ok = {"step_s": 0.01, "gpu_s": {"forward": 0.001, "backward": 0.002, "optimizer": 0.001},
          "host_s": {"forward": 0.001, "backward": 0.002, "optimizer": 0.001}, "peak_allocated_bytes": None,
          "activation_bytes": None}
    render({"model": {"name": "m:build", "params": 10, "blocks": [], "wrap_class": "", "accepts": ["micro_batch"]},
            "device_name": "cpu", "micro_batch": 2, "seq_len": 1, "torch_version": "2", "compile": False,
            "wall_s": 1.0, "strategies": {"ddp": ok, "zero3": {"status": "error", "error": "NotImplementedError: "
                                                                                          "aten::foo on DTensor"}}})
    out = capsys.readouterr().out
    assert "zero3: error: NotImplementedError: aten::foo on DTensor" in out and "2 samples" in out
