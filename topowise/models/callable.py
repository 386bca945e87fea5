"""Any PyTorch model, from `module:function` (the contract: docs/model-profile.md).

    def build(micro_batch: int = 8, seq_len: int = 1024):   # both optional: taken when declared
        return model, example_batch                          # or (model, example_batch, loss_fn)

- example_batch: a tensor (model(batch)), a tuple or list (model(*batch)) or a dict (model(**batch));
  topowise moves its tensors to the device.
- loss_fn(model, batch) -> scalar tensor: the forward and the loss, the user's way. Without it the
  loss is the mean of the model's output (its first tensor when it returns a tuple, list or dict).

topowise reads the parameters on the meta device (no weights allocated; a function that cannot build
there is built on the CPU), finds the blocks FSDP wraps (`block_class`) and describes the model as a
CallableSpec. Every failure of the user's code is one UsageError line: exit 2, no traceback.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import sys
import types
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from topowise.errors import UsageError

try:
    import torch
    import torch.nn as nn
except ModuleNotFoundError as _missing:  # the planning install has no torch: one line where a callable is asked for
    if _missing.name != "torch":
        raise
    raise UsageError("a module:function model builds a PyTorch model, and this Python has no PyTorch: "
                     "pip install 'topowise[bench]' (or torch); presets and config.json models need none") from None
from topowise.models.callable_spec import CallableSpec

EXAMPLE = "examples.models.llama:build"
SHAPE_ARGS = ("micro_batch", "seq_len")


@dataclass
class Built:
    """What the function returned: the model, its example batch, the loss function (None: the mean)."""

    model: nn.Module
    batch: object
    loss_fn: object = None


def resolve_function(reference: str):
    """The function `module:function` names, imported as `python -m` would find it (the current folder
    first). One line for each way it can fail: no module, the module's own import error, no function."""
    module_name, _, attr = reference.partition(":")
    if not module_name or not attr:
        raise UsageError(f"--model {reference!r}: give a preset, a config.json, or module:function "
                         f"(e.g. {EXAMPLE})")
    cwd = str(Path.cwd())
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise UsageError(f"--model {reference}: no module named {exc.name!r} (run from the folder that "
                             f"holds it, or put it on PYTHONPATH; e.g. {EXAMPLE})") from None
        raise UsageError(f"--model {reference}: importing {module_name} failed: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - the user's module: any error is theirs, reported in one line
        raise UsageError(f"--model {reference}: importing {module_name} raised "
                         f"{type(exc).__name__}: {_first_line(exc)}") from None
    fn = module
    for part in attr.split("."):
        if not hasattr(fn, part):
            names = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_")
                           and getattr(v, "__module__", None) == module.__name__)
            have = f" (it has: {', '.join(names)})" if names else ""
            raise UsageError(f"--model {reference}: module {module_name} has no {attr!r}{have}")
        fn = getattr(fn, part)
    if not callable(fn):
        raise UsageError(f"--model {reference}: {attr} is a {type(fn).__name__}, not a function returning "
                         "(model, example_batch)")
    check_builder(reference, fn)
    return fn


def check_builder(reference: str, fn) -> None:
    """Refuse, without calling it, what cannot be a model builder: a built-in (os:system, os:fork), a function
    of Python's own library (shutil:rmtree), or one with required arguments besides micro_batch and seq_len.
    Anything else is called, and what it returns is checked (check_returned)."""
    target = fn.func if isinstance(fn, functools.partial) else fn
    if inspect.isbuiltin(target) or isinstance(target, _BUILTIN_TYPES):
        raise UsageError(f"--model {reference}: a built-in function, not one returning (model, example_batch): "
                         f"give a function of yours (e.g. {EXAMPLE})")
    home = str(getattr(target, "__module__", None) or "").split(".")[0]
    if home in sys.stdlib_module_names or home == "builtins":
        raise UsageError(f"--model {reference}: a function of Python's standard library ({home}), not one returning "
                         f"(model, example_batch): give a function of yours (e.g. {EXAMPLE})")
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return
    required = [p.name for p in params if p.default is inspect.Parameter.empty and p.name not in SHAPE_ARGS
                and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)]
    if required:
        raise UsageError(f"--model {reference} requires {', '.join(required)}: a model function takes at most "
                         f"{' and '.join(SHAPE_ARGS)}, both optional (e.g. {EXAMPLE})")


