"""The output layer's matmuls beside a block's, at the shapes training runs them, in TFLOP/s.

    python research/2026-12-02-h200x1/scripts/head_gemm.py --models llama3.2-1b,qwen2.5-0.5b --tokens 8192 --out DIR

The cost model prices every matmul at one fitted rate (Profile.compute_efficiency x the datasheet
peak). The output layer (tokens x hidden by hidden x vocabulary) is the largest GEMM of a small model
and may run nearer the peak than the blocks' smaller ones and attention. Per model: the output
layer's forward (x W^T) and its backward's two GEMMs (g W, g^T x), each block GEMM (q, k+v, o, gate,
up, down: forward and its two backward GEMMs), and a square 8192^3 for reference, all bf16 on random
data, each timed with CUDA events over `--reps` calls after `--warmup`. Appends one JSON line per model
to DIR/head_gemm.jsonl and prints a table last. Exit status 2 on bad input.
"""

from __future__ import annotations

import argparse
import datetime
import json
import socket
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import torch  # noqa: E402

from topowise import hardware  # noqa: E402
from topowise.errors import UsageError  # noqa: E402
from topowise.models.spec import load_model  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kernel_rates import checked_models  # noqa: E402

RESULTS_FILE = "head_gemm.jsonl"


def timed(fn, warmup: int, reps: int) -> float:
    """Seconds per call of `fn` on the GPU."""
    for _ in range(warmup):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / reps


def gemm_rates(m: int, k: int, n: int, warmup: int, reps: int) -> dict[str, float]:
    """FLOP/s of y = x W^T (x: m x k, W: n x k) and its backward's dx = g W and dW = g^T x."""
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    g = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    flops = 2.0 * m * k * n
    out = {"forward": flops / timed(lambda: x @ w.t(), warmup, reps),
           "grad_input": flops / timed(lambda: g @ w, warmup, reps),
           "grad_weight": flops / timed(lambda: g.t() @ x, warmup, reps)}
    return out


def block_gemms(model) -> dict[str, tuple[int, int]]:
    """(in, out) features of each matmul of one Llama block."""
    h, q, kv, i = model.hidden_size, model.num_heads * model.head_dim, model.num_kv_heads * model.head_dim, \
        model.intermediate_size
    return {"q": (h, q), "kv": (h, 2 * kv), "o": (q, h), "gate": (h, i), "up": (h, i), "down": (i, h)}


def measure_model(name: str, tokens: int, warmup: int, reps: int) -> dict:
    model = load_model(name)
    if model.family != "llama":
        raise UsageError(f"{name}: head_gemm.py measures Llama-style models (got family {model.family!r})")
    head = gemm_rates(tokens, model.hidden_size, model.vocab_size, warmup, reps)
    blocks, flops, seconds = {}, 0.0, 0.0
    for part, (k, n) in block_gemms(model).items():
        rates = gemm_rates(tokens, k, n, warmup, reps)
        blocks[part] = rates
        f = 2.0 * tokens * k * n
        flops += 3 * f
        seconds += sum(f / r for r in rates.values())
    head_flops = 3 * 2.0 * tokens * model.hidden_size * model.vocab_size
    head_seconds = sum(2.0 * tokens * model.hidden_size * model.vocab_size / r for r in head.values())
    return {"model": model.name, "tokens": tokens, "hidden": model.hidden_size, "vocab": model.vocab_size,
            "head": head, "head_mean": head_flops / head_seconds, "blocks": blocks, "blocks_mean": flops / seconds}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", required=True, help="comma-separated preset names or config.json paths")
    parser.add_argument("--tokens", type=int, default=8192, help="tokens per micro-batch (rows of the GEMMs)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    try:
        if not torch.cuda.is_available():
            raise UsageError("head_gemm.py needs a CUDA GPU")
        if args.tokens < 1 or args.reps < 1 or args.warmup < 0:
            raise UsageError("--tokens and --reps must be at least 1, --warmup at least 0")
        names = checked_models(args.models)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    gpu = torch.cuda.get_device_name()
    peak = hardware.gpu_spec(gpu).bf16_dense_flops
    square = gemm_rates(8192, 8192, 8192, args.warmup, args.reps)["forward"]
    rows = []
    for name in names:
        r = measure_model(name, args.tokens, args.warmup, args.reps)
        r.update({"gpu": gpu, "host": socket.gethostname(), "torch": torch.__version__, "peak_flops": peak,
                  "square_8192": square, "time": datetime.datetime.now(datetime.timezone.utc).isoformat()})
        with open(out / RESULTS_FILE, "a") as f:
            f.write(json.dumps(r) + "\n")
        rows.append(r)
    print(f"{gpu}, datasheet bf16 {peak / 1e12:.0f} TFLOP/s; 8192^3: {square / peak:.3f} of it")
    print(f"{'model':<26}{'tokens':>7}{'head fwd':>10}{'dx':>7}{'dW':>7}{'head':>7}{'blocks':>8}")
    for r in rows:
        h = r["head"]
        print(f"{r['model']:<26}{r['tokens']:>7}{h['forward'] / peak:>10.3f}{h['grad_input'] / peak:>7.3f}"
              f"{h['grad_weight'] / peak:>7.3f}{r['head_mean'] / peak:>7.3f}{r['blocks_mean'] / peak:>8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
