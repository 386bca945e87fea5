"""`bench train`, parent side: real training steps of each strategy, one fresh torchrun launch per strategy.

`bench_train` validates nothing itself (`make_request` did, once), launches `train_rank.rank_main` on
every rank through the launcher for one strategy at a time (fresh processes and process group
each, so one failure cannot poison the next), reads what the ranks wrote, appends one JSONL record
per strategy and checks that the losses agree across strategies. What the cost model says of a
case (predicted step time and memory, model FLOPs per token) comes from the caller (`expect`),
computed above this package (topowise.expectations). This module imports no torch; make_request
asks topowise.measure.rank how many GPUs torch sees.

Rank side: topowise.measure.train_rank (the entry, the wrap), topowise.measure.steps (the step loop, the timing).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import math
import os
import re
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from topowise.errors import UsageError
from topowise.measure import gpu_clocks, launcher
from topowise.measure.records import append_record, relative_error, steady_peak_bytes
from topowise.models.spec import ModelSpec, load_model
from topowise.run import (
    ENGINES,
    FABRICS,
    STRATEGIES,
    STRATEGY_NAMES,
    Run,
    check_shard_group_size,
    island_shard_group_size,
    parse_strategies,
)

RANK_ENTRY = "topowise.measure.train_rank:rank_main"
# The strategies `--engine deepspeed` runs here: DeepSpeed's ZeRO stages (hsdp would be ZeRO++ hpZ,
# which the bench does not set up).
DEEPSPEED_STRATEGIES = tuple(n for n, s in STRATEGIES.items() if s.deepspeed_stage and not s.replicated)
DEEPSPEED_INSTALL_HINT = "pip install 'topowise[deepspeed]' (DeepSpeed 0.15 or newer)"

# Losses of strategies that start from the same weights and data agree to within this relative
# difference at every step. bf16 keeps 8 significant bits (unit roundoff 2^-8 = 0.39%); the
# strategies differ in summation order (bucketed all-reduce vs reduce-scatter), in where the
# casts happen (autocast per matmul vs FSDP's bf16 all-gather; an fp32 vs a bf16 residual stream)
# and Adam amplifies early differences a little over the steps. A few bf16 roundings: 2%.
# A wrong wrap (different weights, missing gradient averaging, a stale shard) moves the loss by
# far more than that within a step or two.
LOSS_RTOL = 0.02


@dataclass(frozen=True)
class TrainCase:
    """One strategy's run: the Run, and what only the bench decides. Round-trips through JSON."""

    run: Run
    steps: int = 10
    warmup: int = 3
    device: str = "cuda"
    seed: int = 0
    # Small enough that one AdamW step (about lr per weight, against init std 0.02) does not throw
    # the loss around: at 3e-4 the loss jumped 12.2 -> 14.2 after step 1 on llama3.2-1b and the
    # strategies' bf16 rounding differences grew to 10% by step 8, hiding any real wrapping bug.
    lr: float = 1e-5
    weight_decay: float = 0.1

    def to_dict(self) -> dict:
        return dict(asdict(self), run=self.run.to_dict())

    @classmethod
    def from_dict(cls, data: dict) -> TrainCase:
        return cls(**dict(data, run=Run.from_dict(data["run"])))


@dataclass(frozen=True)
class Expected:
    """What the cost model says of a case before it runs, from the caller (topowise.expectations)."""

    predicted: dict = field(default_factory=dict)  # step_time_s, peak_memory_bytes, ... or {"note": why none}
    flops_per_token: float | None = None  # model FLOPs per token: the MFU numerator


@dataclass(frozen=True)
class TrainRequest:
    """What `bench train` was asked to do, validated."""

    cases: tuple[TrainCase, ...]
    nproc: int  # processes this launch starts (or this node's, inside a job)
    timeout_s: float
    out: str | None
    hsdp_note: str | None
    trace: str | None = None  # the steps under torch.profiler (or nsys): DIR/<strategy>/ per strategy
    nsys: bool = False  # --trace nsys[:DIR]: the ranks run under `nsys profile` instead of torch.profiler
    pin_cpus: bool = False  # each rank's threads on its own slice of the CPUs
    # strategy -> why it is not launched: the memory it would need, with the arithmetic (memory_refusals)
    refused: dict[str, str] = field(default_factory=dict)

    @property
    def spec(self) -> ModelSpec:
        return self.cases[0].run.model


# ------------------------------------------------------------------------------------------------
# Validation and decisions made once (pure functions: tested)


