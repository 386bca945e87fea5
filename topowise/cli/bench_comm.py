"""`topowise bench comm`: collectives (nccl-tests style), the GPU-pair matrix, and NCCL's transport.

run() computes, then renders: comm_request checks the arguments and resolves them into a CommRequest
(a CommConfig with the expected busbw of every case, topowise.expectations); each run goes to every rank
through topowise.measure.comm.run_comm (or the torchrun/srun job it is already part of), and _render shows
what rank 0 measured: the table or JSON, the pair matrix and its heatmap. The measuring is in
topowise.measure.collectives / p2p.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass, replace

from topowise.cli.console import PIPED_WIDTH
from topowise.errors import UsageError
from topowise.measure import comm
from topowise.measure.launcher import in_job, job_size
from topowise.run import FABRICS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nproc", type=int, default=None,
                        help="processes to start (default: every visible GPU; 2 with --backend gloo)")
    parser.add_argument("--backend", choices=("nccl", "gloo"), default=None,
                        help="nccl on GPUs (default when CUDA is there), gloo on CPU")
    parser.add_argument("--device", choices=("cuda", "cpu"), default=None,
                        help="as bench train and calibrate say it: cuda is --backend nccl, cpu is --backend gloo")
    parser.add_argument("--ops", default="all",
                        help=f"comma-separated: {','.join(comm.OPS)} (default all; 'none' with --matrix)")
    parser.add_argument("--min-bytes", default="1M", help="smallest message, e.g. 1M, 64MiB (default 1M)")
    parser.add_argument("--max-bytes", default=None, help="largest message (default 1G on nccl, 16M on gloo)")
    parser.add_argument("--factor", type=float, default=2.0, help="size multiplier between cases (default 2)")
    parser.add_argument("--dtype", default="float32", help="float32 | bfloat16 | float16")
    parser.add_argument("--warmup", type=int, default=5, help="untimed calls per case (default 5)")
    parser.add_argument("--iters", type=int, default=20, help="timed calls per case (default 20, as nccl-tests)")
    parser.add_argument("--algo", default=None, metavar="LIST",
                        help="NCCL_ALGO values to compare, e.g. ring,tree: one run each (outside a job), "
                             "records labelled; default NCCL's own choice")
    parser.add_argument("--fabric", choices=FABRICS, default="nvlink",
                        help="pcie runs with NCCL_P2P_DISABLE=1: what if NVLink were not there")
    parser.add_argument("--out", default=None, help="append one JSON record per case to FILE.jsonl")
    parser.add_argument("--resume", action="store_true", help="skip cases already in --out")
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="seconds one case may take before the run is stopped as hung (default 300)")
    parser.add_argument("--topology", default=None,
                        help="preset or file for the expected bandwidth (default: discover this machine)")
    parser.add_argument("--profile", default=None,
                        help="cost-model profile (from `topowise calibrate`) for the expected busbw")
    parser.add_argument("--matrix", action="store_true",
                        help="also measure every GPU pair (copy and send/recv, uni- and bidirectional)")
    parser.add_argument("--matrix-bytes", default="256M", help="message size for --matrix (default 256M)")
    parser.add_argument("--plot", default=None,
                        help="heatmap PNG for --matrix (default: next to --out, else ./topowise-p2p-matrix.png)")
    parser.add_argument("--graph", choices=("auto", "on", "off"), default="auto",
                        help="replay timed loops from a CUDA graph (auto: messages up to 32 MiB)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the check data")
    parser.add_argument("--json", action="store_true", help="print the results as JSON instead of tables")


# --- the run -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class CommRequest:
    """What bench comm's flags ask for, checked and resolved before any rank starts: the config every run
    shares (None: one GPU, whose copies are measured instead of collectives), the processes, the NCCL_ALGO
    values to run one after another, and the heatmap's path."""

    config: comm.CommConfig | None
    nproc: int
    algos: tuple[str, ...]
    plot: str
    matrix_bytes: int


