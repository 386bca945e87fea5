"""Predicted vs measured, as `validate` and `calibrate` print their runs: a table per fabric."""

from __future__ import annotations


def run_words(text: str, device: str) -> str:
    """A case's label as the summary spells it ("tiny ddp mb2 seq64 nvlink") with a CPU run's fabric
    said as what ran: gloo."""
    return text.replace(" nvlink", " gloo") if device == "cpu" else text


def signed_pct(value) -> str:
    """An error as a signed percentage ("+3.1%"); "-" where there is none."""
    return "-" if value is None else f"{100 * value:+.1f}%"


def _number(value, scale: float, spec: str) -> str:
    return "-" if value is None else spec.format(value * scale)


def _error_cell(error) -> str:
    text = signed_pct(error)
    return f"[red]{text}[/]" if error is not None and abs(error) > 0.10 else text


def comparison_tables(title: str, first: str, rows: list[tuple], device: str) -> list:
    """Predicted vs measured step time and allocated memory, one table per fabric (the fabric in
    the title keeps a column out, so the table fits 80 columns). rows: (fabric, name, predicted s,
    measured s, step error, predicted bytes, measured bytes, memory error)."""
    from rich import box
    from rich.table import Table

    from topowise.measure.records import fabric_label
    from topowise.report.console import column
    from topowise.units import GIB

    tables = []
    for fabric in dict.fromkeys(r[0] for r in rows):
        label = fabric_label(fabric, device)
        table = Table(title=f"{title}, {'gloo (CPU)' if label == 'gloo' else 'over ' + label}", box=box.SIMPLE_HEAD,
                      padding=(0, 1, 0, 0), pad_edge=False, show_edge=False)
        column(table, first)
        for header in ("pred\nms", "meas\nms", "error", "pred\nGiB", "meas\nGiB", "error"):
            column(table, header, justify="right")
        for _fabric, name, pred_s, meas_s, step_err, pred_b, meas_b, mem_err in (r for r in rows if r[0] == fabric):
            table.add_row(name, _number(pred_s, 1e3, "{:.1f}"), _number(meas_s, 1e3, "{:.1f}"), _error_cell(step_err),
                          _number(pred_b, 1 / GIB, "{:.2f}"), _number(meas_b, 1 / GIB, "{:.2f}"), _error_cell(mem_err))
        tables.append(table)
    return tables
