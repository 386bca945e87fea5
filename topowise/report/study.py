"""The study: every strategy on every topology and placement, predicted, and the findings the numbers give.

`run_study` asks the cost model for each (topology, placement, strategy), keeps the numbers it needs in
flat `Case` rows (plus each prediction's full `to_dict()`), and derives the findings from those rows:
nothing in a finding is written by hand. Rendering (tables, plots, html) lives in render.py / plots.py.

Placements per topology:
- "all": every GPU of the node (or the best `--num-gpus K` of them, `Topology.best_subset`);
- "2 in island" / "2 across islands": two GPUs that share an NVLink island vs two from different
  islands, where the node has both (an NVSwitch board has one island; a PCIe-only node has no
  island of two);
- "4 in island" / "4 across islands": the same with four GPUs, where an island holds four.
"""

from __future__ import annotations

import itertools
import json
import os
import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from topowise.costmodel.predict import predict
from topowise.errors import UsageError
from topowise.measure.records import steady_peak_bytes
from topowise.models.spec import ModelSpec
from topowise.planner.search import plan
from topowise.report.answer import Answer
from topowise.report.breakdown import StepBreakdown, read_breakdowns
from topowise.run import STRATEGY_NAMES, Run, check_seq_len
from topowise.topology import load_topologies
from topowise.topology.model import Topology
from topowise.topology.nvml import discover
from topowise.units import GIB

DEFAULT_TOPOLOGIES = ("hgx-h100-8", "h100-nvl-8", "h200-nvl-8", "pcie-l40s-8")
# Llama 3.1 8B: DDP's 16 bytes per parameter (~128 GB) no longer fits an 80-94 GB GPU, so the
# memory side of the trade-off shows; ZeRO/FSDP still fit, so every topology has an answer.
DEFAULT_MODEL = "llama3.1-8b"
FINDING_KINDS = ("nvlink_pcie_ratio", "island_slowdown", "ddp_does_not_fit", "fsdp_near_ddp", "recommendations")
NEAR_DDP = 0.10  # "within 10% of DDP's tokens/s"


@dataclass(frozen=True)
class Placement:
    label: str  # "all", "2 in island", "2 across islands", ...
    gpus: tuple[int, ...]
    islands_spanned: int
    bottleneck_gbps: float | None  # None for a single GPU

    def to_dict(self) -> dict:
        return {"label": self.label, "gpus": list(self.gpus), "islands_spanned": self.islands_spanned,
                "bottleneck_gbps": self.bottleneck_gbps}

    @classmethod
    def from_dict(cls, d: dict) -> Placement:
        return cls(d["label"], tuple(d["gpus"]), d["islands_spanned"], d["bottleneck_gbps"])


@dataclass(frozen=True)
class TopologySummary:
    label: str  # the name used in the study ("live" for the discovered node)
    name: str
    gpu_name: str
    gpu_memory_bytes: int
    islands: tuple[tuple[int, ...], ...]
    pcie_gbps: float
    link_gbps: tuple[tuple[float, ...], ...]  # [i][j] line rate GB/s; 0 on the diagonal
    link_kind: tuple[tuple[str, ...], ...]  # "NV12", "NODE", "SYS", ... ; "" on the diagonal
    placements: tuple[Placement, ...]

    def to_dict(self) -> dict:
        return {"label": self.label, "name": self.name, "gpu_name": self.gpu_name,
                "gpu_memory_bytes": self.gpu_memory_bytes, "islands": [list(i) for i in self.islands],
                "pcie_gbps": self.pcie_gbps, "link_gbps": [list(r) for r in self.link_gbps],
                "link_kind": [list(r) for r in self.link_kind],
                "placements": [p.to_dict() for p in self.placements]}

    @classmethod
    def from_dict(cls, d: dict) -> TopologySummary:
        return cls(d["label"], d["name"], d["gpu_name"], d["gpu_memory_bytes"],
                   tuple(tuple(i) for i in d["islands"]), d["pcie_gbps"],
                   tuple(tuple(r) for r in d["link_gbps"]), tuple(tuple(r) for r in d["link_kind"]),
                   tuple(Placement.from_dict(p) for p in d["placements"]))


