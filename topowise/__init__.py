"""topowise: match a distributed-training strategy to the GPU wiring it runs on."""

__version__ = "0.1.0"
