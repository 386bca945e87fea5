"""Units. In code everything is bytes and seconds; GiB and MiB only where people read them. Bus
bandwidth is nccl-tests' (doc/PERFORMANCE.md): what each rank sends per byte of the buffer."""

KIB = 1024
MIB = 1024**2
GIB = 1024**3


def busbw_factor(op: str, n: int) -> float:
    """nccl-tests' busbw = algbw x factor over n ranks, S the full (gathered) buffer (doc/PERFORMANCE.md)."""
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    if op in ("broadcast", "sendrecv"):
        return 1.0
    raise ValueError(f"unknown collective {op!r}")