def run(args: argparse.Namespace) -> int:
    request = comm_request(args)
    if request.config is None:
        return _single_gpu(args, request.matrix_bytes)
    status = 0
    # several algorithms: one run each, each a fresh set of ranks started with that NCCL_ALGO
    for algo in request.algos or ("",):
        cfg = replace(request.config, algo=algo, started=time.time())  # started: which NCCL log lines are this run's
        status = max(status, _run_once(args, cfg, request.nproc, request.plot))
    return status


def comm_request(args: argparse.Namespace) -> CommRequest:
    """The flags checked (the cheap checks first, torch's only where measuring needs it) and resolved: the
    backend, the sizes, the processes, the expected busbw of every case."""
    ops, dtype, matrix_bytes = _checked_flags(args)
    topology, profile = _expectation_sources(args)
    backend, ngpu = _backend(args)
    sizes = _sizes(args, backend)
    joined = in_job()
    nproc = _nproc(args, backend, ngpu, joined)
    if not joined and backend == "nccl" and nproc == 1:
        return CommRequest(config=None, nproc=1, algos=(), plot="", matrix_bytes=matrix_bytes)
    if not joined and nproc < 2:
        raise UsageError("collectives need two or more processes: use --nproc 2 or more")
    algos = _algos(args, joined)
    from topowise.measure.machine import visible_gpus

    base = comm.CommConfig(
        ops=ops, sizes=sizes, dtype=dtype, warmup=args.warmup, iters=args.iters, backend=backend,
        fabric=args.fabric, seed=args.seed, graph=args.graph, timeout_s=args.timeout,
        out=os.path.abspath(args.out) if args.out else "", resume=args.resume,
        topology=_expected_on(topology, backend),
        gpus=visible_gpus(ngpu) if backend == "nccl" else (), matrix=args.matrix, matrix_bytes=matrix_bytes)
    return CommRequest(config=_with_expectations(base, nproc, profile), nproc=nproc, algos=algos,
                       plot=os.path.abspath(_plot_path(args)) if args.matrix else "", matrix_bytes=matrix_bytes)


def _sizes(args: argparse.Namespace, backend: str) -> tuple[int, ...]:
    """The message sizes of the sweep; the largest by default 1G on nccl, 16M on gloo (CPU memory and time)."""
    min_bytes = comm.parse_size(args.min_bytes, "--min-bytes")
    max_bytes = comm.parse_size(args.max_bytes or ("1G" if backend == "nccl" else "16M"), "--max-bytes")
    return comm.size_sweep(min_bytes, max_bytes, args.factor)


def _algos(args: argparse.Namespace, joined: bool) -> tuple[str, ...]:
    """--algo; more than one only outside a job, where each gets ranks of its own."""
    algos = parse_algos(args.algo)
    if joined and len(algos) > 1:
        raise UsageError(f"--algo {args.algo}: NCCL reads NCCL_ALGO once, when the job's communicator starts; "
                         "inside a torchrun/srun job measure one per job (NCCL_ALGO=Tree srun ...) or give one value")
    return tuple(algos)


def _expected_on(topology, backend: str) -> dict | None:
    """The topology the expected busbw is computed on, as a dict: --topology, else on nccl this machine's."""
    if backend == "nccl" and topology is None:
        from topowise.measure.machine import live_topology

        topology = live_topology()
    return topology.to_dict() if topology is not None else None


def _with_expectations(base: comm.CommConfig, nproc: int, profile) -> comm.CommConfig:
    """base with the expected busbw of every case, for the job's world (inside a job) or nproc processes on
    this node."""
    from topowise.expectations import with_expected_busbw

    job = job_size()
    world, multi_node = (job[0], job[1] < job[0]) if job else (nproc, False)
    return with_expected_busbw(base, world, multi_node=multi_node, profile=profile)


def _expectation_sources(args: argparse.Namespace):
    """(Topology or None, Profile or None): what the expected busbw of each case is computed from."""
    topology = None
    if args.topology:
        from topowise.topology import load_topology

        topology = load_topology(args.topology)
    profile = None
    if args.profile:
        from topowise.costmodel.profile import load_profile

        profile = load_profile(args.profile)
    return topology, profile


