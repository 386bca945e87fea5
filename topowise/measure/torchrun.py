"""`python -m topowise.measure.torchrun ARGS` is `torchrun ARGS`, except for its exit status: that of
the rank that failed first, where torchrun alone exits 1 whatever the rank's status was.
`topowise launch` runs its command through here, so that a script's own status reaches the shell."""

from __future__ import annotations

import signal
import sys


def shell_status(exitcode: int) -> int:
    """A process's exit code as a shell reports it: killed by signal N (a negative code) is 128 + N."""
    return 128 - exitcode if exitcode < 0 else exitcode


def failure_line(rank: int, exitcode: int) -> str:
    status = shell_status(exitcode)
    if exitcode < 0:
        try:
            how = f"was killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            how = f"was killed by signal {-exitcode}"
        return f"topowise: rank {rank} {how}: exit status {status}"
    return f"topowise: rank {rank} exited with status {status}"


def main(argv: list[str]) -> int:
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun

    try:
        torchrun(argv)
    except ChildFailedError as exc:  # torchrun has printed the rank's output; say which rank and its status
        rank, failure = exc.get_first_failure()
        sys.stderr.write(failure_line(rank, failure.exitcode) + "\n")
        return shell_status(failure.exitcode)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
