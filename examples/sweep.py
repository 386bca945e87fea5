"""Three models on three boards, every strategy: a sweep through the Python API, as in a notebook.

    python examples/sweep.py                      # the table, and sweep.png
    python examples/sweep.py --models llama3.2-1b --topologies hgx-h100-8 --out one.png

Each cell is one `topowise.predict` of a Run on the first --num-gpus GPUs with the fastest ring (8: the
whole board): tokens per second, peak memory per GPU, and whether it fits. No pandas; the plot is
matplotlib's, one panel per board.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import topowise

MODELS = ("llama3.2-1b", "llama3.1-8b", "qwen2.5-7b")
TOPOLOGIES = ("hgx-h100-8", "h100-nvl-8", "pcie-l40s-8")
STRATEGIES = ("ddp", "zero1", "zero2", "zero3", "hsdp")
GIB = 2**30


@dataclass(frozen=True)
class Cell:
    """One model, board and strategy, predicted."""

    model: str
    topology: str
    strategy: str
    step_time_s: float
    tokens_per_s: float
    peak_memory_bytes: int
    fits: bool


def sweep(models=MODELS, topologies=TOPOLOGIES, strategies=STRATEGIES, num_gpus: int = 8, micro_batch: int = 1,
          seq_len: int = 4096) -> list[Cell]:
    cells = []
    for name in topologies:
        topology = topowise.load_topology(name)
        gpus = topology.best_subset(num_gpus)
        for model_name in models:
            model = topowise.load_model(model_name)
            for strategy in strategies:
                run = topowise.Run(model=model, gpus=gpus, strategy=strategy, micro_batch=micro_batch,
                                   seq_len=seq_len)
                p = topowise.predict(run, topology)
                cells.append(Cell(model=model_name, topology=name, strategy=strategy, step_time_s=p.step_time_s,
                                  tokens_per_s=p.tokens_per_s, peak_memory_bytes=p.peak_memory_bytes, fits=p.fits))
    return cells


def table(cells: list[Cell]) -> str:
    """A plain-text table, one line per cell; a run that does not fit says so."""
    head = f"{'topology':<12} {'model':<12} {'strategy':<8} {'step (ms)':>10} {'tokens/s':>10} {'peak GiB':>9}  fits"
    lines = [head, "-" * len(head)]
    for c in cells:
        lines.append(f"{c.topology:<12} {c.model:<12} {c.strategy:<8} {c.step_time_s * 1e3:>10,.0f} "
                     f"{c.tokens_per_s:>10,.0f} {c.peak_memory_bytes / GIB:>9.1f}  {'yes' if c.fits else 'no'}")
    return "\n".join(lines)


def plot(cells: list[Cell], path: str) -> str:
    """Tokens/s per strategy, one bar per model, a panel per board; a run that does not fit is hatched."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    topologies = list(dict.fromkeys(c.topology for c in cells))
    models = list(dict.fromkeys(c.model for c in cells))
    strategies = list(dict.fromkeys(c.strategy for c in cells))
    fig, axes = plt.subplots(1, len(topologies), figsize=(4.5 * len(topologies), 3.6), sharey=True, squeeze=False)
    width = 0.8 / len(models)
    for ax, name in zip(axes[0], topologies):
        for m, model in enumerate(models):
            row = {c.strategy: c for c in cells if c.topology == name and c.model == model}
            for s, strategy in enumerate(strategies):
                c = row[strategy]
                ax.bar(s + (m - (len(models) - 1) / 2) * width, c.tokens_per_s, width, color=f"C{m}",
                       hatch=None if c.fits else "//", edgecolor="white" if c.fits else "black")
        ax.set_xticks(range(len(strategies)), strategies)
        ax.set_title(name, fontsize=10)
        ax.set_yscale("log")
        ax.grid(True, axis="y", alpha=0.3)
    axes[0][0].set_ylabel("tokens/s (hatched: does not fit)")
    axes[0][-1].legend(handles=[Patch(color=f"C{m}", label=model) for m, model in enumerate(models)], fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--topologies", default=",".join(TOPOLOGIES))
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--num-gpus", type=int, default=8)
    parser.add_argument("--micro-batch", type=int, default=1)
    parser.add_argument("--seq-len", type=int, default=4096)
    parser.add_argument("--out", default="sweep.png", help="the plot (PNG)")
    args = parser.parse_args(argv)
    cells = sweep(args.models.split(","), args.topologies.split(","), args.strategies.split(","), args.num_gpus,
                  args.micro_batch, args.seq_len)
    print(table(cells))
    print(f"plot: {plot(cells, args.out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
