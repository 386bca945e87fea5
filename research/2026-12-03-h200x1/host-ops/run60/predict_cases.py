"""Each case of run61 as the model predicts it now (default profile, one GPU of h200-x2): step, host per phase,
host-bound flag and range, memory."""
import sys
sys.path.insert(0, '.')
from contextlib import contextmanager
from topowise.costmodel import step as step_mod
from topowise.costmodel.predict import predict
from topowise.costmodel.profile import default_profile
from topowise.models.spec import load_model
from topowise.run import Run
from topowise.topology import load_topology

CASES = [(m, s, mb, seq) for m in ("llama3.2-1b", "research/configs/qwen3-0.6b.json", "gpt2")
         for s in ("ddp", "zero2", "zero3") for mb, seq in ((1, 128),)]
CASES += [("research/configs/qwen3-0.6b.json", "ddp", 1, 4096), ("research/configs/qwen3-1.7b.json", "ddp", 1, 1024),
          ("research/configs/qwen3-1.7b.json", "zero3", 1, 1024), ("gpt2", "ddp", 4, 1024)]

@contextmanager
def without_the_term():
    saved = step_mod.extra_ops
    step_mod.extra_ops = lambda model, autocast, phase: 0.0
    try:
        yield
    finally:
        step_mod.extra_ops = saved

topo = load_topology("h200-x2")
for name, s, mb, seq in CASES:
    run = Run(load_model(name), (0,), s, micro_batch=mb, seq_len=seq)
    p = predict(run, topo, default_profile())
    with without_the_term():
        q = predict(run, topo, default_profile())
    host = "/".join(f"{ph.host_s * 1e3:.1f}" for ph in p.time.phases)
    gpu = "/".join(f"{ph.gpu_s * 1e3:.1f}" for ph in p.time.phases)
    lo, hi = p.step_time_range_s
    print(f"{name.split('/')[-1][:14]:14s} {s:5s} {mb}x{seq:<5d} now {p.step_time_s * 1e3:6.1f} ms [{lo * 1e3:.1f}-{hi * 1e3:.1f}] "
          f"host-bound {str(p.host_bound):5s} host f/b/o {host} gpu {gpu} | without the term {q.step_time_s * 1e3:6.1f} "
          f"({'host-bound' if q.host_bound else 'GPU-bound'}) | memory {p.memory.allocated_bytes / 2**30:.2f} GiB")
