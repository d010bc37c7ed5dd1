"""A candidate case, and the review sheet a person fills (``SHEET_COLUMNS``; each column is described in
docs/guides/grow.md).

The ``candidate_id`` hashes where the candidate came from (a traffic row's id, or the passages) and its
question, so the same candidate proposed twice has the same id; the ``fingerprint`` hashes the proposal
(id, origin, source, question, passages, answer), and ``accept`` refuses a row whose proposal was
edited. Cells are written as the label sheets write them (``qaeval.verdicts.sheets.sheet_cell``): a
cell a spreadsheet would run as a formula gets one leading ``'``, which reading takes off again.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qaeval.core.files import REVIEW_SHEET_COLUMNS, write_atomic
from qaeval.core.jsonfile import dumps_canonical
from qaeval.data.schema import Source
from qaeval.verdicts.sheets import sheet_cell

SHEET_COLUMNS = REVIEW_SHEET_COLUMNS  # the review sheet's header row (qaeval.core.files)
REVIEW_COLUMNS = ("accept", "expected_behavior", "gold_answer", "gold_source_ids", "difficulty", "note")
ANSWER, ABSTAIN = "answer", "unanswerable_must_abstain"
ORIGINS = ("traffic", "corpus")


def candidate_id(origin: str, source: str, question: str) -> str:
    digest = hashlib.sha256(dumps_canonical([origin, source, question]).encode("utf-8", "surrogatepass"))
    return "cand-" + digest.hexdigest()[:12]


def passages_plain(passages: Sequence[Source]) -> list[dict[str, str]]:
    return [{"id": p.id, "text": p.text, **({"title": p.title} if p.title else {})} for p in passages]


def fingerprint(
    cid: str, origin: str, source: str, question: str, passages: Sequence[Source], answer: str | None
) -> str:
    # question and answer as a sheet reads them back (its cells are stripped): a logged answer ending in a
    # line break is the same proposal after the round trip
    plain = [cid, origin, source, question.strip(), passages_plain(passages), (answer or "").strip()]
    return hashlib.sha256(dumps_canonical(plain).encode("utf-8", "surrogatepass")).hexdigest()[:16]


def ids_cell(ids: tuple[str, ...] | list[str]) -> str:
    """Passage ids as a sheet cell that ``ids_of_cell`` reads back to the same ids: separated by commas,
    or a JSON list when an id holds a comma or starts with ``[``."""
    if any("," in i or i.lstrip().startswith("[") or i != i.strip() for i in ids):
        return json.dumps(list(ids), ensure_ascii=False)
    return ", ".join(ids)


def ids_of_cell(cell: str) -> tuple[list[str], str | None]:
    """(the ids a ``gold_source_ids`` cell names, what is wrong with it or None): a JSON list of strings,
    or ids separated by commas, each stripped (an id may hold spaces)."""
    if cell.lstrip().startswith("["):
        try:
            value = json.loads(cell)
        except ValueError:
            return [], "gold_source_ids starts with [ but is not a JSON list"
        if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
            return [], "gold_source_ids as a JSON list must list non-empty strings"
        return value, None
    return [i.strip() for i in cell.split(",") if i.strip()], None


@dataclass(frozen=True)
class Candidate:
    """One proposed case: what a person reviews. ``kind`` says what it is a candidate for (traffic:
    ``check_failed``, ``unfaithful``, ``abstained``; corpus: ``single``, ``multi``, ``abstain``)."""

    origin: str
    kind: str
    source: str
    why: str
    question: str
    passages: tuple[Source, ...]
    answer: str | None
    expected_behavior: str = ANSWER
    gold_answer: str | None = None
    gold_source_ids: tuple[str, ...] = ()
    difficulty: str = "single-hop"
    checks: tuple[str, ...] = field(default_factory=tuple)
    id: str = ""
    # what the id is made from, beside the question: a traffic row's id (not the log's path, which may be
    # spelled many ways), else the source
    identity: str = ""

    def __post_init__(self) -> None:
        if not self.id:
            object.__setattr__(self, "id", candidate_id(self.origin, self.identity or self.source, self.question))

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.id, self.origin, self.source, self.question, self.passages, self.answer)

    def to_row(self) -> dict[str, Any]:
        return dict(
            candidate_id=self.id,
            origin=self.origin,
            source=self.source,
            why=self.why,
            checks="; ".join(self.checks),
            question=self.question,
            passages=json.dumps(passages_plain(self.passages), ensure_ascii=False, indent=1),
            answer=self.answer or "",
            accept="",
            expected_behavior=self.expected_behavior,
            gold_answer=self.gold_answer or "",
            gold_source_ids=ids_cell(self.gold_source_ids),
            difficulty=self.difficulty,
            note="",
            fingerprint=self.fingerprint,
        )


def sheet_text(candidates: Sequence[Candidate]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(SHEET_COLUMNS), lineterminator="\r\n")  # RFC 4180
    writer.writeheader()
    for c in candidates:
        writer.writerow({k: sheet_cell(v) for k, v in c.to_row().items()})
    return buffer.getvalue()


def write_sheet(candidates: Sequence[Candidate], path: str | Path) -> Path:
    """The review sheet, written atomically (UTF-8 with a byte-order mark, so spreadsheets read it as
    UTF-8)."""
    return write_atomic(path, "\ufeff" + sheet_text(candidates))
