"""`bench comm`, parent side: what to measure, the launch, and reading back what rank 0 wrote.

The arguments become a `CommConfig` (plain values, JSON): the ops, the size sweep, the dtype, and the
expected busbw of every case, which the caller computes (topowise.expectations) because this package
does not know the cost model. `run_comm` starts `collectives.rank_main` on every rank through the
launcher (or calls it in this process when it is already one rank of a job), follows rank 0's
state file for progress and for the case a failed run was in, and returns rank 0's result: the
records, the pair matrix, the transport NCCL chose. Nothing here imports torch.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace

from topowise.errors import UsageError
from topowise.measure import launcher
from topowise.units import GIB, KIB, MIB, busbw_factor

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "sendrecv")
DEFAULT_OPS = OPS
OP_ALIASES = {
    "allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter",
    "alltoall": "all_to_all", "all2all": "all_to_all", "bcast": "broadcast", "send_recv": "sendrecv",
    "p2p": "sendrecv",
}
DTYPES = {"float32": 4, "bfloat16": 2, "float16": 2}
DTYPE_ALIASES = {"fp32": "float32", "float": "float32", "bf16": "bfloat16", "fp16": "float16", "half": "float16"}

# Ops whose buffers are split in n equal chunks: the size must be a multiple of n elements.
CHUNKED = ("all_gather", "reduce_scatter", "all_to_all")
FLAG_BELOW_PCT = 70.0  # rows under this share of the expected busbw are marked and explained
RANK_ENTRY = "topowise.measure.collectives:rank_main"

_SIZE = re.compile(r"^\s*(?P<num>\d+(?:\.\d+)?)\s*(?P<unit>[kmgt]?)(?P<suffix>i?b?)\s*$", re.I)


# --- arguments ---------------------------------------------------------------------------------
def parse_size(text: str | int, what: str = "size") -> int:
    """'1M', '64MiB', '1G', '4096' -> bytes. K/M/G/T and KiB/MiB/... are powers of 1024 (as nccl-tests
    reads -b/-e); KB/MB/GB/TB are powers of 1000."""
    if isinstance(text, int):
        return text
    m = _SIZE.match(str(text))
    if not m:
        raise UsageError(f"{what} {text!r} is not a size: write bytes or e.g. 1M, 64MiB, 1G")
    num = float(m["num"])
    unit = m["unit"].lower()
    suffix = m["suffix"].lower()
    power = " kmgt".index(unit) if unit else 0
    if unit and suffix == "b":  # MB, GB: decimal
        base = 1000
    elif not unit and suffix not in ("", "b"):
        raise UsageError(f"{what} {text!r} is not a size: write bytes or e.g. 1M, 64MiB, 1G")
    else:
        base = 1024
    value = num * base**power
    if value != int(value):
        raise UsageError(f"{what} {text!r} is not a whole number of bytes")
    return int(value)


def parse_ops(text: str) -> tuple[str, ...]:
    """'all_reduce,all_gather' -> ('all_reduce', 'all_gather'); 'all' -> every op; 'none' -> ()."""
    words = [w.strip().lower().replace("-", "_") for w in str(text).split(",") if w.strip()]
    if words == ["all"]:
        return OPS
    if words == ["none"]:
        return ()
    ops = []
    for w in words:
        op = OP_ALIASES.get(w.replace("_", ""), w) if w not in OPS else w
        if op not in OPS:
            raise UsageError(f"--ops: unknown collective {w!r}; valid: {', '.join(OPS)} (or all, none)")
        if op not in ops:
            ops.append(op)
    if not ops:
        raise UsageError(f"--ops {text!r} names no collective; valid: {', '.join(OPS)}")
    return tuple(ops)


def parse_dtype(text: str) -> str:
    name = DTYPE_ALIASES.get(text.lower(), text.lower())
    if name not in DTYPES:
        raise UsageError(f"--dtype {text!r}: choose one of {', '.join(DTYPES)}")
    return name


def size_sweep(min_bytes: int, max_bytes: int, factor: float = 2) -> tuple[int, ...]:
    """min, min*factor, ... up to max (inclusive), as nccl-tests -b/-e/-f."""
    if min_bytes < 1:
        raise UsageError(f"--min-bytes must be at least 1 byte, not {min_bytes}")
    if max_bytes < min_bytes:
        raise UsageError(f"--min-bytes {min_bytes} is larger than --max-bytes {max_bytes}: swap them")
    if not factor > 1:
        raise UsageError(f"--factor must be greater than 1, not {factor}")
    sizes, size = [], float(min_bytes)
    while size <= max_bytes * (1 + 1e-12):
        if not sizes or int(size) != sizes[-1]:
            sizes.append(int(size))
        size *= factor
    return tuple(sizes)


# --- bandwidth arithmetic ------------------------------------------------------------------------
def case_elements(op: str, nbytes: int, n: int, elem_size: int) -> int:
    """Elements of the full buffer S for a requested size: rounded down to whole elements, and to a
    multiple of n for the chunked ops (as nccl-tests does); never zero."""
    count = max(1, nbytes // elem_size)
    if op in CHUNKED:
        count = max(n, count - count % n)
    return count


def case_bytes(op: str, nbytes: int, n: int, dtype: str) -> int:
    """The size S a case really moves for a requested size (whole elements, chunks of n)."""
    return case_elements(op, nbytes, n, DTYPES[dtype]) * DTYPES[dtype]


def bandwidths(op: str, nbytes: int, n: int, time_s: float) -> tuple[float, float]:
    """(algbw, busbw) in GB/s for S = nbytes moved in time_s."""
    algbw = nbytes / time_s / 1e9 if time_s > 0 else 0.0
    return algbw, algbw * busbw_factor(op, n)


def case_key(record: dict) -> tuple | None:
    """What makes two collective records the same case (for --resume)."""
    if record.get("kind") != "collective":
        return None
    return (record["op"], int(record["bytes"]), record["dtype"], int(record["world_size"]),
            record.get("backend"), record.get("fabric"), record.get("algo", "auto"))


def expected_key(op: str, nbytes: int) -> str:
    """The key of a case in CommConfig.expected (JSON keys are strings)."""
    return f"{op}/{nbytes}"


# --- what a rank receives -------------------------------------------------------------------------
@dataclass(frozen=True)
class CommConfig:
    ops: tuple[str, ...] = DEFAULT_OPS
    sizes: tuple[int, ...] = ()
    dtype: str = "float32"
    warmup: int = 5
    iters: int = 20
    backend: str = "nccl"
    fabric: str = "nvlink"
    seed: int = 0
    graph: str = "auto"  # auto | on | off
    timeout_s: float = 300.0
    out: str = ""
    resume: bool = False
    state_dir: str = ""  # rank 0 writes state.json (the case it is in); ranks write error.rankN.txt
    result_path: str = ""  # rank 0 writes its result here (records, pairs, transport) for the parent
    nccl_log: str = ""  # NCCL_DEBUG_FILE pattern to parse for the transport
    topology: dict | None = None  # Topology.to_dict() of these GPUs, for the likely causes of a slow row
    gpus: tuple[int, ...] = ()  # physical GPU index of each local rank
    algo: str = ""  # NCCL_ALGO this run was started with ("" = NCCL's own choice); a label for records
    matrix: bool = False
    matrix_bytes: int = 256 * MIB
    expected: dict = field(default_factory=dict)  # expected_key(op, bytes) -> expected busbw, GB/s
    expected_from: str = ""  # where the expected busbw comes from, for the table's # lines
    started: float = field(default_factory=time.time)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> CommConfig:
        data = dict(data)
        for key in ("ops", "sizes", "gpus"):
            data[key] = tuple(data.get(key, ()))
        return cls(**data)


def group_gpus(cfg: CommConfig, world: int) -> tuple[int, ...]:
    """Physical GPU of each rank of a `world`-rank run (rank order when the config does not say)."""
    return tuple(cfg.gpus[:world]) if len(cfg.gpus) >= world else tuple(range(world))


def algo_label(cfg: CommConfig) -> str:
    """The NCCL_ALGO a record is labelled with: the run's, else the environment's, else "auto"."""
    return cfg.algo or os.environ.get("NCCL_ALGO", "") or "auto"


def pending_cases(cfg: CommConfig, world: int, done: set) -> list[tuple[str, int]]:
    """(op, requested bytes) in sweep order, less those already in the result file."""
    out = []
    for op in cfg.ops:
        for size in cfg.sizes:
            nbytes = case_bytes(op, size, world, cfg.dtype)
            if (op, nbytes, cfg.dtype, world, cfg.backend, cfg.fabric, algo_label(cfg)) not in done:
                out.append((op, size))
    return out


# --- why a row falls short ------------------------------------------------------------------------
STALE_VARS = {
    "NCCL_P2P_DISABLE": "NCCL_P2P_DISABLE={v} turns GPU peer-to-peer (NVLink) off",
    "NCCL_P2P_LEVEL": "NCCL_P2P_LEVEL={v} limits where P2P is used; a stale value silently disabled NVLink "
                      "in nccl-tests issue 228",
    "NCCL_SHM_DISABLE": "NCCL_SHM_DISABLE={v}",
    "NCCL_ALGO": "NCCL_ALGO={v} forces an algorithm",
    "NCCL_PROTO": "NCCL_PROTO={v} forces a protocol",
    "NCCL_MAX_NCHANNELS": "NCCL_MAX_NCHANNELS={v} caps the channels (each channel is a share of the bandwidth)",
    "NCCL_MIN_NCHANNELS": "NCCL_MIN_NCHANNELS={v}",
    "NCCL_BUFFSIZE": "NCCL_BUFFSIZE={v}",
    "NCCL_IB_DISABLE": "NCCL_IB_DISABLE={v} sends inter-node traffic over sockets",
    "NCCL_NET": "NCCL_NET={v}",
    "NCCL_CUMEM_ENABLE": "NCCL_CUMEM_ENABLE={v}",
}


def likely_causes(*, fabric: str, transport: str, environ: dict, topology=None, gpus=(),
                  multi_node: bool = False) -> list[str]:
    """Reasons a measured busbw can fall well short of the expectation, most specific first."""
    causes = []
    for var, text in STALE_VARS.items():
        value = environ.get(var)
        if value is None or (var == "NCCL_P2P_DISABLE" and fabric == "pcie"):
            continue
        causes.append(f"{text.format(v=value)} (set in the environment)")
    has_nv = False
    spanned = 1
    if topology is not None and len(gpus) > 1:
        try:
            has_nv = any(topology.link(a, b).is_nvlink for i, a in enumerate(gpus) for b in gpus[i + 1:])
            spanned = len(topology.islands_spanned(gpus))
        except Exception:  # a topology that does not cover these GPUs says nothing about them
            pass
    if fabric == "pcie":
        causes.append("--fabric pcie: NCCL_P2P_DISABLE=1 sends data through host memory (SHM), which on "
                      "many hosts reaches about half the PCIe rate")
    elif has_nv and transport and ("SHM" in transport or transport.startswith("NET")):
        causes.append(f"NCCL used {transport} although the topology has NVLink here: GPU P2P unsupported "
                      "or disabled (container without IPC, driver, NCCL_P2P_* variables)")
    if not has_nv and fabric != "pcie" and topology is not None:
        causes.append("PCIe path: ACS or the IOMMU routes peer traffic through the root complex and can "
                      "halve it (nccl-tests issue 112); check `sudo lspci -vvv | grep ACSCtl`")
    if spanned > 1:
        causes.append(f"the GPUs span {spanned} NVLink islands: the ring leaves each island over PCIe")
    if multi_node:
        causes.append("several nodes: the network sets the pace (check `Using network` in the NCCL log)")
    return causes


# --- the run ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CommRun:
    """What a run left: its exit status, rank 0's result (None on a rank that is not 0, or when the
    run failed before the end), and for a failed run one line naming the case and the ranks' log."""

    status: int
    result: dict | None
    error: str | None = None
    log: str | None = None


