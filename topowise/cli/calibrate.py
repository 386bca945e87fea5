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
    parser.add_argument("--only", choices=("encryption",), default=None,
                        help="measure one thing only, without GPUs or torch: encryption = AES-256-GCM and "
                             "ChaCha20-Poly1305 GB/s per host core (~1 s), added to the --out profile (updated in "
                             "place when it exists), else to this machine's cached profile")
    parser.add_argument("--compile", action="store_true",
                        help="also measure compiled twins of some GPU cases and fit the compiled terms "
                             "(elementwise traffic, host per block, compile time); by estimate 1.5 minutes more")
    parser.add_argument("--design", action="store_true",
                        help="the designed calibration (four Llama-style shapes that vary vocabulary, tying, width, "
                             "depth, GQA, micro-batch, sequence and fabric; docs/calibration.md) in place of the "
                             "two presets")
    parser.add_argument("--keep-poor-fit", action="store_true",
                        help="cache the profile even when its fit misses its own runs by more than 25%% rms "
                             "(by default such a profile is written to --out only)")
    parser.add_argument("--json", action="store_true", help="print the profile and the fit report as JSON")


def default_device_and_nproc(device: str | None, nproc: int | None) -> tuple[str, int]:
    """--device / --nproc defaults: cuda with every visible GPU when NVML sees some, else this CPU with
    two gloo processes (said on stderr), as bench train does, so `calibrate && validate` runs anywhere."""
    import os
    import sys

    from topowise.costmodel.profile_store import gpu_inventory
    from topowise.errors import UsageError

    if device == "cpu":
        return "cpu", 2 if nproc is None else nproc
    inv = gpu_inventory()
    if inv is None:
        if device == "cuda":
            raise UsageError("--device cuda, but NVML sees no GPUs here: run on the GPU machine, or use --device cpu")
        sys.stderr.write("topowise: no GPUs visible through NVML: measuring this CPU with gloo (--device cpu)\n")
        return "cpu", 2 if nproc is None else nproc
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

    check_out_folder(args.out)
    if args.only == "encryption":
        return run_encryption(args)
    check_flags(args)
    device, nproc = run_device(args)
    check_gpu_flags(args, device)
    fit_names = parse_fit_names(args.fit)
    progress = None if args.json else print_progress
    if progress and not args.from_records:
        progress(start_line(device, nproc))
    result = calibrate(device=device, nproc=nproc, out=args.out, records=args.records, from_records=args.from_records,
                       use_cache=not args.no_cache, timeout_s=args.timeout, progress=progress, fit_names=fit_names,
                       design=args.design, compile=args.compile, keep_poor_fit=args.keep_poor_fit)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        render(result)
    for warning in result.report.get("warnings", []):
        sys.stderr.write(f"topowise: warning: {warning}\n")
    return 1 if result.report.get("problems") else 0


def run_device(args: argparse.Namespace) -> tuple[str, int]:
    """(device, nproc): the records' (as given; they say the rest) or this machine's."""
    if args.from_records:
        return args.device or "cuda", args.nproc or 0
    return measuring_device(args)


def print_progress(line: str) -> None:
    print(line, flush=True)


def check_flags(args: argparse.Namespace) -> None:
    """A timeout that is no time; --records (where a run writes) beside --from-records (what is read)."""
    from topowise.errors import UsageError

    if args.timeout <= 0:
        raise UsageError(f"--timeout must be a positive number of seconds, not {args.timeout:g}")
    if args.from_records and args.records:
        raise UsageError("--records names where a measuring run writes; --from-records reads one: give one of them")


def measuring_device(args: argparse.Namespace) -> tuple[str, int]:
    """(device, nproc) of a run that measures this machine: two processes or more (the collectives), torch."""
    from topowise.errors import UsageError
    from topowise.measure.launcher import require_torch

    device, nproc = default_device_and_nproc(args.device, args.nproc)
    if nproc < 2:
        raise UsageError(f"calibration measures collectives and needs two or more processes, not --nproc {nproc}")
    require_torch("calibrate", "--from-records DIR fits the records of an earlier run without it")
    return device, nproc


def check_gpu_flags(args: argparse.Namespace, device: str) -> None:
    """--compile and --design change what is measured on GPUs: refused when reading records or on the CPU."""
    from topowise.errors import UsageError

    on_gpus = not args.from_records and device == "cuda"
    asked = [flag for flag, given in (("--compile", args.compile), ("--design", args.design)) if given]
    if asked and not on_gpus:
        raise UsageError(f"{asked[0]} changes what calibrate measures on GPUs: it applies on a GPU machine, not with "
                         "--from-records (the records say what was run) or --device cpu")


