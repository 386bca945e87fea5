"""examples/sweep.py runs on CPU as a user runs it: a table of every model x board x strategy, and the plot."""

import importlib.util
import sys
from pathlib import Path

import topowise

ROOT = Path(__file__).parents[2]


def load_example():
    spec = importlib.util.spec_from_file_location("sweep_example", ROOT / "examples" / "sweep.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


def test_the_sweep_prints_every_cell_and_draws_the_plot(tmp_path, capsys):
    sweep = load_example()
    out = tmp_path / "sweep.png"
    assert sweep.main(["--out", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [line.split() for line in lines[2:-1]]
    expected = len(sweep.MODELS) * len(sweep.TOPOLOGIES) * len(sweep.STRATEGIES)
    assert expected == 45 and len(rows) == expected
    assert {(r[0], r[1], r[2]) for r in rows} == {(t, m, s) for t in sweep.TOPOLOGIES for m in sweep.MODELS
                                                 for s in sweep.STRATEGIES}
    assert lines[-1] == f"plot: {out}" and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # a cell is the API's prediction of that run: 8B with plain DDP does not fit an 80 GB H100, ZeRO-3 does
    fits = {(r[0], r[1], r[2]): r[-1] for r in rows}
    assert fits[("hgx-h100-8", "llama3.1-8b", "ddp")] == "no" and fits[("hgx-h100-8", "llama3.1-8b", "zero3")] == "yes"
    topo = topowise.load_topology("h100-nvl-8")
    run = topowise.Run(model=topowise.load_model("qwen2.5-7b"), gpus=topo.best_subset(8), strategy="hsdp")
    row = next(r for r in rows if r[:3] == ["h100-nvl-8", "qwen2.5-7b", "hsdp"])
    assert row[4] == f"{topowise.predict(run, topo).tokens_per_s:,.0f}"
