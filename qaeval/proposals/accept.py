"""A filled review sheet into living-split cases: ``qaeval accept SHEET.csv --data DIR``.

A row is undecided (``accept`` blank), rejected (``n``: kept in the ledger, not proposed again) or
accepted (``y``): then it must still be what was proposed (its fingerprint), not decided before, and a
valid case that is not already in the suite. The cases are validated with the whole suite as strictly as
a load, every problem reported with its sheet line; nothing is written unless every row is fine, then
``living.jsonl`` is rewritten in one atomic step and the decisions appended to the ledger.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qaeval.core.errors import DatasetError, Problem
from qaeval.core.files import read_bytes, write_atomic
from qaeval.core.jsonfile import dumps_canonical, loads_strict
from qaeval.core.text import normalize
from qaeval.data.cases import Suite, load_suite
from qaeval.data.misses import LIVING, case_prefix, find_duplicate
from qaeval.data.schema import DIFFICULTIES, Source
from qaeval.proposals.candidates import ABSTAIN, ANSWER, ORIGINS, SHEET_COLUMNS, fingerprint, ids_of_cell
from qaeval.proposals.ledger import Ledger, question_key, read_ledger, traffic_key
from qaeval.verdicts.sheets import sheet_rows

YES, NO = ("y", "yes"), ("n", "no")


@dataclass
class Accepted:
    """What ``accept`` did: the new case ids (with the candidate each came from), rejected and undecided."""

    added: list[tuple[str, str]]
    rejected: int
    undecided: int
    path: Path
    again: list[str] = field(default_factory=list)

    def summary_text(self) -> str:
        parts = [
            f"added {len(self.added)} case(s) to {self.path}"
            + (": " + ", ".join(cid for cid, _ in self.added) if self.added else "")
        ]
        parts.append(f"{self.rejected} rejected (remembered: not proposed again)")
        if self.undecided:
            parts.append(f"{self.undecided} row(s) with accept blank were left undecided")
        if self.again:
            parts.append(f"{len(self.again)} row(s) decided the same way before were left as they are")
        return "; ".join(parts)


def _passages(cell: str) -> tuple[tuple[Source, ...] | None, str]:
    try:
        raw = loads_strict(cell)
    except ValueError as exc:
        return None, f"passages is not valid JSON ({str(exc)[:80]})"
    if not isinstance(raw, list) or not all(
        isinstance(p, dict)
        and isinstance(p.get("id"), str)
        and isinstance(p.get("text"), str)
        and isinstance(p.get("title"), (str, type(None)))
        and set(p) <= {"id", "text", "title"}
        for p in raw
    ):
        return None, "passages must be a JSON list of {id, text, title?}"
    return tuple(Source(p["id"], p["text"], p.get("title")) for p in raw), ""


def _key(row: Mapping[str, str]) -> str:
    if row["origin"] == "traffic":  # the source is "LOG line N (ROW ID)", and a row id may hold brackets
        found = re.search(r" line \d+ \((.*)\)$", row["source"])
        return traffic_key(found.group(1) if found else row["source"])
    return question_key(row["question"])


def _decision(row: Mapping[str, str], decision: str, case_id: str | None = None) -> dict[str, Any]:
    """The ledger's entry for a row (``Ledger.append`` stamps it)."""
    return dict(candidate_id=row["candidate_id"], key=_key(row), decision=decision, case_id=case_id, note=row["note"])


class _Refused(Exception):
    """A row that cannot be taken, with every reason (``args``)."""


def _case(row: Mapping[str, str], passages: tuple[Source, ...], corpus: Any) -> dict[str, Any]:
    problems = []
    behavior = row["expected_behavior"]
    gold = row["gold_answer"] or None
    ids, bad_ids = ids_of_cell(row["gold_source_ids"])
    if bad_ids:
        problems.append(bad_ids)
    known = [p.id for p in passages]
    if behavior not in (ANSWER, ABSTAIN):
        problems.append(f"expected_behavior {behavior!r} is not {ANSWER} or {ABSTAIN}")
    elif behavior == ANSWER:
        if gold is None:
            problems.append("an answerable case needs a gold_answer")
        if not ids:
            problems.append("an answerable case needs gold_source_ids (the passages that carry the answer)")
    elif gold is not None or ids:
        problems.append("a must-abstain case has no gold_answer and no gold_source_ids")
    problems += [
        f"gold source id {i!r} is not one of the row's passages ({', '.join(known)})" for i in ids if i not in known
    ]
    difficulty = row["difficulty"] or "single-hop"
    if difficulty not in DIFFICULTIES:
        problems.append(f"difficulty {difficulty!r} is not one of {', '.join(DIFFICULTIES)}")
    if problems:
        raise _Refused(*problems)
    case: dict[str, Any] = dict(
        question=row["question"],
        gold_answer=gold,
        gold_source_ids=ids,
        expected_behavior=behavior,
        difficulty=difficulty,
        adversarial="production-miss" if row["origin"] == "traffic" else "generated",
        split="living",
    )
    in_corpus = (
        corpus is not None
        and row["origin"] == "corpus"
        and all((c := corpus.get(p.id)) is not None and c.text == p.text for p in passages)
    )
    if not in_corpus:
        case["sources"] = [{"id": p.id, "text": p.text, **({"title": p.title} if p.title else {})} for p in passages]
    return case


