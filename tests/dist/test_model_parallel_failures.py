"""A pipeline rank killed mid-step (SIGKILL, as the out-of-memory killer sends): the record names the rank, its
stage and the likely cause, and the sweep goes on to the next strategy."""

import os

import mesh_faults
import pytest

from topowise.measure import train

pytest.importorskip("torch")


@pytest.mark.dist
def test_a_killed_pipeline_rank_is_recorded_with_its_stage_and_the_sweep_goes_on(monkeypatch, tmp_path):
    monkeypatch.setenv(mesh_faults.KILL, "ddp:1")  # the last stage's rank, in its second step
    path = os.environ.get("PYTHONPATH", "")
    monkeypatch.setenv("PYTHONPATH", os.path.dirname(mesh_faults.__file__) + (os.pathsep + path if path else ""))
    request = train.make_request(model="tiny", strategies="ddp,zero1", micro_batch=2, seq_len=32, steps=2, warmup=0,
                                 device="cpu", nproc=2, timeout_s=120, out=str(tmp_path / "train.jsonl"),
                                 mesh={"pp": 2, "grad_accum": 2})
    records, _ = train.bench_train(request, entry=mesh_faults.ENTRY)
    killed, survivor = records
    assert killed["status"] == "error" and killed["exit_signal"] == 9
    assert killed["failed_rank"] == 1 and killed["failed_stages"] == [1] and killed["failed_mesh"]["pp"] == 1
    assert "pipeline stage 1" in killed["error"] and "out of memory" in killed["error"]
    assert survivor["status"] == "ok" and survivor["losses"]
    assert (tmp_path / "train.jsonl").read_text().count("\n") == 2  # both appended