@dataclass(frozen=True)
class Case:
    """One prediction: the numbers the report uses, and the prediction's whole to_dict()."""

    topology: str
    placement: str
    strategy: str
    gpus: tuple[int, ...]
    step_time_s: float | None = None
    tokens_per_s: float | None = None
    peak_bytes: int | None = None
    gpu_memory_bytes: int | None = None
    fits: bool | None = None
    error: str = ""  # why the cost model declined this case (e.g. hsdp with one island)
    prediction: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def ok(self) -> bool:
        return not self.error

    def to_dict(self) -> dict:
        return {"topology": self.topology, "placement": self.placement, "strategy": self.strategy,
                "gpus": list(self.gpus), "step_time_s": self.step_time_s, "tokens_per_s": self.tokens_per_s,
                "peak_bytes": self.peak_bytes, "gpu_memory_bytes": self.gpu_memory_bytes, "fits": self.fits,
                "error": self.error, "prediction": self.prediction}

    @classmethod
    def from_dict(cls, d: dict) -> Case:
        return cls(d["topology"], d["placement"], d["strategy"], tuple(d["gpus"]), d["step_time_s"],
                   d["tokens_per_s"], d["peak_bytes"], d["gpu_memory_bytes"], d["fits"], d.get("error", ""),
                   d.get("prediction", {}))


@dataclass(frozen=True)
class Finding:
    kind: str  # one of FINDING_KINDS
    topology: str
    text: str  # one sentence, made from `values`
    values: dict = field(default_factory=dict, compare=False, hash=False)

    def to_dict(self) -> dict:
        return dict(self.values, topology=self.topology, text=self.text)


@dataclass(frozen=True)
class Measured:
    """One `bench train` record next to the prediction for the same model, GPUs and strategy."""

    strategy: str
    status: str
    measured_step_time_s: float | None
    measured_peak_bytes: int | None
    predicted_step_time_s: float | None
    predicted_peak_bytes: int | None

    @property
    def step_error_pct(self) -> float | None:
        return _pct(self.predicted_step_time_s, self.measured_step_time_s)

    @property
    def memory_error_pct(self) -> float | None:
        return _pct(self.predicted_peak_bytes, self.measured_peak_bytes)

    def to_dict(self) -> dict:
        return {"strategy": self.strategy, "status": self.status,
                "measured_step_time_s": self.measured_step_time_s, "measured_peak_bytes": self.measured_peak_bytes,
                "predicted_step_time_s": self.predicted_step_time_s,
                "predicted_peak_bytes": self.predicted_peak_bytes,
                "step_error_pct": self.step_error_pct, "memory_error_pct": self.memory_error_pct}

    @classmethod
    def from_dict(cls, d: dict) -> Measured:
        return cls(d["strategy"], d["status"], d["measured_step_time_s"], d["measured_peak_bytes"],
                   d["predicted_step_time_s"], d["predicted_peak_bytes"])


@dataclass(frozen=True)
class MeasuredRun:
    model: str
    topology: str
    gpus: tuple[int, ...]
    micro_batch: int
    seq_len: int
    command: str
    rows: tuple[Measured, ...]
    trace_dir: str = ""  # bench train --trace DIR: DIR/<strategy>/breakdown.json
    breakdowns: tuple[StepBreakdown, ...] = ()  # per strategy: where the measured median step goes

    def to_dict(self) -> dict:
        return {"model": self.model, "topology": self.topology, "gpus": list(self.gpus),
                "micro_batch": self.micro_batch, "seq_len": self.seq_len, "command": self.command,
                "rows": [r.to_dict() for r in self.rows],
                "trace_dir": self.trace_dir, "breakdowns": [b.to_dict() for b in self.breakdowns]}

    @classmethod
    def from_dict(cls, d: dict) -> MeasuredRun:
        return cls(d["model"], d["topology"], tuple(d["gpus"]), d["micro_batch"], d["seq_len"], d["command"],
                   tuple(Measured.from_dict(r) for r in d["rows"]), d.get("trace_dir", ""),
                   tuple(StepBreakdown.from_dict(b) for b in d.get("breakdowns") or ()))


