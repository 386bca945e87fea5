"""Search over the mesh degrees: tp x cp x pp x data-parallel, with micro-batch, accumulation, schedule,
checkpointing and strategy, for one global batch on one GPU set.

The wiring prunes first: the GPUs are taken island by island (node by node), so the mesh's TP groups are runs of
consecutive GPUs (topology/mesh.py), and TP is allowed only up to the largest degree whose groups stay inside
an NVLink island (`largest_contained_degree`: 8 on an HGX board, 2 on h100-nvl-8's bridge pairs), since a TP group
that crosses PCIe or the network pays its per-block collectives there. Memory prunes next, cheaply: the peak
rank's memory (costmodel/parallel.rank_memory) before any time is priced, and a micro-batch that does not fit
rules out the larger ones, and recompute is not tried where the run fits without it. What is left is predicted
first with the pipeline's closed form (every stage as the slowest, no replay), then the fastest few exactly, and
ranked by step time (one global batch: the same tokens a step). Plain data parallelism (tp = pp = cp = 1, with
accumulation) is a candidate like any other.
"""

from __future__ import annotations

from dataclasses import dataclass

from topowise.costmodel.memory import fits
from topowise.costmodel.parallel import predict_parallel, rank_memory
from topowise.costmodel.pipeline import SCHEDULES
from topowise.costmodel.predict import predict
from topowise.costmodel.prediction import Prediction
from topowise.costmodel.profile import Profile, default_profile
from topowise.errors import UsageError
from topowise.models.spec import ModelSpec
from topowise.planner.candidates import island_order
from topowise.run import Run
from topowise.topology.mesh import largest_contained_degree

MICRO_BATCHES = (1, 2)
STRATEGIES = ("zero3", "zero1")  # FSDP (torchtitan) and the distributed optimizer (Megatron's default)
CHECKPOINTING = ("none", "full")  # with flash attention, per-op selective keeps what none keeps (parallelism.md)
MAX_PP = 32
EXACT = 3  # x top: how many of the first pass's fastest are priced again exactly
LONG_SEQUENCE = 16384  # context parallelism is searched from here up


@dataclass(frozen=True)
class MeshSearch:
    """The ranked predictions (fastest first), why TP was capped where it was, and how many were looked at."""

    ranked: tuple[Prediction, ...]
    why: str
    considered: int
    pruned_by_memory: int

    @property
    def best(self) -> Prediction | None:
        return self.ranked[0] if self.ranked else None


def divisors(n: int, limit: int | None = None) -> tuple[int, ...]:
    return tuple(d for d in range(1, (limit or n) + 1) if n % d == 0)


def tp_cap(topology, gpus: tuple[int, ...], model: ModelSpec) -> tuple[int, str]:
    """The largest TP the wiring keeps inside NVLink islands (and the heads allow), and the sentence saying so."""
    island = {g: i for i, isl in enumerate(topology.islands()) for g in isl}
    cap = largest_contained_degree(gpus, island.__getitem__)
    while model.num_heads % cap or model.num_kv_heads % cap:
        cap //= 2
    size = max(len(isl) for isl in topology.islands())
    if cap >= size:
        why = f"TP up to {cap} stays inside each NVLink island of {size} GPUs"
    else:
        why = (f"TP is capped at {cap}: a larger group would leave its NVLink island "
               f"({size} GPUs) and run its per-block collectives over PCIe or the network")
    return cap, why


