"""The accuracy table of README.md, regenerated from the frozen records under tests/data/accuracy/.

    python benchmarks/accuracy_table.py              # the markdown table
    python benchmarks/accuracy_table.py --commands   # and the `topowise validate` command of each row

Below it, the table of published runs (tests/data/published/, not measured here): each source's rows predicted
by `python benchmarks/published.py`, the rows compared and set apart, and the mean and worst |error| of the
compared ones (predicted / published - 1 of the figure as published).

Each row replays measured training runs through today's cost model, as `topowise validate --measured FILE`
does (calibrate.validate.compare and summarize). The 2x H200 records of 2026-11-30 were measured with an
earlier bench transformer (fused gate/up, repeated k/v, per-block rotary tables): they are replayed with
that model's memory terms and GPU rates (tests/unit/earlier_model.py), which `topowise validate` cannot
do, so their rows come from this script only. tests/data/accuracy/README.md says where each file came from.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "accuracy"
HEADER = ("| cases | hardware | n (GPU- + host-bound) | step time error, GPU-bound: mean / max "
          "| step time error, host-bound: mean / max | peak memory error: mean / max "
          "| groups whose predicted fastest was the fastest (3%) |")


@dataclass(frozen=True)
class Row:
    what: str
    hardware: str
    records: str  # under tests/data/accuracy/
    profile: str | None  # a file under tests/data/accuracy/, "default", or None: the earlier model's default
    topology: str | None  # a preset, or None: the records' meta.json
    earlier_model: bool  # measured with the bench transformer of before 2026-12-02


ROWS = (
    Row(what="`calibrate` (91 s), then `validate` on 21 cases it did not run: 0.5B-3B, 5 strategies, "
             "micro-batch 1-2, NVLink and PCIe (run 16)",
        hardware="2x H200, one host", records="h200x2-run16/train.jsonl", profile="h200x2-run16/profile.json",
        topology=None, earlier_model=True),
    Row(what="the same profile validated again 4 minutes later (run 17)",
        hardware="2x H200, one host", records="h200x2-run17/train.jsonl", profile="h200x2-run16/profile.json",
        topology=None, earlier_model=True),
    Row(what="DeepSpeed ZeRO-1/2/3 and FSDP2 zero2/zero3, llama3.2-1b, 8192 tokens, NVLink and PCIe",
        hardware="2x H200, one host", records="h200x2-deepspeed.jsonl", profile=None, topology="h200-x2",
        earlier_model=True),
    Row(what="three Llama-style blocks no fit saw (8B block, 36 x 768, 256k vocabulary), ddp/zero2/zero3, "
             "default profile",
        hardware="1x H200", records="h200x1-unseen.jsonl", profile="default", topology="h200-x2",
        earlier_model=False),
    Row(what="compiled or activation-checkpointed runs of configs no such fit held, default profile",
        hardware="1x H200", records="h200x1-modes.jsonl", profile="default", topology="h200-x2",
        earlier_model=False),
    Row(what="a GPU no fit saw: llm-foundry's MPT shapes (350M-3B, sequence 2048, micro-batch 2-16, the most one "
             "GPU holds) under ddp, zero2 and zero3, and llama3.2-1b, default profile",
        hardware="1x H100 SXM 80GB", records="h100x1-mpt.jsonl", profile="default", topology="hgx-h100-8",
        earlier_model=False),
)


def earlier_model_patched():
    """A context in which `predict` prices the bench transformer of 2026-11-30 (tests/unit/earlier_model.py)."""
    import pytest

    helper = next(ROOT.glob("tests/**/earlier_model.py"))
    sys.path.insert(0, str(helper.parent))
    from earlier_model import predict_earlier_model

    stack = contextlib.ExitStack()
    patch = stack.enter_context(pytest.MonkeyPatch.context())
    predict_earlier_model(patch)
    return stack


def replay(row: Row) -> dict:
    """summarize() of the row's records predicted with its profile on its topology."""
    from topowise.calibrate.validate import compare, summarize
    from topowise.costmodel import predict as predict_module
    from topowise.costmodel.profile import load_profile
    from topowise.measure.records import read_records
    from topowise.topology import load_topology
    from topowise.topology.model import Topology

    path = DATA / row.records
    if row.topology:
        topo = load_topology(row.topology)
    else:  # what validate reads when no --topology is given
        meta = path.with_name("meta.json")
        topo = Topology.from_dict(json.loads(meta.read_text())["topology"], str(meta))
    with earlier_model_patched() if row.earlier_model else contextlib.nullcontext():
        if row.profile and row.profile != "default":
            profile = load_profile(DATA / row.profile)
        else:
            profile = predict_module.default_profile()
        return summarize(compare(read_records(str(path), kind="train"), profile, topo))