def deepspeed_available() -> bool:
    """Whether `import deepspeed` can work, without importing it (that takes seconds and logs)."""
    import importlib.util

    try:
        return importlib.util.find_spec("deepspeed") is not None
    except (ImportError, ValueError):
        return False


def check_engine(engine: str, strategies: tuple[str, ...]) -> None:
    """UsageError for an unknown engine, a strategy DeepSpeed does not run here, or no DeepSpeed."""
    if engine not in ENGINES:
        raise UsageError(f"unknown engine {engine!r}: choose pytorch (default) or deepspeed")
    if engine == "pytorch":
        return
    others = [s for s in strategies if s not in DEEPSPEED_STRATEGIES]
    if others:
        pytorch_only = " and ".join(s for s in STRATEGY_NAMES if s not in DEEPSPEED_STRATEGIES)
        raise UsageError(f"--engine deepspeed runs {', '.join(DEEPSPEED_STRATEGIES)}, not {', '.join(others)} "
                         f"({pytorch_only} run with --engine pytorch)")
    if not deepspeed_available():
        raise UsageError(f"--engine deepspeed needs DeepSpeed, which is not installed here: {DEEPSPEED_INSTALL_HINT}")


def validate_sizes(spec: ModelSpec, *, seq_len: int, steps: int, warmup: int, nproc: int, timeout_s: float) -> None:
    """What only the bench takes (steps, processes, a timeout, the families it builds); the micro-batch is Run's."""
    # a module:function model without a sequence (vision, recommendation) counts items with --seq-len 1
    least_seq = 1 if spec.family == "callable" else 2
    for flag, value, least in (("--seq-len", seq_len, least_seq), ("--steps", steps, 1), ("--warmup", warmup, 0),
                               ("--nproc", nproc, 1)):
        if value < least:
            raise UsageError(f"{flag} must be at least {least}, not {value}")
    if timeout_s <= 0:
        raise UsageError(f"--timeout must be a positive number of seconds, not {timeout_s:g}")
    if spec.max_positions and seq_len > spec.max_positions:
        raise UsageError(f"{spec.name} has {spec.max_positions} learned positions: use --seq-len "
                         f"{spec.max_positions} or less, not {seq_len}")
    if spec.family not in ("llama", "gpt2", "callable"):
        raise UsageError(f"model family {spec.family!r} is not built by bench train; llama and gpt2 are")


def hsdp_layout(world_size: int, requested: int | None = None,
                islands: tuple[tuple[int, ...], ...] | None = None) -> tuple[int, int, str]:
    """(shard group size, replicas, note). An explicit request wins, then the NVLink islands (the cost
    model's rule, topowise.run), else, with no wiring known (CPU), half the processes when that makes
    two or more groups, so that the replication runs too."""
    if requested is not None:
        check_shard_group_size(requested, world_size)
        shard, why = requested, "from --shard-group-size"
    elif islands:
        shard = island_shard_group_size(islands, world_size)
        why = (f"one shard group per NVLink island of {shard} GPUs" if {len(i) for i in islands} == {shard}
               else f"shard groups of {shard} GPUs, following the NVLink islands")
    elif world_size >= 4 and world_size % 2 == 0:
        shard, why = world_size // 2, "no NVLink islands known: half the processes per shard group"
    else:
        shard, why = world_size, "no NVLink islands known"
    replicas = world_size // shard
    if replicas == 1:
        why += f"; with one shard group of {shard}, hsdp is the same as zero3 (replicate 1)"
    elif shard == 1:
        why += "; with a shard group of 1, hsdp is the same as ddp over FSDP (no sharding)"
    return shard, replicas, why


