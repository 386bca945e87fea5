"""Writes stuck_all_gather/: the flight-recorder dumps of 4 ranks (NCCL, one process group) where rank 2 stopped
after all-reduce #6 while ranks 0, 1 and 3 entered all-gather #7 and wait in it. The layout is PyTorch's
(torch/distributed/flight_recorder/components/builder.py lists the fields; a 2-rank gloo dump of torch 2.13
was read to confirm it): a pickled dict per rank, file nccl_trace_rank_<rank>. Run from the repository root."""

from __future__ import annotations

import pickle
from pathlib import Path

OUT = Path(__file__).parent / "stuck_all_gather"
PG_CONFIG = {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"}}


def entry(record: int, seq: int, op: str, state: str) -> dict:
    return {"record_id": record, "pg_id": 0, "process_group": ("0", "default_pg"), "collective_seq_id": seq,
            "p2p_seq_id": 0, "op_id": seq, "profiling_name": f"nccl:{op}", "time_created_ns": 1_000_000 * record,
            "input_sizes": [[1024, 4096]], "input_dtypes": ["BFloat16"], "output_sizes": [[4096, 4096]]
            if op == "all_gather" else [[1024, 4096]], "output_dtypes": ["BFloat16"], "state": state,
            "time_discovered_started_ns": None, "time_discovered_completed_ns": None, "retired": state == "completed",
            "timeout_ms": 600000, "is_p2p": False, "frames": []}


def dump(rank: int) -> dict:
    entries = [entry(i, i + 1, "all_reduce", "completed") for i in range(6)]
    if rank != 2:
        entries.append(entry(6, 7, "all_gather", "started"))
    return {"version": "2.10", "pg_config": PG_CONFIG, "pg_status": {}, "entries": entries}


if __name__ == "__main__":
    OUT.mkdir(exist_ok=True)
    for rank in range(4):
        (OUT / f"nccl_trace_rank_{rank}").write_bytes(pickle.dumps(dump(rank), protocol=4))
