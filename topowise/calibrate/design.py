"""Calibration as a designed experiment: runs chosen so that each fitted parameter is pinned by runs that
vary what it multiplies, and a check that says whether a plan does that.

The classic plan (cases.GPU_CALIBRATION) fits from two models that share what matters most to the fit:
tied vocabularies of 128k-152k, so their largest gradient bucket arrives last, and one shape each.
Whatever those two share, the fitted scalars can absorb. The designed plan trains four Llama-style
shapes written as Hugging Face configs into the records folder (no download, no preset):

    name           width  depth  heads (kv)  MLP    vocab    embeddings  what it varies
    cal-h1024-l8    1024     8   16 (16)     2816   32,000   untied      small, full MHA, small vocab
    cal-h1024-l16   1024    16   16 (16)     2816   32,000   untied      depth alone (per-block host, compute)
    cal-h1536-l12   1536    12   12 (4)      4096   50,304   untied      GQA 3, mid vocab
    cal-h2048-l8    2048     8   32 (8)      8192  128,256   tied        width, GQA 4, large tied vocab

at micro-batches 1-8 and sequences 128-8192, on NVLink and with NVLink taken away, for every non-hsdp
strategy where a strategy's own parameter (its overlap, its host terms) needs it.

`identifiability(cases, models, topology, profile)` is the check: the sensitivity of each run's predicted
step to each step-time parameter (d log step / d log parameter; overlaps by an additive step), how many
runs move with each parameter, and the condition number of the sensitivities with each parameter's
column scaled to unit length (large: some parameter can be traded for another without changing the fit).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from topowise.calibrate.cases import HOST_FLOOR_TOKENS, NON_HSDP, Case, Plan
from topowise.calibrate.fit import get_param, set_param
from topowise.costmodel.predict import predict
from topowise.costmodel.profile import Profile
from topowise.models.spec import ModelSpec, spec_from_hf_config
from topowise.run import STRATEGY_NAMES

CONFIGS: dict[str, dict] = {
    name: {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_act": "silu",
           "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "max_position_embeddings": 8192,
           "hidden_size": h, "num_hidden_layers": layers, "num_attention_heads": heads,
           "num_key_value_heads": kv, "intermediate_size": mlp, "vocab_size": vocab, "tie_word_embeddings": tied}
    for name, h, layers, heads, kv, mlp, vocab, tied in (
        ("cal-h1024-l8", 1024, 8, 16, 16, 2816, 32000, False),
        ("cal-h1024-l16", 1024, 16, 16, 16, 2816, 32000, False),
        ("cal-h1536-l12", 1536, 12, 12, 4, 4096, 50304, False),
        ("cal-h2048-l8", 2048, 8, 32, 8, 8192, 128256, True),
    )}

# (model, micro-batch, sequence, strategies, fabrics): GPU-bound shapes on both fabrics for the rates and
# the overlaps (every strategy on the widest model, two on the GQA one), a small model at a long batch
# (the elementwise traffic per FLOP is largest there; 8 x 2048 tokens, so that the GPU and not the host
# sets its step: at 8 x 1024 the bench transformer of 2026-12-02, faster on the GPU, made it host-set and
# the case pinned nothing), and the depth pair at the host floor with every strategy (host seconds per
# block, separated from any per-step cost by the two depths)
DESIGN: tuple[tuple[str, int, int, tuple[str, ...], tuple[str, ...]], ...] = (
    ("cal-h2048-l8", 1, 8192, NON_HSDP, ("nvlink", "pcie")),
    ("cal-h1536-l12", 2, 4096, ("ddp", "zero3"), ("nvlink", "pcie")),
    ("cal-h1024-l16", 8, 2048, ("ddp", "zero2"), ("nvlink",)),
    ("cal-h1024-l8", 1, HOST_FLOOR_TOKENS, NON_HSDP, ("nvlink",)),
    ("cal-h1024-l16", 1, HOST_FLOOR_TOKENS, NON_HSDP, ("nvlink",)),
)
DESIGN_PARAMS = ("compute_efficiency", "activation_traffic", *(f"overlap.{s}" for s in NON_HSDP))

# The designed validation: blocks no designed calibration model has (width, heads, MLP and vocabulary
# together; llama3.2-1b's is cal-h2048-l8's and the 0.37B config's cal-h1024's, so neither is here): two
# configs (the 0.95B and 2.46B GQA Llama-style shapes of research/configs, written into the records folder
# as the calibration's are) and two presets; micro-batches 1-8, sequences 1024-8192, every strategy, both
# fabrics, per-op selective checkpointing on four cases and, with --compile, eight compiled twins.
VALIDATION_CONFIGS: dict[str, dict] = {
    name: dict(CONFIGS["cal-h1024-l8"], hidden_size=h, num_hidden_layers=layers, num_attention_heads=heads,
               num_key_value_heads=kv, intermediate_size=mlp, vocab_size=vocab, tie_word_embeddings=False,
               max_position_embeddings=context)
    for name, h, layers, heads, kv, mlp, vocab, context in (
        ("llama-0.95b", 2048, 16, 16, 16, 5632, 32000, 4096),
        ("llama-2.46b-gqa", 2560, 32, 20, 4, 6912, 50304, 8192),
    )}
VALIDATION: tuple[tuple[str, int, int, tuple[str, ...], tuple[str, ...]], ...] = (
    ("llama-0.95b", 4, 2048, NON_HSDP, ("nvlink", "pcie")),
    ("llama3.2-3b", 1, 4096, STRATEGY_NAMES, ("nvlink", "pcie")),
    ("llama-2.46b-gqa", 2, 2048, ("ddp", "zero3"), ("nvlink", "pcie")),
    ("qwen2.5-0.5b", 8, 1024, ("ddp", "zero2"), ("nvlink", "pcie")),
    ("llama-2.46b-gqa", 1, 8192, ("ddp", "zero2", "zero3"), ("nvlink",)),
)
SELECTIVE_VALIDATION = (("llama3.2-3b", 1, 4096, ("ddp", "zero3")), ("llama-0.95b", 4, 2048, ("zero2", "zero3")))
COMPILED_VALIDATION = (("llama-0.95b", 4, 2048, ("ddp", "zero3"), ("nvlink", "pcie")),
                       ("llama3.2-3b", 1, 4096, ("zero2", "zero3"), ("nvlink",)),
                       ("llama-2.46b-gqa", 2, 2048, ("ddp", "zero3"), ("nvlink",)))
PINNED = 0.01  # a run moves with a parameter when 1% of it moves the predicted step by 1% x this
# seconds to build and wrap one case's model before its steps: an estimate for the budget check, not a
# measurement (the first warm-up steps of 0.4-1.2B models on one H200 took 0.3-0.6 s over a steady one)
BUILD_S = 2.0


def design_models() -> dict[str, ModelSpec]:
    return {name: spec_from_hf_config(cfg, name=name) for name, cfg in CONFIGS.items()}


def write_configs(folder: Path, configs: dict[str, dict] = CONFIGS) -> dict[str, str]:
    """Each design model's config.json under folder/configs/<name>/; name -> its path."""
    paths = {}
    for name, cfg in configs.items():
        path = folder / "configs" / name / "config.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(cfg, indent=1) + "\n")
        paths[name] = str(path)
    return paths


