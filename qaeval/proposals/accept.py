"""A filled review sheet into living-split cases: ``qaeval accept SHEET.csv --data DIR``.

Each row is read as the reviewer left it (``qaeval.proposals.candidates``):

- ``accept`` blank: undecided, counted, nothing written. ``n`` (or ``no``): rejected, remembered in the
  ledger (``qaeval.proposals.ledger``) so it is not proposed again. ``y`` (or ``yes``): accepted.
- A row decided the same way before (an earlier ``accept`` of the same sheet) is left as it is, and
  said; a row the ledger holds with the other decision is refused.
- An accepted row must still be what was proposed (its fingerprint), must not have been decided
  before (the ledger) and must make a valid case: ``expected_behavior`` one of the two, a gold answer
  and gold passages (among the row's own) for an answerable case and neither for a must-abstain one, a
  known difficulty. A row whose question and passages are already a case is refused.
- The cases are then validated with the whole suite, corpus included, as strictly as a load (as
  ``add-case`` does), and every problem is reported with its sheet line and row. Nothing is written
  unless every row is fine: then ``living.jsonl`` is rewritten in one atomic step and the decisions are
  appended to the ledger.

A corpus candidate becomes a corpus case (no ``sources``; its gold ids are corpus ids) when DIR's corpus
holds each of its passages with the same text; otherwise it carries its passages as ``sources``, as a
traffic candidate does. Ids are readable and new (``single-0009``, ``multi-0005``, ``abstain-0004``).
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
from qaeval.data.cases import load_suite
from qaeval.data.misses import LIVING, case_prefix, find_duplicate
from qaeval.data.schema import DIFFICULTIES, Source
from qaeval.proposals.candidates import ABSTAIN, ANSWER, ORIGINS, SHEET_COLUMNS, fingerprint, ids_of_cell
from qaeval.proposals.ledger import question_key, read_ledger, traffic_key
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


def _case(row: Mapping[str, str], passages: tuple[Source, ...], corpus: Any) -> tuple[dict[str, Any] | None, list[str]]:
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
        return None, problems
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
    return case, []


def accept(sheet: str | Path, data: str | Path) -> Accepted:
    """Add the accepted rows of ``sheet`` to the living split of the golden folder ``data`` (see the module)."""

    from qaeval.core.locks import holding_the_folder

    root = Path(data)
    with holding_the_folder(root):  # two accepts (or an add-case) would number and write the same cases
        return _accept(sheet, root)


def _accept(sheet: str | Path, root: Path) -> Accepted:
    from qaeval.data.cases import build_suite

    suite = load_suite(root)
    ledger = read_ledger(root)
    where = str(sheet)
    problems: list[Problem] = []
    new: list[tuple[int, int, dict[str, Any], dict[str, str]]] = []
    rejected: list[dict[str, Any]] = []
    undecided = 0
    again: list[str] = []  # rows decided the same way by an earlier accept of this sheet
    batch: dict[tuple[str, frozenset[str]], int] = {}  # the accepted rows' questions and passages: no case twice
    seen: dict[str, int] = {}
    for line, number, row in sheet_rows(sheet, "review sheet", SHEET_COLUMNS):

        def refuse(message: str, line: int = line, number: int = number, row: dict[str, str] = row) -> None:
            problems.append(
                Problem(where, line, f"{message} (sheet row {number}, {row.get('candidate_id') or 'no id'})")
            )

        decision = row["accept"].lower()
        if not decision:
            undecided += 1
            continue
        if decision not in YES + NO:
            refuse(f"accept {row['accept']!r} is not y or n")
            continue
        passages, why = _passages(row["passages"])
        if passages is None or row["origin"] not in ORIGINS:
            refuse(why or f"origin {row['origin']!r} is not one of {', '.join(ORIGINS)}")
            continue
        if (
            fingerprint(
                row["candidate_id"], row["origin"], row["source"], row["question"], passages, row["answer"] or None
            )
            != row["fingerprint"]
        ):
            refuse(
                "the proposal was edited after it was proposed (its question, passages, source or answer "
                "differ from what its fingerprint says): propose again, or write the case with add-case"
            )
            continue
        if row["candidate_id"] in seen:
            refuse(f"a second row for this candidate (first on line {seen[row['candidate_id']]})")
            continue
        seen[row["candidate_id"]] = line
        before = ledger.decided(_key(row), row["candidate_id"])
        if before is not None:
            said = "accepted" if decision in YES else "rejected"
            when = f"{before['decision']} on {before['decided']}" + (
                f" as {before['case_id']}" if before.get("case_id") else ""
            )
            if before["decision"] == said:  # the same row or question, decided the same way: nothing to do
                again.append(f"{row['candidate_id']} (sheet row {number}) was {when}: left as it is")
            else:
                refuse(f"already {when}; the sheet now says {said}")
            continue
        if decision in NO:
            rejected.append(
                dict(
                    candidate_id=row["candidate_id"], key=_key(row), decision="rejected", case_id=None, note=row["note"]
                )
            )
            continue
        case, found = _case(row, passages, suite.corpus)
        if case is None:
            for p in found:
                refuse(p)
            continue
        same = find_duplicate(suite, case["question"], [(p.id, p.text) for p in passages])
        if same is not None and "sources" in case:
            refuse(f"already in the suite as {same.id} ({same.file}:{same.line}): same question, same passages")
            continue
        dup = next(
            (
                c
                for c in suite
                if c.from_corpus
                and "sources" not in case
                and question_key(c.question) == question_key(case["question"])
            ),
            None,
        )
        if dup is not None:
            refuse(f"already in the suite as {dup.id} ({dup.file}:{dup.line}): same question over the corpus")
            continue
        identity = (normalize(case["question"]), frozenset(normalize(p.text) for p in passages))
        if identity in batch:
            refuse(f"the same question and passages as the row on line {batch[identity]}")
            continue
        batch[identity] = line
        new.append((line, number, case, row))
    if problems:
        raise DatasetError(problems)
    target = root / LIVING
    existing = read_bytes(target) if target.exists() else b""
    first = (
        existing.decode("utf-8-sig", errors="replace").count("\n")
        + (0 if existing.endswith(b"\n") or not existing else 1)
        + 1
    )
    entries = [(c.file, c.line, c.to_raw()) for c in suite]
    taken = {c.id for c in suite}
    placed = []
    for offset, (line, number, case, row) in enumerate(new):
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
            Problem(where, at[p.line][0], f"{p.message} (sheet row {at[p.line][1]}, {at[p.line][2]['candidate_id']})")
            for p in exc.problems
            if p.file == str(target) and p.line in at
        ]
        raise DatasetError(mine or exc.problems) from None
    ledger.check_writable()  # before the cases are written: a ledger that cannot take the decisions stops here
    if new:
        if existing and not existing.endswith(b"\n"):
            existing += b"\n"
        write_atomic(target, existing + "".join(dumps_canonical(case) + "\n" for _, _, case, _ in new).encode("utf-8"))
        load_suite(root)  # what was written loads
    ledger.append(
        [
            dict(
                candidate_id=row["candidate_id"],
                key=_key(row),
                decision="accepted",
                case_id=case["id"],
                note=row["note"],
            )
            for _, _, case, row in new
        ]
        + rejected
    )
    return Accepted(
        [(case["id"], row["candidate_id"]) for _, _, case, row in new], len(rejected), undecided, target, again
    )
