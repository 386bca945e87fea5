"""What F.rms_norm over each q and k head runs and keeps on CUDA: aten ops, saved tensors, GPU time (fwd+bwd)."""
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode


class Log(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        ins = [f"{tuple(a.shape)}:{str(a.dtype)[6:]}" for a in args if isinstance(a, torch.Tensor)]
        self.ops.append(f"{func} {' '.join(ins)}")
        return out


b, s, H, KV, D = 4, 4096, 16, 8, 128
for name, dt, ac, wdt in (("autocast, bf16 qkv output, fp32 weight (ddp)", torch.bfloat16, True, torch.float32),
                          ("no autocast, bf16 input and weight (fsdp2)", torch.bfloat16, False, torch.bfloat16),
                          ("autocast, fp32 input and weight (block norm)", torch.float32, True, torch.float32)):
    qkv = torch.randn(b, s, H + 2 * KV, D, device="cuda", dtype=dt, requires_grad=True)
    w = torch.ones(D, device="cuda", dtype=wdt, requires_grad=True)
    saved = []
    def pack(t):
        saved.append(f"{tuple(t.shape)}:{str(t.dtype)[6:]}:{t.untyped_storage().nbytes()}")
        return t
    log = Log()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), log, \
            torch.autocast("cuda", torch.bfloat16, enabled=ac):
        q = qkv[:, :, :H]
        y = F.rms_norm(q, (D,), w, 1e-6)
    blog = Log()
    with blog:
        y.float().sum().backward()
    print(f"== {name}: out {y.dtype}")
    print("  forward ops:", *log.ops, sep="\n    ")
    print("  saved:", *saved, sep="\n    ")
    print("  backward ops:", *blog.ops, sep="\n    ")
    # time: forward + backward of the norm alone
    g = torch.randn_like(y)
    for _ in range(3):
        with torch.autocast("cuda", torch.bfloat16, enabled=ac):
            y = F.rms_norm(qkv[:, :, :H], (D,), w, 1e-6)
        y.backward(g)
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(10):
        with torch.autocast("cuda", torch.bfloat16, enabled=ac):
            y = F.rms_norm(qkv[:, :, :H], (D,), w, 1e-6)
        y.backward(g)
    e1.record(); torch.cuda.synchronize()
    print(f"  fwd+bwd {e0.elapsed_time(e1) / 10:.3f} ms for {b * s} tokens x {H} heads x {D}")
