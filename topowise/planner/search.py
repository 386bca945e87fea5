"""Search: predict every candidate, set aside what does not fit (with the reason), rank the rest.

Ranking is by predicted global tokens/s. The shown plans are the best micro-batch / checkpointing
choice of each (strategy, shard groups, GPUs): the knobs are tuned, the choices stay distinct.

Pruning (the search on an 8-GPU node is a few hundred predictions, well under a second):
- memory grows with micro-batch: inside a (strategy, GPUs, shard, checkpointing) group the search
  stops at the first micro-batch that does not fit;
- memory depends on the GPU count, not on which GPUs: a miss on one placement rules out the
  same (strategy, count, shard, checkpointing, micro-batch) on every other placement.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from topowise.costmodel.predict import predict
from topowise.costmodel.prediction import Prediction
from topowise.costmodel.profile import Profile, default_profile
from topowise.errors import UsageError
from topowise.models.spec import ModelSpec
from topowise.planner import explain, regions
from topowise.planner.candidates import Candidate, engine_for, enumerate_candidates
from topowise.run import CHECKPOINTING, ENGINES, FABRICS, Run
from topowise.topology.model import Topology
from topowise.units import GIB

# The order of a plan row's run keys in `plan --json` (a key that Run gains follows them)
ROW_ORDER = ("strategy", "gpus", "micro_batch", "activation_checkpointing", "checkpointing", "selective_ac_option",
             "compile", "shard_group_size")


def run_row(run: Run) -> dict:
    """The run as a plan row says it: strategy, GPUs, micro-batch, checkpointing, compile, shard group, then any
    setting Run gains. The model, sequence, fabric and engine are the result's, said once."""
    data = run.to_dict()
    for key in ("model", "seq_len", "fabric", "engine"):
        del data[key]
    first = {key: data.pop(key) for key in ROW_ORDER}
    return {**first, **data}


@dataclass(frozen=True)
class Plan:
    """A run that fits: its prediction (which holds the Run), why it ranks where it does, how its GPUs were chosen."""

    prediction: Prediction
    why: str = ""
    placement: str = "best"
    wan: dict | None = None  # across regions: what the WAN costs the step (planner/regions.WanCost.to_dict())

    @property
    def run(self) -> Run:
        return self.prediction.run

    # what a plan's choice is named by (labels, the ranking, the notes): read everywhere
    @property
    def strategy(self) -> str:
        return self.run.strategy

    @property
    def gpus(self) -> tuple[int, ...]:
        return self.run.gpus

    @property
    def shard_group_size(self) -> int | None:
        return self.run.shard_group_size

    def to_dict(self) -> dict:
        p = self.prediction
        return {
            **run_row(self.run),
            "step_time_s": p.step_time_s,
            "tokens_per_s": p.tokens_per_s,
            "tokens_per_s_per_gpu": p.tokens_per_s_per_gpu,
            "peak_memory_bytes": p.memory.peak_bytes,
            "fits": p.fits,
            "islands_spanned": p.islands_spanned,
            "bottleneck_gbps": _finite(p.bottleneck_gbps),
            "exposed_comm_s": p.time.exposed_comm_s,
            "placement": self.placement,
            "why": self.why,
            **({"wan": self.wan} if self.wan is not None else {}),
        }


