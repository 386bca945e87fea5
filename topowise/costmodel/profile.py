"""Profile: the cost model's tunable parameters, each with a default and where it came from.

`calibrate` measures a machine and writes a Profile (JSON) whose `sources` say "calibrated: ...";
until then every value below comes from a measurement on the 2x H200 machine (NCCL 2.28, torch 2.11,
2026-11-30): nccl-tests (docs/sources.md, "2x H200 nccl-tests"), our own bench comm, or `calibrate`
run there (docs/results/2026-11-30-h200x2/run10) for the step-time parameters; memory values not
measured are stated guesses, and `sources` says which.

Communication defaults, derived in `_comm_defaults` (arithmetic shown there):
- achieved fraction of line rate = busbw at 1 GiB / line rate of the link
  (NVLink 4: 478 GB/s; PCIe Gen5 x16: 63 GB/s);
- latency (alpha) = t(1 MiB) measured - t(1 MiB) predicted by the bandwidth term alone, where
  t = S * factor / busbw (nccl-tests: busbw = S/t * factor).

Groups of more than 2 GPUs on an NVSwitch (`nvswitch_ring_scale`, `nvls_*`): published 8-GPU
nccl-tests figures against those 2-GPU rows (docs/nvswitch.md). `encryption_gbps_per_core`: measured
with `cryptography` on a stated host (docs/encryption.md).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

from topowise.errors import UsageError
from topowise.units import GIB, MIB, busbw_factor

FORMAT = "topowise.profile"
ELEMENTWISE_FORMS = ("kernels", "saved-bytes")  # Profile.elementwise_form
GEMM_FORMS = ("tiles", "one-rate")  # Profile.gemm_form
ATTENTION_FORMS = ("thread-blocks", "sequence")  # Profile.attention_form
VERSION = 1

LINK_CLASSES = ("NV", "PCIe")
OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")

# nccl-tests busbw (GB/s) on 2x H200 (NV18, NCCL 2.28; docs/sources.md, "2x H200 nccl-tests");
# P2P off = NCCL_P2P_DISABLE=1.
MEASURED_BUSBW = {
    ("NV", "all_reduce"): {MIB: 44.5, GIB: 329.0},
    ("NV", "all_gather"): {MIB: 22.6, GIB: 267.0},
    ("NV", "reduce_scatter"): {MIB: 22.1, GIB: 274.0},
    ("PCIe", "all_reduce"): {MIB: 15.9, GIB: 27.7},
    ("PCIe", "all_gather"): {MIB: 12.5, GIB: 25.0},
}
# Ops nccl-tests was not run for, measured by `topowise bench comm` (the calibrate sweep) on the same
# machine: broadcast (ZeRO-1 broadcasts every parameter after the step) and PCIe reduce_scatter.
OWN_BUSBW = {
    ("NV", "broadcast"): {MIB: 70.7, GIB: 368.0},
    ("PCIe", "broadcast"): {MIB: 27.8, GIB: 50.1},
    ("PCIe", "reduce_scatter"): {MIB: 12.3, GIB: 25.4},
}
OWN_WHERE = ("topowise bench comm on 2x H200 (NV18 / NCCL_P2P_DISABLE=1), 2026-11-30, "
             "docs/results/2026-11-30-h200x2/run2/profile-records/collectives.jsonl")
# line rates of the measured links: NVLink 4, 18 x 26.5625 GB/s; PCIe Gen5 x16 (hardware.py)
MEASURED_LINE_GBPS = {"NV": 478.0, "PCIe": 63.0}
MEASURED_WHERE = "nccl-tests on 2x H200 (NV18 / NCCL_P2P_DISABLE=1), 2026-11-30, docs/sources.md"


def _comm_defaults() -> tuple[dict, dict, dict]:
    """(efficiency, latency_s, sources) per "LINK/op", from MEASURED_BUSBW.

    Rows not in nccl-tests' table come from our own bench comm (OWN_BUSBW). A PCIe latency is never
    below the NVLink one for the same op (the host path adds hops; keeps pcie >= nvlink).
    """
    eff, lat, src = {}, {}, {}
    for link in LINK_CLASSES:
        for op in OPS:
            row_op, where = op, MEASURED_WHERE
            row = MEASURED_BUSBW.get((link, op))
            if row is None:
                row, where = OWN_BUSBW[(link, op)], OWN_WHERE
            line = MEASURED_LINE_GBPS[link]
            e = row[GIB] / line
            factor = busbw_factor(row_op, 2)
            alpha = MIB * factor / (row[MIB] * 1e9) - MIB * factor / (row[GIB] * 1e9)
            if link != "NV":
                alpha = max(alpha, lat[f"NV/{op}"])
            key = f"{link}/{op}"
            eff[key] = round(e, 4)
            lat[key] = round(alpha, 8)
            src[f"comm_efficiency.{key}"] = (f"{where}: {row_op} busbw {row[GIB]:g} GB/s at 1 GiB "
                                              f"/ {line:g} GB/s line = {e:.3f}")
            src[f"latency_s.{key}"] = (f"{where}: {row_op} 1 MiB row ({row[MIB]:g} GB/s busbw) less "
                                        f"the bandwidth term = {alpha * 1e6:.1f} us")
    return eff, lat, src


_EFF, _LAT, _COMM_SOURCES = _comm_defaults()

HOST_FALLBACK = {"hsdp": "zero3"}
COMPILED_HOST_FALLBACK = {"zero1": "ddp"}  # compiled blocks under DDP's hooks; no compiled zero1 was measured
# Step-time defaults: `topowise calibrate` on the 2x H200 machine (host: 32-core Intel Xeon VM), torch
# 2.11, 2026-11-30, docs/results/2026-11-30-h200x2/run10/profile.json; each source below says from what.
H200_RUN = "calibrate on 2x H200 (docs/results/2026-11-30-h200x2/run10/profile.json)"
H200_STEP_FIT = (f"{H200_RUN}: least squares of predicted vs measured step time over 10 GPU-bound runs "
                 "(llama3.2-1b, qwen2.5-0.5b at 8192 tokens; ddp, zero1, zero2, zero3; NVLink and P2P off); "
                 "rms error 2.3%, worst 4.8%")
# The overlaps since the step's phases became timelines (overlap.py) and FSDP2's per-parameter cast and
# copies (step.py) were modelled: run 10's records fitted again, with that run's GPU rates in the records' own
# form (one rate for all FLOPs; tests/unit/earlier_model.py replays them so)
H200_OVERLAP_FIT = (f"{H200_RUN} records, fitted again with the phase timelines of costmodel/overlap.py and "
                    "the per-parameter casts and copies of costmodel/step.py at their measured rates (overlaps "
                    "with compute_efficiency 0.7610 and activation_traffic 16.86, one rate for all FLOPs as those "
                    "records were; `python benchmarks/overlap_refit.py --rates`, "
                    "docs/results/2026-11-30-h200x2/refit6): rms error 1.3%, worst 2.3% over its GPU-bound runs; "
                    "held out (runs 4-17) GPU-bound 2.3-5.0% mean per run, worst 10.4%")
# The classic one-GPU fit (llama3.2-1b and qwen2.5-0.5b at 1 x 8192, model-change/fit) gave 0.6612 and
# 10.03 with one rate for all FLOPs, 0.7848 and 8.863 with the attention term and FSDP2's work per
# parameter (0.785 is the GEMM kernels' own rate in a traced step), 0.8008 and 8.876 with each copy at its
# measured rate; the designed fit below predicts the runs no fit saw better (docs/calibration.md, "A
# designed calibration on one GPU"). Those traffics were per byte the blocks save for backward; the designed fit
# gave 0.8167 and 9.558 so. Since the blocks' elementwise kernels are counted (costmodel/elementwise.py) the same
# fit gives 0.7246 and 1.105 (bytes at the memory-bound rate per byte the kernels move; the Llama-style blocks'
# kernels timed alone took 0.92-1.06 of what 1.105 prices: docs/calibration.md, "The elementwise kernels, counted").
# With each block Linear's passes priced by their shape under the power limit (costmodel/gemm.py; Profile.gemm_form),
# 0.7361 and 1.0457: compute_efficiency is then the rate of a GEMM that fills every wave of its tiles inside a step
# (the traced steps' GEMM kernels ask for 0.80: docs/calibration.md, "The GEMM rate by shape, in the model"). With the
# attention by its thread blocks (attention_form), 0.7321 and 1.0421.
H200_MODEL_FIT = ("the designed calibration's training shapes on one H200 (four Llama-style configs of "
                  "topowise/calibrate/design.py, no communication; docs/results/2026-12-02-h200x1/design/run22, "
                  "`python benchmarks/compile_accuracy.py --dir docs/results/2026-12-02-h200x1/design/run22 "
                  "--fit-eager`): least squares of predicted vs measured step time over its 6 steady GPU-bound runs, "
                  "the causal attention at its measured rate by its thread blocks (attention_efficiency, "
                  "attention_block_offset), the casts and copies per "
                  "parameter at their measured rates (step.py), the blocks' elementwise kernels counted one by "
                  "one (costmodel/elementwise.py) and each block Linear's GEMMs at the share its shape reaches "
                  "(costmodel/gemm.py), rms error 0.4%, worst 0.7%; no earlier one-GPU run "
                  "in it: 21 eager GPU-bound ones (1024-32768 tokens) mean 0.8%, worst 2.4%, of which the 12 whose "
                  "block no design config has (0.95B and 2.46B GQA configs, llama3.2-3b, qwen2.5-0.5b) 0.8% / 2.4% "
                  "(tests/unit/test_designed_fit.py; with the attention's sequence form 0.8% / 2.9% and 1.1% / 2.9%, "
                  "with one rate for every GEMM as well 1.0% / 3.7% and 1.3% / 3.7%)")

# Causal flash attention (F.scaled_dot_product_attention, cuDNN's kernel first) runs slower than the
# matmuls, faster at longer sequences and with more thread blocks to spread over the SMs: timed alone on one H200
# (docs/results/2026-12-03-h200x1/attention/run56, attn_probe.py: 176 shapes, batch 1-16, sequences 1024-16384,
# head dims 64 and 128, 12-32 heads, GQA 1-7), the FLOPs flops.py counts for it (7 L H Q T per token) ran at
# peak x e x T / (T + T0) x W / (W + W0), W = batch x heads x ceil(T / 128), the kernels' thread blocks (one per
# 128 query rows and head): e by head dim, T0 a per-row cost, W0 the blocks that fill the GPU half. Least squares
# of the relative time error (`python benchmarks/attention_shape.py DIR`): rms 4.1%, the six traced steps'
# shapes 1.3%, run16's 36 (another day, not fitted) 4.4%; the form without W, fitted the same way, 13.7%.
# Inside a step the attention runs at the step's clock (six traced steps: 0.885-0.970 of its rate alone, their mean
# SM clock / 1980 MHz within 1.3%); the model has no clock of its own, and the fitted compute_efficiency carries the
# mean (docs/calibration.md, "The attention by its thread blocks").
ATTENTION_EFFICIENCY: dict[str, float] = {"64": 0.483, "128": 0.636}
ATTENTION_SEQ_OFFSET = 750.0
ATTENTION_BLOCK_OFFSET = 150.0
ATTENTION_TILE_ROWS = 128  # query rows per thread block of the flash kernels
ATTENTION_WHERE = ("attn_probe.py on one H200, torch 2.11, cuDNN's SDPA, 2026-12-03 11:17 UTC "
                   "(docs/results/2026-12-03-h200x1/attention/run56): the causal attention's forward and backward "
                   "alone, GPU kernel time from the profiler, 176 shapes (`python benchmarks/attention_shape.py`)")
# The form before (profiles of attention_form "sequence"): peak x e x T / (T + T0), e 0.448 (64) and 0.593 (128),
# T0 900, fitted on six models at 8192 tokens a row (docs/results/2026-12-02-h200x1/kernels/run16, rms 3.7%).
SEQUENCE_FORM_EFFICIENCY: dict[str, float] = {"64": 0.448, "128": 0.593}
SEQUENCE_FORM_OFFSET = 900.0
# host seconds per block, forward / backward / optimizer: bench train's host phase times of qwen2.5-0.5b
# and llama3.2-1b at 128 tokens (GPU-bound share under half the step), median per block of the two
HOST_S_PER_LAYER: dict[str, float] = {
    "ddp/forward": 1.063e-3, "ddp/backward": 1.649e-3, "ddp/optimizer": 0.093e-3,
    "zero1/forward": 0.768e-3, "zero1/backward": 1.461e-3, "zero1/optimizer": 0.345e-3,
    "zero2/forward": 2.260e-3, "zero2/backward": 2.406e-3, "zero2/optimizer": 0.258e-3,
    "zero3/forward": 2.187e-3, "zero3/backward": 2.742e-3, "zero3/optimizer": 0.347e-3,
}

# Compiled blocks (torch.compile, bench train --compile): one H200 (16-core host), torch 2.11, 2026-12-01,
# docs/results/2026-12-01-h200x1/compile/; each source below says from what (topowise.calibrate.fit's
# fit_compiled and fit_host over those records, `python benchmarks/compile_accuracy.py --fit`).
COMPILE_WHERE = "bench train --compile on one H200 (docs/results/2026-12-01-h200x1/compile/fit)"
# Bytes at the memory-bound rate per byte Inductor's fused kernels move (costmodel/elementwise.py), fitted against
# what compiling saved beside each eager twin: llama3.2-1b, 1 x 8192, ddp 183.5 -> 174.9 and 174.8 ms, zero3
# 179.9 -> 173.9 and 174.0 ms, two rounds 3 minutes apart on one H200 (docs/results/2026-12-02-h200x1/timelines/
# run8); rms error 0.6% (1.6807 with one rate for every GEMM, 1.5502 with the attention's sequence form, 2026-12-03).
# Compiling saved less in the step than the fused kernels timed alone say (they ran at 0.57-0.72 of this term on
# llama3.2-1b's block, recompute/run35):
# what else compiling changes in a step is not itemized. (Per saved byte, the form before the kernels were counted:
# 7.5592; the earlier transformer's 6.09.)
COMPILED_TRAFFIC_WHERE = ("bench train --compile on one H200 (docs/results/2026-12-02-h200x1/timelines/run8/compiled), "
                          "against the eager rates of the designed fit (H200_MODEL_FIT)")
COMPILED_ACTIVATION_TRAFFIC = 1.5423
# host seconds per block, compiled: llama3.2-1b (ddp, zero2, zero3) and qwen2.5-0.5b (ddp, zero3) at 128
# tokens, median per block. Dynamo's guards cost the host more than the fused kernels save it: compiled
# ddp's forward is slower on the host than eager's on the same machine (24.2 against 13.4 ms for llama3.2-1b)
COMPILED_HOST_S_PER_LAYER: dict[str, float] = {
    "compiled/ddp/forward": 1.127e-3, "compiled/ddp/backward": 1.095e-3, "compiled/ddp/optimizer": 0.117e-3,
    "compiled/zero2/forward": 1.965e-3, "compiled/zero2/backward": 2.355e-3, "compiled/zero2/optimizer": 0.370e-3,
    "compiled/zero3/forward": 1.423e-3, "compiled/zero3/backward": 2.209e-3, "compiled/zero3/optimizer": 0.285e-3,
}
# Checkpointing's host work per block (step.checkpointing_host_s), beyond the plain terms: "checkpoint/" per
# block recomputed whole (torch's checkpoint in the forward; the rerun and its hooks in the backward),
# "selective-op/" per block under per-op selective (the policy's dispatch mode on every operator of the
# forward and of the rerun). calibrate's fit_checkpointing_host over llama3.2-1b and qwen2.5-0.5b, ddp and
# zero3, at 128 tokens on one H200, none / per op / full in one call (`python benchmarks/checkpointing_host.py`).
CHECKPOINTING_HOST_WHERE = ("bench train --checkpointing none|selective|full at 1 x 128 tokens on one H200, 2026-12-02 "
                            "16:30 UTC (docs/results/2026-12-02-h200x1/recompute/run34)")
CHECKPOINTING_HOST_S_PER_LAYER: dict[str, float] = {
    "checkpoint/forward": 0.637e-3, "checkpoint/backward": 2.373e-3,
    "selective-op/forward": 2.267e-3, "selective-op/backward": 2.977e-3,
}
# DeepSpeed ZeRO (0.19.8, bench train --engine deepspeed): host seconds per block in the forward and the
# backward, and per step in the optimizer step (DeepSpeed's step works on flat partitions: one fused AdamW
# over the flat fp32 partition for ZeRO-1/2, whatever the blocks). Median of llama3.2-1b and qwen2.5-0.5b
# at 128 tokens on one H200 (`python benchmarks/deepspeed_host.py --fit`). ZeRO-3's per-module hooks cost
# the host 4-5 times FSDP2's per block; ZeRO-1/2's optimizer step takes 32-41 ms of host whatever the model.
DEEPSPEED_HOST_WHERE = ("bench train --engine deepspeed on one H200, DeepSpeed 0.19.8, 2026-12-02 "
                        "(docs/results/2026-12-02-h200x1/deepspeed/run26)")
DEEPSPEED_HOST_S_PER_LAYER: dict[str, float] = {
    "deepspeed/zero1/forward": 0.845e-3, "deepspeed/zero1/backward": 1.827e-3,
    "deepspeed/zero2/forward": 0.675e-3, "deepspeed/zero2/backward": 2.234e-3,
    "deepspeed/zero3/forward": 5.140e-3, "deepspeed/zero3/backward": 5.254e-3,
}
DEEPSPEED_HOST_S_PER_STEP: dict[str, float] = {
    "deepspeed/zero1/optimizer": 36.845e-3, "deepspeed/zero2/optimizer": 34.375e-3,
    "deepspeed/zero3/optimizer": 27.371e-3,
}
# the first step's excess over a steady one in the 10 compiled runs: 4.0-11.9 s, median 7.97 s (Inductor's
# on-disk cache warm after the first launch of a shape; a cold one is the slow end)
COMPILE_S = 7.97

# NVLink groups of more than two GPUs on an NVSwitch board (costmodel/comm.py). The defaults above are
# 2-GPU measurements; published 8-GPU nccl-tests figures say how a ring's achieved fraction moves with n:
# 8x H100 SXM reaches ~370 GB/s busbw with NCCL_ALGO=Ring, for all_reduce and for the other collectives
# (NVIDIA/nccl-tests issue 212, maintainer; 368.8 GB/s all_reduce with NVLS off in issue 309), against
# 329 / 267 / 274 GB/s all_reduce / all_gather / reduce_scatter on 2x H200, the same NVLink 4 and line rate.
RING_BUSBW_8GPU_NVLINK4 = 370.0
NVSWITCH_RING_SCALE_8: dict[str, float] = {
    op: round(RING_BUSBW_8GPU_NVLINK4 / MEASURED_BUSBW[("NV", op)][GIB], 4)
    for op in ("all_reduce", "all_gather", "reduce_scatter")}
# NVLink SHARP all-reduce: each GPU moves S (1 + 1/n) bytes each way (multimem loads reduce in the switch,
# multimem stores multicast), so busbw <= line x 2(n-1)/(n+1); 8x H200 reaches 475 GB/s busbw
# (NVIDIA/nccl-tests issue 272): 475 / (478 x 14/9) of that bound.
NVLS_BUSBW_8GPU_H200 = 475.0
NVLS_EFFICIENCY = round(NVLS_BUSBW_8GPU_H200 / (MEASURED_LINE_GBPS["NV"] * 2 * 7 / 9), 4)
NVLS_LATENCY_S = 25e-6  # NCCL's tuner: hwLatencies[NVLINK][NVLS][Simple] = 25 us (src/graph/tuning.cc)

# GB/s one host core encrypts and authenticates (AEAD seal of 1 MiB buffers through the `cryptography`
# package, i.e. OpenSSL): topowise.calibrate.crypto on the machine named in ENCRYPTION_WHERE, median of 3 runs.
ENCRYPTION_GBPS_PER_CORE: dict[str, float] = {"aes-gcm": 9.32, "chacha20": 3.58}
ENCRYPTION_WHERE = ("measure_encryption on an AMD EPYC (Zen 4) VM, 2 cores, VAES/VPCLMULQDQ, cryptography 50.0.2 "
                    "with OpenSSL 4.0.3, 2026-12-01, docs/results/2026-12-01-cpu-encryption")

_SOURCES = {
    "compute_efficiency": f"{H200_MODEL_FIT} (the bf16 8192^3 matmul alone reaches 0.80 of the datasheet peak)",
    "hbm_efficiency": (f"{H200_RUN}: the fused AdamW step (3352 GB/s) and the fp32 cross-entropy (3702 GB/s) "
                       "timed alone, mean 3527 of the datasheet 4800 GB/s"),
    "activation_traffic": H200_MODEL_FIT,
    "elementwise_form": ("kernels: the blocks' elementwise work counted kernel by kernel (costmodel/elementwise.py; "
                         "docs/calibration.md, \"The elementwise kernels, counted\")"),
    "gemm_form": ("tiles: each block Linear's passes at the best rate x the share its output tiles and reduction "
                  "length reach ^ 0.49, the power limit's (costmodel/gemm.py; docs/calibration.md, \"The GEMM rate "
                  "by shape, in the model\")"),
    "overlap.ddp": H200_OVERLAP_FIT,
    "overlap.zero1": f"{H200_OVERLAP_FIT} (at its bound)",
    "overlap.zero2": H200_OVERLAP_FIT,
    "overlap.zero3": H200_OVERLAP_FIT,
    "overlap.hsdp": f"{H200_RUN}: no hsdp run; the same mechanism as zero3, its fitted value",
    **{f"host_s_per_layer.{k}": (f"{H200_RUN}: median over qwen2.5-0.5b and llama3.2-1b at 128 tokens of bench "
                                 "train's host seconds in the phase per block; a faster host has less")
       for k in HOST_S_PER_LAYER},
    "allocator_slack": ("stated guess, to be calibrated: the caching allocator reserves ~5% above the "
                        "allocated peak (fragmentation, rounding to 2 MiB blocks)"),
    "cuda_context_bytes": ("typical, to be calibrated: CUDA context + cuBLAS/NCCL workspaces ~500 MiB per "
                           "process, outside torch.cuda.max_memory_allocated"),
    "memory_headroom": "stated choice: a plan must leave 5% of GPU memory free to count as fitting",
    "peak_flops": ("0: the datasheet bf16 dense peak of the GPU (hardware.py); calibrate sets it where there is none "
                   "(CPU)"),
    **{f"nvswitch_ring_scale.{op}": (
        f"8x H100 SXM ~{RING_BUSBW_8GPU_NVLINK4:g} GB/s busbw with NCCL_ALGO=Ring (NVIDIA/nccl-tests issues 212 and "
        f"309) / {MEASURED_BUSBW[('NV', op)][GIB]:g} GB/s on 2x H200 ({MEASURED_WHERE}) = {v:.3f}; linear in 1/n "
        "between 2 and 8 GPUs") for op, v in NVSWITCH_RING_SCALE_8.items()},
    "nvls_efficiency": (f"8x H200 all_reduce {NVLS_BUSBW_8GPU_H200:g} GB/s busbw with NVLS (NVIDIA/nccl-tests "
                        f"issue 272) / (478 GB/s x 2(n-1)/(n+1) at n=8) = {NVLS_EFFICIENCY:.3f}; 8x H100: ~480 "
                        "(issue 212)"),
    "nvls_latency_s": "NCCL's tuner constant for NVLS over NVLink, Simple protocol: 25 us (src/graph/tuning.cc)",
    "nvls_enabled": ("NCCL's default NCCL_NVLS_ENABLE=2: on wherever the driver reports multicast support "
                     "(NVSwitch gen 3+, NCCL >= 2.17; src/transport/nvls.cc); false = NCCL_NVLS_ENABLE=0"),
    **{f"encryption_gbps_per_core.{k}": (
        f"{ENCRYPTION_WHERE}: {k} {v:g} GB/s on one core (1 MiB buffers, encrypt + tag); "
        "`openssl speed` beside it there") for k, v in ENCRYPTION_GBPS_PER_CORE.items()},
    "host_spread": ("0.32: the largest change of a host-bound step recorded on this project's machines, inside "
                    "one launch: llama3.2-1b ddp at 128 tokens on one H200, 33.0 then 43.7 ms 70 s later in the "
                    "same process (docs/results/2026-12-02-h200x1/host-gemm/run14); between launches minutes "
                    "apart 1.21 (docs/results/2026-12-01-h200x1/model-profile/run3/README.md)"),
    "compiled_activation_traffic": (f"{COMPILED_TRAFFIC_WHERE}: least squares of the compiled prediction against the "
                                    "eager prediction less what compiling saved (measured eager - compiled) over "
                                    "llama3.2-1b 1 x 8192 ddp and zero3, two rounds, per byte the fused kernels move "
                                    "(costmodel/elementwise.py); rms error 0.6%, worst 0.7%"),
    "compile_s": (f"{COMPILE_WHERE}: median over 10 compiled runs (llama3.2-1b, qwen2.5-0.5b; 128 and 8192 "
                  "tokens) of the first warm-up step less the median timed step: 4.0-11.9 s"),
    **{f"host_s_per_layer.{k}": (f"{COMPILE_WHERE}: median over the host-bound compiled runs at 128 tokens "
                                 "(llama3.2-1b ddp/zero2/zero3, qwen2.5-0.5b ddp/zero3) of bench train's host "
                                 "seconds in the phase per block; measured on another host than the eager terms")
       for k in COMPILED_HOST_S_PER_LAYER},
    **{f"attention_efficiency.{k}": f"{ATTENTION_WHERE}: head dim {k}, e of rate = peak e T / (T + T0) W / (W + W0)"
       for k in ATTENTION_EFFICIENCY},
    "attention_seq_offset": f"{ATTENTION_WHERE}: T0 of the same fit, tokens, one for both head dims",
    "attention_block_offset": f"{ATTENTION_WHERE}: W0 of the same fit, thread blocks (batch x heads x T / 128)",
    "attention_form": ("thread-blocks: the attention's rate alone by head dim, sequence and thread blocks "
                       "(docs/calibration.md, \"The attention by its thread blocks\")"),
    **{f"host_s_per_layer.{k}": (f"{DEEPSPEED_HOST_WHERE}: median over llama3.2-1b and qwen2.5-0.5b at 128 tokens "
                                 "of the host seconds in the phase per block")
       for k in DEEPSPEED_HOST_S_PER_LAYER},
    **{f"host_s_per_step.{k}": (f"{DEEPSPEED_HOST_WHERE}: median over llama3.2-1b and qwen2.5-0.5b at 128 tokens "
                                "of the host seconds in the optimizer step")
       for k in DEEPSPEED_HOST_S_PER_STEP},
    **{f"host_s_per_layer.{k}": (f"{CHECKPOINTING_HOST_WHERE}: median over llama3.2-1b and qwen2.5-0.5b, ddp and "
                                 "zero3, of the host seconds in the phase beyond the plain terms fitted from the "
                                 "same call, per block the mode touches")
       for k in CHECKPOINTING_HOST_S_PER_LAYER},
    "activation_scale": ("1: memory.py counts the saved tensors of the bench transformer one by one; calibrate "
                         "fits measured allocated peaks against that count"),
}


@dataclass(frozen=True)
class Profile:
    """Tunable parameters; `sources[name]` says where each value came from."""

    compute_efficiency: float = 0.7321  # achieved / datasheet bf16 peak: the matmuls' best (gemm_form; all FLOPs if no
    # attention term)
    # what compute_efficiency is the rate of: "tiles", a GEMM that fills every wave of its tiles and reduces without
    # end (the block Linears reach a share of it by their shape: costmodel/gemm.py); "one-rate", every matmul (a
    # profile file with compute_efficiency and no gemm_form, as every one fitted before the shape form, is read so)
    gemm_form: str = "tiles"
    # the causal attention's achieved fraction of the peak by head dim ("64" -> e), at sequence T times
    # T / (T + attention_seq_offset) x W / (W + attention_block_offset), W its thread blocks; empty: attention runs
    # at compute_efficiency like the matmuls (the form of profiles fitted before the attention term)
    attention_efficiency: dict = field(default_factory=lambda: dict(ATTENTION_EFFICIENCY))
    attention_seq_offset: float = ATTENTION_SEQ_OFFSET
    attention_block_offset: float = ATTENTION_BLOCK_OFFSET
    # "thread-blocks": the form above; "sequence": e T / (T + T0) (a profile file with attention_efficiency and no
    # attention_form, every one fitted before the thread blocks were counted, is read so, with its own values)
    attention_form: str = "thread-blocks"
    hbm_efficiency: float = 0.7348  # achieved / datasheet HBM bandwidth of the memory-bound passes
    comm_efficiency: dict = field(default_factory=lambda: dict(_EFF))  # "NV/all_reduce" -> busbw / line
    latency_s: dict = field(default_factory=lambda: dict(_LAT))  # "NV/all_reduce" -> alpha seconds
    overlap: dict = field(default_factory=lambda: {
        "ddp": 0.9502, "zero1": 0.9958, "zero2": 0.8697, "zero3": 0.8399, "hsdp": 0.8399})
    allocator_slack: float = 0.05  # reserved above allocated, fraction of allocated
    cuda_context_bytes: int = 500 * MIB
    memory_headroom: float = 0.05  # fraction of GPU memory left free for `fits`
    peak_flops: float = 0.0  # FLOP/s compute_efficiency is relative to; 0: the GPU's datasheet bf16 peak
    activation_scale: float = 1.0  # multiplies the saved-activation bytes of memory.py
    # bytes at the memory-bound rate per byte the blocks' elementwise kernels move (costmodel/elementwise.py)
    activation_traffic: float = 1.0421
    # the same with every block compiled (torch.compile): Inductor's fused kernels
    compiled_activation_traffic: float = COMPILED_ACTIVATION_TRAFFIC
    # what the two traffics multiply: "kernels", the bytes the elementwise kernels move; "saved-bytes", the bytes
    # the blocks save for backward (every profile fitted before 2026-12-03, which is read so: step.block_elementwise)
    elementwise_form: str = "kernels"
    # host (Python) seconds per transformer block to issue each phase, "strategy/phase" ->
    # seconds; phases forward, backward, optimizer. A phase takes max(host, GPU) (step.py).
    # "compiled/strategy/phase": the same with every block compiled
    # "checkpoint/phase", "selective-op/phase": what checkpointing adds (step.checkpointing_host_s)
    # "deepspeed/strategy/phase": DeepSpeed's ZeRO (the forward and the backward; its optimizer step is
    # in host_s_per_step)
    host_s_per_layer: dict = field(default_factory=lambda: dict(HOST_S_PER_LAYER, **COMPILED_HOST_S_PER_LAYER,
                                                                **DEEPSPEED_HOST_S_PER_LAYER,
                                                                **CHECKPOINTING_HOST_S_PER_LAYER))
    # host seconds per step, whatever the blocks, "engine/strategy/phase": DeepSpeed's optimizer step
    host_s_per_step: dict = field(default_factory=lambda: dict(DEEPSPEED_HOST_S_PER_STEP))
    # seconds the first step of a compiled run takes over a steady one: Dynamo and Inductor compiling
    # the blocks, paid once per launch (not part of the step time)
    compile_s: float = COMPILE_S
    # how much faster or slower the host may run than the host terms say (a fraction), in another launch
    # or later in the same one: a host-bound step is predicted as a range (step.py), not a point
    host_spread: float = 0.32
    # NVLink groups of more than 2 GPUs on an NVSwitch (comm.py): op -> an 8-GPU ring's achieved
    # fraction over the 2-GPU one (ops not named: 1)
    nvswitch_ring_scale: dict[str, float] = field(default_factory=lambda: dict(NVSWITCH_RING_SCALE_8))
    # NVLink SHARP all-reduce (NVSwitch gen 3+): achieved fraction of its traffic bound, latency, on/off
    nvls_efficiency: float = NVLS_EFFICIENCY
    nvls_latency_s: float = NVLS_LATENCY_S
    nvls_enabled: bool = True  # False: NCCL_NVLS_ENABLE=0
    # GB/s one host core encrypts and authenticates, "aes-gcm" / "chacha20" (costmodel/encryption.py)
    encryption_gbps_per_core: dict[str, float] = field(default_factory=lambda: dict(ENCRYPTION_GBPS_PER_CORE))
    fingerprint: str = ""  # "" for the default; calibrate writes machine + date + versions
    sources: dict = field(default_factory=lambda: dict(_SOURCES, **_COMM_SOURCES))

    def host_s(self, strategy: str, phase: str, compiled: bool = False) -> float:
        """Host seconds per block for a strategy's phase (hsdp runs zero3's code, zero1 ddp's when
        compiled; 0 when unknown). Compiled: the "compiled/" terms, else the eager ones."""
        names = (strategy, HOST_FALLBACK.get(strategy))
        keys = [f"compiled/{n}/{phase}" for n in names + (COMPILED_HOST_FALLBACK.get(strategy),)] if compiled else []
        for key in keys + [f"{n}/{phase}" for n in names]:
            value = self.host_s_per_layer.get(key)
            if value is not None:
                return float(value)
        return 0.0

    def deepspeed_host_s(self, strategy: str, phase: str, blocks: int) -> float:
        """Host seconds of a DeepSpeed ZeRO phase: per block x blocks plus per step (hsdp, ZeRO++ hpZ,
        runs zero3's code; 0 when unknown)."""
        key = f"deepspeed/{HOST_FALLBACK.get(strategy, strategy)}/{phase}"
        return float(self.host_s_per_layer.get(key, 0.0)) * blocks + float(self.host_s_per_step.get(key, 0.0))

    def attention_rate(self, head_dim: int, seq_len: int, peak: float, batch: int, heads: int) -> float | None:
        """FLOP/s of the causal attention's counted FLOPs (flops.py), timed alone, at this head dim, sequence,
        micro-batch and query heads: the measured efficiency of the nearest head dims, linear between them and held
        beyond, x T / (T + T0), and for attention_form "thread-blocks" x W / (W + W0), W = batch x heads x
        ceil(T / 128); None without an attention term (attention then runs at compute_efficiency)."""
        if not self.attention_efficiency:
            return None
        points = sorted((int(k), float(v)) for k, v in self.attention_efficiency.items())
        below = [p for p in points if p[0] <= head_dim] or points[:1]
        above = [p for p in points if p[0] >= head_dim] or points[-1:]
        (d0, e0), (d1, e1) = below[-1], above[0]
        e = e0 if d1 == d0 else e0 + (e1 - e0) * (head_dim - d0) / (d1 - d0)
        rate = peak * e * seq_len / (seq_len + self.attention_seq_offset)
        if self.attention_form == "thread-blocks":
            blocks = batch * heads * math.ceil(seq_len / ATTENTION_TILE_ROWS)
            rate *= blocks / (blocks + self.attention_block_offset)
        return rate

    def comm(self, link: str, op: str) -> tuple[float, float]:
        """(achieved fraction of line rate, latency seconds) for an op on a link class."""
        key = f"{link}/{op}"
        if key not in self.comm_efficiency:
            key = f"PCIe/{op}"  # an unknown class (network): the slowest one we know
        return self.comm_efficiency[key], self.latency_s[key]

    def to_dict(self) -> dict:
        return dict(asdict(self), format=FORMAT, version=VERSION)

    @classmethod
    def from_dict(cls, data: dict, where: str = "JSON") -> Profile:
        if data.get("format", FORMAT) != FORMAT:
            raise UsageError(f"{where} is not a topowise profile (no \"format\": \"{FORMAT}\")")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known - {"format", "version"})
        if unknown:
            raise UsageError(f"{where}: unknown profile field(s) {', '.join(unknown)}; "
                             f"known: {', '.join(sorted(known))}")
        base = cls()
        if "compute_efficiency" in data and "attention_efficiency" not in data:
            base = replace(base, attention_efficiency={})  # fitted with one rate for all FLOPs: read so
        if "attention_efficiency" in data and "attention_form" not in data:
            base = replace(base, attention_form="sequence", attention_efficiency=dict(SEQUENCE_FORM_EFFICIENCY),
                           attention_seq_offset=SEQUENCE_FORM_OFFSET)  # fitted with the sequence form: read so
        if data.get("attention_form", "thread-blocks") not in ATTENTION_FORMS:
            raise UsageError(f"{where}: attention_form must be one of {', '.join(ATTENTION_FORMS)}, "
                             f"not {data['attention_form']!r}")
        if "activation_traffic" in data and "elementwise_form" not in data:
            base = replace(base, elementwise_form="saved-bytes")  # fitted per saved byte: read so
        if "compute_efficiency" in data and "gemm_form" not in data:
            base = replace(base, gemm_form="one-rate")  # fitted with one rate for every matmul: read so
        if data.get("gemm_form", "tiles") not in GEMM_FORMS:
            raise UsageError(f"{where}: gemm_form must be one of {', '.join(GEMM_FORMS)}, not {data['gemm_form']!r}")
        if data.get("elementwise_form", "kernels") not in ELEMENTWISE_FORMS:
            raise UsageError(f"{where}: elementwise_form must be one of {', '.join(ELEMENTWISE_FORMS)}, "
                             f"not {data['elementwise_form']!r}")
        values = {}
        for name in known & set(data):
            default = getattr(base, name)
            if name == "attention_efficiency":  # one measured set, taken whole ({}: one rate for all FLOPs)
                values[name] = {str(k): float(v) for k, v in data[name].items()}
            elif isinstance(default, dict):
                values[name] = dict(default, **data[name])  # a partial profile keeps the other defaults
            elif isinstance(default, bool):
                if not isinstance(data[name], bool):
                    raise UsageError(f"{where}: {name} must be true or false, not {data[name]!r}")
                values[name] = data[name]
            else:
                values[name] = type(default)(data[name])
        return replace(base, **values)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)


def default_profile() -> Profile:
    return Profile()


def load_profile(path: str | Path) -> Profile:
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise UsageError(f"{path}: cannot read profile ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not a profile (binary, not JSON text); give the JSON file "
                         "`topowise calibrate` wrote") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: a profile is a JSON object")
    return Profile.from_dict(data, str(path))
