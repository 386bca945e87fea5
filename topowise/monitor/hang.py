"""Which rank is hanging: PyTorch's flight recorder dumps, one per rank, read side by side. Needs no torch.

The flight recorder (TORCH_FR_BUFFER_SIZE=N, or TORCH_NCCL_TRACE_BUFFER_SIZE for NCCL) keeps each rank's
last N collectives: process group, `collective_seq_id` (the group's call count on that rank),
`profiling_name` ("nccl:all_gather"), sizes, state (scheduled, started, completed; gloo records only
"scheduled"). A dump is a pickled dict {version, pg_config, entries, ...} per rank, written when the
watchdog times out (TORCH_NCCL_DUMP_ON_TIMEOUT=1) or asked for (`torch._C._distributed_c10d._dump_fr_trace()`),
named <prefix><rank> (default prefix `nccl_trace_rank_`; torch/distributed/flight_recorder/components/loader.py).

In a process group every rank calls the same collectives in the same order, so the one that hangs the
others is the one whose last call is behind theirs: it never entered the collective they wait in.
"""

from __future__ import annotations

import ast
import io
import json
import pickle
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from topowise.errors import UsageError

_RANK_SUFFIX = re.compile(r"^(.*?)(\d+)$")
COMPLETED = "completed"


class _DataOnly(pickle.Unpickler):
    """A dump holds dicts, lists, strings and numbers only: refuse any class (a pickle can run code)."""

    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(f"a flight-recorder dump holds no objects ({module}.{name})")


@dataclass(frozen=True)
class Call:
    seq: int  # collective_seq_id in its process group
    op: str  # profiling_name, e.g. "nccl:all_gather"
    sizes: str  # input sizes, as recorded
    state: str  # scheduled | started | completed

    def text(self) -> str:
        return f"#{self.seq} {self.op} {self.sizes}"


@dataclass(frozen=True)
class GroupHang:
    group: str  # "name (desc)"
    ranks: tuple[int, ...]  # the group's ranks (pg_config), or those whose dumps name it
    stuck_at: Call | None  # the furthest call any rank entered
    waiting: tuple[int, ...]  # entered it and did not complete it
    behind: tuple[tuple[int, Call | None], ...]  # (rank, its last call) for ranks that never entered it
    missing: tuple[int, ...]  # ranks of the group without a dump

    def to_dict(self) -> dict:
        return asdict(self)


def read_dumps(folder: str | Path) -> tuple[dict[int, dict], str]:
    """{rank: dump} from the files named <prefix><rank> in `folder` (the prefix most of them share)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise UsageError(f"{folder}: not a folder; give the folder the flight recorder dumped into "
                         "(TORCH_NCCL_DEBUG_INFO_TEMP_FILE's folder, /tmp by default)")
    by_prefix: dict[str, dict[int, Path]] = {}
    for path in folder.iterdir():
        match = _RANK_SUFFIX.match(path.name)
        if path.is_file() and match:
            by_prefix.setdefault(match.group(1), {})[int(match.group(2))] = path
    if not by_prefix:
        raise UsageError(f"{folder}: no flight-recorder dump (files named <prefix><rank>, e.g. nccl_trace_rank_0)")
    prefix = max(by_prefix, key=lambda p: (len(by_prefix[p]), p == "nccl_trace_rank_"))
    dumps = {}
    for rank, path in sorted(by_prefix[prefix].items()):
        dumps[rank] = _load(path)
    return dumps, prefix


def _load(path: Path) -> dict:
    data = path.read_bytes()
    try:
        dump = json.loads(data) if data[:1] == b"{" else _DataOnly(io.BytesIO(data)).load()
    except (pickle.UnpicklingError, json.JSONDecodeError, EOFError, ValueError) as exc:
        raise UsageError(f"{path}: not a flight-recorder dump ({exc})") from None
    if not isinstance(dump, dict) or "entries" not in dump:
        raise UsageError(f"{path}: not a flight-recorder dump (no entries)")
    return dump


def analyze(dumps: dict[int, dict]) -> list[GroupHang]:
    """Per process group: the furthest call any rank entered, who waits in it, who never entered it."""
    members: dict[str, set[int]] = {}
    last: dict[str, dict[int, Call]] = {}
    for rank, dump in dumps.items():
        for key, config in (dump.get("pg_config") or {}).items():
            group = _group_name(config.get("name") or key, config.get("desc", ""))
            members.setdefault(group, set()).update(_ranks(config.get("ranks")))
        for e in dump.get("entries", []):
            if e.get("is_p2p"):
                continue  # send/recv pairs are ordered by p2p_seq_id per peer, not by the group's count
            name, desc = (list(e.get("process_group") or ("?", "")) + [""])[:2]
            group = _group_name(name, desc)
            call = Call(seq=int(e.get("collective_seq_id", 0)), op=str(e.get("profiling_name", "?")),
                        sizes=str(e.get("input_sizes", "")), state=str(e.get("state", "")))
            mine = last.setdefault(group, {})
            if rank not in mine or call.seq >= mine[rank].seq:
                mine[rank] = call
    # the world: every rank a config names and every rank that dumped (a rank that wrote nothing is missing)
    world = set(dumps).union(*members.values()) if members else set(dumps)
    out = []
    for group in sorted(last):
        calls = last[group]
        # gloo's dumps key pg_config by an empty name: the default group (or the only one) is the world
        known = members.get(group) or (world if "default_pg" in group or len(last) == 1 else set(calls))
        ranks = tuple(sorted(known))
        furthest = max(calls.values(), key=lambda c: c.seq) if calls else None
        behind = tuple((r, calls.get(r)) for r in ranks
                       if r in dumps and (furthest is not None and (r not in calls or calls[r].seq < furthest.seq)))
        waiting = tuple(r for r, c in sorted(calls.items())
                        if furthest is not None and c.seq == furthest.seq and c.state != COMPLETED)
        out.append(GroupHang(group=group, ranks=ranks, stuck_at=furthest, waiting=waiting, behind=behind,
                             missing=tuple(r for r in ranks if r not in dumps)))
    return out


def verdict(hangs: list[GroupHang]) -> list[str]:
    """One line per finding: the ranks that never entered, the ranks that wait, the dumps that are missing."""
    lines = []
    for h in hangs:
        if h.missing:
            lines.append(f"{h.group}: no dump from rank(s) {_list(h.missing)}: what they did is unknown "
                         "(not read as slow or as fine)")
        if h.stuck_at is None:
            continue
        if h.behind:
            for rank, call in h.behind:
                where = f"its last call was {call.text()}" if call else "it recorded no call in this group"
                lines.append(f"{h.group}: rank {rank} never entered {h.stuck_at.text()}; {where}")
            if h.waiting:
                lines.append(f"{h.group}: rank(s) {_list(h.waiting)} entered {h.stuck_at.text()} and wait")
        elif h.waiting and not h.missing:
            lines.append(f"{h.group}: every rank entered {h.stuck_at.text()} and none completed it: a hang inside "
                         "the collective (network, NCCL), not a rank that stayed away")
    return lines or ["no rank is behind: every group's ranks entered the same last collective"]


def _group_name(name: str, desc: str) -> str:
    return f"group {name}" + (f" ({desc})" if desc and desc != name else "")


def _ranks(text) -> set[int]:
    if isinstance(text, (list, tuple)):
        return {int(r) for r in text}
    try:
        value = ast.literal_eval(str(text))
    except (ValueError, SyntaxError):
        return set()
    return {int(r) for r in value} if isinstance(value, (list, tuple)) else set()


def _list(ranks) -> str:
    return ",".join(map(str, ranks))
