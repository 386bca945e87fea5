"""The matmuls and the attention of a Llama-style model timed alone, at the shapes a training step runs them.

    python research/2026-12-02-h200x1/scripts/kernel_rates.py --models llama3.2-1b,qwen2.5-0.5b --shapes 1x8192,2x4096 --out DIR
    python research/2026-12-02-h200x1/scripts/kernel_rates.py --fit DIR/kernel_rates.jsonl      # no GPU: the attention's rate form

The cost model prices the matmuls at one fitted rate and the attention at its own. This times what
those rates stand for, kernel by kernel, as the bench transformer issues them
(topowise/models/transformer.py), in bf16 on random data:
each block's five GEMMs (fused qkv, the output projection, gate, up, down) and the output layer, each
as its forward (x W^T) and its backward's two GEMMs (g W, g^T x); and the causal attention
(F.scaled_dot_product_attention, is_causal, enable_gqa where kv heads are fewer, q/k/v in the
(batch, seq, heads, head_dim) layout transposed, cuDNN's kernel first as the model asks), its forward
and its backward. Each is the GPU time of its kernels over `--reps` calls after `--warmup`, summed from
torch.profiler's device events (a small call's host time, which CUDA events around a loop would
count, does not). Every call reuses one set of inputs, which may stay in the L2 cache between calls;
with --cold the calls take their inputs in turn from enough sets that none is still cached, as in a
training step (on one H200 it changed nothing: research/2026-12-02-h200x1/clocks). Per model and
shape it writes one JSON line to DIR/kernel_rates.jsonl: every kernel's seconds and FLOPs (attention's
counted as topowise.costmodel.flops counts the flash kernel's work: causal, QK^T recomputed in backward),
and the totals of one step's matmul and attention work; with --blocks also one whole block's forward and
backward as DDP's step runs it (fp32 weights under autocast) and as FSDP2's (bf16 weights), kernel by kernel,
whose excess over its GEMMs and attention is the elementwise work; with --compile also the block compiled
(Inductor's fused kernels in place of the eager ones). Prints a table last. Exit status 2 on bad input.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import math
import socket
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from topowise import hardware  # noqa: E402
from topowise.costmodel.flops import FLASH_BACKWARD_SHARE, FLASH_FORWARD_SHARE  # noqa: E402
from topowise.errors import UsageError  # noqa: E402
from topowise.models.spec import load_model  # noqa: E402
from topowise.models.transformer import Block, _sdpa_kernels, rotary_tables  # noqa: E402

RESULTS_FILE = "kernel_rates.jsonl"


def input_sets(make, cold: bool) -> itertools.cycle:
    """The inputs of successive calls: one set, or with `cold` enough sets, taken in turn, that together
    they exceed twice the L2 cache, so that a call reads its inputs from HBM as a training step does
    (there the last call on these tensors was a whole layer ago), not from the cache its last call left
    them in."""
    first = make()
    if not cold:
        return itertools.cycle([first])
    size = sum(t.numel() * t.element_size() for t in first)
    n = min(64, 1 + math.ceil(2 * torch.cuda.get_device_properties(0).L2_cache_size / size))
    return itertools.cycle([first] + [make() for _ in range(n - 1)])


def gemm_seconds(m: int, k: int, n: int, warmup: int, reps: int, cold: bool = False) -> dict[str, float]:
    """Seconds of y = x W^T (x: m x k, W: n x k) and of its backward's dx = g W and dW = g^T x."""
    sets = input_sets(lambda: [torch.randn(m, k, device="cuda", dtype=torch.bfloat16),
                               torch.randn(n, k, device="cuda", dtype=torch.bfloat16),
                               torch.randn(m, n, device="cuda", dtype=torch.bfloat16)], cold)

    def call(fn):
        return lambda: fn(*next(sets))
    return {"forward": kernel_seconds(call(lambda x, w, g: x @ w.t()), warmup, reps),
            "grad_input": kernel_seconds(call(lambda x, w, g: g @ w), warmup, reps),
            "grad_weight": kernel_seconds(call(lambda x, w, g: g.t() @ x), warmup, reps)}


