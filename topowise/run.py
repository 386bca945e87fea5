"""The one description of a training run, and the strategy registry.

Every stage takes a `Run`: `predict`, the planner, calibrate and validate, bench train, the study.
It is validated once, when it is built, and its errors carry the arithmetic (the way torchtitan's
ParallelDims checks its degrees). What needs the wiring (which GPUs exist, the HSDP shard group an
NVLink island suggests) is settled by `place(run, topology)`.

    Run(model, gpus, strategy, micro_batch, seq_len, compile, fabric, shard_group_size, engine,
        checkpointing, selective_ac_option, tp, pp, cp, ep, sequence_parallel, pp_schedule, virtual_stages,
        grad_accum, pp_split, precision, fp8_recipe, loss, attention)

The mesh (docs/parallelism.md): tp, cp, pp and the data-parallel rest, dp = GPUs / (tp x pp x cp), which
the strategy splits as today: ddp/zero1-3 shard over all of dp (dp_shard = dp), hsdp over its shard
group (dp_replicate = dp / shard group). `sequence_parallel` defaults to True: torchtitan's Llama TP plan
always shards the norms' activations (SequenceParallel), it has no switch; Megatron's --sequence-parallel
is off unless given. `grad_accum` is micro-batches per optimizer step (the pipeline's m with pp > 1).
`ep` is reserved: refused unless 1.

The kernels (docs/costmodel.md, "Precision, loss and attention kernels"): `precision` "bf16" or "fp8" (the block
Linears' GEMMs in float8 as torchao's Float8Linear runs them under torchtitan, `fp8_recipe` "tensorwise" or
"rowwise", torchtitan's names; the output layer, attention, norms and embeddings stay bf16); `loss` "plain" (the
fp32 cross-entropy over the whole logits, what every prediction assumed before the flag), "chunked" (the fp32 work
a chunk of tokens at a time) or "fused" (Liger's fused linear cross-entropy: no whole logits); `attention` "flash"
(fused, the default) or "unfused" (the S x S scores materialised, as Megatron-LM ran in 2021). A run at the
defaults (KERNEL_DEFAULTS) is the run it was before these settings, and its JSON leaves them out.

Activation checkpointing has torchtitan's three modes (its `activation_checkpoint.mode`):
"none"; "full", every block recomputed in the backward; "selective", with `selective_ac_option`
"op" (per op, inside every block: the outputs of the matmuls and of attention are kept, every
second matmul and the cheap ops are recomputed; torchtitan's policy) or an integer k (every k-th
block fully recomputed, the others keep everything). `activation_checkpointing`, the flag that
predates the modes, is a property (True when anything is recomputed) and a JSON key; JSON that has
the flag alone is read by `Run.from_dict` (True: "full"; a mode's name: that mode), the one place it is
migrated. The DeepSpeed engine's cost model (costmodel/deepspeed.py) predicts a selective run as a full one.
"""

from __future__ import annotations

import math
import sys
from dataclasses import asdict, dataclass, fields, replace

from topowise.errors import UsageError
from topowise.models.spec import ModelSpec
from topowise.parallel_dims import SCHEDULES, split_layers, validate_schedule, validate_shapes


@dataclass(frozen=True)
class Strategy:
    """What a strategy shards and how PyTorch (and DeepSpeed) run it.

    sharded: the training state split across the shard group, in the ZeRO paper's terms (Rajbhandari
    et al. 2020, arXiv 1910.02054): "optimizer", "gradients", "parameters".
    fsdp: FSDP2 `fully_shard` runs it (fp32 parameters sharded at rest, gathered in bf16); otherwise
    DDP's family, with fp32 weights under torch.autocast(bf16).
    reshard_after_forward: FSDP2's flag; parameters are gathered again in backward.
    replicated: a 2-D mesh (replicate, shard): shard groups, each replicated across the others.
    deepspeed_stage: the ZeRO stage DeepSpeed runs it as (hsdp: ZeRO-3 with ZeRO++ hpZ); None: none.
    """

    name: str
    sharded: tuple[str, ...]
    fsdp: bool
    reshard_after_forward: bool
    replicated: bool
    deepspeed_stage: int | None
    summary: str

    @property
    def autocast(self) -> bool:
        """DDP and ZeRO-1 keep fp32 weights and compute under autocast; FSDP2 casts in its all-gather."""
        return not self.fsdp


