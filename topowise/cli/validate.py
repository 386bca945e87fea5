"""`topowise validate`: predicted vs measured on cases calibration did not use.

The cases, measuring, comparison and plot are in the topowise.calibrate package; this module checks flags
and renders.
"""

from __future__ import annotations

import argparse
import json
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--profile", metavar="FILE", default=None,
                        help="the profile to validate (default: the cached one of this machine; 'default': the "
                             "built-in profile, as predict uses without calibrate)")
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
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when the accuracy target is missed (any item of the `target:` line is no)")
    parser.add_argument("--compile", action="store_true",
                        help="also measure compiled twins of the GPU cases (torch.compile of each block)")
    parser.add_argument("--design", action="store_true",
                        help="the designed validation: 33 cases (41 with --compile) of shapes the designed "
                             "calibration never runs, micro-batches 1-8, both fabrics (calibrate/design.py)")
    parser.add_argument("--overwrite", action="store_true",
                        help="measure again into a records folder that already holds measurements (they are deleted)")
    parser.add_argument("--json", action="store_true", help="print the cases and the summary as JSON")


def run(args: argparse.Namespace) -> int:
    from topowise.calibrate.validate import validate

    check_flags(args)
    device, nproc, topology = recorded_setup(args) if args.measured else measuring_setup(args)
    check_measuring_flags(args, device)
    profile, where = chosen_profile(args.profile, device)
    check_profile_origin(profile, where, args, device, topology)
    result = validate(profile=profile, device=device, nproc=nproc, out=args.out, plot=args.plot,
                      make_plot=not args.no_plot, measured=args.measured, timeout_s=args.timeout,
                      progress=None if args.json else print_progress, topology=topology, design=args.design,
                      compile=args.compile, overwrite=args.overwrite)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        render(result, where, device)
    return exit_status(result, args.check)


def print_progress(line: str) -> None:
    print(line, flush=True)


def check_flags(args: argparse.Namespace) -> None:
    """The flags refused before anything is read: a timeout that is no time, a topology with nothing recorded."""
    from topowise.errors import UsageError

    if args.timeout <= 0:
        raise UsageError(f"--timeout must be a positive number of seconds, not {args.timeout:g}")
    if args.topology and not args.measured:
        raise UsageError("--topology describes where --measured records ran; a new run measures this machine: "
                         "add --measured FILE or drop --topology")


def recorded_setup(args: argparse.Namespace) -> tuple:
    """(device, nproc, topology) of --measured records: the device says which cached profile; the topology is
    --topology, else the records' meta.json, else None (this machine)."""
    from pathlib import Path

    from topowise.calibrate.launch import META_FILE

    check_measured_file(args.measured)  # before the profile: its absence is not what is wrong
    meta = Path(args.measured).with_name(META_FILE)
    meta_doc = json.loads(meta.read_text()) if meta.is_file() else {}
    device = args.device or meta_doc.get("device") or "cuda"
    return device, 0, records_topology(args.topology, meta_doc, str(meta))


def check_measured_file(measured: str) -> None:
    from pathlib import Path

    from topowise.errors import UsageError

    path = Path(measured)
    if not path.is_file():
        raise UsageError(f"--measured {measured}: " + ("a folder" if path.is_dir() else "no such file")
                         + "; give the records JSONL that `bench train` or `validate` wrote")


def records_topology(name: str | None, meta_doc: dict, meta_path: str):
    if name:
        from topowise.topology import load_topology

        return load_topology(name)
    if meta_doc:
        from topowise.topology.model import Topology

        return Topology.from_dict(meta_doc["topology"], meta_path)
    return None


def measuring_setup(args: argparse.Namespace) -> tuple:
    """(device, nproc, None) of a run that measures this machine (torch needed)."""
    from topowise.cli.calibrate import default_device_and_nproc
    from topowise.measure.launcher import require_torch

    device, nproc = default_device_and_nproc(args.device, args.nproc)
    require_torch("validate", "--measured FILE.jsonl compares recorded runs without it")
    return device, nproc, None


def check_measuring_flags(args: argparse.Namespace, device: str) -> None:
    """--compile, --overwrite and --design change what is measured: refused where nothing is, or not on GPUs."""
    from topowise.errors import UsageError

    on_gpus = not args.measured and device == "cuda"
    if args.compile and not on_gpus:
        raise UsageError("--compile adds compiled GPU cases to what validate measures: it applies on a GPU machine, "
                         "not with --measured (whose records say whether they were compiled) or --device cpu")
    if args.overwrite and args.measured:
        raise UsageError("--overwrite measures again over an earlier run's records; --measured measures nothing")
    if args.design and not on_gpus:
        raise UsageError("--design chooses the GPU cases validate measures: it applies on a GPU machine, not with "
                         "--measured (the records are the cases) or --device cpu")


