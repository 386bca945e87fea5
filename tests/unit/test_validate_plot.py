"""`topowise validate`'s scatter plot: a CPU run measures no GPU memory, so it gets no memory panel."""

import struct

from topowise.calibrate.cases import Case
from topowise.calibrate.validate import ValidationRow, plot_validation, summarize


def _width(png) -> int:
    return struct.unpack(">I", png.read_bytes()[16:20])[0]  # IHDR: width, then height


def _row(strategy, measured_alloc):
    return ValidationRow(Case("tiny", strategy, 1, 128, "nvlink"), "ok", 0.010, 0.011, measured_alloc,
                         1e6 if measured_alloc else None, None, None, 2)


def test_cpu_rows_draw_the_step_panel_alone(tmp_path):
    cpu = [_row("ddp", None), _row("zero3", None)]
    gpu = [_row("ddp", 2e6), _row("zero3", 1e6)]
    plot_validation(cpu, str(tmp_path / "cpu.png"), summarize(cpu))
    plot_validation(gpu, str(tmp_path / "gpu.png"), summarize(gpu))
    assert _width(tmp_path / "cpu.png") < _width(tmp_path / "gpu.png")  # one panel, not an empty second