@dataclass(frozen=True)
class Study:
    model: dict  # ModelSpec.to_dict()
    seq_len: int
    micro_batch: int
    num_gpus: int | None
    profile: str  # "default" or the profile's fingerprint
    strategies: tuple[str, ...]
    topologies: tuple[TopologySummary, ...]
    cases: tuple[Case, ...]
    findings: tuple[Finding, ...]
    measured: MeasuredRun | None = None
    # --network: per cluster topology, the best plan on each network (whatif.NetworkOutcome.to_dict())
    networks: tuple[dict, ...] = ()
    # the four network questions (report/networks.py), for the study's model and a second size
    questions: tuple = ()

    # --- lookups the renderers use -----------------------------------------------------------
    def case(self, topology: str, placement: str, strategy: str) -> Case | None:
        for c in self.cases:
            if (c.topology, c.placement, c.strategy) == (topology, placement, strategy):
                return c
        return None

    def findings_of(self, kind: str) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.kind == kind)

    def with_measured(self, measured: MeasuredRun) -> Study:
        return replace(self, measured=measured)

    # --- JSON ---------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {
            "format": "topowise.study", "version": 1,
            "model": self.model, "seq_len": self.seq_len, "micro_batch": self.micro_batch,
            "num_gpus": self.num_gpus, "profile": self.profile, "strategies": list(self.strategies),
            "topologies": [t.to_dict() for t in self.topologies],
            "predictions": [c.to_dict() for c in self.cases],
            "findings": {kind: [f.to_dict() for f in self.findings_of(kind)] for kind in FINDING_KINDS},
            "measured": self.measured.to_dict() if self.measured else None,
            "networks": list(self.networks),
            "network_questions": [a.to_dict() for a in self.questions],
        }

    @classmethod
    def from_dict(cls, d: dict) -> Study:
        findings = tuple(
            Finding(kind, f["topology"], f["text"], {k: v for k, v in f.items() if k not in ("topology", "text")})
            for kind in FINDING_KINDS for f in d["findings"].get(kind, [])
        )
        return cls(d["model"], d["seq_len"], d["micro_batch"], d["num_gpus"], d["profile"],
                   tuple(d["strategies"]), tuple(TopologySummary.from_dict(t) for t in d["topologies"]),
                   tuple(Case.from_dict(c) for c in d["predictions"]), findings,
                   MeasuredRun.from_dict(d["measured"]) if d.get("measured") else None,
                   tuple(d.get("networks") or ()),
                   tuple(Answer.from_dict(a) for a in d.get("network_questions") or ()))


# --- topologies and placements ------------------------------------------------------------------

def resolve_topologies(names: Iterable[str] | None, gpu_name: str | None = None) -> list[tuple[str, Topology]]:
    """(label, Topology) for each name; the default set plus the live node when one is found.
    gpu_name (--gpu-name) names the GPU model of the `nvidia-smi topo -m` text among them."""
    if names is None:
        chosen = list(zip(DEFAULT_TOPOLOGIES, load_topologies(list(DEFAULT_TOPOLOGIES), gpu_name)))
        live = discover_live()
        return chosen + ([("live", live)] if live is not None else [])
    names = list(names)
    if not names:
        raise UsageError("--topologies is empty: name at least one preset, e.g. --topologies hgx-h100-8")
    if len(set(names)) != len(names):
        raise UsageError("--topologies names a topology twice")
    files = [n for n in names if n != "live"]
    loaded = dict(zip(files, load_topologies(files, gpu_name, need_gpu_model=True))) if files else {}
    if gpu_name is not None and not files:
        raise UsageError("--gpu-name applies to `nvidia-smi topo -m` text; the live node names its GPUs")
    out = []
    for name in names:
        if name == "live":
            live = discover_live()
            if live is None:
                raise UsageError("topology 'live' asks for this machine's GPUs, but none were found through NVML; "
                                 "name presets instead (e.g. --topologies hgx-h100-8,h100-nvl-8)")
            out.append(("live", live))
        else:
            out.append((name, loaded[name]))
    return out


def discover_live() -> Topology | None:
    """This machine's GPUs through NVML, or None when there are none (or no NVML)."""
    try:
        topo = discover()
    except (UsageError, OSError):
        return None
    return topo if topo is not None and topo.num_gpus > 0 else None