def make_request(*, model: str, strategies: str, micro_batch: int = 1, seq_len: int = 4096, steps: int = 10,
                 warmup: int = 3, checkpointing: str = "none", selective_ac_option: str = "op", compile: bool = False,
                 fabric: str = "nvlink", device: str | None = None, nproc: int | None = None,
                 shard_group_size: int | None = None, timeout_s: float = 600.0, out: str | None = None,
                 seed: int = 0, lr: float = TrainCase.lr, engine: str = "pytorch", trace: str | None = None,
                 pin_cpus: bool = False, mesh: dict | None = None, check_memory: bool = True) -> TrainRequest:
    """Validate every flag once, with the arithmetic in the message; decide devices and hsdp groups.
    `mesh`: the Run keywords tp, pp, cp, pp_schedule, virtual_stages, grad_accum, sequence_parallel.
    With `check_memory`, a strategy the cost model says cannot fit is not launched (memory_refusals; when none
    fits, `refuse_if_none_fits` says each one's arithmetic)."""
    from topowise.measure.machine import live_islands
    from topowise.measure.rank import cuda_device_count

    names = parse_strategies(strategies)
    check_engine(engine, names)  # a clear error: unknown engine, strategy it lacks, DeepSpeed missing
    spec = load_model(model)
    if fabric not in FABRICS:
        raise UsageError(f"--fabric must be {' or '.join(FABRICS)}, not {fabric!r}")
    launcher.require_torch("bench train")  # before a launch per strategy, each of which would crash
    device = device or ("cuda" if cuda_device_count() > 0 else "cpu")
    if device not in ("cuda", "cpu"):
        raise UsageError(f"--device must be cuda or cpu, not {device!r}")
    if device == "cpu" and fabric == "pcie":
        raise UsageError("--fabric pcie takes NVLink away from NCCL; a CPU run (gloo) has none to take away: "
                         "leave --fabric out with --device cpu")
    if device == "cuda":
        gpus = cuda_device_count()
        if gpus == 0:
            raise UsageError("--device cuda but no CUDA GPU is visible here: use --device cpu (gloo) or a GPU machine")
        nproc = gpus if nproc is None else nproc
        if nproc > gpus and not launcher.in_job():
            raise UsageError(f"--nproc {nproc} asks for more processes than the {gpus} visible GPUs")
    nproc = 2 if nproc is None else nproc
    validate_sizes(spec, seq_len=seq_len, steps=steps, warmup=warmup, nproc=nproc, timeout_s=timeout_s)
    job = launcher.job_size()
    world = job[0] if job else nproc
    mesh = dict(mesh or {})
    check_mesh_on(spec, device, mesh)
    # hsdp's groups split the data-parallel GPUs, those tp x pp x cp leave (Run refuses what does not divide)
    model_parallel = mesh.get("tp", 1) * mesh.get("pp", 1) * mesh.get("cp", 1)
    dp = world // model_parallel if world % model_parallel == 0 else world
    note = None
    shard = None
    if "hsdp" in names:
        islands = live_islands(world) if device == "cuda" and fabric == "nvlink" and dp == world else None
        shard, _replicas, note = hsdp_layout(dp, shard_group_size, islands)
    elif shard_group_size is not None:
        hsdp_layout(dp, shard_group_size)  # still a clear error for a bad value
    cases = tuple(
        TrainCase(run=Run(model=spec, gpus=tuple(range(world)), strategy=name, micro_batch=micro_batch,
                          seq_len=seq_len, compile=compile, fabric=fabric,
                          shard_group_size=shard if STRATEGIES[name].replicated else None, engine=engine,
                          checkpointing=checkpointing, selective_ac_option=selective_ac_option, **mesh),
                  steps=steps, warmup=warmup, device=device, seed=seed, lr=lr)
        for name in names)
    trace, nsys = parse_trace(trace)
    # inside a torchrun/srun job the ranks are running already, and each would read the free memory at its own
    # moment: ranks that decided differently would wait on each other for ever
    refused = memory_refusals(cases, nproc, device) if check_memory and not launcher.in_job() else {}
    return TrainRequest(cases=cases, nproc=nproc, timeout_s=timeout_s, out=out, hsdp_note=note, trace=trace,
                        nsys=nsys, pin_cpus=pin_cpus, refused=refused)


def refuse_if_none_fits(request: TrainRequest) -> None:
    """A UsageError, with each strategy's arithmetic, when memory_refusals refused every case: nothing to launch."""
    if request.refused and len(request.refused) == len(request.cases):
        raise UsageError("no strategy fits this machine's memory, so none is launched: "
                         + "; ".join(f"{name}: {why}" for name, why in request.refused.items())
                         + " (a smaller --seq-len or --micro-batch, more processes with zero3, --tp or --pp; "
                           "--no-memory-check launches anyway)")


# A rank's resident memory besides its model: the interpreter, torch and gloo. 410-430 MiB measured per rank of a
# 4-process CPU run of the tiny model under --trace (torch 2.13; peak_rss_bytes in
# tests/data/records/2026-12-05-cpu/mesh-trace/train.jsonl).
RANK_BASE_BYTES = 450 * 2**20