def _backend(args: argparse.Namespace) -> tuple[str, int]:
    """(backend, visible GPUs): --backend or --device, else nccl where CUDA is there, gloo where not."""
    from topowise.measure.launcher import require_torch
    from topowise.measure.rank import cuda_device_count

    requested = backend_of(args.backend, args.device)
    require_torch("bench comm")  # measuring needs torch; everything above did not
    ngpu = cuda_device_count()
    backend = requested or ("nccl" if ngpu > 0 else "gloo")
    if backend == "gloo" and args.fabric == "pcie":
        raise UsageError("--fabric pcie takes NVLink away from NCCL (NCCL_P2P_DISABLE=1); gloo does not use NCCL: "
                         "leave --fabric out with --backend gloo")
    return backend, ngpu


def _checked_flags(args: argparse.Namespace) -> tuple[tuple[str, ...], str, int]:
    """(ops, dtype, matrix bytes) from the flags that need neither torch nor a GPU to check."""
    ops = comm.parse_ops(args.ops)
    dtype = comm.parse_dtype(args.dtype)
    if args.iters < 1 or args.warmup < 0:
        raise UsageError(f"--iters must be >= 1 and --warmup >= 0 (got {args.iters}, {args.warmup})")
    if args.timeout <= 0:
        raise UsageError(f"--timeout must be a positive number of seconds, not {args.timeout}")
    if args.resume and not args.out:
        raise UsageError("--resume needs --out FILE.jsonl (the file whose cases to skip)")
    if not ops and not args.matrix:
        raise UsageError("--ops none leaves nothing to do: add --matrix, or name collectives")
    if args.plot and not args.matrix:
        raise UsageError("--plot is the GPU-pair matrix's heatmap: add --matrix, or drop --plot")
    return ops, dtype, comm.parse_size(args.matrix_bytes, "--matrix-bytes")


def _nproc(args: argparse.Namespace, backend: str, ngpu: int, joined: bool) -> int:
    """The processes to start: --nproc, else every visible GPU (nccl) or 2 (gloo); checked against the GPUs."""
    if backend == "nccl" and ngpu == 0:
        raise UsageError("--backend nccl needs CUDA GPUs and none are visible; use --backend gloo on CPU")
    nproc = args.nproc if args.nproc is not None else (ngpu if backend == "nccl" else 2)
    if not joined and nproc < 1:
        raise UsageError(f"--nproc must be at least 1, not {nproc}")
    if not joined and backend == "nccl" and nproc > ngpu:
        raise UsageError(f"--nproc {nproc} with --backend nccl needs {nproc} GPUs; {ngpu} visible")
    return nproc


def backend_of(backend: str | None, device: str | None) -> str | None:
    """--backend, or what --device (the flag bench train and calibrate take) stands for; None: neither given."""
    implied = {"cuda": "nccl", "cpu": "gloo"}.get(device or "")
    if backend and implied and backend != implied:
        raise UsageError(f"--device {device} runs --backend {implied}, not {backend}: give one of the two")
    return backend or implied


NCCL_ALGOS = {"ring": "Ring", "tree": "Tree", "collnetdirect": "CollnetDirect", "collnetchain": "CollnetChain",
              "nvls": "NVLS", "nvlstree": "NVLSTree", "pat": "PAT"}


def nccl_algo_env(algo: str) -> str:
    """NCCL_ALGO for a run that forces `algo` on all_reduce alone (the per-collective form): a bare
    NCCL_ALGO=Tree also binds the broadcast torch.distributed runs at start-up, which has no tree
    ("no algorithm/protocol available for function Broadcast", NCCL 2.28.9 on 2x H200, 2026-11-30)."""
    return f"allreduce:{algo.lower()}"


def parse_algos(text: str | None) -> list[str]:
    """`ring,tree` -> ["Ring", "Tree"] (NCCL_ALGO's spelling); None -> []."""
    if not text:
        return []
    out = []
    for word in text.split(","):
        key = word.strip().lower()
        if key not in NCCL_ALGOS:
            raise UsageError(f"--algo {text!r}: {word.strip()!r} is not an NCCL algorithm; "
                             f"valid: {', '.join(NCCL_ALGOS)}")
        out.append(NCCL_ALGOS[key])
    return out