def placements_for(topo: Topology, num_gpus: int | None = None) -> tuple[Placement, ...]:
    """The whole node (or its best K GPUs), then k=2 and k=4 inside one island vs across islands."""
    k_all = num_gpus or topo.num_gpus
    out = [_placement(topo, "all", topo.best_subset(k_all))]
    for k in (2, 4):
        if k > k_all:
            continue
        inside = _best(topo, k, lambda n: n == 1)
        across = _best(topo, k, lambda n: n > 1)
        if inside and across:  # only the comparison is worth placing
            out.append(_placement(topo, f"{k} in island", inside))
            out.append(_placement(topo, f"{k} across islands", across))
    return tuple(out)


def _best(topo: Topology, k: int, islands_ok: Callable[[int], bool]) -> tuple[int, ...] | None:
    """The best k-subset whose number of islands spanned passes `islands_ok` (fewest islands first)."""
    if k > topo.num_gpus:
        return None
    subsets = [s for s in _subsets(topo, k) if islands_ok(len(topo.islands_spanned(s)))]
    return min(subsets, key=lambda s: _rank(topo, s)) if subsets else None


def _rank(topo: Topology, subset: tuple[int, ...]) -> tuple:
    """Fewest islands, fastest ring, then an even split over the islands (2+2 before 3+1), NUMA, index."""
    largest_share = max(len(set(subset) & set(isl)) for isl in topo.islands_spanned(subset))
    numas = {topo.gpu(i).numa_node for i in subset}
    return (len(topo.islands_spanned(subset)), -topo.bottleneck_gbps(subset), largest_share, len(numas), subset)


def _subsets(topo: Topology, k: int) -> list[tuple[int, ...]]:
    if topo.num_gpus <= 10:
        return [tuple(c) for c in itertools.combinations(topo.indices, k)]
    # Big nodes: whole-island unions (the topology's own candidates) and pairs of island halves.
    out = set(topo.candidate_subsets(k))
    islands = topo.islands()
    for a, b in itertools.combinations(islands, 2):
        half = k // 2
        if len(a) >= half and len(b) >= k - half:
            out.add(tuple(sorted(a[:half] + b[: k - half])))
    return sorted(out)


def _placement(topo: Topology, label: str, gpus: tuple[int, ...]) -> Placement:
    bottleneck = topo.bottleneck_gbps(gpus)
    return Placement(label, tuple(gpus), len(topo.islands_spanned(gpus)),
                     None if bottleneck == float("inf") else bottleneck)


def summarize_topology(label: str, topo: Topology, placements: tuple[Placement, ...]) -> TopologySummary:
    idx = topo.indices
    gbps, kinds = [], []
    for a in idx:
        row_g, row_k = [], []
        for b in idx:
            if a == b:
                row_g.append(0.0)
                row_k.append("")
            else:
                link = topo.link(a, b)
                row_g.append(link.gbps)
                row_k.append(f"NV{link.nvlinks}" if link.is_nvlink else link.kind)
        gbps.append(tuple(row_g))
        kinds.append(tuple(row_k))
    memory = topo.gpus[0].memory_bytes or topo.gpu_spec.memory_bytes if topo.gpus else 0
    return TopologySummary(label, topo.name, topo.gpus[0].name if topo.gpus else "", memory, topo.islands(),
                           topo.pcie_gbps, tuple(gbps), tuple(kinds), placements)


# --- the study ----------------------------------------------------------------------------------

