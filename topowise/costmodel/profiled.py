"""A prediction from a model profile: the model measured on one device, the rest the cost model's.

`topowise profile` runs a `module:function` model for a few steps on one GPU as each strategy runs
it there (a process group of one: nothing sent) and writes, per strategy, the GPU's time and the
host's time per phase (forward with the loss, backward, optimizer step), the allocator's peak and the
model states' bytes (topowise.measure.model_profile). For a run of that model on N GPUs:

    GPU time of a phase   = the profile's (scaled to another GPU, below) + its exposed communication
    exposed communication = costmodel.collectives' collectives of the strategy (strategy_collectives for
                            FSDP2, DDP's buckets over the model's real tensors), hidden behind the
                            phase's GPU time at the profile's overlap efficiency (step.exposed_time)
    host time of a phase  = the profile's
    step                  = sum over phases of max(host, GPU)            (as step.py)
    memory                = the profile's peak allocated less the model states that N GPUs shard
                            away (memory.pytorch_state_bytes at 1 and at N), + slack and CUDA context

The sharded optimizer step (zero1, zero2, zero3, hsdp) takes 1/N of the profile's.

Another GPU than the one measured: the forward and backward scale by the achievable bf16 matmul
rates and the optimizer step (memory-bound AdamW) by the achievable memory bandwidths. Achievable
is the datasheet figure (hardware.py) x the fraction the measured GPU reached of its own datasheet
figure (the profile's matmul_flops and memory_bytes_per_s); for a measured device without a
datasheet row the cost-model profile's compute_efficiency and hbm_efficiency stand in. Host
times are kept (the same host assumed). Such a prediction is an estimate: `scaled_from` says so.

Activation checkpointing, not profiled, is estimated from the per-block figures (`recompute_shares`):
backward adds the recomputed blocks' forward time; they keep their inputs instead of their activations.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path

from topowise import hardware
from topowise.costmodel import comm as comm_mod
from topowise.costmodel.collectives import collective, strategy_collectives
from topowise.costmodel.flops import training_flops_per_token
from topowise.costmodel.memory import breakdown_at_peak, fits, pytorch_state_bytes
from topowise.costmodel.prediction import PhaseCost, Prediction, TimeBreakdown
from topowise.costmodel.profile import Profile
from topowise.costmodel.step import exposed_time
from topowise.errors import UsageError
from topowise.models.spec import CallableSpec
from topowise.run import STEP_PHASES, Run

FORMAT = "topowise.model_profile"
# a strategy not profiled is predicted from the nearest one that was (same wrap, then same family)
FALLBACK = {"hsdp": ("zero3", "zero2"), "zero3": ("zero2",), "zero2": ("zero3",), "zero1": ("ddp",),
            "ddp": ("zero1",)}


@dataclass(frozen=True)
class ModelProfile:
    """A `topowise profile` file, read (see topowise.measure.model_profile for how it is measured)."""

    model: CallableSpec
    micro_batch: int
    seq_len: int | None
    device: str
    device_name: str
    torch_version: str
    compile: bool
    matmul_flops: float
    memory_bytes_per_s: float
    strategies: dict = field(default_factory=dict)  # strategy -> measured figures (the file's)
    wall_s: float = 0.0
    path: str = ""

    def entry(self, strategy: str) -> tuple[str, dict]:
        """(profiled strategy, its figures) for `strategy`: its own, else the nearest (FALLBACK)."""
        for name in (strategy, *FALLBACK.get(strategy, ())):
            data = self.strategies.get(name)
            if data and data.get("status", "ok") == "ok":
                return name, data
        have = ", ".join(k for k, v in self.strategies.items() if v.get("status", "ok") == "ok") or "none"
        raise UsageError(f"{self.path or 'the model profile'} has no figures for {strategy} (profiled: {have}); "
                         f"profile it: topowise profile --model {self.model.name} --strategies {strategy}")

    @classmethod
    def from_dict(cls, data: dict, where: str = "model profile") -> ModelProfile:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise UsageError(f"{where} is not a model profile (no \"format\": \"{FORMAT}\"); "
                             "write one with `topowise profile --model module:function --out FILE`")
        try:
            strategies = {k: dict(v) for k, v in data["strategies"].items()}
            for figures in strategies.values():
                if figures.get("status", "ok") == "ok":
                    for phase in STEP_PHASES:
                        float(figures["gpu_s"][phase]), float(figures["host_s"][phase])
            return cls(model=CallableSpec.from_dict(data["model"]), micro_batch=int(data["micro_batch"]),
                       seq_len=None if data.get("seq_len") is None else int(data["seq_len"]),
                       device=str(data["device"]), device_name=str(data["device_name"]),
                       torch_version=str(data.get("torch_version", "")), compile=bool(data.get("compile", False)),
                       matmul_flops=float(data["matmul_flops"]), memory_bytes_per_s=float(data["memory_bytes_per_s"]),
                       strategies=strategies, wall_s=float(data.get("wall_s", 0.0)), path=where)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise UsageError(f"{where}: a model profile field is missing or malformed ({type(exc).__name__}: "
                             f"{exc}); write it again with `topowise profile`") from None


def load_model_profile(path: str | Path) -> ModelProfile:
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise UsageError(f"--model-profile {path}: cannot read it ({exc.strerror or exc})") from None
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):  # RecursionError: nested too deeply
        raise UsageError(f"--model-profile {path}: not JSON; give the file `topowise profile --out` wrote") from None
    return ModelProfile.from_dict(data, str(path))


def profiled_model(model_profile: ModelProfile, reference: str | None = None) -> CallableSpec:
    """The profile's model, carrying its profile (step.predict_pytorch then predicts from it). With
    `reference` (--model), it must be the model profiled."""
    spec = model_profile.model
    if reference and reference != spec.name:
        raise UsageError(f"--model {reference} is not the model {model_profile.path} profiled ({spec.name}): "
                         f"give --model {spec.name}, or leave --model out")
    return replace(spec, model_profile=model_profile)


def gpu_scales(mp: ModelProfile, target_gpu: str, profile: Profile) -> tuple[float, float, str]:
    """(compute time scale, memory-bound time scale, "" or what the estimate was scaled from)."""
    measured = hardware.gpu_spec(mp.device_name) if mp.device == "cuda" else None
    target = hardware.gpu_spec(target_gpu)
    if measured is not None and measured.name == target.name:
        return 1.0, 1.0, ""
    if measured is not None and measured.bf16_dense_flops > 0:
        compute_fraction = mp.matmul_flops / measured.bf16_dense_flops
        memory_fraction = mp.memory_bytes_per_s / hardware.hbm_bytes_per_s(measured.name)
    else:
        compute_fraction, memory_fraction = profile.compute_efficiency, profile.hbm_efficiency
    if target.bf16_dense_flops <= 0:
        raise UsageError(f"no datasheet peak for GPU {target_gpu!r} to scale the model profile to")
    compute = mp.matmul_flops / (target.bf16_dense_flops * compute_fraction)
    memory = mp.memory_bytes_per_s / (hardware.hbm_bytes_per_s(target.name) * memory_fraction)
    return compute, memory, (f"estimate: profiled on {mp.device_name}, scaled to {target.name} by matmul rate "
                             f"(x{compute:.3g}) and memory bandwidth (x{memory:.3g})")


def ddp_collectives(run: Run, topology, profile: Profile) -> tuple:
    """DDP's buckets (bucket_cap_mb=25, first 1 MiB) over the model's real parameter tensors in the order
    backward finishes them (the reverse of registration), all-reduced in fp32; zero1's broadcasts after."""
    group = tuple(sorted(run.gpus))
    tensors = callable_model(run).tensors
    buckets = [b for b, _ in comm_mod.fill_ddp_buckets(reversed(tensors))]
    out = []
    if len(buckets) > 1:
        rest = buckets[:-1]
        out.append(collective("all_reduce", sum(rest) / len(rest), "fp32", group, topology, len(rest),
                              comm_mod.BACKWARD, profile))
    out.append(collective("all_reduce", buckets[-1], "fp32", group, topology, 1, comm_mod.BACKWARD_LAST, profile))
    if run.spec.sharded:
        n = len(tensors)
        out.append(collective("broadcast", 4 * run.model.params / n, "fp32", group, topology, n,
                              comm_mod.AFTER_STEP, profile))
    return tuple(c for c in out if c.group_size > 1)


