"""Answer: one network question answered (report/networks.py, report/networks_geo.py), as the study
report and study.json carry it."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Answer:
    """One question's answer: a sentence per model, the tables it stands on, and notes."""

    key: str
    title: str
    sentences: tuple[str, ...]
    tables: tuple[tuple[str, list[str], list[list[str]]], ...] = ()  # (caption, headers, rows)
    notes: tuple[str, ...] = ()
    values: dict = field(default_factory=dict, compare=False, hash=False)

    def to_dict(self) -> dict:
        return {"key": self.key, "title": self.title, "sentences": list(self.sentences),
                "tables": [{"caption": c, "headers": h, "rows": r} for c, h, r in self.tables],
                "notes": list(self.notes), "values": self.values}

    @classmethod
    def from_dict(cls, d: dict) -> Answer:
        return cls(key=d["key"], title=d["title"], sentences=tuple(d["sentences"]),
                   tables=tuple((t["caption"], t["headers"], t["rows"]) for t in d["tables"]),
                   notes=tuple(d["notes"]), values=d.get("values", {}))
