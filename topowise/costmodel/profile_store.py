"""Where profiles are kept, and which one applies: the machine's fingerprint, the cache, the checks.

A profile is valid for the machine it was calibrated on. The fingerprint says which: GPU name and
count, driver, NCCL and torch versions (the CPU model and core count on CPU). It is read without
importing torch (NVML and importlib.metadata), so `predict` and `plan` stay quick. Profiles are cached
under $XDG_CACHE_HOME/topowise/profiles/<hash of the fingerprint>.json (~/.cache when unset), and
predict, plan and study pick the one matching this machine when no --profile is given.
"""

from __future__ import annotations

import hashlib
import os
import platform
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path

from topowise.costmodel.profile import Profile, load_profile
from topowise.errors import UsageError
from topowise.hardware import gpu_spec

CACHE_SUBDIR = ("topowise", "profiles")
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


def _text(value) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def gpu_inventory(nvml=None) -> tuple[str, int, str] | None:
    """(GPU name, count, driver version) from NVML, or None without NVML or GPUs (quickly)."""
    if nvml is None:
        try:
            import pynvml  # type: ignore[import-untyped]  # nvidia-ml-py ships no type information
        except ImportError:
            return None
        nvml = pynvml
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
    sa, sb = gpu_spec(a), gpu_spec(b)
    return sa.name == sb.name if sa.bf16_dense_flops and sb.bf16_dense_flops else a.strip() == b.strip()


def check_profile_for_gpu(profile: Profile, gpu_name: str, where: str, force: bool = False) -> None:
    """Refuse a profile of another GPU model for a topology (predict/plan/study may run anywhere)."""
    if force or not profile.fingerprint:
        return
    fp = parse_fingerprint(profile.fingerprint)
    calibrated_on = fp.get("name", gpu_name)
    if fp.get("device") == "cpu":  # calibrate's CPU topology names its processes "CPU <model>"
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
