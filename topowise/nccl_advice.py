"""NCCL_ALGO advice: where forcing ring or tree should beat NCCL's own choice on a plan's all-reduces.

NCCL picks an algorithm and protocol for every call from its tuner's model (src/graph/tuning.cc):
fixed latencies per hop (its baseLat/hwLat tables), bandwidth from the topology it detects.
costmodel/network.py reproduces that model, so where topowise knows no more than NCCL's tuner does,
the tuner's choice is already the fastest the model can name and there is nothing to advise. The
model knows more when the real latency of the network differs from the tuner's constants: a
network's measured latency beyond them, racks far apart, regions joined by a WAN (what
`network.collective_time_s` adds to the tuner's latencies). Then NCCL can pick, for some sizes, the
algorithm that is slower on this network.

The rule (docs/nccl-tests.md), over the plan's all-reduces whose group spans nodes, each size S
called c times per step (costmodel/collectives.py: DDP buckets, HSDP's replica all-reduces):

    nccl   = sum c x t_model(tuner_choice(S), S)      the model's time for what NCCL picks
    forced = sum c x t_model(a, S), a in ring, tree (and nvlstree on NVSwitch boards that reduce)
    advise a when  1 - forced(a) / nccl > 5%           (the faster a if both qualify)

t_model is network.collective_time_s with the algorithm forced; tuner_choice is the algorithm with
the lower time under NCCL's own constants (network.algorithm_time_s over both protocols). Only the
all-reduce is advised: tree serves all-reduce only, and NCCL's all-gather and reduce-scatter run as
ring across nodes in the model either way. The value uses NCCL's per-collective form,
NCCL_ALGO="allreduce:ring" or "allreduce:tree" (NCCL >= 2.24.3, src/graph/tuning.cc parseList): a
bare NCCL_ALGO=Tree would leave all-gather and reduce-scatter with no algorithm ("No
algorithm/protocol available", src/enqueue.cc).
"""

from __future__ import annotations

import math
from dataclasses import MISSING, asdict, dataclass, field, fields, replace

from topowise.costmodel import network
from topowise.costmodel.comm import replica_groups, shard_groups
from topowise.costmodel.profile import Profile, default_profile

THRESHOLD = 0.05  # advise only a gain above 5% of the all-reduces' time (a stated choice)
NCCL_MIN_VERSION = "2.24.3"  # NCCL_ALGO's "<function>:<algorithms>" form


@dataclass(frozen=True)
class NcclAdvice:
    """algorithm: "ring", "tree", "nvlstree" or "" (leave NCCL alone); reason: one sentence either way."""

    algorithm: str
    gain: float  # 1 - forced / nccl for the advised algorithm (the best forced one when none is advised)
    nccl_s: float  # per step, the all-reduces across nodes as NCCL's tuner picks
    forced_s: dict = field(default_factory=dict)  # "ring"/"tree" -> per step with NCCL_ALGO forcing it
    calls: int = 0  # all-reduce calls across nodes per step
    reason: str = ""

    @property
    def env(self) -> dict[str, str]:
        return {"NCCL_ALGO": f"allreduce:{self.algorithm}"} if self.algorithm else {}

    def to_dict(self) -> dict:
        return dict(asdict(self), env=self.env)


# network.Group's terms beyond NCCL's tuner constants: transport and distance latency, regions, the WAN
MODEL_ONLY = ("ring_extra_us", "tree_extra_us", "regions", "wan_gbps", "wan_lat_us")


def tuner_group(group: network.Group, profile: Profile) -> network.Group:
    """The group as NCCL's tuner sees it: the terms only the model knows (MODEL_ONLY) reset to their
    defaults, which add nothing; what NCCL detects itself (links, NICs, NVLink SHARP) kept."""
    defaults = {f.name: f.default for f in fields(group) if f.name in MODEL_ONLY and f.default is not MISSING}
    plain = replace(group, **defaults)
    return replace(plain, nvls_tree_gbps=network.nvls_tree_gbps(plain, profile))


def tuner_choice(op: str, nbytes: float, gpus, topo, profile: Profile) -> str:
    """The algorithm NCCL's tuner picks: the lower time under its own latency constants."""
    group = tuner_group(network.describe_group(tuple(gpus), topo, profile), profile)
    bus, _ = network.bus_gbps(op, group, profile)
    times = {}
    for algorithm in network.ALGORITHMS:
        by_protocol = [network.algorithm_time_s(op, nbytes, group, algorithm, p, bus) for p in network.PROTOCOLS]
        options = [t for t in by_protocol if t is not None]
        if options:
            times[algorithm] = min(options)
    return min(times, key=times.__getitem__)


