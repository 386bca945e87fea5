"""Which transport NCCL chose, and its version, read from NCCL's own INFO log lines.

NCCL prints, per connection it sets up (NCCL_DEBUG=INFO, subsystem INIT or P2P):

    host:123:456 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read      NVLink or PCIe P2P
    host:123:456 [0] NCCL INFO Channel 01/0 : 8[0] -> 15[7] via P2P/IPC/read        (older: P2P/IPC)
    host:123:456 [0] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via P2P/direct pointer  (one process, 2 GPUs)
    host:123:456 [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via SHM/direct/direct     through host memory
    host:123:456 [7] NCCL INFO Channel 03/0 : 15[7] -> 6[6] [send] via NET/Socket/3
    host:123:456 [0] NCCL INFO Channel 00/0 : 1[1] -> 0[0] [receive] via NET/IB/0/GDRDMA
    host:123:456 [0] NCCL INFO NCCL version 2.28.3+cuda13.0
    host:123:456 [0] NCCL INFO Using network Socket

(formats from NCCL's transport.cc / init.cc as they appear in NVIDIA/nccl issues 952, 1358, 1053 and
nccl-tests issue 213). The rank brackets hold a device index in some versions and a bus id in others,
so the parser does not interpret them beyond the rank number before the bracket.
"""

from __future__ import annotations

import glob
import os
import re
from collections import Counter
from dataclasses import dataclass, field

_CHANNEL = re.compile(
    r"NCCL INFO Channel\s+(?P<channel>\d+)(?:/(?P<conn>\d+))?\s*:\s*(?P<src>\d+)\[[^\]]*\]\s*->\s*"
    r"(?P<dst>\d+)\[[^\]]*\]\s*(?:\[(?P<dir>send|receive|recv)\]\s*)?via\s+(?P<via>\S+(?: pointer)?)"
)
_VERSION = re.compile(r"NCCL INFO NCCL version (?P<version>\d+\.\d+\.\d+)(?P<extra>\S*)")
_NETWORK = re.compile(r"NCCL INFO Using network (?P<net>\S+)")
_PLUGIN = re.compile(r"NCCL INFO NET/Plugin\s*:?\s*(?P<text>.*)$")
_NVLS = re.compile(r"NCCL INFO .*\bNVLS\b.*(?:multicast support is available|Connected NVLS)", re.I)

# What each transport means for the bytes, for people reading the table.
MEANING = {
    "P2P": "GPU to GPU directly (NVLink where wired, else PCIe peer-to-peer)",
    "SHM": "through host memory (no GPU peer-to-peer between these GPUs)",
    "NET/IB": "InfiniBand / RoCE network",
    "NET/Socket": "TCP sockets (slowest; often a missing or disabled IB plugin)",
    "NVLS": "NVLink SHARP multicast on the NVSwitch",
}


@dataclass(frozen=True)
class Connection:
    channel: int
    src: int
    dst: int
    transport: str  # the full "via" word: P2P/CUMEM/read, SHM/direct/direct, NET/IB/0/GDRDMA, ...
    direction: str = ""  # "send" / "receive" for network connections

    @property
    def kind(self) -> str:
        """P2P, SHM, NET/IB, NET/Socket, ... (the part that tells the path)."""
        return transport_kind(self.transport)


@dataclass(frozen=True)
class NcclLog:
    version: str | None = None  # "2.28.3+cuda13.0"
    network: str | None = None  # "IB", "Socket", or a plugin's name
    plugin: str | None = None
    nvls: bool = False
    connections: tuple[Connection, ...] = field(default=())

    @property
    def transports(self) -> tuple[str, ...]:
        """Distinct full transport words, most used first."""
        return tuple(t for t, _ in Counter(c.transport for c in self.connections).most_common())

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(k for k, _ in Counter(c.kind for c in self.connections).most_common())

    def summary(self) -> str:
        """One short string for a table: 'P2P/CUMEM', 'SHM', 'P2P/CUMEM+NET/IB', or 'unknown'."""
        if not self.connections:
            return "NVLS" if self.nvls else "unknown"
        words = []
        for t in self.transports:
            word = _short(t)
            if word not in words:
                words.append(word)
        if self.nvls:
            words.append("NVLS")
        return "+".join(words)


def transport_kind(via: str) -> str:
    parts = via.split("/")
    if parts[0] == "NET" and len(parts) > 1:
        return f"NET/{parts[1]}"
    return parts[0]


def _short(via: str) -> str:
    """P2P/CUMEM/read -> P2P/CUMEM; SHM/direct/direct -> SHM; NET/IB/0/GDRDMA -> NET/IB;
    P2P/direct pointer -> P2P/direct."""
    parts = via.split()[0].split("/")
    if parts[0] == "SHM":
        return "SHM"
    return "/".join(parts[:2])


def parse_lines(lines) -> NcclLog:
    version = network = plugin = None
    nvls = False
    seen: dict[tuple, Connection] = {}
    for line in lines:
        if "NCCL" not in line:
            continue
        m = _CHANNEL.search(line)
        if m:
            conn = Connection(int(m["channel"]), int(m["src"]), int(m["dst"]), m["via"].strip(),
                              {"recv": "receive"}.get(m["dir"] or "", m["dir"] or ""))
            seen.setdefault((conn.channel, m["conn"], conn.src, conn.dst, conn.direction), conn)
            continue
        m = _VERSION.search(line)
        if m:
            version = version or (m["version"] + m["extra"])
            continue
        m = _NETWORK.search(line)
        if m:
            network = network or m["net"]
            continue
        m = _PLUGIN.search(line)
        if m:
            plugin = plugin or m["text"].strip()
            continue
        if _NVLS.search(line):
            nvls = True
    return NcclLog(version, network, plugin, nvls, tuple(seen.values()))


def parse_text(text: str) -> NcclLog:
    return parse_lines(text.splitlines())


def debug_file_glob(pattern: str) -> str:
    """NCCL_DEBUG_FILE's %h (host) and %p (pid) placeholders as a glob matching every rank's file."""
    return pattern.replace("%h", "*").replace("%p", "*")


def read_logs(pattern: str, *, newer_than: float = 0.0) -> NcclLog:
    """Parse every file matching an NCCL_DEBUG_FILE pattern (files older than `newer_than` are skipped:
    an earlier run's leftovers)."""
    lines: list[str] = []
    for path in sorted(glob.glob(debug_file_glob(pattern))):
        try:
            if os.path.getmtime(path) < newer_than:
                continue
            with open(path, errors="replace") as fh:
                lines.extend(fh)
        except OSError:
            continue
    return parse_lines(lines)


def debug_env(log_dir: str, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The variables that make NCCL log what we parse, leaving alone any the user set already."""
    environ = os.environ if environ is None else environ
    env = {}
    if "NCCL_DEBUG" not in environ:
        env["NCCL_DEBUG"] = "INFO"
    if "NCCL_DEBUG_SUBSYS" not in environ:
        env["NCCL_DEBUG_SUBSYS"] = "INIT,P2P,SHM,NET"
    if "NCCL_DEBUG_FILE" not in environ:
        env["NCCL_DEBUG_FILE"] = os.path.join(log_dir, "nccl.%h.%p.log")
    return env
