"""`topowise validate`: predicted vs measured on cases calibration did not use.

The cases, measuring, comparison and plot are in the topowise.calibrate package; this module checks flags
and renders.
"""

from __future__ import annotations

import argparse
import json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--profile", metavar="FILE", default=None,
                        help="the profile to validate (default: the cached one of this machine)")
    parser.add_argument("--force-profile", action="store_true",
                        help="use --profile even when it was calibrated on another machine")
    parser.add_argument("--device", choices=("cuda", "cpu"), default=None,
                        help="cuda (default when NVML sees GPUs) or cpu (gloo)")
    parser.add_argument("--nproc", type=int, default=None, help="processes (default: every visible GPU; 2 on cpu)")
    parser.add_argument("--out", metavar="FILE.jsonl", default="validation.jsonl",
                        help="one JSON line per case (default validation.jsonl); raw runs go to FILE-records/")
    parser.add_argument("--plot", metavar="PNG", default=None, help="scatter plot (default: FILE.png next to --out)")
    parser.add_argument("--no-plot", action="store_true", help="no scatter plot")
    parser.add_argument("--measured", metavar="FILE.jsonl", default=None,
                        help="compare these recorded training runs (bench train / validate records) "
                             "instead of measuring")
    parser.add_argument("--topology", metavar="T", default=None,
                        help="with --measured: the topology they ran on "
                             "(default: the records' meta.json, else this machine)")
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="seconds without progress before a measuring run is stopped (default 300)")
    parser.add_argument("--json", action="store_true", help="print the cases and the summary as JSON")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from topowise.calibrate.launch import META_FILE
    from topowise.calibrate.validate import validate
    from topowise.cli.calibrate import default_device_and_nproc
    from topowise.costmodel.profile import load_profile
    from topowise.costmodel.profile_store import (
        check_profile_for_gpu,
        check_profile_for_machine,
        find_cached_profile,
        machine_fingerprint,
    )
    from topowise.errors import UsageError

    if args.timeout <= 0:
        raise UsageError(f"--timeout must be a positive number of seconds, not {args.timeout:g}")
    topology = None
    if args.measured:
        device, nproc = args.device or "cuda", 0
        meta = Path(args.measured).with_name(META_FILE)
        if args.topology:
            from topowise.topology import load_topology

            topology = load_topology(args.topology)
        elif meta.is_file():
            from topowise.topology.model import Topology

            topology = Topology.from_dict(json.loads(meta.read_text())["topology"], str(meta))
    else:
        device, nproc = default_device_and_nproc(args.device, args.nproc)
    if args.profile:
        profile, where = load_profile(args.profile), args.profile
    else:
        found = find_cached_profile() if device == "cuda" else None
        if not found:
            raise UsageError("no --profile given and no cached profile for this machine: run `topowise calibrate` "
                             "first, or pass --profile FILE")
        profile, where = found[0], str(found[1])
    if args.measured:  # recorded elsewhere, perhaps: the profile must be of the GPU the records ran on
        gpu = topology.gpus[0].name if topology is not None else None
        if gpu:
            check_profile_for_gpu(profile, gpu, where, args.force_profile)
    else:
        check_profile_for_machine(profile, machine_fingerprint(device), where, args.force_profile)
    progress = None if args.json else (lambda line: print(line, flush=True))
    result = validate(profile=profile, device=device, nproc=nproc, out=args.out, plot=args.plot,
                      make_plot=not args.no_plot, measured=args.measured, timeout_s=args.timeout,
                      progress=progress, topology=topology)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        render(result, where)
    return 0


def _pct(value) -> str:
    return "-" if value is None else f"{100 * value:+.1f}%"