def rank_bytes(case: TrainCase) -> int | None:
    """The cost model's bytes allocated on the heaviest rank of `case` at its peak (its first steps' extra
    included), or None for what it does not price here (a module:function model, DeepSpeed)."""
    from topowise.costmodel.memory import estimate_memory
    from topowise.costmodel.parallel import rank_memory
    from topowise.costmodel.profile import default_profile

    run = case.run
    if run.model.family == "callable" or run.engine != "pytorch":
        return None
    if run.has_mesh:
        memory, _ = rank_memory(run, run.layer_split, default_profile(), gpu_memory_bytes=0)
        # every rank builds the whole model in fp32 before cutting its stages (model_parallel.build_stages)
        return int(max(memory.allocated_bytes, 4 * run.model.params))
    memory = estimate_memory(run, gpu_memory_bytes=0, profile=default_profile())
    return memory.allocated_bytes + memory.first_steps_extra_bytes


def available_memory_bytes() -> int | None:
    """What this machine can still give its processes: MemAvailable (Linux), else the free pages; None unknown."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def gpu_memory_bytes() -> int | None:
    """One GPU's memory from NVML (no CUDA context in this process), None when it cannot be read."""
    from topowise.measure.machine import live_topology

    topo = live_topology()
    return (topo.gpus[0].memory_bytes or None) if topo is not None and topo.gpus else None


def memory_refusals(cases: tuple[TrainCase, ...], nproc: int, device: str, *, available: int | None = None,
                    gpu_memory: int | None = None) -> dict[str, str]:
    """strategy -> why it is not launched, for each case whose cost-model memory cannot fit. On a CPU the
    ranks on this machine share its memory: nproc x (heaviest rank + RANK_BASE_BYTES) against what is
    available (a CPU run past it is swapped or killed, minutes later); on a GPU the heaviest rank's allocated
    bytes alone (no allocator slack, no CUDA context: a floor) against one GPU's memory, for a mesh run only: a
    data-parallel strategy's out-of-memory on a GPU is raised within seconds and recorded as a result (the
    memory model's calibration rests on such records). What cannot be read refuses nothing."""
    gib = 2**30
    out = {}
    if device == "cpu":
        available = available_memory_bytes() if available is None else available
    else:
        gpu_memory = gpu_memory_bytes() if gpu_memory is None else gpu_memory
    for case in cases:
        need = rank_bytes(case)
        if need is None:
            continue
        if device == "cpu" and available:
            total = nproc * (need + RANK_BASE_BYTES)
            if total > available:
                out[case.run.strategy] = (
                    f"{nproc} ranks x ({need / gib:.2f} GiB estimated for the heaviest rank + "
                    f"{RANK_BASE_BYTES / gib:.2f} GiB interpreter and torch) = {total / gib:.2f} GiB > "
                    f"{available / gib:.2f} GiB available")
        elif device == "cuda" and case.run.has_mesh and gpu_memory and need > gpu_memory:
            out[case.run.strategy] = (f"{need / gib:.2f} GiB estimated for the heaviest rank (allocated, before "
                                      f"allocator slack and the CUDA context) > {gpu_memory / gib:.2f} GiB on one GPU")
    return out


def check_mesh_on(spec: ModelSpec, device: str, mesh: dict) -> None:
    """What bench train's mesh runs (topowise.measure.model_parallel) cannot do, refused before launch; Run
    checks the degrees themselves."""
    tp, pp, cp = mesh.get("tp", 1), mesh.get("pp", 1), mesh.get("cp", 1)
    if cp > 1 and device != "cuda":
        raise UsageError(f"--cp {cp} needs CUDA: context parallelism is ring attention over the flash / efficient / "
                         "cuDNN SDPA kernels, and a CPU (gloo) has only the math kernel")
    if cp > 1:
        raise UsageError(f"--cp {cp}: bench train does not run context parallelism yet (predict and plan price it)")
    grad_accum = mesh.get("grad_accum", 1)
    if pp > 1 and grad_accum < pp:  # torch.distributed.pipelining's schedules refuse fewer (PipelineScheduleSingle)
        raise UsageError(f"--pp {pp} needs at least {pp} micro-batches per step to fill the pipeline, not "
                         f"--grad-accum {grad_accum}: use --grad-accum {pp} or more")
    if pp > 1 and spec.tied_embeddings:
        raise UsageError(f"--pp {pp}: {spec.name} ties its output layer to the embedding, which would sit on the "
                         "first and the last stage; bench train splits untied models only (torchtitan's rule)")
    if tp > 1 and spec.family == "gpt2" and mesh.get("sequence_parallel", True):
        raise UsageError(f"--tp {tp} with sequence parallel: the GPT-2 family's learned positions are added to "
                         "the whole sequence; add --no-sequence-parallel")