STRATEGIES: dict[str, Strategy] = {s.name: s for s in (
    Strategy(name="ddp", sharded=(), fsdp=False, reshard_after_forward=False, replicated=False,
             deepspeed_stage=None, summary="a full replica per GPU, one all-reduce of the gradients"),
    Strategy(name="zero1", sharded=("optimizer",), fsdp=False, reshard_after_forward=False, replicated=False,
             deepspeed_stage=1, summary="DDP with the optimizer states sharded (ZeroRedundancyOptimizer)"),
    Strategy(name="zero2", sharded=("optimizer", "gradients"), fsdp=True, reshard_after_forward=False,
             replicated=False, deepspeed_stage=2, summary="FSDP2, parameters kept gathered from forward to backward"),
    Strategy(name="zero3", sharded=("optimizer", "gradients", "parameters"), fsdp=True, reshard_after_forward=True,
             replicated=False, deepspeed_stage=3, summary="FSDP2, parameters gathered again in backward"),
    Strategy(name="hsdp", sharded=("optimizer", "gradients", "parameters"), fsdp=True, reshard_after_forward=True,
             replicated=True, deepspeed_stage=3, summary="FSDP2 inside each shard group, replicas across groups"),
)}
STRATEGY_NAMES = tuple(STRATEGIES)
ALIASES = {"fsdp": "zero3"}
FABRICS = ("nvlink", "pcie")  # pcie: as if NVLink were not there
ENGINES = ("pytorch", "deepspeed")
CHECKPOINTING = ("none", "selective", "full")  # torchtitan's activation_checkpoint.mode values
# The phases of a training step the cost model and bench train's host timing both split a step into
STEP_PHASES = ("forward", "backward", "optimizer")
# The mesh's settings and their defaults: a run at these is the data-parallel run it was before the mesh
# (its JSON leaves them out, so records and plans read as they did)
MESH_DEFAULTS = {"tp": 1, "pp": 1, "cp": 1, "ep": 1, "sequence_parallel": True, "pp_schedule": "1f1b",
                 "virtual_stages": 1, "grad_accum": 1, "pp_split": "balanced"}
KERNEL_DEFAULTS = {"precision": "bf16", "fp8_recipe": "tensorwise", "loss": "plain", "attention": "flash"}
PRECISIONS = ("bf16", "fp8")
FP8_RECIPES = ("tensorwise", "rowwise")  # torchtitan's float8 recipe names (torchao Float8LinearConfig recipes)
LOSSES = ("plain", "chunked", "fused")
ATTENTIONS = ("flash", "unfused")
PP_SPLITS = ("balanced", "even")  # torchtitan's split (embedding and output count as a layer each); Megatron's


def normalize_strategy(name: str) -> str:
    key = ALIASES.get(str(name).strip().lower(), str(name).strip().lower())
    if key not in STRATEGIES:
        raise UsageError(f"unknown strategy {name!r}; valid strategies: {', '.join(STRATEGY_NAMES)} (fsdp = zero3)")
    return key


def parse_strategies(text: str) -> tuple[str, ...]:
    """A comma-separated list of strategies ("ddp,fsdp"), aliases resolved, duplicates dropped."""
    names = [normalize_strategy(s) for s in str(text).split(",") if s.strip()]
    if not names:
        raise UsageError(f"--strategies is empty: give one or more of {', '.join(STRATEGY_NAMES)}")
    return tuple(dict.fromkeys(names))


