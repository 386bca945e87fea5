"""Second pass (docs/calibration.md): does FSDP2's backward all-gather run beside the reduce-scatter
at a summed rate over PCIe with P2P off?  Run from the repository root: python <this file>.

1. Direct: where backward is bound by communication (reduce-scatter longer than backward compute),
   zero3 - zero2 on the same case is the backward all-gather time divided by how much faster the pair
   runs together (s): d = copy-out + (AG + RS) / s - RS. Solved for s from the recorded runs.
2. Refit: the model with the backward AG + RS pair taking max(AG, RS, (AG + RS) / s) over PCIe,
   re-fitted from each calibration set for s = 1, 1.2, 1.5, 2 and evaluated on every recorded set.
"""
import dataclasses
import json
import statistics
from pathlib import Path

from topowise import calibrate as C
from topowise.costmodel import comm as cm
from topowise.costmodel.step import predict
from topowise.models.spec import load_model
from topowise.topology.model import Topology

R = Path("research/2026-11-30-h200x2")
SETS = {"cal2": R / "run2/profile-records/train.jsonl", "cal4": R / "run4/profile-records/train.jsonl",
        "val3": R / "run3/validate-records/train.jsonl", "val4": R / "run4/validate-records/train.jsonl",
        "t8192": R / "run2/train.jsonl"}


def fitted(run):
    recs, meta = C.read_records_dir(R / run / "profile-records")
    topo = Topology.from_dict(meta["topology"], run)
    prof, _ = C.fit_profile(recs, topo, meta["fingerprint"], where=run,
                            comm_min_bytes=int(meta["plan"].get("fit_min_bytes", 0)))
    return prof, topo


def errors(prof, topo):
    out = {}
    for name, path in SETS.items():
        rows = C.compare([json.loads(line) for line in open(path) if line.strip()], prof, topo)
        e = [abs(r.step_error) for r in rows if r.step_error is not None]
        s = [abs(r.step_error) for r in rows if r.step_error is not None and r.step_spread <= C.UNSTEADY_SPREAD]
        out[name] = f"{100 * statistics.mean(e):.1f}/{100 * max(e):.1f} (steady {100 * statistics.mean(s):.1f}/{100 * max(s):.1f})"
    return out


def direct():
    prof, topo = fitted("run2")
    gpus = tuple(topo.indices[:2])
    # (model, seq_len, measured zero2 ms, measured zero3 ms) over pcie, every recorded run
    for m, seq, z2, z3 in [("llama3.2-1b", 4096, (189.1, 192.3), (223.7, 224.9)),
                           ("llama3.2-1b", 8192, (239.1,), (263.9,)),
                           ("llama3.2-3b", 4096, (465.4, 465.5), (570.0, 570.7))]:
        spec = load_model(m)
        p2, p3 = (predict(spec, topo, gpus, s, seq_len=seq, fabric="pcie", profile=prof) for s in ("zero2", "zero3"))
        ag = sum(c.time_s for c in p3.time.collectives if c.phase == cm.BACKWARD and c.op == "all_gather")
        rs = sum(c.time_s for c in p3.time.collectives if c.phase == cm.BACKWARD and c.op == "reduce_scatter")
        d = (statistics.mean(z3) - statistics.mean(z2)) / 1e3 - (p3.time.memory_bound_s - p2.time.memory_bound_s)
        bound = "comm-bound" if rs > p3.time.backward_s else "not comm-bound: s not identified"
        print(f"{m} {seq} pcie: zero3 - zero2 {statistics.mean(z3) - statistics.mean(z2):.1f} ms, backward AG "
              f"{1e3 * ag:.1f} ms, RS {1e3 * rs:.1f} ms, backward compute {1e3 * p3.time.backward_s:.1f} ms ({bound}); "
              f"implied s = {(ag + rs) / (rs + d):.2f}")


def refit_grid():
    original = cm.strategy_collectives
    speedup = {"PCIe": 1.0}

    def concurrent(model, topo, gpus, strategy, profile, shard_group_size=None):
        out = original(model, topo, gpus, strategy, profile, shard_group_size)
        pair = [c for c in out if c.phase == cm.BACKWARD and c.op in ("all_gather", "reduce_scatter")]
        if strategy not in ("zero3", "hsdp") or not pair or pair[0].link not in speedup:
            return out
        ag = sum(c.time_s for c in pair if c.op == "all_gather")
        rs = sum(c.time_s for c in pair if c.op == "reduce_scatter")
        k = max(ag, rs, (ag + rs) / speedup[pair[0].link]) / (ag + rs)
        return tuple(dataclasses.replace(c, time_s=c.time_s * k) if c in pair else c for c in out)

    cm.strategy_collectives = concurrent
    try:
        for s in (1.0, 1.2, 1.5, 2.0):
            speedup["PCIe"] = s
            for run in ("run2", "run4"):
                prof, topo = fitted(run)
                print(f"s = {s} over PCIe, fitted from {run}: overlap.zero3 {prof.overlap['zero3']:.3f}, "
                      f"zero2 {prof.overlap['zero2']:.3f}; MAE/max % {errors(prof, topo)}")
    finally:
        cm.strategy_collectives = original


if __name__ == "__main__":
    direct()
    refit_grid()
