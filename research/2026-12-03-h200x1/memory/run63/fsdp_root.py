"""FSDP2 (bench train's apply_fsdp) on a 2-block Llama, tied and untied, zero2 and zero3: is the root unit's unsharded
storage allocated when the root's gradients are reduced (foreach_reduce)?"""
import os, sys
sys.path.insert(0, os.getcwd())
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29533", RANK="0", WORLD_SIZE="1")
import torch, torch.distributed as dist, torch.nn.functional as F
from dataclasses import replace
from torch.distributed.device_mesh import init_device_mesh
import torch.distributed.fsdp._fully_shard._fsdp_param_group as PG
from topowise.models.spec import load_model
from topowise.models.transformer import build_model
from topowise.measure.strategies import apply_fsdp
dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
DEV = "cuda" if torch.cuda.is_available() else "cpu"
if DEV == "cuda": torch.cuda.set_device(0)
print("torch", torch.__version__, DEV)
mesh = init_device_mesh(DEV, (1,))
orig = PG.foreach_reduce
seen = []
def spy(fsdp_params, grads, *a, **k):
    if DEV == "cuda":
        seen.append(("allocated", torch.cuda.memory_allocated()))
    seen.append([(fp._param_fqn, fp._unsharded_param.untyped_storage().size() if hasattr(fp, "_unsharded_param") else None) for fp in fsdp_params])
    return orig(fsdp_params, grads, *a, **k)
PG.foreach_reduce = spy
for tied in (True, False):
    for raf in (False, True):
        spec = replace(load_model("llama3.2-1b"), vocab_size=512, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=128, tied_embeddings=tied)
        m = build_model(spec, 32, DEV, seed=0)
        apply_fsdp(m, mesh, reshard_after_forward=raf)
        x = torch.randint(0, 512, (1, 17), device=DEV)
        for step in range(2):
            seen.clear()
            loss = F.cross_entropy(m(x[:, :-1]).flatten(0, 1).float(), x[:, 1:].flatten())
            loss.backward()
        root = seen[-1]
        if DEV == "cuda":
            print("  memory allocated at the root's reduce", seen[-2][1], "after the backward", torch.cuda.memory_allocated())
        print("tied" if tied else "untied", "zero3" if raf else "zero2", "root unit at its reduce:", [(n, s) for n, s in root])
dist.destroy_process_group()
