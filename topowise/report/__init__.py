"""Reports: the study (strategies x topologies x placements, with computed findings), its plots and renderings.

study.py computes (no matplotlib, no torch); plots.py draws PNGs (matplotlib, imported when drawing);
render.py writes markdown, self-contained html and the rich terminal summary.
"""

from topowise.report.study import Study, run_study

__all__ = ["Study", "run_study"]
