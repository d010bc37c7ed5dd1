"""The ledger of decisions: which candidates a person accepted or rejected, kept beside the cases.

``DIR/.qaeval/decisions.jsonl`` (a subfolder, so it is never read as a case file), one line per
decision, appended by ``qaeval accept``. A traffic candidate's key is its log row id, a corpus
candidate's its normalised question. The file is the user's: a line that breaks ``FIELDS`` is a
DatasetError with its line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from qaeval.core.errors import DatasetError, Problem
from qaeval.core.files import append_line
from qaeval.core.jsonfile import dumps_canonical, iter_jsonl
from qaeval.core.text import normalize

FOLDER = ".qaeval"
FILE = "decisions.jsonl"
DECISIONS = ("accepted", "rejected")
FIELDS: dict[str, type | tuple[type, ...]] = {
    "candidate_id": str,
    "key": str,
    "decision": str,
    "case_id": (str, type(None)),
    "note": str,
    "decided": str,
}


def ledger_path(data_dir: str | Path) -> Path:
    return Path(data_dir) / FOLDER / FILE


def traffic_key(row_id: str) -> str:
    return f"row:{row_id}"


def question_key(question: str) -> str:
    return f"question:{normalize(question)}"


@dataclass
class Ledger:
    path: Path
    by_key: dict[str, dict[str, Any]] = field(default_factory=dict)
    by_id: dict[str, dict[str, Any]] = field(default_factory=dict)

    def decided(self, key: str, cid: str | None = None) -> dict[str, Any] | None:
        return self.by_key.get(key) or (self.by_id.get(cid) if cid else None)

    def rejected_count(self) -> int:
        return sum(1 for e in self.by_key.values() if e["decision"] == "rejected")

    def check_writable(self) -> None:
        """A FileAccessError (74) now when the decisions could not be appended: a folder, a link or a file
        in the way."""
        from qaeval.core.errors import FileAccessError

        folder = self.path.parent
        for place in (folder, self.path):
            if place.is_symlink():
                raise FileAccessError(place, "the ledger of decisions may not be a link")
        if folder.exists() and not folder.is_dir():
            raise FileAccessError(folder, "cannot keep the ledger of decisions: a file is in the way of its folder")
        if self.path.exists() and not self.path.is_file():
            raise FileAccessError(self.path, "the ledger of decisions is not a regular file")

    def append(self, entries: list[dict[str, Any]]) -> None:
        """Every decision in one append (all or nothing)."""
        if not entries:
            return
        self.check_writable()
        when = datetime.now(timezone.utc).isoformat(timespec="seconds")
        stamped = [{**entry, "decided": when} for entry in entries]
        append_line(self.path, "\n".join(dumps_canonical(e) for e in stamped))
        for entry in stamped:
            self.by_key[entry["key"]] = self.by_id[entry["candidate_id"]] = entry


def read_ledger(data_dir: str | Path) -> Ledger:
    """The decisions recorded for ``data_dir`` (none when the file does not exist)."""
    path = ledger_path(data_dir)
    ledger = Ledger(path)
    if not path.exists():
        return ledger
    problems: list[Problem] = []
    for line, raw in iter_jsonl(path, problems):
        found = [] if isinstance(raw, dict) else ["a decision must be a JSON object"]
        if not found:
            found += [f"unknown field {k!r}" for k in raw if k not in FIELDS]
            found += [
                f"{k!r} missing or not {t.__name__ if isinstance(t, type) else 'text or null'}"
                for k, t in FIELDS.items()
                if k != "case_id" and not isinstance(raw.get(k), t)
            ]
            if not isinstance(raw.get("case_id"), (str, type(None))):
                found.append("'case_id' must be text or null")
            if raw.get("decision") not in DECISIONS:
                found.append(f"decision {raw.get('decision')!r} is not accepted or rejected")
        if found:
            problems += [Problem(str(path), line, p) for p in found]
            continue
        ledger.by_key[raw["key"]] = ledger.by_id[raw["candidate_id"]] = raw
    if problems:
        raise DatasetError(problems)
    return ledger
