"""Step time and memory for one strategy on one GPU placement: `predict`.

    step_time = compute + memory-bound work + optimizer step + exposed communication

- compute: hardware FLOPs per token (flops.py) x tokens per GPU / (datasheet bf16 peak x
  Profile.compute_efficiency). Forward is a third of the model FLOPs, backward the rest (plus the
  recomputed forward with checkpointing).
- memory-bound work on the compute stream, over HBM bandwidth (hardware.py) x Profile.hbm_efficiency:
  the fp32 loss over the vocabulary (per logit: upcast 2+4, log_softmax 12+4, nll gradient 4, log_softmax
  backward 12+4, cast back 4+2 = 48 bytes; a vocabulary row of 128k-152k fp32 logits does not fit in
  shared memory, so PyTorch's cunn_SoftMaxForward reads it three times (max, sum of exp, write) and
  cunn_SoftMaxBackward reads the gradient twice and the output once); ddp/zero1 autocast casts each weight to bf16 (4+2) and its
  bf16 gradient to fp32 (2+4) into the bucket (4+4): 20 bytes per parameter; FSDP2 copies each
  all-gather's output into the unsharded parameters (2+2 bytes per parameter per gather).
- optimizer step: fused AdamW reads parameter, gradient, exp_avg, exp_avg_sq (16 bytes) and writes
  parameter, exp_avg, exp_avg_sq (12): 28 bytes per local parameter (a foreach AdamW would make ~80).
- communication (comm.py) by phase: "forward"/"backward" collectives hide behind that phase's compute
  with the strategy's overlap efficiency e: exposed = max(H - C, 0) + (1 - e) min(H, C); the rest
  (the first all-gathers, the last bucket or reduce-scatter, zero1's broadcasts) is exposed whole.
- the host: eager PyTorch issues every kernel from Python, and the step never waits for the GPU, so
  the host runs ahead of a busy GPU; when the GPU's work in a phase (forward with the loss, backward,
  optimizer step) is shorter than the host's time to issue it, the GPU waits. Each phase takes
  max(host, GPU); host = Profile.host_s_per_layer[strategy/phase] x blocks, measured by `calibrate`
  (bench train's host phase times at 128 tokens, where the GPU keeps up). Small models with FSDP2
  (per-parameter hooks in every block) are host-bound on a fast GPU.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from topowise import hardware
from topowise.costmodel import comm as comm_mod
from topowise.costmodel.comm import CollectiveCost
from topowise.costmodel.flops import (hardware_flops_per_token, hardware_forward_flops_per_token,
                                     training_flops_per_token)
from topowise.costmodel.memory import MemoryBreakdown, activation_bytes_per_token_per_layer, estimate_memory, fits
from topowise.costmodel.profile import Profile, default_profile
from topowise.errors import UsageError
from topowise.models.spec import ModelSpec
from topowise.topology.model import Topology

STRATEGIES = ("ddp", "zero1", "zero2", "zero3", "hsdp")
ALIASES = {"fsdp": "zero3"}
FABRICS = ("nvlink", "pcie")
ADAMW_FUSED_BYTES_PER_PARAM = 28  # see the module docstring
AUTOCAST_BYTES_PER_PARAM = 6 + 6 + 8  # weight cast, weight-gradient cast, accumulate into the bucket
AUTOCAST_FORWARD_BYTES_PER_PARAM = 6  # of which the forward's: the weight cast
FSDP_COPY_OUT_BYTES_PER_PARAM = 4  # per all-gather pass
LOSS_BYTES_PER_LOGIT = 48  # fp32 cross-entropy forward and backward (aten/src/ATen/native/cuda/SoftMax.cu)
LOSS_FORWARD_BYTES_PER_LOGIT = 2 + 4 + 12 + 4  # of which the forward's: upcast, log_softmax


def normalize_strategy(name: str) -> str:
    key = str(name).strip().lower()
    key = ALIASES.get(key, key)
    if key not in STRATEGIES:
        raise UsageError(f"unknown strategy {name!r}; valid strategies: {', '.join(STRATEGIES)} (fsdp = zero3)")
    return key


@dataclass(frozen=True)
class TimeBreakdown:
    compute_s: float
    comm_s: float  # all collectives, hidden or not
    exposed_comm_s: float
    collectives: tuple[CollectiveCost, ...] = ()
    memory_bound_s: float = 0.0
    optimizer_s: float = 0.0
    forward_s: float = 0.0
    backward_s: float = 0.0
    host_s: float = 0.0  # host (Python) time to issue the step
    host_wait_s: float = 0.0  # of the step, time the GPU waits for the host (0: GPU-bound)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["collectives"] = [c.to_dict() for c in self.collectives]
        return d

    @classmethod
    def from_dict(cls, data: dict) -> "TimeBreakdown":
        return cls(**dict(data, collectives=tuple(CollectiveCost.from_dict(c) for c in data.get("collectives", ()))))


@dataclass(frozen=True)
class Prediction:
    model_name: str
    params: int
    strategy: str
    gpus: tuple[int, ...]
    micro_batch: int
    seq_len: int
    activation_checkpointing: bool
    fabric: str
    shard_group_size: int | None
    step_time_s: float
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    time: TimeBreakdown
    memory: MemoryBreakdown
    fits: bool
    bottleneck_gbps: float | None
    islands_spanned: int
    mfu: float = 0.0
    topology: str = ""
    profile_fingerprint: str = ""
    engine: str = "pytorch"  # or "deepspeed" (costmodel/deepspeed.py)

    def to_dict(self) -> dict:
        """predict --json (DESIGN.md keys: model{name, params}, step_time_s, tokens_per_s, ...)."""
        return {
            "model": {"name": self.model_name, "params": self.params},
            "topology": self.topology,
            "strategy": self.strategy,
            "gpus": list(self.gpus),
            "micro_batch": self.micro_batch,
            "seq_len": self.seq_len,
            "activation_checkpointing": self.activation_checkpointing,
            "fabric": self.fabric,
            "shard_group_size": self.shard_group_size,
            "step_time_s": self.step_time_s,
            "tokens_per_s": self.tokens_per_s,
            "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
            "mfu": self.mfu,
            "time": self.time.to_dict(),
            "memory": self.memory.to_dict(),
            "fits": self.fits,
            "bottleneck_gbps": self.bottleneck_gbps,
            "islands_spanned": self.islands_spanned,
            "profile_fingerprint": self.profile_fingerprint,
            "engine": self.engine,
        }

    @classmethod
    def from_dict(cls, data: dict) -> "Prediction":
        return cls(
            model_name=data["model"]["name"], params=data["model"]["params"], strategy=data["strategy"],
            gpus=tuple(data["gpus"]), micro_batch=data["micro_batch"], seq_len=data["seq_len"],
            activation_checkpointing=data["activation_checkpointing"], fabric=data["fabric"],
            shard_group_size=data["shard_group_size"], step_time_s=data["step_time_s"],
            tokens_per_s=data["tokens_per_s"], tokens_per_s_per_gpu=data["tokens_per_s_per_gpu"],
            time=TimeBreakdown.from_dict(data["time"]), memory=MemoryBreakdown.from_dict(data["memory"]),
            fits=data["fits"], bottleneck_gbps=data["bottleneck_gbps"], islands_spanned=data["islands_spanned"],
            mfu=data.get("mfu", 0.0), topology=data.get("topology", ""),
            profile_fingerprint=data.get("profile_fingerprint", ""), engine=data.get("engine", "pytorch"),
        )


def default_shard_group_size(topo: Topology, gpus: tuple[int, ...]) -> int:
    """The size of the NVLink island the GPUs lie in: all of them when they share one island, else the
    smallest spanned island's size reduced to divide the GPU count (gcd), so groups follow islands."""
    spanned = topo.islands_spanned(gpus)
    if len(spanned) <= 1:
        return len(gpus)
    return math.gcd(len(gpus), min(len(isl) for isl in spanned))