def attention_seconds(batch: int, seq: int, heads: int, kv_heads: int, head_dim: int, warmup: int,
                      reps: int, cold: bool = False) -> dict[str, float]:
    """Seconds of the causal attention's forward and of its backward (input gradients of q, k, v)."""
    def make(h):
        return torch.randn(batch, seq, h, head_dim, device="cuda", dtype=torch.bfloat16).transpose(1, 2) \
            .requires_grad_()
    gqa = {"enable_gqa": True} if kv_heads != heads else {}

    def attend(q, k, v, *_):
        with _sdpa_kernels():
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, **gqa)

    def make_set():  # q, k, v and the output's gradient, in the output's layout as autograd hands it over
        q, k, v = make(heads), make(kv_heads), make(kv_heads)
        with torch.no_grad():
            return q, k, v, torch.randn_like(attend(q, k, v))

    sets = input_sets(make_set, cold)
    with torch.no_grad():
        fwd = kernel_seconds(lambda: attend(*next(sets)), warmup, reps)

    def both():
        q, k, v, grad = next(sets)
        return torch.autograd.grad(attend(q, k, v), (q, k, v), grad)
    return {"forward": fwd, "backward": max(kernel_seconds(both, warmup, reps) - fwd, 0.0)}


def kernel_seconds(fn, warmup: int, reps: int, by_kernel: dict | None = None) -> float:
    """GPU time per call of `fn`: its kernels, copies and sets summed from the profiler's device events,
    so that a host slower than the GPU (a small kernel's launch, SDPA's dispatch) does not count.
    `by_kernel`: filled with seconds per call by kernel name."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(max(warmup, 1)):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    device = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    if by_kernel is not None:
        for e in device:
            by_kernel[e.name] = by_kernel.get(e.name, 0.0) + e.time_range.elapsed_us() / 1e6 / reps
    return sum(e.time_range.elapsed_us() for e in device) / 1e6 / reps


def block_seconds(model, batch: int, seq: int, warmup: int, reps: int, bf16: bool = False,
                  compiled: bool = False) -> dict:
    """GPU seconds of one bench transformer block's forward and backward as DDP's step runs it: fp32
    parameters and residual stream, autocast to bf16 (bench train's ddp and zero1); `bf16`: as FSDP2's
    runs it, parameters and residual stream in bf16, no autocast; `compiled`: the block under
    torch.compile as bench train --compile wraps it (the warm-up calls compile). With each kernel's
    seconds per call (forward alone, and forward with backward)."""
    block = Block(model).cuda()
    dtype = torch.bfloat16 if bf16 else torch.float32
    block = block.to(dtype)
    if compiled:
        torch._dynamo.reset()  # each model and precision compiled afresh, none evicted by a cache limit
        block = torch.compile(block, fullgraph=True)
        warmup = max(warmup, 2)
    x = torch.randn(batch, seq, model.hidden_size, device="cuda", dtype=dtype, requires_grad=True)
    cos, sin = rotary_tables(seq, model.head_dim, device="cuda")

    def forward():
        if bf16:
            return block(x, cos, sin)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return block(x, cos, sin)

    grad = torch.randn(batch, seq, model.hidden_size, device="cuda", dtype=dtype)
    fwd_kernels: dict = {}
    both_kernels: dict = {}
    fwd = kernel_seconds(forward, warmup, reps, fwd_kernels)
    both = kernel_seconds(lambda: torch.autograd.grad(forward(), [x] + list(block.parameters()), grad), warmup, reps,
                          both_kernels)
    return {"forward": fwd, "backward": both - fwd, "forward_kernels": fwd_kernels, "kernels": both_kernels}


def measure(name: str, batch: int, seq: int, warmup: int, reps: int, blocks: bool = False,
            cold: bool = False, compiled: bool = False) -> dict:
    model = load_model(name)
    if model.family != "llama":
        raise UsageError(f"{name}: kernel_rates.py times Llama-style blocks (got family {model.family!r})")
    h, i, hd = model.hidden_size, model.intermediate_size, model.head_dim
    q, kv = model.num_heads * hd, model.num_kv_heads * hd
    tokens = batch * seq
    shapes = {"qkv": (h, q + 2 * kv), "out": (q, h), "gate": (h, i), "up": (h, i), "down": (i, h)}
    gemms = {}
    for part, (k, n) in shapes.items():
        gemms[part] = {"flops": 2.0 * tokens * k * n, "seconds": gemm_seconds(tokens, k, n, warmup, reps, cold)}
    gemms["head"] = {"flops": 2.0 * tokens * h * model.vocab_size,
                     "seconds": gemm_seconds(tokens, h, model.vocab_size, warmup, reps, cold)}
    per_token = 12.0 * model.num_heads * hd * seq  # one layer's attention_flops_per_token
    attention = {"flops": {"forward": FLASH_FORWARD_SHARE * per_token * tokens,
                           "backward": FLASH_BACKWARD_SHARE * per_token * tokens},
                 "seconds": attention_seconds(batch, seq, model.num_heads, model.num_kv_heads, hd, warmup, reps,
                                               cold)}
    layers = model.num_layers
    block_gemm_s = sum(sum(g["seconds"].values()) for p, g in gemms.items() if p != "head")
    block_gemm_flops = sum(3 * g["flops"] for p, g in gemms.items() if p != "head")
    step = {"matmul_s": layers * block_gemm_s + sum(gemms["head"]["seconds"].values()),
            "matmul_flops": layers * block_gemm_flops + 3 * gemms["head"]["flops"],
            "attention_s": layers * sum(attention["seconds"].values()),
            "attention_flops": layers * sum(attention["flops"].values())}
    out = {"model": model.name, "micro_batch": batch, "seq_len": seq, "tokens": tokens, "layers": layers,
           "head_dim": hd, "l2": "cold" if cold else "warm", "gemms": gemms, "attention": attention, "step": step}
    if blocks:
        out["block"] = block_seconds(model, batch, seq, warmup, reps)
        out["block_bf16"] = block_seconds(model, batch, seq, warmup, reps, bf16=True)
        if compiled:
            out["block_compiled"] = block_seconds(model, batch, seq, warmup, reps, compiled=True)
            out["block_bf16_compiled"] = block_seconds(model, batch, seq, warmup, reps, bf16=True, compiled=True)
    torch.cuda.empty_cache()
    return out


def rest(r: dict, phase: str) -> float:
    """A block's GPU time in `phase` beyond its GEMMs and attention timed alone: the elementwise work."""
    parts = ("forward",) if phase == "forward" else ("grad_input", "grad_weight")
    gemm = sum(g["seconds"][k] for p, g in r["gemms"].items() if p != "head" for k in parts)
    return r["block"][phase] - gemm - r["attention"]["seconds"][phase]


def checked_models(text: str) -> list[str]:
    """The comma-separated model names of --models, each loaded once (a UsageError names a bad one)."""
    names = [n for n in text.split(",") if n]
    for n in names:
        load_model(n)
    return names


def head_dim_of(row: dict) -> int:
    """The row's head dim (rows written before it was recorded: from the model, a preset or one of
    research/configs, whose name is recorded as configs/NAME)."""
    if "head_dim" in row:
        return int(row["head_dim"])
    name = row["model"]
    if name.startswith("configs/"):
        name = str(Path(__file__).resolve().parents[2] / f"{name}.json")  # research/configs/NAME
    return load_model(name).head_dim


def fit_attention(rows: list[dict]) -> tuple[float, dict[int, float], float]:
    """(T0, {head dim: e}, rms relative error) of rate = peak e T / (T + T0) over the rows' attention
    (one T0 for all head dims; e per head dim by least squares of the relative time error)."""
    points = [(head_dim_of(r), r["seq_len"], r["step"]["attention_flops"] / r["step"]["attention_s"] / r["peak_flops"])
              for r in rows if "step" in r]
    best = None
    for offset in range(0, 4001, 5):
        err, effs = 0.0, {}
        for d in sorted({p[0] for p in points}):
            x = [1 + offset / t for h, t, _ in points if h == d]  # 1/rate = x / e
            y = [1 / rate for h, _, rate in points if h == d]
            inv = sum(a / b for a, b in zip(x, y)) / sum((a / b) ** 2 for a, b in zip(x, y))
            effs[d] = 1 / inv
            err += sum(((a * inv - b) / b) ** 2 for a, b in zip(x, y))
        if best is None or err < best[0]:
            best = (err, offset, effs)
    err, offset, effs = best
    return float(offset), effs, (err / len(points)) ** 0.5


def main() -> int:
    if sys.argv[1:2] == ["--fit"]:  # no GPU: the attention's rate form fitted to recorded rows
        try:
            rows = [json.loads(line) for f in sys.argv[2:] for line in Path(f).read_text().splitlines() if line]
            offset, effs, rms = fit_attention(rows)
        except (OSError, ValueError, KeyError, ZeroDivisionError, UsageError) as exc:
            print(f"error: --fit FILE...: {exc}", file=sys.stderr)
            return 2
        print(f"attention rate = peak x e x T / (T + {offset:.0f}); e by head dim: "
              + ", ".join(f"{d}: {e:.3f}" for d, e in effs.items()) + f"; rms relative error {100 * rms:.1f}%")
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", required=True, help="comma-separated preset names or config.json paths")
    parser.add_argument("--shapes", default="1x8192", help="comma-separated MICRO_BATCHxSEQ, e.g. 1x8192,2x4096")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--blocks", action="store_true",
                        help="also one whole block's forward and backward, under autocast and in bf16")
    parser.add_argument("--compile", action="store_true",
                        help="with --blocks, also the block under torch.compile, under autocast and in bf16")
    parser.add_argument("--cold", action="store_true",
                        help="each GEMM and attention call reads inputs that are not in the L2 cache (several "
                             "input sets taken in turn); without it every call reuses one set")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    try:
        if not torch.cuda.is_available():
            raise UsageError("kernel_rates.py needs a CUDA GPU")
        shapes = []
        for text in args.shapes.split(","):
            mb, _, seq = text.partition("x")
            if not (mb.isdigit() and seq.isdigit()) or int(mb) < 1 or int(seq) < 1:
                raise UsageError(f"--shapes: {text!r} is not MICRO_BATCHxSEQ (e.g. 2x4096)")
            shapes.append((int(mb), int(seq)))
        if args.reps < 1 or args.warmup < 0:
            raise UsageError("--reps must be at least 1, --warmup at least 0")
        if args.compile and not args.blocks:
            raise UsageError("--compile times compiled blocks: give --blocks too")
        names = checked_models(args.models)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    gpu = torch.cuda.get_device_name()
    peak = hardware.gpu_spec(gpu).bf16_dense_flops
    rows = []
    for name in names:
        for batch, seq in shapes:
            try:
                r = measure(name, batch, seq, args.warmup, args.reps, args.blocks, args.cold, args.compile)
            except torch.cuda.OutOfMemoryError as exc:
                r = {"model": name, "micro_batch": batch, "seq_len": seq, "status": "oom",
                     "error": str(exc).splitlines()[0]}
                torch.cuda.empty_cache()
            r.update({"gpu": gpu, "host": socket.gethostname(), "torch": torch.__version__, "peak_flops": peak,
                      "time": datetime.datetime.now(datetime.timezone.utc).isoformat()})
            with open(out / RESULTS_FILE, "a") as f:
                f.write(json.dumps(r) + "\n")
            rows.append(r)
    print(f"{gpu}, fraction of the datasheet bf16 peak ({peak / 1e12:.0f} TFLOP/s)")
    print(f"{'model':<26}{'shape':>8}{'matmuls':>9}{'attention':>11}{'attn fwd':>10}{'attn bwd':>10}"
          f"{'rest fwd ms':>12}{'rest bwd ms':>12}")
    for r in rows:
        if "step" not in r:
            print(f"{r['model']:<26}{r['micro_batch']}x{r['seq_len']:<6} {r['status']}")
            continue
        s, a = r["step"], r["attention"]
        print(f"{r['model']:<26}{r['micro_batch']:>3}x{r['seq_len']:<5}{s['matmul_flops'] / s['matmul_s'] / peak:>8.3f}"
              f"{s['attention_flops'] / s['attention_s'] / peak:>11.3f}"
              f"{a['flops']['forward'] / a['seconds']['forward'] / peak:>10.3f}"
              f"{a['flops']['backward'] / max(a['seconds']['backward'], 1e-12) / peak:>10.3f}"
              + (f"{rest(r, 'forward') * 1e3:>12.3f}{rest(r, 'backward') * 1e3:>12.3f}" if "block" in r else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
