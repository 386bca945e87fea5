"""Planning across regions: keep the chatty collectives inside a region, and say what the WAN costs.

A cluster whose nodes sit in several regions joined by a WAN (topology/cluster.py) prices every
collective where it runs; this module only reads the predictions. It needs two things of the wiring:
which GPUs share a region (`region_groups`), and which of a step's collectives cross regions
(`crosses_regions`: a collective whose group spans two regions). HSDP with one shard group per region
keeps its all-gathers and reduce-scatters inside a region and sends only the all-reduce of each
shard across the WAN; FSDP and DDP across regions stay candidates, priced as they run.

Gradient accumulation over k micro-batches per optimizer step sends the cross-region all-reduce once
per k micro-batches (FSDP2: `set_requires_all_reduce(False)` on all but the last micro-batch, so the
reduce-scatter inside the region still runs each time; DDP: `no_sync()`). Per optimizer step:

    T(k) = k (t - w - o) + o + w        t: predicted step, w: its exposed WAN time, o: optimizer step
    WAN share = w / T(k)  <=  f   once   k >= (w (1 - f) / f - o) / (t - w - o)

All-gathers that cross regions (FSDP across the WAN) run every micro-batch: accumulation does not
remove them, and the reason says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from topowise.costmodel.comm import replica_groups
from topowise.costmodel.comm import shard_groups as cost_shard_groups
from topowise.costmodel.exposure import exposed_s

DEFAULT_WAN_SHARE = 0.10  # bring the WAN's share of an optimizer step under 10% (plan --wan-share)
MAX_ACCUMULATION = 4096  # beyond this many micro-batches per optimizer step the answer is "not practical"
DEFERRABLE = ("all_reduce",)  # gradient reductions across regions that accumulation defers


def region_groups(wiring) -> tuple[tuple[int, ...], ...]:
    """The GPUs of each region (global indices), in order; () when the wiring has one region or none.

    Reads `wiring.region_of(gpu)` (a region name or index per GPU) where the wiring has regions."""
    region_of = getattr(wiring, "region_of", None)
    if region_of is None or getattr(wiring, "num_regions", None) == 1:  # a cluster in one region: no pass over its GPUs
        return ()
    out: dict = {}
    for g in wiring.indices:
        out.setdefault(region_of(g), []).append(g)
    return tuple(tuple(v) for v in out.values()) if len(out) > 1 else ()


def region_sizes(wiring) -> tuple[int, ...]:
    """GPU counts of the regions: HSDP shard-group sizes that keep each shard group inside a region."""
    return tuple(sorted({len(r) for r in region_groups(wiring)}))


def _spans(group, region_of) -> bool:
    return len({region_of(g) for g in group}) > 1


def collective_groups(pred, wiring) -> dict[str, tuple[int, ...]]:
    """op -> the first group it runs over, as costmodel/collectives.py places the run's collectives."""
    gpus = tuple(sorted(pred.gpus))
    if pred.strategy == "hsdp" and pred.shard_group_size:
        groups = cost_shard_groups(wiring, gpus, pred.shard_group_size)
        return {"all_gather": groups[0], "reduce_scatter": groups[0],
                "all_reduce": replica_groups(groups)[0] if len(groups) > 1 else groups[0]}
    return dict.fromkeys(("all_gather", "reduce_scatter", "all_reduce", "broadcast"), gpus)


def crosses_regions(pred, wiring):
    """A predicate on the prediction's collectives: does this one's group span regions?"""
    region_of = getattr(wiring, "region_of", None)
    if region_of is None or not region_groups(wiring):
        return lambda c: False
    spans = {op: _spans(g, region_of) for op, g in collective_groups(pred, wiring).items()}
    return lambda c: spans.get(c.op, False)


@dataclass(frozen=True)
class WanCost:
    """What the WAN costs a plan's step, and the accumulation that brings its share under `target`."""

    step_s: float
    wan_s: float  # exposed time of the collectives that cross regions, per step
    deferrable_s: float  # of which gradient all-reduces that accumulation defers
    optimizer_s: float
    target: float
    micro_batches: int | None  # k per optimizer step; None: accumulation cannot reach the target
    ops: tuple[str, ...]  # the collectives that cross regions

    @property
    def share(self) -> float:
        return self.wan_s / self.step_s if self.step_s > 0 else 0.0

    def share_at(self, k: int) -> float:
        fixed = self.wan_s - self.deferrable_s  # crosses every micro-batch
        local = self.step_s - self.wan_s - self.optimizer_s
        total = k * (local + fixed) + self.optimizer_s + self.deferrable_s
        return (k * fixed + self.deferrable_s) / total if total > 0 else 0.0

    def to_dict(self) -> dict:
        return {"step_time_s": self.step_s, "wan_exposed_s": self.wan_s, "wan_deferrable_s": self.deferrable_s,
                "wan_share": self.share, "target_share": self.target, "micro_batches": self.micro_batches,
                "wan_share_at_micro_batches": None if self.micro_batches is None
                else self.share_at(self.micro_batches), "ops": list(self.ops)}


