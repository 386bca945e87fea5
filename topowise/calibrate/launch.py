"""Measuring a plan on this machine: one launch per fabric, every rank running calibrate/rank.py.

The records of a measuring run land in one folder: meta.json (fingerprint, topology, plan) and a JSONL
file per kind of record, so the run can be re-fitted or re-validated offline.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable
from pathlib import Path

from topowise.calibrate.cases import Case, Plan
from topowise.errors import UsageError
from topowise.expectations import with_expected_busbw
from topowise.measure import gpu_clocks, launcher
from topowise.measure.comm import CommConfig
from topowise.measure.records import fabric_label, load_records
from topowise.run import mode_of_flag

RECORD_FILES = {"collective": "collectives.jsonl", "train": "train.jsonl", "matmul": "matmul.jsonl",
                "hbm_pass": "passes.jsonl", "encryption": "encryption.jsonl"}  # encryption: the parent's (crypto.py)
META_FILE = "meta.json"
ENTRY = "topowise.calibrate.rank:rank_main"


def measure(plan: Plan, nproc: int, records_dir: Path, *, timeout_s: float = 600.0,
            progress: Callable[[str], None] | None = None, topology=None) -> list[str]:
    """Run `plan` on this machine; append every record to records_dir/{collectives,train,matmul}.jsonl.

    A fabric whose launch fails or hangs does not stop the next one (GPU time is dear: what was
    measured is fitted); the problems are returned, one line each."""
    records_dir.mkdir(parents=True, exist_ok=True)
    backend = "nccl" if plan.device == "cuda" else "gloo"
    problems: list[str] = []
    for fabric in plan.fabrics:
        # a mesh case runs where the processes divide into its model-parallel degrees (tp2 x pp2 needs 4)
        cases = [c for c in plan.cases if c.fabric == fabric and c.runs_on(nproc)]
        if not cases and not plan.comm_ops:
            continue
        config = rank_config(plan, fabric, cases, nproc, records_dir, backend, timeout_s, topology)
        env = {"PYTORCH_CUDA_ALLOC_CONF": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")}
        if fabric == "pcie":
            env["NCCL_P2P_DISABLE"] = "1"  # only this; NCCL_NVLS_ENABLE and friends pass through untouched
        where = "gloo" if fabric_label(fabric, plan.device) == "gloo" else f"fabric {fabric}"
        heartbeat = records_dir / f".heartbeat.{fabric}"
        heartbeat.write_text("start")
        if progress:
            progress(f"{fabric_label(fabric, plan.device)}: {len(plan.comm_sizes) * len(plan.comm_ops)} collective "
                     f"cases, {len(cases)} training runs")
        # the GPUs' clocks over the training runs, sampled here so that the ranks' timing is not touched
        with gpu_clocks.ClockSampler() if plan.device == "cuda" else contextlib.nullcontext() as clocks:
            status = launcher.launch(ENTRY, config, nproc=nproc, env=env, timeout_s=timeout_s,
                                     heartbeat=str(heartbeat))
        if clocks is not None:
            gpu_clocks.add_clocks_to_records(records_dir / RECORD_FILES["train"], clocks)
        heartbeat.unlink(missing_ok=True)
        if status == launcher.TIMED_OUT:
            problems.append(f"measuring on {where} stopped: no progress for {timeout_s:g} s (a hung "
                            "collective?); its records up to then are used")
        elif status != 0:
            problems.append(f"measuring on {where} failed (exit status {status}; the ranks' messages are "
                            "above); its records up to then are used")
        if progress and status != 0:
            progress(problems[-1])
    return problems


def rank_config(plan: Plan, fabric: str, cases: list[Case], nproc: int, records_dir: Path, backend: str,
                timeout_s: float, topology=None) -> dict:
    """The plain-JSON config every rank gets (a pure function). With the topology, each collective
    record carries the busbw the cost model expects of it."""
    comm = None
    if plan.comm_ops:
        cfg = CommConfig(ops=tuple(plan.comm_ops), sizes=tuple(plan.comm_sizes), dtype="float32",
                         warmup=plan.comm_warmup, iters=plan.comm_iters, backend=backend, fabric=fabric,
                         timeout_s=timeout_s, out=str(records_dir / RECORD_FILES["collective"]), graph="auto",
                         topology=topology.to_dict() if topology is not None else None)
        comm = with_expected_busbw(cfg, nproc).to_dict()
    # one bench-train request per case, so that the rank can check between cases that the last one
    # left no memory behind (it would count in the next one's max_memory_allocated)
    train = [{"model": c.model, "strategies": c.strategy, "micro_batch": c.micro_batch, "seq_len": c.seq_len,
              "steps": plan.steps, "warmup": plan.warmup, "checkpointing": mode_of_flag(c.activation_checkpointing),
              "selective_ac_option": c.selective_ac_option,
              "compile": c.compile, "fabric": fabric, "device": plan.device, "nproc": nproc, "timeout_s": timeout_s,
              "out": str(records_dir / RECORD_FILES["train"]),
              # a mesh case under the profiler: its record then carries its exposed communication by mesh
              # dimension and its pipeline's idle time, which validate compares dimension by dimension
              **({"mesh": c.mesh, "trace": str(records_dir / "traces" / case_folder(c))} if c.has_mesh else {})}
             for c in cases]
    passes = None
    if plan.hbm_passes and fabric == plan.fabrics[0]:  # a pass alone does not depend on the fabric
        passes = {"model": plan.hbm_passes[0], "vocab": plan.hbm_passes[1], "tokens": plan.hbm_passes[2],
                  "out": str(records_dir / RECORD_FILES["hbm_pass"])}
    return {"backend": backend, "fabric": fabric, "comm": comm, "train": train, "timeout_s": timeout_s,
            "passes": passes, "matmul_out": str(records_dir / RECORD_FILES["matmul"]),
            "heartbeat": str(records_dir / f".heartbeat.{fabric}")}


def case_folder(case: Case) -> str:
    """A mesh case's trace folder name: its words, as a file name."""
    return "".join(ch if ch.isalnum() or ch in "-." else "-" for ch in case.words()).strip("-")


def read_records_dir(folder: Path) -> tuple[list[dict], dict]:
    """Every record of a measuring run's folder, and its meta.json."""
    meta_path = folder / META_FILE
    if not meta_path.is_file():
        raise UsageError(f"{folder} holds no {META_FILE}: not a calibration records folder (written by "
                         "`topowise calibrate --records DIR`)")
    try:
        meta = json.loads(meta_path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:  # RecursionError: nested too deeply
        raise UsageError(f"{meta_path}: not readable JSON ({type(exc).__name__})") from None
    if not isinstance(meta, dict):
        raise UsageError(f"{meta_path}: a JSON object was expected, not {type(meta).__name__}")
    records = []
    for name in RECORD_FILES.values():
        records += load_records(folder / name)  # each through its record class: its version checked
    return records, meta