def design_cases(paths: dict[str, str] | None = None) -> tuple[Case, ...]:
    """The designed cases; `paths` maps a design model to its config file (default: its name)."""
    paths = paths or {}
    return tuple(Case(paths.get(m, m), s, mb, seq, f)
                 for m, mb, seq, strategies, fabrics in DESIGN for f in fabrics for s in strategies)


# --compile: compiled twins of the widest model's GPU-bound ddp and zero3 runs and of the small model's host
# floors (fit_compiled pairs each with its eager run)
COMPILED_DESIGN = (("cal-h2048-l8", 1, 8192, ("ddp", "zero3")), ("cal-h1024-l8", 1, HOST_FLOOR_TOKENS,
                                                                 ("ddp", "zero2", "zero3")))


# Tensor and pipeline parallelism on untied design shapes, where the GPUs divide into the degrees (cases.py's
# GPU_MESH_CALIBRATION says why under the profiler, and why not fitted); validation's on its own shapes.
DESIGN_MESH = (Case("cal-h1024-l16", "ddp", 1, 4096, tp=2),
               Case("cal-h1024-l16", "zero3", 1, 2048, pp=2, grad_accum=4))
VALIDATION_MESH = (Case("llama-0.95b", "zero3", 2, 2048, tp=2),
                   Case("llama-0.95b", "ddp", 1, 4096, tp=2, pp=2, grad_accum=4))


def designed_plan(folder: Path, compile: bool = False) -> Plan:
    """The GPU calibration plan with the designed cases (configs written into `folder`): the comm sweep and
    HBM passes of the classic plan, shorter runs; `compile` adds compiled twins."""
    from topowise.calibrate.cases import GPU_CALIBRATION

    paths = write_configs(folder)
    cases = design_cases(paths) + tuple(replace(c, model=paths[c.model]) for c in DESIGN_MESH)
    if compile:
        cases += tuple(Case(paths[m], s, mb, seq, "nvlink", compile=True)
                       for m, mb, seq, strategies in COMPILED_DESIGN for s in strategies)
    return replace(GPU_CALIBRATION, cases=cases, warmup=2, steps=4,
                   hbm_passes=(paths["cal-h2048-l8"], 128256, 8192))


