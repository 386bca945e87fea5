"""The GPU-pair matrix and single-GPU copies, measured (rank side; topowise.measure.comm reads them back).

- copy: `dst.copy_(src)` between cuda:i and cuda:j in one process (the copy engines over NVLink or
  PCIe P2P; staged through the host when P2P is off). Needs only torch, no process group.
- nccl: NCCL send/recv between ranks i and j of the running job (each rank owns one GPU).
Unidirectional: i sends to j. Bidirectional: i and j send to each other at once; GB/s counts both
directions. Host copies (pinned memory) and a copy within one GPU cover the single-GPU case.
"""

from __future__ import annotations

import time


def _record(method: str, src: int, dst: int, mode: str, nbytes: int, t: float, world: int) -> dict:
    moved = nbytes * (2 if mode == "bi" else 1)
    return {"kind": "p2p", "method": method, "src": src, "dst": dst, "mode": mode, "bytes": nbytes,
            "world_size": world, "time_s": t, "gbps": round(moved / t / 1e9, 3) if t > 0 else 0.0,
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def copy_matrix(devices: list[int], nbytes: int, *, iters: int = 10, warmup: int = 2) -> list[dict]:
    """Device-to-device copy bandwidth for every ordered pair (uni) and every pair (bi), in this process."""
    import torch

    n = len(devices)
    count = max(1, nbytes // 4)
    bufs = {d: (torch.empty(count, dtype=torch.float32, device=f"cuda:{d}"),
                torch.empty(count, dtype=torch.float32, device=f"cuda:{d}")) for d in devices}
    out = []
    for i in devices:
        for j in devices:
            if i == j:
                continue
            src, dst = bufs[i][0], bufs[j][1]
            # Warm-up and timed copies on the same (destination's) stream: the first copy on a stream
            # pays for peer mappings, which must not land in the timed loop.
            with torch.cuda.device(j):
                for _ in range(warmup):
                    dst.copy_(src)
                _sync(devices)
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(iters):
                    dst.copy_(src)
                end.record()
                end.synchronize()
            out.append(_record("copy", i, j, "uni", count * 4, start.elapsed_time(end) / 1e3 / iters, n))
    for a_i, a in enumerate(devices):
        for b in devices[a_i + 1:]:
            ab, ba = (bufs[a][0], bufs[b][1]), (bufs[b][0], bufs[a][1])
            for _ in range(warmup):
                ab[1].copy_(ab[0]), ba[1].copy_(ba[0])
            _sync(devices)
            t0 = time.perf_counter()
            for _ in range(iters):
                ab[1].copy_(ab[0], non_blocking=True)
                ba[1].copy_(ba[0], non_blocking=True)
            _sync([a, b])
            t = (time.perf_counter() - t0) / iters
            out.append(_record("copy", a, b, "bi", count * 4, t, n))
            out.append(_record("copy", b, a, "bi", count * 4, t, n))
    del bufs
    return out


def sendrecv_matrix(rank, nbytes: int, *, iters: int = 10, warmup: int = 2, physical=None) -> list[dict]:
    """NCCL (or gloo) send/recv for every ordered pair of ranks; every rank calls it, rank 0 gets the list.
    `physical` maps rank -> GPU index for the records (identity when None)."""
    import torch
    import torch.distributed as dist

    world, me = rank.world_size, rank.rank
    device = torch.device(rank.device)
    cuda = device.type == "cuda"
    count = max(1, nbytes // 4)
    send = torch.ones(count, dtype=torch.float32, device=device)
    recv = torch.empty(count, dtype=torch.float32, device=device)
    name = (lambda r: r) if physical is None else (lambda r: physical[r])
    out = []

    def one_pair(src: int, dst: int, mode: str):
        if mode == "uni":
            if me == src:
                dist.send(send, dst)
            elif me == dst:
                dist.recv(recv, src)
        else:
            peer = dst if me == src else src
            ops = [dist.P2POp(dist.isend, send, peer), dist.P2POp(dist.irecv, recv, peer)]
            for work in dist.batch_isend_irecv(ops):
                work.wait()

    def timed(src: int, dst: int, mode: str) -> float:
        dist.barrier()
        t = 0.0
        if me in (src, dst):
            for _ in range(warmup):
                one_pair(src, dst, mode)
            if cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                torch.cuda._sleep(int(min(iters * 100_000, 200_000_000)))
                one_pair(src, dst, mode)  # untimed: lines the two ranks up before the start event
                start.record()
                for _ in range(iters):
                    one_pair(src, dst, mode)
                end.record()
                end.synchronize()
                t = start.elapsed_time(end) / 1e3 / iters
            else:
                t0 = time.perf_counter()
                for _ in range(iters):
                    one_pair(src, dst, mode)
                t = (time.perf_counter() - t0) / iters
        worst = torch.tensor([t], dtype=torch.float64, device=device)
        dist.all_reduce(worst, op=dist.ReduceOp.MAX)
        return float(worst.item())

    method = "nccl" if rank.backend == "nccl" else rank.backend
    for src in range(world):
        for dst in range(world):
            if src != dst:
                t = timed(src, dst, "uni")
                out.append(_record(method, name(src), name(dst), "uni", count * 4, t, world))
    for src in range(world):
        for dst in range(src + 1, world):
            t = timed(src, dst, "bi")
            out.append(_record(method, name(src), name(dst), "bi", count * 4, t, world))
            out.append(_record(method, name(dst), name(src), "bi", count * 4, t, world))
    return out if me == 0 else []


def single_gpu_copies(device: int, nbytes: int, *, iters: int = 10, warmup: int = 2) -> list[dict]:
    """Host->device and device->host (pinned host memory) and a copy within the GPU."""
    import torch

    count = max(1, nbytes // 4)
    host = torch.empty(count, dtype=torch.float32, pin_memory=True)
    a = torch.empty(count, dtype=torch.float32, device=f"cuda:{device}")
    b = torch.empty_like(a)
    cases = {"h2d": lambda: a.copy_(host, non_blocking=True), "d2h": lambda: host.copy_(a, non_blocking=True),
             "d2d": lambda: b.copy_(a)}
    out = []
    with torch.cuda.device(device):
        for op, fn in cases.items():
            for _ in range(warmup):
                fn()
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                fn()
            end.record()
            end.synchronize()
            t = start.elapsed_time(end) / 1e3 / iters
            out.append({"kind": "copy", "op": op, "device": device, "bytes": count * 4, "time_s": t,
                        "gbps": round(count * 4 / t / 1e9, 3), "pinned": op != "d2d",
                        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
    return out


def _sync(devices) -> None:
    import torch

    for d in devices:
        torch.cuda.synchronize(d)