def run_comm(cfg: CommConfig, *, nproc: int, env: dict[str, str] | None = None, debug: bool = False,
             on_state: Callable[[dict], None] | None = None, entry: str = RANK_ENTRY) -> CommRun:
    """Run the sweep (and the pair matrix) of `cfg` on every rank; rank 0's result.

    A rank stuck in one case for longer than cfg.timeout_s (+30 s for start-up) ends the run.
    on_state(state) is called with rank 0's state file (the case it is in, how many there are)
    whenever it changes. Inside a torchrun/srun job the ranks are this process and its peers."""
    joined = launcher.in_job()
    state_dir = "" if joined else tempfile.mkdtemp(prefix="topowise-comm-")
    result_dir = state_dir or tempfile.mkdtemp(prefix="topowise-comm-")
    env = dict(env or {})
    nccl_log = ""
    if cfg.backend == "nccl":
        from topowise.measure.nccl_log import debug_env

        env.update(debug_env(state_dir or shared_log_dir()))
        nccl_log = env.get("NCCL_DEBUG_FILE", os.environ.get("NCCL_DEBUG_FILE", ""))
    result_path = os.path.join(result_dir, "result.json")
    cfg = replace(cfg, state_dir=state_dir, result_path=result_path, nccl_log=nccl_log)
    state_path = os.path.join(state_dir, "state.json")
    seen: list = [None]

    def follow_state():
        state = read_json(state_path)
        if state and state != seen[0]:
            seen[0] = state
            on_state(state)

    try:
        status = launcher.launch(
            entry, cfg.to_dict(), nproc=nproc, env=env, timeout_s=cfg.timeout_s + 30,
            heartbeat=state_path if state_dir else None,
            stderr_path=None if (debug or joined) else os.path.join(state_dir, "stderr.log"),
            on_wait=follow_state if on_state and state_dir else None)
        result = read_json(result_path)
    finally:
        if result_dir != state_dir:
            shutil.rmtree(result_dir, ignore_errors=True)
    if joined or status == 0:
        if state_dir:
            shutil.rmtree(state_dir, ignore_errors=True)
        return CommRun(status, result)
    log = os.path.join(state_dir, "stderr.log")
    return CommRun(status, result, failure_message(status, state_dir, cfg.timeout_s),
                   log if not debug and os.path.exists(log) else None)