def run_study(model: ModelSpec, topologies: list[tuple[str, Topology]], *, num_gpus: int | None = None,
              seq_len: int = 4096, micro_batch: int = 1, profile=None,
              strategies: tuple[str, ...] = STRATEGY_NAMES,
              advance: Callable[[str], None] | None = None, networks: tuple[str, ...] = (),
              question_models: tuple[ModelSpec, ...] = (), prices=None, compile: bool = False) -> Study:
    """Predict every (topology, placement, strategy); derive the findings. `advance(what)` ticks a progress bar.
    networks: the what-if networks for each cluster topology (--network); question_models: answer the
    four network questions (report/networks.py) for these models. compile: every case compiled (torch.compile
    of each block), and the planner's recommendation weighs eager against compiled."""
    check_study_args(topologies, num_gpus=num_gpus, seq_len=seq_len, micro_batch=micro_batch, model=model)
    summaries, cases = [], []
    for label, topo in topologies:
        placements = placements_for(topo, num_gpus)
        summaries.append(summarize_topology(label, topo, placements))
        for place in placements:
            for strategy in strategies:
                cases.append(_predict_case(model, topo, label, place, strategy, seq_len, micro_batch, profile,
                                           compile))
                if advance:
                    advance(f"{label} {place.label} {strategy}")
    recs = []
    for label, topo in topologies:
        recs.append(recommend(model, topo, label, cases, num_gpus=num_gpus, seq_len=seq_len,
                              micro_batch=micro_batch, profile=profile, compile=compile))
        if advance:
            advance(f"{label} plan")
    summaries_t = tuple(summaries)
    findings = (nvlink_pcie_ratios(topologies) + island_slowdowns(cases, summaries_t)
                + ddp_not_fitting(cases) + fsdp_near_ddp(cases) + tuple(recs))
    what_if = network_views(model, topologies, networks, num_gpus=num_gpus, seq_len=seq_len,
                            micro_batch=micro_batch, profile=profile, prices=prices) if networks else ()
    questions = ()
    if question_models:
        from topowise.report.networks import answer_all

        questions = answer_all(list(question_models), seq_len=seq_len, micro_batch=micro_batch, profile=profile,
                               prices=prices)
    return Study(model.to_dict(), seq_len, micro_batch, num_gpus,
                 (getattr(profile, "fingerprint", "") or "default") if profile is not None else "default",
                 tuple(strategies), summaries_t, tuple(cases), findings, None, what_if, questions)


def network_views(model: ModelSpec, topologies, networks: tuple[str, ...], *, num_gpus, seq_len, micro_batch,
                  profile, prices=None) -> tuple[dict, ...]:
    """--network: for each cluster among the topologies, the best plan on each network (whatif.compare_plans)."""
    from topowise.whatif import compare_plans

    clusters = [(label, t) for label, t in topologies if getattr(t, "num_nodes", 1) > 1]
    if not clusters:
        raise UsageError("--network compares networks between nodes: name a cluster among --topologies, "
                         "e.g. --topologies '4x hgx-h100-8+ib-ndr'")
    out = []
    for label, topo in clusters:
        rows = compare_plans(model, topo, networks, prices=prices, num_gpus=num_gpus or topo.num_gpus,
                             micro_batches=(micro_batch,), seq_len=seq_len, profile=profile)
        out.append({"topology": label, "rows": [r.to_dict() for r in rows]})
    return tuple(out)


def study_size(topologies: list[tuple[str, Topology]], num_gpus: int | None,
               strategies: tuple[str, ...] = STRATEGY_NAMES) -> int:
    """How many progress ticks `run_study` makes (predictions plus one plan per topology)."""
    return sum(len(placements_for(t, num_gpus)) * len(strategies) + 1 for _, t in topologies)


def check_study_args(topologies, *, num_gpus, seq_len, micro_batch, model: ModelSpec | None = None) -> None:
    if num_gpus is not None:
        if num_gpus < 1:
            raise UsageError(f"--num-gpus {num_gpus}: give at least 1")
        too_small = [(label, t.num_gpus) for label, t in topologies if t.num_gpus < num_gpus]
        if too_small:
            label, n = too_small[0]
            raise UsageError(f"--num-gpus {num_gpus} is more than topology {label!r} has ({n}); "
                             f"give --num-gpus {min(t.num_gpus for _, t in topologies)} or less")
    if seq_len < 1:
        raise UsageError(f"--seq-len {seq_len}: give a positive sequence length, e.g. 4096")
    if model is not None:  # here, once: each case's Run would otherwise record the refusal as its note
        check_seq_len(model, seq_len)
    if micro_batch < 1:
        raise UsageError(f"--micro-batch {micro_batch}: give a positive micro-batch, e.g. 1")