def render(result, where: str) -> None:
    from rich.console import Console
    from rich.table import Table

    from topowise.calibrate.validate import meets_target
    from topowise.units import GIB

    console = Console()
    if not console.is_terminal:
        console = Console(width=140)
    table = Table(title=f"Predicted vs measured ({where})", show_edge=False)
    for col in ("case", "fabric", "pred ms", "meas ms", "error", "pred GiB", "meas GiB", "error"):
        table.add_column(col, justify="left" if col in ("case", "fabric") else "right")
    fmt = lambda v, scale, spec: "-" if v is None else spec.format(v * scale)
    for r in result.rows:
        c = r.case
        name = f"{c.model} {c.strategy} mb{c.micro_batch} seq{c.seq_len}" + (
            " ac" if c.activation_checkpointing else "")
        if r.status != "ok":
            name += f" [red]{r.status}[/]"
        step_style = "red" if r.step_error is not None and abs(r.step_error) > 0.10 else ""
        mem_style = "red" if r.memory_error is not None and abs(r.memory_error) > 0.10 else ""
        table.add_row(name, c.fabric, fmt(r.predicted_step_s, 1e3, "{:.1f}"), fmt(r.measured_step_s, 1e3, "{:.1f}"),
                      f"[{step_style}]{_pct(r.step_error)}[/]" if step_style else _pct(r.step_error),
                      fmt(r.predicted_alloc, 1 / GIB, "{:.2f}"), fmt(r.measured_alloc, 1 / GIB, "{:.2f}"),
                      f"[{mem_style}]{_pct(r.memory_error)}[/]" if mem_style else _pct(r.memory_error))
    console.print(table)
    s = result.summary
    abs_pct = lambda v: "-" if v is None else f"{100 * v:.1f}%"
    console.print(f"step time: mean abs error {abs_pct(s['step_time']['mean_abs_error'])}, max "
                  f"{abs_pct(s['step_time']['max_abs_error'])} ({s['step_time']['worst_case'] or '-'}); "
                  f"peak allocated memory: mean {abs_pct(s['peak_memory']['mean_abs_error'])}, max "
                  f"{abs_pct(s['peak_memory']['max_abs_error'])} ({s['peak_memory']['worst_case'] or '-'})")
    for bound, words in (("gpu", "GPU-bound (no host wait predicted)"), ("host", "host-bound in some phase")):
        b = s.get("by_bound", {}).get(bound)
        if b and b["cases"]:
            console.print(f"  {words}: {b['cases']} cases, step time mean abs error {abs_pct(b['mean_abs_error'])}, "
                          f"max {abs_pct(b['max_abs_error'])}")
    for g in s["ranking"]:
        grp = g["group"]
        mark = "[green]ok[/]" if g["ok"] else "[red]MISS[/]"
        console.print(f"ranking {grp['model']} mb{grp['micro_batch']} seq{grp['seq_len']} {grp['fabric']}: predicted "
                      f"first {g['predicted_first']}, measured fastest {g['measured_fastest']} "
                      f"({100 * g['slower_by']:.1f}% slower) {mark}")
    for u in s.get("unsteady", []):
        console.print(f"[yellow]unsteady: {u['case']} (timed steps spread {100 * u['step_spread']:.1f}%, not a "
                      f"steady step; error {_pct(u['step_error'])})[/]")
    for failed in s["failed"]:
        console.print(f"[yellow]not compared: {failed}[/]")
    for problem in s.get("problems", []):
        console.print(f"[red]{problem}[/]")
    if result.rows:
        target = meets_target(s)
        console.print("target: " + ", ".join(f"{k} {'[green]yes[/]' if v else '[red]no[/]'}"
                                             for k, v in target.items()))
    if result.out:
        console.print(f"per case: {result.out}")
    if result.plot:
        console.print(f"scatter: {result.plot}")
    console.print(f"measured runs: {result.measured_path}"
                  + (f" (re-evaluate with --measured {result.measured_path})" if result.elapsed_s is not None else ""))
    if result.elapsed_s is not None:
        console.print(f"validation took {result.elapsed_s:.0f} s")
