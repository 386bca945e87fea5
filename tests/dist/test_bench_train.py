"""`bench train` on CPU: gloo, two processes, the tiny model. The multi-process tests are marked dist.

Outside a job every strategy is a fresh torchrun launch (a few seconds each on two cores), which the
failure, trace and timeout tests run; the every-strategy test runs them all in one job's ranks.
"""

import functools
import gzip
import json
import math
import os
import subprocess
import sys
import uuid
from dataclasses import replace
from pathlib import Path

import pytest
import rank_faults

from topowise.errors import UsageError
from topowise.measure import train
from topowise.models.spec import load_model
from topowise.run import Run

pytest.importorskip("torch")

from topowise.measure import steps  # noqa: E402  (imports torch)

# lr 3e-4: large enough that 3 steps visibly lower the tiny model's loss ("it trains" below)
TINY_IN_A_JOB = ["--device", "cpu", "--model", "tiny", "--micro-batch", "2", "--seq-len", "32", "--steps", "2",
                 "--warmup", "1", "--lr", "3e-4"]
TINY = ["--nproc", "2", *TINY_IN_A_JOB]  # outside a job: two ranks per launch
DESIGN_KEYS = {"kind", "strategy", "model", "world_size", "status", "step_time_s", "tokens_per_s_per_gpu", "mfu",
               "peak_memory_bytes", "losses", "predicted"}
EXTRA_KEYS = {"micro_batch", "seq_len", "fabric", "device", "activation_checkpointing", "reserved_bytes",
              "mfu_measured_peak", "timestamp"}


def cli(argv):
    """`topowise bench train ARGV` in this process: (exit status)."""
    from topowise.cli.main import main

    return main(["bench", "train", *argv])


def run_json(argv, capsys):
    status = cli([*TINY, "--json", *argv])
    return status, json.loads(capsys.readouterr().out)


def with_faults(monkeypatch, faults: str) -> None:
    """The ranks run tests/dist/rank_faults.py's entry, which injects `faults`."""
    for key, value in rank_faults.env_with_faults(faults).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(train, "bench_train", functools.partial(train.bench_train, entry=rank_faults.TRAIN_ENTRY))


def in_one_job(argv, cwd) -> tuple[int, str, str]:
    """`topowise bench train ARGV` as a rank of one two-rank torchrun job, as a torchrun or srun user runs it:
    the ranks run every strategy in turn in their own processes (one launch, where a run outside a job starts
    a fresh one per strategy: the failure, trace and timeout tests here run that path). (status, stdout, stderr)"""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "SLURM_PROCID", "SLURM_NTASKS"):
        env.pop(key, None)  # the test itself must not look like a rank of some job
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           "-m", "topowise", "bench", "train", *argv], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)
    return done.returncode, done.stdout, done.stderr


@pytest.mark.dist
def test_every_strategy_runs_and_losses_agree(tmp_path):
    out = tmp_path / "train.jsonl"
    status, stdout, stderr = in_one_job([*TINY_IN_A_JOB, "--json", "--strategies", "ddp,zero1,zero2,fsdp,hsdp",
                                         "--out", str(out)], tmp_path)
    assert status == 0, stderr[-3000:]
    doc = json.loads(stdout)  # rank 0 reports; the other rank prints nothing
    records = doc["records"]
    assert [r["strategy"] for r in records] == ["ddp", "zero1", "zero2", "zero3", "hsdp"]
    for r in records:
        assert r["status"] == "ok", (r["strategy"], r.get("error"), r.get("log_tail"))
        assert DESIGN_KEYS | EXTRA_KEYS <= set(r)
        assert r["kind"] == "train" and r["world_size"] == 2 and r["device"] == "cpu"
        assert len(r["losses"]) == 3 and all(math.isfinite(x) for x in r["losses"])
        assert r["losses"][-1] < r["losses"][0]  # it trains
        assert abs(r["losses"][0] - math.log(512)) < 0.5  # starts near ln(vocab): the same init everywhere
        assert r["step_time_s"] > 0 and r["tokens_per_s_per_gpu"] == pytest.approx(64 / r["step_time_s"])
        host = r["host_phase_s"]  # on CPU the host does the work itself: its phases make up the step
        assert set(host) == {"forward", "backward", "optimizer"} and all(v > 0 for v in host.values())
        assert sum(host.values()) <= r["step_time_s"] * 1.5
    check = doc["losses_check"]
    assert check["agree"] and check["max_rel_diff"] < train.LOSS_RTOL
    assert "losses agree across ddp, zero1, zero2, zero3, hsdp" in check["message"]
    # ddp and zero1 do the same arithmetic: identical losses; so do the FSDP2 ones among themselves
    assert records[0]["losses"] == records[1]["losses"]
    assert records[2]["losses"] == records[3]["losses"] == records[4]["losses"]
    hsdp = records[4]
    assert (hsdp["shard_group_size"], hsdp["replicas"]) == (2, 1) and "same as zero3" in hsdp["note"]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["strategy"] for r in rows] == [r["strategy"] for r in records]
    assert all(DESIGN_KEYS <= set(r) for r in rows)


