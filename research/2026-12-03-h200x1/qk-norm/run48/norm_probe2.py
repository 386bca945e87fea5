"""Qwen3's q/k norms in place: qkv's output split, [q and k RMS-normalised per head], rotary, v copied, as
topowise/models/transformer.py runs them; forward and backward timed with and without the norms, the difference
per element of q and k, and as bytes at the HBM datasheet rate (4.8 TB/s)."""
import torch
import torch.nn.functional as F

from topowise.models.transformer import rotary_tables, rotate_complex

torch.manual_seed(0)
for H, KV, D, b, s in ((16, 8, 128, 4, 4096), (32, 8, 128, 2, 4096), (16, 8, 128, 1, 8192)):
    cos, sin = rotary_tables(s, D, device="cuda")
    turn = torch.complex(cos[:, None], sin[:, None])
    for autocast, wdt in ((True, torch.float32), (False, torch.bfloat16)):
        qkv = torch.randn(b, s, H + 2 * KV, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        qw = torch.ones(D, device="cuda", dtype=wdt, requires_grad=True)
        kw = torch.ones(D, device="cuda", dtype=wdt, requires_grad=True)
        grads = [torch.randn(b, s, n, D, device="cuda", dtype=torch.bfloat16) for n in (H, KV, KV)]

        def step(norm):
            with torch.autocast("cuda", torch.bfloat16, enabled=autocast):
                q, k, v = qkv.split([H, KV, KV], dim=2)
                if norm:
                    q, k = F.rms_norm(q, (D,), qw, 1e-6), F.rms_norm(k, (D,), kw, 1e-6)
                q, k, v = rotate_complex(q, turn), rotate_complex(k, turn), v.contiguous()
            torch.autograd.backward([q.to(torch.bfloat16), k.to(torch.bfloat16), v], grads)

        times = {}
        for norm in (False, True, False, True):
            for _ in range(3):
                step(norm)
            torch.cuda.synchronize()
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            for _ in range(20):
                step(norm)
            e1.record()
            torch.cuda.synchronize()
            times.setdefault(norm, []).append(e0.elapsed_time(e1) / 20 * 1e-3)
        without, with_ = min(times[False]), min(times[True])
        elements = b * s * (H + KV) * D
        print(f"heads {H}/{KV} x {D}, {b}x{s}, {'autocast, fp32 weights' if autocast else 'bf16'}: "
              f"without {1e3 * without:.3f} ms, with {1e3 * with_:.3f} ms, norms {1e3 * (with_ - without):.3f} ms = "
              f"{(with_ - without) / elements * 4.8e12:.0f} bytes per element at 4.8 TB/s "
              f"(rounds {', '.join(f'{1e3 * t:.3f}' for t in times[True])} with)")
