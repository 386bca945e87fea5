"""The block matmuls' rate by shape: how much of a GEMM's best rate its output tiles and its reduction length let it
reach.

A cuBLAS GEMM cuts its output (rows x columns) into 128 x 128 tiles and runs them in waves over the GPU's SMs; a
last wave that fills part of the SMs idles the rest, and each tile pays a fixed start and end against its K / 64
steps of reduction. So a GEMM reaches

    share = tiles / (SMs x waves) x K / (K + K0)

of the rate of one that fills every wave and reduces forever (Profile.compute_efficiency is that rate, as a
fraction of the datasheet peak). The three passes of a Linear y = x W^T (x: tokens x in, W: out x in) are the
forward (tokens x out, K = in), the input gradient (tokens x in, K = out) and the weight gradient (out x in,
K = tokens). The weight gradient's output is the weight, often under two waves of tiles, and there cuBLAS splits
its long reduction over the tokens instead (split-K); it reaches WEIGHT_GRAD_SHARE x tiles / (tiles + T1).

Measured on one H200, each block GEMM of six models timed alone per pass at 8192-32768 tokens
(benchmarks/kernel_rates.py --blocks, docs/results/2026-12-02-h200x1/kernels/run16) and fitted by
`benchmarks/gemm_tiles.py`: the forward and input-gradient GEMMs 2.7% rms (one rate for all: 7.3%), the weight
gradients 4.7% (6.9%); docs/calibration.md, "The GEMM rate by shape". Tile and SM count are the GPU's
(hardware.GpuSpec.sms); a GPU whose SM count is not known runs every GEMM at compute_efficiency.

Those shares are what a GEMM reaches alone, in a burst, at the full SM clock. A training step holds the GPU at its
power limit, where a GEMM that keeps more of the SMs busy draws more and is clocked down more: held for seconds at
700 W, six GEMMs ran at 0.748 x (their burst rate, of the peak) ^ 0.49 (docs/results/2026-12-03-h200x1/gemm-shape/
run52, gemm_clock.py). So in a step a GEMM runs at compute_efficiency x share ^
POWER_LIMIT_EXPONENT: in six traced steps (576-2048 wide) the GEMM kernels' time asks for the same
compute_efficiency within 0.9% with this exponent, where the shares taken whole ask for 0.823-0.905 and one rate
for all for 0.714-0.778 (gemm-shape/run53, run54).
"""

from __future__ import annotations

import math

from topowise.models.spec import ModelSpec

TILE = 128  # cuBLAS's output tile for large bf16 GEMMs on Hopper
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
