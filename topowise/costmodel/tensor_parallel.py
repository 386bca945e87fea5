"""Tensor, sequence, context and pipeline parallelism per transformer block: the bytes each collective
moves and on which mesh dimension, and the activation bytes a block keeps for backward.

Model dimensions are plain arguments (no ModelSpec, no Run): s sequence, b micro-batch, h hidden, a heads,
t tensor-parallel degree, cp context-parallel degree. Sizes follow nccl-tests: an all-gather's or a
reduce-scatter's size is the full (gathered) buffer; `Collective.bus_bytes` applies the busbw factor.
16-bit activations throughout. Derivations: docs/parallelism.md.

Two forms of the activation count:
- `gpt_activation_terms`: Korthikanti et al. 2022 (arXiv 2205.05198) section 4 and Table 2, for the GPT-3
  block they count: LayerNorm, MHA with an unfused softmax and dropout, a 4h GeLU MLP, dropout after each
  sub-block.
- `llama_activation_terms`: the same counting rules applied to a Llama block: RMSNorm (no dropout),
  GQA (K and V kv_heads x head_dim wide), a fused flash attention (no s x s term: it keeps its output and
  a float32 logsumexp per head and token), SwiGLU with an ffn-wide gate and up (silu(gate) * up).
"""

from __future__ import annotations

from dataclasses import dataclass

from topowise.errors import UsageError
from topowise.parallel_dims import validate_shapes  # noqa: F401 (re-exported)
from topowise.units import busbw_factor

RECOMPUTE = ("none", "selective", "full")


@dataclass(frozen=True)
class Collective:
    """`count` calls of one collective over a group of `group_size` ranks of mesh dimension `dim`; size_bytes
    is each call's buffer in nccl-tests' convention (sendrecv: what one rank sends)."""

    op: str
    dim: str
    phase: str
    size_bytes: float
    count: int
    group_size: int

    @property
    def bus_bytes(self) -> float:
        """Bytes each rank moves over its links for all the calls (nccl-tests busbw factors)."""
        return self.count * self.size_bytes * busbw_factor(self.op, self.group_size)


@dataclass(frozen=True)
class ActivationTerms:
    """Bytes one layer keeps for backward on one rank, per named term (Korthikanti et al. 2022, section 4)."""

    terms: tuple[tuple[str, float], ...]
    source: str

    @property
    def total(self) -> float:
        return sum(v for _, v in self.terms)

    def get(self, name: str) -> float:
        return dict(self.terms)[name]





def _check_recompute(recompute: str) -> None:
    if recompute not in RECOMPUTE:
        raise UsageError(f"unknown recompute {recompute!r}; choose one of {', '.join(RECOMPUTE)}")


def gpt_activation_terms(*, seq: int, micro_batch: int, hidden: int, heads: int, tp: int = 1, cp: int = 1,
                         sp: bool = False, recompute: str = "none") -> ActivationTerms:
    """Korthikanti et al. 2022 Table 2 as its terms: sbh(34 + 5as/h) unsharded, sbh(10 + 24/t + 5as/(ht))
    with TP, sbh/t (34 + 5as/h) with TP + SP; selective recompute drops the 5as/h terms; full keeps the
    block's input, 2sbh (/t with SP). CP shards the tokens: s becomes s/cp, and the score terms keep
    s/cp rows of s columns."""
    _check_recompute(recompute)
    s, b, h, a, t = seq / cp, micro_batch, hidden, heads, tp
    sbh = s * b * h
    rep = t if sp else 1  # the parts TP alone leaves whole: norms, dropouts, the linears' inputs
    source = "Korthikanti et al. 2022, arXiv 2205.05198, section 4.1-4.2, Table 2"
    if recompute == "full":
        return ActivationTerms(terms=(("block_input", 2 * sbh / rep),), source=source)
    scores = a * s * seq * b  # one byte per element of the s/cp x s attention scores of one sequence
    terms = [
        ("layernorm_inputs", 4 * sbh / rep),          # two LayerNorms, 2sbh each
        ("qkv_input", 2 * sbh / rep),                 # the QKV linear's input
        ("q_k", 4 * sbh / t),                         # QK^T keeps Q and K
        ("softmax_output", 2 * scores / t),
        ("softmax_dropout_mask", scores / t),
        ("attention_dropout_output", 2 * scores / t),  # the attention over V keeps its input
        ("v", 2 * sbh / t),
        ("out_proj_input", 2 * sbh / t),
        ("attention_dropout_mask", sbh / rep),
        ("mlp_input", 2 * sbh / rep),
        ("gelu_input", 8 * sbh / t),                  # 4h wide
        ("fc2_input", 8 * sbh / t),
        ("mlp_dropout_mask", sbh / rep),
    ]
    if recompute == "selective":  # recompute QK^T, softmax, dropout and the attention over V
        terms = [(k, v) for k, v in terms if k not in ("softmax_output", "softmax_dropout_mask",
                                                          "attention_dropout_output")]
    return ActivationTerms(terms=tuple(terms), source=source)


