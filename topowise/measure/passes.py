"""The two largest memory-bound passes of a training step, each timed alone on this GPU.

- torch's fused AdamW step over fp32 parameters of a model's shapes: reads parameter, gradient,
  exp_avg, exp_avg_sq (16 bytes) and writes parameter, exp_avg, exp_avg_sq (12): 28 bytes per parameter.
- the fp32 cross-entropy over bf16 logits, forward and backward to the logits: 48 bytes per logit
  (costmodel/step.py counts them).

bytes / seconds is the HBM rate such a streaming kernel reaches; `calibrate` takes it as the cost
model's hbm_efficiency (instead of fitting it to step times, where it trades off against compute).
"""

from __future__ import annotations

import statistics

ADAMW_BYTES_PER_PARAM = 28
LOSS_BYTES_PER_LOGIT = 48


def time_cuda(fn, reps: int = 10, warmup: int = 3) -> float:
    """Median seconds of `fn()` on the current CUDA stream (events around each call)."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def adamw_pass(model_name: str) -> dict:
    """Fused AdamW over fp32 parameters shaped as `model_name`'s."""
    import torch

    from topowise.models.spec import load_model
    from topowise.models.transformer import Transformer

    with torch.device("meta"):
        shapes = [p.shape for p in Transformer(load_model(model_name), 128).parameters()]
    params = [torch.nn.Parameter(torch.randn(s, device="cuda")) for s in shapes]
    for p in params:
        p.grad = torch.randn_like(p)
    opt = torch.optim.AdamW(params, lr=1e-5, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    n = sum(p.numel() for p in params)
    seconds = time_cuda(opt.step)
    del opt, params
    torch.cuda.empty_cache()
    nbytes = ADAMW_BYTES_PER_PARAM * n
    return {"kind": "hbm_pass", "pass": "fused_adamw", "model": model_name, "params": n, "tensors": len(shapes),
            "bytes": nbytes, "seconds": seconds, "bytes_per_s": nbytes / seconds}


def loss_pass(vocab: int, tokens: int) -> dict:
    """bf16 logits -> fp32 cross-entropy, forward and backward to the bf16 logits (the caller empties
    the CUDA cache afterwards to hand the memory back)."""
    import torch
    import torch.nn.functional as F

    logits = torch.randn(tokens, vocab, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    target = torch.randint(0, vocab, (tokens,), device="cuda")

    def step():
        F.cross_entropy(logits.float(), target).backward()
        logits.grad = None

    seconds = time_cuda(step)
    nbytes = LOSS_BYTES_PER_LOGIT * tokens * vocab
    return {"kind": "hbm_pass", "pass": "cross_entropy", "vocab": vocab, "tokens": tokens, "bytes": nbytes,
            "seconds": seconds, "bytes_per_s": nbytes / seconds}