NSYS_DEFAULT_DIR = "topowise-nsys"


def parse_trace(trace: str | None) -> tuple[str | None, bool]:
    """--trace DIR (torch.profiler) or nsys / nsys:DIR (Nsight Systems; default folder topowise-nsys):
    (folder, under nsys). A UsageError when nsys is asked for and is not on PATH, or inside a job."""
    import shutil

    if not trace or not (trace == "nsys" or trace.startswith("nsys:")):
        return trace, False
    if shutil.which("nsys") is None:
        raise UsageError("--trace nsys needs Nsight Systems' nsys on PATH, and there is none here: "
                         "--trace DIR writes torch.profiler's timelines instead")
    if launcher.in_job():
        raise UsageError("--trace nsys starts the ranks under nsys itself; inside a torchrun/srun job, run the "
                         "job under nsys, or use --trace DIR")
    return trace.partition(":")[2] or NSYS_DEFAULT_DIR, True


def trace_folder(request: TrainRequest, case: TrainCase) -> str | None:
    """Where a strategy's rank files go: DIR/<strategy>, so strategies do not overwrite each other's."""
    return str(Path(request.trace) / case.run.strategy) if request.trace else None


def is_reporting_rank() -> bool:
    """Inside a job every rank runs the bench; only global rank 0 writes files and prints."""
    return os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")) == "0"