def _run_once(args, cfg: comm.CommConfig, nproc: int, plot: str) -> int:
    env = {"NCCL_ALGO": nccl_algo_env(cfg.algo)} if cfg.algo else {}  # read when the ranks' communicator starts
    if cfg.fabric == "pcie":
        env["NCCL_P2P_DISABLE"] = "1"  # only this: NCCL_NVLS_ENABLE and friends pass through untouched
    console = progress = None
    if not args.json:
        from topowise.cli.console import console as make_console

        console = make_console()
        progress = _Progress(console) if console.is_terminal else None  # a log file gets no bar
    try:
        done = comm.run_comm(cfg, nproc=nproc, env=env, debug=getattr(args, "debug", False),
                             on_state=progress.show if progress else None)
    finally:
        if progress:
            progress.stop()
    if done.result:
        _render(done.result, cfg, console, plot)
    return _finish(done)


class _Progress:
    """A transient progress bar following rank 0's state file (the case it is in, of how many)."""

    def __init__(self, console):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TimeElapsedColumn(), console=console, transient=True)
        self.task = None

    def show(self, state: dict) -> None:
        if state.get("total") is not None:
            if self.task is None:
                self.bar.start()
                self.task = self.bar.add_task("collectives", total=state["total"])
            self.bar.update(self.task, completed=state["index"],
                            description=f"{state['op']} {comm.human_bytes(int(state['bytes']))}")
        elif self.task is not None and state.get("stage") == "matrix":
            self.bar.update(self.task, description="pair matrix")

    def stop(self) -> None:
        if self.task is not None:
            self.bar.stop()


def _render(result: dict, cfg: comm.CommConfig, console, plot_path: str) -> None:
    """rank 0's result: the table (or JSON), the pair matrix and its heatmap."""
    records, pairs, ctx = result["collectives"], result["p2p"], result.get("context")
    plot = comm.plot_matrices(pairs, plot_path) if pairs and plot_path else None
    meta = _meta(cfg, result)
    if console is None:
        print(json.dumps({"meta": meta, "collectives": records, "p2p": pairs,
                          "causes": ctx["causes"] if ctx else [], "plot": plot}, indent=2))
        return
    if records:
        render_collectives(console, records, cfg, meta, ctx)
    if pairs:
        render_matrix(console, pairs, plot)


def _finish(done: comm.CommRun) -> int:
    """Turn the ranks' exit into one clear line; wrong results fail the run."""
    if done.status == 0:
        wrong = sum(1 for r in (done.result or {}).get("collectives", []) if r["wrong"])
        if wrong:
            sys.stderr.write(f"topowise: error: {wrong} case(s) gave wrong results (see the #wrong column)\n")
            return 1
        return 0
    sys.stderr.write(f"topowise: error: {done.error}\n")
    if done.log:
        sys.stderr.write(f"topowise: the ranks' full output: {done.log}\n")
    return done.status if done.status not in (0, 2) else 1


def _single_gpu(args, matrix_bytes: int) -> int:
    from topowise.measure.p2p import single_gpu_copies  # one GPU: this process measures it
    from topowise.measure.records import append_record

    note = ("collectives need two or more GPUs and one is visible: measuring host<->device (pinned) "
            "and device-to-device copy bandwidth on cuda:0 instead")
    records = single_gpu_copies(0, matrix_bytes)
    for rec in records:
        if args.out:
            append_record(args.out, rec)
    if args.json:
        print(json.dumps({"note": note, "copies": records}, indent=2))
        return 0
    from rich.table import Table

    from topowise.cli.console import column
    from topowise.cli.console import console as make_console

    console = make_console()
    console.print(f"[yellow]{note}[/]")
    table = Table(box=None)
    for col in ("copy", "size (B)", "time (us)", "GB/s"):
        column(table, col, justify="right")
    names = {"h2d": "host -> device", "d2h": "device -> host", "d2d": "device -> device"}
    for r in records:
        table.add_row(names[r["op"]], str(r["bytes"]), f"{r['time_s'] * 1e6:.1f}", f"{r['gbps']:.1f}")
    console.print(table)
    return 0