def start_line(device: str, nproc: int) -> str:
    return (f"calibrating {device} with {nproc} processes: comm sweep and training steps "
            + ("(gloo)" if device == "cpu" else "per fabric"))


def check_out_folder(out: str | None) -> None:
    """--out goes into a folder that exists, before anything is measured: a typo in the folder is refused
    rather than made into new folders (or, for --out of a folder, into DIR.tmp beside it)."""
    from pathlib import Path

    from topowise.errors import UsageError

    if out is None:
        return
    path = Path(out)
    if path.is_dir():
        raise UsageError(f"--out {out} is a folder: give the profile's file name, e.g. {path / 'profile.json'}")
    folder = path.parent
    if not folder.is_dir():
        raise UsageError(f"--out {out}: " + (f"{folder} is a file, not a folder" if folder.exists() else
                                             f"no folder {folder} (create it first)"))


def run_encryption(args: argparse.Namespace) -> int:
    from topowise.calibrate.driver import calibrate_encryption
    from topowise.errors import UsageError

    for flag, value in (("--from-records", args.from_records), ("--fit", args.fit), ("--nproc", args.nproc)):
        if value:
            raise UsageError(f"--only encryption measures this host's CPU alone: drop {flag}")
    result = calibrate_encryption(out=args.out, records=args.records, use_cache=not args.no_cache)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
        return 0
    from rich import box
    from rich.table import Table

    from topowise.cli.console import column
    from topowise.cli.console import console as make_console

    console = make_console()
    first = result.records[0]
    console.print(f"[bold]Encryption rate per core[/]: {first['cpu']}, one thread, "
                  f"{first['buffer_bytes'] / 2**20:g} MiB buffers; cryptography {first['cryptography']}, "
                  f"{first['openssl']}", highlight=False)
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0), pad_edge=False, show_edge=False)
    for name, justify in (("cipher", "left"), ("algorithm", "left"), ("GB/s per core", "right"),
                          ("bursts min..max", "right")):
        column(table, name, justify=justify)
    for r in result.records:
        table.add_row(r["cipher"], r["algorithm"], f"{r['gbps']:.2f}", f"{r['gbps_min']:.2f}..{r['gbps_max']:.2f}")
    console.print(table)
    if result.profile_path:
        console.print(f"added to {result.base}: {result.profile_path}", highlight=False)
    else:
        console.print("no profile written (no --out, and no cached profile of this machine): give --out "
                      "PROFILE.json to keep the rates, then --profile PROFILE.json", highlight=False)
    return 0


def source_kind(source: str) -> str:
    """A profile value's source in two words; the whole sentence stays in the profile's `sources`."""
    if source.startswith("calibrated"):
        return "fitted here"
    if source.startswith("not identified"):
        return "kept: not identified"
    if source.startswith("not calibrated"):
        return "kept: not measured"
    return "default"


def render(result) -> None:
    from topowise.cli.console import console as make_console
    from topowise.report.comparison import comparison_tables

    console = make_console()
    p, rep = result.profile, result.report
    device = profile_device(p)
    rows, kept = profile_rows(p)
    console.print(f"[bold]Calibrated profile[/]: {p.fingerprint}", highlight=False)
    console.print(profile_table(rows, p.sources))
    console.print(sources_line(kept), highlight=False)
    print_lines(console, fit_lines(rep))
    if rep.get("gpu_clocks"):  # the fitted GPU rates carry the clock these runs had
        console.print(clocks_line(rep["gpu_clocks"]), highlight=False)
    print_lines(console, comparison_tables("Calibration runs with the fitted profile", "run",
                                           run_rows(rep.get("runs_detail") or []), device))
    print_lines(console, left_out_lines(rep, device))
    print_lines(console, path_lines(result))
    sys.stdout.flush()


def print_lines(console, lines, **options) -> None:
    for line in lines:
        console.print(line, **options)


def profile_device(profile) -> str:
    from topowise.costmodel.profile_store import parse_fingerprint

    return parse_fingerprint(profile.fingerprint).get("device", "cuda")


