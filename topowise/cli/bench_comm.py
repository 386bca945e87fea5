"""`topowise bench comm`: collectives (nccl-tests style), the GPU-pair matrix, and NCCL's transport.

run() checks the arguments, builds a CommConfig and starts `rank_main` on every rank through the
launcher (or joins the torchrun/srun job it is already in). Rank 0 shows progress, appends each record
to --out as soon as it is measured, and prints the table at the end. The measuring is in
topowise.measure.collectives / p2p; this module only wires and renders.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile

from topowise.errors import UsageError
from topowise.measure import collectives as coll
from topowise.measure.launcher import in_job

ENTRY = "topowise.cli.bench_comm:rank_main"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nproc", type=int, default=None,
                        help="processes to start (default: every visible GPU; 2 with --backend gloo)")
    parser.add_argument("--backend", choices=("nccl", "gloo"), default=None,
                        help="nccl on GPUs (default when CUDA is there), gloo on CPU")
    parser.add_argument("--ops", default="all",
                        help=f"comma-separated: {','.join(coll.OPS)} (default all; 'none' with --matrix)")
    parser.add_argument("--min-bytes", default="1M", help="smallest message, e.g. 1M, 64MiB (default 1M)")
    parser.add_argument("--max-bytes", default=None, help="largest message (default 1G on nccl, 16M on gloo)")
    parser.add_argument("--factor", type=float, default=2.0, help="size multiplier between cases (default 2)")
    parser.add_argument("--dtype", default="float32", help="float32 | bfloat16 | float16")
    parser.add_argument("--warmup", type=int, default=5, help="untimed calls per case (default 5)")
    parser.add_argument("--iters", type=int, default=20, help="timed calls per case (default 20, as nccl-tests)")
    parser.add_argument("--algo", default=None, metavar="LIST",
                        help="NCCL_ALGO values to compare, e.g. ring,tree: one run each (outside a job), "
                             "records labelled; default NCCL's own choice")
    parser.add_argument("--fabric", choices=("nvlink", "pcie"), default="nvlink",
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


# --- the parent --------------------------------------------------------------------------------
def run(args: argparse.Namespace) -> int:
    ops = coll.parse_ops(args.ops)
    dtype = coll.parse_dtype(args.dtype)
    if args.iters < 1 or args.warmup < 0:
        raise UsageError(f"--iters must be >= 1 and --warmup >= 0 (got {args.iters}, {args.warmup})")
    if args.timeout <= 0:
        raise UsageError(f"--timeout must be a positive number of seconds, not {args.timeout}")
    if args.resume and not args.out:
        raise UsageError("--resume needs --out FILE.jsonl (the file whose cases to skip)")
    if not ops and not args.matrix:
        raise UsageError("--ops none leaves nothing to do: add --matrix, or name collectives")
    matrix_bytes = coll.parse_size(args.matrix_bytes, "--matrix-bytes")
    topology = None
    if args.topology:
        from topowise.topology import load_topology

        topology = load_topology(args.topology).to_dict()

    profile = None
    if args.profile:
        from topowise.costmodel.profile import load_profile

        profile = load_profile(args.profile).to_dict()

    import torch  # measuring needs torch; everything above did not

    cuda = torch.cuda.is_available()
    backend = args.backend or ("nccl" if cuda else "gloo")
    min_bytes = coll.parse_size(args.min_bytes, "--min-bytes")
    max_bytes = coll.parse_size(args.max_bytes or ("1G" if backend == "nccl" else "16M"), "--max-bytes")
    sizes = coll.size_sweep(min_bytes, max_bytes, args.factor)
    joined = in_job()
    if backend == "nccl" and not cuda:
        raise UsageError("--backend nccl needs CUDA GPUs and none are visible; use --backend gloo on CPU")
    ngpu = torch.cuda.device_count() if cuda else 0
    nproc = args.nproc if args.nproc is not None else (ngpu if backend == "nccl" else 2)
    if not joined and nproc < 1:
        raise UsageError(f"--nproc must be at least 1, not {nproc}")
    if not joined and backend == "nccl" and nproc > ngpu:
        raise UsageError(f"--nproc {nproc} with --backend nccl needs {nproc} GPUs; {ngpu} visible")
    if not joined and backend == "nccl" and nproc == 1:
        return _single_gpu(args, matrix_bytes)
    if not joined and nproc < 2:
        raise UsageError("collectives need two or more processes: use --nproc 2 or more")

    algos = parse_algos(args.algo)
    if joined and len(algos) > 1:
        raise UsageError(f"--algo {args.algo}: NCCL reads NCCL_ALGO once, when the job's communicator starts; "
                         "inside a torchrun/srun job measure one per job (NCCL_ALGO=Tree srun ...) or give one value")
    if len(algos) > 1:  # one run per algorithm, each a fresh set of ranks started with that NCCL_ALGO
        status = 0
        for algo in algos:
            status = max(status, _run_once(args, algo, ops, dtype, sizes, backend, ngpu, nproc, joined,
                                           matrix_bytes, topology, profile))
        return status
    return _run_once(args, algos[0] if algos else "", ops, dtype, sizes, backend, ngpu, nproc, joined, matrix_bytes,
                     topology, profile)


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


def _run_once(args, algo, ops, dtype, sizes, backend, ngpu, nproc, joined, matrix_bytes, topology, profile) -> int:
    state_dir = tempfile.mkdtemp(prefix="topowise-comm-") if not joined else ""
    log_dir = state_dir or _shared_log_dir()
    env = {"NCCL_ALGO": nccl_algo_env(algo)} if algo else {}  # read when the ranks' communicator starts
    if args.fabric == "pcie":
        env["NCCL_P2P_DISABLE"] = "1"  # only this: NCCL_NVLS_ENABLE and friends pass through untouched
    nccl_log = ""
    if backend == "nccl":
        from topowise.measure.nccl_log import debug_env

        env.update(debug_env(log_dir))
        nccl_log = env.get("NCCL_DEBUG_FILE", os.environ.get("NCCL_DEBUG_FILE", ""))
    cfg = coll.CommConfig(
        ops=ops, sizes=sizes, dtype=dtype, warmup=args.warmup, iters=args.iters, backend=backend,
        fabric=args.fabric, seed=args.seed, graph=args.graph, timeout_s=args.timeout,
        out=os.path.abspath(args.out) if args.out else "", resume=args.resume, state_dir=state_dir,
        nccl_log=nccl_log, topology=topology, profile=profile, gpus=_visible_gpus(ngpu) if backend == "nccl" else (),
        matrix=args.matrix, matrix_bytes=matrix_bytes, plot=os.path.abspath(_plot_path(args)) if args.matrix else "",
        json=args.json, algo=algo)
    from topowise.measure.launcher import launch

    debug = getattr(args, "debug", False)
    status = launch(ENTRY, cfg.to_dict(), nproc=nproc, env=env, timeout_s=args.timeout + 30,
                    heartbeat=os.path.join(state_dir, "state.json") if state_dir else None,
                    stderr_path=None if (debug or not state_dir) else os.path.join(state_dir, "stderr.log"))
    if joined:
        return status
    return _finish(status, state_dir, args.timeout, debug)


def _finish(status: int, state_dir: str, timeout: float, debug: bool) -> int:
    """Turn the ranks' exit into one clear line; remove the state directory unless it explains a failure."""
    summary = _read_json(os.path.join(state_dir, "summary.json"))
    if status == 0:
        shutil.rmtree(state_dir, ignore_errors=True)
        if summary and summary.get("wrong_cases"):
            sys.stderr.write(f"topowise: error: {summary['wrong_cases']} case(s) gave wrong results "
                             "(see the #wrong column)\n")
            return 1
        return 0
    sys.stderr.write(f"topowise: error: {failure_message(status, state_dir, timeout)}\n")
    if not debug and os.path.exists(os.path.join(state_dir, "stderr.log")):
        sys.stderr.write(f"topowise: the ranks' full output: {os.path.join(state_dir, 'stderr.log')}\n")
    return status if status not in (0, 2) else 1


