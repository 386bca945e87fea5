"""Calibrate: measure this machine, fit the cost model's parameters, write a Profile; validate it.

    measure (bench comm + bench train, one launch per fabric)  ->  raw JSONL in a records folder
    fit (pure functions: records in, parameters out)            ->  Profile (JSON, sources per value)
    validate: other cases, predicted vs measured                ->  a row per case, summary, scatter PNG

What each parameter is fitted from (the Profile's `sources` repeat it, with the numbers):
- comm_efficiency / latency_s per "LINK/op": weighted least squares of t = alpha + S f / (line e)
  over the size sweep of `bench comm` (f: the nccl-tests bus factor; weights 1/t, so each size
  counts by its relative error). NVLink from `--fabric nvlink`, PCIe from `--fabric pcie`.
- hbm_efficiency: the fused AdamW step and the fp32 loss timed alone (measure/passes.py), their mean
  rate over the datasheet's.
- host_s_per_layer: bench train's host seconds per phase / blocks, median over the host-bound runs
  (the GPU's predicted work under half the step: the 128-token runs).
- compute_efficiency, activation_traffic and overlap per strategy: least squares (Levenberg-Marquardt
  on relative errors) of the cost model's step time against the measured median step time of the runs
  the host does not dominate (two model sizes whose activation bytes per FLOP differ tell elementwise
  traffic from compute); hbm_efficiency instead of activation_traffic where the passes were not
  measured (CPU); an overlap no run could see (no hideable communication) keeps its source's value
  and says so.
- activation_scale: the same fit of the model's allocated bytes against torch.cuda.max_memory_allocated.
- allocator_slack: the median of reserved / allocated - 1 over the same runs.
- peak_flops (CPU only): the bf16 matrix product rate measured on each rank.
- cuda_context_bytes and memory_headroom are not measured (outside max_memory_allocated): kept.

The fingerprint (GPU name and count, driver, NCCL and torch versions; the CPU model on CPU) is found
without importing torch: NVML and importlib.metadata. Profiles are cached under
$XDG_CACHE_HOME/topowise/profiles/<hash of the fingerprint>.json (~/.cache when unset), and predict,
plan and study pick the one matching this machine when no --profile is given.

Nothing here imports torch at module level; the rank-side entry (`rank_main`) runs the measure/
code, which does.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from importlib import metadata
from pathlib import Path
from typing import Callable, Iterable

from topowise.costmodel.profile import HOST_PHASES
from topowise.costmodel.profile import OPS as PROFILE_OPS
from topowise.costmodel.profile import Profile, default_profile, load_profile
from topowise.errors import UsageError
from topowise.measure.records import relative_error

GIB = 1024**3
MIB = 1024**2
CACHE_SUBDIR = ("topowise", "profiles")
RECORD_FILES = {"collective": "collectives.jsonl", "train": "train.jsonl", "matmul": "matmul.jsonl",
                "hbm_pass": "passes.jsonl"}
META_FILE = "meta.json"
ENTRY = "topowise.calibrate:rank_main"
# gloo between processes of one CPU has no line rate; the CPU topology says this nominal one, and the
# fitted comm_efficiency is relative to it (busbw = 10 GB/s x efficiency).
CPU_NOMINAL_LINE_GBPS = 10.0
RANK_TOLERANCE = 0.03  # ranking check: the predicted-first strategy within 3% of the measured fastest
STRATEGY_ORDER = ("ddp", "zero1", "zero2", "zero3", "hsdp")


# ================================================================================================
# Cases: what calibrate and validate measure (fixed sets; validate's never overlap calibrate's)


@dataclass(frozen=True)
class Case:
    """One training run: a model, a strategy, a shape, a fabric."""

    model: str
    strategy: str
    micro_batch: int
    seq_len: int
    fabric: str = "nvlink"
    activation_checkpointing: bool = False

    @property
    def key(self) -> tuple:
        return (self.model, self.strategy, self.micro_batch, self.seq_len, self.fabric, self.activation_checkpointing)

    @property
    def group(self) -> tuple:
        """Cases that differ only in strategy share a group (the ranking check)."""
        return (self.model, self.micro_batch, self.seq_len, self.fabric, self.activation_checkpointing)


@dataclass(frozen=True)
class Plan:
    """What one measuring run does: a comm sweep and training cases, steps per case."""

    device: str
    fabrics: tuple[str, ...]
    comm_ops: tuple[str, ...]
    comm_sizes: tuple[int, ...]
    cases: tuple[Case, ...]
    warmup: int
    steps: int
    comm_iters: int = 20
    comm_warmup: int = 5
    fit_min_bytes: int = 0  # the alpha-beta fit uses sizes from here up (all are recorded)
    # memory-bound passes timed alone (measure/passes.py): fused AdamW over this model's parameter
    # shapes, and the fp32 loss over (vocabulary, tokens) logits; None: not measured (CPU)
    hbm_passes: tuple[str, int, int] | None = None


def _grid(models: Iterable[tuple[str, int, int, tuple[str, ...]]], fabrics: Iterable[str]) -> tuple[Case, ...]:
    return tuple(Case(m, s, mb, seq, f) for f in fabrics for (m, mb, seq, strategies) in models for s in strategies)


# The host's time to issue a step (Python, hooks, launches) does not shrink with the tokens; the GPU's
# does. At 128 tokens the GPU keeps up and bench train's host phase times are the host's own cost
# (benchmarks/host_bound.py: on 2x H200 every strategy of 0.5B-1B models is host-bound there).
HOST_FLOOR_TOKENS = 128

# GPU calibration (about three minutes on 2x H200): the comm sweep 1 MiB..1 GiB on the four ops the
# strategies issue, per fabric; two model sizes at 8192 tokens (long enough that the GPU, not the host,
# sets the step of most runs), ddp and zero3 on the small one, every non-hsdp
# strategy on the larger one (zero1's broadcasts and zero2's overlap need a run of their own); then
# both models with every non-hsdp strategy at HOST_FLOOR_TOKENS over NVLink (the host's cost per block).
# The alpha-beta fit takes 8 MiB and up: training moves 25 MiB DDP buckets and 30 MiB..1.5 GiB FSDP
# units, and NCCL's busbw keeps rising to 1 GiB (facts.md), which one alpha-beta line cannot follow
# from 1 MiB (on the 2x H200 sweep: within -11..+13% from 1 MiB, -10..+7% from 8 MiB).
GPU_CALIBRATION = Plan(
    device="cuda", fabrics=("nvlink", "pcie"), comm_ops=("all_reduce", "all_gather", "reduce_scatter", "broadcast"),
    comm_sizes=tuple(MIB * 2**k for k in range(11)), fit_min_bytes=8 * MIB,
    cases=_grid([("qwen2.5-0.5b", 1, 8192, ("ddp", "zero3")),
                 ("llama3.2-1b", 1, 8192, ("ddp", "zero1", "zero2", "zero3"))], ("nvlink", "pcie"))
    + _grid([(m, 1, HOST_FLOOR_TOKENS, ("ddp", "zero1", "zero2", "zero3")) for m in ("qwen2.5-0.5b", "llama3.2-1b")],
            ("nvlink",)),
    warmup=3, steps=5, hbm_passes=("llama3.2-1b", 128256, 8192))

# GPU validation (about three minutes): a model size calibration never ran (3B), a micro-batch it never
# ran (2) and a sequence length it never ran (2048); both fabrics; every strategy.
GPU_VALIDATION = Plan(
    device="cuda", fabrics=("nvlink", "pcie"), comm_ops=(), comm_sizes=(),
    cases=_grid([("llama3.2-3b", 1, 4096, STRATEGY_ORDER),
                 ("qwen2.5-0.5b", 2, 4096, ("ddp", "zero1", "zero2", "zero3"))], ("nvlink", "pcie"))
    + _grid([("llama3.2-1b", 2, 2048, ("ddp", "zero2", "zero3"))], ("nvlink",)),
    warmup=3, steps=6)

# CPU (gloo): the same pipeline, small enough for the tests (seconds of measuring).
CPU_CALIBRATION = Plan(
    device="cpu", fabrics=("nvlink",), comm_ops=("all_reduce", "all_gather", "reduce_scatter", "broadcast"),
    comm_sizes=tuple(64 * 1024 * 4**k for k in range(4)),
    cases=_grid([("tiny", 1, 128, ("ddp", "zero3")), ("tiny", 2, 128, ("ddp",))], ("nvlink",)),
    warmup=1, steps=3, comm_iters=5, comm_warmup=2)

CPU_VALIDATION = Plan(
    device="cpu", fabrics=("nvlink",), comm_ops=(), comm_sizes=(),
    cases=_grid([("tiny", 2, 64, ("ddp", "zero2", "zero3"))], ("nvlink",)),
    warmup=1, steps=3)


def calibration_plan(device: str) -> Plan:
    return GPU_CALIBRATION if device == "cuda" else CPU_CALIBRATION


def validation_plan(device: str) -> Plan:
    return GPU_VALIDATION if device == "cuda" else CPU_VALIDATION


# ================================================================================================
# Fingerprint and cache (no torch: importlib.metadata and NVML)


FINGERPRINT_KEYS = ("device", "name", "count", "driver", "nccl", "torch")


def package_version(*names: str) -> str:
    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return "unknown"


def nccl_version() -> str:
    """The NCCL wheel torch loads (nvidia-nccl-cu13/12/11); "unknown" when torch bundles its own."""
    return package_version("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl-cu11", "nvidia-nccl")


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return " ".join(line.split(":", 1)[1].split())
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def gpu_inventory(nvml=None) -> tuple[str, int, str] | None:
    """(GPU name, count, driver version) from NVML, or None without NVML or GPUs (quickly)."""
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError:
            return None
    error = getattr(nvml, "NVMLError", Exception)
    try:
        nvml.nvmlInit()
    except Exception:  # no driver: the common case on a laptop
        return None
    try:
        count = nvml.nvmlDeviceGetCount()
        if not count:
            return None
        name = _text(nvml.nvmlDeviceGetName(nvml.nvmlDeviceGetHandleByIndex(0)))
        return name, int(count), _text(nvml.nvmlSystemGetDriverVersion())
    except error:
        return None
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass


def machine_fingerprint(device: str = "cuda", nvml=None) -> dict | None:
    """What a profile is valid for. cuda: GPU name and count, driver, NCCL, torch (None without
    GPUs); cpu: the CPU model and core count, torch."""
    if device == "cpu":
        return {"device": "cpu", "name": cpu_model(), "count": os.cpu_count() or 1, "driver": "-",
                "nccl": "-", "torch": package_version("torch")}
    inv = gpu_inventory(nvml)
    if inv is None:
        return None
    name, count, driver = inv
    return {"device": "cuda", "name": name, "count": count, "driver": driver, "nccl": nccl_version(),
            "torch": package_version("torch")}


def fingerprint_text(fp: dict) -> str:
    """'device=cuda; name=NVIDIA H200; count=2; driver=...; nccl=...; torch=...' (read back by parse)."""
    return "; ".join(f"{k}={fp[k]}" for k in FINGERPRINT_KEYS)


def parse_fingerprint(text: str) -> dict:
    out = {}
    for part in (text or "").split(";"):
        key, sep, value = part.strip().partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


def fingerprint_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def cache_dir(environ=None) -> Path:
    environ = os.environ if environ is None else environ
    base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base).joinpath(*CACHE_SUBDIR)


def cache_path(fingerprint: str, environ=None) -> Path:
    return cache_dir(environ) / f"{fingerprint_hash(fingerprint)}.json"


def fingerprint_mismatch(profile_fp: str, machine: dict) -> list[str]:
    """The fields where a profile's fingerprint and this machine differ ('name: A here, B in the profile')."""
    theirs = parse_fingerprint(profile_fp)
    if not theirs:
        return []  # the default profile (no fingerprint) is valid anywhere
    ours = {k: str(v) for k, v in machine.items()}
    return [f"{k}: {ours.get(k, '?')} here, {theirs.get(k, '?')} in the profile" for k in FINGERPRINT_KEYS
            if ours.get(k) != theirs.get(k)]