# --- rendering ------------------------------------------------------------------------------------
def _meta(cfg: comm.CommConfig, result: dict) -> dict:
    ctx = result.get("context")
    expected = any(r.get("expected_busbw_gbps") is not None for r in result["collectives"])
    return {
        "world_size": result["world_size"], "backend": cfg.backend, "fabric": cfg.fabric, "dtype": cfg.dtype,
        "iters": cfg.iters, "warmup": cfg.warmup,
        "nccl_version": ctx["nccl_version"] if ctx else None, "transport": ctx["transport"] if ctx else None,
        "expected": cfg.expected_from if expected else None,
        "notes": ctx["notes"] if ctx else [],
    }


def natural_width(console, table) -> int:
    """The width `table` takes when nothing squeezes it."""
    return console.measure(table, options=console.options.update_width(PIPED_WIDTH)).maximum


def forced_algo(records: list[dict]) -> str | None:
    """The NCCL_ALGO the run was held to (--algo or the job's NCCL_ALGO); None: NCCL's own choice."""
    algo = records[0].get("algo", "auto") if records else "auto"
    return None if algo == "auto" else algo


def wrong_values(records: list[dict]) -> int:
    """The out-of-bounds values over all cases (nccl-tests' #wrong, summed)."""
    return sum(r["wrong"] for r in records)


def mean_busbw(records: list[dict]) -> float:
    """nccl-tests' "Avg bus bandwidth": the mean busbw over the cases, whatever their size."""
    return sum(r["busbw_gbps"] for r in records) / len(records)


def row_state(r: dict) -> str | None:
    """A case's state for its row's colour: "wrong" values, "flagged" (under the expected busbw) or None."""
    if r["wrong"]:
        return "wrong"
    return "flagged" if r["flagged"] else None


ROW_STYLES = {"wrong": "red", "flagged": "yellow"}


def expected_cell(r: dict) -> str:
    """The share of the expected busbw reached, the expected busbw, and ! where the row is flagged."""
    pct = r.get("expected_pct")
    if pct is None:
        return "-"
    return f"{pct:.0f}% of {r['expected_busbw_gbps']:.3g}" + (" !" if r["flagged"] else "")


# nccl-tests' columns: (name, unit under it, justify, the cell of a record)
COLLECTIVE_COLUMNS = (
    ("size", "(B)", "right", lambda r: str(r["bytes"])),
    ("count", "(elements)", "right", lambda r: str(r["count"])),
    ("type", "", "left", lambda r: r["dtype"]),
    ("op", "", "left", lambda r: r["op"]),
    ("time", "(us)", "right", lambda r: f"{r['time_s'] * 1e6:.1f}"),
    ("algbw", "(GB/s)", "right", lambda r: f"{r['algbw_gbps']:.2f}"),
    ("busbw", "(GB/s)", "right", lambda r: f"{r['busbw_gbps']:.2f}"),
    ("#wrong", "", "right", lambda r: str(r["wrong"])),
    ("expected", "(%)", "right", expected_cell),
)
COMPACT_LEAVES_OUT = ("count", "type")  # one dtype per run, said above the table


def collectives_table(records: list[dict], compact: bool = False):
    """nccl-tests' columns, each unit under its name; `compact` leaves out the element count and
    the dtype (one per run, said above the table), so that the table fits 80 columns."""
    from rich.table import Table

    from topowise.cli.console import column

    table = Table(box=None, pad_edge=False, header_style="bold")
    cols = [c for c in COLLECTIVE_COLUMNS if not (compact and c[0] in COMPACT_LEAVES_OUT)]
    for name, unit, justify, _ in cols:
        column(table, f"{name}\n{unit}", justify=justify)
    for r in records:
        table.add_row(*[cell(r) for *_, cell in cols], style=ROW_STYLES.get(row_state(r) or ""))
    return table