def child_env(fabric: str) -> dict[str, str]:
    """What the ranks get on top of this environment (NCCL_NVLS_ENABLE and friends pass through)."""
    env = {"PYTORCH_CUDA_ALLOC_CONF": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")}
    if fabric == "pcie":
        env["NCCL_P2P_DISABLE"] = "1"  # no NVLink (nor PCIe peer-to-peer): traffic goes through host memory
    return env


# ------------------------------------------------------------------------------------------------
# Running the cases


def bench_train(request: TrainRequest, expect: Callable[[TrainCase], Expected] | None = None,
                on_event: Callable[[str, TrainCase, dict | None], None] | None = None, *,
                entry: str = RANK_ENTRY) -> tuple[list[dict], LossAgreement]:
    """Run every strategy in turn; append each record as it finishes; compare the losses.

    expect(case) gives the cost model's numbers for the record (none without it); entry is the
    rank's "module:function"."""
    records = []
    for case in request.cases:
        if on_event:
            on_event("start", case, None)
        why = request.refused.get(case.run.strategy)
        result = ({"status": "oom", "refused_before_launch": True, "error": f"not launched: {why}"} if why
                  else run_one(case, request, entry))
        if case.run.spec.replicated and request.hsdp_note:
            result = dict(result, note=request.hsdp_note)
        record = make_record(case, result, expect(case) if expect else Expected())
        folder = trace_folder(request, case)
        if folder and is_reporting_rank():
            record["trace_dir"] = folder
            if not request.nsys and record["status"] == "ok":
                from topowise.measure.timeline import write_breakdown

                doc = write_breakdown(folder, record)  # DIR/<strategy>/breakdown.json and .png
                # a mesh run's: exposed communication by mesh dimension per rank, the pipeline's idle time per stage
                record.update({k: doc[k] for k in ("exposed_comm_by_dim_s", "pipeline_bubble") if k in doc})
        if request.out and is_reporting_rank():
            append_record(request.out, record)
        records.append(record)
        if on_event:
            on_event("done", case, record)
    return records, compare_losses(records)


def run_one(case: TrainCase, request: TrainRequest, entry: str = RANK_ENTRY) -> dict:
    """Launch one strategy on fresh processes (or run it in the job we are part of); the rank result."""
    with tempfile.TemporaryDirectory(prefix="topowise-train-") as tmp:
        tmp_path = Path(tmp)
        folder = trace_folder(request, case)
        config = {"case": case.to_dict(), "result_dir": tmp, "timeout_s": request.timeout_s,
                  "self_launched": not launcher.in_job(), "trace": None if request.nsys else folder,
                  "nvtx": request.nsys, "pin_cpus": request.pin_cpus}
        wrap = None
        if request.nsys and folder:
            Path(folder).mkdir(parents=True, exist_ok=True)
            wrap = launcher.nsys_command(str(Path(folder) / "rank"))
        env = child_env(case.run.fabric)
        if launcher.in_job():  # this process is one rank: it reads what it wrote itself
            launcher.launch(entry, config, nproc=request.nproc, env=env)
            me = os.environ.get("RANK", "0")
            failed = tmp_path / f"rank{me}.failed.json"
            return json.loads((failed if failed.is_file() else tmp_path / f"rank{me}.json").read_text())
        log = tmp_path / "log.txt"
        started = time.monotonic()

        def launch_once() -> int:
            return launcher.launch(entry, config, nproc=request.nproc, env=env, timeout_s=request.timeout_s,
                                   log_path=str(log), wrap=wrap)

        # the GPUs' clocks, sampled here while the ranks run, so that their timing is not touched
        with gpu_clocks.ClockSampler() if case.device == "cuda" else contextlib.nullcontext() as clocks:
            rc = launch_once()
            relaunched = rc not in (0, launcher.TIMED_OUT) and len(list(tmp_path.glob("rank*.started"))) < request.nproc
            if relaunched:  # a rank never joined the process group (rendezvous, ports): the launch failed, not the case
                rc = launch_once()
        ok = tmp_path / "rank0.json"
        failures = sorted(tmp_path.glob("rank*.failed.json"))
        killed = killed_ranks(_read(log)) if rc != 0 else {}
        if killed and rc != launcher.TIMED_OUT:  # the others' errors (a closed connection) followed from it
            rank, signal = next(iter(killed.items()))
            return {"status": "error", **rank_place(case.run, rank), "exit_signal": signal, "log_tail": _tail(log),
                    "error": f"rank {rank}{place_words(case.run, rank)} was killed by {signal_words(signal)}"}
        if rc == launcher.TIMED_OUT:
            return {"status": "timeout", "log_tail": _tail(log),
                    "error": f"did not finish within {request.timeout_s:g} s (--timeout); stopped after "
                             f"{time.monotonic() - started:.0f} s"}
        if failures:  # oom on any rank makes the case oom
            found = [json.loads(f.read_text()) for f in failures]
            worst = next((f for f in found if f["status"] == "oom"), found[0])
            place = rank_place(case.run, worst["rank"]) if isinstance(worst.get("rank"), int) else {}
            return dict(worst, **place, log_tail=_tail(log))
        note = {"launch_note": "relaunched once: a rank failed to join the process group"} if relaunched else {}
        if rc == 0 and ok.is_file():
            result = dict(json.loads(ok.read_text()), **note)
            seen = clocks.summary(result.get("gpu_uuids"), result.get("timed_window_unix_s")) if clocks else None
            return dict(result, gpu_clocks=seen) if seen else result
        return {"status": "error", "log_tail": _tail(log), **note,
                "error": f"the ranks exited with status {rc} and left no result (a crash: see log_tail)"}


MESH_DIMS = ("pp", "dp_replicate", "dp_shard", "cp", "tp")  # the mesh's dimensions, outermost first (torchtitan's)


def mesh_coordinates(run: Run, rank: int) -> dict[str, int]:
    """Where global rank `rank` sits in the mesh: init_device_mesh lays the ranks out row-major over MESH_DIMS."""
    shape = (run.pp, run.dp_replicate, run.dp_shard, run.cp, run.tp)
    coords = {}
    for name, size in reversed(list(zip(MESH_DIMS, shape))):
        rank, coords[name] = divmod(rank, size)
    return {name: coords[name] for name in MESH_DIMS}


def rank_place(run: Run, rank: int) -> dict:
    """A failed rank's record fields: the rank, and on a mesh its coordinates and pipeline stages."""
    if not run.has_mesh:
        return {"failed_rank": rank}
    coords = mesh_coordinates(run, rank)
    return {"failed_rank": rank, "failed_mesh": coords, "failed_stages": list(run.layer_split.stages_of(coords["pp"]))}


def place_words(run: Run, rank: int) -> str:
    """' (pipeline stage 1, tp 0)': a rank's place, in words, for a message; '' without a mesh."""
    if not run.has_mesh:
        return ""
    coords = mesh_coordinates(run, rank)
    stages = run.layer_split.stages_of(coords["pp"])
    parts = ([f"pipeline stage{'s' if len(stages) > 1 else ''} {', '.join(map(str, stages))}"] if run.pp > 1 else [])
    parts += [f"{name} {coords[name]}" for name in ("tp", "cp", "dp_shard", "dp_replicate")
              if getattr(run, name) > 1]
    return f" ({', '.join(parts)})" if parts else ""


# torchrun's failure summary, one block per failed rank: "rank : 3 (local_rank: 3)" then "exitcode : -9 (pid: ...)"
_EXIT = re.compile(r"rank\s*:\s*(\d+)[^\n]*\n\s*exitcode\s*:\s*(-?\d+)")
SIGTERM = 15  # what torchrun sends the surviving ranks once one has failed


def killed_ranks(log: str) -> dict[int, int]:
    """rank -> signal, for the ranks a signal ended (torchrun's summary: a negative exit code), other than the
    SIGTERM torchrun itself sends the survivors; in rank order."""
    found = {int(r): -int(code) for r, code in _EXIT.findall(log) if int(code) < 0 and -int(code) != SIGTERM}
    return dict(sorted(found.items()))


def signal_words(signal: int) -> str:
    """A signal in words, with what usually sends it."""
    import signal as signals

    try:
        name = signals.Signals(signal).name
    except ValueError:
        name = f"signal {signal}"
    if signal == 9:
        return f"{name}: likely out of memory (the kernel's OOM killer sends SIGKILL)"
    return name


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _tail(path: Path, lines: int = 15) -> str:
    text = _read(path)
    if not text:
        return ""
    noise = ("W1", "I1", "[W", "*****", "Setting OMP_NUM_THREADS")
    kept = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith(noise)]
    return "\n".join(kept[-lines:])


