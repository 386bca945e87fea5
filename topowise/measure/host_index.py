"""The host speed index: a second of fixed host work, timed.

An eager training step is mostly the host issuing kernels: Python, PyTorch's dispatcher, and (on a
GPU) the CUDA driver's launch path. The index times exactly that path on tiny tensors, so that the
GPU never holds the host back: `rounds` rounds of `ops` in-place adds on a 16-element tensor, each
round synchronised, and reports the median microseconds per op. On a GPU it times CUDA launches,
else CPU dispatch; `path` says which.

bench train records both paths in every GPU run, timed once per process (`index_once`), beside its
host phase times. Whether the index tracks the host's drift between launches was measured, not assumed
(docs/calibration.md, "The host speed index"): not well enough to rescale the host terms by, so no
term of the cost model uses it; the records keep it for a later model.

    python -m topowise.measure.host_index [--device cuda|cpu] [--json]
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass

OPS = 5000  # per round: ~20-40 ms of launches on a current server CPU
ROUNDS = 31  # the median of these: about a second in all
_ONCE: dict[str, HostIndex] = {}  # device -> this process's index (index_once)


@dataclass(frozen=True)
class HostIndex:
    """Median microseconds per tiny op over the rounds, their spread, and what was timed."""

    us_per_op: float
    spread: float  # interquartile range / median of the rounds
    path: str  # "cuda-launch" or "cpu-dispatch"
    rounds: int
    ops: int
    cpu: int | None  # the core the last round ran on (Linux), for the record

    def to_dict(self) -> dict:
        return asdict(self)


def measure_host_index(device: str | None = None, ops: int = OPS, rounds: int = ROUNDS) -> HostIndex:
    """Time `rounds` x `ops` in-place adds on a 16-element tensor on `device` (default: cuda when there
    is one). Two untimed rounds first (lazy initialisation, caches)."""
    import torch

    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    x = torch.zeros(16, device=device)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    times = []
    for r in range(rounds + 2):
        sync()
        t0 = time.perf_counter()
        for _ in range(ops):
            x.add_(1.0)
        sync()
        if r >= 2:
            times.append((time.perf_counter() - t0) / ops)
    times.sort()
    median = statistics.median(times)
    spread = (times[(3 * len(times)) // 4] - times[len(times) // 4]) / median
    cpu = current_cpu()
    return HostIndex(us_per_op=median * 1e6, spread=spread,
                     path="cuda-launch" if device.startswith("cuda") else "cpu-dispatch",
                     rounds=rounds, ops=ops, cpu=cpu)


def index_once(device: str) -> HostIndex:
    """The index on `device`, timed at the first call in this process and reused: a calibration runs
    many cases in one process and should not pay a second per case."""
    if device not in _ONCE:
        _ONCE[device] = measure_host_index(device)
    return _ONCE[device]


def current_cpu() -> int | None:
    """The core this process last ran on (field 39 of /proc/self/stat), None off Linux."""
    try:
        with open("/proc/self/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[36])
    except (OSError, ValueError, IndexError):
        return None


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m topowise.measure.host_index", description=__doc__.split("\n")[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default=None)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    index = measure_host_index(args.device)
    if args.json:
        print(json.dumps(index.to_dict()))
    else:
        print(f"host index: {index.us_per_op:.3f} us per op ({index.path}, spread {100 * index.spread:.1f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