def model_time_s(op: str, nbytes: float, gpus, topo, profile: Profile, algorithm: str) -> float:
    """The model's time for one call with NCCL_ALGO forcing `algorithm` (latency it knows included)."""
    return network.collective_time_s(op, nbytes, tuple(gpus), topo, profile, algorithm=algorithm)[0]


def allreduce_group(pred, topo) -> tuple[int, ...]:
    """The GPUs of the plan's all-reduce: every GPU, or for hsdp the first replica group (one GPU per
    shard group), as costmodel/collectives.py places it."""
    gpus = tuple(sorted(pred.gpus))
    if pred.strategy == "hsdp" and pred.shard_group_size and pred.shard_group_size < len(gpus):
        return replica_groups(shard_groups(topo, gpus, pred.shard_group_size))[0]
    return gpus


def _size(nbytes: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            value = nbytes / scale
            return f"{value:.0f} {unit}" if value >= 100 else f"{value:.3g} {unit}"
    return f"{nbytes:.0f} B"


def advise(pred, topo, profile: Profile | None = None, time_fn=model_time_s) -> NcclAdvice:
    """The advice for a prediction (see the module docstring); `time_fn` is the model's time per call
    (op, bytes, gpus, topo, profile, algorithm) -> seconds."""
    profile = profile or default_profile()
    calls = [c for c in pred.time.collectives if c.op == "all_reduce" and c.link == "NET" and c.count > 0]
    if not calls:
        return NcclAdvice("", 0.0, 0.0, reason="NCCL_ALGO left unset: no all-reduce of this plan crosses nodes, "
                          "and NCCL runs its all-gathers and reduce-scatters across nodes as ring either way")
    group = allreduce_group(pred, topo)
    nccl = 0.0
    forced = dict.fromkeys(network.ALGORITHMS, 0.0)
    picks: dict[str, int] = {}
    for c in calls:
        pick = tuner_choice("all_reduce", c.bytes, group, topo, profile)
        picks[pick] = picks.get(pick, 0) + c.count
        times = {a: time_fn("all_reduce", c.bytes, group, topo, profile, a) for a in network.ALGORITHMS}
        nccl += c.count * times[pick]
        for a in forced:
            forced[a] += c.count * times[a]
    # only what NCCL can run here (no NVLS-Tree without an NVSwitch that reduces: forcing it runs ring)
    exists = network.collective_time_s("all_reduce", calls[0].bytes, group, topo, profile)[1]["times_s"]
    forced = {a: t for a, t in forced.items() if exists.get(a) is not None}
    best = min(forced, key=forced.__getitem__)
    gain = 1 - forced[best] / nccl if nccl > 0 else 0.0
    n_calls = sum(c.count for c in calls)
    sizes = sorted({c.bytes for c in calls})
    what = (f"{n_calls} all-reduce call{'s' if n_calls > 1 else ''} per step across {len(topo.nodes_spanned(group))} "
            f"nodes ({_size(sizes[0])}" + (f" to {_size(sizes[-1])}" if len(sizes) > 1 else "") + ")")
    chose = (f"{next(iter(picks))} for {'all of them' if n_calls > 1 else 'it'}" if len(picks) == 1
             else " and ".join(f"{a} for {k}" for a, k in sorted(picks.items())))
    if gain > THRESHOLD:
        reason = (f"NCCL_ALGO=allreduce:{best}: for this plan's {what} NCCL's tuner picks {chose} from its "
                  f"built-in latencies; with the network's own latency the model expects {best} to take "
                  f"{forced[best] * 1e3:,.1f} ms per step against {nccl * 1e3:,.1f} ms, {gain:.0%} less "
                  f"(NCCL >= {NCCL_MIN_VERSION} reads the per-collective form)")
        return NcclAdvice(best, gain, nccl, forced, n_calls, reason)
    if math.isclose(gain, 0.0, abs_tol=1e-9):
        why = f"the model agrees with NCCL's tuner ({chose})"
    else:
        why = f"forcing {best} would save {gain:.1%}, under the {THRESHOLD:.0%} worth overriding NCCL's tuner for"
    return NcclAdvice("", max(gain, 0.0), nccl, forced, n_calls,
                      f"NCCL_ALGO left unset: for this plan's {what} {why}")