def pair(errors: dict | None) -> str:
    if not errors or not errors.get("cases"):
        return "-"
    return f"{100 * errors['mean_abs_error']:.1f}% / {100 * errors['max_abs_error']:.1f}%"


def table_row(row: Row, s: dict) -> str:
    gpu, host = s["by_bound"].get("gpu") or {}, s["by_bound"].get("host") or {}
    n = f"{s['step_time']['cases']} ({gpu.get('cases', 0)} + {host.get('cases', 0)})"
    ranked = f"{sum(1 for g in s['ranking'] if g['ok'])} of {len(s['ranking'])}"
    return (f"| {row.what} | {row.hardware} | {n} | {pair(gpu)} | {pair(host)} | {pair(s['peak_memory'])} "
            f"| {ranked} |")


def command(row: Row) -> str:
    if row.earlier_model:
        return "python benchmarks/accuracy_table.py"  # the earlier transformer's terms: this script only
    topology = f" --topology {row.topology}" if row.topology else ""
    return (f"topowise validate --measured tests/data/accuracy/{row.records} --profile {row.profile}"
            f"{topology} --no-plot")


PUBLISHED_HEADER = ("| published runs | hardware | rows compared (set apart) | error: mean / worst | signed range "
                    "| command |")
def published_rows() -> list[str]:
    """One markdown row per published source and one for all of them (benchmarks/published.py)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import published

    outcomes = published.predict_all()
    lines = []
    for source, gpu in dict.fromkeys((o.source, o.gpu) for o in outcomes):
        rows = [o for o in outcomes if (o.source, o.gpu) == (source, gpu)]
        title = json.loads((published.DATA / f"{source}.json").read_text())["source"]["short"]
        sizes = sorted({o.gpus for o in rows})
        counts = "/".join(map(str, sizes)) if len(sizes) <= 2 else f"{sizes[0]}-{sizes[-1]}"
        lines.append(published_row(title, f"{counts}x {gpu}", rows,
                                   f"python benchmarks/published.py --source {source}"))
    for family in ("A100", "H100"):  # the H100 rows apart: their error is not the A100 rows' (docs/accuracy.md)
        rows = [o for o in outcomes if o.gpu.startswith(family)]
        lines.append(published_row(f"all {family} rows above", family, rows, "python benchmarks/published.py"))
    lines.append(published_row("all of the above", "-", outcomes, "python benchmarks/published.py"))
    return lines


def published_row(what: str, hardware: str, rows: list, command: str) -> str:
    import published

    s = published.summary(rows)
    compared = [o.error for o in rows if o.compared]
    error = f"{100 * s['mean_abs_error']:.1f}% / {100 * s['worst_abs_error']:.1f}%" if compared else "-"
    signed = f"{100 * min(compared):+.1f}% .. {100 * max(compared):+.1f}%" if compared else "-"
    return f"| {what} | {hardware} | {s['compared']} ({s['set_apart']}) | {error} | {signed} | `{command}` |"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commands", action="store_true", help="also print each row's command")
    args = parser.parse_args(argv)
    print(HEADER)
    print("|---|---|---|---|---|---|---|")
    for row in ROWS:
        print(table_row(row, replay(row)))
    print()
    print(PUBLISHED_HEADER)
    print("|---|---|---|---|---|---|")
    for line in published_rows():
        print(line)
    if args.commands:
        print()
        for row in ROWS:
            print(f"- {row.what}: `{command(row)}`")
    return 0


if __name__ == "__main__":
    sys.exit(main())