def failure_message(status: int, state_dir: str, timeout: float) -> str:
    """What went wrong, naming the case rank 0 was in (a pure function of the state directory)."""
    state = _read_json(os.path.join(state_dir, "state.json")) or {}
    where = _case_words(state)
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
    if status == 124:
        return (f"{where or 'the run'} did not finish within --timeout {timeout:.0f} s: a hung collective "
                "(a rank stuck, a peer unreachable, or NCCL waiting on a transport); rerun with NCCL_DEBUG=INFO "
                "or a larger --timeout")
    return f"a rank died (exit status {status}) during {where or 'start-up'}"


def _case_words(state: dict) -> str:
    if not state or state.get("done"):
        return ""
    if state.get("stage") == "matrix":
        return f"the pair matrix ({state.get('method')} {state.get('src')}->{state.get('dst')})"
    if state.get("op"):
        return f"{state['op']} of {_human(int(state['bytes']))} ({state.get('dtype', '')})"
    return ""


def _single_gpu(args, matrix_bytes: int) -> int:
    from topowise.measure.p2p import single_gpu_copies
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
    from rich.console import Console
    from rich.table import Table

    console = Console()
    console.print(f"[yellow]{note}[/]")
    table = Table(box=None)
    for col in ("copy", "size (B)", "time (us)", "GB/s"):
        table.add_column(col, justify="right")
    names = {"h2d": "host -> device", "d2h": "device -> host", "d2d": "device -> device"}
    for r in records:
        table.add_row(names[r["op"]], str(r["bytes"]), f"{r['time_s'] * 1e6:.1f}", f"{r['gbps']:.1f}")
    console.print(table)
    return 0


