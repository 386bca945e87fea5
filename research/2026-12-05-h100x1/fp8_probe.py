"""fp8 against bf16 on one GPU: GEMM rates at the shapes of Llama linears, the cost of the casts, and
whole training steps of the bench model with torchao's float8 recipes. One record per case to
$OUT/fp8.jsonl; a failing case is recorded with its cause and the run goes on."""
import json
import os
import sys
import time
import traceback

import torch

OUT = os.environ.get("OUT", ".")
RECORDS = os.path.join(OUT, "fp8.jsonl")


def record(**row):
    row.update(when=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), gpu=torch.cuda.get_device_name(),
               torch=torch.__version__)
    with open(RECORDS, "a") as f:
        f.write(json.dumps(row) + "\n")
    print(json.dumps(row), flush=True)


def timed(fn, reps=50):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps / 1e3


def gemms():
    # (name, M tokens, K, N): llama3.2-1b (2048/8192), llama3.1-8b (4096/14336), llama3.1-70b (8192/28672) per-TP-1
    shapes = [("1b-qkvo", 8192, 2048, 2048), ("1b-up", 8192, 2048, 8192), ("1b-down", 8192, 8192, 2048),
              ("8b-q", 8192, 4096, 4096), ("8b-up", 8192, 4096, 14336), ("8b-down", 8192, 14336, 4096),
              ("70b-up", 8192, 8192, 28672), ("70b-down", 8192, 28672, 8192), ("sq-8192", 8192, 8192, 8192)]
    f8 = torch.float8_e4m3fn
    for name, m, k, n in shapes:
        try:
            a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
            flops = 2 * m * k * n
            t_bf16 = timed(lambda: a @ b.t())
            a8, b8 = a.to(f8), b.to(f8)
            one = torch.ones((), device="cuda")
            t_tensor = timed(lambda: torch._scaled_mm(a8, b8.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16))
            sa = torch.ones(m, 1, device="cuda")
            sb = torch.ones(1, n, device="cuda")
            try:
                t_row = timed(lambda: torch._scaled_mm(a8, b8.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16))
            except Exception as exc:  # rowwise needs a newer cuBLAS/CUTLASS path
                t_row = None
                record(case="gemm-rowwise", shape=name, error=repr(exc)[:300])
            # the cast a float8 linear pays per operand: amax, scale, convert
            t_cast = timed(lambda: (a.abs().amax(), (a * 2.0).to(f8)))
            record(case="gemm", shape=name, m=m, k=k, n=n, bf16_tflops=flops / t_bf16 / 1e12,
                   fp8_tensorwise_tflops=flops / t_tensor / 1e12,
                   fp8_rowwise_tflops=(flops / t_row / 1e12) if t_row else None,
                   cast_ms=t_cast * 1e3, cast_bytes=a.numel() * 2, cast_gbps=a.numel() * 2 / t_cast / 1e9)
        except Exception as exc:
            record(case="gemm", shape=name, error=repr(exc)[:300])
        torch.cuda.empty_cache()


def train(model_name, recipe, compile_, mb, seq, steps=12):
    from topowise.api import load_model
    from topowise.models.transformer import build_model
    from topowise.measure.strategies import apply_compile
    torch.manual_seed(0)
    torch.cuda.reset_peak_memory_stats()
    spec = load_model(model_name)
    model = build_model(spec, seq, "cuda", 0).to(torch.bfloat16)
    if recipe != "bf16":
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training
        config = Float8LinearConfig.from_recipe_name(recipe)
        # the output projection stays in bf16, as torchtitan does
        convert_to_float8_training(model, config=config, module_filter_fn=lambda mod, fqn: fqn != "output")
    if compile_:
        apply_compile(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    tokens = torch.randint(0, spec.vocab_size, (mb, seq + 1), device="cuda")
    losses, times = [], []
    for step in range(steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        logits = model(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())
    steady = sorted(times[4:])[len(times[4:]) // 2]
    record(case="train", model=model_name, recipe=recipe, compile=compile_, micro_batch=mb, seq_len=seq,
           step_s=steady, tokens_per_s=mb * seq / steady, peak_gib=torch.cuda.max_memory_allocated() / 2**30,
           reserved_gib=torch.cuda.max_memory_reserved() / 2**30, losses=[round(x, 4) for x in losses],
           n_params=sum(p.numel() for p in model.parameters()))
    del model, opt
    torch.cuda.empty_cache()


if __name__ == "__main__":
    what = sys.argv[1:] or ["gemm", "train"]
    if "gemm" in what:
        gemms()
    if "train" in what:
        try:
            import torchao
            record(case="torchao", version=torchao.__version__)
        except Exception as exc:
            record(case="torchao", error=repr(exc)[:300])
        for model_name, mb, seq in [("llama3.2-1b", 4, 2048), ("llama3.1-8b", 1, 4096)]:
            for compile_ in (True, False):
                for recipe in ("bf16", "tensorwise", "rowwise"):
                    try:
                        train(model_name, recipe, compile_, mb, seq)
                    except Exception as exc:
                        record(case="train", model=model_name, recipe=recipe, compile=compile_, micro_batch=mb,
                               seq_len=seq, error=repr(exc)[:400], where=traceback.format_exc()[-600:])
                        torch.cuda.empty_cache()