def render_collectives(console, records: list[dict], cfg: comm.CommConfig, meta: dict, ctx: dict | None) -> None:
    from rich.text import Text

    for line in header_lines(records, cfg, meta, ctx):
        console.print(Text(line, style="dim"))
    table = collectives_table(records)
    if natural_width(console, table) > console.width:  # a narrow terminal: the dtype is in the line above
        table = collectives_table(records, compact=True)
    console.print(table)
    for text, style in footer_lines(records, cfg, ctx):
        console.print(Text(text, style=style))


def header_lines(records: list[dict], cfg: comm.CommConfig, meta: dict, ctx: dict | None) -> list[str]:
    """The `#` lines above the table, nccl-tests style: the run, NCCL and what busbw is expected, the nodes,
    the algorithm, the notes."""
    fabric = "" if cfg.backend == "gloo" else f", fabric {meta['fabric']}"  # gloo runs on no fabric of NCCL's
    algo = forced_algo(records)
    return [f"# topowise bench comm: world size {meta['world_size']}, backend {meta['backend']}{fabric}, "
            f"dtype {meta['dtype']}, {meta['warmup']} warmup + {meta['iters']} timed calls per case",
            *(_nccl_lines(meta) if cfg.backend == "nccl" else []), *_nodes_lines((ctx or {}).get("nodes") or {}),
            *([f"# NCCL_ALGO={algo}"] if algo else []), *(f"# {n}" for n in meta["notes"])]


def _nccl_lines(meta: dict) -> list[str]:
    return [f"# NCCL {meta['nccl_version'] or 'version unknown'}, transport {meta['transport']}",
            f"# expected busbw: {meta['expected'] or 'no topology for this group (give --topology)'}"]


def _nodes_lines(nodes: dict) -> list[str]:
    """The nodes and their ranks, where the run spans more than one."""
    if len(nodes) <= 1:
        return []
    return [f"# {len(nodes)} nodes: " + "; ".join(f"{h}: ranks {','.join(map(str, r))}" for h, r in nodes.items())
            + " -- every row below is inter-node"]


def footer_lines(records: list[dict], cfg: comm.CommConfig, ctx: dict | None) -> list[tuple[str, str]]:
    """(text, style) under the table: the wrong values, the mean bus bandwidth, the likely causes of flagged
    rows, the file."""
    wrong = wrong_values(records)
    lines = [(f"# Out of bounds values : {wrong} {'OK' if wrong == 0 else 'FAILED'}", "dim" if wrong == 0 else "red")]
    if records:
        lines.append((f"# Avg bus bandwidth    : {mean_busbw(records):.3f} GB/s", "dim"))
    lines += _cause_lines((ctx or {}).get("causes") or [])
    if cfg.out:
        lines.append((f"# records appended to {cfg.out}", "dim"))
    return lines


def _cause_lines(causes: list[str]) -> list[tuple[str, str]]:
    if not causes:
        return []
    return [(f"# rows marked ! reach under {comm.FLAG_BELOW_PCT:.0f}% of the expected busbw; likely causes:",
             "yellow"), *((f"#   - {cause}", "yellow") for cause in causes)]


def render_matrix(console, pairs, plot) -> None:
    from rich.table import Table

    from topowise.cli.console import column

    for method in ("copy", "nccl", "gloo"):
        for mode in ("uni", "bi"):
            gpus, grid = comm.matrix(pairs, method, mode)
            if not gpus:
                continue
            console.print(f"# {method} {'unidirectional' if mode == 'uni' else 'bidirectional'} GB/s "
                          "(row: source GPU, column: destination GPU)")
            table = Table(box=None)
            column(table, "src\\dst", justify="right")
            for g in gpus:
                column(table, str(g), justify="right")
            for g, row in zip(gpus, grid):
                table.add_row(str(g), *["-" if v is None else f"{v:.1f}" for v in row])
            console.print(table)
    if plot:
        console.print(f"# heatmap: {plot}")


# --- small helpers ----------------------------------------------------------------------------------
def _plot_path(args) -> str:
    if args.plot:
        return args.plot
    if args.out:
        base = args.out[:-6] if args.out.endswith(".jsonl") else args.out
        return base + ".matrix.png"
    return "topowise-p2p-matrix.png"
