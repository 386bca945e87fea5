"""One rank of a measuring run (launched by calibrate/launch.py): the comm sweep, the matrix rate,
the memory-bound passes and the training runs, with the real bench code of measure/.

The only calibrate module that imports torch.
"""

from __future__ import annotations

import gc
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from topowise.calibrate.fit import human_bytes
from topowise.expectations import train_expected
from topowise.measure import passes, steps, train
from topowise.measure.collectives import run_collectives
from topowise.measure.comm import CommConfig
from topowise.measure.machine import live_topology
from topowise.measure.rank import destroy_process_group, init_distributed
from topowise.measure.records import append_record, fabric_label
from topowise.units import MIB


def rank_main(config: dict) -> None:
    """One rank: the comm sweep (bench comm's code), the matrix rate, then the training runs (bench
    train's code, in this process group, one case after another)."""
    rank = init_distributed(config["backend"], float(config.get("timeout_s", 600)))
    beat = config.get("heartbeat")
    label = fabric_label(config["fabric"], "cpu" if config["backend"] == "gloo" else "cuda")

    def say(text: str) -> None:
        if rank.is_main:
            print(f"  {label}: {text}", file=sys.stderr, flush=True)  # stdout stays clean for --json
            if beat:
                Path(beat).write_text(text)

    try:
        if config.get("comm"):
            cfg = CommConfig.from_dict(config["comm"])
            run_collectives(cfg, rank, on_record=lambda r: say(
                f"{r['op']} {human_bytes(r['bytes'])}: busbw {r['busbw_gbps']:.1f} GB/s"))
        rate, n = matmul_rate(rank.device)
        if rank.is_main and rate:
            append_record(config["matmul_out"], {"kind": "matmul", "device": rank.device, "dtype": "bfloat16", "n": n,
                                                 "flops_per_s": rate, "fabric": config["fabric"],
                                                 "world_size": rank.world_size})
            say(f"bf16 {n}^3 matrix product: {rate / 1e12:.3g} TFLOP/s")
        if config.get("passes") and rank.device.startswith("cuda"):
            measure_passes(config["passes"], rank, say)
        topology = live_topology() if rank.device.startswith("cuda") else None  # for the records' predictions
        for req in config.get("train", []):
            request = train.make_request(**req)
            left = allocated_now(rank.device)
            if left > 64 * MIB:
                say(f"note: {left / MIB:.0f} MiB still allocated before {req['model']} {req['strategies']}: it counts "
                    "in that run's peak memory")

            def on_event(event, case, record, request=request):
                if event == "done":
                    ok = record["status"] == "ok"
                    say(f"{request.spec.name} {case.run.strategy} mb {case.run.micro_batch} seq {case.run.seq_len}: "
                        + (f"{record['step_time_s'] * 1e3:.1f} ms/step" if ok else f"{record['status']} "
                           f"({record.get('error', '')[:120]})"))

            train.bench_train(request, lambda case: train_expected(case, topology), on_event)
    except BaseException as exc:  # noqa: BLE001 - one clear line, and no waiting on peers stuck in a collective
        if isinstance(exc, SystemExit) and not exc.code:
            raise
        sys.stderr.write(f"topowise: error: rank {rank.rank}: {type(exc).__name__}: {exc}\n")
        sys.stderr.flush()
        os._exit(1)  # torchrun then stops the other ranks
    finally:
        destroy_process_group()


def measure_passes(cfg: dict, rank, say: Callable[[str], None]) -> None:
    """Every rank times the two passes at once (as in training); rank 0 records its own."""
    for record in (passes.adamw_pass(cfg["model"]), passes.loss_pass(cfg["vocab"], cfg["tokens"])):
        torch.cuda.empty_cache()
        if rank.is_main:
            append_record(cfg["out"], dict(record, device=rank.device, world_size=rank.world_size))
            say(f"{record['pass']} alone: {record['bytes_per_s'] / 1e9:.0f} GB/s")


def allocated_now(device: str) -> int:
    """Bytes the caching allocator holds for tensors right now (0 on CPU)."""
    if not device.startswith("cuda"):
        return 0
    gc.collect()
    return int(torch.cuda.memory_allocated())


def matmul_rate(device: str) -> tuple[float | None, int]:
    """The bf16 matrix product rate on this rank: bench train's measurement on a GPU; a small one on CPU."""
    if device.startswith("cuda"):
        return steps.measure_matmul_flops(), steps.MATMUL_N
    n, reps = 512, 5
    a, b = torch.randn(n, n, dtype=torch.bfloat16), torch.randn(n, n, dtype=torch.bfloat16)
    torch.mm(a, b)
    t0 = time.perf_counter()
    for _ in range(reps):
        torch.mm(a, b)
    return 2.0 * n**3 * reps / (time.perf_counter() - t0), n
