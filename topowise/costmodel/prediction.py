"""What `predict` returns: the run, its step time split by where it goes, and its memory."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from topowise.costmodel.comm import CollectiveCost
from topowise.costmodel.memory import MemoryBreakdown
from topowise.run import Run

HOST_BOUND_SHARE = 0.05  # a step whose GPU waits for the host this much of it is called host-bound


@dataclass(frozen=True)
class PhaseCost:
    """One phase of the predicted step (PyTorch and DeepSpeed engines): the GPU's work, the host's time
    to issue it, of the GPU's work the exposed communication, and the GPU's wait for the host
    (max(host - gpu, 0))."""
    phase: str
    gpu_s: float
    host_s: float
    exposed_comm_s: float
    host_wait_s: float

    def to_dict(self) -> dict:
        return asdict(self)


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
    # the step with the host Profile.host_spread faster and slower (step.py); () where there is no host term
    step_range_s: tuple[float, float] | tuple = ()
    # of compute_s, what the output layer's matmuls cost beyond an aligned vocabulary's (step.head_rate)
    misaligned_head_s: float = 0.0
    # per phase (forward, backward, optimizer) where the engine's formula has phases; not in to_dict,
    # so predict --json stays as it was: bench train --trace reads it (topowise.expectations)
    phases: tuple[PhaseCost, ...] = ()

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("phases")
        d["collectives"] = [c.to_dict() for c in self.collectives]
        return d


@dataclass(frozen=True)
class Prediction:
    run: Run  # placed: hsdp's shard group filled in
    topology: str
    step_time_s: float
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    time: TimeBreakdown
    memory: MemoryBreakdown
    fits: bool
    bottleneck_gbps: float | None
    islands_spanned: int
    mfu: float = 0.0
    profile_fingerprint: str = ""
    compile_s: float = 0.0  # compiled: seconds the first step adds, once per launch (not in step_time_s)
    # tp/pp/cp or accumulation (costmodel/parallel.py): degrees, schedule, bubble_s, peak_stage; None otherwise
    mesh: dict | None = None
    # the peak MFU is over: the dense peak of the precision the block GEMMs run in (0: not said, as a profiled model)
    mfu_peak_flops: float = 0.0

    @property
    def host_bound(self) -> bool:
        """The GPU waits for the host (Python issuing work) for more than HOST_BOUND_SHARE of the step."""
        return self.time.host_wait_s > HOST_BOUND_SHARE * self.step_time_s

    @property
    def step_time_range_s(self) -> tuple[float, float]:
        """(fastest, slowest) step the host's launch-to-launch spread allows; the step itself twice when
        the host does not set it."""
        return tuple(self.time.step_range_s) if self.time.step_range_s else (self.step_time_s, self.step_time_s)

    # the run's fields, read where a prediction is reported
    model_name = property(lambda self: self.run.model.name)
    params = property(lambda self: self.run.model.params)
    strategy = property(lambda self: self.run.strategy)
    gpus = property(lambda self: self.run.gpus)
    micro_batch = property(lambda self: self.run.micro_batch)
    seq_len = property(lambda self: self.run.seq_len)
    activation_checkpointing = property(lambda self: self.run.activation_checkpointing)
    fabric = property(lambda self: self.run.fabric)
    shard_group_size = property(lambda self: self.run.shard_group_size)
    engine = property(lambda self: self.run.engine)

    @property
    def mfu_peak_words(self) -> str:
        """"the fp8 dense peak, 1,979 TFLOP/s": what MFU is a share of; "" where not known."""
        if not self.mfu_peak_flops:
            return ""
        return f"the {self.run.precision} dense peak, {self.mfu_peak_flops / 1e12:,.0f} TFLOP/s"

    def kernels_dict(self) -> dict:
        """The kernel settings and the peak MFU is over (in --json where a setting is not its default)."""
        return {"precision": self.run.precision, "fp8_recipe": self.run.fp8_recipe if self.run.precision == "fp8"
                else None, "loss": self.run.loss, "attention": self.run.attention,
                "mfu_peak_flops": self.mfu_peak_flops}

    def to_dict(self) -> dict:
        """predict --json: model{name, params}, step_time_s, tokens_per_s, time{...}, memory{...}, fits, ..."""
        return {
            "model": {"name": self.model_name, "params": self.params},
            "topology": self.topology,
            "strategy": self.strategy,
            "gpus": list(self.gpus),
            "micro_batch": self.micro_batch,
            "seq_len": self.seq_len,
            "activation_checkpointing": self.activation_checkpointing,
            "checkpointing": self.run.checkpointing,
            "selective_ac_option": self.run.selective_ac_option,
            "compile": self.run.compile,
            "compile_s": self.compile_s,
            "fabric": self.fabric,
            "shard_group_size": self.shard_group_size,
            "step_time_s": self.step_time_s,
            "tokens_per_s": self.tokens_per_s,
            "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
            "mfu": self.mfu,
            "host_bound": self.host_bound,
            "step_time_range_s": list(self.step_time_range_s),
            "time": self.time.to_dict(),
            "memory": self.memory.to_dict(),
            "fits": self.fits,
            "bottleneck_gbps": self.bottleneck_gbps,
            "islands_spanned": self.islands_spanned,
            "profile_fingerprint": self.profile_fingerprint,
            "engine": self.engine,
            **({"mesh": self.mesh} if self.mesh is not None else {}),
            **(self.kernels_dict() if self.run.has_kernel_settings else {}),
        }
