"""Where tables are printed (the verbs, the study summary): one rule for terminals, pipes and log files.

`console()`: a terminal gets its own width; piped output is as wide as the table needs (the verbs
not yet fitted to a screen). `screen_console()`: the reader's width, the terminal's, or to a pipe
COLUMNS, else 80; `print_table` then fits a table to it: every column where they fit, else the
columns that answer the question (the rest named under it, `--wide` shows them), else one record per
block. Columns that hold numbers and names are never cut (`column(...)`); prose belongs under a
table (`prose`), not in a column.
"""

from __future__ import annotations

import os
import sys
import textwrap
from dataclasses import dataclass

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

PIPED_WIDTH = 1000  # wide enough for any table here; lines end where the table ends
SCREEN_WIDTH = 80  # a pipe or a file read on a screen, unless COLUMNS says otherwise


def console(stderr: bool = False) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty():
        return Console(stderr=stderr)
    return Console(stderr=stderr, width=PIPED_WIDTH, soft_wrap=False)


def screen_console(stderr: bool = False) -> Console:
    """A console as wide as its reader's screen: a terminal's width (rich reads COLUMNS first); to a pipe
    or a file COLUMNS, else 80 (rich would ask the terminal its stdin is on)."""
    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty():
        return Console(stderr=stderr)
    columns = os.environ.get("COLUMNS", "").strip()
    width = int(columns) if columns.isdigit() and int(columns) > 0 else SCREEN_WIDTH
    return Console(stderr=stderr, width=width)


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


@dataclass(frozen=True)
class Col:
    """A column of `print_table`: its header ("\\n" for a second header line), its alignment, and
    whether it answers the table's question (kept when the table must narrow)."""

    header: str
    justify: str = "left"
    key: bool = True


def print_table(out, cols: list[Col], rows: list[list], *, wide: bool = False, title: str | None = None,
                **style) -> str:
    """A table fitted to `out.width`: every column; else without the columns that are not key, the last
    first, as few as it takes, with a line naming them; else one record per block. `wide`: every column
    whatever the width. Returns how it was printed ("whole", "narrowed" or "records"). `style`: rich Table
    keywords (box, show_edge, ...)."""
    whole = _table(cols, rows, title, style)
    if wide or _natural_width(out, whole) <= out.width:
        print_whole(out, whole)
        return "whole"
    shown = list(range(len(cols)))
    for drop in reversed([i for i, c in enumerate(cols) if not c.key]):
        shown.remove(drop)
        narrow = _table([cols[i] for i in shown], [[row[i] for i in shown] for row in rows], title, style)
        if _natural_width(out, narrow) <= out.width:
            out.print(narrow)
            hidden = ", ".join(_one_line(c.header) for i, c in enumerate(cols) if i not in shown)
            prose(out, f"left out to fit {out.width} columns: {hidden} (--wide shows them)")
            return "narrowed"
    print_records(out, cols, rows, title)
    return "records"


def print_records(out, cols: list[Col], rows: list[list], title: str | None = None) -> None:
    """The table turned: one block per row, a line per column (header, value), a blank line between."""
    if title:
        out.print(title, highlight=False)
    for n, row in enumerate(rows):
        grid = Table.grid(padding=(0, 2))
        grid.add_column(no_wrap=True)
        grid.add_column(overflow="fold")
        for col, cell in zip(cols, row):
            grid.add_row(_one_line(col.header), cell)
        if n:
            out.print()
        out.print(grid)


def prose(out, text: str, first: str = "", rest: str = "") -> None:
    """A paragraph with a hanging indent, wrapped to the console's width (one line to `console()`'s pipe)."""
    out.print(textwrap.fill(text, width=out.width, initial_indent=first, subsequent_indent=rest,
                            break_on_hyphens=False, break_long_words=False), markup=False, highlight=False)


def _one_line(header: str) -> str:
    """A two-line header in one line: "network\nwait" -> "network wait", "GB/s\n/node" -> "GB/s/node"."""
    return " ".join(header.split("\n")).replace(" /", "/")


def _table(cols: list[Col], rows: list[list], title: str | None, style: dict) -> Table:
    table = Table(title=title, **style)
    for col in cols:
        column(table, col.header, justify=col.justify)
    for row in rows:
        table.add_row(*row)
    return table


def _natural_width(out, table: Table) -> int:
    return Measurement.get(out, out.options.update(max_width=10_000), table).maximum


def mesh_cell(tp: int = 1, pp: int = 1, cp: int = 1, dp: int = 1) -> str:
    """A mesh in a table cell, "tp8 pp4 dp16" (degrees of 1 left out), "-" for pure data parallelism."""
    if tp == pp == cp == 1:
        return "-"
    return " ".join(f"{name}{degree}" for name, degree in (("tp", tp), ("cp", cp), ("pp", pp), ("dp", dp))
                    if degree > 1)
