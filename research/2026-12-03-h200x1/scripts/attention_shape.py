"""The causal attention's rate by shape, alone, held and inside a step, against the model's form (no GPU).

    python research/2026-12-03-h200x1/scripts/attention_shape.py DIR      # DIR/attn.json, written by DIR's attn_probe.py on one GPU

attn.json holds the attention (SDPA as the bench transformer calls it: causal, cuDNN first, enable_gqa) timed
alone over batch, heads, sequence, head dim and GQA, as kernel_rates.py times it (the profiler's kernel time);
six traced steps' shapes held for seconds, as a step keeps the GPU busy; and the GPU's idle between back-to-back
kernels. Prints the fit of the model's form, peak x e x T / (T + T0) x W / (W + W0) with W = batch x heads x
ceil(T / 128) thread blocks (Profile.attention_efficiency, attention_seq_offset, attention_block_offset), and of the
form without W (the one before), with their errors on the grid, on the six shapes and on kernels/run16's 36 rows
(another day, at 8192 tokens a row); then the six shapes' rates alone, held and inside their traced steps
(gemm-shape/run53 and run54, their attention kernels' time) beside each step's mean SM clock; and the idle per
kernel.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from topowise.costmodel.profile import ATTENTION_TILE_ROWS  # noqa: E402
from topowise.models.spec import load_model  # noqa: E402

PEAK = 989e12  # H200 datasheet bf16 dense
SHAPE = ROOT / "research/2026-12-03-h200x1/gemm-shape"
KERNELS16 = ROOT / "research/2026-12-02-h200x1/kernels/run16"
TRACED = {"cal-h2048-l8": ("run54", 8), "cal-h1536-l12": ("run54", 12), "cal-h1024-l16": ("run54", 16),
          "smollm2-360m": ("run53", 32), "smollm2-135m": ("run53", 30), "llama3.2-1b": ("run53", 16)}


def counted_flops(row: dict) -> float:
    """The model's attention FLOPs (flops.py: 7 H hd T per token and layer, forward and backward, causal)."""
    return 7.0 * row["h"] * row["hd"] * row["t"] * row["b"] * row["t"]


def blocks(row: dict) -> int:
    return row["b"] * row["h"] * math.ceil(row["t"] / ATTENTION_TILE_ROWS)


def shape_factor(row: dict, offset: float, block_offset: float) -> float:
    """The form's rate over e: T / (T + T0) x W / (W + W0) (W0 = 0: the sequence form)."""
    return row["t"] / (row["t"] + offset) * blocks(row) / (blocks(row) + block_offset)


def efficiencies(rows: list[dict], offset: float, block_offset: float) -> tuple[dict[int, float], float]:
    """({head dim: e}, sum of squared relative time errors): e by least squares of the relative time error."""
    effs, err = {}, 0.0
    for d in sorted({r["hd"] for r in rows}):
        x = [r["rate"] / shape_factor(r, offset, block_offset) for r in rows if r["hd"] == d]  # time error x / e - 1
        inv = sum(x) / sum(v * v for v in x)
        effs[d] = 1 / inv
        err += sum((v * inv - 1) ** 2 for v in x)
    return effs, err


def fit_form(rows: list[dict], block_offsets=(0,)) -> tuple[float, float, dict[int, float], float]:
    """(T0, W0, {head dim: e}, rms) of rate = e T / (T + T0) W / (W + W0) over rows, T0 and W0 on a grid of 50."""
    best = min((efficiencies(rows, t0, w0)[1], t0, w0) for t0 in range(0, 3001, 50) for w0 in block_offsets)
    _, t0, w0 = best
    effs, err = efficiencies(rows, t0, w0)
    return float(t0), float(w0), effs, (err / len(rows)) ** 0.5


def errors(rows: list[dict], offset: float, block_offset: float, effs: dict) -> list[float]:
    return [r["rate"] / (effs[r["hd"]] * shape_factor(r, offset, block_offset)) - 1 for r in rows]


def rows_of(path: Path) -> list[dict]:
    """attn.json's burst rows with their rate of the datasheet peak (the model's counted FLOPs)."""
    data = json.loads(path.read_text())
    return [dict(r, rate=counted_flops(r) / (r["forward_s"] + r["backward_s"]) / PEAK)
            for r in data["burst"] if "forward_s" in r]