_BUILTIN_TYPES = (types.BuiltinFunctionType, types.BuiltinMethodType, types.MethodWrapperType,
                  types.WrapperDescriptorType, types.MethodDescriptorType)


def accepted_args(fn) -> tuple[str, ...]:
    """Which of micro_batch and seq_len the function takes (by name, or all through **kwargs)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return ()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return SHAPE_ARGS
    return tuple(a for a in SHAPE_ARGS if a in params)


def build(reference: str, *, micro_batch: int | None = None, seq_len: int | None = None,
          device: str | torch.device | None = None) -> Built:
    """Call the function (under `torch.device(device)` when given: "meta" allocates nothing) and check
    what it returned."""
    fn = resolve_function(reference)
    given = {"micro_batch": micro_batch, "seq_len": seq_len}
    kwargs = {k: v for k, v in given.items() if k in accepted_args(fn) and v is not None}
    try:
        if device is None:
            out = fn(**kwargs)
        else:
            with torch.device(device):
                out = fn(**kwargs)
    except UsageError:
        raise
    except Exception as exc:  # noqa: BLE001 - the user's function
        raise UsageError(f"--model {reference} raised {type(exc).__name__}: {_first_line(exc)}") from None
    return check_returned(reference, out)


def check_returned(reference: str, out) -> Built:
    shape = "(model, example_batch) or (model, example_batch, loss_fn), model a torch.nn.Module"
    if not isinstance(out, (tuple, list)) or len(out) not in (2, 3):
        what = f"a {len(out)}-tuple" if isinstance(out, (tuple, list)) else type(out).__name__
        raise UsageError(f"--model {reference} returned {what}; it must return {shape}")
    model, batch, *rest = out
    if not isinstance(model, nn.Module):
        raise UsageError(f"--model {reference} returned a {type(model).__name__} as the model; it must return {shape}")
    loss_fn = rest[0] if rest else None
    if loss_fn is not None and not callable(loss_fn):
        raise UsageError(f"--model {reference}: loss_fn is a {type(loss_fn).__name__}; give a function "
                         "loss_fn(model, batch) returning a scalar tensor, or leave it out (the output's mean)")
    if not _tensors(batch):
        raise UsageError(f"--model {reference}: the example batch ({type(batch).__name__}) holds no tensor; give a "
                         "tensor, a tuple/list or a dict of tensors")
    if not any(True for _ in model.parameters()):
        raise UsageError(f"--model {reference}: the model has no parameters: nothing to train")
    return Built(model, batch, loss_fn)


def _tensors(batch) -> list:
    if isinstance(batch, torch.Tensor):
        return [batch]
    if isinstance(batch, dict):
        batch = list(batch.values())
    if isinstance(batch, (tuple, list)):
        return [t for b in batch for t in _tensors(b)]
    return []


def to_device(batch, device):
    """The batch with every tensor on `device` (tuples, lists and dicts kept as they are)."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device)
    if isinstance(batch, dict):
        return {k: to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, (tuple, list)):
        return type(batch)(to_device(b, device) for b in batch)
    return batch


def forward_loss(model: nn.Module, batch, loss_fn=None) -> torch.Tensor:
    """The step's forward: loss_fn(model, batch), or the mean of the model's output."""
    if loss_fn is not None:
        loss = loss_fn(model, batch)
    else:
        if isinstance(batch, dict):
            out = model(**batch)
        elif isinstance(batch, (tuple, list)):
            out = model(*batch)
        else:
            out = model(batch)
        loss = _first_tensor(out).float().mean()
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        raise UsageError("the loss is not a scalar tensor: return loss_fn(model, batch) -> a scalar, or a model "
                         "whose output's mean can be the loss")
    return loss


def _first_tensor(out) -> torch.Tensor:
    found = _tensors(out)
    if not found:
        raise UsageError(f"the model returned {type(out).__name__}, no tensor to take the mean of: return a "
                         "loss_fn(model, batch) from the function")
    return found[0]


