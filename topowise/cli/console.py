"""The verbs print their tables with topowise.report.console's rule (the study report prints with it too)."""

from topowise.report.console import (
    PIPED_WIDTH,
    Col,
    column,
    console,
    mesh_cell,
    print_records,
    print_table,
    print_whole,
    prose,
    screen_console,
)

__all__ = ["PIPED_WIDTH", "Col", "column", "console", "mesh_cell", "print_records", "print_table", "print_whole",
           "prose", "screen_console"]
