"""What calibrate and validate measure: training cases and the plans that group them.

Fixed sets; validate's cases never overlap calibrate's.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace

from topowise.models.spec import ModelSpec
from topowise.run import STRATEGY_NAMES, Run, mode_of_flag
from topowise.units import MIB


@dataclass(frozen=True)
class Case:
    """One training run without its GPUs: a model (by name), a strategy, a shape, a fabric."""

    model: str
    strategy: str
    micro_batch: int
    seq_len: int
    fabric: str = "nvlink"
    activation_checkpointing: bool | str = False  # False, True (full) or a mode's name ("selective"), as Run takes
    compile: bool = False
    selective_ac_option: str = "op"  # selective: per op, or every k-th block
    engine: str = "pytorch"  # or "deepspeed" (bench train --engine deepspeed records)
    # the mesh beside data parallelism (bench train --tp, --pp, --cp, --grad-accum, --pp-schedule)
    tp: int = 1
    pp: int = 1
    cp: int = 1
    grad_accum: int = 1
    pp_schedule: str = "1f1b"

    @property
    def has_mesh(self) -> bool:
        return self.tp * self.pp * self.cp > 1

    @property
    def mesh(self) -> dict:
        """The Run keywords of the mesh (what bench train's make_request takes)."""
        return {"tp": self.tp, "pp": self.pp, "cp": self.cp, "grad_accum": self.grad_accum,
                "pp_schedule": self.pp_schedule}

    @property
    def mesh_words(self) -> str:
        """"tp2 pp2 ga2" (the degrees above 1, and the accumulation); "" without a mesh."""
        if not self.has_mesh and self.grad_accum == 1:
            return ""
        words = [f"{name}{value}" for name, value in (("tp", self.tp), ("pp", self.pp), ("cp", self.cp)) if value > 1]
        return " ".join(words + ([f"ga{self.grad_accum}"] if self.grad_accum > 1 else [])
                        + ([self.pp_schedule] if self.pp > 1 and self.pp_schedule != "1f1b" else []))

    def runs_on(self, nproc: int) -> bool:
        """Whether `nproc` processes can run it: the model-parallel degrees must divide them."""
        return nproc % (self.tp * self.pp * self.cp) == 0

    @property
    def _extra(self) -> tuple:
        """What tells apart cases the first keys share: every k-th block against per op, the engine, the mesh."""
        every_k = self.activation_checkpointing == "selective" and self.selective_ac_option != "op"
        return (("every", self.selective_ac_option) if every_k else ()) \
            + ((self.engine,) if self.engine != "pytorch" else ()) \
            + ((("mesh", self.tp, self.pp, self.cp, self.grad_accum, self.pp_schedule),)
               if self.has_mesh or self.grad_accum > 1 else ())

    @property
    def key(self) -> tuple:
        return (self.model, self.strategy, self.micro_batch, self.seq_len, self.fabric, self.activation_checkpointing,
                self.compile) + self._extra

    @property
    def group(self) -> tuple:
        """Cases that differ only in strategy share a group (the ranking check)."""
        return (self.model, self.micro_batch, self.seq_len, self.fabric, self.activation_checkpointing,
                self.compile) + self._extra

    @property
    def checkpointing_words(self) -> str:
        """"" (none), "AC full", "AC per op" or "AC every k" (selective every k-th block)."""
        if self.activation_checkpointing == "selective":
            return "AC per op" if self.selective_ac_option == "op" else f"AC every {self.selective_ac_option}"
        return "AC full" if self.activation_checkpointing else ""

    @property
    def label(self) -> str:
        return self.words()

    def words(self, fabric: bool = True) -> str:
        """The case in words; without the fabric where a table has a column for it."""
        return " ".join(w for w in (f"{self.model} {self.strategy} mb{self.micro_batch} seq{self.seq_len}",
                                    self.fabric if fabric else "", self.checkpointing_words,
                                    "compiled" if self.compile else "",
                                    self.engine if self.engine != "pytorch" else "", self.mesh_words) if w)

    def run(self, model: ModelSpec, gpus: Iterable[int], shard_group_size: int | None = None) -> Run:
        """The case on these GPUs, with `model` the spec its name stands for."""
        return Run(model, tuple(gpus), self.strategy, micro_batch=self.micro_batch, seq_len=self.seq_len,
                   checkpointing=mode_of_flag(self.activation_checkpointing), fabric=self.fabric,
                   shard_group_size=shard_group_size, compile=self.compile,
                   selective_ac_option=self.selective_ac_option, engine=self.engine, **self.mesh)


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

    def to_dict(self) -> dict:
        return dict(asdict(self), cases=[asdict(c) for c in self.cases])


def _grid(models: Iterable[tuple[str, int, int, tuple[str, ...]]], fabrics: Iterable[str]) -> tuple[Case, ...]:
    return tuple(Case(m, s, mb, seq, f) for f in fabrics for (m, mb, seq, strategies) in models for s in strategies)


NON_HSDP = tuple(s for s in STRATEGY_NAMES if s != "hsdp")

# The host's time to issue a step (Python, hooks, launches) does not shrink with the tokens; the GPU's
# does. At 128 tokens the GPU keeps up and bench train's host phase times are the host's own cost
# (benchmarks/host_bound.py: on 2x H200 every strategy of 0.5B-1B models is host-bound there).
HOST_FLOOR_TOKENS = 128

# Tensor and pipeline parallelism where the machine has the GPUs (Case.runs_on): measured under bench train's
# --trace, so that each run carries its exposed communication by mesh dimension and its pipeline's idle time
# (validate compares them with the cost model's, dimension by dimension); calibrate measures them beside its
# data-parallel cases and reports them, the fit leaves them out (its parameters are the data-parallel step's).
# Pipeline cases need an untied model (bench train splits untied models only): llama3.1-8b on 2 stages keeps
# 4B parameters a GPU, about 64 GB of states with AdamW: on 80 GB GPUs at 1024 tokens. Context parallelism is
# priced, not run by bench train yet: no case.
# Calibration's and validation's are different cases, as the rest of the plans are.
GPU_MESH_CALIBRATION = (
    Case("llama3.2-1b", "ddp", 1, 4096, tp=2),
    Case("llama3.1-8b", "ddp", 1, 1024, pp=2, grad_accum=4),
)
GPU_MESH_VALIDATION = (
    Case("llama3.2-1b", "zero3", 1, 4096, tp=2),  # fsdp2 x tp2 from 4 GPUs
    Case("llama3.1-8b", "zero3", 1, 1024, tp=2, pp=2, grad_accum=4),  # from 4 GPUs; x fsdp2 on 8
)
CPU_MESH_CALIBRATION = (Case("tiny", "ddp", 1, 128, tp=2, pp=2, grad_accum=2),)  # 4 processes
CPU_MESH_VALIDATION = (Case("tiny", "ddp", 2, 64, tp=2, pp=2, grad_accum=2),)

# GPU calibration (about three minutes on 2x H200): the comm sweep 1 MiB..1 GiB on the four ops the
# strategies issue, per fabric; two model sizes at 8192 tokens (long enough that the GPU, not the host,
# sets the step of most runs), ddp and zero3 on the small one, every non-hsdp
# strategy on the larger one (zero1's broadcasts and zero2's overlap need a run of their own); then
# both models with every non-hsdp strategy at HOST_FLOOR_TOKENS over NVLink (the host's cost per block).
# The alpha-beta fit takes 8 MiB and up: training moves 25 MiB DDP buckets and 30 MiB..1.5 GiB FSDP
# units, and NCCL's busbw keeps rising to 1 GiB (all_reduce over NVLink on 2x H200: 173 GB/s at 8 MiB,
# 327 GB/s at 1 GiB, research/2026-11-30-h200x2/run2/profile-records/collectives.jsonl), which one
# alpha-beta line cannot follow from 1 MiB (on the 2x H200 sweep: within -11..+13% from 1 MiB, -10..+7% from 8 MiB).
GPU_CALIBRATION = Plan(
    device="cuda", fabrics=("nvlink", "pcie"), comm_ops=("all_reduce", "all_gather", "reduce_scatter", "broadcast"),
    comm_sizes=tuple(MIB * 2**k for k in range(11)), fit_min_bytes=8 * MIB,
    cases=_grid([("qwen2.5-0.5b", 1, 8192, ("ddp", "zero3")),
                 ("llama3.2-1b", 1, 8192, NON_HSDP)], ("nvlink", "pcie"))
    + _grid([(m, 1, HOST_FLOOR_TOKENS, NON_HSDP) for m in ("qwen2.5-0.5b", "llama3.2-1b")], ("nvlink",))
    + GPU_MESH_CALIBRATION,
    warmup=3, steps=5, hbm_passes=("llama3.2-1b", 128256, 8192))

# GPU validation (about three minutes): a model size calibration never ran (3B), a micro-batch it never
# ran (2) and a sequence length it never ran (2048); both fabrics; every strategy; and four cases with
# per-op selective checkpointing (torchtitan's default), which calibration never runs.
GPU_VALIDATION = Plan(
    device="cuda", fabrics=("nvlink", "pcie"), comm_ops=(), comm_sizes=(),
    cases=_grid([("llama3.2-3b", 1, 4096, STRATEGY_NAMES),
                 ("qwen2.5-0.5b", 2, 4096, NON_HSDP)], ("nvlink", "pcie"))
    + _grid([("llama3.2-1b", 2, 2048, ("ddp", "zero2", "zero3"))], ("nvlink",))
    + tuple(Case(m, s, mb, seq, "nvlink", "selective") for m, mb, seq, strategies in (
        ("llama3.2-3b", 1, 4096, ("ddp", "zero3")), ("qwen2.5-0.5b", 2, 4096, ("zero2", "zero3")))
        for s in strategies) + GPU_MESH_VALIDATION,
    warmup=3, steps=6)

# CPU (gloo): the same pipeline, small enough for the tests (seconds of measuring).
CPU_CALIBRATION = Plan(
    device="cpu", fabrics=("nvlink",), comm_ops=("all_reduce", "all_gather", "reduce_scatter", "broadcast"),
    comm_sizes=tuple(64 * 1024 * 4**k for k in range(4)),
    cases=_grid([("tiny", 1, 128, ("ddp", "zero3")), ("tiny", 2, 128, ("ddp",))], ("nvlink",)) + CPU_MESH_CALIBRATION,
    warmup=1, steps=3, comm_iters=5, comm_warmup=2)

CPU_VALIDATION = Plan(
    device="cpu", fabrics=("nvlink",), comm_ops=(), comm_sizes=(),
    cases=_grid([("tiny", 2, 64, ("ddp", "zero2", "zero3"))], ("nvlink",)) + CPU_MESH_VALIDATION,
    warmup=1, steps=3)


# --compile adds compiled twins (calibrate: what the compiled terms are fitted from, each beside the eager
# run of the same case; validate: cases it never ran). Compiling costs about 8 s per launch on top of the
# run (first-step excess on one H200, research/2026-12-01-h200x1/compile), so calibrate --compile
# adds, by that estimate, about a minute and a half to the three minutes (not yet timed).
COMPILED_CALIBRATION = (
    _grid([("llama3.2-1b", 1, 8192, ("ddp", "zero3")), ("qwen2.5-0.5b", 1, 8192, ("ddp",))], ("nvlink",))
    + _grid([("llama3.2-1b", 1, HOST_FLOOR_TOKENS, ("ddp", "zero2", "zero3"))], ("nvlink",)))
COMPILED_VALIDATION = _grid([("llama3.2-3b", 1, 4096, ("ddp", "zero2", "zero3")),
                             ("qwen2.5-0.5b", 2, 4096, ("ddp", "zero3"))], ("nvlink", "pcie"))


def with_compiled(plan: Plan, cases: tuple[Case, ...]) -> Plan:
    return replace(plan, cases=plan.cases + tuple(replace(c, compile=True) for c in cases))


def calibration_plan(device: str, compile: bool = False) -> Plan:
    """The calibration plan; `compile` (GPU only: Inductor on CPU is not what the GPU runs) adds compiled twins."""
    if device != "cuda":
        return CPU_CALIBRATION
    return with_compiled(GPU_CALIBRATION, COMPILED_CALIBRATION) if compile else GPU_CALIBRATION


def validation_plan(device: str, compile: bool = False) -> Plan:
    if device != "cuda":
        return CPU_VALIDATION
    return with_compiled(GPU_VALIDATION, COMPILED_VALIDATION) if compile else GPU_VALIDATION
