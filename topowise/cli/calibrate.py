"""`topowise calibrate`: measure this machine, fit the cost model's parameters, write a profile.

The measuring and fitting are in the topowise.calibrate package; this module checks flags and renders.
"""

from __future__ import annotations

import argparse
import json
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", choices=("cuda", "cpu"), default=None,
                        help="cuda (NCCL, default when NVML sees GPUs) or cpu (gloo: a profile of this CPU)")
    parser.add_argument("--nproc", type=int, default=None,
                        help="processes: GPUs to use (default: every visible GPU; 2 on cpu)")
    parser.add_argument("--out", metavar="PROFILE.json", default=None,
                        help="write the profile here too (it always goes to the cache unless --no-cache)")
    parser.add_argument("--records", metavar="DIR", default=None,
                        help="folder for the raw JSONL (default: next to the profile, PROFILE-records/)")
    parser.add_argument("--from-records", metavar="DIR", default=None,
                        help="fit the records of an earlier run in DIR; measure nothing")
    parser.add_argument("--fit", metavar="NAMES", default=None,
                        help="step-time parameters to fit, comma-separated (default: compute_efficiency, "
                             "activation_traffic (hbm_efficiency when the HBM passes were not measured) and "
                             "overlap.S for each strategy measured); e.g. with --from-records")
    parser.add_argument("--no-cache", action="store_true",
                        help="do not write the profile to the cache predict/plan/study look in")
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="seconds without progress before a measuring run is stopped (default 300)")
    parser.add_argument("--json", action="store_true", help="print the profile and the fit report as JSON")


def default_device_and_nproc(device: str | None, nproc: int | None) -> tuple[str, int]:
    """--device / --nproc defaults: cuda with every visible GPU when NVML sees some, else an error."""
    import os

    from topowise.costmodel.profile_store import gpu_inventory
    from topowise.errors import UsageError

    if device == "cpu":
        return "cpu", 2 if nproc is None else nproc
    inv = gpu_inventory()
    if inv is None:
        if device == "cuda":
            raise UsageError("--device cuda, but NVML sees no GPUs here: run on the GPU machine, or use --device cpu")
        raise UsageError("no GPUs visible through NVML: run on the GPU machine, or pass --device cpu "
                         "(a profile of this CPU, with gloo)")
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    count = len([v for v in visible.split(",") if v.strip()]) if visible else inv[1]
    return "cuda", count if nproc is None else nproc


def parse_fit_names(text: str | None) -> list[str] | None:
    from topowise.calibrate.fit import STEP_TIME_PARAMS
    from topowise.errors import UsageError
    from topowise.run import STRATEGY_NAMES

    if not text:
        return None
    valid = list(STEP_TIME_PARAMS) + [f"overlap.{s}" for s in STRATEGY_NAMES]
    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in valid]
    if bad or not names:
        raise UsageError(f"--fit {text!r}: unknown parameter(s) {', '.join(bad) or '(none given)'}; "
                         f"choose from {', '.join(valid)}")
    return names


def run(args: argparse.Namespace) -> int:
    from topowise.calibrate.driver import calibrate
    from topowise.errors import UsageError

    if args.timeout <= 0:
        raise UsageError(f"--timeout must be a positive number of seconds, not {args.timeout:g}")
    if args.from_records and args.records:
        raise UsageError("--records names where a measuring run writes; --from-records reads one: give one of them")
    if args.from_records:
        device, nproc = args.device or "cuda", args.nproc or 0
    else:
        device, nproc = default_device_and_nproc(args.device, args.nproc)
        if nproc < 2:
            raise UsageError(f"calibration measures collectives and needs two or more processes, not --nproc {nproc}")
    fit_names = parse_fit_names(args.fit)
    progress = None if args.json else (lambda line: print(line, flush=True))
    if progress and not args.from_records:
        progress(f"calibrating {device} with {nproc} processes: comm sweep and training steps per fabric")
    result = calibrate(device=device, nproc=nproc, out=args.out, records=args.records, from_records=args.from_records,
                       use_cache=not args.no_cache, timeout_s=args.timeout, progress=progress, fit_names=fit_names)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        render(result)
    return 1 if result.report.get("problems") else 0