# --- every rank ----------------------------------------------------------------------------------
def rank_main(config: dict) -> None:
    """One rank of the run (started by the launcher, or by the user's torchrun/srun)."""
    cfg = coll.CommConfig.from_dict(config)
    from topowise.measure.launcher import init_distributed

    rank = None
    try:
        rank = init_distributed(cfg.backend, cfg.timeout_s)
        _rank_body(cfg, rank)
    except BaseException as exc:  # noqa: BLE001 - any failure becomes one clear line and a non-zero exit
        if isinstance(exc, SystemExit) and not exc.code:
            raise
        who = f"rank {rank.rank}" if rank else f"rank {os.environ.get('RANK', '?')}"
        msg = f"{who}: {exc}" if not isinstance(exc, KeyboardInterrupt) else f"{who}: interrupted"
        if not isinstance(exc, (UsageError, KeyboardInterrupt, SystemExit)):
            msg = f"{who}: {type(exc).__name__}: {exc}"
        if cfg.state_dir:
            with open(os.path.join(cfg.state_dir, f"error.rank{rank.rank if rank else os.environ.get('RANK', 'x')}.txt"), "w") as fh:
                fh.write(msg)
        sys.stderr.write(f"topowise: error: {msg}\n")
        sys.stderr.flush()
        os._exit(1)  # do not wait on peers that may be stuck in a collective with us
    finally:
        _destroy()


def _rank_body(cfg: coll.CommConfig, rank) -> None:
    import torch.distributed as dist

    main = rank.is_main
    console = progress = task = None
    if main and not cfg.json:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        console = Console()
        if not console.is_terminal:  # a pipe or file: wide enough for the table, no wrapping
            console = Console(width=200)
        progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TimeElapsedColumn(), console=console, transient=True)

    def on_plan(cases, ctx):
        nonlocal task
        if progress is not None:
            progress.start()
            task = progress.add_task("collectives", total=len(cases))

    def on_record(rec):
        if progress is not None:
            progress.update(task, advance=1, description=f"{rec['op']} {_human(rec['bytes'])}")

    records, ctx = [], None
    try:
        if cfg.ops:
            records, ctx = coll.run_collectives(cfg, rank, on_plan=on_plan, on_record=on_record)
        pairs = _measure_matrix(cfg, rank) if cfg.matrix else []
    finally:
        if progress is not None:
            progress.stop()
    dist.barrier()
    if not main:
        return
    wrong = sum(1 for r in records if r["wrong"])
    if cfg.state_dir:
        with open(os.path.join(cfg.state_dir, "summary.json"), "w") as fh:
            json.dump({"cases": len(records), "wrong_cases": wrong}, fh)
    plot = None
    if pairs and cfg.plot:
        from topowise.measure.p2p import plot_matrices

        plot = plot_matrices(pairs, cfg.plot)
    if cfg.json:
        print(json.dumps({"meta": _meta(cfg, rank, ctx), "collectives": records, "p2p": pairs,
                          "causes": ctx.causes if ctx else [], "plot": plot}, indent=2))
    else:
        if records:
            render_collectives(console, records, cfg, rank, ctx)
        if pairs:
            render_matrix(console, pairs, plot)
    if wrong and not cfg.state_dir:  # joined a job: no parent to report it
        sys.stderr.write(f"topowise: error: {wrong} case(s) gave wrong results\n")
        raise SystemExit(1)


