"""`bench train` refusing what cannot fit before launch (with the arithmetic), and a rank a signal killed named
with its place in the mesh, in the record and in the printed table."""

import pytest

from topowise.cli import bench_train as cli
from topowise.errors import UsageError
from topowise.measure import train
from topowise.models.spec import load_model
from topowise.run import Run

GIB = 2**30

# torchrun's summary after rank 3 of a tp2 x pp2 run was sent SIGKILL: rank 0, whose receive lost its peer, exited
# first (status 1) and is the "root cause" torchrun names; the survivors got torchrun's SIGTERM
TORCHRUN_LOG = """\
[rank0]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer
Failures:
[1]:
  time      : 2026-12-05_13:18:30
  host      : localhost
  rank      : 2 (local_rank: 2)
  exitcode  : -15 (pid: 21656)  (SIGTERM)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 21656
[2]:
  time      : 2026-12-05_13:18:30
  host      : localhost
  rank      : 3 (local_rank: 3)
  exitcode  : -9 (pid: 21657)  (SIGKILL)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 21657
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-05_13:18:30
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 21654)
  error_file: <N/A>
"""


def request(model="tiny", strategies="ddp,zero3", **kw):
    return train.make_request(model=model, strategies=strategies, seq_len=kw.pop("seq_len", 32), device="cpu",
                              nproc=kw.pop("nproc", 2), **kw)


def test_a_cpu_run_that_cannot_fit_the_machines_memory_is_refused_with_the_arithmetic(monkeypatch):
    monkeypatch.setattr(train, "available_memory_bytes", lambda: 22 * GIB)
    with pytest.raises(UsageError) as err:
        train.refuse_if_none_fits(request(model="llama3.2-1b", seq_len=4096))
    message = str(err.value)
    assert "none is launched" in message and "\n" not in message
    # zero3 over 2 processes: each holds half the states; the arithmetic is written out, with the limit
    assert "zero3: 2 ranks x (" in message and "GiB available" in message and "22.00 GiB" in message
    assert "--no-memory-check" in message
    # asked not to check, it is launched
    assert request(model="llama3.2-1b", seq_len=4096, check_memory=False).refused == {}


def test_the_heavier_strategy_is_refused_and_the_others_run(monkeypatch):
    cases = request(model="llama3.2-1b", seq_len=4096, check_memory=False).cases
    needs = {c.run.strategy: train.rank_bytes(c) for c in cases}
    assert needs["ddp"] > needs["zero3"]  # ddp keeps the whole optimizer state on each rank
    limit = 2 * (needs["zero3"] + train.RANK_BASE_BYTES) + GIB  # zero3 fits, ddp does not
    refused = train.memory_refusals(cases, 2, "cpu", available=limit)
    assert set(refused) == {"ddp"}
    monkeypatch.setattr(train, "available_memory_bytes", lambda: limit)
    req = request(model="llama3.2-1b", seq_len=4096)
    launched = []
    monkeypatch.setattr(train, "run_one", lambda case, *a: launched.append(case.run.strategy) or {"status": "error"})
    records, _ = train.bench_train(req)
    assert launched == ["zero3"]
    ddp = records[0]
    assert ddp["status"] == "oom" and ddp["refused_before_launch"] and "not launched" in ddp["error"]
    assert cli.status_words(ddp) == "refused"


def test_a_gpu_mesh_run_is_refused_only_past_one_gpus_memory():
    cases = request(model="llama3.1-8b", strategies="ddp", seq_len=1024, nproc=2, check_memory=False,
                    mesh={"pp": 2, "grad_accum": 2}).cases
    need = train.rank_bytes(cases[0])
    assert train.memory_refusals(cases, 2, "cuda", gpu_memory=need + 1) == {}
    assert "on one GPU" in train.memory_refusals(cases, 2, "cuda", gpu_memory=need - 1)["ddp"]
    # a data-parallel strategy's out-of-memory on a GPU is a measurement: it is launched
    plain = request(model="llama3.2-1b", strategies="ddp", seq_len=4096, check_memory=False).cases
    assert train.memory_refusals(plain, 2, "cuda", gpu_memory=GIB) == {}


def test_a_mesh_rank_holds_the_whole_model_while_it_cuts_its_stage():
    run = Run(model=load_model("llama3.2-1b"), gpus=tuple(range(4)), strategy="ddp", micro_batch=1, seq_len=64, tp=2,
              pp=2, grad_accum=2)
    assert train.rank_bytes(train.TrainCase(run=run, device="cpu")) >= 4 * run.model.params


def test_the_rank_a_signal_killed_is_the_cause_not_the_one_torchrun_saw_exit_first():
    assert train.killed_ranks(TORCHRUN_LOG) == {3: 9}
    assert train.killed_ranks("everything exited 0") == {}
    assert "likely out of memory" in train.signal_words(9)


def test_a_ranks_place_in_the_mesh():
    run = Run(model=load_model("tiny"), gpus=tuple(range(8)), strategy="zero3", micro_batch=1, seq_len=32, tp=2,
              pp=2, grad_accum=2)  # dp_shard 2
    # row-major over (pp, dp_replicate, dp_shard, cp, tp): rank 5 = pp 1, dp_shard 0, tp 1
    assert train.mesh_coordinates(run, 5) == {"pp": 1, "dp_replicate": 0, "dp_shard": 0, "cp": 0, "tp": 1}
    assert train.mesh_coordinates(run, 2) == {"pp": 0, "dp_replicate": 0, "dp_shard": 1, "cp": 0, "tp": 0}
    assert train.rank_place(run, 5)["failed_stages"] == [1]
    assert train.place_words(run, 5) == " (pipeline stage 1, tp 1, dp_shard 0)"


def test_the_table_says_which_rank_was_killed_and_why():
    record = {"strategy": "ddp", "status": "error", "failed_rank": 3, "exit_signal": 9,
              "error": "rank 3 (pipeline stage 1, tp 1) was killed by SIGKILL: likely out of memory"}
    assert cli.status_words(record) == "killed r3"
    assert cli.failure_lines([record, {"strategy": "zero3", "status": "ok"}]) == [
        "ddp: killed r3: rank 3 (pipeline stage 1, tp 1) was killed by SIGKILL: likely out of memory"]


def test_inside_a_job_the_ranks_do_not_each_decide_on_their_own(monkeypatch):
    monkeypatch.setattr(train, "available_memory_bytes", lambda: GIB)
    assert set(request(model="llama3.2-1b", seq_len=4096).refused) == {"ddp", "zero3"}
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert request(model="llama3.2-1b", seq_len=4096).refused == {}


def test_a_crash_that_left_no_message_shows_the_end_of_the_ranks_output():
    record = {"strategy": "zero3", "status": "error", "log_tail": "a\nb\nSegmentation fault\nexit 139",
              "error": "the ranks exited with status 1 and left no result (a crash: see log_tail)"}
    assert cli.failure_lines([record]) == [
        "zero3: error: the ranks exited with status 1 and left no result (a crash: see log_tail)",
        "    b", "    Segmentation fault", "    exit 139"]