def accept(sheet: str | Path, data: str | Path) -> Accepted:
    """Add the accepted rows of ``sheet`` to the living split of the golden folder ``data`` (see the module)."""
    from qaeval.core.locks import holding_the_folder

    root = Path(data)
    with holding_the_folder(root):  # two accepts (or an add-case) would number and write the same cases
        return _accept(sheet, root)


# An accepted row on its way to the living split: (sheet line, sheet row number, the case, the row).
_New = tuple[int, int, dict[str, Any], dict[str, str]]


@dataclass
class _Review:
    """The sheet read so far: its problems, the accepted rows, the rejected decisions, the rows left as they
    are, and what no two accepted rows may share (a candidate, a question with its passages)."""

    where: str
    problems: list[Problem] = field(default_factory=list)
    new: list[_New] = field(default_factory=list)
    rejected: list[dict[str, Any]] = field(default_factory=list)
    undecided: int = 0
    again: list[str] = field(default_factory=list)  # rows decided the same way by an earlier accept of this sheet
    # the accepted rows' questions and passages: no case twice
    batch: dict[tuple[str, frozenset[str]], int] = field(default_factory=dict)
    seen: dict[str, int] = field(default_factory=dict)

    def refuse(self, message: str, line: int, number: int, row: dict[str, str]) -> None:
        self.problems.append(
            Problem(self.where, line, f"{message} (sheet row {number}, {row.get('candidate_id') or 'no id'})")
        )


def _accept(sheet: str | Path, root: Path) -> Accepted:
    suite = load_suite(root)
    ledger = read_ledger(root)
    review = _Review(str(sheet))
    for line, number, row in sheet_rows(sheet, "review sheet", SHEET_COLUMNS):
        _review_row(review, suite, ledger, line, number, row)
    if review.problems:
        raise DatasetError(review.problems)
    target = root / LIVING
    existing = read_bytes(target) if target.exists() else b""
    _number_and_check(review, suite, root, target, existing)
    ledger.check_writable()  # before the cases are written: a ledger that cannot take the decisions stops here
    if review.new:
        _write_cases(target, existing, review.new)
        load_suite(root)  # what was written loads
    ledger.append([_decision(row, "accepted", case["id"]) for _, _, case, row in review.new] + review.rejected)
    return Accepted(
        [(case["id"], row["candidate_id"]) for _, _, case, row in review.new],
        len(review.rejected),
        review.undecided,
        target,
        review.again,
    )


def _review_row(review: _Review, suite: Suite, ledger: Ledger, line: int, number: int, row: dict[str, str]) -> None:
    """Read one row as the reviewer left it: undecided, refused, left as it is, rejected or accepted."""
    decision = row["accept"].lower()
    if not decision:
        review.undecided += 1
        return
    try:
        passages = _as_proposed(review, line, row, decision)
        if _decided_before(review, ledger, number, row, decision):
            return
        if decision in NO:
            review.rejected.append(_decision(row, "rejected"))
        else:
            review.new.append((line, number, _new_case(review, suite, line, row, passages), row))
    except _Refused as refused:
        for message in refused.args:
            review.refuse(message, line, number, row)


