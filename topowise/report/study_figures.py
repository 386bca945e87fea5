"""The figures and choices the study report states beyond the Study's own numbers, computed from a Study.

report/render.py only formats what these return: which findings go where, which recommendation has a mesh,
what a measured step adds up to.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from topowise.report.breakdown import StepBreakdown
from topowise.report.study import Finding, Study

MESH_DIMS = ("tp", "pp", "cp", "dp")


def nvlink_finding(study: Study, label: str) -> Finding | None:
    """The NVLink-against-PCIe finding of one topology."""
    return next((f for f in study.findings_of("nvlink_pcie_ratio") if f.topology == label), None)


# --- recommendations --------------------------------------------------------------------------------

def mesh_degrees(values: dict) -> tuple[int, ...]:
    """(tp, pp, cp, dp) of a recommendation; a degree it does not name is 1."""
    return tuple(values.get(d) or 1 for d in MESH_DIMS)


def has_mesh(values: dict) -> bool:
    """Whether a recommendation has tensor, pipeline or context parallelism."""
    return max(mesh_degrees(values)[:3]) > 1


def any_mesh(findings: tuple[Finding, ...]) -> bool:
    return any(has_mesh(f.values) for f in findings)


def checkpointing_of(values: dict) -> str:
    """The activation checkpointing a recommendation runs; a record from before `checkpointing` was kept
    says only whether it checkpoints (then all of it)."""
    if values.get("checkpointing"):
        return values["checkpointing"]
    return "full" if values["activation_checkpointing"] else "none"


# --- DDP against FSDP ----------------------------------------------------------------------------------

def fsdp_instead_of_ddp(study: Study) -> list[Finding]:
    """zero2/zero3 where DDP does not fit: what takes its place."""
    return [f for f in study.findings_of("fsdp_near_ddp") if not f.values["ddp_fits"]]


def fsdp_beside_ddp(study: Study) -> list[Finding]:
    """zero2/zero3 within reach of a DDP that fits."""
    return [f for f in study.findings_of("fsdp_near_ddp") if f.values["ddp_fits"]]


def ddp_fits_somewhere(study: Study) -> bool:
    """Whether DDP on all GPUs of some topology was predicted and fits."""
    return any(c.fits for c in study.cases if (c.strategy, c.placement) == ("ddp", "all") and c.ok)


@dataclass(frozen=True)
class Rescue:
    """Where DDP does not fit: on how many topologies zero2 or zero3 fits instead, of how many."""

    rescued: int
    topologies: int


def fsdp_rescue(study: Study) -> Rescue | None:
    instead = fsdp_instead_of_ddp(study)
    if not instead:
        return None
    return Rescue(rescued=len({f.topology for f in instead if f.values["fits"]}),
                  topologies=len({f.topology for f in instead}))


def worst_island_slowdown(study: Study) -> Finding | None:
    """The largest island slowdown among placements that fit, when some do (those a job could take), else
    among all."""
    slow = study.findings_of("island_slowdown")
    if not slow:
        return None
    return max([f for f in slow if f.values["fits"]] or slow, key=lambda f: f.values["slowdown"])


# --- where the measured step goes -----------------------------------------------------------------------

@dataclass(frozen=True)
class StepTotals:
    """One strategy's measured median step summed over its phases (s), beside the cost model's sums (None
    where some phase had no prediction), and its exposed communication per collective."""

    compute_s: float
    exposed_comm_s: float
    host_wait_s: float
    other_s: float
    predicted_exposed_comm_s: float | None
    predicted_host_wait_s: float | None
    exposed_comm_by_collective: dict = field(default_factory=dict, compare=False, hash=False)


def step_totals(x: StepBreakdown) -> StepTotals:
    phases = list(x.phases.values())
    return StepTotals(
        compute_s=sum(v["compute_s"] for v in phases), exposed_comm_s=sum(v["exposed_comm_s"] for v in phases),
        host_wait_s=sum(v["host_wait_s"] for v in phases), other_s=sum(v["other_s"] for v in phases),
        predicted_exposed_comm_s=_sum_or_none(v["predicted_exposed_comm_s"] for v in phases),
        predicted_host_wait_s=_sum_or_none(v["predicted_host_wait_s"] for v in phases),
        exposed_comm_by_collective=_comm_by_collective(phases))


def _comm_by_collective(phases: list[dict]) -> dict[str, float]:
    comm: dict[str, float] = {}
    for v in phases:
        for op, s in v["exposed_comm_by_collective"].items():
            comm[op] = comm.get(op, 0.0) + s
    return comm


def _sum_or_none(values):
    values = list(values)
    return None if any(v is None for v in values) else sum(values)