def chosen_profile(name: str | None, device: str) -> tuple:
    """(profile, where it came from) for --profile: 'default', a file, or the one cached for this machine."""
    from topowise.costmodel.profile import default_profile, load_profile
    from topowise.errors import UsageError

    if name == "default":  # the built-in profile: what predict and plan use without calibrate
        return default_profile(), "the default profile"
    if name:
        return load_profile(name), name
    found = cached_profile(device)
    if not found:
        raise UsageError(f"no --profile given and no cached profile for this machine's {device}: run "
                         f"`topowise calibrate{' --device cpu' if device == 'cpu' else ''}` first, "
                         "or pass --profile FILE")
    return found[0], str(found[1])


def check_profile_origin(profile, where: str, args: argparse.Namespace, device: str, topology) -> None:
    """The profile must be of this machine, or for --measured records (made elsewhere, perhaps) of their GPU."""
    from topowise.costmodel.profile_store import check_profile_for_gpu, check_profile_for_machine, machine_fingerprint

    if not args.measured:
        check_profile_for_machine(profile, machine_fingerprint(device), where, args.force_profile)
        return
    gpu = topology.gpus[0].name if topology is not None else None
    if gpu:
        check_profile_for_gpu(profile, gpu, where, args.force_profile)


def exit_status(result, check: bool) -> int:
    """1 when a fabric's measuring failed (the comparison is short of cases, as calibrate) or, with --check,
    when the accuracy target is missed."""
    if result.summary.get("problems"):
        return 1
    missed = missed_targets(result) if check else []
    if missed:
        sys.stderr.write(f"topowise: the accuracy target is missed ({', '.join(missed)}): exit status 1 (--check)\n")
        return 1
    return 0


def missed_targets(result) -> list[str]:
    from topowise.calibrate.validate import meets_target

    if not result.rows:
        return ["no case"]
    return [k for k, ok in meets_target(result.summary).items() if not ok]


def cached_profile(device: str):
    """(profile, path) cached by `calibrate` for this machine's GPUs (cuda) or CPU (cpu), or None."""
    from topowise.costmodel.profile import load_profile
    from topowise.costmodel.profile_store import cache_path, find_cached_profile, fingerprint_text, machine_fingerprint
    from topowise.errors import UsageError

    if device == "cuda":
        return find_cached_profile()
    path = cache_path(fingerprint_text(machine_fingerprint("cpu")))
    if not path.is_file():
        return None
    try:
        return load_profile(path), path
    except UsageError:  # a damaged cache file: as if there were none
        return None


def target_item(item: str, ok: bool, summary: dict) -> str:
    """One item of a `target:` line; an item about GPU- or host-bound cases says so when there are none
    (a vacuous yes would read as measured and met)."""
    for bound in ("gpu", "host"):
        words = "GPU-bound" if bound == "gpu" else "host-bound"
        if item.startswith(words) and not summary.get("by_bound", {}).get(bound, {}).get("cases"):
            return f"{item}: [yellow]no {words} case measured[/]"
    return f"{item} {'[green]yes[/]' if ok else '[red]no[/]'}"


def render(result, where: str, device: str) -> None:
    from topowise.cli.console import console as make_console
    from topowise.report.comparison import comparison_tables

    console = make_console()
    s = result.summary
    print_lines(console, comparison_tables("Predicted vs measured", "case", case_rows(result.rows), device))
    console.print(f"profile: {where}", highlight=False)
    console.print(error_line(s, device))
    print_bound_lines(console, s.get("by_bound", {}), device)
    if s.get("gpu_clocks"):
        console.print(clocks_line(s["gpu_clocks"]), highlight=False)
    print_lines(console, ranking_lines(s["ranking"], device))
    print_lines(console, dimension_lines(result.rows, s), highlight=False, markup=False)
    print_lines(console, warning_lines(s, device))
    print_lines(console, target_lines(s) if result.rows else [])
    print_lines(console, path_lines(result))


def print_lines(console, lines, **options) -> None:
    for line in lines:
        console.print(line, **options)


def case_rows(rows) -> list[tuple]:
    """The comparison table's rows: a case's name (its fabric has its own column; a failed case says how)."""
    return [(r.case.fabric, case_name(r), r.predicted_step_s, r.measured_step_s, r.step_error, r.predicted_alloc,
             r.measured_alloc, r.memory_error) for r in rows]


def case_name(row) -> str:
    name = row.case.words(fabric=False)
    return name if row.status == "ok" else f"{name} [red]{row.status}[/]"


def abs_pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def error_line(summary: dict, device: str) -> str:
    """Step time's and peak memory's mean and worst absolute errors, each with its worst case."""
    from topowise.report.comparison import run_words

    step, memory = summary["step_time"], summary["peak_memory"]
    worst = {k: run_words(summary[k]["worst_case"] or "-", device) for k in ("step_time", "peak_memory")}
    memory_words = (f"mean {abs_pct(memory['mean_abs_error'])}, max {abs_pct(memory['max_abs_error'])} "
                    f"({worst['peak_memory']})" if memory["cases"] else "not measured (no allocator statistics)")
    return (f"step time: mean abs error {abs_pct(step['mean_abs_error'])}, max {abs_pct(step['max_abs_error'])} "
            f"({worst['step_time']}); peak allocated memory: {memory_words}")