def validation_cases(paths: dict[str, str] | None = None, compile: bool = False) -> tuple[Case, ...]:
    """The designed validation's cases; `paths` maps a config model to its file (default: its name)."""
    paths = paths or {}
    cases = tuple(Case(paths.get(m, m), s, mb, seq, f)
                  for m, mb, seq, strategies, fabrics in VALIDATION for f in fabrics for s in strategies)
    cases += tuple(Case(paths.get(m, m), s, mb, seq, "nvlink", "selective")
                   for m, mb, seq, strategies in SELECTIVE_VALIDATION for s in strategies)
    cases += tuple(replace(c, model=paths.get(c.model, c.model)) for c in VALIDATION_MESH)
    if compile:
        cases += tuple(Case(paths.get(m, m), s, mb, seq, f, compile=True)
                       for m, mb, seq, strategies, fabrics in COMPILED_VALIDATION for f in fabrics for s in strategies)
    return cases


def designed_validation_plan(folder: Path, compile: bool = False) -> Plan:
    """The GPU validation plan with the designed cases (configs written into `folder`)."""
    from topowise.calibrate.cases import GPU_VALIDATION

    return replace(GPU_VALIDATION, cases=validation_cases(write_configs(folder, VALIDATION_CONFIGS), compile))


@dataclass(frozen=True)
class Identifiability:
    params: tuple[str, ...]
    runs: tuple[str, ...]  # case labels
    sensitivity: tuple[tuple[float, ...], ...]  # runs x params: d log step / d log parameter
    pinned_by: dict  # parameter -> runs whose step moves with it (|sensitivity| >= PINNED)
    condition: float  # of the column-normalised sensitivities over the parameters some run moves with
    seconds: float  # predicted GPU seconds of the training runs (warm-up + timed steps + building)

    @property
    def unpinned(self) -> tuple[str, ...]:
        return tuple(p for p in self.params if self.pinned_by[p] < 2)


def identifiability(cases, models: Callable[[str], ModelSpec], topology, profile: Profile,
                    params=DESIGN_PARAMS, warmup: int = 2, steps: int = 4) -> Identifiability:
    """The sensitivities of `cases` (on the first GPUs of `topology`) to `params` around `profile`. The runs
    the host sets (host-bound) are left out, as the fit leaves them out."""
    rows, labels, seconds = [], [], 0.0
    for c in cases:
        if c.has_mesh:  # compared, not fitted (GPU_MESH_CALIBRATION)
            continue
        run = c.run(models(c.model), topology.indices[:2])
        base = predict(run, topology, profile)
        seconds += (warmup + steps) * base.step_time_s + BUILD_S
        if base.host_bound:
            continue
        row = []
        for name in params:
            value = get_param(profile, name)
            if name.startswith("overlap."):  # bounded in [0, 1]: a step of 0.05 inside the bounds
                lo, hi = max(0.0, value - 0.05), min(1.0, value + 0.05)
                a = predict(run, topology, set_param(profile, name, lo)).step_time_s
                b = predict(run, topology, set_param(profile, name, hi)).step_time_s
                row.append((math.log(b) - math.log(a)) / (hi - lo) * max(value, 0.05))
            else:
                a = predict(run, topology, set_param(profile, name, value * 0.99)).step_time_s
                b = predict(run, topology, set_param(profile, name, value * 1.01)).step_time_s
                row.append((math.log(b) - math.log(a)) / math.log(1.01 / 0.99))
        rows.append(row)
        labels.append(c.label)
    s = np.array(rows) if rows else np.zeros((0, len(params)))
    pinned = {p: int(np.sum(np.abs(s[:, j]) >= PINNED)) for j, p in enumerate(params)}
    moved = [j for j, p in enumerate(params) if pinned[p]]
    if moved and len(rows) >= len(moved):
        cols = s[:, moved] / np.linalg.norm(s[:, moved], axis=0)
        condition = float(np.linalg.cond(cols))
    else:
        condition = math.inf
    return Identifiability(tuple(params), tuple(labels), tuple(tuple(float(x) for x in r) for r in rows), pinned,
                           condition, seconds)


def comm_sweep_seconds(plan: Plan) -> float:
    """A rough bound on the comm sweep's time: iterations x sizes x ops x fabrics at 25 GB/s (PCIe's all-reduce
    busbw on 2x H200, the slower fabric), plus 10 s per fabric for its launch (an estimate: process start and
    NCCL's set-up)."""
    total = sum(plan.comm_sizes) * (plan.comm_iters + plan.comm_warmup) * len(plan.comm_ops)
    return len(plan.fabrics) * total / (25e9) + len(plan.fabrics) * 10.0 if plan.comm_ops else 0.0


