"""`doctor --measure`, the judging: a measured GPU-pair copy matrix and one all-reduce over the node's GPUs,
each held against what the cost model says this wiring gives, naming the pair or the GPU that falls short.

Pure (no torch): topowise/doctor/measure.py measures, this reads the records. The expected figures are the
cost model's through topowise.nccltests.expected_row, the same prices `nccl-tests` prints: a pair as a
2-rank broadcast (busbw factor 1: the bytes one GPU sends the other), the node as an all-reduce over all
its GPUs. docs/doctor.md ("Measured") says why the thresholds are where they are.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from topowise.doctor.checks import FAIL, OK, WARN, Check, _ranges
from topowise.units import MIB

# A fault takes far more than the model's error: the cost model's pair and all-reduce prices sit within
# ~15% of runs (docs/nccl-tests.md; nccltests.SHORT flags a row at 85%), copy engines reach 0.9-1.1x of
# the NCCL pair price (2x H200 NV18: 384 GB/s copied, 362 expected; research/2026-11-30-h200x2/run1), while
# a GPU at Gen3 x8 instead of Gen5 x16 keeps 1/8 of its PCIe rate and a pair pushed off NVLink or through
# the root complex (ACS) a tenth or less. Under 70% (bench comm's FLAG_BELOW_PCT too) is a finding.
SHORT_OF_EXPECTED = 0.70
# Under half is a fault, not noise: the smallest real loss is one PCIe generation or half the lanes (1/2).
FAR_SHORT = 0.50
PAIR_BYTES = 64 * MIB  # bandwidth-bound on every wiring: latency is under 1% of a 64 MiB copy even on NVLink
ALL_REDUCE_BYTES = 256 * MIB  # nccl-tests' bandwidth-bound end; NVLS and rings reach their plateau by then
SOURCE_PAIRS = ("torch dst.copy_(src) between cuda:i and cuda:j (topowise.measure.p2p.copy_matrix) vs the cost "
                "model's 2-GPU broadcast (topowise.nccltests.expected_row)")
SOURCE_ALL_REDUCE = ("torch.distributed all_reduce, NCCL, one rank per GPU (topowise.measure.collectives) vs "
                     "topowise.nccltests.expected_row('all_reduce')")

Pair = tuple[int, int]


def pair_bandwidths(records: Iterable[dict]) -> dict[Pair, float]:
    """Per unordered pair, the faster direction of the one-way copies (p2p records, method "copy", mode "uni").

    A fault (a slow link, a pair off NVLink) slows both directions; one direction alone that is slow is
    the first copy paying for the peer mapping (2x H200: GPU0->1 112 GB/s, GPU1->0 384 GB/s, one NV18 pair)."""
    out: dict[Pair, float] = {}
    for r in records:
        if r.get("kind") != "p2p" or r.get("method") != "copy" or r.get("mode") != "uni":
            continue
        a, b = int(r["src"]), int(r["dst"])
        key = (min(a, b), max(a, b))
        out[key] = max(out.get(key, 0.0), float(r["gbps"]))
    return out


def expected_pair_gbps(topo, pairs: Iterable[Pair], nbytes: int = PAIR_BYTES, profile=None) -> dict[Pair, float]:
    """What the cost model says a copy of `nbytes` between each pair of GPUs reaches on `topo`."""
    from topowise.nccltests import expected_row

    return {p: expected_row("broadcast", nbytes, p, topo, profile).busbw_gbps for p in pairs}


def expected_all_reduce_gbps(topo, gpus: tuple[int, ...], nbytes: int = ALL_REDUCE_BYTES, profile=None) -> float:
    from topowise.nccltests import expected_row

    return expected_row("all_reduce", nbytes, gpus, topo, profile).busbw_gbps


def slow_gpus(ratios: Mapping[Pair, float]) -> list[int]:
    """GPUs short with every partner (two or more), each partner sound in some other pair: the GPU, not the
    pair, is at fault (its PCIe link, its NVLinks). A pair short alone names no GPU."""
    short = {p for p, r in ratios.items() if r < SHORT_OF_EXPECTED}
    partners: dict[int, list[int]] = {}
    for a, b in ratios:
        partners.setdefault(a, []).append(b)
        partners.setdefault(b, []).append(a)

    def pair(x: int, y: int) -> Pair:
        return (min(x, y), max(x, y))

    out = []
    for g, seen in sorted(partners.items()):
        if len(seen) < 2 or not all(pair(g, o) in short for o in seen):
            continue
        if all(any(pair(o, q) not in short for q in partners[o] if q != g) for o in seen):
            out.append(g)
    return out


def check_pairs(measured: Mapping[Pair, float], expected: Mapping[Pair, float]) -> Check:
    """The copy matrix against the cost model: ok, or the GPU(s) short with every partner and the pairs short
    on their own, warn under SHORT_OF_EXPECTED, fail under FAR_SHORT."""
    both = {p: (measured[p], expected[p]) for p in sorted(measured) if expected.get(p, 0) > 0}
    if not both:
        return Check("GPU pairs", WARN, "no pair measured against an expectation (no topology for these GPUs)",
                     "run `topowise bench comm` for the pair matrix alone", SOURCE_PAIRS)
    ratios = {p: m / e for p, (m, e) in both.items()}
    short = {p: r for p, r in ratios.items() if r < SHORT_OF_EXPECTED}
    if not short:
        worst = min(ratios, key=ratios.__getitem__)
        m, e = both[worst]
        return Check("GPU pairs", OK, f"{len(both)} pair(s), each at {ratios[worst]:.0%} or more of the expected "
                     f"(lowest GPU{worst[0]}-{worst[1]}: {m:.0f} of {e:.0f} GB/s)", "", SOURCE_PAIRS)
    gpus = slow_gpus(ratios)
    lines = []
    for g in gpus:
        mine = {p: both[p] for p in short if g in p}
        rates = sorted({round(e) for _, e in mine.values()})
        lines.append(f"GPU{g} with each of its {len(mine)} partners: {_span([m for m, _ in mine.values()], '.0f')} "
                     f"GB/s of {'/'.join(map(str, rates))} expected ({_span([ratios[p] for p in mine], '.0%')})")
    alone = [p for p in sorted(short) if not set(p) & set(gpus)]
    lines += [f"GPU{a}-GPU{b}: {both[(a, b)][0]:.0f} of {both[(a, b)][1]:.0f} GB/s ({short[(a, b)]:.0%})"
              for a, b in alone]
    status = FAIL if min(short.values()) < FAR_SHORT else WARN
    fixes = []
    if gpus:
        fixes.append(f"GPU{_ranges(gpus)} itself: see its PCIe link and NVLink rows (`nvidia-smi -q -d PCIE`, "
                     "`nvidia-smi nvlink -s`); reseat or reset it")
    if alone:
        fixes.append("a pair alone: `nvidia-smi topo -m` for its path (NVLink down between them, P2P through the "
                     "root complex: the ACS and IOMMU rows)")
    return Check("GPU pairs", status, "; ".join(lines) + f" (of {len(both)} pairs)", "; ".join(fixes), SOURCE_PAIRS)


def check_all_reduce(busbw_gbps: float, expected_gbps: float, gpus: tuple[int, ...],
                     nbytes: int = ALL_REDUCE_BYTES) -> Check:
    what = f"all_reduce of {nbytes // MIB} MiB over GPU{_ranges(gpus)}"
    if expected_gbps <= 0:
        return Check("all-reduce", WARN, f"{what}: {busbw_gbps:.0f} GB/s busbw, no expectation (no topology)",
                     "compare with `topowise nccl-tests --topology PRESET`", SOURCE_ALL_REDUCE)
    ratio = busbw_gbps / expected_gbps
    evidence = f"{what}: {busbw_gbps:.0f} GB/s busbw of {expected_gbps:.0f} expected ({ratio:.0%})"
    if ratio >= SHORT_OF_EXPECTED:
        return Check("all-reduce", OK, evidence, "", SOURCE_ALL_REDUCE)
    return Check("all-reduce", FAIL if ratio < FAR_SHORT else WARN, evidence,
                 "the rows above name a cause (PCIe, NVLink, ACS, NCCL_*); else `topowise bench comm` for the size "
                 "sweep and the transport NCCL chose", SOURCE_ALL_REDUCE)


def _span(values, spec: str) -> str:
    """"43" or "40-45" (formatted with `spec`), as the values are one or several."""
    low, high = format(min(values), spec), format(max(values), spec)
    return low if low == high else f"{low}-{high}"


def skipped(why: str) -> Check:
    return Check("measured", OK, f"skipped: {why}", "", "torch.cuda.device_count")
