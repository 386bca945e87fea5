"""The Python API: load a topology and a model, describe a Run, predict it, plan it, study it.

What `topowise` re-exports (its `__all__`) is promised; every other module is private by convention. The
functions here call the library the CLI calls, with the CLI's defaults, so `predict(...).to_dict()` is
`topowise predict --json` and `plan(...).to_dict()` is `topowise plan --json`, each with `schema_version` added.
The heavy modules are imported inside the functions: `import topowise` stays a millisecond (docs/api.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from topowise.costmodel import prediction as _prediction
    from topowise.costmodel.profile import Profile
    from topowise.models.spec import ModelSpec
    from topowise.planner import search as _search
    from topowise.report.study import Study
    from topowise.run import Run
    from topowise.topology.model import Topology, Wiring

__all__ = ["SCHEMA_VERSION", "Plan", "PlanResult", "Prediction", "load_model", "load_topology", "plan", "predict",
           "study"]

# The version of the dictionaries to_dict() returns: raised when a key is renamed or removed or changes meaning
# (a key added keeps it), so a reader can refuse what it does not know.
SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Prediction:
    """One run's predicted step time and memory per GPU. `detail` is the cost model's whole prediction
    (costmodel/prediction.py: the time and memory breakdowns, the collectives); its attributes may change
    between releases, the properties here and the keys of to_dict() are what is promised."""

    detail: _prediction.Prediction
    schema_version: int = SCHEMA_VERSION

    @property
    def run(self) -> Run:
        """The run as predicted: placed (hsdp's shard group filled in)."""
        return self.detail.run

    @property
    def topology(self) -> str:
        return self.detail.topology

    @property
    def step_time_s(self) -> float:
        return self.detail.step_time_s

    @property
    def tokens_per_s(self) -> float:
        return self.detail.tokens_per_s

    @property
    def tokens_per_s_per_gpu(self) -> float:
        return self.detail.tokens_per_s_per_gpu

    @property
    def mfu(self) -> float:
        return self.detail.mfu

    @property
    def peak_memory_bytes(self) -> int:
        return self.detail.memory.peak_bytes

    @property
    def exposed_comm_s(self) -> float:
        return self.detail.time.exposed_comm_s

    @property
    def fits(self) -> bool:
        """The peak fits the GPU's memory less the profile's headroom."""
        return self.detail.fits

    def to_dict(self) -> dict:
        """`topowise predict --json` with schema_version first."""
        return {"schema_version": self.schema_version, **self.detail.to_dict()}


@dataclass(frozen=True)
class Plan:
    """One ranked plan: a run that fits, its prediction, and why it ranks where it does."""

    detail: _search.Plan

    @property
    def run(self) -> Run:
        return self.detail.run

    @property
    def strategy(self) -> str:
        return self.detail.strategy

    @property
    def gpus(self) -> tuple[int, ...]:
        return self.detail.gpus

    @property
    def why(self) -> str:
        return self.detail.why

    @property
    def prediction(self) -> Prediction:
        return Prediction(detail=self.detail.prediction)

    @property
    def step_time_s(self) -> float:
        return self.detail.prediction.step_time_s

    @property
    def tokens_per_s(self) -> float:
        return self.detail.prediction.tokens_per_s

    @property
    def peak_memory_bytes(self) -> int:
        return self.detail.prediction.memory.peak_bytes

    def to_dict(self) -> dict:
        """A row of `plan --json`'s plans."""
        return self.detail.to_dict()


@dataclass(frozen=True)
class PlanResult:
    """The plans that fit, best first, and the runs that do not fit with the reason. `detail` is the planner's
    result (planner/search.py; private: may change); the properties and to_dict()'s keys are promised."""

    detail: _search.PlanResult
    schema_version: int = SCHEMA_VERSION

    @property
    def model(self) -> str:
        return self.detail.model

    @property
    def topology(self) -> str:
        return self.detail.topology

    @property
    def plans(self) -> tuple[Plan, ...]:
        """The best `top` plans, best first (the best micro-batch and checkpointing of each strategy and
        placement)."""
        return tuple(Plan(detail=p) for p in self.detail.plans)

    @property
    def best(self) -> Plan | None:
        """The first plan; None when nothing fits (then `suggestion` says what would)."""
        return self.plans[0] if self.detail.plans else None

    @property
    def infeasible(self) -> tuple[dict, ...]:
        """Each run that does not fit: its row, peak memory and reason (as in `plan --json`)."""
        return tuple(i.to_dict() for i in self.detail.infeasible)

    @property
    def notes(self) -> tuple[str, ...]:
        return self.detail.notes

    @property
    def suggestion(self) -> str | None:
        return self.detail.suggestion

    def to_dict(self) -> dict:
        """`topowise plan --json` (without --export or --save-plan) with schema_version first."""
        return {"schema_version": self.schema_version, **self.detail.to_dict()}


def load_topology(source: str, gpu_name: str | None = None) -> Wiring:
    """A topology preset ("hgx-h100-8"), a cluster ("4x hgx-h100-8+ib-ndr"), or a file: `topowise topo --json`
    output or `nvidia-smi topo -m` text (`gpu_name`: its GPU model, which the text does not name). As
    --topology does for predict and plan: a topology whose GPU model is unknown is refused."""
    from topowise import topology

    return topology.load_topology(source, gpu_name, need_gpu_model=True)


def load_model(source: str) -> ModelSpec:
    """A model preset ("llama3.1-8b") or a Hugging Face config.json path, as --model reads it."""
    from topowise.models.spec import load_model as load

    return load(source)


def _profile_for(profile: Profile | str | Path | None, wiring: Wiring) -> Profile | None:
    """What --profile gives: a Profile as is, a path read (refused when calibrated on another GPU model),
    None the cached profile of this machine when it has the topology's GPUs, else None (the defaults)."""
    from topowise.costmodel.profile import Profile
    from topowise.costmodel.profile_store import resolve_profile

    if isinstance(profile, Profile):
        return profile
    return resolve_profile(None if profile is None else str(profile), [wiring.gpus[0].name])


def predict(run: Run, topology: Wiring | str, profile: Profile | str | Path | None = None) -> Prediction:
    """Step time and memory per GPU for `run` on `topology` (a Wiring, or what load_topology takes).
    profile: a Profile, a file from `topowise calibrate`, or None for what `topowise predict` uses without
    --profile (this machine's cached profile when its GPUs are the topology's, else the defaults)."""
    from topowise.costmodel.predict import predict as predict_run
    from topowise.costmodel.profile import default_profile

    wiring = load_topology(topology) if isinstance(topology, str) else topology
    chosen = _profile_for(profile, wiring) or default_profile()
    return Prediction(detail=predict_run(run, wiring, chosen))


def plan(model: ModelSpec | str, topology: Wiring | str, *, num_gpus: int | None = None,
         gpus: Sequence[int] | None = None, micro_batch: int | None = None, seq_len: int = 4096, top: int = 5,
         profile: Profile | str | Path | None = None, fabric: str = "nvlink", engine: str = "pytorch",
         compile: bool = False, precision: str = "bf16", fp8_recipe: str = "tensorwise", loss: str = "plain",
         attention: str = "flash") -> PlanResult:
    """Rank every strategy and GPU placement for `model` on `topology`, as `topowise plan` does with the same
    flags: num_gpus (default: each island size and the node), gpus (exactly these), micro_batch (default:
    1, 2, 4, 8 tried), compile (eager and compiled planned together); precision, fp8_recipe, loss, attention: Run's
    kernel settings for every candidate (--precision, --fp8-recipe, --loss, --attention)."""
    from topowise.errors import UsageError
    from topowise.planner.search import plan as plan_runs
    from topowise.run import KERNEL_DEFAULTS

    spec = load_model(model) if isinstance(model, str) else model
    wiring = load_topology(topology) if isinstance(topology, str) else topology
    kernels = {"precision": precision, "fp8_recipe": fp8_recipe, "loss": loss, "attention": attention}
    if num_gpus is not None and num_gpus > wiring.num_gpus:
        raise UsageError(f"num_gpus {num_gpus} is more than topology {wiring.name!r} has ({wiring.num_gpus} GPUs)")
    # the planner takes any Wiring (a Cluster too); its signature names Topology
    result = plan_runs(spec, cast("Topology", wiring), num_gpus=num_gpus, gpus=None if gpus is None else tuple(gpus),
                       micro_batches=None if micro_batch is None else (micro_batch,), seq_len=seq_len, top=top,
                       profile=_profile_for(profile, wiring), fabric=fabric, engine=engine,
                       compile_choices=(False, True) if compile else (False,),
                       kernels=None if kernels == KERNEL_DEFAULTS else kernels)
    return PlanResult(detail=result)


def study(model: ModelSpec | str = "llama3.1-8b", topologies: Sequence[str] | None = None, *,
          num_gpus: int | None = None, seq_len: int = 4096, micro_batch: int = 1,
          profile: Profile | str | Path | None = None, compile: bool = False,
          question_models: Sequence[ModelSpec | str] = (), out: str | Path | None = None) -> Study:
    """Every strategy x topology x placement predicted, with the findings, as `topowise study` does
    (topologies: names as --topologies takes them; None: the default presets plus this machine's node).
    question_models: answer the four network questions for these models (the CLI asks them for the model and
    a second size; here only when given). out: also write report.md, report.html, the plots and study.json
    there. The result's to_dict() is study.json, versioned by its own "format" and "version" keys."""
    from topowise.costmodel.profile_store import resolve_profile
    from topowise.report.study import resolve_topologies, run_study

    spec = load_model(model) if isinstance(model, str) else model
    wirings = resolve_topologies(None if topologies is None else list(topologies))
    if profile is None or isinstance(profile, (str, Path)):  # as --profile: not checked against each GPU model
        found = resolve_profile(None if profile is None else str(profile),
                                [t.gpus[0].name for _label, t in wirings if t.gpus], check=False)
    else:
        found = profile
    questions = tuple(load_model(m) if isinstance(m, str) else m for m in question_models)
    result = run_study(spec, wirings, num_gpus=num_gpus, seq_len=seq_len, micro_batch=micro_batch, profile=found,
                       question_models=questions, compile=compile)
    if out is not None:
        from topowise.report.render import write_report

        write_report(result, out)
    return result