def timeline_events(path):
    with gzip.open(path, "rt") as f:
        return json.load(f)["traceEvents"]


@pytest.mark.dist
def test_trace_writes_each_ranks_table_timeline_and_a_host_only_breakdown(tmp_path, capsys):
    status, doc = run_json(["--strategies", "zero3", "--trace", str(tmp_path / "prof"), "--steps", "3"], capsys)
    record = doc["records"][0]
    assert status == 0 and record["status"] == "ok"
    folder = tmp_path / "prof" / "zero3"  # per strategy: strategies do not overwrite each other's files
    assert record["trace_dir"] == str(folder)
    for rank in (0, 1):
        table = (folder / f"rank{rank}.txt").read_text()
        assert "Self CPU" in table and "FSDP::" in table  # FSDP2's hooks, timed on the host
        trace = folder / f"rank{rank}.trace.json.gz"
        names = {e["name"] for e in timeline_events(trace)}
        assert {"topowise.forward", "topowise.backward", "topowise.optimizer", "topowise.step.0"} <= names
    # the parent read the real CPU traces: host only (no CUDA kernels), the warm-up step left out
    breakdown = json.loads((folder / "breakdown.json").read_text())
    assert breakdown["mode"] == "host_only" and breakdown["ranks"].keys() == {"0", "1"}
    for rank in breakdown["ranks"].values():
        assert [s["step"] for s in rank["steps"]] == [1, 2, 3]
        for s in rank["steps"]:
            assert s["pieces_sum_s"] == pytest.approx(s["wall_s"]) and set(s["pieces"]) == {"host", "other"}
            # the step's own clock against the profiler's named range: how close is a timing, not a property
            assert s["measured_s"] > 0 and math.isfinite(s["residual_pct"])
    assert (folder / "breakdown.png").stat().st_size > 0


def test_timed_steps_turn_automatic_gc_off_during_the_steps_only():
    import gc

    import torch

    seen = []

    def one_step(step):
        seen.append(gc.isenabled())
        return torch.zeros(())

    times, losses = steps.timed_steps(3, one_step, cuda=False)
    assert seen == [False] * 3 and len(times) == len(losses) == 3 and gc.isenabled()


@pytest.mark.dist
def test_oom_error_crash_divergence_and_a_lost_launch_are_recorded_and_the_run_goes_on(tmp_path, capsys, monkeypatch):
    # ddp's ranks never join on its first launch (as a lost rendezvous): relaunched once, then it runs;
    # hsdp runs but its weights never move: the loss check must name it
    with_faults(monkeypatch, "ddp:join_fails_once,zero1:oom,zero2:error,zero3:crash,hsdp:diverge")
    out = tmp_path / "train.jsonl"
    status, doc = run_json(["--strategies", "ddp,zero1,zero2,zero3,hsdp", "--lr", "0.01", "--out", str(out)], capsys)
    by = {r["strategy"]: r for r in doc["records"]}
    assert by["zero1"]["status"] == "oom" and by["zero1"]["oom_requested_bytes"] == int(3.5 * 1024**3)
    assert by["zero2"]["status"] == "error" and "injected failure" in by["zero2"]["error"]
    assert by["zero3"]["status"] == "error" and "left no result" in by["zero3"]["error"]
    for name in ("zero1", "zero2", "zero3"):  # they failed after joining: the case's failure, not relaunched
        assert "launch_note" not in by[name]
    for name in ("zero1", "zero2", "zero3"):
        assert by[name]["step_time_s"] is None and by[name]["losses"] == []
    assert by["ddp"]["status"] == by["hsdp"]["status"] == "ok"  # the run went on after the failures
    assert "relaunched once" in by["ddp"]["launch_note"] and "launch_note" not in by["hsdp"]
    assert by["ddp"]["losses"][-1] < 0.97 * by["ddp"]["losses"][0]
    check = doc["losses_check"]
    assert not check["agree"] and check["diverging"] == ["hsdp"] and check["reference"] == "ddp"
    assert "DIVERGE" in check["message"] and status == 1
    assert [json.loads(line)["status"] for line in out.read_text().splitlines()] == [
        "ok", "oom", "error", "error", "ok"]


@pytest.mark.dist
def test_a_strategy_past_its_timeout_is_stopped_with_its_ranks(capsys, monkeypatch):
    with_faults(monkeypatch, "ddp:hang")
    # a mark only this run's ranks inherit, so ranks of another run on the same machine do not count
    mark = f"TOPOWISE_TEST_RUN={uuid.uuid4().hex}".encode()
    monkeypatch.setenv(*mark.decode().split("="))
    status, doc = run_json(["--strategies", "ddp", "--timeout", "10"], capsys)
    (ddp,) = doc["records"]
    assert ddp["status"] == "timeout" and "10 s" in ddp["error"] and status == 1  # a hang is no measurement
    left = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            ours = mark in (proc / "environ").read_bytes() and int(proc.name) != os.getpid()
            left += [proc] if ours and rank_faults.TRAIN_ENTRY.encode() in (proc / "cmdline").read_bytes() else []
        except OSError:
            continue
    assert not left, "ranks of the stopped strategy are still running"