# ------------------------------------------------------------------------------------------------
# Records


def datasheet_peak(gpu_name: str | None) -> float | None:
    if not gpu_name:
        return None
    from topowise.hardware import gpu_spec

    return gpu_spec(gpu_name).bf16_dense_flops or None


def make_record(case: TrainCase, result: dict, expected: Expected | None = None) -> dict:
    """One JSONL row (the keys docs/bench-train.md lists first, then the rest)."""
    expected = expected or Expected()
    run, spec, world_size = case.run, case.run.model, case.run.num_gpus
    ok = result.get("status") == "ok"
    # a mesh run: the step's sequences (micro-batch x grad_accum x dp) shared by all its GPUs
    tokens = run.global_batch * run.seq_len // world_size if run.has_mesh else run.tokens
    step = result.get("step_time_s") if ok else None
    tps = tokens / step if step else None
    fpt = expected.flops_per_token
    sheet = datasheet_peak(result.get("gpu_name"))
    measured_peak = result.get("measured_peak_flops")
    predicted = dict(expected.predicted)
    if ok and "step_time_s" in predicted:
        predicted["step_time_error"] = relative_error(predicted["step_time_s"], step)
        # the cost model describes a steady-state step, so it is compared with the last timed step's peak
        predicted["peak_memory_error"] = relative_error(
            predicted.get("allocated_bytes", predicted.get("peak_memory_bytes")),
            steady_peak_bytes(result))
    record = {
        "kind": "train",
        "strategy": run.strategy,
        "engine": run.engine,
        "model": spec.name,
        "world_size": world_size,
        "status": result.get("status", "error"),
        "step_time_s": step,
        "tokens_per_s_per_gpu": tps,
        "mfu": fpt * tps / sheet if fpt and tps and sheet else None,
        "peak_memory_bytes": result.get("peak_memory_bytes") if ok else None,
        "steady_peak_memory_bytes": result.get("steady_peak_memory_bytes") if ok else None,
        "step_peak_memory_bytes": result.get("step_peak_memory_bytes") if ok else None,
        "losses": result.get("losses", []) if ok else [],
        "predicted": predicted,
        "mfu_measured_peak": fpt * tps / measured_peak if fpt and tps and measured_peak else None,
        "peak_flops_datasheet": sheet,
        "peak_flops_measured": measured_peak,
        "flops_per_token": fpt,
        "reserved_bytes": result.get("reserved_bytes") if ok else None,
        "step_times_s": result.get("step_times_s", []) if ok else [],
        "params": spec.params,
        # what replay (validate --measured, calibrate --from-records) predicts this run with: the shape
        # itself, so that a config.json may move; and where it came from (a preset's name or the path)
        "model_source": spec.reference,
        "model_spec": spec.to_dict(),
        "micro_batch": run.micro_batch,
        "seq_len": run.seq_len,
        "tokens_per_step_per_gpu": tokens,
        "steps": case.steps,
        "warmup": case.warmup,
        "fabric": run.fabric,
        "device": case.device,
        "activation_checkpointing": run.activation_checkpointing,
        "checkpointing": run.checkpointing,
        "selective_ac_option": run.selective_ac_option,
        "compile": run.compile,
        "gpu_name": result.get("gpu_name"),
        "torch_version": result.get("torch_version"),
        "nccl_version": result.get("nccl_version"),
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    if run.has_mesh:  # the degrees asked for; what each rank ran (stage, mesh coordinates, time, peak) is "ranks"
        record.update(tp=run.tp, pp=run.pp, cp=run.cp, dp=run.dp, grad_accum=run.grad_accum)
        peaks = [r for r in result.get("ranks") or [] if r.get("peak_memory_bytes") is not None]
        if peaks:  # the predicted peak is the heaviest stage's: it is compared with the largest rank, not the mean
            record["peak_memory_rank"] = max(peaks, key=lambda r: r["peak_memory_bytes"])["rank"]
    if run.spec.replicated:
        record["shard_group_size"] = result.get("shard_group_size", run.shard_group_size)
        record["replicas"] = result.get("replicas", world_size // (run.shard_group_size or world_size))
    for key in ("error", "oom_requested_bytes", "refused_before_launch", "failed_rank", "failed_mesh",
                "failed_stages", "exit_signal", "log_tail", "note", "launch_note",
                "deepspeed_version", "deepspeed_config", "nodes", "ranks_per_node", "scope", "host_phase_s",
                "warmup_step_times_s", "host_index", "host_index_cpu", "gpu_clocks",
                # where and when the timed steps ran, so that a parent that sampled the clocks can add them
                "gpu_uuids", "timed_window_unix_s",
                # a mesh run's (topowise.measure.model_parallel.train_mesh)
                "mesh", "pp_schedule", "layer_split", "sequence_parallel", "ranks", "process_groups"):
        if result.get(key) is not None:
            record[key] = result[key]
    return record


# ------------------------------------------------------------------------------------------------
# The loss check


@dataclass(frozen=True)
class LossAgreement:
    agree: bool | None  # None: fewer than two strategies finished, so nothing was compared
    reference: str | None
    compared: tuple[str, ...]
    max_rel_diff: float
    diverging: tuple[str, ...]
    rtol: float

    def message(self) -> str:
        if not self.compared:
            return "losses: not compared (no strategy finished)"
        if len(self.compared) == 1:
            return f"losses: not compared (only {self.compared[0]} finished; the check needs two strategies)"
        worst = f"max relative difference {100 * self.max_rel_diff:.2f}%"
        if self.agree:
            return f"losses agree across {', '.join(self.compared)}: {worst} (tolerance {100 * self.rtol:g}%)"
        return (f"losses DIVERGE: {', '.join(self.diverging)} differ from {self.reference} by more than "
                f"{100 * self.rtol:g}% ({worst}): a wrong wrap or different starting weights")

    def to_dict(self) -> dict:
        return dict(asdict(self), message=self.message())


def _max_rel_diff(a: list[float], b: list[float]) -> float:
    if len(a) != len(b) or not all(map(math.isfinite, a + b)):
        return math.inf
    return max((abs(x - y) / max(abs(y), 1e-12) for x, y in zip(a, b)), default=0.0)


def compare_losses(records: list[dict], rtol: float = LOSS_RTOL) -> LossAgreement:
    """Step-by-step relative difference of every finished strategy's losses against a reference.

    The reference is the strategy that agrees with the most others (the first one on a tie), so a
    single wrong strategy is the one named, even when it ran first.
    """
    done = [r for r in records if r.get("status") == "ok" and r.get("losses")]
    if len(done) < 2:
        return LossAgreement(agree=None, reference=None, compared=tuple(r["strategy"] for r in done), max_rel_diff=0.0,
                             diverging=(), rtol=rtol)
    diffs = {(i, j): _max_rel_diff(a["losses"], b["losses"]) for i, a in enumerate(done) for j, b in enumerate(done)}
    votes = [sum(diffs[i, j] <= rtol for j in range(len(done)) if j != i) for i in range(len(done))]
    ref = votes.index(max(votes))
    others = [j for j in range(len(done)) if j != ref]
    worst = max((diffs[j, ref] for j in others), default=0.0)
    diverging = tuple(done[j]["strategy"] for j in others if diffs[j, ref] > rtol)
    return LossAgreement(agree=not diverging, reference=done[ref]["strategy"],
                         compared=tuple(r["strategy"] for r in done), max_rel_diff=worst, diverging=diverging,
                         rtol=rtol)

