"""Where tables are printed (the verbs, the study summary): one rule for terminals, pipes and log files.

A terminal gets its own width. Piped output (`| cat`, `| less`, a log file) is not squeezed to rich's
80-column guess: it is as wide as the table needs. Columns that hold numbers and names are never cut
(`column(...)`); prose belongs under a table, not in a column.
"""

from __future__ import annotations

import sys

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

PIPED_WIDTH = 1000  # wide enough for any table here; lines end where the table ends


def console(stderr: bool = False) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty():
        return Console(stderr=stderr)
    return Console(stderr=stderr, width=PIPED_WIDTH, soft_wrap=False)


def column(table: Table, header: str, **kwargs) -> None:
    """A column whose cells are never wrapped or cut with an ellipsis (numbers, names, phases)."""
    # "crop", not "ignore": rich drops `justify` with overflow="ignore" (numbers came out left-aligned)
    table.add_column(header, no_wrap=True, overflow="crop", min_width=max(map(len, header.split("\n"))), **kwargs)


def print_whole(out, table) -> None:
    """Print a table at its natural width even where the terminal is narrower: the terminal then wraps
    its lines, but no cell loses a character (rich would crop cells to the terminal's width)."""
    natural = Measurement.get(out, out.options.update(max_width=10_000), table).maximum
    terminal = out.width
    out.width = max(terminal, natural)
    try:
        out.print(table)
    finally:
        out.width = terminal