def _as_proposed(review: _Review, line: int, row: dict[str, str], decision: str) -> tuple[Source, ...]:
    """The row's passages when it is a readable decision on a proposal as it was proposed, met once."""
    if decision not in YES + NO:
        raise _Refused(f"accept {row['accept']!r} is not y or n")
    passages, why = _passages(row["passages"])
    if passages is None or row["origin"] not in ORIGINS:
        raise _Refused(why or f"origin {row['origin']!r} is not one of {', '.join(ORIGINS)}")
    if (
        fingerprint(row["candidate_id"], row["origin"], row["source"], row["question"], passages, row["answer"] or None)
        != row["fingerprint"]
    ):
        raise _Refused(
            "the proposal was edited after it was proposed (its question, passages, source or answer "
            "differ from what its fingerprint says): propose again, or write the case with add-case"
        )
    if row["candidate_id"] in review.seen:
        raise _Refused(f"a second row for this candidate (first on line {review.seen[row['candidate_id']]})")
    review.seen[row["candidate_id"]] = line
    return passages


def _decided_before(review: _Review, ledger: Ledger, number: int, row: dict[str, str], decision: str) -> bool:
    """Whether the ledger already holds this row or question: the same decision is left as it is, the other
    refused."""
    before = ledger.decided(_key(row), row["candidate_id"])
    if before is None:
        return False
    said = "accepted" if decision in YES else "rejected"
    when = f"{before['decision']} on {before['decided']}" + (
        f" as {before['case_id']}" if before.get("case_id") else ""
    )
    if before["decision"] == said:  # the same row or question, decided the same way: nothing to do
        review.again.append(f"{row['candidate_id']} (sheet row {number}) was {when}: left as it is")
    else:
        raise _Refused(f"already {when}; the sheet now says {said}")
    return True


def _new_case(
    review: _Review, suite: Suite, line: int, row: dict[str, str], passages: tuple[Source, ...]
) -> dict[str, Any]:
    """The accepted row as a case, when it makes a valid one that is neither in the suite nor accepted
    earlier in this sheet."""
    case = _case(row, passages, suite.corpus)
    same = find_duplicate(suite, case["question"], [(p.id, p.text) for p in passages])
    if same is not None and "sources" in case:
        raise _Refused(f"already in the suite as {same.id} ({same.file}:{same.line}): same question, same passages")
    dup = next(
        (
            c
            for c in suite
            if c.from_corpus and "sources" not in case and question_key(c.question) == question_key(case["question"])
        ),
        None,
    )
    if dup is not None:
        raise _Refused(f"already in the suite as {dup.id} ({dup.file}:{dup.line}): same question over the corpus")
    identity = (normalize(case["question"]), frozenset(normalize(p.text) for p in passages))
    if identity in review.batch:
        raise _Refused(f"the same question and passages as the row on line {review.batch[identity]}")
    review.batch[identity] = line
    return case


def _number_and_check(review: _Review, suite: Suite, root: Path, target: Path, existing: bytes) -> None:
    """Give each new case its id (as add-case numbers them) and validate the whole suite with them, strictly;
    a problem is reported at the sheet line of the row it came from."""
    from qaeval.data.cases import build_suite

    first = (
        existing.decode("utf-8-sig", errors="replace").count("\n")
        + (0 if existing.endswith(b"\n") or not existing else 1)
        + 1
    )
    entries = [(c.file, c.line, c.to_raw()) for c in suite]
    taken = {c.id for c in suite}
    placed = []
    for offset, (line, number, case, row) in enumerate(review.new):
        prefix = case_prefix(case)
        numbers = [int(m.group(1)) for i in taken if (m := re.fullmatch(rf"{re.escape(prefix)}-(\d+)", i))]
        case["id"] = f"{prefix}-{max(numbers, default=0) + 1:04d}"  # as add-case numbers them (next_id)
        taken.add(case["id"])
        entries.append((str(target), first + offset, case))
        placed.append((first + offset, line, number, row))
    try:
        build_suite(entries, str(root), corpus=suite.corpus)  # the whole suite with the new cases, strictly
    except DatasetError as exc:
        at = {written: (line, number, row) for written, line, number, row in placed}
        mine = [
            Problem(
                review.where, at[p.line][0], f"{p.message} (sheet row {at[p.line][1]}, {at[p.line][2]['candidate_id']})"
            )
            for p in exc.problems
            if p.file == str(target) and p.line in at
        ]
        raise DatasetError(mine or exc.problems) from None


def _write_cases(target: Path, existing: bytes, new: list[_New]) -> None:
    """Rewrite the living split with the new cases after the existing ones, in one atomic step."""
    if existing and not existing.endswith(b"\n"):
        existing += b"\n"
    write_atomic(target, existing + "".join(dumps_canonical(case) + "\n" for _, _, case, _ in new).encode("utf-8"))