def predict_profiled(run: Run, topology, profile: Profile) -> Prediction:
    """Step time and memory per GPU of a placed run whose model carries a ModelProfile (see the module
    docstring); `topology` carries the links the run uses."""
    mp = model_profile_of(run)
    refuse_cpu_profile_for_gpus(mp, topology)
    if run.micro_batch != mp.micro_batch:
        raise UsageError(f"{mp.path} was profiled at micro-batch {mp.micro_batch}, not {run.micro_batch}: give "
                         f"--micro-batch {mp.micro_batch}, or profile again with --micro-batch {run.micro_batch}")
    if mp.seq_len is not None and run.seq_len != mp.seq_len:  # also the tokens per sample of throughput
        raise UsageError(f"{mp.path} was profiled at --seq-len {mp.seq_len}, not {run.seq_len}: give --seq-len "
                         f"{mp.seq_len}")
    if run.engine != "pytorch":
        raise UsageError("a model profile predicts PyTorch's strategies (--engine pytorch), not DeepSpeed's")
    if run.compile != mp.compile:
        raise UsageError(f"{mp.path} was profiled {'with' if mp.compile else 'without'} --compile; predict the same")
    profiled_as, fig = mp.entry(run.strategy)
    compute_scale, memory_scale, scaled_from = gpu_scales(mp, topology.gpu_spec.name, profile)
    shard = run.shard_size
    gpu = {"forward": fig["gpu_s"]["forward"] * compute_scale, "backward": fig["gpu_s"]["backward"] * compute_scale,
           "optimizer": fig["gpu_s"]["optimizer"] * memory_scale / shard}
    host = {p: float(fig["host_s"][p]) for p in STEP_PHASES}
    blocks = fig.get("blocks") or []
    shares = recompute_shares(run, len(blocks))  # estimated: the recomputed share of each block's forward
    gpu["backward"] += compute_scale * sum(s * (b.get("forward_s") or 0.0) for s, b in zip(shares, blocks))

    collectives = strategy_collectives(run, topology, profile) if run.spec.fsdp else ddp_collectives(
        run, topology, profile)
    collectives = tuple(c for c in collectives if c.bytes > 0)  # a model without blocks: the root's alone
    overlap = profile.overlap.get(run.strategy, 0.0)

    def phase_sum(*phases: str) -> float:
        return sum(c.time_s for c in collectives if c.phase in phases)

    exposed = {
        "forward": phase_sum(comm_mod.FORWARD_FIRST) + exposed_time(phase_sum(comm_mod.FORWARD), gpu["forward"],
                                                                    overlap),
        "backward": phase_sum(comm_mod.BACKWARD_LAST) + exposed_time(phase_sum(comm_mod.BACKWARD), gpu["backward"],
                                                                     overlap),
        "optimizer": phase_sum(comm_mod.AFTER_STEP)}
    device = {p: gpu[p] + exposed[p] for p in STEP_PHASES}
    device_s = sum(device.values())
    # The step loop never waits for the GPU: the host runs ahead across phases, and a step takes the longer
    # of the host's and the GPU's totals, plus what the profile's own timed step showed beyond that rule
    # at one GPU (host and GPU not overlapping perfectly; the measured coupling, kept as measured).
    residual = float(fig["step_s"]) - max(sum(fig["host_s"].values()), sum(fig["gpu_s"].values()))
    step = max(sum(host.values()), device_s) + residual
    step_range = tuple(max(sum(host.values()) * scale, device_s) + residual
                       for scale in (1 - profile.host_spread, 1 + profile.host_spread))
    phases = tuple(PhaseCost(p, device[p], host[p], exposed[p], max(host[p] - device[p], 0.0)) for p in STEP_PHASES)

    memory = profiled_memory(run, fig, blocks, topology, profile)
    bottleneck = topology.bottleneck_gbps(run.gpus)
    tokens = run.tokens
    per_gpu = tokens / step
    compute_s = gpu["forward"] + gpu["backward"]
    flops = training_flops_per_token(run.model, run.seq_len) * tokens  # 6 N, lookups left out: a nominal MFU
    peak = topology.gpu_spec.bf16_dense_flops or math.inf
    note = f"profile {mp.path}" + (f" ({profiled_as}'s figures)" if profiled_as != run.strategy else "")
    return Prediction(
        run=run, topology=topology.name, step_time_s=step, tokens_per_s=per_gpu * run.num_gpus,
        tokens_per_s_per_gpu=per_gpu,
        time=TimeBreakdown(compute_s, sum(c.time_s for c in collectives), sum(exposed.values()), collectives,
                           0.0, gpu["optimizer"], gpu["forward"], gpu["backward"], host_s=sum(host.values()),
                           host_wait_s=max(step - device_s, 0.0), step_range_s=step_range, phases=phases),
        memory=memory, fits=fits(memory, profile), bottleneck_gbps=None if bottleneck == math.inf else bottleneck,
        islands_spanned=len(topology.islands_spanned(run.gpus)), mfu=flops / step / peak,
        profile_fingerprint=f"{profile.fingerprint}; {note}" + (f"; {scaled_from}" if scaled_from else ""),
    )