def _predict_case(model, topo, label, place, strategy, seq_len, micro_batch, profile, compile=False) -> Case:
    try:
        p = predict(Run(model, place.gpus, strategy, micro_batch=micro_batch, seq_len=seq_len, compile=compile),
                    topo, profile)
    except UsageError as exc:  # e.g. hsdp on a single island: the cost model says why
        return Case(label, place.label, strategy, place.gpus, error=str(exc))
    return Case(label, place.label, strategy, place.gpus, p.step_time_s, p.tokens_per_s, int(p.memory.peak_bytes),
                int(p.memory.gpu_memory_bytes), bool(p.fits), "", p.to_dict())


# --- findings (each computed from the numbers above) --------------------------------------------

def nvlink_pcie_ratios(topologies: list[tuple[str, Topology]]) -> tuple[Finding, ...]:
    """Per GPU into its largest NVLink island (what a collective there gets) over one PCIe x16 link."""
    out = []
    for label, topo in topologies:
        pcie = topo.pcie_gbps
        island = max(topo.islands(), key=len) if topo.gpus else ()
        if len(island) < 2:
            out.append(Finding("nvlink_pcie_ratio", label,
                               f"{label}: no NVLink; every pair goes over PCIe Gen{topo.pcie_gen} ({pcie:g} GB/s).",
                               {"nvlink_gbps": None, "pcie_gbps": pcie, "ratio": None, "island": list(island)}))
            continue
        nvlink = topo.bottleneck_gbps(island)
        ratio = nvlink / pcie
        if len(island) == topo.num_gpus:  # one island: no PCIe between the GPUs to compare with
            text = (f"{label}: NVLink joins all {len(island)} GPUs in one island at {nvlink:.1f} GB/s per GPU, "
                    f"{ratio:.1f}x one PCIe Gen{topo.pcie_gen} x16 link ({pcie:g} GB/s); no pair of GPUs "
                    "here talks over PCIe.")
        else:
            text = (f"{label}: NVLink gives each GPU {nvlink:.1f} GB/s inside its island of {len(island)}, "
                    f"{ratio:.1f}x the {pcie:g} GB/s of PCIe Gen{topo.pcie_gen} x16 that joins islands.")
        out.append(Finding("nvlink_pcie_ratio", label, text,
                           {"nvlink_gbps": nvlink, "pcie_gbps": pcie, "ratio": ratio, "island": list(island)}))
    return tuple(out)


def island_slowdowns(cases: list[Case], summaries: tuple[TopologySummary, ...]) -> tuple[Finding, ...]:
    """Step time across islands over step time inside one, per strategy, for each k placed both ways."""
    out = []
    for s in summaries:
        for k in (2, 4):
            inside_label, across_label = f"{k} in island", f"{k} across islands"
            for strategy in dict.fromkeys(c.strategy for c in cases):
                inside = _find(cases, s.label, inside_label, strategy)
                across = _find(cases, s.label, across_label, strategy)
                if not (inside and across and inside.ok and across.ok):
                    continue
                slowdown = across.step_time_s / inside.step_time_s
                out.append(Finding(
                    "island_slowdown", s.label,
                    f"{s.label}, {strategy} on {k} GPUs: {slowdown:.2f}x the step time when the GPUs span "
                    f"islands ({_gpus(across.gpus)}) instead of sharing one ({_gpus(inside.gpus)})"
                    + ("" if inside.fits and across.fits else " (this placement does not fit in memory)") + ".",
                    {"strategy": strategy, "gpus_per_job": k, "inside_gpus": list(inside.gpus),
                     "across_gpus": list(across.gpus), "inside_step_time_s": inside.step_time_s,
                     "across_step_time_s": across.step_time_s, "slowdown": slowdown,
                     "fits": bool(inside.fits and across.fits)}))
    return tuple(out)


def ddp_not_fitting(cases: list[Case]) -> tuple[Finding, ...]:
    out = []
    for c in cases:  # per topology, on all its GPUs (DDP's memory per GPU does not depend on their number)
        if c.strategy != "ddp" or c.placement != "all" or not c.ok or c.fits:
            continue
        over = c.peak_bytes - c.gpu_memory_bytes
        out.append(Finding(
            "ddp_does_not_fit", c.topology,
            f"{c.topology}, {c.placement} ({len(c.gpus)} GPUs): DDP needs {c.peak_bytes / GIB:.1f} GiB per GPU, "
            f"{over / GIB:.1f} GiB more than the {c.gpu_memory_bytes / GIB:.1f} GiB there is.",
            {"placement": c.placement, "gpus": list(c.gpus), "peak_bytes": c.peak_bytes,
             "gpu_memory_bytes": c.gpu_memory_bytes, "over_bytes": over}))
    return tuple(out)