def failure_message(status: int, state_dir: str, timeout: float) -> str:
    """What went wrong, naming the case rank 0 was in (a pure function of the state directory)."""
    state = read_json(os.path.join(state_dir, "state.json")) or {}
    where = case_words(state)
    # The first rank to fail is the cause; the others fail after it (connection reset, timeout).
    files = [os.path.join(state_dir, f) for f in (os.listdir(state_dir) if os.path.isdir(state_dir) else [])
             if f.startswith("error.rank") and f.endswith(".txt")]
    files.sort(key=lambda f: (os.path.getmtime(f), f))
    errors = []
    for path in files:
        with open(path) as fh:
            errors.append(fh.read().strip())
    if errors:
        first = errors[0]
        if "timed out" in first.lower() or "timeout" in first.lower():
            first = f"ran past --timeout {timeout:g} s: {first}"
        return first + (f" (during {where})" if where else "")
    if status == launcher.TIMED_OUT:
        return (f"{where or 'the run'} did not finish within --timeout {timeout:.0f} s: a hung collective "
                "(a rank stuck, a peer unreachable, or NCCL waiting on a transport); rerun with NCCL_DEBUG=INFO "
                "or a larger --timeout")
    return f"a rank died (exit status {status}) during {where or 'start-up'}"


def case_words(state: dict) -> str:
    """'all_reduce of 64 MiB (float32)' or the pair-matrix step rank 0 is in; '' when done."""
    if not state or state.get("done"):
        return ""
    if state.get("stage") == "matrix":
        return f"the pair matrix ({state.get('method')} {state.get('src')}->{state.get('dst')})"
    if state.get("op"):
        return f"{state['op']} of {human_bytes(int(state['bytes']))} ({state.get('dtype', '')})"
    return ""