def run16_rows() -> list[dict]:
    """kernels/run16's attention rows (six models, 8192 tokens a row, sequences 1024-32768) in attn.json's terms."""
    rows = []
    for line in (KERNELS16 / "kr" / "kernel_rates.jsonl").read_text().splitlines():
        r = json.loads(line)
        spec = load_model(str(ROOT / "research" / f"{r['model']}.json") if r["model"].startswith("configs/")
                          else r["model"])
        row = {"shape": spec.name, "b": r["micro_batch"], "t": r["seq_len"], "h": spec.num_heads,
               "kv": spec.num_kv_heads, "hd": spec.head_dim}
        rows.append(dict(row, rate=counted_flops(row) / sum(r["attention"]["seconds"].values()) / PEAK))
    return rows


def rms(errs: list[float]) -> float:
    return (sum(e * e for e in errs) / len(errs)) ** 0.5


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: attention_shape.py DIR", file=sys.stderr)
        return 2
    folder = Path(sys.argv[1])
    try:
        rows, data = rows_of(folder / "attn.json"), json.loads((folder / "attn.json").read_text())
    except (OSError, ValueError, KeyError) as exc:
        print(f"error: {folder / 'attn.json'}: {exc}", file=sys.stderr)
        return 2
    grid, six = [r for r in rows if r["shape"] == "grid"], [r for r in rows if r["shape"] != "grid"]
    other = run16_rows()
    print(f"the attention alone: {len(grid)} grid shapes, {len(six)} traced steps' shapes, run16's {len(other)}")
    for name, block_offsets in (("T / (T + T0) x W / (W + W0)", range(0, 3001, 50)), ("T / (T + T0)", (0,))):
        t0, w0, effs, fit_rms = fit_form(grid, block_offsets)
        six_e, other_e = errors(six, t0, w0, effs), errors(other, t0, w0, effs)
        print(f"  e {name}: e " + ", ".join(f"{d}: {e:.3f}" for d, e in effs.items())
              + f"; T0 {t0:.0f}, W0 {w0:.0f}; grid rms {100 * fit_rms:.1f}%, worst "
              f"{100 * max(map(abs, errors(grid, t0, w0, effs))):.1f}%; the six {100 * rms(six_e):.1f}% ("
              + " ".join(f"{100 * e:+.1f}" for e in six_e) + f"); run16 {100 * rms(other_e):.1f}%, worst "
              f"{100 * max(map(abs, other_e)):.1f}%")
    print("the six traced steps' shapes, rates of the datasheet peak: alone (profiler), held for seconds (events), "
          "inside the traced step (its attention kernels), the step's mean SM clock")
    print(f"  {'shape':14s} {'alone':>6s} {'held':>6s} {'in step':>7s}  held/alone  in-step/alone  step MHz / 1980")
    held = {r["shape"]: r for r in data["held"]}
    for r in six:
        run, layers = TRACED[r["shape"]]
        traced = json.loads((SHAPE / run / f"kernels-{r['shape']}.json").read_text())["classes"]["attention"]
        record = next(json.loads(line) for line in (SHAPE / run / "train-traced.jsonl").read_text().splitlines()
                      if json.loads(line)["model"].split("/")[-1] == r["shape"] or
                      json.loads(line)["model"].endswith(r["shape"]))
        clock = record["gpu_clocks"][0]["sm_mhz_mean"]
        in_step = counted_flops(r) * layers / traced / PEAK
        held_rate = counted_flops(r) / held[r["shape"]]["held_s"] / PEAK
        print(f"  {r['shape']:14s} {r['rate']:6.3f} {held_rate:6.3f} {in_step:7.3f}  {held_rate / r['rate']:10.3f}  "
              f"{in_step / r['rate']:13.3f}  {clock / 1980:15.3f}")
    for g in data.get("gap", []):
        print(f"idle between back-to-back adds of {g['numel']} elements: "
              f"{1e6 * (g['per_call_s'] - g['kernel_s']):.2f} us per kernel, under the profiler "
              f"{1e6 * (g['per_call_profiled_s'] - g['kernel_s']):.2f} us (kernel {1e6 * g['kernel_s']:.1f} us)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