def fsdp_near_ddp(cases: list[Case]) -> tuple[Finding, ...]:
    """zero2/zero3 at >= 90% of DDP's tokens/s on the same GPUs, using less memory."""
    out = []
    for ddp in cases:  # per topology, on all its GPUs
        if ddp.strategy != "ddp" or ddp.placement != "all" or not ddp.ok:
            continue
        for strategy in ("zero2", "zero3"):
            c = _find(cases, ddp.topology, ddp.placement, strategy)
            if not (c and c.ok) or c.peak_bytes >= ddp.peak_bytes:
                continue
            speed = c.tokens_per_s / ddp.tokens_per_s
            if speed < 1 - NEAR_DDP:
                continue
            saved = ddp.peak_bytes - c.peak_bytes
            note = "" if ddp.fits else "; DDP itself does not fit here"
            out.append(Finding(
                "fsdp_near_ddp", c.topology,
                f"{c.topology}, {c.placement} ({len(c.gpus)} GPUs): {strategy} "
                + (f"is {speed - 1:.0%} faster than DDP" if speed >= 1 else f"runs at {speed:.0%} of DDP's tokens/s")
                + f" and saves {saved / GIB:.1f} GiB per GPU ({c.peak_bytes / GIB:.1f} vs "
                f"{ddp.peak_bytes / GIB:.1f} GiB){note}.",
                {"placement": c.placement, "strategy": strategy, "gpus": list(c.gpus), "speed_vs_ddp": speed,
                 "memory_saved_bytes": saved, "peak_bytes": c.peak_bytes, "ddp_peak_bytes": ddp.peak_bytes,
                 "ddp_fits": bool(ddp.fits), "fits": bool(c.fits)}))
    return tuple(out)


def recommend(model: ModelSpec, topo: Topology, label: str, cases: list[Case], *, num_gpus, seq_len, micro_batch,
              profile, compile: bool = False) -> Finding:
    """The planner's first plan on this topology, with its reasons (and, with compile, whether compiling
    changes the winner)."""
    result = plan(model, topo, num_gpus=num_gpus or topo.num_gpus, micro_batches=(micro_batch,),
                  seq_len=seq_len, profile=profile, top=1, compile_choices=(False, True) if compile else (False,))
    if result.plans:
        p = result.plans[0]
        pred = p.prediction
        run = p.run
        ckpt = f" with {run.checkpoint_words} activation checkpointing" if run.activation_checkpointing else ""
        ckpt += ", compiled" if run.compile else ""
        note = result.compile_note
        compiled_note = f". {note[0].upper()}{note[1:]}" if note else ""
        lo, hi = pred.step_time_range_s
        host = (f" Host-bound: the step is {lo * 1e3:,.0f}-{hi * 1e3:,.0f} ms across the host's launch-to-launch "
                "spread." if pred.host_bound else "")
        return Finding(
            "recommendations", label,
            f"{label}: {p.strategy}{ckpt} on GPUs {_gpus(p.gpus)}, micro-batch {run.micro_batch}: "
            f"{pred.tokens_per_s:,.0f} tokens/s, {pred.memory.peak_bytes / GIB:.1f} GiB per GPU.{host} "
            f"{p.why.rstrip('.')}{compiled_note}",
            {"source": "planner", "strategy": p.strategy, "gpus": list(p.gpus), "micro_batch": run.micro_batch,
             "activation_checkpointing": run.activation_checkpointing, "checkpointing": run.checkpointing,
             "compile": run.compile, "host_bound": pred.host_bound, "step_time_range_s": list(pred.step_time_range_s),
             "tokens_per_s": pred.tokens_per_s,
             "peak_bytes": int(pred.memory.peak_bytes), "why": p.why.rstrip(".") + compiled_note,
             "shard_group_size": p.shard_group_size})
    why = result.suggestion or "no strategy fits in memory"
    return Finding("recommendations", label, f"{label}: nothing fits. {why}",
                   {"source": "planner", "strategy": None, "why": why})