def check_profile_for_machine(profile: Profile, machine: dict | None, where: str, force: bool = False) -> None:
    """Refuse a profile calibrated on another machine (validate measures here) unless forced."""
    if force or not profile.fingerprint:
        return
    if machine is None:
        raise UsageError(f"{where} was calibrated on {profile.fingerprint!r}, and this machine's GPUs cannot be "
                         "read (no NVML): pass --force-profile to use it anyway")
    diff = fingerprint_mismatch(profile.fingerprint, machine)
    if diff:
        raise UsageError(f"{where} does not match this machine ({'; '.join(diff)}): run `topowise calibrate` here, "
                         "or pass --force-profile to use it anyway")


def same_gpu(a: str, b: str) -> bool:
    """The same GPU model: hardware.py's row for both names ("NVIDIA H200" and "H200" agree), or the
    same name for a part hardware.py does not know."""
    from topowise.hardware import gpu_spec

    sa, sb = gpu_spec(a), gpu_spec(b)
    return sa.name == sb.name if sa.bf16_dense_flops and sb.bf16_dense_flops else a.strip() == b.strip()


def check_profile_for_gpu(profile: Profile, gpu_name: str, where: str, force: bool = False) -> None:
    """Refuse a profile of another GPU model for a topology (predict/plan/study may run anywhere)."""
    if force or not profile.fingerprint:
        return
    fp = parse_fingerprint(profile.fingerprint)
    calibrated_on = fp.get("name", gpu_name)
    if fp.get("device") == "cpu":  # cpu_topology names its processes "CPU <model>"
        calibrated_on = f"CPU {calibrated_on}"
    if not same_gpu(calibrated_on, gpu_name):
        raise UsageError(f"{where} was calibrated on {calibrated_on}, not on the topology's {gpu_name}: calibrate "
                         "there, or pass --force-profile to use it anyway")


def find_cached_profile(gpu_name: str | None = None, environ=None, nvml=None) -> tuple[Profile, Path] | None:
    """The cached profile of this machine's GPUs, when there is one (and, given `gpu_name`, when the
    topology being predicted has this machine's GPU). Quick without a cache or without NVML."""
    folder = cache_dir(environ)
    try:
        if not any(folder.glob("*.json")):
            return None
    except OSError:
        return None
    fp = machine_fingerprint("cuda", nvml)
    if fp is None or (gpu_name is not None and not same_gpu(fp["name"], gpu_name)):
        return None
    path = cache_path(fingerprint_text(fp), environ)
    if not path.is_file():
        return None
    try:
        profile = load_profile(path)
    except UsageError:  # a damaged cache file is no reason to fail a prediction
        return None
    return (profile, path) if not fingerprint_mismatch(profile.fingerprint, fp) else None