def profile_rows(profile) -> tuple[list[tuple[str, str]], int]:
    """(parameter, value) rows of the profile, and how many link/op pairs keep their defaults: only the pairs
    calibrated here have rows (the others are a link class this machine does not have, or an op not measured)."""
    p = profile
    rows = [("compute_efficiency", f"{p.compute_efficiency:.3f}"), ("hbm_efficiency", f"{p.hbm_efficiency:.3f}"),
            ("peak_flops", f"{p.peak_flops:.4g}"),
            ("activation_scale", f"{p.activation_scale:.3f}"), ("allocator_slack", f"{p.allocator_slack:.3f}")]
    rows += [(f"overlap.{s}", f"{v:.3f}") for s, v in p.overlap.items()]
    rows += [(f"encryption_gbps_per_core.{c}", f"{v:.2f} GB/s") for c, v in p.encryption_gbps_per_core.items()]
    calibrated = [k for k in sorted(p.comm_efficiency)
                  if p.sources.get(f"comm_efficiency.{k}", "").startswith("calibrated")]
    for key in calibrated:
        rows.append((f"comm_efficiency.{key}", f"{p.comm_efficiency[key]:.3f}"))
        rows.append((f"latency_s.{key}", f"{p.latency_s[key] * 1e6:.1f} us"))
    return rows, len(p.comm_efficiency) - len(calibrated)


def profile_table(rows: list[tuple[str, str]], sources: dict):
    """The profile's values, each with its source in two words; the values kept from the defaults dimmed."""
    from rich import box
    from rich.table import Table

    from topowise.cli.console import column

    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0), pad_edge=False, show_edge=False)
    column(table, "parameter")
    column(table, "value", justify="right")
    column(table, "source")
    for name, value in rows:
        kind = source_kind(sources.get(name, ""))
        table.add_row(name, value, kind, style=None if kind == "fitted here" else "dim")
    return table


def sources_line(kept: int) -> str:
    return ("what each value was fitted from, with the numbers: the profile's \"sources\""
            + (f"; {kept} link/op pairs not measured here keep their defaults" if kept else ""))


def fit_lines(report: dict) -> list[str]:
    """How closely the step-time and memory fits meet the runs they were fitted to."""
    lines = []
    for key, words in (("step_time", "step-time"), ("memory", "memory")):
        fit = report.get(key) or {}
        if fit.get("observations"):
            lines.append(f"{words} fit over {fit['observations']} runs: rms error {100 * fit['rms_error']:.1f}%, "
                         f"worst {100 * fit['max_error']:.1f}%")
    return lines


def clocks_line(clocks: dict) -> str:
    from topowise.measure.gpu_clocks import describe_clocks

    return f"GPU clocks over the {clocks['runs']} training runs: {describe_clocks(clocks)}"


def run_rows(detail: list[dict]) -> list[tuple]:
    """The calibration runs' table rows: each run predicted with the fitted profile beside what it measured."""
    return [(d["fabric"], f"{d['model']} {d['strategy']} mb{d['micro_batch']} seq{d['seq_len']}",
             d["predicted"]["step_time_s"], d["measured"]["step_time_s"], d["step_time_error"],
             d["predicted"]["allocated_bytes"], d["measured"]["peak_memory_bytes"], d["peak_memory_error"])
            for d in detail]


def left_out_lines(report: dict, device: str) -> list[str]:
    """The runs the fit did not use, or used only for the host terms, and the measuring's problems."""
    from topowise.report.comparison import run_words

    lines = [f"[yellow]run not used: {run_words(failed, device)}[/]" for failed in report.get("failed", [])]
    if report.get("host_bound"):
        lines.append("host seconds per block fitted from the host-bound runs (left out of the GPU-rate fit): "
                     + run_words(", ".join(report["host_bound"]), device))
    lines += [f"[yellow]run left out of the step-time fit (timed steps not steady): {run_words(u, device)}[/]"
              for u in report.get("unsteady", [])]
    return lines + [f"[red]{problem}[/]" for problem in report.get("problems", [])]


def path_lines(result) -> list[str]:
    """How long it took, where the profile went (and its cached copy), and the raw records to re-fit."""
    lines = []
    if result.elapsed_s is not None:
        measuring = result.report.get("measure_s") or 0
        lines.append(f"calibration took {result.elapsed_s:.0f} s (measuring {measuring:.0f} s)")
    cached = result.cache_path and result.cache_path != result.profile_path
    lines.append(f"profile: {result.profile_path}" + (f" (cached: {result.cache_path})" if cached else "")
                 if result.profile_path else "profile: not written (see the warning below)")
    lines.append(f"raw records: {result.records_dir} (re-fit with --from-records {result.records_dir})")
    return lines