BOUND_WORDS = (("gpu", "GPU-bound (no host wait predicted)"), ("host", "host-bound in some phase"))


def print_bound_lines(console, by_bound: dict, device: str) -> None:
    """The GPU-bound and host-bound cases' errors, each with how many fell inside the host's spread."""
    for bound, words in BOUND_WORDS:
        b = by_bound.get(bound) or {}
        if b.get("cases"):
            console.print(f"  {words}: {b['cases']} cases, step time mean abs error {abs_pct(b['mean_abs_error'])}, "
                          f"max {abs_pct(b['max_abs_error'])}")
        if b.get("in_range"):
            console.print(in_range_line(b["in_range"], device), highlight=False)


def in_range_line(in_range: dict, device: str) -> str:
    from topowise.report.comparison import run_words

    outside = ", ".join(run_words(c, device) for c in in_range["outside"])
    return (f"    {in_range['inside']} of {in_range['cases']} inside the range the host's spread gives"
            + (f"; outside: {outside}" if outside else ""))


def clocks_line(clocks: dict) -> str:
    from topowise.measure.gpu_clocks import describe_clocks

    return f"GPU clocks over the {clocks['runs']} measured runs: {describe_clocks(clocks)}"


def ranking_lines(ranking: list[dict], device: str) -> list[str]:
    """Per group of cases: the strategy predicted first against the one measured fastest."""
    from topowise.measure.records import fabric_label

    lines = []
    for g in ranking:
        grp = g["group"]
        mark = "[green]ok[/]" if g["ok"] else "[red]MISS[/]"
        lines.append(f"ranking {grp['model']} mb{grp['micro_batch']} seq{grp['seq_len']} "
                     f"{fabric_label(grp['fabric'], device)}: predicted first {g['predicted_first']}, measured "
                     f"fastest {g['measured_fastest']} ({100 * g['slower_by']:.1f}% slower) {mark}")
    return lines


def warning_lines(summary: dict, device: str) -> list[str]:
    """The cases not to trust (unsteady), not compared (failed), and the measuring's problems."""
    from topowise.report.comparison import run_words, signed_pct

    return ([f"[yellow]unsteady: {run_words(u['case'], device)} (timed steps spread {100 * u['step_spread']:.1f}%, "
             f"not a steady step; error {signed_pct(u['step_error'])})[/]" for u in summary.get("unsteady", [])]
            + [f"[yellow]not compared: {run_words(failed, device)}[/]" for failed in summary["failed"]]
            + [f"[red]{problem}[/]" for problem in summary.get("problems", [])])


def target_lines(summary: dict) -> list[str]:
    """The accuracy target's and the unseen-workload target's verdicts, item by item."""
    from topowise.calibrate.validate import meets_target, meets_unseen_target

    return [f"{label}: " + ", ".join(target_item(k, v, summary) for k, v in target.items())
            for label, target in (("target", meets_target(summary)), ("unseen-workload target",
                                                                      meets_unseen_target(summary)))]


def path_lines(result) -> list[str]:
    """Where the per-case lines, the plot and the measured runs are, and how long measuring took."""
    lines = [f"per case: {result.out}"] if result.out else []
    lines += [f"scatter: {result.plot}"] if result.plot else []
    measured = result.elapsed_s is not None  # measured now, not read back
    lines.append(f"measured runs: {result.measured_path}"
                 + (f" (re-evaluate with --measured {result.measured_path})" if measured else ""))
    lines += [f"validation took {result.elapsed_s:.0f} s"] if measured else []
    return lines


def dimension_lines(rows, summary: dict) -> list[str]:
    """Mesh runs under the profiler: exposed communication per mesh dimension, ms, predicted vs measured, a row
    per case and dimension, then each dimension's mean error (calibrate/dims.py says what each side counts)."""
    if not summary.get("by_dimension"):
        return []
    lines = ["exposed communication by mesh dimension (traced mesh runs), ms:",
             f"  {'case':<40}{'dim':>13}{'pred':>9}{'meas':>9}{'error':>9}"]
    for r in rows:
        for dim, p in r.by_dim.items():
            error = "-" if p["error"] is None else f"{100 * p['error']:+.1f}%"
            lines.append(f"  {r.case.words(fabric=False)[:40]:<40}{dim:>13}{1e3 * p['predicted']:9.2f}"
                         f"{1e3 * p['measured']:9.2f}{error:>9}")
    for dim, d in summary["by_dimension"].items():
        mean = "-" if d["mean_abs_error"] is None else f"{100 * d['mean_abs_error']:.1f}%"
        worst = "-" if d["max_abs_error"] is None else f"{100 * d['max_abs_error']:.1f}%"
        lines.append(f"  {dim}: {d['cases']} case{'s' if d['cases'] != 1 else ''}, mean abs error {mean}, max {worst}")
    return lines
