"""topowise: match a distributed-training strategy to the GPU wiring it runs on.

The Python API (docs/api.md): what `__all__` names is promised; every other module is private by convention.
Each name is imported on first use (PEP 562), so `import topowise` imports nothing else (no torch, no numpy).
"""

from __future__ import annotations

from importlib import import_module

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy and import-linter read the name)

__version__ = "0.1.0"

# name -> the module that defines it, imported when the name is first read
_LAZY = {
    "load_topology": "topowise.api",
    "load_model": "topowise.api",
    "Run": "topowise.run",
    "predict": "topowise.api",
    "plan": "topowise.api",
    "study": "topowise.api",
    "Prediction": "topowise.api",
    "Plan": "topowise.api",
    "PlanResult": "topowise.api",
    "SCHEMA_VERSION": "topowise.api",
    "UsageError": "topowise.errors",
}

__all__ = ["SCHEMA_VERSION", "Plan", "PlanResult", "Prediction", "Run", "UsageError", "load_model", "load_topology",
           "plan", "predict", "study"]

if TYPE_CHECKING:
    from topowise.api import (
        SCHEMA_VERSION,
        Plan,
        PlanResult,
        Prediction,
        load_model,
        load_topology,
        plan,
        predict,
        study,
    )
    from topowise.errors import UsageError
    from topowise.run import Run


def __getattr__(name: str):
    # an unknown name raises AttributeError, so `from topowise import hardware` still finds the submodule
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'topowise' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value  # read once: later reads skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
