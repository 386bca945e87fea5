"""Why this plan, why not that one: sentences drawn from the predicted numbers.

Nothing here decides; it reads Predictions (step time, exposed communication, the slowest
collective's link and bandwidth, the GPU's wait for the host, peak memory) and says what they show.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import TYPE_CHECKING

from topowise.planner.candidates import shard_groups
from topowise.units import GIB

if TYPE_CHECKING:  # search imports explain; only types flow back
    from topowise.planner.search import Infeasible, Plan

LINK_NAMES = {"NV": "NVLink", "PCIe": "PCIe", "local": "local memory", "NET": "the network between nodes"}
OP_NAMES = {"all_gather": "all-gather", "reduce_scatter": "reduce-scatter", "all_reduce": "all-reduce",
            "broadcast": "broadcast"}
NOTABLE_EXPOSED = 0.03  # below 3% of the step, communication (or the host's share) is not worth a sentence
# Where the GPU sets both steps, two candidates closer than this are not ranked by the cost model: its
# predictions of GPU-bound runs it was not fitted to miss by 2-3% on average, up to 4% on one H200 and 6%
# over two (docs/calibration.md, "A designed calibration on one GPU"; README, Results)
UNSETTLED_GAP = 0.03


# --- words for numbers ---------------------------------------------------------------------------
def gpu_list(gpus: Iterable[int]) -> str:
    """(0,1,2,3) -> "0-3"; (0,2,4) -> "0,2,4"."""
    g = list(gpus)
    if len(g) > 2 and g == list(range(g[0], g[0] + len(g))):
        return f"{g[0]}-{g[-1]}"
    return ",".join(map(str, g))


def all_groups(gpus: tuple[int, ...], size: int | None) -> str:
    """Every shard group, none left out: (0..7), 2 -> "{0,1},{2,3},{4,5},{6,7}"; (0..15), 8 -> "{0-7},{8-15}"."""
    return ",".join("{" + gpu_list(g) + "}" for g in shard_groups(gpus, size))


def param_count(params: float) -> str:
    """8.03e9 -> "8.03B", 2.1e6 -> "2.10M", 900 -> "900": small models do not read as 0.00B."""
    for scale, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(params) >= scale:
            return f"{params / scale:.2f}{unit}"
    return f"{params:,.0f}"


def label(strategy: str, gpus: tuple[int, ...], shard_group_size: int | None = None) -> str:
    if strategy == "hsdp" and shard_group_size:
        return f"hsdp with shard groups {all_groups(gpus, shard_group_size)}"
    if len(gpus) == 1:
        return f"1 GPU ({gpus[0]})"
    return f"{strategy} on GPUs {gpu_list(gpus)}"


def plan_label(p: Plan | Infeasible) -> str:
    return label(p.run.strategy, p.run.gpus, p.run.shard_group_size)


def pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def dominant_collective(pred):
    """The collective that costs the most time (None on one GPU)."""
    colls = [c for c in pred.time.collectives if c.link != "local" and c.time_s > 0]
    return max(colls, key=lambda c: c.time_s) if colls else None


def _links(pred, op: str) -> set[str]:
    return {c.link for c in pred.time.collectives if c.op == op and c.link != "local"}


def exposed_fraction(pred) -> float:
    return pred.time.exposed_comm_s / pred.step_time_s if pred.step_time_s > 0 else 0.0


def comm_phrase(pred) -> str:
    """"61% of the step waits on all-gather over PCIe at 25 GB/s" or "communication hides behind compute"."""
    c = dominant_collective(pred)
    if c is None:
        return "no communication"
    where = f"{OP_NAMES.get(c.op, c.op)} over {LINK_NAMES.get(c.link, c.link)} at {c.bandwidth_gbps:.0f} GB/s"
    frac = exposed_fraction(pred)
    if frac < NOTABLE_EXPOSED:
        return f"communication ({where}) hides behind compute"
    return f"{pct(frac)} of the step waits on communication, mostly {where}"


def host_fraction(pred) -> float:
    """The share of the step the GPU waits for the host to issue work (costmodel/step.py)."""
    return pred.time.host_wait_s / pred.step_time_s if pred.step_time_s > 0 else 0.0


def host_phrase(pred, whose: str = "the") -> str | None:
    """"the GPU waits 17% of the step for the host to issue it (Python, per-block hooks)", or None. Where
    most of the wait is in the optimizer step (DeepSpeed's, over flat partitions), it says so."""
    frac = host_fraction(pred)
    if frac < NOTABLE_EXPOSED:
        return None
    waits = {ph.phase: ph.host_wait_s for ph in pred.time.phases}
    run = pred.run
    if waits and max(waits, key=lambda phase: waits[phase]) == "optimizer":
        where = "Python, in the optimizer step"
    elif run.per_op_checkpointing:
        where = "Python: per-op selective checkpointing runs its policy on every operator"
    elif run.checkpointing != "none":
        where = "Python, per-block hooks and checkpointing's rerun"
    else:
        where = "Python, per-block hooks"
    return f"the GPU waits {pct(frac)} of {whose} step for the host to issue it ({where})"


def facts(p) -> str:
    pred = p.prediction
    ac = f", {pred.run.checkpoint_words} activation checkpointing" if pred.run.activation_checkpointing else ""
    ac += ", compiled" if pred.run.compile else ""
    host = host_phrase(pred)
    return (f"{pred.tokens_per_s:,.0f} tokens/s at micro-batch {pred.run.micro_batch}{ac}; {comm_phrase(pred)}; "
            + (f"{host}; " if host else "")
            + f"peak {pred.memory.peak_bytes / GIB:.1f} of {pred.memory.gpu_memory_bytes / GIB:.1f} GiB")


def compile_note(plans) -> str:
    """Whether compiling the blocks changes which strategy ranks first, and what compiling buys it;
    `plans`: every feasible plan, eager and compiled (not collapsed by rank)."""
    def fastest(compiled: bool):
        return max((p for p in plans if p.run.compile == compiled), key=lambda p: p.prediction.tokens_per_s,
                   default=None)

    eager, compiled = fastest(False), fastest(True)
    if eager is None or compiled is None:
        kind = "compiled" if eager is None else "eager"
        return f"compile: only {kind} candidates fit"
    ratio = compiled.prediction.tokens_per_s / eager.prediction.tokens_per_s
    first = f"compiled, {plan_label(compiled)} ranks first at {compiled.prediction.tokens_per_s:,.0f} tokens/s"
    if (compiled.strategy, compiled.shard_group_size) != (eager.strategy, eager.shard_group_size):
        return (f"compiling changes the winner: {first}; eager, {plan_label(eager)} would "
                f"({eager.prediction.tokens_per_s:,.0f} tokens/s; compiled is {pct(ratio - 1)} faster)")
    return (f"compile: {first}, {pct(ratio - 1)} over eager; the same strategy wins either way. The first step "
            f"of a compiled launch takes about {compiled.prediction.compile_s:.0f} s more (compiling)")


def contrast(fast, slow) -> str:
    """Why `slow` gives fewer tokens/s than `fast`, in the one or two terms that differ most."""
    a, b = fast.prediction, slow.prediction
    ratio = b.tokens_per_s / a.tokens_per_s if a.tokens_per_s else 0.0
    parts: list[str] = []
    if len(slow.gpus) != len(fast.gpus):
        parts.append(f"{len(slow.gpus)} GPUs against {len(fast.gpus)}")
    if exposed_fraction(b) - exposed_fraction(a) >= NOTABLE_EXPOSED:
        text = f"{plan_label(slow)}: {comm_phrase(b).replace('of the step waits', 'of its step waits')}"
        kept = [OP_NAMES[op] + "s" for op in ("all_gather", "reduce_scatter")
                if _links(a, op) == {"NV"} and "PCIe" in _links(b, op)]
        if kept:
            text += f"; {plan_label(fast)} keeps the {' and '.join(kept)} on NVLink"
        parts.append(text)
    if host_fraction(b) - host_fraction(a) >= NOTABLE_EXPOSED:
        parts.append(f"{plan_label(slow)}: {host_phrase(b, 'its')}")
    if slow.run.activation_checkpointing and slow.run.checkpointing != fast.run.checkpointing:
        parts.append(f"it recomputes activations in backward ({slow.run.checkpoint_words} checkpointing"
                     + (")" if not fast.run.activation_checkpointing else f" against {fast.run.checkpointing})"))
    if slow.run.micro_batch < fast.run.micro_batch:
        parts.append(f"micro-batch {slow.run.micro_batch} against {fast.run.micro_batch}")
    if not parts:
        parts.append(f"step {b.step_time_s * 1e3:.0f} ms against {a.step_time_s * 1e3:.0f} ms")
    text = f"{pct(ratio)} of the throughput of {plan_label(fast)}: " + "; ".join(parts)
    overlap = within_host_spread(a, b) or within_model_error(a, b)
    return f"{text}. {overlap}" if overlap else text


def within_model_error(a, b) -> str | None:
    """Two GPU-bound candidates closer than the cost model's error (UNSETTLED_GAP): say that the order is
    not settled. Host-bound ones have their own range (within_host_spread)."""
    if a.host_bound or b.host_bound or not b.tokens_per_s:
        return None
    gap = a.tokens_per_s / b.tokens_per_s - 1
    if gap >= UNSETTLED_GAP:
        return None
    return (f"The two are {gap * 100:.1f}% apart, within the cost model's error on runs it was not fitted to "
            "(2-3% on average where the GPU sets the step): measure both (bench train) before choosing")


def within_host_spread(a, b) -> str | None:
    """Where the host sets a step, its speed moves between launches (Profile.host_spread). It moves for
    every candidate at once, so the ranking is unsettled only if it flips at either end of that spread:
    say so then."""
    if not (a.host_bound or b.host_bound):
        return None
    a_tokens, b_tokens = a.tokens_per_s * a.step_time_s, b.tokens_per_s * b.step_time_s  # per step
    for end, words in ((0, "fast"), (1, "slow")):
        a_step, b_step = a.step_time_range_s[end], b.step_time_range_s[end]
        if b_tokens / b_step >= a_tokens / a_step:
            return (f"With the host at the {words} end of its launch-to-launch spread the order flips "
                    f"({b_tokens / b_step:,.0f} tokens/s against {a_tokens / a_step:,.0f}): measure both "
                    "(bench train) before choosing")
    return None


def with_why(shown: list, ranked: list, topo, profile=None) -> list:
    """The shown plans, each with its `why` (`profile`: the one they were predicted with)."""
    out = []
    for i, p in enumerate(shown):
        if i == 0:
            why = f"fastest: {facts(p)}"
            other = next((q for q in ranked[1:] if (q.strategy, q.shard_group_size) != (p.strategy, p.shard_group_size)
                          and len(q.gpus) == len(p.gpus)), None)
            if other is not None:
                why += f". Next best strategy on {len(p.gpus)} GPUs, {plan_label(other)}, gives " + contrast(p, other)
            advice = nccl_advice_for(p, topo, profile)
            if advice is not None and advice.algorithm:  # the reason to set NCCL_ALGO (export sets it)
                why += f". {advice.reason}"
        else:
            why = f"{facts(p)}. " + contrast(shown[0], p)
        out.append(replace(p, why=why))
    return out


# --- notes: placement and memory trades ------------------------------------------------------------
def _best(plans: list[Plan], pred: Callable[[Plan], bool]) -> Plan | None:
    return next((p for p in plans if pred(p)), None)


def nccl_advice_for(p, topo, profile=None):
    """NCCL_ALGO advice for a plan across nodes (topowise/nccl_advice.py); None inside one node."""
    if len(topo.nodes_spanned(p.gpus)) < 2:
        return None
    from topowise.nccl_advice import advise

    return advise(p.prediction, topo, profile)


def misaligned_vocab_note(prediction) -> str | None:
    """What a vocabulary that is not a multiple of 8 costs the step (step.head_rate), and the padding that
    saves it; None when it is aligned."""
    extra = prediction.time.misaligned_head_s
    if not extra:
        return None
    vocab = prediction.run.model.vocab_size
    return (f"the vocabulary ({vocab:,}) is not a multiple of 8: the output layer's matmuls run cuBLAS's unaligned "
            f"kernels, {extra * 1e3:.1f} ms of the step more than padded to {-(-vocab // 64) * 64:,} would take "
            f"(as nanoGPT pads GPT-2's)")


def notes(ranked: list[Plan], topo, infeasible: Iterable = (), profile=None) -> list[str]:
    """What the ranking shows about placement: fewer GPUs in one island against more across islands;
    the same GPU count inside one island against spread across islands; and what sharding bought;
    across nodes, whether the best plan should set NCCL_ALGO."""
    out: list[str] = []
    advice = nccl_advice_for(ranked[0], topo, profile) if ranked else None
    if advice is not None:
        out.append(advice.reason)
    vocab = misaligned_vocab_note(ranked[0].prediction) if ranked else None
    if vocab is not None:
        out.append(vocab + ", on every candidate")
    spans = lambda p: p.prediction.islands_spanned
    counts = sorted({len(p.gpus) for p in ranked})
    # the largest count that fits in one island against the next count up, which must span islands
    for small in sorted(counts, reverse=True):
        inside = _best(ranked, lambda p: len(p.gpus) == small and spans(p) == 1 and small > 1)
        across = _best(ranked, lambda p: len(p.gpus) > small and spans(p) > 1)
        if inside is None or across is None:
            continue
        big = len(across.gpus)
        ratio = inside.prediction.tokens_per_s / across.prediction.tokens_per_s
        verb = "beat" if ratio > 1 else "give"
        per_gpu = inside.prediction.tokens_per_s_per_gpu / across.prediction.tokens_per_s_per_gpu
        out.append(f"{small} GPUs in one NVLink island ({gpu_list(inside.gpus)}) {verb} {pct(ratio)} of the "
                   f"throughput of {big} GPUs across {spans(across)} islands ({gpu_list(across.gpus)}), "
                   f"{per_gpu:.2f}x the tokens/s per GPU")
        break
    # the same count: one island vs across islands
    for k in counts:
        inside = _best(ranked, lambda p: len(p.gpus) == k and spans(p) == 1 and k > 1)
        across = _best(ranked, lambda p: len(p.gpus) == k and spans(p) > 1)
        if inside and across and inside.prediction.tokens_per_s > across.prediction.tokens_per_s:
            ratio = inside.prediction.tokens_per_s / across.prediction.tokens_per_s
            out.append(f"on {k} GPUs, one NVLink island ({gpu_list(inside.gpus)}) runs {ratio:.2f}x the tokens/s "
                       f"of GPUs {gpu_list(across.gpus)} across islands ({comm_phrase(across.prediction)})")
    return out


def memory_trade(ranked: list, infeasible: Iterable) -> str | None:
    """When the best plan shards because no ddp fits on its GPU count: what replicating would need."""
    best = ranked[0] if ranked else None
    if best is None or best.strategy == "ddp":
        return None
    k = len(best.gpus)
    if any(p.strategy == "ddp" and len(p.gpus) == k for p in ranked):
        return None  # some ddp fits on k GPUs: sharding was a choice, not forced
    ddp = [i for i in infeasible if i.run.strategy == "ddp" and len(i.run.gpus) == k]
    if not ddp:
        return None
    need = min(ddp, key=lambda i: i.peak_memory_bytes)
    return (f"ddp does not fit on {k} GPUs: it {need.reason}. {best.strategy} shards the training "
            f"state to fit, and pays for it: {comm_phrase(best.prediction)}")