def mesh_runs(topology, model: ModelSpec, gpus: tuple[int, ...], *, seq_len: int, global_batch: int,
              tp_limit: int) -> list[Run]:
    """Every candidate Run (micro-batches ascending inside each group of otherwise equal settings)."""
    n = len(gpus)
    cps = tuple(c for c in (1, 2, 4, 8) if seq_len >= LONG_SEQUENCE or c == 1)
    out: list[Run] = []
    for tp in divisors(n, tp_limit):
        if model.num_heads % tp or model.num_kv_heads % tp:
            continue
        for cp in cps:
            if n % (tp * cp) or seq_len % (2 * cp if cp > 1 else 1):
                continue
            for pp in divisors(n // (tp * cp), MAX_PP):
                if pp > model.num_layers + 2 - pp:  # torchtitan's split needs a layer a stage
                    continue
                dp = n // (tp * cp * pp)
                schedules = ("1f1b",) if pp == 1 else SCHEDULES
                for strategy in STRATEGIES:
                    for checkpointing in CHECKPOINTING:
                        for schedule in schedules:
                            for mb in MICRO_BATCHES:
                                if global_batch % (mb * dp):
                                    continue
                                m = global_batch // (mb * dp)
                                if pp > 1 and m < pp:  # fewer micro-batches than stages: mostly bubble
                                    continue
                                virtual = 2 if schedule == "interleaved-1f1b" else 1
                                if schedule == "interleaved-1f1b" and m % pp:
                                    continue
                                try:
                                    run = Run(model=model, gpus=gpus, strategy=strategy, micro_batch=mb,
                                              seq_len=seq_len, checkpointing=checkpointing, tp=tp, pp=pp, cp=cp,
                                              pp_schedule=schedule, virtual_stages=virtual, grad_accum=m)
                                except UsageError:
                                    continue
                                out.append(run)
    return out


def fits_quickly(run: Run, gpu_memory_bytes: int, profile: Profile) -> bool | None:
    """The peak rank's memory against the GPU's, without pricing time; None for a run without a mesh (its
    memory comes with its prediction)."""
    if not run.has_mesh:
        return None
    memory, _ = rank_memory(run, run.layer_split, profile, gpu_memory_bytes)
    return fits(memory, profile)


def search_mesh(topology, model: ModelSpec, gpus: tuple[int, ...], *, seq_len: int = 8192,
                global_batch: int | None = None, profile: Profile | None = None, top: int = 10) -> MeshSearch:
    """The fastest meshes of `model` on `gpus` for `global_batch` sequences a step (default 2 per GPU)."""
    profile = profile or default_profile()
    gpus = island_order(topology, gpus)
    global_batch = global_batch or 2 * len(gpus)
    cap, why = tp_cap(topology, gpus, model)
    runs = mesh_runs(topology, model, gpus, seq_len=seq_len, global_batch=global_batch, tp_limit=cap)
    gpu_memory = topology.gpus[0].memory_bytes or topology.gpu_spec.memory_bytes
    missed: set[tuple] = set()
    pruned = 0
    screened: list[tuple[float, Run]] = []
    fitted_without_recompute: set[tuple] = set()
    for run in runs:
        group = (run.strategy, run.checkpointing, run.tp, run.pp, run.cp, run.pp_schedule)
        if group in missed:  # a smaller micro-batch did not fit
            pruned += 1
            continue
        same = (run.strategy, run.tp, run.pp, run.cp, run.pp_schedule, run.micro_batch)
        if run.checkpointing != "none" and same in fitted_without_recompute:
            continue  # recompute only costs time where the run fits without it
        quick = fits_quickly(run, gpu_memory, profile)
        if quick is False:
            missed.add(group)
            pruned += 1
            continue
        # first pass: the pipeline's closed form with every stage the slowest (the replay is priced for the few)
        pred = (predict_parallel(run, topology, profile, exact=False) if run.has_mesh
                else predict(run, topology, profile))
        if not pred.fits:
            missed.add(group)
            pruned += 1
            continue
        screened.append((pred.step_time_s, run))
        if run.checkpointing == "none":
            fitted_without_recompute.add(same)
    screened.sort(key=lambda x: x[0])
    exact = [predict(run, topology, profile) for _, run in screened[:EXACT * top]]
    ranked = tuple(sorted(exact, key=lambda p: p.step_time_s)[:top])
    return MeshSearch(ranked=ranked, why=why, considered=len(runs), pruned_by_memory=pruned)
