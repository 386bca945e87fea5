"""Fitting: records in, Profile parameters out (pure functions, numpy for the least squares).

What each parameter is fitted from (the Profile's `sources` repeat it, with the numbers):
- comm_efficiency / latency_s per "LINK/op": weighted least squares of t = alpha + S f / (line e)
  over the size sweep of `bench comm` (f: the nccl-tests bus factor; weights 1/t, so each size
  counts by its relative error). NVLink from `--fabric nvlink`, PCIe from `--fabric pcie`.
- hbm_efficiency: the fused AdamW step and the fp32 loss timed alone (measure/passes.py), their mean
  rate over the datasheet's.
- host_s_per_layer: bench train's host seconds per phase / blocks, median over the host-bound runs
  (the GPU's predicted work under half the step: the 128-token runs).
- compute_efficiency, activation_traffic and overlap per strategy: bounded least squares
  (Levenberg-Marquardt on relative errors) of the cost model's step time against the measured median
  step time of the runs the host does not dominate (two model sizes whose activation bytes per FLOP
  differ tell elementwise traffic from compute); hbm_efficiency instead of activation_traffic where
  the passes were not measured (CPU); an overlap no run could see (no hideable communication) keeps
  its source's value and says so.
- activation_scale: the same fit of the model's allocated bytes against torch.cuda.max_memory_allocated.
- allocator_slack: the median of reserved / allocated - 1 over the same runs.
- peak_flops (CPU only): the bf16 matrix product rate measured on each rank.
- cuda_context_bytes and memory_headroom are not measured (outside max_memory_allocated): kept.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace

import numpy as np

from topowise import hardware
from topowise.calibrate.cases import Case
from topowise.calibrate.crypto import apply_encryption, encryption_fit
from topowise.calibrate.machine import link_class
from topowise.costmodel import host_ops
from topowise.costmodel.comm import ring_scale, uses_nvls
from topowise.costmodel.memory import recast_blocks
from topowise.costmodel.predict import predict
from topowise.costmodel.profile import OPS as PROFILE_OPS
from topowise.costmodel.profile import Profile, default_profile
from topowise.costmodel.step import block_host_s, dispatch_autocast
from topowise.errors import UsageError
from topowise.measure.records import steady_peak_bytes
from topowise.models.spec import ModelSpec, load_model
from topowise.run import STEP_PHASES, STRATEGY_NAMES
from topowise.units import GIB, KIB, MIB, busbw_factor

# ================================================================================================
# Communication: alpha-beta per link class and op


@dataclass(frozen=True)
class CommFit:
    link: str
    op: str
    efficiency: float
    latency_s: float
    line_gbps: float
    points: int
    min_bytes: int
    max_bytes: int
    max_residual: float  # largest |predicted/measured - 1| over the sweep
    group_size: int = 2
    nvls_seen: bool = False  # NCCL's log says NVLink SHARP was connected during the sweep

    def source(self, where: str) -> str:
        return (f"calibrated ({where}): {self.op} over {self.link}, {self.group_size} GPUs, {self.points} sizes "
                f"{human_bytes(self.min_bytes)}..{human_bytes(self.max_bytes)}; weighted least squares of "
                f"t = alpha + S f / (line e): busbw {self.line_gbps * self.efficiency:.1f} GB/s = "
                f"{self.efficiency:.3f} of {self.line_gbps:g} GB/s, alpha {self.latency_s * 1e6:.1f} us; "
                f"worst size off by {100 * self.max_residual:.1f}%")


def fit_alpha_beta(points: list[tuple[float, float]]) -> tuple[float, float]:
    """(alpha, beta) minimizing sum(((alpha + beta x - t) / t)^2) over (x, t); alpha >= 0, beta > 0.

    Weighted least squares with weights 1/t^2: each size counts by its relative error, so the large
    sizes do not drown the latency the small ones show. Where the best line has a negative alpha (no
    latency visible), alpha is held at its bound 0 and beta fitted alone.
    """
    if len(points) < 2:
        raise ValueError("an alpha-beta fit needs two or more sizes")
    x, t = np.array(points, dtype=float).T
    rows = np.column_stack([1.0 / t, x / t])  # (alpha + beta x) / t = 1
    (alpha, beta), _, rank, _ = np.linalg.lstsq(rows, np.ones_like(t), rcond=None)
    # an alpha below a billionth of the shortest time is the solver's rounding, not a latency
    if rank < 2 or alpha < 1e-9 * t.min() or beta <= 0:
        u = x / t
        return 0.0, float(u.sum() / (u @ u))
    return float(alpha), float(beta)


def fit_comm(records: list[dict], links: dict[str, tuple[str, float]], where: str = "",
             min_bytes: int = 0) -> list[CommFit]:
    """Alpha-beta per (link class, op) from `bench comm` records of `min_bytes` and up.

    links: fabric -> (link class, line GB/s) of the measured group on that fabric.
    """
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in records:
        if (r.get("kind") != "collective" or r.get("wrong") or not r.get("time_s") or r["op"] not in PROFILE_OPS
                or r["bytes"] < min_bytes):
            continue
        fabric = r.get("fabric", "nvlink")
        if fabric not in links:
            continue
        groups.setdefault((links[fabric][0], r["op"]), []).append(r)
    fits = []
    for (link, op), recs in sorted(groups.items()):
        line = next(links[f][1] for f in links if links[f][0] == link)
        n = int(recs[0]["world_size"])
        pts = [(r["bytes"] * busbw_factor(op, n) / (line * 1e9), float(r["time_s"])) for r in recs]
        if len(pts) < 2:
            continue
        alpha, beta = fit_alpha_beta(pts)
        worst = max(abs((alpha + beta * x) / t - 1.0) for x, t in pts)
        nvls = any("NVLS" in str(r.get("transport") or "") for r in recs)
        fits.append(CommFit(link, op, 1.0 / beta, alpha, line, len(pts), min(r["bytes"] for r in recs),
                            max(r["bytes"] for r in recs), worst, n, nvls))
    return fits


def apply_comm_fits(profile: Profile, fits: list[CommFit], where: str) -> Profile:
    """The profile with each fit's latency and efficiency. The profile holds a 2-GPU ring's efficiency
    (comm.py scales it to n on an NVSwitch), so a sweep over more GPUs there is divided by that scale;
    an all-reduce sweep NVLink SHARP may have carried keeps the default efficiency (rerun calibrate
    with NCCL_NVLS_ENABLE=0 to fit the ring)."""
    eff, lat, src = dict(profile.comm_efficiency), dict(profile.latency_s), dict(profile.sources)
    for f in fits:
        key = f"{f.link}/{f.op}"
        text = f.source(where)
        lat[key] = f.latency_s
        src[f"latency_s.{key}"] = text
        if f.nvls_seen and uses_nvls(f.op, f.group_size, f.link, profile):
            src[f"comm_efficiency.{key}"] = (f"{src.get(f'comm_efficiency.{key}', '')} (kept: NCCL ran NVLink SHARP "
                                             f"during calibration, {text})")
            continue
        scale = ring_scale(f.op, f.group_size, f.link, profile)
        eff[key] = round(f.efficiency / scale, 5)
        src[f"comm_efficiency.{key}"] = text + (f"; / {scale:.3f}, the {f.group_size}-GPU ring's scale over 2 GPUs "
                                                "(comm.ring_scale)" if scale != 1.0 else "")
    return replace(profile, comm_efficiency=eff, latency_s=lat, sources=src)


NVLS_ENV = "NCCL_NVLS_ENABLE"


def nvls_as_run(profile: Profile, nvls_env: str | None, where: str) -> Profile:
    """A machine calibrated with NCCL_NVLS_ENABLE=0 runs NCCL that way: its profile predicts without
    NVLink SHARP (any other value, or none, leaves NCCL's default: on where the switch has it)."""
    if nvls_env is None or nvls_env.strip() != "0":
        return profile
    src = dict(profile.sources, nvls_enabled=f"calibrated ({where}): {NVLS_ENV}=0 in the environment calibrate ran in")
    return replace(profile, nvls_enabled=False, sources=src)


# ================================================================================================
# Bounded least squares of relative errors over named Profile parameters

PARAM_BOUNDS = {"compute_efficiency": (0.01, 1.0), "hbm_efficiency": (0.05, 1.0), "activation_scale": (0.2, 5.0),
                "activation_traffic": (0.0, 40.0), "compiled_activation_traffic": (0.0, 40.0),
                "allocator_slack": (0.0, 2.0)}
OVERLAP_BOUNDS = (0.0, 1.0)
# what `calibrate --fit` may name besides overlap.<strategy>
STEP_TIME_PARAMS = ("compute_efficiency", "hbm_efficiency", "activation_traffic")


def get_param(profile: Profile, name: str) -> float:
    if name.startswith("overlap."):
        return float(profile.overlap.get(name.split(".", 1)[1], 0.0))
    return float(getattr(profile, name))


def set_param(profile: Profile, name: str, value: float) -> Profile:
    if name.startswith("overlap."):
        return replace(profile, overlap=dict(profile.overlap, **{name.split(".", 1)[1]: value}))
    return replace(profile, **{name: value})


def bounds_of(name: str) -> tuple[float, float]:
    return OVERLAP_BOUNDS if name.startswith("overlap.") else PARAM_BOUNDS[name]


@dataclass(frozen=True)
class ParamFit:
    values: dict  # name -> fitted value (only the identified ones)
    unidentified: tuple[str, ...]  # no observation moves them: kept as they were
    rms_error: float  # root mean square of predicted/measured - 1 after the fit
    max_error: float
    observations: int


def fit_parameters(profile: Profile, names: list[str], observations: list, predict_fn: Callable,
                   measured: Callable, max_iter: int = 200) -> ParamFit:
    """Least squares of relative errors: minimize sum((predict_fn(profile', obs) / measured(obs) - 1)^2)
    over the named parameters of `profile` (bounded), starting from their current values.

    Levenberg-Marquardt with a central-difference Jacobian; a step that leaves the bounds is clipped
    back onto them. A parameter that changes no prediction (e.g. an overlap with nothing to hide) is
    left as it was and reported in `unidentified`.
    """
    meas = np.array([float(measured(o)) for o in observations])

    def residuals(values: dict) -> np.ndarray:
        p = profile
        for n, v in values.items():
            p = set_param(p, n, float(v))
        return np.array([predict_fn(p, o) for o in observations], dtype=float) / meas - 1.0

    start = {n: get_param(profile, n) for n in names}
    # identifiability: does a small move of the parameter change any prediction?
    r0 = residuals(start)
    active = []
    for n in names:
        lo, hi = bounds_of(n)
        for step in (0.02, -0.02):
            v = min(max(start[n] + step * (hi - lo), lo), hi)
            if v != start[n] and np.max(np.abs(residuals(dict(start, **{n: v})) - r0), initial=0.0) > 1e-9:
                active.append(n)
                break
    lo = np.array([bounds_of(n)[0] for n in active])
    hi = np.array([bounds_of(n)[1] for n in active])
    x = np.array([start[n] for n in active])
    at = lambda v: dict(start, **dict(zip(active, v)))  # noqa: E731 - the full parameter set for a vector
    lam = 1e-3
    r = r0
    cost = float(r @ r)
    for _ in range(max_iter if active else 0):
        jac = np.empty((len(r), len(active)))  # d residual / d parameter, central differences inside the bounds
        for i in range(len(active)):
            h = 1e-6 * (hi[i] - lo[i])
            a, b = x.copy(), x.copy()
            a[i], b[i] = max(x[i] - h, lo[i]), min(x[i] + h, hi[i])
            jac[:, i] = (residuals(at(b)) - residuals(at(a))) / (b[i] - a[i])
        jtj, jtr = jac.T @ jac, jac.T @ r
        improved = False
        while lam < 1e12:
            damped = jtj + np.diag(lam * (np.diag(jtj) + 1e-12))
            try:
                delta = np.linalg.solve(damped, -jtr)
            except np.linalg.LinAlgError:
                delta = None
            if delta is None or not np.all(np.isfinite(delta)):  # singular: damp harder
                lam *= 10
                continue
            trial = np.clip(x + delta, lo, hi)
            rt = residuals(at(trial))
            ct = float(rt @ rt)
            if ct < cost:
                moved = float(np.max(np.abs(trial - x)))
                x, r, cost = trial, rt, ct
                lam = max(lam / 3, 1e-12)
                improved = moved > 1e-10
                break
            lam *= 4
        if not improved or cost < 1e-24:
            break
    return ParamFit({n: float(v) for n, v in zip(active, x)}, tuple(n for n in names if n not in active),
                    math.sqrt(cost / len(r)) if len(r) else 0.0, float(np.max(np.abs(r), initial=0.0)), len(r))


# ================================================================================================
# Training observations


@dataclass(frozen=True)
class Observation:
    """A finished training run, as the cost model sees it."""

    model: str
    strategy: str
    micro_batch: int
    seq_len: int
    fabric: str
    activation_checkpointing: bool | str  # False, True (full) or "selective"
    world_size: int
    shard_group_size: int | None
    step_time_s: float
    peak_allocated_bytes: float | None
    reserved_bytes: float | None
    step_spread: float = 0.0  # interquartile range / median of the timed steps (`step_spread`)
    host_phase_s: dict | None = None  # bench train's host seconds per phase (median of the timed steps)
    device: str = "cuda"
    # what the run trained, where the record says (bench train's `model_spec`, `model_source`); older
    # records name a preset only (`model`), which load_model reads again
    model_source: str | None = None
    model_spec: ModelSpec | None = None
    compile: bool = False  # every block compiled (bench train --compile)
    compile_s: float | None = None  # compiled: the first warm-up step less a timed one (compiling)
    selective_ac_option: str = "op"
    engine: str = "pytorch"  # who ran the strategy: PyTorch's wrappers or DeepSpeed's ZeRO
    mesh: dict | None = None  # a mesh run's Case keywords (tp, pp, cp, grad_accum, pp_schedule); None: none

    @property
    def case(self) -> Case:
        return Case(self.model, self.strategy, self.micro_batch, self.seq_len, self.fabric,
                    self.activation_checkpointing, self.compile, self.selective_ac_option, self.engine,
                    **(self.mesh or {}))


# A run whose identical timed steps differ by more than this (interquartile range / median) is not in a
# steady state: on the 2x H200 those were the host-bound FSDP2 runs of small models, whose steps spread
# 5-25% while GPU-bound ones spread 0.1-2% (docs/calibration.md). The GPU-rate fit leaves them out.
UNSTEADY_SPREAD = 0.05


def step_spread(times) -> float:
    """Interquartile range / median of per-step times; 0 with fewer than 4 steps (nothing to judge)."""
    x = sorted(float(t) for t in times or ())
    if len(x) < 4:
        return 0.0
    median = statistics.median(x)
    return (x[(3 * len(x)) // 4] - x[len(x) // 4]) / median if median > 0 else 0.0


def observation_from(r: dict) -> Observation:
    """One bench train record (kind "train") as an Observation; a failed run's step time is 0."""
    spec = None
    if r.get("model_spec") is not None:
        try:
            spec = ModelSpec.from_dict(r["model_spec"])
        except (TypeError, ValueError, AttributeError) as exc:
            raise UsageError(f"a {r.get('model')!r} record's model_spec is not a model shape topowise reads "
                             f"({exc})") from None
    return Observation(
        model=r["model"], strategy=r["strategy"], micro_batch=int(r["micro_batch"]), seq_len=int(r["seq_len"]),
        fabric=r.get("fabric", "nvlink"),
        activation_checkpointing="selective" if r.get("checkpointing") == "selective"
        else bool(r.get("activation_checkpointing")),
        selective_ac_option=str(r.get("selective_ac_option") or "op"),
        world_size=int(r["world_size"]),
        shard_group_size=r.get("shard_group_size") if r["strategy"] == "hsdp" else None,
        step_time_s=float(r.get("step_time_s") or 0.0),
        peak_allocated_bytes=steady_peak_bytes(r),
        reserved_bytes=r.get("reserved_bytes"), step_spread=step_spread(r.get("step_times_s")),
        host_phase_s=r.get("host_phase_s"), device=r.get("device", "cuda"),
        model_source=r.get("model_source"), model_spec=spec, compile=bool(r.get("compile")),
        compile_s=first_step_excess(r) if r.get("compile") else None, engine=str(r.get("engine") or "pytorch"),
        mesh={k: r[k] for k in ("tp", "pp", "cp", "grad_accum") if k in r} | (
            {"pp_schedule": r["pp_schedule"]} if r.get("pp_schedule") else {}) if "tp" in r else None)


def first_step_excess(r: dict) -> float | None:
    """The first warm-up step less the median timed step: what compiling cost this launch (None: no warm-up)."""
    warmup, step = r.get("warmup_step_times_s") or [], r.get("step_time_s")
    return max(float(warmup[0]) - float(step), 0.0) if warmup and step else None


def observations_from(records: list[dict]) -> list[Observation]:
    """The finished runs among the records."""
    return [observation_from(r) for r in records
            if r.get("kind") == "train" and r.get("status") == "ok" and r.get("step_time_s")]


def model_resolver(model_loader: Callable | None = None) -> Callable[[Observation], ModelSpec]:
    """observation -> the ModelSpec it trained: the record's own shape (`model_spec`) where it has one,
    else what its `model_source` (a config's path) or, in older records, its `model` (a preset) loads
    (`model_loader`, default load_model; cached)."""
    load = model_loader or load_model
    models: dict[str, ModelSpec] = {}

    def model_of(o: Observation) -> ModelSpec:
        if o.model_spec is not None:
            return o.model_spec
        ref = o.model_source or o.model
        if ref not in models:
            models[ref] = load(ref)
        return models[ref]

    return model_of


def predictor(topo, model_loader: Callable | None = None) -> Callable:
    """predict(profile, observation) -> Prediction on the measured GPUs of `topo` (models: model_resolver)."""
    model_of = model_resolver(model_loader)

    def predict_one(profile: Profile, o: Observation):
        run = o.case.run(model_of(o), topo.indices[:o.world_size], o.shard_group_size)
        return predict(run, topo, profile)

    return predict_one


# Strategies that share a mechanism inherit an overlap no run measured (profile.py's own reasoning).
OVERLAP_INHERIT = {"zero1": ("ddp",), "ddp": ("zero1",), "zero2": ("zero3", "hsdp"), "zero3": ("zero2", "hsdp"),
                   "hsdp": ("zero3", "zero2")}


# A run is host-bound when the GPU's share of its step, as the model predicts it with no host term, is
# under this fraction of the measured step: the GPU idles most of the step waiting for the host, so
# bench train's host phase times are what the host needs, not time spent blocked on a busy GPU.
HOST_BOUND_FRACTION = 0.5


# The GPU-rate fit leaves out runs whose fitted host time is over this fraction of the measured step:
# there the step is set by the host (or by both, phase by phase), not by the GPU's rates.
HOST_DOMINATED_FRACTION = 0.75


def host_bound_runs(profile: Profile, obs: list[Observation], predict_one: Callable) -> list[Observation]:
    """The GPU runs whose device-only prediction is under HOST_BOUND_FRACTION of the measured step."""
    device_only = replace(profile, host_s_per_layer={})
    return [o for o in obs if o.device == "cuda" and o.host_phase_s
            and predict_one(device_only, o).step_time_s < HOST_BOUND_FRACTION * o.step_time_s]


def as_reference_block(per_block_s: float, run, phase: str, ddp_per_block_s: float | None) -> float:
    """A run's host seconds per block in a phase as the reference block would take them (costmodel/host_ops.py):
    in the forward and backward, eager ddp's scaled by the reference block's operators over its block's (its own
    term is the price per operator), another eager strategy's less its block's extra operators at ddp's price
    (`ddp_per_block_s`, the profile's term, fitted first), compiled runs' as they are; in the optimizer step,
    scaled by the reference block's parameter tensors over its block's."""
    if phase == "optimizer":
        return per_block_s / host_ops.optimizer_scale(run.model)
    if run.compile:
        return per_block_s
    autocast = dispatch_autocast(run)
    if run.strategy == "ddp":
        i = host_ops.PHASE_INDEX[phase]
        return per_block_s * host_ops.reference_ops(autocast)[i] / host_ops.block_ops(run.model, autocast)[i]
    price = host_ops.per_op_s(ddp_per_block_s or 0.0, phase)
    return per_block_s - host_ops.extra_ops(run.model, autocast, phase) * price


def fit_host(profile: Profile, obs: list[Observation], predict_one: Callable,
             layers: Callable[[str], int] | None, where: str) -> tuple[Profile, list[Observation]]:
    """host_s_per_layer["strategy/phase"]: the median over host-bound runs of that strategy of bench
    train's host seconds in the phase / the model's blocks (`layers(model name)`; None: the blocks of
    the model predict_one predicts the run with), as the reference block would take them
    (as_reference_block; ddp first, whose term prices the others' extra operators). Returns the profile and
    the runs used."""
    blocks = ((lambda o: layers(o.model)) if layers is not None
              else (lambda o: predict_one(profile, o).run.model.num_layers))
    bound = host_bound_runs(profile, obs, predict_one)
    values, src = dict(profile.host_s_per_layer), dict(profile.sources)
    for compiled, strategy in [(c, s) for c in (False, True) for s in STRATEGY_NAMES]:
        runs = [o for o in bound if o.strategy == strategy and o.compile == compiled and not o.activation_checkpointing
                and o.engine == "pytorch"]
        if not runs:
            continue
        names = ", ".join(f"{o.model} mb{o.micro_batch} seq{o.seq_len} {o.fabric}" for o in runs)
        prefix = "compiled/" if compiled else ""
        for phase in STEP_PHASES:
            per_layer = [as_reference_block(o.host_phase_s[phase] / blocks(o), predict_one(profile, o).run, phase,
                                            values.get(f"ddp/{phase}"))
                         for o in runs]
            values[f"{prefix}{strategy}/{phase}"] = round(statistics.median(per_layer), 7)
            src[f"host_s_per_layer.{prefix}{strategy}/{phase}"] = (
                f"calibrated ({where}): median of bench train's host seconds in the {phase} per block over "
                f"{len(runs)} host-bound{' compiled' if compiled else ''} runs ({names}; GPU work under "
                f"{HOST_BOUND_FRACTION:g} of the step): "
                + ", ".join(f"{1e3 * v:.2f}" for v in per_layer) + " ms")
    profile = replace(profile, host_s_per_layer=values, sources=src)
    return fit_checkpointing_host(profile, bound, predict_one, where), bound


CHECKPOINTING_HOST_KEYS = ("checkpoint/", "selective-op/")  # host_s_per_layer's checkpointing terms


def without_checkpointing_host(profile: Profile) -> Profile:
    """The profile with no checkpointing host terms: what the plain host terms give a run."""
    return replace(profile, host_s_per_layer={k: v for k, v in profile.host_s_per_layer.items()
                                              if not k.startswith(CHECKPOINTING_HOST_KEYS)})


def fit_checkpointing_host(profile: Profile, bound: list[Observation], predict_one: Callable,
                           where: str) -> Profile:
    """host_s_per_layer["checkpoint/phase"] and ["selective-op/phase"] (step.checkpointing_host_s): over the
    host-bound checkpointed PyTorch runs, the median of (host seconds in the phase less what the profile's
    plain terms give the run) per block the mode touches: each block recomputed whole, or every block
    under per-op selective."""
    values, src = dict(profile.host_s_per_layer), dict(profile.sources)
    plain = without_checkpointing_host(profile)
    for key in ("checkpoint", "selective-op"):
        extra: dict[str, list[float]] = {phase: [] for phase in ("forward", "backward")}
        names = []
        for o in bound:
            if not o.activation_checkpointing or o.engine != "pytorch":
                continue
            run = predict_one(profile, o).run
            if run.per_op_checkpointing != (key == "selective-op"):
                continue
            blocks = recast_blocks(run)
            for phase in extra:
                plain_block = plain.host_s(o.strategy, phase, o.compile) + block_host_s(run, plain, phase)
                extra[phase].append((o.host_phase_s[phase] - plain_block * run.model.num_layers) / blocks)
            names.append(f"{o.model} {o.strategy} mb{o.micro_batch} seq{o.seq_len}")
        for phase, per_block in extra.items():
            if per_block:
                values[f"{key}/{phase}"] = round(statistics.median(per_block), 7)
                src[f"host_s_per_layer.{key}/{phase}"] = (
                    f"calibrated ({where}): median over {len(names)} host-bound runs ({', '.join(names)}) of the "
                    f"host seconds in the {phase} beyond the plain terms, per block: "
                    + ", ".join(f"{1e3 * v:.2f}" for v in per_block) + " ms")
    return replace(profile, host_s_per_layer=values, sources=src)


def fit_step_time(profile: Profile, obs: list[Observation], predict_one: Callable, where: str,
                  names: list[str] | None = None) -> tuple[Profile, ParamFit]:
    """The GPU-rate parameters (`names`; default compute_efficiency, hbm_efficiency and each measured
    strategy's overlap) from measured step times.

    Runs whose timed steps spread more than UNSTEADY_SPREAD are left out (not a steady state); the
    sources name them."""
    unsteady = [o for o in obs if o.step_spread > UNSTEADY_SPREAD]
    obs = [o for o in obs if o.step_spread <= UNSTEADY_SPREAD]
    if not obs:
        return profile, ParamFit({}, (), 0.0, 0.0, 0)
    strategies = [s for s in STRATEGY_NAMES if any(o.strategy == s for o in obs)]
    names = names or ["compute_efficiency", "hbm_efficiency"] + [f"overlap.{s}" for s in strategies]
    # an overlap of a strategy no (steady) run measured is inherited below, not fitted
    names = [n for n in names if not n.startswith("overlap.") or n.split(".", 1)[1] in strategies]
    fit = fit_parameters(profile, names, obs, lambda p, o: predict_one(p, o).step_time_s, lambda o: o.step_time_s)
    runs = describe_runs(obs)
    if unsteady:
        runs += (f"; left out, timed steps spread over {100 * UNSTEADY_SPREAD:g}% (not steady): "
                 + ", ".join(f"{o.case.label} ({100 * o.step_spread:.1f}%)" for o in unsteady))
    src = dict(profile.sources)
    for name, value in fit.values.items():
        profile = set_param(profile, name, round(value, 5))
        src[name] = (f"calibrated ({where}): least squares of predicted vs measured step time over {runs}; "
                     f"rms error {100 * fit.rms_error:.1f}%, worst {100 * fit.max_error:.1f}%")
    for name in fit.unidentified:
        src[name] = (f"not identified by calibration ({where}: no run where it changes the prediction); "
                     f"kept: {src.get(name, 'default')}")
    # overlaps of strategies no run measured: from the nearest measured mechanism
    fitted = {n.split(".", 1)[1] for n in fit.values if n.startswith("overlap.")}
    overlap = dict(profile.overlap)
    for s in STRATEGY_NAMES:
        if s in fitted:
            continue
        donor = next((d for d in OVERLAP_INHERIT[s] if d in fitted), None)
        if donor:
            overlap[s] = overlap[donor]
            src[f"overlap.{s}"] = f"calibrated ({where}): no {s} run; the same mechanism as {donor}, its fitted value"
    return replace(profile, overlap=overlap, sources=src), fit


def paired_eager(obs: list[Observation]) -> list[tuple[Observation, Observation]]:
    """(compiled run, the eager run of the same case: model, strategy, shape, fabric, checkpointing)."""
    eager = {replace(o.case, compile=True): o for o in obs if not o.compile}
    return [(o, eager[o.case]) for o in obs if o.compile and o.case in eager]


def fit_compiled(profile: Profile, obs: list[Observation], predict_one: Callable,
                 where: str) -> tuple[Profile, ParamFit | None]:
    """compiled_activation_traffic from each compiled run beside its eager twin: what compiling saved
    (measured eager - measured compiled) is taken from the eager prediction, and the compiled elementwise
    traffic fitted to that. The eager model's own error cancels; only the removed time is fitted. Runs
    not in a steady state or set by the host (host-bound, either twin) are left out. compile_s: the
    median over the compiled runs of the first step's excess."""
    src = dict(profile.sources)
    compile_runs = [o for o in obs if o.compile and o.compile_s is not None]
    if compile_runs:
        value = statistics.median(o.compile_s for o in compile_runs)
        profile = replace(profile, compile_s=round(value, 2))
        src["compile_s"] = (f"calibrated ({where}): median over {len(compile_runs)} compiled runs of the first "
                            "warm-up step less the median timed step: "
                            + ", ".join(f"{o.case.label} {o.compile_s:.1f} s" for o in compile_runs))
    pairs = [(c, e) for c, e in paired_eager(obs)
             if max(c.step_spread, e.step_spread) <= UNSTEADY_SPREAD
             and predict_one(profile, e).time.host_wait_s == 0 and predict_one(profile, c).time.host_wait_s == 0]
    if not pairs:
        src["compiled_activation_traffic"] = (f"not calibrated ({where}: no GPU-bound compiled run beside its eager "
                                              f"twin); kept: {src.get('compiled_activation_traffic', '')}")
        return replace(profile, sources=src), None
    target = {id(c): predict_one(profile, e).step_time_s - (e.step_time_s - c.step_time_s) for c, e in pairs}
    fit = fit_parameters(profile, ["compiled_activation_traffic"], [c for c, _ in pairs],
                         lambda p, o: predict_one(p, o).step_time_s, lambda o: target[id(o)])
    if "compiled_activation_traffic" in fit.values:
        profile = replace(profile, compiled_activation_traffic=round(fit.values["compiled_activation_traffic"], 4))
        src["compiled_activation_traffic"] = (
            f"calibrated ({where}): least squares of the compiled prediction against the eager prediction less "
            "what compiling saved, measured eager - compiled, over "
            + ", ".join(f"{c.case.label} ({1e3 * e.step_time_s:.1f} -> {1e3 * c.step_time_s:.1f} ms)"
                        for c, e in pairs)
            + f"; rms error {100 * fit.rms_error:.1f}%, worst {100 * fit.max_error:.1f}%")
    return replace(profile, sources=src), fit


def fit_memory(profile: Profile, obs: list[Observation], predict_one: Callable,
               where: str) -> tuple[Profile, ParamFit | None]:
    """activation_scale from measured max_memory_allocated; allocator_slack from reserved vs allocated."""
    mem = [o for o in obs if o.peak_allocated_bytes]
    src = dict(profile.sources)
    if not mem:
        for name in ("activation_scale", "allocator_slack"):
            src[name] = f"not calibrated ({where}: the runs report no allocator statistics); kept: {src.get(name, '')}"
        return replace(profile, sources=src), None
    fit = fit_parameters(profile, ["activation_scale"], mem, lambda p, o: predict_one(p, o).memory.allocated_bytes,
                         lambda o: o.peak_allocated_bytes)
    if "activation_scale" in fit.values:
        profile = replace(profile, activation_scale=round(fit.values["activation_scale"], 4))
        src["activation_scale"] = (f"calibrated ({where}): least squares of the model's allocated bytes vs "
                                   f"torch.cuda.max_memory_allocated over {describe_runs(mem)}; rms error "
                                   f"{100 * fit.rms_error:.1f}%, worst {100 * fit.max_error:.1f}%")
    slacks = [o.reserved_bytes / o.peak_allocated_bytes - 1.0 for o in mem if o.reserved_bytes]
    if slacks:
        slack = max(0.0, statistics.median(slacks))
        profile = replace(profile, allocator_slack=round(slack, 4))
        src["allocator_slack"] = (f"calibrated ({where}): median of max_memory_reserved / max_memory_allocated - 1 "
                                  f"over {len(slacks)} runs (range {100 * min(slacks):.1f}%..{100 * max(slacks):.1f}%)")
    return replace(profile, sources=src), fit


def describe_runs(obs: list[Observation]) -> str:
    models = sorted({o.model for o in obs})
    strategies = [s for s in STRATEGY_NAMES if any(o.strategy == s for o in obs)]
    fabrics = sorted({o.fabric for o in obs})
    return f"{len(obs)} runs ({', '.join(models)}; {', '.join(strategies)}; {', '.join(fabrics)})"


# ================================================================================================
# Every fit, in order


def fit_profile(records: list[dict], topo, fingerprint: str, *, where: str = "", base: Profile | None = None,
                model_loader: Callable | None = None, fit_names: list[str] | None = None,
                comm_min_bytes: int = 0) -> tuple[Profile, dict]:
    """Every fit in order: comm, peak (CPU), HBM rate (passes), host, GPU rates, memory. Returns the
    profile and a report."""
    profile = base or default_profile()
    gpus = tuple(topo.indices)
    fabrics = sorted({r.get("fabric", "nvlink") for r in records if r.get("kind") in ("collective", "train")})
    links = {f: link_class(topo, gpus, f) for f in fabrics or ["nvlink"]}
    comm = fit_comm([r for r in records if r.get("kind") == "collective"], links, where, comm_min_bytes)
    profile = apply_comm_fits(profile, comm, where)
    matmul = [r for r in records if r.get("kind") == "matmul" and r.get("flops_per_s")]
    report: dict = {"comm": [asdict(c) for c in comm], "matmul_flops_per_s": None}
    if matmul:
        rate = statistics.median(r["flops_per_s"] for r in matmul)
        report["matmul_flops_per_s"] = rate
        sheet = topo.gpu_spec.bf16_dense_flops
        src = dict(profile.sources)
        if not sheet:  # a CPU (or an unknown part): the measured matrix rate is the peak
            # and the attention's measured rates (a GPU's flash kernels) do not apply: one rate for all FLOPs
            profile = replace(profile, peak_flops=float(rate), attention_efficiency={})
            src["peak_flops"] = (f"calibrated ({where}): bf16 {matmul[0].get('n', '?')}^3 matrix product on each "
                                 f"process at once, median {rate / 1e9:.1f} GFLOP/s")
            src["attention_efficiency"] = "none: not a GPU's flash attention; all FLOPs at compute_efficiency"
        else:
            src["peak_flops"] = (f"0: the datasheet {sheet / 1e12:.0f} TFLOP/s (hardware.py); the bf16 "
                                 f"{matmul[0].get('n', '?')}^3 matrix product measured {rate / 1e12:.0f} TFLOP/s "
                                 f"({rate / sheet:.2f} of it) during calibration ({where})")
        profile = replace(profile, sources=src)
    passes = [r for r in records if r.get("kind") == "hbm_pass" and r.get("bytes_per_s")]  # GPU runs only
    if passes:
        sheet_hbm = hardware.hbm_bytes_per_s(topo.gpu_spec.name)
        rate = statistics.mean(r["bytes_per_s"] for r in passes)
        src = dict(profile.sources)
        src["hbm_efficiency"] = (f"calibrated ({where}): the memory-bound passes timed alone, mean "
                                 f"{rate / 1e9:.0f} GB/s of the datasheet {sheet_hbm / 1e9:.0f} GB/s: "
                                 + ", ".join(f"{r['pass']} {r['bytes_per_s'] / 1e9:.0f} GB/s" for r in passes))
        profile = replace(profile, hbm_efficiency=round(rate / sheet_hbm, 4), sources=src)
        report["hbm_passes"] = {r["pass"]: r["bytes_per_s"] for r in passes}
    if fit_names is None:
        # with the HBM rate measured, the step times fit the elementwise traffic instead (the two trade
        # off against each other and against compute_efficiency when all are fitted together)
        fit_names = ["compute_efficiency", "activation_traffic"] if passes else [
            "compute_efficiency", "hbm_efficiency"]
        fit_names += [f"overlap.{s}" for s in STRATEGY_NAMES]
    profile = apply_encryption(profile, records, where)
    report["encryption_gbps_per_core"] = encryption_fit(records) or None
    # the PyTorch engine's runs: DeepSpeed's share the GPU work but not the host's or the copies' terms
    # mesh runs are compared (the report's runs_detail, validate), not fitted: the parameters are the DP step's
    obs = [o for o in observations_from(records) if o.engine == "pytorch" and not o.case.has_mesh]
    predict_one = predictor(topo, model_loader)
    profile, host_runs = fit_host(profile, obs, predict_one, None, where)
    # a run the host dominates says little about the GPU's rates: the host term describes it
    # (compiled runs fit their own traffic below, against their eager twins)
    device_obs = [o for o in obs if o not in host_runs and not o.compile
                  and predict_one(profile, o).time.host_s <= HOST_DOMINATED_FRACTION * o.step_time_s]
    profile, step_fit = fit_step_time(profile, device_obs, predict_one, where, fit_names)
    profile, compiled_fit = fit_compiled(profile, obs, predict_one, where)
    profile, mem_fit = fit_memory(profile, obs, predict_one, where)
    profile = replace(profile, fingerprint=fingerprint)
    report.update(step_time=asdict(step_fit), memory=asdict(mem_fit) if mem_fit else None,
                  compiled=asdict(compiled_fit) if compiled_fit else None,
                  host_bound=[o.case.label for o in host_runs],
                  unsteady=[f"{o.case.label}: timed steps spread {100 * o.step_spread:.1f}%"
                            for o in device_obs if o.step_spread > UNSTEADY_SPREAD],
                  runs=len(obs), failed=[f"{r.get('model')} {r.get('strategy')} {r.get('fabric')}: {r.get('status')}"
                                         for r in records if r.get("kind") == "train" and r.get("status") != "ok"])
    return profile, report


# A fit that misses its own runs by more than a quarter, root mean square, does not describe this machine
# (GPU fits miss theirs by 1-3%, docs/accuracy.md): calibrate does not cache it as the machine's profile.
POOR_FIT_RMS = 0.25


def poor_fits(report: dict) -> list[str]:
    """The fits of a fit_profile report ("step-time", "memory") that miss their own runs by more than
    POOR_FIT_RMS, root mean square."""
    return [what for what, key in (("step-time", "step_time"), ("memory", "memory"))
            if (fit := report.get(key) or {}).get("observations") and fit.get("rms_error") is not None
            and fit["rms_error"] > POOR_FIT_RMS]


def human_bytes(nbytes: float) -> str:
    for unit, size in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if nbytes >= size:
            return f"{nbytes / size:g} {unit}"
    return f"{int(nbytes)} B"
