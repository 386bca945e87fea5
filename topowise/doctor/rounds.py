"""Node pairs measured in rounds, and the slow node named from them (pure; the measuring is elsewhere).

In each round every node is in at most one pair, so a round's pairs run at once without sharing a
NIC; the circle method of round-robin tournaments gives n-1 rounds (n even; n rounds with one node
resting, n odd) in which every pair meets once. A slow node or NIC shows in every pair it is in, a
sound node only in the pair it shares with the slow one: after two or three rounds the node that
falls short with every partner is the one, where a single slow pair could be either of its ends.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

SHORT = 0.85  # a pair under 85% of its expected bandwidth falls short (nccltests.SHORT's rule)
MIN_PARTNERS = 2  # partners a node must fall short with before it alone is named


def pair_rounds(nodes: int, rounds: int | None = None) -> list[list[tuple[int, int]]]:
    """The circle method: node 0 stays, the others turn one place per round. `rounds` caps how many."""
    if nodes < 2:
        return []
    ring = list(range(nodes)) + ([-1] if nodes % 2 else [])  # -1: the resting place when n is odd
    size = len(ring)
    out = []
    for _ in range(size - 1 if rounds is None else min(rounds, size - 1)):
        pairs = [(ring[i], ring[size - 1 - i]) for i in range(size // 2)]
        out.append(sorted((min(a, b), max(a, b)) for a, b in pairs if a >= 0 and b >= 0))
        ring = [ring[0], ring[-1]] + ring[1:-1]
    return out


@dataclass(frozen=True)
class SlowNode:
    node: int
    evidence: str  # the partners it fell short with, measured against expected
    alone: bool  # True: it fell short with MIN_PARTNERS or more partners, each of which was fine elsewhere


def slow_nodes(measured: Mapping[tuple[int, int], float], expected_gbps: float, short: float = SHORT) -> list[SlowNode]:
    """Nodes whose every measured pair fell short. A node short with several partners, each of them
    fine in some other pair, is named alone; a pair short where neither end was seen elsewhere names
    both ends (measure another round to tell them apart)."""
    pairs = {(min(a, b), max(a, b)): gbps for (a, b), gbps in measured.items()}
    short_pairs = {p for p, gbps in pairs.items() if gbps < short * expected_gbps}
    partners: dict[int, list[tuple[int, float]]] = {}
    for (a, b), gbps in pairs.items():
        partners.setdefault(a, []).append((b, gbps))
        partners.setdefault(b, []).append((a, gbps))

    def sound_elsewhere(node: int, apart_from: int) -> bool:
        return any((min(node, o), max(node, o)) not in short_pairs for o, _ in partners[node] if o != apart_from)

    out = []
    for node, seen in sorted(partners.items()):
        if not all((min(node, o), max(node, o)) in short_pairs for o, _ in seen):
            continue
        alone = len(seen) >= MIN_PARTNERS and all(sound_elsewhere(o, node) for o, _ in seen)
        text = ", ".join(f"with node {o}: {gbps:.3g} of {expected_gbps:.3g} GB/s" for o, gbps in seen)
        out.append(SlowNode(node=node, evidence=text, alone=alone))
    return out
