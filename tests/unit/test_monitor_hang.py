"""`monitor hang`: the rank that never entered the collective the others wait in, from flight-recorder dumps."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import pytest

from topowise.cli.main import main
from topowise.errors import UsageError
from topowise.monitor import hang

STUCK = Path(__file__).parents[1] / "data" / "flight_recorder" / "stuck_all_gather"


def test_the_rank_stuck_before_all_gather_is_named():
    dumps, prefix = hang.read_dumps(STUCK)
    assert prefix == "nccl_trace_rank_" and sorted(dumps) == [0, 1, 2, 3]
    (group,) = hang.analyze(dumps)
    assert group.stuck_at.seq == 7 and group.stuck_at.op == "nccl:all_gather"
    assert [(rank, call.seq) for rank, call in group.behind] == [(2, 6)]
    assert group.waiting == (0, 1, 3) and group.missing == ()


def test_a_missing_rank_file_is_said_not_read_as_slow(tmp_path):
    folder = tmp_path / "dumps"
    shutil.copytree(STUCK, folder)
    (folder / "nccl_trace_rank_2").unlink()
    (group,) = hang.analyze(hang.read_dumps(folder)[0])
    assert group.missing == (2,) and group.behind == ()
    lines = hang.verdict([group])
    assert any("no dump from rank(s) 2" in line for line in lines)
    assert not any("never entered" in line for line in lines)


def test_all_ranks_inside_one_collective_is_a_hang_inside_it(tmp_path):
    folder = tmp_path / "dumps"
    folder.mkdir()
    for rank in range(4):
        dump = pickle.loads((STUCK / "nccl_trace_rank_0").read_bytes())  # rank 0 entered #7
        (folder / f"nccl_trace_rank_{rank}").write_bytes(pickle.dumps(dump))
    lines = hang.verdict(hang.analyze(hang.read_dumps(folder)[0]))
    assert len(lines) == 1 and "none completed it" in lines[0]


def test_a_pickle_that_holds_objects_is_refused(tmp_path):
    folder = tmp_path / "dumps"
    folder.mkdir()
    (folder / "nccl_trace_rank_0").write_bytes(pickle.dumps({"entries": [Path("/")]}))
    with pytest.raises(UsageError, match="not a flight-recorder dump"):
        hang.read_dumps(folder)


def test_cli(capsys):
    assert main(["monitor", "hang", str(STUCK)]) == 0
    out = capsys.readouterr().out
    assert "rank 2 never entered #7 nccl:all_gather" in out
    assert main(["monitor", "hang", "--json", str(STUCK)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["groups"][0]["behind"][0][0] == 2
    assert main(["monitor", "hang", str(STUCK / "nowhere")]) == 2