def _measure_matrix(cfg, rank) -> list[dict]:
    from topowise.measure.p2p import copy_matrix, sendrecv_matrix
    from topowise.measure.records import append_record

    out = []
    cuda = rank.device.startswith("cuda")
    import torch.distributed as dist

    if rank.is_main:
        coll.write_state(cfg, stage="matrix", method="copy", src="all", dst="all")
        if cuda and rank.local_world_size == rank.world_size:
            physical = list(cfg.gpus) or list(range(rank.world_size))
            # copy_matrix addresses devices by local index; records name physical GPUs
            recs = copy_matrix(list(range(rank.world_size)), cfg.matrix_bytes)
            for r in recs:
                r["src"], r["dst"] = physical[r["src"]], physical[r["dst"]]
            out.extend(recs)
    dist.barrier()
    if rank.is_main:
        coll.write_state(cfg, stage="matrix", method=rank.backend, src="all", dst="all")
    out.extend(sendrecv_matrix(rank, cfg.matrix_bytes, physical=list(cfg.gpus) or None))
    if rank.is_main and cfg.out:
        for r in out:
            append_record(cfg.out, r)
    return out


def _destroy() -> None:
    try:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
    except Exception:
        pass


# --- rendering (rank 0) -----------------------------------------------------------------------------
def _meta(cfg, rank, ctx) -> dict:
    return {
        "world_size": rank.world_size, "backend": cfg.backend, "fabric": cfg.fabric, "dtype": cfg.dtype,
        "iters": cfg.iters, "warmup": cfg.warmup,
        "nccl_version": ctx.nccl_version if ctx else None, "transport": ctx.transport if ctx else None,
        "expected": "; ".join(sorted(ctx.expected_from)) if ctx and ctx.expected_from else None,
        "notes": ctx.notes if ctx else [],
    }


