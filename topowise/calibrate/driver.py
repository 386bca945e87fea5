"""calibrate: measure this machine (or read an earlier run's records), fit, write the profile."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from topowise.calibrate.cases import Plan, calibration_plan
from topowise.calibrate.crypto import measure_encryption
from topowise.calibrate.fit import NVLS_ENV, POOR_FIT_RMS, fit_profile, nvls_as_run, observations_from, poor_fits
from topowise.calibrate.launch import META_FILE, RECORD_FILES, measure, read_records_dir
from topowise.calibrate.machine import live_topology
from topowise.calibrate.validate import compare
from topowise.costmodel.profile import Profile
from topowise.costmodel.profile_store import cache_path, fingerprint_text, machine_fingerprint, parse_fingerprint
from topowise.errors import UsageError
from topowise.measure.gpu_clocks import clocks_over
from topowise.measure.records import append_record
from topowise.topology.model import Topology


@dataclass(frozen=True)
class Calibration:
    profile: Profile
    profile_path: str
    cache_path: str | None
    records_dir: str
    report: dict
    elapsed_s: float | None

    def to_dict(self) -> dict:
        return {"profile": self.profile.to_dict(), "profile_path": self.profile_path, "cache_path": self.cache_path,
                "records_dir": self.records_dir, "report": self.report, "elapsed_s": self.elapsed_s}


# The accuracy target lets no validation case miss by more than 10% (docs/calibration.md): a fit that
# misses its own runs by more than that, root mean square, cannot meet it on other cases.
FIT_WARN_RMS = 0.10


def fit_warnings(report: dict, device: str, cached: bool) -> list[str]:
    """One line per fit too loose to trust, saying who will use the profile anyway."""
    out = []
    for what, key in (("step-time", "step_time"), ("memory", "memory")):
        fit = report.get(key) or {}
        if not fit.get("observations") or fit.get("rms_error") is None or fit["rms_error"] <= FIT_WARN_RMS:
            continue
        line = (f"the {what} fit misses its own {fit['observations']} runs by {100 * fit['rms_error']:.1f}% rms "
                f"(worst {100 * fit['max_error']:.1f}%), more than the {100 * FIT_WARN_RMS:g}% the accuracy target "
                "allows a case: predictions with this profile are no closer")
        if device == "cpu":
            line += " (a CPU step is mostly per-operation overhead, which the cost model does not describe)"
        if cached:
            users = "validate" if device == "cpu" else "predict, plan, study and validate"
            line += (f"; it is cached all the same, and {users} on this machine {'uses' if device == 'cpu' else 'use'} "
                     "it (--no-cache keeps it out)")
        out.append(line)
    return out


def default_records_dir(profile_path: str | Path) -> Path:
    p = Path(profile_path)
    return p.with_name(p.stem + "-records")


def calibrate(*, device: str, nproc: int, out: str | None, records: str | None, from_records: str | None,
              use_cache: bool = True, timeout_s: float = 600.0, progress: Callable[[str], None] | None = None,
              plan: Plan | None = None, fit_names: list[str] | None = None, design: bool = False,
              compile: bool = False, keep_poor_fit: bool = False) -> Calibration:
    """Measure (unless from_records), fit, write the profile (to `out` and the cache; a fit poorer than
    POOR_FIT_RMS to `out` alone, unless keep_poor_fit)."""
    check_out_path(out)  # before minutes of measuring, not after
    started = time.monotonic()
    if from_records:
        folder = Path(from_records)
        recs, meta = read_records_dir(folder)
        missing = [k for k in ("topology", "fingerprint") if k not in meta]
        if missing:  # bench train's folders hold a meta.json too, without the machine's fingerprint
            raise UsageError(f"{folder / META_FILE} has no {' or '.join(missing)}: not a calibration records folder "
                             "(written by `topowise calibrate --records DIR`)")
        topo = Topology.from_dict(meta["topology"], f"{folder / META_FILE}")
        fp_text = meta["fingerprint"]
    else:
        if device not in ("cuda", "cpu"):
            raise UsageError(f"--device must be cuda or cpu, not {device!r}")
        if nproc < 2:
            raise UsageError(f"calibration measures collectives and needs two or more processes, not --nproc {nproc}")
        fp = machine_fingerprint(device)
        if fp is None:
            raise UsageError("no GPUs visible through NVML: calibrate a GPU machine there, or use --device cpu")
        fp_text = fingerprint_text(fp)
        topo = live_topology(device, nproc)
        folder = Path(records) if records else default_records_dir(out or cache_path(fp_text))
        if any((folder / n).exists() for n in RECORD_FILES.values()):
            raise UsageError(f"{folder} already holds calibration records: fit them with --from-records {folder}, "
                             "or give another --records folder")
        folder.mkdir(parents=True, exist_ok=True)
        if plan is None and design and device == "cuda":  # calibrate/design.py; configs into the records folder
            from topowise.calibrate.design import designed_plan

            plan = designed_plan(folder, compile)
        plan = plan or calibration_plan(device, compile)
        meta = {"fingerprint": fp_text, "topology": topo.to_dict(), "device": device, "nproc": nproc,
                "plan": plan.to_dict(), "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "env": {NVLS_ENV: os.environ.get(NVLS_ENV)}}
        (folder / META_FILE).write_text(json.dumps(meta, indent=2))
        problems = measure(plan, nproc, folder, timeout_s=timeout_s, progress=progress, topology=topo)
        # after the ranks have exited, so the one thread timed has its core to itself
        try:
            for rec in measure_encryption():
                append_record(folder / RECORD_FILES["encryption"], rec)
        except UsageError as exc:  # a source tree run without the package: keep the default rates
            problems.append(f"{exc}; the profile keeps the default encryption rates")
        meta["measure_s"] = round(time.monotonic() - started, 1)
        meta["problems"] = problems
        (folder / META_FILE).write_text(json.dumps(meta, indent=2))
        recs, _ = read_records_dir(folder)
        if not any(r.get("kind") == "collective" for r in recs) and not observations_from(recs):
            raise UsageError(f"nothing was measured ({'; '.join(problems)}); see the messages above")
    where = f"{parse_fingerprint(fp_text).get('name', '?')}, {meta.get('started', '')[:10]}"
    min_bytes = int((meta.get("plan") or {}).get("fit_min_bytes", 0))
    profile, report = fit_profile(recs, topo, fp_text, where=where, fit_names=fit_names, comm_min_bytes=min_bytes)
    profile = nvls_as_run(profile, (meta.get("env") or {}).get(NVLS_ENV), where)
    report["measure_s"] = meta.get("measure_s")
    report["problems"] = meta.get("problems", [])
    report["runs_detail"] = [r.to_record(fp_text) for r in compare(recs, profile, topo)]
    report["gpu_clocks"] = clocks_over([r for r in recs if r.get("kind") == "train"])  # the rates carry these
    target = Path(out) if out else None
    poor = poor_fits(report)
    withheld = bool(poor) and use_cache and not keep_poor_fit
    cached = cache_path(fp_text) if use_cache and not withheld else None
    report["warnings"] = fit_warnings(report, parse_fingerprint(fp_text).get("device", device), cached is not None)
    if withheld:
        report["warnings"].append(
            f"the {' and '.join(poor)} fit misses its own runs by more than {100 * POOR_FIT_RMS:g}% rms, so it is not "
            "cached as this machine's profile (predict, plan and validate keep the one they had); "
            + (f"it is written to {out} only" if out else "it is written nowhere: --out FILE keeps it")
            + "; --keep-poor-fit caches it anyway")
    report["cache_withheld"] = withheld
    write_profile(profile, target, cached)
    main_path = target or cached
    return Calibration(profile, str(main_path) if main_path else "", str(cached) if cached else None, str(folder),
                       report, None if from_records else round(time.monotonic() - started, 1))


def check_out_path(out: str | None) -> None:
    """--out names a profile file that can be written: not a folder, not under a file."""
    if out is None:
        return
    path = Path(out)
    if path.is_dir():
        raise UsageError(f"--out {out} is a folder: give the profile's file name, e.g. {path / 'profile.json'}")
    parent = next((p for p in path.parents if p.exists()), None)
    if parent is not None and not parent.is_dir():
        raise UsageError(f"--out {out}: {parent} is a file, not a folder")


def write_profile(profile: Profile, *paths: Path | None) -> None:
    """The profile's JSON to each path given, whole or not at all (written beside it, then renamed)."""
    for path in paths:
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            try:
                tmp.write_text(profile.to_json() + "\n")
                tmp.replace(path)
            except OSError as exc:
                tmp.unlink(missing_ok=True)  # no half-written file left beside it
                raise UsageError(f"cannot write the profile to {path}: {exc.strerror}") from None