def refuse_cpu_profile_for_gpus(mp: ModelProfile, topology) -> None:
    """A profile measured on the CPU predicts no GPU. Its times do not carry: on a CPU the host does the
    compute, so each phase's host time is its compute time and the GPU would be predicted waiting for it.
    Nor does its memory: a CPU has no allocator statistics, so neither the peak nor the activations were
    measured. Nothing carries: refused (a CPU profile tests the pipeline on the CPU it was made on)."""
    if mp.device != "cpu" or topology.gpus[0].name.startswith("CPU "):  # the gloo processes of calibrate/machine
        return
    raise UsageError(f"{mp.path} was profiled on the CPU (for tests): nothing in it carries to a GPU "
                     f"({topology.gpu_spec.name}): its times are the CPU's own compute, not a GPU's, and a CPU "
                     f"measures no activation memory; profile on a GPU: topowise profile --model {mp.model.name} "
                     "--device cuda --out PROFILE.json")


def recompute_shares(run: Run, blocks: int) -> list[float]:
    """Per block, the share of its forward that activation checkpointing recomputes (and of its
    activations it does not keep), estimated from block figures: full, every block whole; selective
    every k-th block (torchtitan's ac_freq: blocks 0, k, 2k, ...), those whole; selective per op
    (torchtitan's policy keeps the output of every second matmul and of attention), half of each."""
    mode = getattr(run, "checkpointing", "full" if run.activation_checkpointing else "none")
    if mode == "none" or not run.activation_checkpointing:
        return [0.0] * blocks
    if mode == "selective":
        option = getattr(run, "selective_ac_option", "op")
        if str(option) == "op":
            return [0.5] * blocks
        return [1.0 if i % int(option) == 0 else 0.0 for i in range(blocks)]
    return [1.0] * blocks


