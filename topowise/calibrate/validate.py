"""validate: predict cases calibration did not use, pair each with its measurement, summarize, plot."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from topowise.calibrate.cases import Case, Plan, validation_plan
from topowise.calibrate.dims import measured_by_dim, pair, predicted_by_dim, summarize_dims
from topowise.calibrate.fit import UNSTEADY_SPREAD, observation_from, predictor
from topowise.calibrate.launch import META_FILE, RECORD_FILES, measure
from topowise.calibrate.machine import live_topology
from topowise.costmodel.profile import Profile
from topowise.costmodel.profile_store import fingerprint_text, machine_fingerprint
from topowise.errors import UsageError
from topowise.measure.gpu_clocks import clocks_over
from topowise.measure.records import append_record, read_records, relative_error
from topowise.run import STRATEGY_NAMES
from topowise.units import GIB

RANK_TOLERANCE = 0.03  # ranking check: the predicted-first strategy within 3% of the measured fastest
# Case.group ("engine" only where it is not PyTorch's)
GROUP_FIELDS = ("model", "micro_batch", "seq_len", "fabric", "activation_checkpointing", "compile", "engine")


@dataclass(frozen=True)
class ValidationRow:
    case: Case
    status: str
    measured_step_s: float | None
    predicted_step_s: float | None
    measured_alloc: float | None  # torch.cuda.max_memory_allocated
    predicted_alloc: float | None  # MemoryBreakdown.allocated_bytes
    reserved: float | None
    predicted_peak: float | None  # allocated + slack + CUDA context
    world_size: int = 0
    breakdown: dict = field(default_factory=dict)
    step_spread: float = 0.0  # measured: interquartile range / median of the timed steps
    # a traced mesh run: exposed communication per mesh dimension, predicted beside measured (calibrate/dims.py)
    by_dim: dict = field(default_factory=dict)

    @property
    def step_error(self) -> float | None:
        return relative_error(self.predicted_step_s, self.measured_step_s)

    @property
    def memory_error(self) -> float | None:
        return relative_error(self.predicted_alloc, self.measured_alloc)

    def to_record(self, fingerprint: str) -> dict:
        return {"kind": "validation", **asdict(self.case), "world_size": self.world_size, "status": self.status,
                "measured": {"step_time_s": self.measured_step_s, "peak_memory_bytes": self.measured_alloc,
                             "reserved_bytes": self.reserved, "step_spread": self.step_spread},
                "predicted": {"step_time_s": self.predicted_step_s, "allocated_bytes": self.predicted_alloc,
                              "peak_bytes": self.predicted_peak, **self.breakdown},
                "step_time_error": self.step_error, "peak_memory_error": self.memory_error,
                **({"exposed_by_dim": self.by_dim} if self.by_dim else {}),
                "profile_fingerprint": fingerprint}


def compare(records: list[dict], profile: Profile, topo, model_loader: Callable | None = None) -> list[ValidationRow]:
    """Predict every measured case with `profile` and pair it with the measurement."""
    predict_one = predictor(topo, model_loader)
    rows = []
    for r in records:
        if r.get("kind") != "train":
            continue
        o = observation_from(r)
        p = predict_one(profile, o)
        t = p.time
        rows.append(ValidationRow(
            o.case, r.get("status", "error"), r.get("step_time_s") if r.get("status") == "ok" else None,
            p.step_time_s, o.peak_allocated_bytes, float(p.memory.allocated_bytes), r.get("reserved_bytes"),
            float(p.memory.peak_bytes), o.world_size,
            {"compute_s": t.compute_s, "memory_bound_s": t.memory_bound_s, "optimizer_s": t.optimizer_s,
             "comm_s": t.comm_s, "exposed_comm_s": t.exposed_comm_s, "host_s": t.host_s, "host_wait_s": t.host_wait_s,
             "step_range_s": list(t.step_range_s),
             "activations_bytes": p.memory.activations_bytes, "peak_phase": p.memory.peak_phase},
            o.step_spread, pair(predicted_by_dim(p), measured_by_dim(r))))
    return rows


def summarize(rows: list[ValidationRow], tolerance: float = RANK_TOLERANCE) -> dict:
    """Mean and worst absolute errors; per group of cases differing only in strategy, whether the
    strategy predicted fastest is the measured fastest or within `tolerance` of it."""
    steps = [abs(r.step_error) for r in rows if r.step_error is not None]
    mems = [abs(r.memory_error) for r in rows if r.memory_error is not None]
    groups: dict[tuple, list[ValidationRow]] = {}
    for r in rows:
        if r.status == "ok" and r.measured_step_s:
            groups.setdefault(r.case.group, []).append(r)
    ranking = []
    for key, members in groups.items():
        if len(members) < 2:
            continue
        pred_first = min(members, key=lambda r: r.predicted_step_s)
        fastest = min(members, key=lambda r: r.measured_step_s)
        slower = pred_first.measured_step_s / fastest.measured_step_s - 1.0
        ranking.append({"group": dict(zip(GROUP_FIELDS, key)),
                        "predicted_first": pred_first.case.strategy, "measured_fastest": fastest.case.strategy,
                        "slower_by": slower, "ok": slower <= tolerance,
                        "strategies": [m.case.strategy for m in members]})
    worst = lambda errs: max(errs) if errs else None  # noqa: E731
    mean = lambda errs: sum(errs) / len(errs) if errs else None  # noqa: E731
    step_worst = max((r for r in rows if r.step_error is not None), key=lambda r: abs(r.step_error), default=None)
    mem_worst = max((r for r in rows if r.memory_error is not None), key=lambda r: abs(r.memory_error), default=None)
    return {
        "cases": len(rows), "ok": sum(r.status == "ok" for r in rows),
        "failed": [f"{r.case.model} {r.case.strategy} {r.case.fabric}: {r.status}" for r in rows if r.status != "ok"],
        "step_time": {"mean_abs_error": mean(steps), "max_abs_error": worst(steps), "cases": len(steps),
                      "worst_case": step_worst.case.label if step_worst else None},
        "peak_memory": {"mean_abs_error": mean(mems), "max_abs_error": worst(mems), "cases": len(mems),
                        "least_error": min((r.memory_error for r in rows if r.memory_error is not None), default=None),
                        "worst_case": mem_worst.case.label if mem_worst else None},
        "ranking": ranking, "ranking_ok": all(g["ok"] for g in ranking) if ranking else None,
        # counted above like every case; named so a reader knows the model does not describe them
        "unsteady": [{"case": r.case.label, "step_spread": r.step_spread, "step_error": r.step_error}
                     for r in rows if r.step_spread > UNSTEADY_SPREAD],
        # the same errors split by what the model says sets the step: the GPU alone, or the host in some phase
        "by_bound": {bound: _errors([r for r in rows if (r.breakdown.get("host_wait_s", 0.0) > 0) == host])
                     for bound, host in (("gpu", False), ("host", True))},
        # mesh runs under the profiler: exposed communication per mesh dimension, predicted vs measured
        **({"by_dimension": summarize_dims([r.by_dim for r in rows if r.by_dim])} if any(r.by_dim for r in rows)
           else {}),
    }


def _errors(rows: list[ValidationRow]) -> dict:
    errs = [abs(r.step_error) for r in rows if r.step_error is not None]
    out = {"cases": len(errs), "mean_abs_error": sum(errs) / len(errs) if errs else None,
           "max_abs_error": max(errs) if errs else None}
    # a host-bound prediction is a range (Profile.host_spread): whether the measured step lies in it
    ranged = [r for r in rows if r.measured_step_s and r.breakdown.get("step_range_s")
              and r.breakdown.get("host_wait_s", 0.0) > 0]
    if ranged:
        outside = [r for r in ranged
                   if not r.breakdown["step_range_s"][0] <= r.measured_step_s <= r.breakdown["step_range_s"][1]]
        out["in_range"] = {"cases": len(ranged), "inside": len(ranged) - len(outside),
                           "outside": [r.case.label for r in outside]}
    return out


def meets_target(summary: dict) -> dict:
    """The accuracy target of docs/calibration.md, item by item."""
    s, m = summary["step_time"], summary["peak_memory"]
    le = lambda v, lim: v is not None and v <= lim  # noqa: E731
    return {"cases >= 16": summary["ok"] >= 16, "step MAE <= 5%": le(s["mean_abs_error"], 0.05),
            "step max <= 10%": le(s["max_abs_error"], 0.10), "memory MAE <= 5%": le(m["mean_abs_error"], 0.05),
            "memory max <= 10%": le(m["max_abs_error"], 0.10), "ranking": bool(summary["ranking_ok"])}


def meets_unseen_target(summary: dict) -> dict:
    """The designed validation's target on workloads calibration never saw, item by item: at least 30
    cases; where the GPU sets the step, mean error at most 4% and none over 8%; every host-bound case
    inside the range its host spread gives; memory mean at most 3%, none over 6% and none under by more
    than 3%; the first-ranked strategy measured fastest or within 3% in every group."""
    gpu, host, m = summary["by_bound"]["gpu"], summary["by_bound"]["host"], summary["peak_memory"]
    le = lambda v, lim: v is not None and v <= lim  # noqa: E731
    in_range = host.get("in_range")
    return {"cases >= 30": summary["ok"] >= 30,
            "GPU-bound step MAE <= 4%": not gpu["cases"] or le(gpu["mean_abs_error"], 0.04),
            "GPU-bound step max <= 8%": not gpu["cases"] or le(gpu["max_abs_error"], 0.08),
            "host-bound inside range": not host["cases"] or bool(in_range and not in_range["outside"]),
            "memory MAE <= 3%": le(m["mean_abs_error"], 0.03), "memory max <= 6%": le(m["max_abs_error"], 0.06),
            "memory never under > 3%": m.get("least_error") is not None and m["least_error"] >= -0.03,
            "ranking": bool(summary["ranking_ok"])}


@dataclass(frozen=True)
class Validation:
    rows: tuple[ValidationRow, ...]
    summary: dict
    profile_fingerprint: str
    out: str | None
    plot: str | None
    measured_path: str
    elapsed_s: float | None

    def to_dict(self) -> dict:
        return {"cases": [r.to_record(self.profile_fingerprint) for r in self.rows], "summary": self.summary,
                "target": meets_target(self.summary) if self.rows else None, "out": self.out, "plot": self.plot,
                "measured": self.measured_path, "elapsed_s": self.elapsed_s}


def validate(*, profile: Profile, device: str, nproc: int, out: str | None, plot: str | None,
             make_plot: bool = True, measured: str | None = None, timeout_s: float = 600.0,
             progress: Callable[[str], None] | None = None, topology=None, plan: Plan | None = None,
             design: bool = False, compile: bool = False, overwrite: bool = False) -> Validation:
    """Measure the validation cases (or read `measured`, a train JSONL), predict each, compare. `design`: the
    designed validation (calibrate/design.py; its configs written into the records folder), `compile` with
    compiled twins; `overwrite`: an earlier run's records in the folder are deleted first."""
    started = time.monotonic()
    out_path = Path(out) if out else None
    problems: list[str] = []
    if measured:
        recs = read_records(measured, kind="train")
        if not recs:
            raise UsageError(f"{measured} holds no training records (kind \"train\", from bench train or validate)")
        nproc = int(recs[0]["world_size"])
        if topology is None:
            try:
                topology = live_topology(recs[0].get("device", device), nproc)
            except UsageError as exc:
                raise UsageError(f"{measured}: no meta.json beside it says where these runs ran, and this machine's "
                                 f"topology cannot be read ({exc}); give --topology PRESET|FILE") from None
        topo = topology
        measured_path = measured
    else:
        topo = topology or live_topology(device, nproc)
        folder = (out_path.with_name(out_path.stem + "-records") if out_path else Path("topowise-validation-records"))
        if (folder / RECORD_FILES["train"]).exists():
            if not overwrite:
                raise UsageError(f"{folder} already holds measurements: --measured {folder / RECORD_FILES['train']} "
                                 "compares them again without measuring, --overwrite deletes them and measures "
                                 "again, or choose another --out")
            for name in (*RECORD_FILES.values(), META_FILE):  # appended one record at a time: start empty
                (folder / name).unlink(missing_ok=True)
        folder.mkdir(parents=True, exist_ok=True)
        if plan is None and design and device == "cuda":
            from topowise.calibrate.design import designed_validation_plan

            plan = designed_validation_plan(folder, compile)
        plan = plan or validation_plan(device, compile)
        fp = machine_fingerprint(device)
        (folder / META_FILE).write_text(json.dumps({
            "fingerprint": fingerprint_text(fp) if fp else "", "topology": topo.to_dict(), "device": device,
            "nproc": nproc, "plan": plan.to_dict(), "profile": profile.fingerprint,
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}, indent=2))
        problems = measure(plan, nproc, folder, timeout_s=timeout_s, progress=progress)
        measured_path = str(folder / RECORD_FILES["train"])
        recs = read_records(measured_path, kind="train")
    rows = compare(recs, profile, topo)
    if out_path:
        out_path.unlink(missing_ok=True)  # derived from the measurements: written whole each time
        for r in rows:
            append_record(out_path, r.to_record(profile.fingerprint))
    # the GPUs' clocks over the measured runs, where their records have them: a fit carries its runs' clock
    summary = dict(summarize(rows), problems=problems, gpu_clocks=clocks_over(recs))
    plot_path = None
    if make_plot:
        plot_path = plot or (str(out_path.with_suffix(".png")) if out_path else "topowise-validation.png")
        plot_validation(rows, plot_path, summary)
    return Validation(tuple(rows), summary, profile.fingerprint, str(out_path) if out_path else None, plot_path,
                      measured_path, None if measured else round(time.monotonic() - started, 1))