def resolve_profile(path: str | None, gpu_names: Iterable[str], force: bool = False,
                    check: bool = True) -> Profile | None:
    """What predict, plan and study use: --profile FILE (refused when calibrated on another GPU model
    than the topology's, unless forced or `check` is False), else the cached profile of this machine
    when every topology has this machine's GPU, else None (the defaults)."""
    names = [n for n in gpu_names if n]
    if path:
        profile = load_profile(path)
        if check:
            for name in names:
                check_profile_for_gpu(profile, name, path, force)
        return profile
    if not names or any(not same_gpu(n, names[0]) for n in names):
        return None
    found = find_cached_profile(names[0])
    return found[0] if found else None


def _text(value) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


# ================================================================================================
# Topology of the run


def cpu_topology(nproc: int):
    """The CPU processes as a Topology: one 'GPU' per process, named by the CPU model, joined by a
    host link at the nominal gloo rate."""
    from topowise.topology.model import Gpu, Link, Topology

    name = f"CPU {cpu_model()}"
    gpus = tuple(Gpu(i, name) for i in range(nproc))
    links = tuple(Link(a, b, "SYS", CPU_NOMINAL_LINE_GBPS) for a in range(nproc) for b in range(a + 1, nproc))
    return Topology("cpu", gpus, links, source=f"{nproc} gloo processes on one CPU (nominal {CPU_NOMINAL_LINE_GBPS:g} GB/s)")


def live_topology(device: str, nproc: int):
    if device == "cpu":
        return cpu_topology(nproc)
    from topowise.topology.nvml import discover

    topo = discover()
    if topo.num_gpus < nproc:
        raise UsageError(f"--nproc {nproc} needs {nproc} GPUs; NVML sees {topo.num_gpus}")
    return topo.restricted_to(topo.indices[:nproc])


def link_class(topo, gpus: tuple[int, ...], fabric: str) -> tuple[str, float]:
    """(link class, line GB/s) a collective over `gpus` uses on `fabric` (the cost model's rule)."""
    from topowise.costmodel.comm import group_link

    t = topo.without_nvlink() if fabric == "pcie" else topo
    line, link = group_link(t, gpus)
    return link, line


# ================================================================================================
# Fitting (pure: records in, parameters out)


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

    def source(self, where: str) -> str:
        return (f"calibrated ({where}): {self.op} over {self.link}, {self.points} sizes "
                f"{_human(self.min_bytes)}..{_human(self.max_bytes)}; weighted least squares of "
                f"t = alpha + S f / (line e): busbw {self.line_gbps * self.efficiency:.1f} GB/s = "
                f"{self.efficiency:.3f} of {self.line_gbps:g} GB/s, alpha {self.latency_s * 1e6:.1f} us; "
                f"worst size off by {100 * self.max_residual:.1f}%")


def busbw_factor(op: str, n: int) -> float:
    from topowise.costmodel.comm import busbw_factor as f

    return f(op, n)


def fit_alpha_beta(points: list[tuple[float, float]]) -> tuple[float, float]:
    """(alpha, beta) minimizing sum(((alpha + beta x - t) / t)^2) over (x, t); alpha >= 0, beta > 0.

    Weighted least squares with weights 1/t^2: each size counts by its relative error, so the large
    sizes do not drown the latency the small ones show.
    """
    if len(points) < 2:
        raise ValueError("an alpha-beta fit needs two or more sizes")
    w = [1.0 / (t * t) for _, t in points]
    sw = sum(w)
    swx = sum(wi * x for wi, (x, _) in zip(w, points))
    swxx = sum(wi * x * x for wi, (x, _) in zip(w, points))
    swt = sum(wi * t for wi, (_, t) in zip(w, points))
    swxt = sum(wi * x * t for wi, (x, t) in zip(w, points))
    det = sw * swxx - swx * swx
    alpha, beta = 0.0, 0.0
    if det > 0:
        alpha = (swxx * swt - swx * swxt) / det
        beta = (sw * swxt - swx * swt) / det
    if det <= 0 or alpha < 0 or beta <= 0:  # no latency visible: the bandwidth term alone
        alpha = 0.0
        beta = swxt / swxx
    return alpha, beta


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
        fits.append(CommFit(link, op, 1.0 / beta, alpha, line, len(pts), min(r["bytes"] for r in recs),
                            max(r["bytes"] for r in recs), worst))
    return fits


def apply_comm_fits(profile: Profile, fits: list[CommFit], where: str) -> Profile:
    eff, lat, src = dict(profile.comm_efficiency), dict(profile.latency_s), dict(profile.sources)
    for f in fits:
        key = f"{f.link}/{f.op}"
        eff[key], lat[key] = round(f.efficiency, 5), f.latency_s
        text = f.source(where)
        src[f"comm_efficiency.{key}"] = src[f"latency_s.{key}"] = text
    return replace(profile, comm_efficiency=eff, latency_s=lat, sources=src)


# --- a small bounded least squares (Levenberg-Marquardt), no numpy ---------------------------------
PARAM_BOUNDS = {"compute_efficiency": (0.01, 1.0), "hbm_efficiency": (0.05, 1.0), "activation_scale": (0.2, 5.0),
                "activation_traffic": (0.0, 40.0),
                "allocator_slack": (0.0, 2.0)}
OVERLAP_BOUNDS = (0.0, 1.0)


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


