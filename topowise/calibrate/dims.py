"""Exposed communication by mesh dimension, predicted beside measured: validate's per-dimension errors.

Measured (a mesh run's bench train record under --trace, topowise.measure.timeline): each rank's exposed seconds
per dimension in its median step (`exposed_comm_by_dim_s`); per dimension the rank that waited longest, since the
cost model prices the heaviest rank; the pipeline's (pp) is the idle time of the stage with the most work
(`pipeline_bubble`), the stage the model's bubble is of.

Predicted (topowise.costmodel.parallel.predict_parallel's Prediction; no torch):
- tp: the tensor-parallel collectives (unit "block" and "block rerun"), all of them: they sit on the block's
  critical path, none hidden (parallel.block_cost);
- pp: the pipeline's bubble on the busiest rank (mesh["bubble_s"], the schedule's replay with the sends);
- the data-parallel dimensions: the rest of the exposed communication (with cp 1), split between dp_shard and
  dp_replicate by their collectives' time (FSDP's all-gathers and reduce-scatters shard; all-reduces replicate);
- cp: not separated from the rest (its ring exchanges are priced inside the block, without collectives); a run
  with cp > 1 gives no data-parallel split either.
"""

from __future__ import annotations

from topowise.measure.records import relative_error

DIMS = ("tp", "cp", "pp", "dp_shard", "dp_replicate")
TP_UNITS = ("block", "block rerun")


def predicted_by_dim(prediction) -> dict[str, float]:
    """Seconds of exposed communication per mesh dimension (degree > 1) the cost model predicts; {} without a mesh."""
    run, mesh = prediction.run, prediction.mesh or {}
    if not run.has_mesh:
        return {}
    t = prediction.time
    out: dict[str, float] = {}
    tp = sum(c.time_s for c in t.collectives if c.unit in TP_UNITS)
    if run.tp > 1:
        out["tp"] = tp
    if run.pp > 1:
        out["pp"] = float(mesh.get("bubble_s", 0.0))
    if run.cp == 1 and run.dp > 1:
        dp = [c for c in t.collectives if c.unit not in TP_UNITS]
        rest = max(t.exposed_comm_s - tp, 0.0)
        if run.dp_shard > 1 and run.dp_replicate > 1:
            shard = sum(c.time_s for c in dp if c.op != "all_reduce")
            total = sum(c.time_s for c in dp)
            out["dp_shard"] = rest * shard / total if total else 0.0
            out["dp_replicate"] = rest - out["dp_shard"]
        else:
            out["dp_shard" if run.dp_shard > 1 else "dp_replicate"] = rest
    return out


def measured_by_dim(record: dict) -> dict[str, float]:
    """Seconds of exposed communication per mesh dimension (degree > 1) in a traced mesh record; {} without."""
    per_rank = record.get("exposed_comm_by_dim_s") or {}
    mesh = record.get("mesh") or {}
    if not per_rank or not mesh:
        return {}
    out = {dim: max(ranks.get(dim, 0.0) for ranks in per_rank.values()) for dim in DIMS if mesh.get(dim, 1) > 1}
    stages = (record.get("pipeline_bubble") or {}).get("stages")
    if stages and "pp" in out:
        out["pp"] = max(stages, key=lambda s: s["busy_s"])["idle_s"]
    return out


def pair(predicted: dict[str, float], measured: dict[str, float]) -> dict[str, dict]:
    """dimension -> predicted, measured (seconds) and the relative error, for each dimension both have."""
    return {dim: {"predicted": predicted[dim], "measured": measured[dim],
                  "error": relative_error(predicted[dim], measured[dim])}
            for dim in DIMS if dim in predicted and dim in measured}


def summarize_dims(pairs: list[dict[str, dict]]) -> dict[str, dict]:
    """Per dimension over the cases: how many, the mean and largest absolute relative error, and the mean
    measured and predicted seconds (a relative error of a small exposed time says little alone)."""
    out = {}
    for dim in DIMS:
        rows = [p[dim] for p in pairs if dim in p]
        if not rows:
            continue
        errs = [abs(r["error"]) for r in rows if r["error"] is not None]
        out[dim] = {"cases": len(rows), "mean_abs_error": sum(errs) / len(errs) if errs else None,
                    "max_abs_error": max(errs) if errs else None,
                    "mean_measured_s": sum(r["measured"] for r in rows) / len(rows),
                    "mean_predicted_s": sum(r["predicted"] for r in rows) / len(rows)}
    return out
