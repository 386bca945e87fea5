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
    from pathlib import Path

    from topowise.calibrate.launch import META_FILE
    from topowise.calibrate.validate import meets_target, validate
    from topowise.cli.calibrate import default_device_and_nproc
    from topowise.costmodel.profile import default_profile, load_profile
    from topowise.costmodel.profile_store import check_profile_for_gpu, check_profile_for_machine, machine_fingerprint
    from topowise.errors import UsageError
    from topowise.measure.launcher import require_torch

    if args.timeout <= 0:
        raise UsageError(f"--timeout must be a positive number of seconds, not {args.timeout:g}")
    topology = None
    if args.topology and not args.measured:
        raise UsageError("--topology describes where --measured records ran; a new run measures this machine: "
                         "add --measured FILE or drop --topology")
    if args.measured:
        if not Path(args.measured).is_file():  # before the profile: its absence is not what is wrong
            raise UsageError(f"--measured {args.measured}: " + ("a folder" if Path(args.measured).is_dir() else
                             "no such file") + "; give the records JSONL that `bench train` or `validate` wrote")
        meta = Path(args.measured).with_name(META_FILE)
        meta_doc = json.loads(meta.read_text()) if meta.is_file() else {}
        device, nproc = args.device or meta_doc.get("device") or "cuda", 0  # the records' device: which cache
        if args.topology:
            from topowise.topology import load_topology

            topology = load_topology(args.topology)
        elif meta_doc:
            from topowise.topology.model import Topology

            topology = Topology.from_dict(meta_doc["topology"], str(meta))
    else:
        device, nproc = default_device_and_nproc(args.device, args.nproc)
        require_torch("validate", "--measured FILE.jsonl compares recorded runs without it")
    if args.compile and (args.measured or device != "cuda"):
        raise UsageError("--compile adds compiled GPU cases to what validate measures: it applies on a GPU machine, "
                         "not with --measured (whose records say whether they were compiled) or --device cpu")
    if args.overwrite and args.measured:
        raise UsageError("--overwrite measures again over an earlier run's records; --measured measures nothing")
    if args.design and (args.measured or device != "cuda"):
        raise UsageError("--design chooses the GPU cases validate measures: it applies on a GPU machine, not with "
                         "--measured (the records are the cases) or --device cpu")
    if args.profile == "default":  # the built-in profile: what predict and plan use without calibrate
        profile, where = default_profile(), "the default profile"
    elif args.profile:
        profile, where = load_profile(args.profile), args.profile
    else:
        found = cached_profile(device)
        if not found:
            raise UsageError(f"no --profile given and no cached profile for this machine's {device}: run "
                             f"`topowise calibrate{' --device cpu' if device == 'cpu' else ''}` first, "
                             "or pass --profile FILE")
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
                      progress=progress, topology=topology, design=args.design, compile=args.compile,
                      overwrite=args.overwrite)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        render(result, where, device)
    if result.summary.get("problems"):
        return 1  # a fabric's measuring failed: the comparison is short of cases (as calibrate)
    if args.check:
        missed = [k for k, ok in meets_target(result.summary).items() if not ok] if result.rows else ["no case"]
        if missed:
            sys.stderr.write(f"topowise: the accuracy target is missed ({', '.join(missed)}): exit status 1 "
                             "(--check)\n")
            return 1
    return 0


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
    from topowise.calibrate.validate import meets_target, meets_unseen_target
    from topowise.cli.console import console as make_console
    from topowise.measure.records import fabric_label
    from topowise.report.comparison import comparison_tables, run_words, signed_pct

    console = make_console()
    rows = []
    for r in result.rows:
        c = r.case
        name = c.words(fabric=False)  # the fabric has its own column
        if r.status != "ok":
            name += f" [red]{r.status}[/]"
        rows.append((c.fabric, name, r.predicted_step_s, r.measured_step_s, r.step_error, r.predicted_alloc,
                     r.measured_alloc, r.memory_error))
    for table in comparison_tables("Predicted vs measured", "case", rows, device):
        console.print(table)
    console.print(f"profile: {where}", highlight=False)
    s = result.summary
    abs_pct = lambda v: "-" if v is None else f"{100 * v:.1f}%"
    worst = {k: run_words(s[k]["worst_case"] or "-", device) for k in ("step_time", "peak_memory")}
    memory = (f"mean {abs_pct(s['peak_memory']['mean_abs_error'])}, max {abs_pct(s['peak_memory']['max_abs_error'])} "
              f"({worst['peak_memory']})" if s["peak_memory"]["cases"] else "not measured (no allocator statistics)")
    console.print(f"step time: mean abs error {abs_pct(s['step_time']['mean_abs_error'])}, max "
                  f"{abs_pct(s['step_time']['max_abs_error'])} ({worst['step_time']}); peak allocated memory: {memory}")
    for bound, words in (("gpu", "GPU-bound (no host wait predicted)"), ("host", "host-bound in some phase")):
        b = s.get("by_bound", {}).get(bound)
        if b and b["cases"]:
            console.print(f"  {words}: {b['cases']} cases, step time mean abs error {abs_pct(b['mean_abs_error'])}, "
                          f"max {abs_pct(b['max_abs_error'])}")
        if b and b.get("in_range"):
            r = b["in_range"]
            outside = ", ".join(run_words(c, device) for c in r["outside"])
            console.print(f"    {r['inside']} of {r['cases']} inside the range the host's spread gives"
                          + (f"; outside: {outside}" if outside else ""), highlight=False)
    if s.get("gpu_clocks"):
        from topowise.measure.gpu_clocks import describe_clocks

        clocks = s["gpu_clocks"]
        console.print(f"GPU clocks over the {clocks['runs']} measured runs: {describe_clocks(clocks)}", highlight=False)
    for g in s["ranking"]:
        grp = g["group"]
        mark = "[green]ok[/]" if g["ok"] else "[red]MISS[/]"
        console.print(f"ranking {grp['model']} mb{grp['micro_batch']} seq{grp['seq_len']} "
                      f"{fabric_label(grp['fabric'], device)}: predicted "
                      f"first {g['predicted_first']}, measured fastest {g['measured_fastest']} "
                      f"({100 * g['slower_by']:.1f}% slower) {mark}")
    for line in dimension_lines(result.rows, s):
        console.print(line, highlight=False, markup=False)
    for u in s.get("unsteady", []):
        console.print(f"[yellow]unsteady: {run_words(u['case'], device)} (timed steps spread "
                      f"{100 * u['step_spread']:.1f}%, not a steady step; error {signed_pct(u['step_error'])})[/]")
    for failed in s["failed"]:
        console.print(f"[yellow]not compared: {run_words(failed, device)}[/]")
    for problem in s.get("problems", []):
        console.print(f"[red]{problem}[/]")
    if result.rows:
        for label, target in (("target", meets_target(s)), ("unseen-workload target", meets_unseen_target(s))):
            console.print(f"{label}: " + ", ".join(target_item(k, v, s) for k, v in target.items()))
    if result.out:
        console.print(f"per case: {result.out}")
    if result.plot:
        console.print(f"scatter: {result.plot}")
    console.print(f"measured runs: {result.measured_path}"
                  + (f" (re-evaluate with --measured {result.measured_path})" if result.elapsed_s is not None else ""))
    if result.elapsed_s is not None:
        console.print(f"validation took {result.elapsed_s:.0f} s")


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
