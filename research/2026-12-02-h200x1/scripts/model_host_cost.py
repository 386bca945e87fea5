"""The host's cost of a training step, per bench transformer variant: a tiny Llama (8 blocks of width 64,
8 tokens) on one CPU thread, so that the step is nearly all operator dispatch and autograd bookkeeping,
the work a host-bound GPU step waits on.

    python research/2026-12-02-h200x1/scripts/model_host_cost.py [FILE.py ...]

Each FILE is a models/transformer.py variant (its build_model runs); none: the current model. Prints the
median step time over 50 steps after 10 warm-up steps, under autocast (bf16) as ddp runs.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from topowise.models.spec import ModelSpec  # noqa: E402

SPEC = ModelSpec("host-cost", "llama", 256, 64, 8, 4, 2, 128, False)


def build(path: str | None):
    if path is None:
        from topowise.models import transformer as module
    else:
        from vs_torchtitan import load_file  # the same loader the GPU comparison uses

        module = load_file(path)
    return module.build_model(SPEC, 16, "cpu", seed=0)


def step_seconds(model, steps: int = 50, warmup: int = 10) -> float:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    tokens = torch.randint(0, SPEC.vocab_size, (1, 9), generator=torch.Generator().manual_seed(0))
    times = []
    for _ in range(warmup + steps):
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(tokens[:, :-1])
        F.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten()).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times[warmup:])


def main() -> int:
    torch.set_num_threads(1)
    for path in sys.argv[1:] or [None]:
        seconds = step_seconds(build(path))
        print(f"{seconds * 1e3:7.2f} ms per step ({seconds * 1e6 / SPEC.num_layers:5.0f} us per block)  "
              f"{path or 'topowise/models/transformer.py'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