def wan_cost(pred, wiring, target: float = DEFAULT_WAN_SHARE) -> WanCost | None:
    """The WAN's part of a predicted step and the accumulation for `target`; None when nothing crosses regions."""
    crosses = crosses_regions(pred, wiring)
    ops = tuple(dict.fromkeys(c.op for c in pred.time.collectives if crosses(c) and c.time_s > 0))
    if not ops:
        return None
    wan = exposed_s(pred, crosses)
    deferrable = exposed_s(pred, lambda c: crosses(c) and c.op in DEFERRABLE)
    cost = WanCost(step_s=pred.step_time_s, wan_s=wan, deferrable_s=deferrable, optimizer_s=pred.time.optimizer_s,
                   target=target, micro_batches=None, ops=ops)
    return replace(cost, micro_batches=accumulation(cost))


def accumulation(cost: WanCost) -> int | None:
    """The fewest micro-batches per optimizer step that bring the WAN's share to `target` (module docstring)."""
    if cost.share <= cost.target:
        return 1
    if cost.share_at(MAX_ACCUMULATION) > cost.target:
        return None  # the part that crosses every micro-batch keeps it above the target
    local = cost.step_s - cost.wan_s - cost.optimizer_s
    fixed = cost.wan_s - cost.deferrable_s
    if local + fixed <= 0:
        return None
    f = cost.target
    # k (local + fixed) f + (o + d) f >= k fixed + d  ->  k >= (d (1 - f) - o f) / (f (local + fixed) - fixed)
    denominator = f * (local + fixed) - fixed
    if denominator <= 0:
        return None
    k = max(1, math.ceil((cost.deferrable_s * (1 - f) - cost.optimizer_s * f) / denominator - 1e-9))
    while cost.share_at(k) > f and k < MAX_ACCUMULATION:  # rounding: the formula's k, checked
        k += 1
    return k


def reason(pred, wiring, target: float = DEFAULT_WAN_SHARE) -> str | None:
    """One sentence for the plan's why: what the WAN costs its step, and the accumulation that fixes it."""
    cost = wan_cost(pred, wiring, target)
    if cost is None:
        return None
    names = " and ".join(op.replace("_", "-") for op in cost.ops)
    only = pred.strategy == "hsdp" and cost.ops == ("all_reduce",)
    text = f"across regions only the {names} crosses the WAN" if only else f"the {names} cross the WAN"
    text += (f": {cost.wan_s * 1e3:,.0f} ms of the {cost.step_s * 1e3:,.0f} ms step waits on it "
             f"({cost.share:.0%})")
    if cost.micro_batches == 1:
        return text + f", under the {target:.0%} asked"
    if cost.micro_batches is None:
        return text + (f"; gradient accumulation cannot bring it under {target:.0%}: its "
                       + ("all-gathers cross" if cost.wan_s > cost.deferrable_s else "WAN time crosses")
                       + " every micro-batch")
    k = cost.micro_batches
    return text + (f"; accumulating {k} micro-batches per optimizer step (the all-reduce once per {k}) brings "
                   f"the WAN's share to {cost.share_at(k):.0%}, under {target:.0%}")


def notes(ranked, wiring, target: float = DEFAULT_WAN_SHARE) -> list[str]:
    """Across regions: the best plan that keeps sharding inside a region beside the best that does not."""
    regions = region_groups(wiring)
    if not regions or not ranked:
        return []
    sizes = set(region_sizes(wiring))
    inside = next((p for p in ranked if p.strategy == "hsdp" and p.shard_group_size in sizes), None)
    across = next((p for p in ranked if not (p.strategy == "hsdp" and p.shard_group_size in sizes)
                   and wan_cost(p.prediction, wiring, target) is not None), None)
    out = []
    if inside is not None:
        why = reason(inside.prediction, wiring, target)
        out.append(f"{len(regions)} regions: hsdp with a shard group per region ({inside.shard_group_size} GPUs) "
                   f"gives {inside.prediction.tokens_per_s:,.0f} tokens/s" + (f"; {why}" if why else ""))
    if across is not None:
        why = reason(across.prediction, wiring, target)
        out.append(f"{across.strategy} across regions gives {across.prediction.tokens_per_s:,.0f} tokens/s"
                   + (f"; {why}" if why else ""))
    return out