def _find(cases, topology, placement, strategy) -> Case | None:
    for c in cases:
        if (c.topology, c.placement, c.strategy) == (topology, placement, strategy):
            return c
    return None


def _gpus(gpus) -> str:
    return ",".join(str(g) for g in gpus)


def _pct(predicted, measured) -> float | None:
    if predicted is None or not measured:
        return None
    return 100.0 * (predicted - measured) / measured


# --- measured columns (--measure, on a GPU machine) ---------------------------------------------

MEASURE_MODEL = "llama3.2-1b"  # small enough that every strategy fits on one 80 GB GPU


def measure_live(model: ModelSpec, topo: Topology, gpus: tuple[int, ...], *, seq_len: int, micro_batch: int,
                 steps: int, out_jsonl: str, profile=None, strategies: tuple[str, ...] = STRATEGY_NAMES,
                 timeout_s: float = 3600.0, trace_dir: str | None = None, compile: bool = False) -> MeasuredRun:
    """Run `topowise bench train` in a subprocess on `gpus`, then pair each record with its prediction;
    with trace_dir, the steps run under the profiler (`--trace`, which slows them) and where each
    strategy's measured step goes is read from trace_dir/<strategy>/breakdown.json.

    A child process keeps torch out of this one and survives a crashed benchmark; the child gets
    this environment unchanged (NCCL_* settings included), with CUDA_VISIBLE_DEVICES narrowed to `gpus`.
    """
    from topowise.measure.launcher import TIMED_OUT, run_topowise  # the one process starter

    args = ["bench", "train", "--nproc", str(len(gpus)), "--device", "cuda",
            "--model", model.name, "--strategies", ",".join(strategies), "--micro-batch", str(micro_batch),
            "--seq-len", str(seq_len), "--steps", str(steps), "--out", out_jsonl]
    if trace_dir:
        args += ["--trace", trace_dir]
    if compile:
        args += ["--compile"]
    env = dict(os.environ)
    if tuple(gpus) != topo.indices:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in gpus)
    shown = (f"CUDA_VISIBLE_DEVICES={env['CUDA_VISIBLE_DEVICES']} " if "CUDA_VISIBLE_DEVICES" in env
             and tuple(gpus) != topo.indices else "") + "python -m topowise " + " ".join(shlex.quote(a) for a in args)
    status = run_topowise(args, env=env, timeout_s=timeout_s)
    records = []
    if os.path.exists(out_jsonl):
        with open(out_jsonl) as fh:
            records = [json.loads(line) for line in fh if line.strip()]
    records = [r for r in records if r.get("kind") == "train"]
    if not records:
        why = f"stopped after {timeout_s:g} s" if status == TIMED_OUT else f"exit status {status}"
        raise UsageError(f"`{shown}` wrote no train records ({why}); run it by hand to see why")
    rows, latest = [], {}
    for strategy in strategies:
        rec = latest[strategy] = next((r for r in reversed(records) if r.get("strategy") == strategy), None)
        try:
            p = predict(Run(model, gpus, strategy, micro_batch=micro_batch, seq_len=seq_len, compile=compile),
                        topo, profile)
            # allocated bytes of a steady step: what max_memory_allocated over the timed steps measures
            pred_t, pred_m = p.step_time_s, int(p.memory.allocated_bytes)
        except UsageError:
            pred_t = pred_m = None
        if rec is None:
            rows.append(Measured(strategy, "missing", None, None, pred_t, pred_m))
            continue
        ok = rec.get("status") == "ok"
        rows.append(Measured(strategy, str(rec.get("status")), rec.get("step_time_s") if ok else None,
                             steady_peak_bytes(rec) if ok else None,
                             pred_t, pred_m))
    return MeasuredRun(model.name, topo.name, tuple(gpus), micro_batch, seq_len, shown, tuple(rows), trace_dir or "",
                       read_breakdowns(trace_dir, latest, strategies) if trace_dir else ())
