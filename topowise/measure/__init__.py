"""Measurements on real GPUs (NCCL) or CPU (gloo), split by the process that runs each part.

- launcher: starts every process (torchrun for the ranks, a `topowise` command as a child);
  torchrun: torchrun for `topowise launch`, exiting with the failed rank's own status.
- parent side, no torch: comm (bench comm's configs, launch and results), train (bench train's
  requests, launches, records and loss check), records (JSONL), nccl_log (NCCL's own log), machine
  (the live wiring, the visible GPUs).
- rank side, torch: rank (the process group), collectives and p2p (bench comm), steps, strategies
  and deepspeed_engine (bench train), passes (memory-bound passes timed alone).

Nothing here imports the cost model: topowise.expectations joins its numbers to the measurements.
"""