def _solve(a: list[list[float]], b: list[float]) -> list[float]:
    """Gaussian elimination with partial pivoting (a few unknowns)."""
    n = len(b)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for c in range(n):
        p = max(range(c, n), key=lambda r: abs(m[r][c]))
        if abs(m[p][c]) < 1e-300:
            raise ZeroDivisionError("singular")
        m[c], m[p] = m[p], m[c]
        for r in range(c + 1, n):
            k = m[r][c] / m[c][c]
            for j in range(c, n + 1):
                m[r][j] -= k * m[c][j]
    x = [0.0] * n
    for r in range(n - 1, -1, -1):
        x[r] = (m[r][n] - sum(m[r][j] * x[j] for j in range(r + 1, n))) / m[r][r]
    return x


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

    A parameter that changes no prediction (e.g. an overlap with nothing to hide) is left as it was
    and reported in `unidentified`.
    """
    meas = [float(measured(o)) for o in observations]

    def residuals(p: Profile) -> list[float]:
        return [predict_fn(p, o) / m - 1.0 for o, m in zip(observations, meas)]

    def cost(r):
        return sum(x * x for x in r)

    x = {n: get_param(profile, n) for n in names}

    def make(vals):
        p = profile
        for n, v in vals.items():
            p = set_param(p, n, v)
        return p

    # identifiability: does a small move of the parameter change any prediction?
    r0 = residuals(make(x))
    active = []
    for n in names:
        lo, hi = bounds_of(n)
        for step in (0.02, -0.02):
            v = min(max(x[n] + step * (hi - lo), lo), hi)
            if v != x[n] and max(abs(a - b) for a, b in zip(residuals(make(dict(x, **{n: v}))), r0)) > 1e-9:
                active.append(n)
                break
    lam = 1e-3
    r, c = r0, cost(r0)
    for _ in range(max_iter if active else 0):
        jac = []  # d residual / d parameter, central differences inside the bounds
        for n in active:
            lo, hi = bounds_of(n)
            h = 1e-6 * (hi - lo)
            a, b = max(x[n] - h, lo), min(x[n] + h, hi)
            ra, rb = residuals(make(dict(x, **{n: a}))), residuals(make(dict(x, **{n: b})))
            jac.append([(q - p) / (b - a) for p, q in zip(ra, rb)])
        k = len(active)
        jtj = [[sum(jac[i][o] * jac[j][o] for o in range(len(r))) for j in range(k)] for i in range(k)]
        jtr = [sum(jac[i][o] * r[o] for o in range(len(r))) for i in range(k)]
        improved = False
        while lam < 1e12:
            a = [[jtj[i][j] + (lam * (jtj[i][i] + 1e-12) if i == j else 0.0) for j in range(k)] for i in range(k)]
            try:
                delta = _solve(a, [-v for v in jtr])
            except ZeroDivisionError:
                lam *= 10
                continue
            trial = dict(x)
            for n, d in zip(active, delta):
                lo, hi = bounds_of(n)
                trial[n] = min(max(x[n] + d, lo), hi)
            rt = residuals(make(trial))
            ct = cost(rt)
            if ct < c:
                moved = max(abs(trial[n] - x[n]) for n in active)
                x, r, c = trial, rt, ct
                lam = max(lam / 3, 1e-12)
                improved = moved > 1e-10
                break
            lam *= 4
        if not improved or c < 1e-24:
            break
    errs = [abs(v) for v in r]
    return ParamFit({n: x[n] for n in active}, tuple(n for n in names if n not in active),
                    math.sqrt(c / len(r)) if r else 0.0, max(errs, default=0.0), len(r))


# --- training observations ---------------------------------------------------------------------
@dataclass(frozen=True)
class Observation:
    """A finished training run, as the cost model sees it."""

    model: str
    strategy: str
    micro_batch: int
    seq_len: int
    fabric: str
    activation_checkpointing: bool
    world_size: int
    shard_group_size: int | None
    step_time_s: float
    peak_allocated_bytes: float | None
    reserved_bytes: float | None
    step_spread: float = 0.0  # interquartile range / median of the timed steps (`step_spread`)
    host_phase_s: dict | None = None  # bench train's host seconds per phase (median of the timed steps)
    device: str = "cuda"

    @property
    def case(self) -> Case:
        return Case(self.model, self.strategy, self.micro_batch, self.seq_len, self.fabric,
                    self.activation_checkpointing)


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


def observations_from(records: list[dict]) -> list[Observation]:
    out = []
    for r in records:
        if r.get("kind") != "train" or r.get("status") != "ok" or not r.get("step_time_s"):
            continue
        out.append(Observation(
            model=r["model"], strategy=r["strategy"], micro_batch=int(r["micro_batch"]), seq_len=int(r["seq_len"]),
            fabric=r.get("fabric", "nvlink"), activation_checkpointing=bool(r.get("activation_checkpointing")),
            world_size=int(r["world_size"]),
            shard_group_size=r.get("shard_group_size") if r["strategy"] == "hsdp" else None,
            step_time_s=float(r["step_time_s"]), peak_allocated_bytes=(r.get("steady_peak_memory_bytes") or r.get("peak_memory_bytes")),
            reserved_bytes=r.get("reserved_bytes"), step_spread=step_spread(r.get("step_times_s")),
            host_phase_s=r.get("host_phase_s"), device=r.get("device", "cuda")))
    return out


def predictor(topo, model_loader: Callable | None = None) -> Callable:
    """predict(profile, observation) -> Prediction on the measured GPUs of `topo` (models cached)."""
    from topowise.costmodel.step import predict
    from topowise.models.spec import load_model

    load = model_loader or load_model
    models: dict[str, object] = {}

    def run(profile: Profile, o: Observation):
        if o.model not in models:
            models[o.model] = load(o.model)
        gpus = tuple(topo.indices[:o.world_size])
        return predict(models[o.model], topo, gpus, o.strategy, micro_batch=o.micro_batch, seq_len=o.seq_len,
                       activation_checkpointing=o.activation_checkpointing, fabric=o.fabric,
                       shard_group_size=o.shard_group_size, profile=profile)

    return run


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


def fit_host(profile: Profile, obs: list[Observation], predict_one: Callable, layers: Callable[[str], int],
             where: str) -> tuple[Profile, list[Observation]]:
    """host_s_per_layer["strategy/phase"]: the median over host-bound runs of that strategy of bench
    train's host seconds in the phase / the model's blocks. Returns the profile and the runs used."""
    bound = host_bound_runs(profile, obs, predict_one)
    values, src = dict(profile.host_s_per_layer), dict(profile.sources)
    for strategy in STRATEGY_ORDER:
        runs = [o for o in bound if o.strategy == strategy]
        if not runs:
            continue
        names = ", ".join(f"{o.model} mb{o.micro_batch} seq{o.seq_len} {o.fabric}" for o in runs)
        for phase in HOST_PHASES:
            per_layer = [o.host_phase_s[phase] / layers(o.model) for o in runs]
            values[f"{strategy}/{phase}"] = round(statistics.median(per_layer), 7)
            src[f"host_s_per_layer.{strategy}/{phase}"] = (
                f"calibrated ({where}): median of bench train's host seconds in the {phase} per block over "
                f"{len(runs)} host-bound runs ({names}; GPU work under {HOST_BOUND_FRACTION:g} of the step): "
                + ", ".join(f"{1e3 * v:.2f}" for v in per_layer) + " ms")
    return replace(profile, host_s_per_layer=values, sources=src), bound


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
    strategies = [s for s in STRATEGY_ORDER if any(o.strategy == s for o in obs)]
    names = names or ["compute_efficiency", "hbm_efficiency"] + [f"overlap.{s}" for s in strategies]
    # an overlap of a strategy no (steady) run measured is inherited below, not fitted
    names = [n for n in names if not n.startswith("overlap.") or n.split(".", 1)[1] in strategies]
    fit = fit_parameters(profile, names, obs, lambda p, o: predict_one(p, o).step_time_s, lambda o: o.step_time_s)
    runs = _describe_runs(obs)
    if unsteady:
        runs += (f"; left out, timed steps spread over {100 * UNSTEADY_SPREAD:g}% (not steady): "
                 + ", ".join(f"{_case_words(o.case)} ({100 * o.step_spread:.1f}%)" for o in unsteady))
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
    for s in STRATEGY_ORDER:
        if s in fitted:
            continue
        donor = next((d for d in OVERLAP_INHERIT[s] if d in fitted), None)
        if donor:
            overlap[s] = overlap[donor]
            src[f"overlap.{s}"] = f"calibrated ({where}): no {s} run; the same mechanism as {donor}, its fitted value"
    return replace(profile, overlap=overlap, sources=src), fit


def fit_memory(profile: Profile, obs: list[Observation], predict_one: Callable, where: str) -> tuple[Profile, ParamFit | None]:
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
                                   f"torch.cuda.max_memory_allocated over {_describe_runs(mem)}; rms error "
                                   f"{100 * fit.rms_error:.1f}%, worst {100 * fit.max_error:.1f}%")
    slacks = [o.reserved_bytes / o.peak_allocated_bytes - 1.0 for o in mem if o.reserved_bytes]
    if slacks:
        slack = max(0.0, statistics.median(slacks))
        profile = replace(profile, allocator_slack=round(slack, 4))
        src["allocator_slack"] = (f"calibrated ({where}): median of max_memory_reserved / max_memory_allocated - 1 "
                                  f"over {len(slacks)} runs (range {100 * min(slacks):.1f}%..{100 * max(slacks):.1f}%)")
    return replace(profile, sources=src), fit


def _describe_runs(obs: list[Observation]) -> str:
    models = sorted({o.model for o in obs})
    strategies = [s for s in STRATEGY_ORDER if any(o.strategy == s for o in obs)]
    fabrics = sorted({o.fabric for o in obs})
    return f"{len(obs)} runs ({', '.join(models)}; {', '.join(strategies)}; {', '.join(fabrics)})"


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
            profile = replace(profile, peak_flops=float(rate))
            src["peak_flops"] = (f"calibrated ({where}): bf16 {matmul[0].get('n', '?')}^3 matrix product on each "
                                 f"process at once, median {rate / 1e9:.1f} GFLOP/s")
        else:
            src["peak_flops"] = (f"0: the datasheet {sheet / 1e12:.0f} TFLOP/s (hardware.py); the bf16 "
                                 f"{matmul[0].get('n', '?')}^3 matrix product measured {rate / 1e12:.0f} TFLOP/s "
                                 f"({rate / sheet:.2f} of it) during calibration ({where})")
        profile = replace(profile, sources=src)
    passes = [r for r in records if r.get("kind") == "hbm_pass" and r.get("bytes_per_s")]  # GPU runs only
    if passes:
        from topowise import hardware

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
        fit_names += [f"overlap.{s}" for s in STRATEGY_ORDER]
    from topowise.models.spec import load_model

    obs = observations_from(records)
    predict_one = predictor(topo, model_loader)
    load = model_loader or load_model
    profile, host_runs = fit_host(profile, obs, predict_one, lambda name: load(name).num_layers, where)
    # a run the host dominates says little about the GPU's rates: the host term describes it
    device_obs = [o for o in obs if o not in host_runs
                  and predict_one(profile, o).time.host_s <= HOST_DOMINATED_FRACTION * o.step_time_s]
    profile, step_fit = fit_step_time(profile, device_obs, predict_one, where, fit_names)
    profile, mem_fit = fit_memory(profile, obs, predict_one, where)
    profile = replace(profile, fingerprint=fingerprint)
    report.update(step_time=asdict(step_fit), memory=asdict(mem_fit) if mem_fit else None,
                  host_bound=[_case_words(o.case) for o in host_runs],
                  unsteady=[f"{_case_words(o.case)}: timed steps spread {100 * o.step_spread:.1f}%"
                            for o in device_obs if o.step_spread > UNSTEADY_SPREAD],
                  runs=len(obs), failed=[f"{r.get('model')} {r.get('strategy')} {r.get('fabric')}: {r.get('status')}"
                                         for r in records if r.get("kind") == "train" and r.get("status") != "ok"])
    return profile, report


# ================================================================================================
# Measuring (the parent launches rank_main once per fabric; the ranks run the real bench code)


def measure(plan: Plan, nproc: int, records_dir: Path, *, timeout_s: float = 600.0,
            progress: Callable[[str], None] | None = None) -> list[str]:
    """Run `plan` on this machine; append every record to records_dir/{collectives,train,matmul}.jsonl.

    A fabric whose launch fails or hangs does not stop the next one (GPU time is dear: what was
    measured is fitted); the problems are returned, one line each."""
    from topowise.measure.launcher import launch

    records_dir.mkdir(parents=True, exist_ok=True)
    backend = "nccl" if plan.device == "cuda" else "gloo"
    problems: list[str] = []
    for fabric in plan.fabrics:
        cases = [c for c in plan.cases if c.fabric == fabric]
        if not cases and not plan.comm_ops:
            continue
        config = rank_config(plan, fabric, cases, nproc, records_dir, backend, timeout_s)
        env = {"PYTORCH_CUDA_ALLOC_CONF": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")}
        if fabric == "pcie":
            env["NCCL_P2P_DISABLE"] = "1"  # only this; NCCL_NVLS_ENABLE and friends pass through untouched
        heartbeat = records_dir / f".heartbeat.{fabric}"
        heartbeat.write_text("start")
        if progress:
            progress(f"{fabric}: {len(plan.comm_sizes) * len(plan.comm_ops)} collective cases, "
                     f"{len(cases)} training runs")
        status = launch(ENTRY, config, nproc=nproc, env=env, timeout_s=timeout_s, heartbeat=str(heartbeat))
        heartbeat.unlink(missing_ok=True)
        if status == 124:
            problems.append(f"measuring on fabric {fabric} stopped: no progress for {timeout_s:g} s (a hung "
                            "collective?); its records up to then are used")
        elif status != 0:
            problems.append(f"measuring on fabric {fabric} failed (exit status {status}; the ranks' messages are "
                            "above); its records up to then are used")
        if progress and status != 0:
            progress(problems[-1])
    return problems


def rank_config(plan: Plan, fabric: str, cases: list[Case], nproc: int, records_dir: Path, backend: str,
                timeout_s: float) -> dict:
    """The plain-JSON config every rank gets (a pure function)."""
    comm = None
    if plan.comm_ops:
        comm = {"ops": list(plan.comm_ops), "sizes": list(plan.comm_sizes), "dtype": "float32",
                "warmup": plan.comm_warmup, "iters": plan.comm_iters, "backend": backend, "fabric": fabric,
                "timeout_s": timeout_s, "out": str(records_dir / RECORD_FILES["collective"]), "graph": "auto"}
    # one bench-train request per case, so that the rank can check between cases that the last one
    # left no memory behind (it would count in the next one's max_memory_allocated)
    train = [{"model": c.model, "strategies": c.strategy, "micro_batch": c.micro_batch, "seq_len": c.seq_len,
              "steps": plan.steps, "warmup": plan.warmup, "activation_checkpointing": c.activation_checkpointing,
              "fabric": fabric, "device": plan.device, "nproc": nproc, "timeout_s": timeout_s,
              "out": str(records_dir / RECORD_FILES["train"])} for c in cases]
    passes = None
    if plan.hbm_passes and fabric == plan.fabrics[0]:  # a pass alone does not depend on the fabric
        passes = {"model": plan.hbm_passes[0], "vocab": plan.hbm_passes[1], "tokens": plan.hbm_passes[2],
                  "out": str(records_dir / RECORD_FILES["hbm_pass"])}
    return {"backend": backend, "fabric": fabric, "comm": comm, "train": train, "timeout_s": timeout_s,
            "passes": passes, "matmul_out": str(records_dir / RECORD_FILES["matmul"]),
            "heartbeat": str(records_dir / f".heartbeat.{fabric}")}


def rank_main(config: dict) -> None:
    """One rank: the comm sweep (bench comm's code), the matrix rate, then the training runs (bench
    train's code, in this process group, one case after another)."""
    from topowise.measure import collectives as coll
    from topowise.measure import train
    from topowise.measure.launcher import init_distributed
    from topowise.measure.records import append_record

    rank = init_distributed(config["backend"], float(config.get("timeout_s", 600)))
    beat = config.get("heartbeat")

    def say(text: str) -> None:
        if rank.is_main:
            print(f"  {config['fabric']}: {text}", file=sys.stderr, flush=True)  # stdout stays clean for --json
            if beat:
                Path(beat).write_text(text)

    try:
        if config.get("comm"):
            cfg = coll.CommConfig.from_dict(config["comm"])
            coll.run_collectives(cfg, rank, on_record=lambda r: say(
                f"{r['op']} {_human(r['bytes'])}: busbw {r['busbw_gbps']:.1f} GB/s"))
        rate, n = train_matmul_rate(rank.device)
        if rank.is_main and rate:
            append_record(config["matmul_out"], {"kind": "matmul", "device": rank.device, "dtype": "bfloat16", "n": n,
                                                 "flops_per_s": rate, "fabric": config["fabric"],
                                                 "world_size": rank.world_size})
            say(f"bf16 {n}^3 matrix product: {rate / 1e12:.3g} TFLOP/s")
        if config.get("passes") and rank.device.startswith("cuda"):
            measure_passes(config["passes"], rank, say)
        for req in config.get("train", []):
            request = train.make_request(**req)
            left = allocated_now(rank.device)
            if left > 64 * MIB:
                say(f"note: {left / MIB:.0f} MiB still allocated before {req['model']} {req['strategies']}: it counts "
                    "in that run's peak memory")

            def on_event(event, case, record, request=request):
                if event == "done":
                    ok = record["status"] == "ok"
                    say(f"{request.spec.name} {case.strategy} mb {case.micro_batch} seq {case.seq_len}: "
                        + (f"{record['step_time_s'] * 1e3:.1f} ms/step" if ok else f"{record['status']} "
                           f"({record.get('error', '')[:120]})"))

            train.bench_train(request, None, on_event)
    except BaseException as exc:  # noqa: BLE001 - one clear line, and no waiting on peers stuck in a collective
        if isinstance(exc, SystemExit) and not exc.code:
            raise
        sys.stderr.write(f"topowise: error: rank {rank.rank}: {type(exc).__name__}: {exc}\n")
        sys.stderr.flush()
        os._exit(1)  # torchrun then stops the other ranks
    finally:
        try:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()
        except Exception:
            pass


def measure_passes(cfg: dict, rank, say: Callable[[str], None]) -> None:
    """Every rank times the two passes at once (as in training); rank 0 records its own."""
    import torch  # rank side only

    from topowise.measure import passes
    from topowise.measure.records import append_record

    for record in (passes.adamw_pass(cfg["model"]), passes.loss_pass(cfg["vocab"], cfg["tokens"])):
        torch.cuda.empty_cache()
        if rank.is_main:
            append_record(cfg["out"], dict(record, device=rank.device, world_size=rank.world_size))
            say(f"{record['pass']} alone: {record['bytes_per_s'] / 1e9:.0f} GB/s")


def allocated_now(device: str) -> int:
    """Bytes the caching allocator holds for tensors right now (0 on CPU)."""
    if not device.startswith("cuda"):
        return 0
    import gc

    import torch  # rank side only

    gc.collect()
    return int(torch.cuda.memory_allocated())


def train_matmul_rate(device: str) -> tuple[float | None, int]:
    """The bf16 matrix product rate on this rank: bench train's measurement on a GPU; a small one on CPU."""
    from topowise.measure import train

    if device.startswith("cuda"):
        return train.measure_matmul_flops(), train.MATMUL_N
    import torch  # the CPU form of the same measurement (rank side only)

    n, reps = 512, 5
    a, b = torch.randn(n, n, dtype=torch.bfloat16), torch.randn(n, n, dtype=torch.bfloat16)
    torch.mm(a, b)
    t0 = time.perf_counter()
    for _ in range(reps):
        torch.mm(a, b)
    return 2.0 * n**3 * reps / (time.perf_counter() - t0), n


# ================================================================================================
# calibrate: the whole pipeline


@dataclass(frozen=True)
class Calibration:
    profile: Profile
    profile_path: str
    cache_path: str | None
    records_dir: str
    report: dict
    elapsed_s: float | None

    def to_dict(self) -> dict:
        return {"profile": self.profile.to_dict(), "profile_path": self.profile_path, "cache_path": self.cache_path,
                "records_dir": self.records_dir, "report": self.report, "elapsed_s": self.elapsed_s}


def default_records_dir(profile_path: str | Path) -> Path:
    p = Path(profile_path)
    return p.with_name(p.stem + "-records")


def read_records_dir(folder: Path) -> tuple[list[dict], dict]:
    from topowise.measure.records import read_records

    meta_path = folder / META_FILE
    if not meta_path.is_file():
        raise UsageError(f"{folder} holds no {META_FILE}: not a calibration records folder (written by "
                         "`topowise calibrate --records DIR`)")
    meta = json.loads(meta_path.read_text())
    records = []
    for name in RECORD_FILES.values():
        records += read_records(folder / name)
    return records, meta


def calibrate(*, device: str, nproc: int, out: str | None, records: str | None, from_records: str | None,
              use_cache: bool = True, timeout_s: float = 600.0, progress: Callable[[str], None] | None = None,
              plan: Plan | None = None, fit_names: list[str] | None = None) -> Calibration:
    """Measure (unless from_records), fit, write the profile (to `out` and the cache)."""
    from topowise.topology.model import Topology

    started = time.monotonic()
    if from_records:
        folder = Path(from_records)
        recs, meta = read_records_dir(folder)
        topo = Topology.from_dict(meta["topology"], f"{folder / META_FILE}")
        fp_text = meta["fingerprint"]
    else:
        if device not in ("cuda", "cpu"):
            raise UsageError(f"--device must be cuda or cpu, not {device!r}")
        if nproc < 2:
            raise UsageError(f"calibration measures collectives and needs two or more processes, not --nproc {nproc}")
        fp = machine_fingerprint(device)
        if fp is None:
            raise UsageError("no GPUs visible through NVML: calibrate a GPU machine there, or use --device cpu")
        fp_text = fingerprint_text(fp)
        topo = live_topology(device, nproc)
        folder = Path(records) if records else default_records_dir(out or cache_path(fp_text))
        if any((folder / n).exists() for n in RECORD_FILES.values()):
            raise UsageError(f"{folder} already holds calibration records: fit them with --from-records {folder}, "
                             "or give another --records folder")
        plan = plan or calibration_plan(device)
        folder.mkdir(parents=True, exist_ok=True)
        meta = {"fingerprint": fp_text, "topology": topo.to_dict(), "device": device, "nproc": nproc,
                "plan": _plan_dict(plan), "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        (folder / META_FILE).write_text(json.dumps(meta, indent=2))
        problems = measure(plan, nproc, folder, timeout_s=timeout_s, progress=progress)
        meta["measure_s"] = round(time.monotonic() - started, 1)
        meta["problems"] = problems
        (folder / META_FILE).write_text(json.dumps(meta, indent=2))
        recs, _ = read_records_dir(folder)
        if not any(r.get("kind") == "collective" for r in recs) and not observations_from(recs):
            raise UsageError(f"nothing was measured ({'; '.join(problems)}); see the messages above")
    where = f"{parse_fingerprint(fp_text).get('name', '?')}, {meta.get('started', '')[:10]}"
    min_bytes = int((meta.get("plan") or {}).get("fit_min_bytes", 0))
    profile, report = fit_profile(recs, topo, fp_text, where=where, fit_names=fit_names, comm_min_bytes=min_bytes)
    report["measure_s"] = meta.get("measure_s")
    report["problems"] = meta.get("problems", [])
    report["runs_detail"] = [r.to_record(fp_text) for r in compare(recs, profile, topo)]
    target = Path(out) if out else None
    cached = cache_path(fp_text) if use_cache else None
    for path in (target, cached):
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(profile.to_json() + "\n")
            tmp.replace(path)
    main_path = target or cached
    return Calibration(profile, str(main_path) if main_path else "", str(cached) if cached else None, str(folder),
                       report, None if from_records else round(time.monotonic() - started, 1))


def _plan_dict(plan: Plan) -> dict:
    d = asdict(plan)
    d["cases"] = [asdict(c) for c in plan.cases]
    return d


# ================================================================================================
# validate


@dataclass(frozen=True)
class ValidationRow:
    case: Case
    status: str
    measured_step_s: float | None
    predicted_step_s: float | None
    measured_alloc: float | None  # torch.cuda.max_memory_allocated
    predicted_alloc: float | None  # MemoryBreakdown.allocated_bytes
    reserved: float | None
    predicted_peak: float | None  # allocated + slack + CUDA context
    world_size: int = 0
    breakdown: dict = field(default_factory=dict)
    step_spread: float = 0.0  # measured: interquartile range / median of the timed steps

    @property
    def step_error(self) -> float | None:
        return relative_error(self.predicted_step_s, self.measured_step_s)

    @property
    def memory_error(self) -> float | None:
        return relative_error(self.predicted_alloc, self.measured_alloc)

    def to_record(self, fingerprint: str) -> dict:
        return {"kind": "validation", **asdict(self.case), "world_size": self.world_size, "status": self.status,
                "measured": {"step_time_s": self.measured_step_s, "peak_memory_bytes": self.measured_alloc,
                             "reserved_bytes": self.reserved, "step_spread": self.step_spread},
                "predicted": {"step_time_s": self.predicted_step_s, "allocated_bytes": self.predicted_alloc,
                              "peak_bytes": self.predicted_peak, **self.breakdown},
                "step_time_error": self.step_error, "peak_memory_error": self.memory_error,
                "profile_fingerprint": fingerprint}


def compare(records: list[dict], profile: Profile, topo, model_loader: Callable | None = None) -> list[ValidationRow]:
    """Predict every measured case with `profile` and pair it with the measurement."""
    predict_one = predictor(topo, model_loader)
    rows = []
    for r in records:
        if r.get("kind") != "train":
            continue
        o = Observation(r["model"], r["strategy"], int(r["micro_batch"]), int(r["seq_len"]), r.get("fabric", "nvlink"),
                        bool(r.get("activation_checkpointing")), int(r["world_size"]),
                        r.get("shard_group_size") if r["strategy"] == "hsdp" else None,
                        r.get("step_time_s") or 0.0, (r.get("steady_peak_memory_bytes") or r.get("peak_memory_bytes")), r.get("reserved_bytes"))
        p = predict_one(profile, o)
        t = p.time
        rows.append(ValidationRow(
            o.case, r.get("status", "error"), r.get("step_time_s") if r.get("status") == "ok" else None,
            p.step_time_s, (r.get("steady_peak_memory_bytes") or r.get("peak_memory_bytes")), float(p.memory.allocated_bytes), r.get("reserved_bytes"),
            float(p.memory.peak_bytes), o.world_size,
            {"compute_s": t.compute_s, "memory_bound_s": t.memory_bound_s, "optimizer_s": t.optimizer_s,
             "comm_s": t.comm_s, "exposed_comm_s": t.exposed_comm_s, "host_s": t.host_s, "host_wait_s": t.host_wait_s,
             "activations_bytes": p.memory.activations_bytes, "peak_phase": p.memory.peak_phase},
            step_spread(r.get("step_times_s"))))
    return rows


def summarize(rows: list[ValidationRow], tolerance: float = RANK_TOLERANCE) -> dict:
    """Mean and worst absolute errors; per group of cases differing only in strategy, whether the
    strategy predicted fastest is the measured fastest or within `tolerance` of it."""
    steps = [abs(r.step_error) for r in rows if r.step_error is not None]
    mems = [abs(r.memory_error) for r in rows if r.memory_error is not None]
    groups: dict[tuple, list[ValidationRow]] = {}
    for r in rows:
        if r.status == "ok" and r.measured_step_s:
            groups.setdefault(r.case.group, []).append(r)
    ranking = []
    for key, members in groups.items():
        if len(members) < 2:
            continue
        pred_first = min(members, key=lambda r: r.predicted_step_s)
        fastest = min(members, key=lambda r: r.measured_step_s)
        slower = pred_first.measured_step_s / fastest.measured_step_s - 1.0
        ranking.append({"group": dict(zip(("model", "micro_batch", "seq_len", "fabric", "activation_checkpointing"), key)),
                        "predicted_first": pred_first.case.strategy, "measured_fastest": fastest.case.strategy,
                        "slower_by": slower, "ok": slower <= tolerance,
                        "strategies": [m.case.strategy for m in members]})
    worst = lambda errs: max(errs) if errs else None
    mean = lambda errs: sum(errs) / len(errs) if errs else None
    step_worst = max((r for r in rows if r.step_error is not None), key=lambda r: abs(r.step_error), default=None)
    mem_worst = max((r for r in rows if r.memory_error is not None), key=lambda r: abs(r.memory_error), default=None)
    return {
        "cases": len(rows), "ok": sum(r.status == "ok" for r in rows),
        "failed": [f"{r.case.model} {r.case.strategy} {r.case.fabric}: {r.status}" for r in rows if r.status != "ok"],
        "step_time": {"mean_abs_error": mean(steps), "max_abs_error": worst(steps), "cases": len(steps),
                      "worst_case": _case_words(step_worst.case) if step_worst else None},
        "peak_memory": {"mean_abs_error": mean(mems), "max_abs_error": worst(mems), "cases": len(mems),
                        "worst_case": _case_words(mem_worst.case) if mem_worst else None},
        "ranking": ranking, "ranking_ok": all(g["ok"] for g in ranking) if ranking else None,
        # counted above like every case; named so a reader knows the model does not describe them
        "unsteady": [{"case": _case_words(r.case), "step_spread": r.step_spread, "step_error": r.step_error}
                     for r in rows if r.step_spread > UNSTEADY_SPREAD],
        # the same errors split by what the model says sets the step: the GPU alone, or the host in some phase
        "by_bound": {bound: _errors([r for r in rows if (r.breakdown.get("host_wait_s", 0.0) > 0) == host])
                     for bound, host in (("gpu", False), ("host", True))},
    }


def _errors(rows: list[ValidationRow]) -> dict:
    errs = [abs(r.step_error) for r in rows if r.step_error is not None]
    return {"cases": len(errs), "mean_abs_error": sum(errs) / len(errs) if errs else None,
            "max_abs_error": max(errs) if errs else None}


def meets_target(summary: dict) -> dict:
    """The accuracy target of docs/calibration.md, item by item."""
    s, m = summary["step_time"], summary["peak_memory"]
    le = lambda v, lim: v is not None and v <= lim
    return {"cases >= 16": summary["ok"] >= 16, "step MAE <= 5%": le(s["mean_abs_error"], 0.05),
            "step max <= 10%": le(s["max_abs_error"], 0.10), "memory MAE <= 5%": le(m["mean_abs_error"], 0.05),
            "memory max <= 10%": le(m["max_abs_error"], 0.10), "ranking": bool(summary["ranking_ok"])}


def _case_words(c: Case) -> str:
    return f"{c.model} {c.strategy} mb{c.micro_batch} seq{c.seq_len} {c.fabric}"


@dataclass(frozen=True)
class Validation:
    rows: tuple[ValidationRow, ...]
    summary: dict
    profile_fingerprint: str
    out: str | None
    plot: str | None
    measured_path: str
    elapsed_s: float | None

    def to_dict(self) -> dict:
        return {"cases": [r.to_record(self.profile_fingerprint) for r in self.rows], "summary": self.summary,
                "target": meets_target(self.summary) if self.rows else None, "out": self.out, "plot": self.plot,
                "measured": self.measured_path, "elapsed_s": self.elapsed_s}


def validate(*, profile: Profile, device: str, nproc: int, out: str | None, plot: str | None,
             make_plot: bool = True, measured: str | None = None, timeout_s: float = 600.0, progress: Callable[[str], None] | None = None,
             topology=None, plan: Plan | None = None) -> Validation:
    """Measure the validation cases (or read `measured`, a train JSONL), predict each, compare."""
    from topowise.measure.records import append_record, read_records

    started = time.monotonic()
    out_path = Path(out) if out else None
    problems: list[str] = []
    if measured:
        recs = read_records(measured, kind="train")
        if not recs:
            raise UsageError(f"{measured} holds no training records (kind \"train\", from bench train or validate)")
        nproc = int(recs[0]["world_size"])
        if topology is None:
            try:
                topology = live_or_cpu_topology(recs[0].get("device", device), nproc)
            except UsageError as exc:
                raise UsageError(f"{measured}: no meta.json beside it says where these runs ran, and this machine's "
                                 f"topology cannot be read ({exc}); give --topology PRESET|FILE") from None
        topo = topology
        measured_path = measured
    else:
        topo = topology or live_topology(device, nproc)
        plan = plan or validation_plan(device)
        folder = (out_path.with_name(out_path.stem + "-records") if out_path else Path("topowise-validation-records"))
        if (folder / RECORD_FILES["train"]).exists():
            raise UsageError(f"{folder} already holds measurements: re-evaluate them with --measured "
                             f"{folder / RECORD_FILES['train']}, or choose another --out")
        folder.mkdir(parents=True, exist_ok=True)
        fp = machine_fingerprint(device)
        (folder / META_FILE).write_text(json.dumps({
            "fingerprint": fingerprint_text(fp) if fp else "", "topology": topo.to_dict(), "device": device,
            "nproc": nproc, "plan": _plan_dict(plan), "profile": profile.fingerprint,
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}, indent=2))
        problems = measure(plan, nproc, folder, timeout_s=timeout_s, progress=progress)
        measured_path = str(folder / RECORD_FILES["train"])
        recs = read_records(measured_path, kind="train")
    rows = compare(recs, profile, topo)
    if out_path:
        out_path.unlink(missing_ok=True)  # derived from the measurements: written whole each time
        for r in rows:
            append_record(out_path, r.to_record(profile.fingerprint))
    summary = dict(summarize(rows), problems=problems)
    plot_path = None
    if make_plot:
        plot_path = plot or (str(out_path.with_suffix(".png")) if out_path else "topowise-validation.png")
        plot_validation(rows, plot_path, summary)
    return Validation(tuple(rows), summary, profile.fingerprint, str(out_path) if out_path else None, plot_path,
                      measured_path, None if measured else round(time.monotonic() - started, 1))


def live_or_cpu_topology(device: str, nproc: int):
    return cpu_topology(nproc) if device == "cpu" else live_topology("cuda", nproc)


def plot_validation(rows: list[ValidationRow], path: str, summary: dict | None = None) -> str:
    """Two scatters, predicted against measured (step time, peak allocated memory), y = x and +-10%."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker  # noqa: F401 - used as matplotlib.ticker

    fig, axes = plt.subplots(1, 2, figsize=(11, 5))
    colors = {"ddp": "tab:blue", "zero1": "tab:orange", "zero2": "tab:green", "zero3": "tab:red", "hsdp": "tab:purple"}
    panels = ((axes[0], "step time (ms)", lambda r: r.measured_step_s, lambda r: r.predicted_step_s, 1e3),
              (axes[1], "peak allocated memory (GiB)", lambda r: r.measured_alloc, lambda r: r.predicted_alloc, 1 / GIB))
    for ax, label, meas, pred, scale in panels:
        pts = [(meas(r) * scale, pred(r) * scale, r) for r in rows if meas(r) and pred(r) is not None]
        for x, y, r in pts:
            ax.scatter(x, y, color=colors.get(r.case.strategy, "black"),
                       marker="o" if r.case.fabric == "nvlink" else "^", s=36)
        if pts:
            lo = min(min(x, y) for x, y, _ in pts) * 0.8
            hi = max(max(x, y) for x, y, _ in pts) * 1.2
            ax.plot([lo, hi], [lo, hi], color="black", lw=1)
            ax.plot([lo, hi], [lo * 1.1, hi * 1.1], color="grey", lw=0.7, ls="--")
            ax.plot([lo, hi], [lo * 0.9, hi * 0.9], color="grey", lw=0.7, ls="--")
            ax.set_xscale("log")
            ax.set_yscale("log")
            for axis in (ax.xaxis, ax.yaxis):  # plain numbers, not 2 x 10^2
                axis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
                axis.set_minor_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.set_xlabel(f"measured {label}")
        ax.set_ylabel(f"predicted {label}")
        ax.grid(True, which="both", alpha=0.3)
    handles = [plt.Line2D([], [], color=c, marker="o", ls="", label=s) for s, c in colors.items()]
    handles += [plt.Line2D([], [], color="black", marker="o", ls="", label="nvlink"),
                plt.Line2D([], [], color="black", marker="^", ls="", label="pcie")]
    axes[1].legend(handles=handles, fontsize=8, loc="upper left")
    if summary:
        s, m = summary["step_time"], summary["peak_memory"]
        pct = lambda v: "-" if v is None else f"{100 * v:.1f}%"
        fig.suptitle(f"topowise validate: {summary['ok']} cases; step time error mean {pct(s['mean_abs_error'])}, "
                     f"max {pct(s['max_abs_error'])}; memory mean {pct(m['mean_abs_error'])}, max {pct(m['max_abs_error'])}"
                     " (dashed: +-10%)", fontsize=10)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _human(nbytes: float) -> str:
    for unit, size in (("GiB", GIB), ("MiB", MIB), ("KiB", 1024)):
        if nbytes >= size:
            return f"{nbytes / size:g} {unit}"
    return f"{int(nbytes)} B"
