"""Each block GEMM's rate against its shape: does the count of output tiles over the GPU's SMs explain it?

    python research/2026-12-02-h200x1/scripts/gemm_tiles.py research/2026-12-02-h200x1/kernels/run16/kr/kernel_rates.jsonl

Reads `research/2026-12-02-h200x1/scripts/kernel_rates.py --blocks` records (each block GEMM timed alone per pass) and fits, by grid
search, the form

    rate / datasheet peak = E x (tiles / (SMs x waves)) x K / (K + K0)

where the output (rows x columns) is cut into 128 x 128 tiles, `waves` = ceil(tiles / SMs) (a last wave that
fills only part of the SMs idles the rest) and K is the reduction length (each tile's fixed start and end cost
against its K / 64 steps). The three passes of a Linear y = x W^T (x: tokens x in, W: out x in) are
forward (tokens x out, K = in), the input gradient (tokens x in, K = out) and the weight gradient (out x in,
K = tokens). Prints the fit on every model, the fit on three models checked on the other three, and the
weight gradients by tile count. Weight gradients have an output of out x in, often under two waves of tiles, and
cuBLAS splits their long reduction over the tokens instead (split-K); for them the script fits a form of their
own, rate / peak = E_w x tiles / (tiles + T1): the fewer the tiles, the more the split costs. The output
layer (a 128k-152k vocabulary) is left out: its shape is not a block's.

    python research/2026-12-02-h200x1/scripts/gemm_tiles.py --check FILE...

checks the cost model's constants (topowise/costmodel/gemm.py, fitted from run16 as above) on other records without
fitting anything: each GEMM's measured rate against BEST_ALONE x its share, beside one rate for all (run16's
geometric mean per kind), by model.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from elementwise_check import model_of  # noqa: E402  (a preset, or configs/NAME from research/configs)

from topowise.costmodel import gemm as model_gemm  # noqa: E402

SMS = 132  # H100 / H200 SXM
TILE = 128
FIT_MODELS = ("llama3.2-1b", "llama3.2-3b", "configs/llama-0.95b")  # the three wide ones; checked on the rest


def observations(path: str) -> list[dict]:
    """One row per model, shape, block GEMM and pass: the output's rows and columns, K, the rate."""
    rows = []
    for line in Path(path).read_text().splitlines():
        r = json.loads(line)
        spec = model_of(r["model"])
        h, i, m = spec.hidden_size, spec.intermediate_size, r["tokens"]
        q, kv = spec.num_heads * spec.head_dim, spec.num_kv_heads * spec.head_dim
        linear = {"qkv": (q + 2 * kv, h), "out": (h, q), "gate": (i, h), "up": (i, h), "down": (h, i)}
        for gemm, (out, inp) in linear.items():
            seconds = r["gemms"][gemm]["seconds"]
            shapes = {"forward": (m, out, inp), "grad_input": (m, inp, out), "grad_weight": (out, inp, m)}
            for phase, (rows_, cols, k) in shapes.items():
                rate = 2 * rows_ * cols * k / seconds[phase] / r["peak_flops"]
                rows.append({"model": r["model"], "tokens": m, "gemm": gemm, "phase": phase, "rows": rows_,
                             "cols": cols, "k": k, "rate": rate})
    return rows


def tiles(o: dict) -> int:
    return math.ceil(o["rows"] / TILE) * math.ceil(o["cols"] / TILE)


def tile_form(o: dict, e: float, k0: float) -> float:
    fill = o["rows"] * o["cols"] / TILE**2 / (SMS * math.ceil(tiles(o) / SMS))
    return e * fill * o["k"] / (o["k"] + k0)


def split_form(o: dict, e: float, t1: float) -> float:
    return e * tiles(o) / (tiles(o) + t1)


def fit_split(rows: list[dict]) -> tuple[float, float]:
    grid = [(e / 1000, t1) for e in range(700, 1001, 5) for t1 in range(0, 201, 2)]
    return min(grid, key=lambda p: sum(math.log(split_form(o, *p) / o["rate"]) ** 2 for o in rows))


def fit(rows: list[dict]) -> tuple[float, float]:
    grid = [(e / 1000, k0) for e in range(700, 1001, 5) for k0 in range(0, 401, 8)]
    return min(grid, key=lambda p: sum(math.log(tile_form(o, *p) / o["rate"]) ** 2 for o in rows))


def misses(rows: list[dict], predict) -> str:
    logs = [math.log(predict(o) / o["rate"]) for o in rows]
    rms = math.sqrt(statistics.mean(x * x for x in logs))
    return f"rms {100 * rms:.1f}%, worst {100 * max(map(abs, logs)):.1f}% ({len(rows)} GEMMs)"


RUN16 = Path(__file__).resolve().parents[3] / "research/2026-12-02-h200x1/kernels/run16/kr/kernel_rates.jsonl"