def human_bytes(nbytes: int) -> str:
    for unit, size in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if nbytes >= size and nbytes % size == 0:
            return f"{nbytes // size} {unit}"
    return f"{nbytes} B"


def shared_log_dir() -> str:
    """Inside a user's torchrun/srun job every rank must agree on where NCCL writes its log."""
    run_id = (os.environ.get("TORCHELASTIC_RUN_ID") or os.environ.get("SLURM_JOB_ID", "")
              + "." + os.environ.get("SLURM_STEP_ID", "") or os.environ.get("MASTER_PORT", "0"))
    path = os.path.join(tempfile.gettempdir(), f"topowise-nccl-{run_id}")
    os.makedirs(path, exist_ok=True)
    return path


def read_json(path: str):
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


# --- the pair matrix, read back ---------------------------------------------------------------------
def matrix(records: list[dict], method: str, mode: str) -> tuple[list[int], list[list[float | None]]]:
    """GPU indices and a square table of GB/s (None on the diagonal) from p2p records."""
    rows = [r for r in records if r.get("kind") == "p2p" and r["method"] == method and r["mode"] == mode]
    gpus = sorted({r["src"] for r in rows} | {r["dst"] for r in rows})
    pos = {g: k for k, g in enumerate(gpus)}
    grid: list[list[float | None]] = [[None] * len(gpus) for _ in gpus]
    for r in rows:
        grid[pos[r["src"]]][pos[r["dst"]]] = r["gbps"]
    return gpus, grid


def plot_matrices(records: list[dict], path: str) -> str | None:
    """A heatmap per (method, mode) in one PNG; None when there is nothing to plot."""
    panels = [(m, d) for m in ("copy", "nccl", "gloo") for d in ("uni", "bi")
              if any(r.get("kind") == "p2p" and r["method"] == m and r["mode"] == d for r in records)]
    if not panels:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.8), squeeze=False)
    for ax, (method, mode) in zip(axes[0], panels):
        gpus, grid = matrix(records, method, mode)
        values = [[v if v is not None else float("nan") for v in row] for row in grid]
        im = ax.imshow(values, cmap="viridis")
        ax.set_xticks(range(len(gpus)), [str(g) for g in gpus])
        ax.set_yticks(range(len(gpus)), [str(g) for g in gpus])
        ax.set_xlabel("destination GPU")
        ax.set_ylabel("source GPU")
        ax.set_title(f"{method} {'unidirectional' if mode == 'uni' else 'bidirectional'} (GB/s)")
        for y, row in enumerate(grid):
            for x, v in enumerate(row):
                if v is not None:
                    ax.text(x, y, f"{v:.0f}", ha="center", va="center", color="w", fontsize=8)
        fig.colorbar(im, ax=ax, shrink=0.8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