# one colour per strategy, in the registry's order (matplotlib's first five)
STRATEGY_COLORS = dict(zip(STRATEGY_NAMES, ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple")))


def plot_validation(rows: list[ValidationRow], path: str, summary: dict | None = None) -> str:
    """Two scatters, predicted against measured (step time, peak allocated memory), y = x and +-10%."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker  # noqa: F401 - used as matplotlib.ticker

    panels = [("step time (ms)", lambda r: r.measured_step_s, lambda r: r.predicted_step_s, 1e3),
              ("peak allocated memory (GiB)", lambda r: r.measured_alloc, lambda r: r.predicted_alloc, 1 / GIB)]
    points = [[(meas(r) * scale, pred(r) * scale, r) for r in rows if meas(r) and pred(r) is not None]
              for _label, meas, pred, scale in panels]
    # CPU runs measure no allocated memory (no CUDA allocator): leave that panel out rather than empty
    shown = [i for i, pts in enumerate(points) if pts] or [0]
    fig, axes = plt.subplots(1, len(shown), figsize=(11 if len(shown) > 1 else 8, 5), squeeze=False)
    axes = axes[0]
    for ax, i in zip(axes, shown):
        label, pts = panels[i][0], points[i]
        for x, y, r in pts:
            ax.scatter(x, y, color=STRATEGY_COLORS.get(r.case.strategy, "black"),
                       marker="o" if r.case.fabric == "nvlink" else "^", s=36)
        if pts:
            lo = min(min(x, y) for x, y, _ in pts) * 0.8
            hi = max(max(x, y) for x, y, _ in pts) * 1.2
            ax.plot([lo, hi], [lo, hi], color="black", lw=1)
            ax.plot([lo, hi], [lo * 1.1, hi * 1.1], color="grey", lw=0.7, ls="--")
            ax.plot([lo, hi], [lo * 0.9, hi * 0.9], color="grey", lw=0.7, ls="--")
            ax.set_xscale("log")
            ax.set_yscale("log")
            for axis in (ax.xaxis, ax.yaxis):  # plain numbers, not 2 x 10^2
                axis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
                axis.set_minor_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.set_xlabel(f"measured {label}")
        ax.set_ylabel(f"predicted {label}")
        ax.grid(True, which="both", alpha=0.3)
    handles = [plt.Line2D([], [], color=c, marker="o", ls="", label=s) for s, c in STRATEGY_COLORS.items()]
    handles += [plt.Line2D([], [], color="black", marker="o", ls="", label="nvlink"),
                plt.Line2D([], [], color="black", marker="^", ls="", label="pcie")]
    axes[-1].legend(handles=handles, fontsize=8, loc="upper left")
    if summary:
        s, m = summary["step_time"], summary["peak_memory"]
        pct = lambda v: "-" if v is None else f"{100 * v:.1f}%"  # noqa: E731
        memory = (f"; memory mean {pct(m['mean_abs_error'])}, max {pct(m['max_abs_error'])}" if 1 in shown
                  else "; memory not measured")
        fig.suptitle(f"topowise validate: {summary['ok']} cases; step time error mean {pct(s['mean_abs_error'])}, "
                     f"max {pct(s['max_abs_error'])}{memory} (dashed: +-10%)", fontsize=10)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
