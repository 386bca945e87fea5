"""Files and folders a careless or hostile user hands the readers and writers of doctor, launch, monitor,
calibrate and module:function models: each is one `topowise: error:` line and exit 2, never a traceback."""

import importlib
import json
import sys
from pathlib import Path

import pytest
from cli_run import run_cli

SNAPSHOT = Path(__file__).parents[1] / "data" / "doctor" / "healthy_hgx_h100.json"
DEEP = '{"a":' * 100_000 + "1" + "}" * 100_000  # past the JSON parser's recursion limit


def _one_line(code, err, *words):
    assert code == 2, err
    assert len(err) == 1 and err[0].startswith("topowise: error: "), err
    for w in words:
        assert w in err[0], err


# --- 1. JSON nested 100,000 deep -------------------------------------------------------------------------
def test_doctor_snapshot_nested_too_deeply(tmp_path, capsys):
    deep = tmp_path / "deep.json"
    deep.write_text(DEEP)
    _one_line(*run_cli(["doctor", "--snapshot", str(deep)], capsys), "nested too deeply")


def test_launch_snapshot_nested_too_deeply(tmp_path, plan_file, capsys):
    deep = tmp_path / "deep.json"
    deep.write_text(DEEP)
    code, err = run_cli(["launch", "--plan", str(plan_file), "--snapshot", str(deep), "--dry-run", "--",
                         "train.py"], capsys)
    _one_line(code, err, "nested too deeply")


@pytest.mark.parametrize("change, words", [
    (lambda d: d["gpus"][0].update(temperature_c="hot"), "GpuState.temperature_c is str"),
    (lambda d: d["gpus"][0].update(local_cpus="0-99999999999"), "not a CPU list"),
    (lambda d: d.update(environment=["NCCL_DEBUG"]), "environment is list"),
    (lambda d: d["gpus"][0].update(pcie_gen=-3), "GpuState.pcie_gen is -3, below 0"),
    (lambda d: d.pop("cpus"), "no 'cpus' field"),
])
def test_doctor_snapshot_field_of_a_bad_type(tmp_path, change, words, capsys):
    data = json.loads(SNAPSHOT.read_text())
    change(data)
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(data))
    _one_line(*run_cli(["doctor", "--snapshot", str(path)], capsys), str(path), words)


# --- 2. monitor summarize --------------------------------------------------------------------------------
def _run_dir(folder: Path, mutate=None, skip_rank=None, world=2) -> str:
    """A StepMonitor folder of 12 steps; at step 9 rank 1 is late and rank 0 waits for it."""
    folder.mkdir()
    for rank in range(world):
        if rank == skip_rank:
            continue
        lines = [{"kind": "start", "rank": rank, "world_size": world, "collective": "the gradient all-reduce",
                  "predicted_step_s": 0.1}]
        for step in range(12):
            slow = step == 9
            times, waits = ([0.35, 0.1], [0.25, 0.0]) if slow else ([0.1, 0.1], [0.0, 0.0])
            rec = {"kind": "step", "step": step, "rank": rank, "world_size": world, "judged": step >= 3,
                   "step_time_s": times[rank], "wait_s": waits[rank], "slowest_rank": 1 if slow else 0,
                   "slow_by_s": 0.25 if slow else 0.0, "late_at": "start", "collective": "the gradient all-reduce",
                   "step_times_s": times, "waits_s": waits, "spike": {"step_time": slow and rank == 0,
                                                                      "wait": slow and rank == 0}}
            if mutate:
                mutate(rec)
            lines.append(rec)
        (folder / f"monitor.rank{rank}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return str(folder)


def test_monitor_rank_line_nested_too_deeply(tmp_path, capsys):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "monitor.rank0.jsonl").write_text(DEEP + "\n")
    code, err = run_cli(["monitor", "summarize", str(folder), "--no-plot"], capsys)
    _one_line(code, err, "monitor.rank0.jsonl: line 1", "nested too deeply")


@pytest.mark.parametrize("field, value, words", [
    ("step_time_s", "slow", "step_time_s is str 'slow'"),
    ("step_time_s", float("nan"), "step_time_s is nan"),
    ("step_time_s", -1.0, "step_time_s is -1.0"),
    ("slowest_rank", 99, "slowest_rank is 99, not a rank of the 2 ranks"),
    ("waits_s", [0.0], "waits_s has 1 entries for 2 ranks"),
])
def test_monitor_field_that_cannot_be_true(tmp_path, field, value, words, capsys):
    folder = _run_dir(tmp_path / "run", mutate=lambda r: r.update({field: value}))
    code, err = run_cli(["monitor", "summarize", folder, "--no-plot"], capsys)
    _one_line(code, err, "monitor.rank0.jsonl: line 2", words)


