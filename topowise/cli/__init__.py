"""Command line: one module per verb. Each has `add_arguments(parser)` and `run(args) -> int`."""