def render(result) -> None:
    from rich.console import Console
    from rich.table import Table

    from topowise.units import GIB

    console = Console()
    if not console.is_terminal:
        console = Console(width=160)
    p, rep = result.profile, result.report
    table = Table(title=f"Calibrated profile: {p.fingerprint}", show_edge=False)
    table.add_column("parameter")
    table.add_column("value", justify="right")
    table.add_column("fitted from", overflow="fold")
    rows = [("compute_efficiency", f"{p.compute_efficiency:.3f}"), ("hbm_efficiency", f"{p.hbm_efficiency:.3f}"),
            ("peak_flops", f"{p.peak_flops:.4g}"),
            ("activation_scale", f"{p.activation_scale:.3f}"), ("allocator_slack", f"{p.allocator_slack:.3f}")]
    rows += [(f"overlap.{s}", f"{v:.3f}") for s, v in p.overlap.items()]
    kept = 0
    for key in sorted(p.comm_efficiency):
        if not p.sources.get(f"comm_efficiency.{key}", "").startswith("calibrated"):
            kept += 1  # a link class this machine does not have, or an op not measured
            continue
        rows.append((f"comm_efficiency.{key}", f"{p.comm_efficiency[key]:.3f}"))
        rows.append((f"latency_s.{key}", f"{p.latency_s[key] * 1e6:.1f} us"))
    for name, value in rows:
        source = p.sources.get(name, "")
        source = source if len(source) <= 150 else source[:147] + "..."  # whole in the profile JSON
        style = None if source.startswith("calibrated") else "dim"
        table.add_row(name, value, source, style=style)
    if kept:
        table.caption = f"{kept} link/op pairs not measured here keep their defaults (see the profile's sources)"
    console.print(table)
    st = rep.get("step_time") or {}
    if st.get("observations"):
        console.print(f"step-time fit over {st['observations']} runs: rms error {100 * st['rms_error']:.1f}%, "
                      f"worst {100 * st['max_error']:.1f}%")
    mem = rep.get("memory") or {}
    if mem.get("observations"):
        console.print(f"memory fit over {mem['observations']} runs: rms error {100 * mem['rms_error']:.1f}%, "
                      f"worst {100 * mem['max_error']:.1f}%")
    detail = rep.get("runs_detail") or []
    if detail:
        runs = Table(title="Calibration runs with the fitted profile", show_edge=False)
        for col in ("run", "fabric", "pred ms", "meas ms", "error", "pred GiB", "meas GiB", "error"):
            runs.add_column(col, justify="left" if col in ("run", "fabric") else "right")
        for d in detail:
            m, p_ = d["measured"], d["predicted"]
            fmt = lambda v, scale: "-" if v is None else f"{v * scale:.1f}" if scale == 1e3 else f"{v * scale:.2f}"
            pct = lambda v: "-" if v is None else f"{100 * v:+.1f}%"
            runs.add_row(f"{d['model']} {d['strategy']} mb{d['micro_batch']} seq{d['seq_len']}", d["fabric"],
                         fmt(p_["step_time_s"], 1e3), fmt(m["step_time_s"], 1e3), pct(d["step_time_error"]),
                         fmt(p_["allocated_bytes"], 1 / GIB), fmt(m["peak_memory_bytes"], 1 / GIB),
                         pct(d["peak_memory_error"]))
        console.print(runs)
    for failed in rep.get("failed", []):
        console.print(f"[yellow]run not used: {failed}[/]")
    if rep.get("host_bound"):
        console.print("host seconds per block fitted from the host-bound runs (left out of the GPU-rate fit): "
                      + ", ".join(rep["host_bound"]))
    for unsteady in rep.get("unsteady", []):
        console.print(f"[yellow]run left out of the step-time fit (timed steps not steady): {unsteady}[/]")
    for problem in rep.get("problems", []):
        console.print(f"[red]{problem}[/]")
    if result.elapsed_s is not None:
        console.print(f"calibration took {result.elapsed_s:.0f} s (measuring {rep.get('measure_s') or 0:.0f} s)")
    console.print(f"profile: {result.profile_path}" + (f" (cached: {result.cache_path})" if result.cache_path and
                                                       result.cache_path != result.profile_path else ""))
    console.print(f"raw records: {result.records_dir} (re-fit with --from-records {result.records_dir})")
    sys.stdout.flush()