@pytest.mark.parametrize("argv, words", [
    (["--strategies", "ddp,zero4"], "unknown strategy 'zero4'"),
    (["--strategies", ","], "--strategies is empty"),
    (["--micro-batch", "0"], "--micro-batch must be at least 1"),
    (["--steps", "0"], "--steps must be at least 1"),
    (["--nproc", "0"], "--nproc must be at least 1"),
    (["--strategies", "hsdp", "--shard-group-size", "3"], "does not divide 2 GPUs"),
    (["--model", "gpt2", "--seq-len", "2048"], "1024 learned positions"),
    (["--model", "no-such-model"], "unknown model"),
    (["--timeout", "0"], "--timeout must be a positive"),
    (["--fabric", "pcie"], "a CPU run (gloo) has none to take away"),
])
def test_bad_input_is_a_clear_error(argv, words, capsys):
    assert cli([*TINY, *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("topowise: error: ") and words in err and "Traceback" not in err


def test_cuda_without_a_gpu_is_a_clear_error(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is here")
    assert cli(["--device", "cuda", "--model", "tiny"]) == 2
    assert "no CUDA GPU" in capsys.readouterr().err


# --- pure functions ---------------------------------------------------------------------------

def test_hsdp_layout():
    assert train.hsdp_layout(8, None, ((0, 1, 2, 3), (4, 5, 6, 7)))[:2] == (4, 2)
    assert train.hsdp_layout(8, None, None)[:2] == (4, 2)  # world // 2
    assert train.hsdp_layout(6, None, None)[:2] == (3, 2)
    shard, replicas, note = train.hsdp_layout(2, None, None)
    assert (shard, replicas) == (2, 1) and "same as zero3" in note
    assert train.hsdp_layout(3, None, None)[:2] == (3, 1)
    assert train.hsdp_layout(8, 2, ((0, 1, 2, 3), (4, 5, 6, 7)))[:2] == (2, 4)  # explicit wins
    # uneven islands: the cost model's rule, gcd of the GPU count and the smallest island
    assert train.hsdp_layout(8, None, ((0, 1, 2), (3, 4, 5), (6, 7)))[:2] == (2, 4)
    with pytest.raises(UsageError, match="1, 2, 4, 8"):
        train.hsdp_layout(8, 3)


def _rec(name, losses, status="ok"):
    return {"strategy": name, "status": status, "losses": losses}


def test_compare_losses_names_the_odd_one_even_when_first():
    good = [10.0, 9.0, 8.0]
    check = train.compare_losses([_rec("ddp", [10.0, 9.5, 9.4]), _rec("zero1", good),
                                  _rec("zero2", [10.01, 9.01, 8.02]), _rec("zero3", [], "oom")])
    assert not check.agree and check.diverging == ("ddp",) and check.reference == "zero1"
    ok = train.compare_losses([_rec("ddp", good), _rec("zero2", [10.0, 9.0, 8.08])])
    assert ok.agree and ok.max_rel_diff == pytest.approx(0.01)
    assert "max relative difference 1.00%" in ok.message()
    nan = train.compare_losses([_rec("ddp", good), _rec("zero2", [10.0, float("nan"), 8.0])])
    assert not nan.agree


def test_oom_message_parsing():
    msg = "CUDA out of memory. Tried to allocate 1.96 GiB. GPU 0 has a total capacity of 79.10 GiB"
    assert steps.oom_requested_bytes(msg) == int(1.96 * 1024**3)
    assert steps.oom_requested_bytes("Tried to allocate 512.00 MiB") == 512 * 1024**2
    assert steps.oom_requested_bytes("something else") is None
    import torch

    failure = steps.describe_failure(torch.OutOfMemoryError(msg))
    assert failure["status"] == "oom" and failure["oom_requested_bytes"] == int(1.96 * 1024**3)
    assert steps.describe_failure(ValueError("bad shape"))["status"] == "error"


def test_synthetic_batches_depend_on_seed_step_and_rank_only():
    case = train.TrainCase(Run(load_model("tiny"), (0, 1), "ddp", micro_batch=2, seq_len=16), steps=2, warmup=1)
    assert train.TrainCase.from_dict(json.loads(json.dumps(case.to_dict()))) == case
    x0, y0 = steps.synthetic_batches(case, 0, 512, "cpu")
    again, _ = steps.synthetic_batches(replace(case, run=replace(case.run, strategy="zero3")), 0, 512, "cpu")
    x1, _ = steps.synthetic_batches(case, 1, 512, "cpu")
    assert x0.shape == (3, 2, 16) and (x0 == again).all() and not (x0 == x1).all()
    assert (x0[:, :, 1:] == y0[:, :, :-1]).all()  # targets are the next tokens
    assert not (x0[0] == x0[1]).all()  # each step its own batch


def test_pcie_fabric_disables_p2p_and_keeps_multicast_settings(monkeypatch):
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "0")
    env = train.child_env("pcie")
    assert env["NCCL_P2P_DISABLE"] == "1" and "NCCL_NVLS_ENABLE" not in env  # inherited, never overridden
    assert "NCCL_P2P_DISABLE" not in train.child_env("nvlink")
