"""The cost model: FLOPs, memory, communication and step time for a strategy on a topology.

No torch here: `predict` and `plan` run anywhere. Formulas and sources: docs/costmodel.md.
"""

from topowise.costmodel.profile import Profile, default_profile, load_profile
from topowise.costmodel.step import STRATEGIES, Prediction, normalize_strategy, predict

__all__ = ["Profile", "default_profile", "load_profile", "STRATEGIES", "Prediction", "normalize_strategy", "predict"]