@dataclass(frozen=True)
class Infeasible:
    """A run that does not fit, with its memory and the reason."""

    run: Run
    peak_memory_bytes: int
    gpu_memory_bytes: int
    reason: str

    @property
    def words(self) -> str:
        """What was tried beyond the strategy, GPUs and micro-batch: ", selective (every 2nd block)
        checkpointing, compiled"; "" for none and eager."""
        ac = f", {self.run.checkpoint_words} checkpointing" if self.run.activation_checkpointing else ""
        return ac + (", compiled" if self.run.compile else "")

    def to_dict(self) -> dict:
        return {
            **run_row(self.run),
            "peak_memory_bytes": self.peak_memory_bytes,
            "fits": False,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class PlanResult:
    model: str
    topology: str
    seq_len: int
    fabric: str
    plans: tuple[Plan, ...]
    infeasible: tuple[Infeasible, ...]
    suggestion: str | None = None
    notes: tuple[str, ...] = ()
    evaluated: int = 0  # predictions made (every micro-batch, checkpointing and placement variant)
    feasible: int = 0  # of which fit
    ranked: tuple[Plan, ...] = field(default=(), repr=False, compare=False)  # every distinct feasible plan
    engine: str = "pytorch"  # whose ZeRO the predictions model: pytorch (FSDP2) or deepspeed
    profile: Profile | None = field(default=None, repr=False, compare=False)  # what they were predicted with
    compile_note: str = ""  # eager and compiled planned together: whether compiling changes the winner (in notes too)

    @property
    def best(self) -> Plan | None:
        return self.plans[0] if self.plans else None

    def to_dict(self) -> dict:
        return {
            "model": self.model,
            "topology": self.topology,
            "seq_len": self.seq_len,
            "fabric": self.fabric,
            "plans": [p.to_dict() for p in self.plans],
            "infeasible": [i.to_dict() for i in self.infeasible],
            "suggestion": self.suggestion,
            "notes": list(self.notes),
            "evaluated": self.evaluated,
            "feasible": self.feasible,
            "choices": len(self.ranked),
            "engine": self.engine,
        }


def _finite(x: float | None) -> float | None:
    return None if x is None or x == float("inf") else x


def memory_reason(pred: Prediction, profile: Profile | None = None) -> str:
    """"needs 92.5 GiB, the GPU has 87.5 GiB of which 83.2 GiB is usable with 5% kept free (over by 9.3 GiB)".

    The verdict is against the usable part, so the headroom is said whenever there is one: "over by"
    without it would not add up."""
    headroom = (profile or default_profile()).memory_headroom
    need, have = pred.memory.peak_bytes / GIB, pred.memory.gpu_memory_bytes / GIB
    usable = have * (1.0 - headroom)
    if headroom <= 0:
        return f"needs {need:,.1f} GiB, the GPU has {have:,.1f} GiB (over by {_amount(need - have)})"
    return (f"needs {need:,.1f} GiB, the GPU has {have:,.1f} GiB of which {usable:,.1f} GiB is usable with "
            f"{headroom:.0%} kept free (over by {_amount(need - usable)})")


def _amount(gib: float) -> str:
    """An overshoot under 0.05 GiB in MiB: "over by 0.0 GiB" reads as a fit."""
    return f"{gib:,.1f} GiB" if gib >= 0.05 else f"{gib * 1024:,.0f} MiB"


def check_inputs(topo: Topology, num_gpus: int | None, gpus: tuple[int, ...] | None, seq_len: int,
                 top: int) -> None:
    """What no Run can check: the GPU count against the topology, --top. (A micro-batch is checked by Run.)"""
    n = topo.num_gpus
    if num_gpus is not None and not 1 <= num_gpus <= n:
        raise UsageError(f"--num-gpus {num_gpus}: topology {topo.name!r} has {n} GPUs; give 1 to {n}")
    if gpus is not None:
        if not gpus:
            raise UsageError("--gpus names no GPU")
        if num_gpus is not None and num_gpus != len(gpus):
            raise UsageError(f"--num-gpus {num_gpus} disagrees with --gpus ({len(gpus)} GPUs); give one of them")
    if not isinstance(seq_len, int) or seq_len < 1:
        raise UsageError(f"sequence length {seq_len!r} is not a positive integer")
    if not isinstance(top, int) or top < 1:
        raise UsageError(f"--top {top!r} is not a positive integer")


def evaluate(topo: Topology, candidates: list[Candidate], *,
             profile: Profile | None) -> tuple[list[Plan], list[Infeasible], int]:
    """(fitting plans, infeasible, predictions made), with the micro-batch and placement pruning."""
    fits: list[Plan] = []
    misses: list[Infeasible] = []
    missed_memory: set[tuple] = set()
    stopped_groups: set[tuple] = set()
    made = 0
    for c in candidates:
        if c.group_key in stopped_groups:
            continue
        if c.memory_key in missed_memory:
            stopped_groups.add(c.group_key)
            continue
        pred = predict(c.run, topo, profile)
        made += 1
        if pred.fits:
            fits.append(Plan(prediction=pred, placement=c.placement))
        else:
            missed_memory.add(c.memory_key)
            stopped_groups.add(c.group_key)
            misses.append(Infeasible(run=pred.run, peak_memory_bytes=pred.memory.peak_bytes,
                                     gpu_memory_bytes=pred.memory.gpu_memory_bytes,
                                     reason=memory_reason(pred, profile)))
    return fits, misses, made


def rank(plans: list[Plan]) -> list[Plan]:
    """Fastest first; ties to fewer GPUs, less recompute (none, selective, full), eager (no compile time),
    less memory, fewer NVLink islands. One entry per distinct choice."""
    ordered = sorted(plans, key=lambda p: (-p.prediction.tokens_per_s, len(p.gpus),
                                           CHECKPOINTING.index(p.run.checkpointing), p.run.compile,
                                           p.prediction.memory.peak_bytes, p.prediction.islands_spanned, p.gpus))
    out: list[Plan] = []
    seen: set[tuple] = set()
    for p in ordered:
        key = (p.strategy, p.shard_group_size, p.gpus)
        # placements that the cost model cannot tell apart (same strategy, count, speed) collapse too, also
        # onto a variant of a choice already shown: a ring that crosses PCIe once is as slow as one that
        # crosses it at every hop, and the placement shown first spans the fewest islands
        twin = (p.strategy, p.shard_group_size, len(p.gpus), round(p.prediction.tokens_per_s, 3))
        if key in seen or twin in seen:
            seen.add(twin)
            continue
        seen.update((key, twin))
        out.append(p)
    return out


def plan(model: ModelSpec, topo: Topology, *, num_gpus: int | None = None, gpus: tuple[int, ...] | None = None,
         micro_batches: tuple[int, ...] | None = None, seq_len: int = 4096, profile: Profile | None = None,
         top: int = 5, fabric: str = "nvlink", engine: str = "pytorch",
         wan_share: float = regions.DEFAULT_WAN_SHARE, compile_choices: tuple[bool, ...] = (False,),
         kernels: dict | None = None) -> PlanResult:
    """Rank every island-aware candidate for `model` on `topo` and say why (see the module docstring).
    wan_share: on a cluster with regions, the WAN share of a step the reasons aim gradient accumulation at.
    kernels: Run's precision, fp8_recipe, loss and attention for every candidate (None: their defaults)."""
    check_inputs(topo, num_gpus, gpus, seq_len, top)
    if not 0 < wan_share < 1:
        raise UsageError(f"--wan-share {wan_share!r}: give a fraction between 0 and 1, e.g. 0.1")
    if fabric not in FABRICS:
        raise UsageError(f"--fabric {fabric!r}: give {' or '.join(FABRICS)}")
    if engine not in ENGINES:
        raise UsageError(f"--engine {engine!r}: give {' or '.join(ENGINES)}")
    if True in compile_choices and engine == "deepspeed":
        raise UsageError("--compile is modelled for the PyTorch engine only; DeepSpeed's own compile is not")
    candidates = enumerate_candidates(topo, model, seq_len=seq_len, fabric=fabric, engine=engine, num_gpus=num_gpus,
                                      gpus=gpus, micro_batches=micro_batches, compile_choices=compile_choices)
    if engine == "deepspeed":
        candidates = [c for c in candidates if c.run.spec.deepspeed_stage is not None]
    if kernels:
        candidates = [replace(c, run=replace(c.run, **kernels)) for c in candidates]
    fits, misses, made = evaluate(topo, candidates, profile=profile)
    ranked = rank(fits)
    shown = tuple(with_region_why(explain.with_why(ranked[:top], ranked, topo, profile), topo, wan_share))
    misses.sort(key=lambda i: (i.peak_memory_bytes - i.gpu_memory_bytes, len(i.run.gpus), i.run.micro_batch))
    notes = explain.notes(ranked, topo, profile=profile) + regions.notes(ranked, topo, wan_share)
    compile_note = explain.compile_note(fits) if len(set(compile_choices)) > 1 else ""
    if compile_note:
        notes.append(compile_note)
    trade = explain.memory_trade(ranked, misses)
    if trade:
        notes.insert(0, trade)
    suggestion = None
    if not ranked:
        suggestion = suggest(model, topo, candidates, misses, seq_len=seq_len, fabric=fabric, profile=profile,
                             engine=engine)
    return PlanResult(
        model=model.name, topology=topo.name, seq_len=seq_len, fabric=fabric, plans=shown,
        infeasible=tuple(misses), suggestion=suggestion, notes=tuple(notes),
        evaluated=made, feasible=len(fits), ranked=tuple(ranked), engine=engine, profile=profile,
        compile_note=compile_note,
    )


def with_region_why(shown, topo, wan_share: float) -> list[Plan]:
    """On a cluster with regions, each plan's why also says what the WAN costs its step (planner/regions.py)."""
    if not regions.region_groups(topo):
        return list(shown)
    out = []
    for p in shown:
        cost = regions.wan_cost(p.prediction, topo, wan_share)
        extra = regions.reason(p.prediction, topo, wan_share)  # None exactly where cost is
        out.append(replace(p, why=f"{p.why}. {extra[0].upper()}{extra[1:]}", wan=cost.to_dict())
                   if cost is not None and extra else p)
    return out


def suggest(model: ModelSpec, topo: Topology, candidates: list[Candidate], misses: list[Infeasible], *,
            seq_len: int, fabric: str, profile: Profile | None, engine: str = "pytorch") -> str:
    """Nothing fits: the smallest change that would, with its memory. Tried in order of how much
    the run changes: a smaller micro-batch on the same GPUs, then more GPUs, then say it needs
    more than this node. (Checkpointing and zero3 on the asked GPUs were candidates already.)"""
    closest = misses[0].run  # sorted: least over first
    head = (f"nothing fits; the closest, {explain.label(closest.strategy, closest.gpus, closest.shard_group_size)} "
            f"at micro-batch {closest.micro_batch}"
            f"{f' with {closest.checkpointing} activation checkpointing' if closest.activation_checkpointing else ''}, "
            f"{misses[0].reason}")

    def variant(strategy: str, gpus: tuple[int, ...], micro_batch: int, full: bool) -> Run:
        return Run(model=model, gpus=gpus, strategy=strategy, micro_batch=micro_batch, seq_len=seq_len, fabric=fabric,
                   engine=engine_for(strategy, engine), checkpointing="full" if full else "none")

    def first_fit(options: list[Run]) -> Prediction | None:
        for run in options:
            pred = predict(run, topo, profile)
            if pred.fits:
                return pred
        return None

    def words(pred: Prediction) -> str:
        run = pred.run
        ac = f" with {run.checkpoint_words} activation checkpointing" if run.activation_checkpointing else ""
        return (f"{explain.label(run.strategy, run.gpus, run.shard_group_size)} at micro-batch {run.micro_batch}{ac} "
                f"needs {pred.memory.peak_bytes / GIB:.1f} GiB of {pred.memory.gpu_memory_bytes / GIB:.1f} GiB "
                f"({pred.tokens_per_s:,.0f} tokens/s)")

    tried_mb = min(c.run.micro_batch for c in candidates)
    tried_gpus = {c.run.gpus for c in candidates}
    if tried_mb > 1:  # the asked micro-batch was fixed: go down to 1 on the same GPUs
        smaller = [variant(s, g, mb, ac) for mb in range(tried_mb - 1, 0, -1)
                   for g in sorted(tried_gpus, key=len) for s in ("zero3",) for ac in (False, True) if len(g) > 1]
        smaller += [variant("ddp", g, mb, ac) for mb in range(tried_mb - 1, 0, -1)
                    for g in tried_gpus if len(g) == 1 for ac in (False, True)]
        hit = first_fit(smaller)
        if hit:
            return f"{head}. A smaller micro-batch would fit: {words(hit)}"
    most = max(len(g) for g in tried_gpus)
    more = [variant("zero3", topo.best_subset(k), mb, ac) for k in range(most + 1, topo.num_gpus + 1)
            for ac in (False, True) for mb in (tried_mb, 1)]
    hit = first_fit(more)
    if hit:
        return f"{head}. More GPUs would: {words(hit)}"
    everything = variant("zero3" if topo.num_gpus > 1 else "ddp", topo.indices, 1, True)
    pred = predict(everything, topo, profile)
    states = 16 * model.params / GIB  # fp32 weights, gradients, AdamW moments: 16 bytes per parameter
    return (f"{head}. Nothing on one {topo.name} fits: even {explain.label(everything.strategy, everything.gpus)} "
            f"with activation checkpointing at micro-batch 1 {memory_reason(pred, profile)}; "
            f"the training state alone is {states:,.0f} GiB (16 bytes x "
            f"{explain.param_count(model.params)} parameters). Shard across more nodes (plan a cluster of them, "
            f"e.g. --topology '{2 * getattr(topo, 'num_nodes', 1)}x {topo.node.name}+ib-ndr'), shorten --seq-len, "
            "or use GPUs with more memory")
