"""What `topowise env` reports for a bug report: versions, GPUs, and the NCCL/CUDA variables in force.

Every piece is optional: no torch, no NVML, no GPUs each leave a note instead of an error.
torch is imported here only, inside a function, because importing it costs seconds.
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Mapping
from importlib import metadata

from topowise import __version__
from topowise.units import GIB

ENV_PREFIXES = ("NCCL_", "CUDA_", "TORCH_NCCL_")


def collect(environ: Mapping[str, str] | None = None, nvml=None, with_torch: bool = True) -> dict:
    environ = os.environ if environ is None else environ
    return {
        "topowise": __version__,
        "python": f"{platform.python_version()} ({sys.executable})",
        "platform": platform.platform(),
        "packages": _packages(("rich", "matplotlib", "nvidia-ml-py")),
        "torch": _torch() if with_torch else {"note": "not inspected"},
        "nvidia": _nvidia(nvml),
        "environment": {k: environ[k] for k in sorted(environ) if k.startswith(ENV_PREFIXES)},
    }


def _packages(names) -> dict[str, str | None]:
    out = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def _torch() -> dict:
    try:
        import torch
    except Exception as exc:  # ImportError, or a broken install (missing CUDA libraries)
        return {"version": None, "note": f"torch not importable ({type(exc).__name__})"}
    info = {"version": torch.__version__, "cuda": getattr(torch.version, "cuda", None), "nccl": None,
            "cuda_available": False, "device_count": 0}
    try:
        info["cuda_available"] = bool(torch.cuda.is_available())
        info["device_count"] = torch.cuda.device_count() if info["cuda_available"] else 0
    except Exception as exc:
        info["note"] = f"torch.cuda failed: {exc}"
    try:
        version = torch.cuda.nccl.version()
        info["nccl"] = ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
    except Exception:
        pass  # a CPU build has no NCCL
    return info


def _nvidia(nvml=None) -> dict:
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError:
            return {"driver": None, "gpus": [], "note": "nvidia-ml-py not installed"}
    error = getattr(nvml, "NVMLError", Exception)
    try:
        nvml.nvmlInit()
    except error as exc:
        return {"driver": None, "gpus": [], "note": f"NVML unavailable ({_text(exc)})"}
    try:
        out = {"driver": _text(nvml.nvmlSystemGetDriverVersion()), "cuda_driver": None, "gpus": []}
        try:
            v = int(nvml.nvmlSystemGetCudaDriverVersion_v2())
            out["cuda_driver"] = f"{v // 1000}.{v % 1000 // 10}"  # 12040 -> 12.4 (nvml.h)
        except (error, AttributeError):
            pass
        for i in range(nvml.nvmlDeviceGetCount()):
            h = nvml.nvmlDeviceGetHandleByIndex(i)
            out["gpus"].append({
                "index": i,
                "name": _text(nvml.nvmlDeviceGetName(h)),
                "pci_bus_id": _text(nvml.nvmlDeviceGetPciInfo(h).busId),
                "memory_gib": round(nvml.nvmlDeviceGetMemoryInfo(h).total / GIB, 1),
            })
        return out
    except error as exc:
        return {"driver": None, "gpus": [], "note": f"NVML failed ({_text(exc)})"}
    finally:
        try:
            nvml.nvmlShutdown()
        except error:
            pass


def _text(value) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
