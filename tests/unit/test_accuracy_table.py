"""README.md's accuracy tables are what `python benchmarks/accuracy_table.py` prints from the frozen records in
tests/data/accuracy/: every row's figures (cases, step time and memory errors) are in the README's table.
The figures are compared, not the wording: a row's first two cells (what, hardware) may be reworded freely."""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NUMBER = re.compile(r"\d+(?:\.\d+)?")


def figures(line: str) -> tuple[str, ...]:
    """The numbers of a markdown table row after its first two cells."""
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    return tuple(NUMBER.findall(" ".join(cells[2:])))


@functools.lru_cache(maxsize=1)
def generated_tables() -> list[list[str]]:
    """The rows (below the header and its rule) of each table the script prints: measured, then published."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "accuracy_table.py")], cwd=ROOT, env=env,
                         capture_output=True, text=True, check=True).stdout
    tables = [[line for line in block.splitlines() if line.startswith("|")] for block in out.split("\n\n")]
    return [rows[2:] for rows in tables if rows]


def generated_table() -> list[str]:
    return generated_tables()[0]


def test_every_row_gives_cases_step_time_and_memory():
    rows = generated_table()
    assert len(rows) == 6, rows
    for row in rows:
        n = figures(row)
        # all cases = GPU-bound + host-bound, then at least one step-time pair and the memory pair
        assert int(n[0]) == int(n[1]) + int(n[2]) and len(n) >= 9, row


def test_the_published_table_gives_each_source_and_all_of_them():
    rows = generated_tables()[1]
    assert rows[-1].startswith("| all of the above |")
    sources = [figures(row) for row in rows if not row.startswith("| all ")]
    families = [figures(row) for row in rows if row.startswith("| all ") and "rows above" in row]
    # compared (set apart): the last row's counts are the sums of the sources' rows, and of the GPU families'
    total = figures(rows[-1])
    for parts in (sources, families):
        assert int(total[0]) == sum(int(f[0]) for f in parts) and int(total[1]) == sum(int(f[1]) for f in parts)


def test_readme_holds_the_figures_the_records_give():
    readme_rows = {figures(line) for line in (ROOT / "README.md").read_text().splitlines() if line.startswith("|")}
    missing = [row for table in generated_tables() for row in table if figures(row) not in readme_rows]
    assert not missing, ("README.md's accuracy table no longer matches `python benchmarks/accuracy_table.py`; "
                         "paste its output again. Rows whose figures are not in the README:\n" + "\n".join(missing))