@dataclass(frozen=True)
class EncryptionCalibration:
    records: list
    profile: Profile
    profile_path: str  # "" when no profile was written
    base: str  # what the rates were added to: the --out file, the cached profile, or the defaults

    def to_dict(self) -> dict:
        return {"encryption": self.records, "encryption_gbps_per_core": self.profile.encryption_gbps_per_core,
                "profile_path": self.profile_path, "base": self.base, "profile": self.profile.to_dict()}


def calibrate_encryption(*, out: str | None, records: str | None, use_cache: bool = True) -> EncryptionCalibration:
    """Measure only the host's encryption rate per core (no torch, no GPU) and add it to a profile:
    the one at `out` when that file exists, else this machine's cached profile, else the defaults.
    Written to `out` (when given) and back to the cache entry it came from (unless use_cache is False)."""
    from topowise.calibrate.crypto import apply_encryption
    from topowise.costmodel.profile import default_profile, load_profile
    from topowise.costmodel.profile_store import find_cached_profile

    check_out_path(out)
    target = Path(out) if out else None
    cached = find_cached_profile() if use_cache else None
    if target is not None and target.is_file():
        base, base_name, cache_target = load_profile(target), str(target), None
    elif cached is not None:
        base, base_name, cache_target = cached[0], f"the cached profile {cached[1]}", cached[1]
    else:
        base, base_name, cache_target = default_profile(), "the default profile", None
    recs = measure_encryption()
    if records:
        for rec in recs:
            append_record(Path(records) / RECORD_FILES["encryption"], rec)
    where = f"{recs[0]['cpu']}, one thread, {time.strftime('%Y-%m-%d', time.gmtime())}"
    profile = apply_encryption(base, recs, where)
    write_profile(profile, target, cache_target)
    written = target or cache_target
    return EncryptionCalibration(recs, profile, str(written) if written else "", base_name)
