"""The block matmuls' rate by shape: how much of a GEMM's best rate its output tiles and its reduction length let it
reach (docs/costmodel.md, "The GEMM rate by shape"):

    share(forward, input gradient) = rows x cols / TILE^2 / (SMs x waves) x K / (K + K0)
    share(weight gradient)         = WEIGHT_GRAD_SHARE x tiles / (tiles + T1)      (cuBLAS splits K over the tokens)
    time of a pass                 = 2 tokens x out x in / (rate x share ^ POWER_LIMIT_EXPONENT)

A Linear y = x W^T (x: tokens x in, W: out x in) runs the forward (tokens x out, K = in), the input gradient
(tokens x in, K = out) and the weight gradient (out x in, K = tokens); `rate` is peak x Profile.compute_efficiency,
the rate of a GEMM that fills every wave of its tiles. A GPU whose SM count is not known runs every GEMM at `rate`.
"""

from __future__ import annotations

import math

from topowise.models.spec import ModelSpec

TILE = 128  # cuBLAS's output tile for large bf16 GEMMs on Hopper
# the fit of research/2026-12-02-h200x1/scripts/gemm_tiles.py to each block GEMM of six models timed alone on one H200
# (research/2026-12-02-h200x1/kernels/run16):
BEST_ALONE = 0.865  # the fit's best rate timed alone, of the datasheet peak (a step's is Profile.compute_efficiency)
K0 = 184  # reduction length at which a tile's fixed cost halves its rate
T1 = 12  # the weight gradient's split form: tiles at which it reaches half its rate (E_w 0.810)
WEIGHT_GRAD_SHARE = 0.810 / 0.865  # the split form's rate over the tile form's, as fitted
POWER_LIMIT_EXPONENT = 0.49  # in a step at the power limit: rate ~ share ^ this (gemm_clock.py, run52)


def block_linears(model: ModelSpec) -> dict[str, tuple[int, int]]:
    """Each block Linear's weight shape (out, in), as the bench transformer runs them (fused qkv)."""
    h = model.hidden_size
    if model.family == "gpt2":
        return {"qkv": (3 * h, h), "out": (h, h), "up": (model.intermediate_size, h),
                "down": (h, model.intermediate_size)}
    q, kv, i = model.num_heads * model.head_dim, model.num_kv_heads * model.head_dim, model.intermediate_size
    return {"qkv": (q + 2 * kv, h), "out": (h, q), "gate": (i, h), "up": (i, h), "down": (h, i)}


def tile_share(rows: int, cols: int, k: int, sms: int) -> float:
    """Of the best rate, what a GEMM with this output and reduction length reaches (the tile form)."""
    tiles = math.ceil(rows / TILE) * math.ceil(cols / TILE)
    return rows * cols / TILE**2 / (sms * math.ceil(tiles / sms)) * k / (k + K0)


def weight_grad_share(out: int, inp: int) -> float:
    """Of the best rate, what a weight gradient of this shape reaches (the split form)."""
    tiles = math.ceil(out / TILE) * math.ceil(inp / TILE)
    return WEIGHT_GRAD_SHARE * tiles / (tiles + T1)


def linear_seconds(out: int, inp: int, tokens: int, rate: float, sms: int,
                   exponent: float = POWER_LIMIT_EXPONENT) -> tuple[float, float, float]:
    """(forward, input gradient, weight gradient) seconds of one Linear at `tokens` rows in a step, `rate` the best
    rate in FLOP/s, each pass at `rate` x its share ^ `exponent`; every pass at `rate` when the SM count is not
    known (sms 0)."""
    flops = 2.0 * tokens * out * inp
    if not sms:
        return flops / rate, flops / rate, flops / rate
    shares = (tile_share(tokens, out, inp, sms), tile_share(tokens, inp, out, sms), weight_grad_share(out, inp))
    return tuple(flops / (rate * share ** exponent) for share in shares)


def block_matmul_seconds(model: ModelSpec, tokens: int, rate: float, sms: int,
                         exponent: float = POWER_LIMIT_EXPONENT) -> dict[str, tuple[float, ...]]:
    """linear_seconds of each block Linear, by name."""
    return {name: linear_seconds(out, inp, tokens, rate, sms, exponent)
            for name, (out, inp) in block_linears(model).items()}