def profiled_memory(run: Run, fig: dict, blocks: list, topology, profile: Profile):
    """The profile's allocated peak at one GPU, less what N GPUs shard away; activations as measured."""
    params = run.model.params
    one, here = pytorch_state_bytes(params, run.spec, 1), pytorch_state_bytes(params, run.spec, run.shard_size)
    saved = sum(one.values()) - sum(here.values())
    peak = fig.get("peak_allocated_bytes")
    acts = float(fig.get("activation_bytes") or 0.0)
    if peak is None:  # a CPU profile: no allocator figures; the states and the forward's allocations
        measured = sum(one.values()) + acts
        first = measured
    else:
        measured = peak
        first = fig.get("first_steps_peak_bytes") or measured
    shares = recompute_shares(run, len(blocks))
    if any(shares):  # a recomputed block keeps its input, and is whole again during its own backward
        freed = [s * max((b.get("activation_bytes") or 0) - (b.get("input_bytes") or 0), 0)
                 for s, b in zip(shares, blocks)]
        drop = max(sum(freed) - max(freed), 0.0)
        measured, first, acts = measured - drop, first - drop, max(acts - drop, 0.0)
    allocated = max(measured - saved, 0.0)
    grads = here["grads"]
    other = max(allocated - here["params"] - here["optimizer"] - grads - acts, 0.0)
    phases = {"measured peak": (grads, acts, 0.0, {"other (measured: buffers, workspaces, casts)": other})}
    return breakdown_at_peak(phases, here["params"], here["optimizer"],
                             topology.gpus[0].memory_bytes or topology.gpu_spec.memory_bytes, profile,
                             first_steps_extra=max(first - measured, 0.0))


