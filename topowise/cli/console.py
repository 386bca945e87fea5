"""The verbs print their tables with topowise.report.console's rule (the study report prints with it too)."""

from topowise.report.console import PIPED_WIDTH, column, console, print_whole

__all__ = ["PIPED_WIDTH", "column", "console", "print_whole"]
