"""The degrees of a parallel run, checked once: the pipeline schedule, the split of layers over pipeline
stages, and heads, KV heads and sequence over tensor and context parallelism (cf. torchtitan's ParallelDims).

`Run` validates itself with these; the cost model's pipeline and tensor-parallel terms use the same split.
Sources: Narayanan et al., SC'21 (interleaved 1F1B); Megatron-LM and torchtitan's layer splits; PyTorch's
context_parallel (load-balanced causal chunks).
"""

from __future__ import annotations

from dataclasses import dataclass

from topowise.errors import UsageError

SCHEDULES = ("1f1b", "interleaved-1f1b", "zb-h1")


@dataclass(frozen=True)
class LayerSplit:
    """Transformer layers per virtual stage (index s, on rank s % pp); the embedding is on stage 0 and
    the final norm, output layer and loss on the last stage (rank pp - 1)."""

    pp: int
    virtual_stages: int
    layers: tuple[int, ...]

    def rank_of(self, stage: int) -> int:
        return stage % self.pp

    def stages_of(self, rank: int) -> tuple[int, ...]:
        return tuple(range(rank, self.pp * self.virtual_stages, self.pp))

    def layers_on_rank(self, rank: int) -> int:
        return sum(self.layers[s] for s in self.stages_of(rank))

    @property
    def even(self) -> bool:
        return len(set(self.layers)) == 1


def validate_schedule(schedule: str, pp: int, microbatches: int, virtual_stages: int = 1) -> None:
    """The checks the engines make, with the arithmetic in the message."""
    if schedule not in SCHEDULES:
        raise UsageError(f"unknown pipeline schedule {schedule!r}; choose one of {', '.join(SCHEDULES)}")
    for name, value in (("pp", pp), ("micro-batches", microbatches), ("virtual stages", virtual_stages)):
        if value < 1:
            raise UsageError(f"{name} must be at least 1, not {value}")
    if schedule != "interleaved-1f1b" and virtual_stages != 1:
        raise UsageError(f"{schedule} runs one stage per rank; virtual stages {virtual_stages} need "
                         f"interleaved-1f1b")
    if schedule == "interleaved-1f1b" and pp > 1 and microbatches % pp:
        # Megatron's interleaved schedule walks micro-batches in groups of pp (schedules.py)
        near = sorted({microbatches - microbatches % pp or pp, microbatches + pp - microbatches % pp})
        raise UsageError(f"interleaved-1f1b needs micro-batches divisible by pp: {microbatches} micro-batches "
                         f"over pp {pp} leave {microbatches % pp}; use {' or '.join(map(str, near))}")


def split_layers(layers: int, pp: int, virtual_stages: int = 1, *, even: bool = False,
                 first: int | None = None, last: int | None = None) -> LayerSplit:
    """Transformer layers over pp x v virtual stages.
    even: every stage the same count (Megatron's default), refused with the arithmetic when it does not
    divide. first / last: fixed counts for the first and last stage, the rest even (Megatron's
    --decoder-first/last-pipeline-num-layers). Otherwise torchtitan's default split
    (generate_llm_fqn_per_model_part, input and output weight 1): the embedding and the output layer each
    count as one layer, the layers + 2 spread evenly with the remainder on the earliest stages."""
    stages = pp * virtual_stages
    if layers < 1 or pp < 1 or virtual_stages < 1:
        raise UsageError(f"layers, pp and virtual stages must be at least 1 (got {layers}, {pp}, {virtual_stages})")
    if stages == 1:
        return LayerSplit(pp=pp, virtual_stages=virtual_stages, layers=(layers,))
    if even or first is not None or last is not None:
        head = first if first is not None else None
        tail = last if last is not None else None
        fixed = (head or 0) + (tail or 0)
        rest_stages = stages - (head is not None) - (tail is not None)
        rest = layers - fixed
        if rest < 0 or (rest_stages == 0 and rest) or (rest_stages and rest % rest_stages):
            what = f"{layers} layers" if not fixed else f"{layers} - {fixed} = {rest} layers"
            over = f"pp {pp} x v {virtual_stages} = {stages} chunks" if not fixed else \
                f"the {rest_stages} middle chunks of pp {pp} x v {virtual_stages}"
            raise UsageError(f"{what} do not split over {over} evenly; allow an uneven split, or pick layers "
                             f"per chunk that divide (e.g. pp x v dividing {layers})")
        each = rest // rest_stages if rest_stages else 0
        counts = [each] * stages
        if head is not None:
            counts[0] = head
        if tail is not None:
            counts[-1] = tail
        return LayerSplit(pp=pp, virtual_stages=virtual_stages, layers=tuple(counts))
    effective = layers + 2
    base, extra = divmod(effective, stages)
    if base < 1:
        raise UsageError(f"{layers} layers + embedding + output = {effective} layer-equivalents do not fill "
                         f"pp {pp} x v {virtual_stages} = {stages} chunks; use at most {effective} chunks")
    counts = [base + (s < extra) for s in range(stages)]
    counts[0] -= 1
    counts[-1] -= 1
    return LayerSplit(pp=pp, virtual_stages=virtual_stages, layers=tuple(counts))


def validate_shapes(*, heads: int, kv_heads: int, seq: int, tp: int = 1, cp: int = 1, sp: bool = False,
                    load_balanced_cp: bool = True) -> None:
    """Heads and KV heads split over tp; the sequence over cp (in 2 cp chunks for load-balanced causal CP,
    torchtitan / PyTorch's context_parallel) and, with sequence parallel, each rank's part over tp."""
    if tp < 1 or cp < 1:
        raise UsageError(f"tp and cp must be at least 1 (got tp {tp}, cp {cp})")
    if heads % tp:
        raise UsageError(f"{heads} attention heads do not split over tp {tp}: {heads} % {tp} = {heads % tp}; "
                         f"use a tp that divides {heads}")
    if kv_heads % tp:
        raise UsageError(f"{kv_heads} KV heads do not split over tp {tp}: {kv_heads} % {tp} = {kv_heads % tp}; "
                         f"use a tp that divides {kv_heads}")
    chunks = 2 * cp if (load_balanced_cp and cp > 1) else cp
    if seq % chunks:
        how = f"2 x cp {cp} = {chunks} chunks (load-balanced causal CP)" if chunks != cp else f"cp {cp}"
        raise UsageError(f"sequence {seq} does not split over {how}: {seq} % {chunks} = {seq % chunks}")
    if sp and (seq // cp) % tp:
        raise UsageError(f"sequence parallel splits each rank's {seq // cp} tokens over tp {tp}: "
                         f"{seq // cp} % {tp} = {(seq // cp) % tp}")