def callable_model(run: Run) -> CallableSpec:
    """The run's `module:function` model (a Run's model field holds one in a ModelSpec's place)."""
    model: object = run.model
    if not isinstance(model, CallableSpec):
        raise UsageError(f"--model {run.model.name} is a transformer preset, predicted by its formula, not from a "
                         "model profile")
    return model


def model_profile_of(run: Run) -> ModelProfile:
    """The model profile a `module:function` model was read with (require_profile says how to make one)."""
    mp = getattr(run.model, "model_profile", None)
    if not isinstance(mp, ModelProfile):
        require_profile(run)
        raise UsageError(f"--model {run.model.name}: its model profile is not one `topowise profile` wrote")
    return mp


def require_profile(run: Run) -> Run:
    """A `module:function` model is predicted from its profile: there is no formula for its FLOPs."""
    if getattr(run.model, "model_profile", None) is None:
        raise UsageError(f"--model {run.model.name} is predicted from a model profile: run `topowise profile "
                         f"--model {run.model.name} --out PROFILE.json` on a GPU, then give --model-profile "
                         "PROFILE.json")
    return run


def throughput_unit(accepts, seq_len: int | None) -> str:
    """What a profiled model's throughput counts: "samples" when it takes no seq_len and counts one token per
    sample (a recommendation model's ids are not tokens), else "tokens"."""
    return "samples" if "seq_len" not in tuple(accepts) and (seq_len or 1) == 1 else "tokens"


def profiled_summary(prediction: Prediction) -> dict | None:
    """What predict says of a prediction made from a model profile (None for an analytic one): the file,
    the device it was measured on, and whether the figures were scaled to another GPU (an estimate)."""
    mp = getattr(prediction.run.model, "model_profile", None)
    if mp is None:
        return None
    _, _, scaled = prediction.profile_fingerprint.partition("; estimate: ")
    unit = throughput_unit(mp.model.accepts, mp.seq_len)
    counts = (f"; the model takes no tokens: its tokens/s are samples/s ({mp.micro_batch} samples a micro-batch)"
              if unit == "samples" else "")
    return {"file": mp.path, "device_name": mp.device_name, "profiled_strategy": mp.entry(prediction.strategy)[0],
            "micro_batch": mp.micro_batch, "seq_len": mp.seq_len, "estimate": bool(scaled), "unit": unit,
            "note": (f"estimate: {scaled}" if scaled else f"measured on this GPU model ({mp.device_name})") + counts}
