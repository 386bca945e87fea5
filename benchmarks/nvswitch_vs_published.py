"""Predicted against published 8-GPU all-reduce bus bandwidth on NVSwitch boards (nccl-tests issue threads).

    python benchmarks/nvswitch_vs_published.py [--size-gib 8] [--markdown]

"before": the 2-GPU calibration carried to 8 GPUs unchanged (no ring scale, no NVLS), as the cost
model priced these groups until the n-GPU ring and NVLink SHARP were modelled; "now": the default
profile. Sizes as the published peaks (8 GiB; the model's busbw is flat there).
"""

from __future__ import annotations

import argparse
import dataclasses

from topowise.costmodel import comm
from topowise.costmodel.profile import default_profile
from topowise.topology.model import build
from topowise.topology.presets import load_preset
from topowise.units import GIB, busbw_factor

# (label, preset, NVLS on in the published run, published busbw GB/s, source)
CASES = (
    ("8x H100 SXM, NCCL defaults (NVLS)", "hgx-h100-8", True, 480.0, "nccl-tests#212 (maintainer: ~480)"),
    ("8x H100 SXM, NCCL_ALGO=Ring", "hgx-h100-8", False, 370.0, "nccl-tests#212 (maintainer: ~370)"),
    ("8x H100 SXM, NVLS disabled", "hgx-h100-8", False, 368.76, "nccl-tests#309"),
    ("8x H200 SXM, NCCL defaults (NVLS)", "hgx-h200-8", True, 475.0, "nccl-tests#272"),
    ("8x H800 SXM (NV8), NCCL defaults (NVLS)", "h800-8", True, 215.0, "nccl#1374"),
    ("8x A100 SXM (no NVLS)", "dgx-a100-8", True, 230.0, "nccl-tests#149, #175 (~230)"),
    ("2x H200 (NV18), NVLS off (calibration)", "hgx-h200-8", False, 329.0, "docs/sources.md, 2x H200 nccl-tests"),
)


def h800_board():
    """An H800 SXM board: the H100 with 8 NVLink 4 links per GPU (212.5 GB/s) through the NVSwitch."""
    pairs = {(a, b): "NV" for a in range(8) for b in range(a + 1, 8)}
    # hardware.py has no H800 row: the H100 (NVLink 4) with 8 links per GPU is the same wiring
    return build("h800-8", "NVIDIA H100 80GB HBM3", pairs, nvlink_counts=dict.fromkeys(pairs, 8), nvswitch=True)


def busbw(preset: str, n: int, profile, size: float) -> float:
    topo = h800_board() if preset == "h800-8" else load_preset(preset)
    line, link = comm.group_link(topo, tuple(range(n)))
    return size * busbw_factor("all_reduce", n) / comm.collective_time("all_reduce", size, n, line, link, profile) / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-gib", type=float, default=8.0)
    args = ap.parse_args()
    size = args.size_gib * GIB
    now = default_profile()
    before = dataclasses.replace(now, nvswitch_ring_scale={}, nvls_enabled=False)
    print(f"all_reduce busbw at {args.size_gib:g} GiB, GB/s\n")
    print("| case | published | source | predicted before | error | predicted now | error |")
    print("|---|---|---|---|---|---|---|")
    for label, preset, nvls, published, source in CASES:
        n = 2 if label.startswith("2x") else 8
        b = busbw(preset, n, before, size)
        a = busbw(preset, n, now if nvls else dataclasses.replace(now, nvls_enabled=False), size)
        print(f"| {label} | {published:g} | {source} | {b:.0f} | {100 * (b / published - 1):+.1f}% | {a:.0f} | "
              f"{100 * (a / published - 1):+.1f}% |")


if __name__ == "__main__":
    main()
