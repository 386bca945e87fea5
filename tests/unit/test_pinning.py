"""bench train --pin-cpus: each local rank on its own equal, disjoint slice of the allowed CPUs."""

import os
import threading

import pytest

from topowise.measure.rank import cores_for_local_rank, pin_to_cores


def test_slices_are_equal_and_disjoint():
    cpus = list(range(32))
    slices = [cores_for_local_rank(cpus, r, 2) for r in range(2)]
    assert slices == [list(range(16)), list(range(16, 32))]
    three = [cores_for_local_rank(list(range(8)), r, 3) for r in range(3)]
    assert three == [[0, 1], [2, 3], [4, 5]]  # 6 and 7 left to no one
    assert cores_for_local_rank([0], 1, 2) == [0]  # fewer CPUs than ranks: unchanged


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs Linux affinity and two CPUs")
def test_pins_every_thread_of_the_process(monkeypatch):
    before = os.sched_getaffinity(0)
    allowed = sorted(before)
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        cores = pin_to_cores()
        assert cores == allowed[len(allowed) // 2:]
        assert os.sched_getaffinity(0) == set(cores)
        assert os.sched_getaffinity(other.native_id) == set(cores)  # a thread made before the call too
    finally:
        stop.set()
        other.join()
        for tid in os.listdir("/proc/self/task"):
            try:
                os.sched_setaffinity(int(tid), before)
            except OSError:
                pass


def test_pin_cpus_reaches_the_ranks_and_leaves_nsys_off(monkeypatch):
    """`bench train --pin-cpus`: the request pins, the ranks are told to pin, and nothing runs under nsys."""
    import json
    from pathlib import Path

    from topowise.measure import launcher, train

    request = train.make_request(model="tiny", strategies="ddp", device="cpu", nproc=2, seq_len=16, pin_cpus=True)
    assert (request.pin_cpus, request.nsys) == (True, False)
    plain = train.make_request(model="tiny", strategies="ddp", device="cpu", nproc=2, seq_len=16)
    assert (plain.pin_cpus, plain.nsys) == (False, False)

    told = []

    def launch(entry, config, nproc, env):  # as a rank inside a job: note the config, leave a result
        told.append(config)
        Path(config["result_dir"], "rank0.json").write_text(json.dumps({"status": "ok"}))

    monkeypatch.setattr(launcher, "in_job", lambda: True)
    monkeypatch.setattr(launcher, "launch", launch)
    monkeypatch.setenv("RANK", "0")
    assert train.run_one(request.cases[0], request) == {"status": "ok"}
    assert told[0]["pin_cpus"] is True and told[0]["nvtx"] is False