def test_monitor_rank_0_missing_names_it_and_no_slow_rank(tmp_path, capsys):
    """Only rank 0 saw the wait at step 9: without its file nobody is named slow, and the missing rank is."""
    from cli_run import cli_output

    folder = _run_dir(tmp_path / "run", skip_rank=0)
    code, out, err = cli_output(["monitor", "summarize", folder, "--no-plot", "--json"], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert data["missing_ranks"] == [0]
    assert any(line.startswith("Missing: monitor.rank0.jsonl") for line in data["verdict"])
    assert not any("is the slow one" in line for line in data["verdict"])


@pytest.mark.parametrize("where, words", [("folder", "is a folder"), ("missing/m.png", "no folder")])
def test_monitor_plot_into_a_folder_or_none(tmp_path, where, words, capsys):
    folder = _run_dir(tmp_path / "run")
    (tmp_path / "folder").mkdir()
    code, err = run_cli(["monitor", "summarize", folder, "--plot", str(tmp_path / where)], capsys)
    _one_line(code, err, "--plot", words)
    assert not list(tmp_path.glob("*.png")) and not (tmp_path / "missing").exists()


# --- 3. calibrate --out ----------------------------------------------------------------------------------
@pytest.mark.parametrize("where, words", [("missing/p.json", "no folder"), ("folder", "is a folder"),
                                          ("file.txt/p.json", "is a file, not a folder")])
def test_calibrate_out_where_no_file_can_go(tmp_path, where, words, capsys):
    (tmp_path / "folder").mkdir()
    (tmp_path / "file.txt").write_text("")
    code, err = run_cli(["calibrate", "--only", "encryption", "--out", str(tmp_path / where), "--no-cache"], capsys)
    _one_line(code, err, "--out", words)
    assert not (tmp_path / "missing").exists() and not list(tmp_path.glob("*.tmp"))


BENCH_TRAIN_FOLDER = Path(__file__).parents[1] / "data" / "records" / "2026-12-05-cpu" / "mesh-trace"


@pytest.mark.parametrize("meta, words", [(None, "no fingerprint"), (DEEP, "not readable JSON"),
                                         ("[1, 2]", "a JSON object"),
                                         ("{}", "no topology or fingerprint")])
def test_calibrate_from_records_of_another_kind(tmp_path, meta, words, capsys):
    folder = BENCH_TRAIN_FOLDER  # bench train's own meta.json: no machine fingerprint to key a profile on
    if meta is not None:
        folder = tmp_path / "records"
        folder.mkdir()
        (folder / "meta.json").write_text(meta)
    _one_line(*run_cli(["calibrate", "--from-records", str(folder)], capsys), "meta.json", words)


# --- 4. launch --run-dir ---------------------------------------------------------------------------------
@pytest.mark.parametrize("where", ["file.txt", "file.txt/run"])
def test_launch_run_dir_that_is_a_file(tmp_path, plan_file, where, capsys):
    (tmp_path / "file.txt").write_text("")
    code, err = run_cli(["launch", "--plan", str(plan_file), "--run-dir", str(tmp_path / where), "--no-bind",
                         "--dry-run", "--", "train.py"], capsys)
    _one_line(code, err, "--run-dir", "is a file, not a folder" if "/" in where else "a file, not a folder")


# --- 5. module:function models ---------------------------------------------------------------------------
@pytest.fixture
def without_torch(monkeypatch):
    """This Python as the planning install has it: no torch (a None in sys.modules fails its import)."""
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setitem(sys.modules, "torch.nn", None)
    monkeypatch.delitem(sys.modules, "topowise.models.callable", raising=False)
    yield
    sys.modules.pop("topowise.models.callable", None)  # imported again with torch by the next test


@pytest.mark.parametrize("model", ["no.such.module:build", "os:system"])
def test_callable_model_without_torch(without_torch, model, capsys):
    code, err = run_cli(["plan", "--model", model, "--topology", "h200-x2"], capsys)
    _one_line(code, err, "has no PyTorch", "pip install 'topowise[bench]'")


@pytest.mark.parametrize("model, words", [
    ("os:system", "a built-in function"),  # never called: it would run a shell command
    ("shutil:rmtree", "Python's standard library (shutil)"),
    ("no.such.module:build", "no module named 'no'"),
])
def test_callable_model_that_is_no_model_builder(model, words, capsys):
    pytest.importorskip("torch")
    code, err = run_cli(["plan", "--model", model, "--topology", "h200-x2"], capsys)
    _one_line(code, err, words)


def test_callable_with_other_required_arguments_is_not_called(tmp_path, monkeypatch, capsys):
    pytest.importorskip("torch")
    called = tmp_path / "called"
    (tmp_path / "odd_models.py").write_text(
        "from pathlib import Path\n"
        f"def build(path, micro_batch=8):\n    Path({str(called)!r}).write_text('x')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    code, err = run_cli(["plan", "--model", "odd_models:build", "--topology", "h200-x2"], capsys)
    _one_line(code, err, "requires path")
    assert not called.exists()
