"""Read `bench train --trace DIR` timelines again: a thin wrapper of topowise.measure.timeline.

bench train already writes DIR/<strategy>/breakdown.json and breakdown.png after each strategy;
this re-reads a strategy's folder (say, with another number of warm-up steps left out) and prints
the median step's table:

    python3 research/2026-11-30-h200x2/scripts/timeline.py DIR/zero3 [--warmup 2] [--record train.jsonl]

--record takes the bench train JSONL record of that strategy (the last line whose strategy
matches): the measured step times and the cost model's prediction then join the reading.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from topowise.measure.timeline import rank_traces, summary_lines, write_breakdown


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", type=Path, help="DIR/<strategy> of bench train --trace DIR")
    ap.add_argument("--warmup", type=int, default=None, help="steps to leave out (default: the record's, else 0)")
    ap.add_argument("--record", type=Path, help="bench train --out JSONL holding this strategy's record")
    args = ap.parse_args(argv)
    if not args.folder.is_dir() or not rank_traces(args.folder):
        print(f"timeline: no rank<R>.trace.json.gz in {args.folder}", file=sys.stderr)
        return 2
    record = {"strategy": args.folder.name}
    if args.record:
        rows = [json.loads(line) for line in args.record.read_text().splitlines() if line.strip()]
        record = next((r for r in reversed(rows) if r.get("strategy") == args.folder.name), record)
    if args.warmup is not None:
        record = dict(record, warmup=args.warmup, step_times_s=[])  # the record's times no longer line up
    doc = write_breakdown(args.folder, record)
    print("\n".join(summary_lines(doc)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