# The longest sequence topowise predicts. One sequence sits on one GPU here (context parallelism is
# not modelled), and at such lengths attention is nearly all of the work: MFU, which counts the full
# T x T attention square (flops.py, PaLM) while the GPU runs the causal half, climbs towards
# compute_efficiency x 12/7 = 1.03 with the default profile; at 2^20 tokens llama3.2-3b is at 100.5%.
MAX_SEQ_LEN = 2**19
# How far past its published context a rotary model is taken, with a warning: the largest rope
# scaling factor in the presets' own configs (Llama 3.1: 8192 -> 131072 tokens, factor 8).
ROPE_STRETCH = 8
# Typo catchers: counts no real job reaches, so that 99999999999999999999 is refused, not predicted.
# Sequences (or samples) per GPU per step: published runs stay in the thousands (recommendation models' samples)
# or under 100 (language models' sequences).
MAX_MICRO_BATCH = 65_536
# Micro-batches per optimizer step: 4x the planner's limit of the practical (planner/regions.py, 4,096); a
# pipeline's schedule is replayed micro-batch by micro-batch, so the bound also keeps a prediction in seconds.
MAX_GRAD_ACCUM = 16_384
_warned_context: set[tuple[str, int]] = set()


def check_seq_len(model: ModelSpec, seq_len: int) -> None:
    """Refuse a sequence the model cannot take: past learned positions, past ROPE_STRETCH x a rotary
    model's context, past MAX_SEQ_LEN. Past a rotary model's context: one warning on stderr per model."""
    if model.max_positions and seq_len > model.max_positions:
        raise UsageError(f"{model.name} has {model.max_positions} learned positions: use --seq-len "
                         f"{model.max_positions} or less, not {seq_len}")
    context = model.context_length
    limit = min(MAX_SEQ_LEN, ROPE_STRETCH * context) if context else MAX_SEQ_LEN
    if seq_len > limit:
        why = (f"{ROPE_STRETCH}x {model.name}'s context of {context:,} tokens (max_position_embeddings)"
               if limit < MAX_SEQ_LEN else
               f"{MAX_SEQ_LEN:,} tokens, the longest sequence topowise predicts (one sequence per GPU)")
        raise UsageError(f"--seq-len {seq_len:,} is more than {why}; give --seq-len {limit} or less")
    if context and seq_len > context and (model.name, context) not in _warned_context:
        _warned_context.add((model.name, context))
        sys.stderr.write(f"topowise: warning: --seq-len {seq_len:,} is past {model.name}'s context of {context:,} "
                         "tokens: its rotary positions are stretched beyond what it was trained on\n")


def normalize_checkpointing(mode, option="op") -> tuple[str, str]:
    """(mode, selective option) checked: mode one of CHECKPOINTING, option "op" or a positive integer
    (every k-th block; 1 is "full"). The option is "op" for the modes that take none."""
    mode = str(mode).strip().lower()
    if mode not in CHECKPOINTING:
        raise UsageError(f"unknown activation checkpointing mode {mode!r}; valid: {', '.join(CHECKPOINTING)}")
    option = str(option).strip().lower()
    if option != "op":
        try:
            every = int(option)
        except ValueError:
            every = 0
        if every < 1:
            raise UsageError(f"selective checkpointing option {option!r}: give \"op\" (per op) or a positive "
                             "integer k (every k-th block)")
        option = str(every)
        if mode == "selective" and every == 1:  # every block: the same as full
            mode = "full"
    return mode, (option if mode == "selective" else "op")


def check_shard_group_size(size: int, num_gpus: int) -> None:
    if size < 1 or num_gpus % size:
        divisors = [d for d in range(1, num_gpus + 1) if num_gpus % d == 0]
        raise UsageError(f"hsdp shard group size {size} does not divide {num_gpus} GPUs "
                         f"({num_gpus} % {size} = {num_gpus % size if size >= 1 else 'undefined'}); "
                         f"choose one of {', '.join(map(str, divisors))}")