# --- what FSDP wraps ---------------------------------------------------------------------------
def block_class(model: nn.Module) -> str:
    """The class of the repeated blocks: among the outermost children of ModuleLists and Sequentials (not
    those inside another such child), the class seen at least twice that holds the most parameters in
    all (ties: the more frequent). "" if none."""
    count: Counter = Counter()
    held: Counter = Counter()
    taken: list[str] = []
    for qual, module in model.named_modules():
        if not isinstance(module, (nn.ModuleList, nn.Sequential)) or any(qual.startswith(t + ".") for t in taken):
            continue
        for name, child in module.named_children():
            n = _numel(child)
            if n:
                taken.append(f"{qual}.{name}" if qual else name)
                count[type(child).__name__] += 1
                held[type(child).__name__] += n
    repeated = [k for k in count if count[k] >= 2]
    return max(repeated, key=lambda k: (held[k], count[k])) if repeated else ""


def find_blocks(model: nn.Module, wrap_class: str | None = None) -> tuple[str, list[tuple[str, nn.Module]]]:
    """(class name, [(qualified name, module)]): the outermost modules of the block class, in forward
    (registration) order. `wrap_class` names the class; else `block_class` picks it."""
    name = wrap_class or block_class(model)
    if not name:
        return "", []
    found: list[tuple[str, nn.Module]] = []
    for qual, module in model.named_modules():
        if type(module).__name__ == name and module is not model:
            if not any(qual.startswith(prefix + ".") for prefix, _ in found):
                found.append((qual, module))
    if wrap_class and not found:
        classes = sorted({type(m).__name__ for m in model.modules() if _numel(m)} - {type(model).__name__})
        raise UsageError(f"--wrap-class {wrap_class}: no module of that class in the model; its classes with "
                         f"parameters: {', '.join(classes)}")
    return name, found


def _numel(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def spec_of(reference: str, built: Built, wrap_class: str | None, accepts: tuple[str, ...]) -> CallableSpec:
    model = built.model
    name, blocks = find_blocks(model, wrap_class)
    seen: set[int] = set()
    tensors = []
    for p in model.parameters():  # shared (tied) parameters once, as DDP and the optimizer see them
        if id(p) not in seen:
            seen.add(id(p))
            tensors.append(p.numel())
    tables = sum(_numel(m) for m in model.modules() if isinstance(m, (nn.Embedding, nn.EmbeddingBag)))
    return CallableSpec(name=reference, params=sum(tensors), blocks=tuple(_numel(m) for _, m in blocks),
                        tensors=tuple(tensors), wrap_class=name, accepts=accepts, embedding_params=tables)


def describe_callable(reference: str, *, wrap_class: str | None = None, micro_batch: int | None = None,
                      seq_len: int | None = None) -> CallableSpec:
    """The CallableSpec of `module:function`, built on the meta device (no weights); on the CPU where the
    function cannot build on meta."""
    try:
        built = build(reference, micro_batch=micro_batch, seq_len=seq_len, device="meta")
    except UsageError as meta_error:
        if "raised" not in str(meta_error):
            raise
        built = build(reference, micro_batch=micro_batch, seq_len=seq_len)  # its own error, if it fails here too
    return spec_of(reference, built, wrap_class, accepted_args(resolve_function(reference)))


def batch_size(batch) -> int | None:
    """The samples in an example batch: the leading dimension its tensors share (None: a batch of scalars,
    or tensors that disagree)."""
    leading = {int(t.shape[0]) for t in _tensors(batch) if t.dim() >= 1}
    return leading.pop() if len(leading) == 1 else None


def example_batch_size(reference: str, seq_len: int | None = None) -> int | None:
    """batch_size of the batch the function builds (on the meta device: no memory; else on the CPU)."""
    try:
        built = build(reference, seq_len=seq_len, device="meta")
    except UsageError as meta_error:
        if "raised" not in str(meta_error):
            raise
        built = build(reference, seq_len=seq_len)
    return batch_size(built.batch)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else "(no message)")[:300]