def render_collectives(console, records, cfg, rank, ctx) -> None:
    from rich.table import Table
    from rich.text import Text

    meta = _meta(cfg, rank, ctx)
    lines = [
        f"# topowise bench comm: world size {meta['world_size']}, backend {meta['backend']}, fabric {meta['fabric']}, "
        f"dtype {meta['dtype']}, {meta['warmup']} warmup + {meta['iters']} timed calls per case",
    ]
    if cfg.backend == "nccl":
        lines.append(f"# NCCL {meta['nccl_version'] or 'version unknown'}, transport {meta['transport']}")
    if cfg.backend == "nccl":
        lines.append(f"# expected busbw: {meta['expected'] or 'no topology for this group (give --topology)'}")
    if ctx and len(ctx.nodes) > 1:
        lines.append(f"# {len(ctx.nodes)} nodes: " + "; ".join(f"{h}: ranks {','.join(map(str, r))}"
                                                          for h, r in ctx.nodes.items())
                     + " -- every row below is inter-node")
    if records and records[0].get("algo", "auto") != "auto":
        lines.append(f"# NCCL_ALGO={records[0]['algo']}")
    lines += [f"# {n}" for n in meta["notes"]]
    for line in lines:
        console.print(Text(line, style="dim"))
    table = Table(box=None, pad_edge=False, header_style="bold")
    cols = [("size", "(B)"), ("count", "(elements)"), ("type", ""), ("op", ""), ("time", "(us)"),
            ("algbw", "(GB/s)"), ("busbw", "(GB/s)"), ("#wrong", ""), ("expected", "(%)")]
    for name, _ in cols:
        table.add_column(name, justify="left" if name in ("type", "op") else "right", no_wrap=True)
    table.add_row(*[Text(u, style="dim") for _, u in cols])
    for r in records:
        pct = r.get("expected_pct")
        exp = "-" if pct is None else f"{pct:.0f}% of {r['expected_busbw_gbps']:.3g}" + (" !" if r["flagged"] else "")
        style = "red" if r["wrong"] else ("yellow" if r["flagged"] else None)
        table.add_row(str(r["bytes"]), str(r["count"]), r["dtype"], r["op"], f"{r['time_s'] * 1e6:.1f}",
                      f"{r['algbw_gbps']:.2f}", f"{r['busbw_gbps']:.2f}", str(r["wrong"]), exp, style=style)
    console.print(table)
    wrong = sum(r["wrong"] for r in records)
    console.print(Text(f"# Out of bounds values : {wrong} {'OK' if wrong == 0 else 'FAILED'}",
                       style="dim" if wrong == 0 else "red"))
    if records:
        avg = sum(r["busbw_gbps"] for r in records) / len(records)
        console.print(Text(f"# Avg bus bandwidth    : {avg:.3f} GB/s", style="dim"))
    if ctx and ctx.causes:
        console.print(Text(f"# rows marked ! reach under {coll.FLAG_BELOW_PCT:.0f}% of the expected busbw; likely causes:",
                           style="yellow"))
        for cause in ctx.causes:
            console.print(Text(f"#   - {cause}", style="yellow"))
    if cfg.out:
        console.print(Text(f"# records appended to {cfg.out}", style="dim"))


def render_matrix(console, pairs, plot) -> None:
    from rich.table import Table

    from topowise.measure.p2p import matrix

    for method in ("copy", "nccl", "gloo"):
        for mode in ("uni", "bi"):
            gpus, grid = matrix(pairs, method, mode)
            if not gpus:
                continue
            console.print(f"# {method} {'unidirectional' if mode == 'uni' else 'bidirectional'} GB/s "
                          "(row: source GPU, column: destination GPU)")
            table = Table(box=None)
            table.add_column("src\\dst", justify="right")
            for g in gpus:
                table.add_column(str(g), justify="right")
            for g, row in zip(gpus, grid):
                table.add_row(str(g), *["-" if v is None else f"{v:.1f}" for v in row])
            console.print(table)
    if plot:
        console.print(f"# heatmap: {plot}")


# --- small helpers ----------------------------------------------------------------------------------
def _human(nbytes: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= size and nbytes % size == 0:
            return f"{nbytes // size} {unit}"
    return f"{nbytes} B"


def _visible_gpus(count: int) -> tuple[int, ...]:
    """Physical GPU index of each local rank (CUDA_VISIBLE_DEVICES when it lists indices)."""
    text = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    try:
        listed = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:  # UUIDs: keep local indices
        listed = ()
    return listed[:count] if listed else tuple(range(count))


def _plot_path(args) -> str:
    if args.plot:
        return args.plot
    if args.out:
        base = args.out[:-6] if args.out.endswith(".jsonl") else args.out
        return base + ".matrix.png"
    return "topowise-p2p-matrix.png"


def _shared_log_dir() -> str:
    """Inside a user's torchrun/srun job every rank must agree on where NCCL writes its log."""
    run_id = (os.environ.get("TORCHELASTIC_RUN_ID") or os.environ.get("SLURM_JOB_ID", "")
              + "." + os.environ.get("SLURM_STEP_ID", "") or os.environ.get("MASTER_PORT", "0"))
    path = os.path.join(tempfile.gettempdir(), f"topowise-nccl-{run_id}")
    os.makedirs(path, exist_ok=True)
    return path


def _read_json(path: str):
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None