def check_shard_group_size(size: int, num_gpus: int) -> None:
    if size < 1 or num_gpus % size:
        divisors = [d for d in range(1, num_gpus + 1) if num_gpus % d == 0]
        raise UsageError(f"hsdp shard group size {size} does not divide {num_gpus} GPUs "
                         f"({num_gpus} % {size} = {num_gpus % size if size >= 1 else 'undefined'}); "
                         f"choose one of {', '.join(map(str, divisors))}")


def exposed_time(hideable_s: float, window_s: float, overlap: float) -> float:
    """What of `hideable_s` stays visible behind `window_s` of compute at overlap efficiency `overlap`."""
    inside = min(hideable_s, window_s)
    return max(hideable_s - window_s, 0.0) + (1.0 - overlap) * inside


def predict(model: ModelSpec, topo: Topology, gpus: tuple[int, ...], strategy: str, *, micro_batch: int = 1,
            seq_len: int = 4096, activation_checkpointing: bool = False, fabric: str = "nvlink",
            shard_group_size: int | None = None, profile: Profile | None = None,
            engine: str = "pytorch") -> Prediction:
    """Step time and memory per GPU for `strategy` on `gpus` of `topo`; one micro-batch per step.
    engine "deepspeed": DeepSpeed ZeRO's buffers and traffic (costmodel/deepspeed.py)."""
    if engine == "deepspeed":
        from topowise.costmodel.deepspeed import predict_deepspeed

        return predict_deepspeed(model, topo, gpus, strategy, micro_batch=micro_batch, seq_len=seq_len,
                                 activation_checkpointing=activation_checkpointing, fabric=fabric,
                                 shard_group_size=shard_group_size, profile=profile)
    if engine != "pytorch":
        raise UsageError(f"unknown engine {engine!r}; valid: pytorch, deepspeed")
    profile = profile or default_profile()
    strategy = normalize_strategy(strategy)
    if micro_batch < 1:
        raise UsageError(f"micro-batch must be a positive number of sequences, not {micro_batch}")
    if seq_len < 1:
        raise UsageError(f"sequence length must be a positive number of tokens, not {seq_len}")
    if fabric not in FABRICS:
        raise UsageError(f"unknown fabric {fabric!r}; valid: {', '.join(FABRICS)}")
    gpus = tuple(gpus)
    if not gpus:
        raise UsageError("no GPUs chosen: give --gpus or --num-gpus")
    for g in gpus:
        topo.gpu(g)  # UsageError for a GPU the topology lacks
    if len(set(gpus)) != len(gpus):
        raise UsageError(f"GPU list {list(gpus)} names a GPU twice")
    n = len(gpus)
    if strategy == "hsdp":
        if shard_group_size is None:  # from the real wiring, so a pcie what-if keeps the same layout
            shard_group_size = default_shard_group_size(topo, gpus)
        check_shard_group_size(shard_group_size, n)
    else:
        shard_group_size = None  # only hsdp has shard groups
    if fabric == "pcie":
        topo = topo.without_nvlink()

    spec = topo.gpu_spec
    peak = profile.peak_flops or spec.bf16_dense_flops  # a calibrated peak (CPU) or the datasheet's
    if peak <= 0:
        raise UsageError(f"no datasheet peak for GPU {topo.gpus[0].name!r}: give --profile with a calibrated one")
    tokens = micro_batch * seq_len
    rate = peak * profile.compute_efficiency
    model_flops = training_flops_per_token(model, seq_len) * tokens
    compute_s = hardware_flops_per_token(model, seq_len, activation_checkpointing) * tokens / rate
    forward_s = hardware_forward_flops_per_token(model, seq_len) * tokens / rate
    backward_s = compute_s - forward_s

    # memory-bound passes (forward, backward bytes) and the optimizer step
    hbm = hardware.hbm_bytes_per_s(spec.name) * profile.hbm_efficiency
    shard = shard_group_size if strategy == "hsdp" else n
    local_params = model.params if strategy == "ddp" else model.params / shard
    loss_bytes = LOSS_BYTES_PER_LOGIT * tokens * model.vocab_size
    fwd_bytes = LOSS_FORWARD_BYTES_PER_LOGIT * tokens * model.vocab_size
    if strategy in ("ddp", "zero1"):
        fwd_bytes += AUTOCAST_FORWARD_BYTES_PER_PARAM * model.params
        copy_bytes = loss_bytes + AUTOCAST_BYTES_PER_PARAM * model.params
    else:  # every unit is gathered for the forward; zero3 and hsdp gather the blocks again in backward
        fwd_bytes += FSDP_COPY_OUT_BYTES_PER_PARAM * model.params
        gathered = model.params + (0 if strategy == "zero2" else model.num_layers * model.layer_params)
        copy_bytes = loss_bytes + FSDP_COPY_OUT_BYTES_PER_PARAM * gathered
    # elementwise work inside the blocks (norms, rotary, SwiGLU, residuals, casts) reads and writes the
    # activations; its traffic is counted as activation_traffic x the bytes the blocks save for backward
    act = profile.activation_traffic * activation_bytes_per_token_per_layer(
        model, autocast=strategy in ("ddp", "zero1")) * tokens * model.num_layers
    fwd_bytes += act / 2
    copy_bytes += act
    memory_bound_s = copy_bytes / hbm
    optimizer_s = ADAMW_FUSED_BYTES_PER_PARAM * local_params / hbm

    collectives = comm_mod.strategy_collectives(model, topo, gpus, strategy, profile, shard_group_size)
    overlap = profile.overlap.get(strategy, 0.0)

    def phase_sum(*phases: str) -> float:
        return sum(c.time_s for c in collectives if c.phase in phases)

    fwd_exposed = phase_sum(comm_mod.FORWARD_FIRST) + exposed_time(phase_sum(comm_mod.FORWARD), forward_s, overlap)
    bwd_exposed = phase_sum(comm_mod.BACKWARD_LAST) + exposed_time(phase_sum(comm_mod.BACKWARD), backward_s, overlap)
    opt_exposed = phase_sum(comm_mod.AFTER_STEP)
    exposed = fwd_exposed + bwd_exposed + opt_exposed
    comm_s = sum(c.time_s for c in collectives)
    # what the GPU does in each phase, and what the host (Python) needs to issue it: a phase takes the
    # longer of the two (the host runs ahead of a busy GPU; an idle GPU waits for the host)
    device = {"forward": forward_s + fwd_bytes / hbm + fwd_exposed,
              "backward": backward_s + (copy_bytes - fwd_bytes) / hbm + bwd_exposed,
              "optimizer": optimizer_s + opt_exposed}
    host = {p: profile.host_s(strategy, p) * model.num_layers for p in device}
    device_s = sum(device.values())  # = compute + memory-bound + optimizer + exposed communication
    step = sum(max(host[p], device[p]) for p in device)

    memory = estimate_memory(model, strategy, shard, micro_batch=micro_batch, seq_len=seq_len,
                             activation_checkpointing=activation_checkpointing,
                             gpu_memory_bytes=topo.gpus[0].memory_bytes or spec.memory_bytes, profile=profile)
    bottleneck = topo.bottleneck_gbps(gpus)
    per_gpu = tokens / step
    return Prediction(
        model_name=model.name, params=model.params, strategy=strategy, gpus=gpus, micro_batch=micro_batch,
        seq_len=seq_len, activation_checkpointing=activation_checkpointing, fabric=fabric,
        shard_group_size=shard_group_size if strategy == "hsdp" else None, step_time_s=step,
        tokens_per_s=per_gpu * n, tokens_per_s_per_gpu=per_gpu,
        time=TimeBreakdown(compute_s, comm_s, exposed, collectives, memory_bound_s, optimizer_s, forward_s, backward_s,
                           host_s=sum(host.values()), host_wait_s=step - device_s),
        memory=memory, fits=fits(memory, profile),
        bottleneck_gbps=None if bottleneck == math.inf else bottleneck,
        islands_spanned=len(topo.islands_spanned(gpus)),
        mfu=model_flops / step / peak, topology=topo.name, profile_fingerprint=profile.fingerprint,
    )