def checkpoint_words(mode: str, selective_ac_option: str = "op") -> str:
    """A checkpointing mode for people: "none", "full", "selective (per op)", "selective (every 2nd block)"."""
    if mode != "selective":
        return mode
    if selective_ac_option == "op":
        return "selective (per op)"
    k = int(selective_ac_option)
    nth = {2: "2nd", 3: "3rd"}.get(k, f"{k}th")
    return f"selective (every {nth} block)"


@dataclass(frozen=True)
class Run:
    """One training run: which model, on which GPUs, how it is split, one micro-batch per step."""

    model: ModelSpec
    gpus: tuple[int, ...]
    strategy: str
    micro_batch: int = 1
    seq_len: int = 4096
    compile: bool = False  # torch.compile of each block (bench train --compile)
    fabric: str = "nvlink"
    shard_group_size: int | None = None  # hsdp only; None until place() gives the island's size
    engine: str = "pytorch"
    checkpointing: str = "none"  # none | selective | full (see the module docstring)
    selective_ac_option: str = "op"  # selective: "op" (per op) or k (every k-th block)
    tp: int = 1  # tensor-parallel degree (innermost: inside an NVLink island)
    pp: int = 1  # pipeline-parallel degree (stages; outermost)
    cp: int = 1  # context-parallel degree (the sequence over cp GPUs, ring attention)
    ep: int = 1  # expert parallelism: reserved, refused unless 1
    sequence_parallel: bool = True  # with tp > 1 (torchtitan's Llama plan always; Megatron's --sequence-parallel)
    pp_schedule: str = "1f1b"  # 1f1b | interleaved-1f1b | zb-h1 (costmodel/pipeline.py)
    virtual_stages: int = 1  # model chunks per pipeline rank (interleaved-1f1b)
    grad_accum: int = 1  # micro-batches per optimizer step
    pp_split: str = "balanced"  # layers over stages: "balanced" (torchtitan's default) or "even" (Megatron's)
    precision: str = "bf16"  # the block Linears' GEMMs: bf16 | fp8
    fp8_recipe: str = "tensorwise"  # with fp8: tensorwise | rowwise (torchtitan's float8 recipe_name)
    loss: str = "plain"  # cross-entropy: plain (fp32 over all logits) | chunked | fused (Liger's linear + loss)
    attention: str = "flash"  # flash (fused kernel) | unfused (S x S scores in memory)

    def __post_init__(self) -> None:
        # normalise in place (frozen): an alias becomes its strategy, a list of GPUs a tuple
        object.__setattr__(self, "strategy", normalize_strategy(self.strategy))
        object.__setattr__(self, "gpus", tuple(map(int, self.gpus)))
        mode, option = normalize_checkpointing(self.checkpointing, self.selective_ac_option)
        object.__setattr__(self, "checkpointing", mode)
        object.__setattr__(self, "selective_ac_option", option)
        if isinstance(self.micro_batch, bool) or not isinstance(self.micro_batch, int) or self.micro_batch < 1:
            raise UsageError(f"--micro-batch must be at least 1, not {self.micro_batch!r}")
        if self.micro_batch > MAX_MICRO_BATCH:
            raise UsageError(f"--micro-batch {self.micro_batch:,}: give at most {MAX_MICRO_BATCH:,} sequences per GPU "
                             "(published runs stay in the thousands; a count past it is a typo)")
        if self.seq_len < 1:
            raise UsageError(f"sequence length must be a positive number of tokens, not {self.seq_len}")
        check_seq_len(self.model, self.seq_len)
        if self.fabric not in FABRICS:
            raise UsageError(f"unknown fabric {self.fabric!r}; valid: {', '.join(FABRICS)}")
        if self.engine not in ENGINES:
            raise UsageError(f"unknown engine {self.engine!r}; valid: {', '.join(ENGINES)}")
        if self.engine == "deepspeed" and self.spec.deepspeed_stage is None:
            runs = ", ".join(s for s, spec in STRATEGIES.items() if spec.deepspeed_stage)
            raise UsageError(f"--engine deepspeed runs {runs}, not {self.strategy} (--engine pytorch runs it)")
        if not self.gpus:
            raise UsageError("no GPUs chosen: give --gpus or --num-gpus")
        if len(set(self.gpus)) != len(self.gpus):
            raise UsageError(f"GPU list {list(self.gpus)} names a GPU twice")
        if min(self.gpus) < 0:
            raise UsageError(f"GPU list {list(self.gpus)} names GPU {min(self.gpus)}: GPUs are numbered from 0")
        self._check_mesh()
        self._check_kernels()
        if self.shard_group_size is not None:
            if not self.spec.replicated:
                raise UsageError(f"a shard group size applies to hsdp, not {self.strategy}")
            check_shard_group_size(self.shard_group_size, self.dp)

    def _check_mesh(self) -> None:
        """The degrees multiply to the GPU count, heads and KV heads divide by tp, the sequence by cp (2 cp
        chunks for load-balanced causal CP), the layers over pp x virtual stages; each error with its arithmetic."""
        for name in ("tp", "pp", "cp", "ep", "virtual_stages", "grad_accum"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise UsageError(f"{name.replace('_', ' ')} must be a whole number of at least 1, not {value!r}")
        if self.ep != 1:
            raise UsageError(f"expert parallelism is not modelled: give ep 1, not {self.ep}")
        if self.grad_accum > MAX_GRAD_ACCUM:
            raise UsageError(f"--grad-accum {self.grad_accum:,}: give at most {MAX_GRAD_ACCUM:,} micro-batches per "
                             "optimizer step (a count past it is a typo)")
        layers = max(1, self.model.num_layers)
        if self.virtual_stages > layers:  # a model chunk holds at least one layer
            raise UsageError(f"--virtual-stages {self.virtual_stages:,}: give at most {layers}, {self.model.name}'s "
                             "layer count (each model chunk holds at least one layer)")
        object.__setattr__(self, "sequence_parallel", bool(self.sequence_parallel))
        schedule = str(self.pp_schedule).strip().lower()
        if schedule not in SCHEDULES:
            raise UsageError(f"unknown pipeline schedule {self.pp_schedule!r}; choose one of {', '.join(SCHEDULES)}")
        object.__setattr__(self, "pp_schedule", schedule)
        model_parallel = self.tp * self.pp * self.cp
        if self.num_gpus % model_parallel:
            raise UsageError(f"{self.num_gpus} GPUs do not divide by tp {self.tp} x pp {self.pp} x cp {self.cp} = "
                             f"{model_parallel} (they leave {self.num_gpus % model_parallel}); the data-parallel "
                             "degree would not be whole")
        if not self.has_mesh:
            return
        if self.model.family == "callable":
            raise UsageError("a module:function model is predicted from its one-GPU profile: tp, pp and cp must be 1")
        if self.engine != "pytorch":
            raise UsageError(f"tensor, pipeline and context parallelism are modelled for --engine pytorch "
                             f"(torchtitan, Megatron-LM), not {self.engine}")
        validate_shapes(heads=self.model.num_heads, kv_heads=self.model.num_kv_heads, seq=self.seq_len, tp=self.tp,
                        cp=self.cp, sp=self.sequence_parallel and self.tp > 1)
        if self.pp == 1 and (self.virtual_stages != 1 or self.pp_schedule != "1f1b"):
            raise UsageError(f"a pipeline schedule and virtual stages need pp > 1 (pp is 1; schedule "
                             f"{self.pp_schedule}, virtual stages {self.virtual_stages})")
        validate_schedule(self.pp_schedule, self.pp, self.grad_accum, self.virtual_stages)
        if self.pp_split not in PP_SPLITS:
            raise UsageError(f"unknown layer split {self.pp_split!r}; choose one of {', '.join(PP_SPLITS)}")
        _ = self.layer_split  # refuses too few layers (or an uneven even split), with the sums

    def _check_kernels(self) -> None:
        """precision, fp8 recipe, loss and attention: known names, and modelled for this engine and model."""
        for name, valid in (("precision", PRECISIONS), ("fp8_recipe", FP8_RECIPES), ("loss", LOSSES),
                            ("attention", ATTENTIONS)):
            value = str(getattr(self, name)).strip().lower()
            if value not in valid:
                raise UsageError(f"unknown {name.replace('_', ' ')} {getattr(self, name)!r}; choose one of "
                                 f"{', '.join(valid)}")
            object.__setattr__(self, name, value)
        if self.precision != "fp8" and self.fp8_recipe != KERNEL_DEFAULTS["fp8_recipe"]:
            raise UsageError(f"an fp8 recipe ({self.fp8_recipe}) applies to precision fp8, not {self.precision}")
        changed = [f"{k} {getattr(self, k)}" for k, v in KERNEL_DEFAULTS.items() if getattr(self, k) != v]
        if changed and self.engine != "pytorch":
            raise UsageError(f"{', '.join(changed)}: modelled for --engine pytorch (torchtitan, torch), not "
                             f"{self.engine}")
        if changed and self.model.family == "callable":
            raise UsageError(f"{', '.join(changed)}: a module:function model is predicted from its measured profile, "
                             "which fixes its kernels; leave these at their defaults")

    @property
    def has_kernel_settings(self) -> bool:
        """Any of precision, loss, attention away from KERNEL_DEFAULTS."""
        return any(getattr(self, k) != v for k, v in KERNEL_DEFAULTS.items())

    @property
    def layer_split(self):
        """Transformer layers per virtual stage (parallel_dims.split_layers)."""
        return split_layers(self.model.num_layers, self.pp, self.virtual_stages, even=self.pp_split == "even")

    @property
    def has_mesh(self) -> bool:
        """tp, pp or cp above 1: predicted by costmodel/parallel.py, not the data-parallel formulas."""
        return self.tp * self.pp * self.cp > 1

    @property
    def dp(self) -> int:
        """Data-parallel degree: the GPUs tp x pp x cp leave."""
        return self.num_gpus // (self.tp * self.pp * self.cp)

    @property
    def dp_shard(self) -> int:
        """GPUs of the data-parallel dimension the state is sharded over (torchtitan's dp_shard): the shard group
        for hsdp, all of dp for zero1-3, 1 for ddp."""
        if not self.spec.sharded:
            return 1
        if self.spec.replicated:
            if self.shard_group_size is None:
                raise ValueError("hsdp's shard group is unknown until place(run, topology)")
            return self.shard_group_size
        return self.dp

    @property
    def dp_replicate(self) -> int:
        return self.dp // self.dp_shard

    @property
    def global_batch(self) -> int:
        """Sequences per optimizer step: micro-batch x accumulation x data-parallel degree."""
        return self.micro_batch * self.grad_accum * self.dp

    @property
    def activation_checkpointing(self) -> bool:
        """Anything recomputed (selective or full): the flag records and plans carried before the modes."""
        return self.checkpointing != "none"

    @property
    def per_op_checkpointing(self) -> bool:
        """Selective checkpointing per op (torchtitan's default), as against every k-th block."""
        return self.checkpointing == "selective" and self.selective_ac_option == "op"

    @property
    def checkpoint_words(self) -> str:
        return checkpoint_words(self.checkpointing, self.selective_ac_option)

    @property
    def spec(self) -> Strategy:
        return STRATEGIES[self.strategy]

    @property
    def num_gpus(self) -> int:
        return len(self.gpus)

    @property
    def tokens(self) -> int:
        """Tokens per GPU per step."""
        return self.micro_batch * self.seq_len

    @property
    def shard_size(self) -> int:
        """GPUs a sharded state is split over: the shard group for hsdp, every data-parallel GPU for zero1-3 (x cp:
        torchtitan's fsdp dimension is dp_shard x cp), 1 for ddp."""
        return self.dp_shard * self.cp if self.spec.sharded else 1

    def to_dict(self) -> dict:
        """Every field, the model as its shape; `activation_checkpointing` too, after the sequence (the key
        JSON had before the modes). The mesh's settings only when one differs from MESH_DEFAULTS."""
        data = dict(asdict(self), model=self.model.to_dict(), gpus=list(self.gpus))
        if all(data[k] == v for k, v in MESH_DEFAULTS.items()):
            for k in MESH_DEFAULTS:
                del data[k]
        for k, v in KERNEL_DEFAULTS.items():  # each left out at its default: records and plans read as before
            if data[k] == v:
                del data[k]
        at = list(data).index("seq_len") + 1
        items = list(data.items())
        return dict([*items[:at], ("activation_checkpointing", self.activation_checkpointing), *items[at:]])

    @classmethod
    def from_dict(cls, data: dict) -> Run:
        """A run from its JSON (keys that are no field of Run are left out: a plan row's outcome, say). JSON
        written before the checkpointing modes has the flag alone: True reads as "full", a mode's name as it."""
        given = {f.name: data[f.name] for f in fields(cls) if f.name in data}
        given["checkpointing"] = checkpointing_of(data)
        return cls(**dict(given, model=ModelSpec.from_dict(data["model"]), gpus=tuple(data["gpus"])))


def checkpointing_of(data: dict) -> str:
    """The checkpointing mode of a run's JSON: "checkpointing", else what the flag that predates it stands for
    (mode_of_flag); both given must agree."""
    mode = str(data.get("checkpointing") or "none").strip().lower()
    flag = data.get("activation_checkpointing", False)
    if mode == "none":
        return mode_of_flag(flag)
    if isinstance(flag, str) and mode_of_flag(flag) != mode:
        raise UsageError(f"activation checkpointing asked for as both {flag!r} and {mode!r}: give one mode")
    return mode


def mode_of_flag(flag: bool | str) -> str:
    """The mode the flag that predates the modes stands for: True "full", False "none", a mode's name itself."""
    if isinstance(flag, str):
        return flag.strip().lower()
    return "full" if flag else "none"


def island_shard_group_size(islands, num_gpus: int) -> int:
    """hsdp's default shard group over `num_gpus` GPUs lying in `islands` (their NVLink islands): all of
    them when they share one island, else the smallest island's size reduced to divide the GPU count
    (gcd), so that groups follow islands."""
    if len(islands) <= 1:
        return num_gpus
    return math.gcd(num_gpus, min(len(isl) for isl in islands))


def default_shard_group_size(topology, gpus: tuple[int, ...]) -> int:
    return island_shard_group_size(topology.islands_spanned(gpus), len(gpus))


def place(run: Run, topology) -> Run:
    """The run on `topology`: every GPU must exist there; hsdp's shard group defaults to the NVLink
    island (from the real wiring, so a pcie what-if keeps the same layout)."""
    if hasattr(topology, "check_gpus"):  # a cluster: its hundreds of thousands of GPUs at once
        topology.check_gpus(run.gpus)
    else:
        for g in run.gpus:
            topology.gpu(g)  # UsageError for a GPU the topology lacks
    if run.spec.replicated and run.shard_group_size is None:
        if run.has_mesh:  # the island's room beside tp x cp, else (tp x cp fill it) every data-parallel GPU
            room = default_shard_group_size(topology, run.gpus) // (run.tp * run.cp)
            return replace(run, shard_group_size=math.gcd(run.dp, room) if room > 1 else run.dp)
        return replace(run, shard_group_size=default_shard_group_size(topology, run.gpus))
    return run
