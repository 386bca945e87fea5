"""The cost model: FLOPs, memory, communication and step time of a run on a topology.

No torch here: `predict` and `plan` run anywhere. The entry point is `costmodel.predict.predict`.
Formulas and sources: docs/costmodel.md and docs/sources.md.
"""