def llama_activation_terms(*, seq: int, micro_batch: int, hidden: int, heads: int, kv_heads: int, ffn: int,
                           head_dim: int | None = None, tp: int = 1, cp: int = 1, sp: bool = False,
                           sp_regather: bool = True, recompute: str = "none") -> ActivationTerms:
    """Korthikanti's counting rules on a Llama block with flash attention (docs/parallelism.md): per token
    12h + 4 kv + 8 ffn bytes + two float32 RMSNorm rstd (8) + a float32 logsumexp per head (4a), q = a x
    head_dim. Selective recompute has no score term to drop (flash keeps none). With TP the norms' inputs
    and the linears' inputs stay whole; SP splits them; sp_regather False keeps each all-gathered linear
    input whole (what autograd saves behind DTensor's all-gather, torchtitan), True keeps only the shard and
    all-gathers it again in backward (Megatron, Korthikanti 4.2.2)."""
    _check_recompute(recompute)
    s, b, t = seq / cp, micro_batch, tp
    d = head_dim or hidden // heads
    q, kv = heads * d, kv_heads * d
    sb = s * b
    rep = t if sp else 1
    lin = t if (sp and sp_regather) else 1
    source = "Korthikanti et al. 2022 counting rules, Llama block (docs/parallelism.md)"
    if recompute == "full":
        return ActivationTerms(terms=(("block_input", 2 * sb * hidden / rep),), source=source)
    terms = (
        ("rmsnorm_inputs", 2 * 2 * sb * hidden / rep),
        ("rmsnorm_rstd", 2 * 4 * sb / rep),
        ("qkv_input", 2 * sb * hidden / lin),
        ("q", 2 * sb * q / t),
        ("k_v", 2 * 2 * sb * kv / t),
        ("attention_output", 2 * sb * q / t),        # flash keeps it; it is also the out-projection's input
        ("logsumexp", 4 * sb * heads / t),
        ("mlp_input", 2 * sb * hidden / lin),
        ("swiglu", 4 * 2 * sb * ffn / t),             # gate and up outputs, silu(gate), the product
    )
    return ActivationTerms(terms=terms, source=source)


def tp_block_collectives(*, seq: int, micro_batch: int, hidden: int, tp: int, cp: int = 1, sp: bool = False,
                         sp_regather: bool = False, dtype_bytes: int = 2) -> tuple[Collective, ...]:
    """One block's TP collectives per micro-batch (Shoeybi et al. 2019 Fig. 3; Korthikanti 4.2.2):
    without SP an all-reduce of the s b h activations after attention and after the MLP in forward, and two
    in backward (the conjugates at their inputs); with SP each all-reduce becomes a reduce-scatter plus an
    all-gather of the same full size, the same bus bytes. sp_regather adds Megatron's backward all-gathers
    of the two linears' saved shards."""
    if tp == 1:
        return ()
    size = seq / cp * micro_batch * hidden * dtype_bytes
    if not sp:
        return tuple(Collective(op="all_reduce", dim="tp", phase=p, size_bytes=size, count=2, group_size=tp)
                     for p in ("forward", "backward"))
    out = [Collective(op=op, dim="tp", phase=p, size_bytes=size, count=2, group_size=tp)
           for p in ("forward", "backward") for op in ("all_gather", "reduce_scatter")]
    if sp_regather:
        out.append(Collective(op="all_gather", dim="tp", phase="backward", size_bytes=size, count=2, group_size=tp))
    return tuple(out)


def cp_ring_exchanges(*, seq: int, micro_batch: int, kv_heads: int, head_dim: int, cp: int, tp: int = 1,
                      dtype_bytes: int = 2) -> tuple[Collective, ...]:
    """Ring attention per block and micro-batch (Liu et al. 2023; PyTorch's context_parallel, which
    torchtitan uses): each rank passes its K and V shard (s/cp tokens, kv_heads/t x head_dim wide) to its
    neighbour cp - 1 times in forward; in backward K and V travel again and their gradients with them."""
    if cp == 1:
        return ()
    shard = seq / cp * micro_batch * kv_heads / tp * head_dim * dtype_bytes
    return (Collective(op="sendrecv", dim="cp", phase="forward", size_bytes=2 * shard, count=cp - 1, group_size=cp),
            Collective(op="sendrecv", dim="cp", phase="backward", size_bytes=4 * shard, count=cp - 1,
                       group_size=cp))


def pp_send_bytes(*, seq: int, micro_batch: int, hidden: int, tp: int = 1, cp: int = 1, sp: bool = False,
                  dtype_bytes: int = 2) -> float:
    """What a rank sends across one stage boundary for one micro-batch, each way (activations forward,
    their gradients backward): its s/cp x b x h, split over tp with SP (Megatron's scatter-gather, SC'21
    section 4.1), whole without."""
    return seq / cp * micro_batch * hidden * dtype_bytes / (tp if sp else 1)


def pp_sends(*, pp: int, virtual_stages: int = 1, microbatches: int = 1) -> tuple[Collective, ...]:
    """Stage-boundary crossings per optimizer step, one sendrecv per crossing and direction: each
    micro-batch crosses pp x v - 1 boundaries forward and as many backward (size 1: multiply by
    pp_send_bytes)."""
    if pp == 1:
        return ()
    n = microbatches * (pp * virtual_stages - 1)
    return tuple(Collective(op="sendrecv", dim="pp", phase=p, size_bytes=1.0, count=n, group_size=2)
                 for p in ("forward", "backward"))