def model_share(o: dict) -> float:
    """The cost model's rate for this GEMM alone, of the datasheet peak (gemm.py's constants)."""
    if o["phase"] == "grad_weight":
        return model_gemm.BEST_ALONE * model_gemm.weight_grad_share(o["rows"], o["cols"])
    return model_gemm.BEST_ALONE * model_gemm.tile_share(o["rows"], o["cols"], o["k"], SMS)


def check(paths: list[str]) -> int:
    fitted = observations(str(RUN16))
    one = {w: math.exp(statistics.mean(math.log(o["rate"]) for o in fitted if (o["phase"] == "grad_weight") == w))
           for w in (False, True)}
    rows = [o for path in paths for o in observations(path)]
    print(f"gemm.py's constants (fitted on run16) against {len(rows)} GEMMs timed alone; one rate per kind as run16's "
          f"mean ({one[False]:.3f} forward and input gradient, {one[True]:.3f} weight gradient)")
    print(f"  {'model':18s} {'kind':24s} {'one rate':36s} the shape form")
    groups: dict = {}
    for o in rows:
        groups.setdefault((o["model"].split("/")[-1], o["phase"] == "grad_weight"), []).append(o)
    groups.update({("all", w): [o for o in rows if (o["phase"] == "grad_weight") == w] for w in (False, True)})
    for (model, w), group in groups.items():
        kind = "weight gradient" if w else "forward, input gradient"
        print(f"  {model:18s} {kind:24s} {misses(group, lambda o: one[w]):36s} {misses(group, model_share)}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("records", nargs="+")
    parser.add_argument("--check", action="store_true", help="the cost model's constants on these records, no fit")
    args = parser.parse_args()
    if args.check:
        return check(args.records)
    rows = [o for path in args.records for o in observations(path)]
    data = [o for o in rows if o["phase"] != "grad_weight"]
    train = [o for o in data if o["model"] in FIT_MODELS]
    held = [o for o in data if o["model"] not in FIT_MODELS]
    flat_all = math.exp(statistics.mean(math.log(o["rate"]) for o in data))
    flat_train = math.exp(statistics.mean(math.log(o["rate"]) for o in train))
    e, k0 = fit(data)
    e3, k03 = fit(train)
    print("forward and input-gradient GEMMs")
    print(f"  one rate for all ({flat_all:.3f}):            {misses(data, lambda o: flat_all)}")
    print(f"  tile form, E {e:.3f} K0 {k0:.0f}:        {misses(data, lambda o: tile_form(o, e, k0))}")
    print(f"  fitted on {', '.join(FIT_MODELS)}; on the other models:")
    print(f"    one rate ({flat_train:.3f}):                 {misses(held, lambda o: flat_train)}")
    print(f"    tile form, E {e3:.3f} K0 {k03:.0f}:      {misses(held, lambda o: tile_form(o, e3, k03))}")
    weight = [o for o in rows if o["phase"] == "grad_weight"]
    print(f"weight-gradient GEMMs, tile form as fitted above: {misses(weight, lambda o: tile_form(o, e, k0))}")
    flat_w = math.exp(statistics.mean(math.log(o["rate"]) for o in weight))
    ew, t1 = fit_split(weight)
    w_train = [o for o in weight if o["model"] in FIT_MODELS]
    w_held = [o for o in weight if o["model"] not in FIT_MODELS]
    ew3, t13 = fit_split(w_train)
    flat_w3 = math.exp(statistics.mean(math.log(o["rate"]) for o in w_train))
    print(f"  one rate for all ({flat_w:.3f}):            {misses(weight, lambda o: flat_w)}")
    print(f"  split form, E_w {ew:.3f} T1 {t1:.0f}:      {misses(weight, lambda o: split_form(o, ew, t1))}")
    print(f"  fitted on {', '.join(FIT_MODELS)}; on the other models:")
    print(f"    one rate ({flat_w3:.3f}):                 {misses(w_held, lambda o: flat_w3)}")
    print(f"    split form, E_w {ew3:.3f} T1 {t13:.0f}:    {misses(w_held, lambda o: split_form(o, ew3, t13))}")
    print("  model              gemm   out x in     tiles  waves  tile form  split form  measured (each shape)")
    by_shape: dict = {}
    for o in weight:
        by_shape.setdefault((o["model"], o["gemm"], o["rows"], o["cols"]), []).append(o)
    for (model, gemm, out, inp), group in sorted(by_shape.items(), key=lambda kv: tiles(kv[1][0])):
        rates = " ".join(f"{o['rate']:.2f}" for o in group)
        print(f"  {model.split('/')[-1]:18s} {gemm:5s} {out:5d} x {inp:<5d} {tiles(group[0]):5d} "
              f"{tiles(group[0]) / SMS:6.2f}  {statistics.mean(tile_form(o, e, k0) for o in group):9.2f}  "
              f"{statistics.mean(split_form(o, ew, t1) for o in group):10.2f}  {rates}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
