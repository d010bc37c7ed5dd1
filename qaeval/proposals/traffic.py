"""Candidates from traffic: the rows of a monitor record most worth a person's look.

``propose_from_monitor(record, n)`` streams the record (``qaeval.proposals.scan``), keeps per kind
(``check_failed``, ``unfaithful``, ``abstained``) and stratum the rows with the smallest seeded hash,
splits ``n`` over them (``qaeval.proposals.pool.quotas``), then reads the chosen rows back from the log
and checks them again: a row the log no longer holds as recorded, already a case, or another
candidate's question and passages is dropped with the reason and replaced by the next of its stratum.
An abstention with no passage retrieved is never proposed (``no_passage_note``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd

from qaeval.core.errors import DatasetError, Problem, RecordError, UsageError
from qaeval.core.text import normalize, one_line
from qaeval.data.cases import Suite
from qaeval.data.corpus import Passage
from qaeval.data.log_formats import raw_rows
from qaeval.data.logs import LogRow, content_digest, parse_row, row_hash
from qaeval.data.misses import find_duplicate
from qaeval.proposals.candidates import ABSTAIN, ANSWER, Candidate
from qaeval.proposals.ledger import Ledger
from qaeval.proposals.pool import KIND_WORDS, KINDS, Pool, quotas
from qaeval.proposals.scan import monitor_section, scan_record, skeleton
from qaeval.scoring.monitor import check_row
from qaeval.system.retriever import coverage

FLOOR = 0.5  # an abstention over passages none of which holds this share of the question's terms is right
NO_PASSAGE = "abstained with no passage retrieved"  # a drop's reason: see ``no_passage_note``


@dataclass
class TrafficProposal:
    candidates: list[Candidate]
    pool: pd.DataFrame  # kind, stratum, rows, chosen
    dropped: dict[str, int]
    notes: list[str]


def _recorded_log(source: str, record: Path) -> str:
    """The log a record names: as written, or (a relative path that is not there) beside the record,
    since a monitor stores the path as it was given, relative to where it ran."""
    if os.path.isabs(source) or os.path.exists(source) or source == "<DataFrame>":
        return source
    beside = record.parent / source
    return str(beside) if beside.exists() else source


def _source_rows(log: str, wanted: dict[int, dict[str, Any]]) -> dict[int, tuple[LogRow | None, str]]:
    """Each wanted line's row as the log holds it now (None, why, when it cannot be used)."""
    out: dict[int, tuple[LogRow | None, str]] = {}
    problems: list[Problem] = []
    try:
        for line, raw in raw_rows(log, problems, only=wanted):
            row, _, found = parse_row(raw, 0, line)
            if row is None:
                out[line] = (None, "the log's row is no longer valid")
                continue
            expected = wanted[line]["row_id"]
            logged = row.id or row_hash(raw)
            if not (logged == expected or (row.generated_id and expected.startswith(logged + "-"))):
                out[line] = (None, "the log holds another row at that line")
                continue
            digest = wanted[line].get("digest")
            if digest is not None and content_digest(row) != digest:
                out[line] = (None, "the log's row changed since the monitor scored it")
                continue
            out[line] = (replace(row, id=expected), "")
    except OSError as exc:
        raise DatasetError(
            f"the log the monitor read cannot be read ({exc.strerror or exc}); if it moved, give "
            "its new path with --logs",
            file=log,
        ) from None
    file_problems = [p for p in problems if p.line is None]
    if file_problems:
        raise DatasetError(
            [
                Problem(log, None, f"{p.message}: the log the monitor read; if it moved, give its new path with --logs")
                for p in file_problems
            ]
        )
    for line in wanted:
        out.setdefault(line, (None, "the log no longer has that line"))
    return out


def _candidate(row: LogRow, kind: str, log: str, faithfulness: Any, compared: bool) -> tuple[Candidate | None, str]:
    checked = check_row(row)
    if kind == "check_failed" and checked["passed"]:
        return None, "the log's row passes every check now"
    if kind == "abstained" and not row.abstained:
        return None, "the log's row did not abstain"
    if kind == "abstained" and not row.passages:
        return None, NO_PASSAGE
    why = {
        "unfaithful": f"the monitor's judge scored faithfulness {faithfulness}",
        "check_failed": f"failed: {checked['fail_reasons']}",
        "abstained": "the system abstained",
    }[kind]
    if kind == "check_failed" and faithfulness == 0:
        why += "; and the monitor's judge scored faithfulness 0"
    expected = ANSWER
    if kind == "abstained":
        best = max((coverage(row.question, Passage(p.id, p.text, p.title)) for p in row.passages), default=0.0)
        if best < FLOOR:
            expected = ABSTAIN
            why += f" and no passage holds half the question's content terms (best {best:.2f}): a must-abstain case?"
        else:
            why += f" although a passage holds {best:.0%} of the question's content terms: an over-refusal?"
    said = (
        "it says what the monitor scored" if compared else "not compared with what the monitor scored (an older record)"
    )
    checks = (f"read back from {log} line {row.line}", said, "the checks give the same result again")
    return Candidate(
        origin="traffic",
        kind=kind,
        source=f"{log} line {row.line} ({row.id})",
        why=why,
        question=row.question,
        passages=row.passages,
        answer=row.answer,
        expected_behavior=expected,
        checks=checks,
        identity=f"row {row.id}",
    ), ""


def _choose(
    pool: Pool,
    quota: dict[tuple[str, str], int],
    log: str,
    logs: str | None,
    path: Path,
    suite: Suite | None,
    known: dict[int, tuple[LogRow | None, str]],
) -> tuple[dict[tuple[str, str], list[Candidate]], dict[str, int], list[tuple[str, str]]]:
    """(the candidates chosen per stratum, the drops by reason, the strata whose kept rows ran out before
    their quota while the scan had left rows of them behind). Each stratum takes its kept rows in rank
    order until its quota is met; the rows are read back from the log in rounds (``known``: those read
    so far, by line), each round asking for twice as many per row still needed as the last, so a stratum
    whose rows are mostly dropped (abstentions with no passage) costs a few reads of the log, not one
    per row."""
    order = {key: pool.ranked(key) for key in quota}
    taken = {key: 0 for key in quota}
    chosen: dict[tuple[str, str], list[Candidate]] = {key: [] for key in quota}
    dropped: dict[str, int] = {}
    identities: set[tuple[str, frozenset[str]]] = set()  # two rows alike would make one case
    ask = 1
    while True:
        open_ = [key for key, q in quota.items() if len(chosen[key]) < q and taken[key] < len(order[key])]
        if not open_:
            break
        wanted = {
            row["line"]: row
            for key in open_
            for row in order[key][taken[key] : taken[key] + ask * (quota[key] - len(chosen[key]))]
            if row["line"] not in known
        }
        if wanted:
            try:
                known.update(_source_rows(log, wanted))
            except UsageError as exc:  # the log's name, from the record unless --logs gave it: the record is wrong
                if logs:
                    raise
                raise RecordError(f"monitor.source {one_line(log)[:200]!r}: {exc}", file=str(path)) from None
        for key in open_:
            while len(chosen[key]) < quota[key] and taken[key] < len(order[key]):
                meta = order[key][taken[key]]
                if meta["line"] not in known:
                    break  # asked for in the next round
                taken[key] += 1
                candidate, why = _checked(known[meta["line"]], key[0], meta, log, suite, identities)
                if candidate is None:
                    dropped[why] = dropped.get(why, 0) + 1
                else:
                    chosen[key].append(candidate)
        ask *= 2
    dry = [
        key
        for key, q in quota.items()
        if len(chosen[key]) < q and taken[key] == len(order[key]) and pool.sizes[key] > len(order[key])
    ]
    return chosen, dropped, dry


def _checked(
    fetched: tuple[LogRow | None, str],
    kind: str,
    meta: dict[str, Any],
    log: str,
    suite: Suite | None,
    identities: set[tuple[str, frozenset[str]]],
) -> tuple[Candidate | None, str]:
    """A row read back as a candidate, or None and why it is dropped: it cannot be used, is already a
    case of ``suite``, or is another candidate's question and passages (``identities``, added to)."""
    logged, why = fetched
    if logged is None:
        return None, why
    candidate, why = _candidate(logged, kind, log, meta.get("faithfulness"), meta.get("digest") is not None)
    if candidate is None:
        return None, why
    if suite is not None:
        same = find_duplicate(suite, candidate.question, [(p.id, p.text) for p in candidate.passages])
        if same is not None:
            return None, "already a case"
    identity = (normalize(candidate.question), frozenset(normalize(p.text) for p in candidate.passages))
    if identity in identities:
        return None, "the same question and passages as another candidate"
    identities.add(identity)
    return candidate, ""


def no_passage_note(count: int) -> str:
    """What the drops for ``NO_PASSAGE`` mean, said once."""
    return (
        f"{count} abstained row(s) retrieved no passage and are not proposed: with nothing retrieved there is "
        "nothing to tell a right abstention from a retrieval miss, and a case without passages tests only that "
        "the system abstains on nothing; look at the retriever for those questions, and add one you can answer "
        "with `qaeval add-case`"
    )


def propose_from_monitor(
    record: str | Path,
    n: int,
    *,
    seed: int = 0,
    logs: str | None = None,
    suite: Suite | None = None,
    ledger: Ledger | None = None,
) -> TrafficProposal:
    """Up to ``n`` candidates from a monitor record (see the module's steps)."""
    path = Path(record)
    if n < 1:
        raise UsageError("n must be at least 1")
    data, one_a_line = skeleton(path)
    section = monitor_section(data, str(path))
    notes = []
    rows = None
    if not one_a_line:  # written by hand, or before rows were kept one a line: read whole
        rows = section.get("rows")
        if not isinstance(rows, list):
            raise RecordError("monitor record is malformed: monitor.rows is not a list", file=str(path))
        notes.append("the record's rows are not one a line (an older qaeval wrote it): it was read whole")
    log = logs or _recorded_log(section["source"], Path(path))
    if log == "<DataFrame>":
        raise UsageError("the monitor scored a DataFrame, not a file: give the log with --logs")
    limit = 2 * n + 8  # rows kept per (kind, stratum) by the scan: replacements for those dropped
    known: dict[int, tuple[LogRow | None, str]] = {}  # rows read back from the log, kept for a larger scan
    for _ in range(3):
        pool = scan_record(path, section, seed=seed, limit=limit, ledger=ledger, rows=rows)
        quota = quotas(pool, n)
        chosen, dropped, dry = _choose(pool, quota, log, logs, path, suite, known)
        if not dry:
            break
        limit *= 8  # repetitive traffic: the kept rows were alike and ran out; keep more and choose again
    if dry:
        notes.append(
            f"{sum(pool.sizes[k] - len(pool.ranked(k)) for k in dry):,} row(s) of {len(dry)} stratum(s) were not "
            f"kept while its candidates ran out (the rows kept were alike or cases already): propose again with a "
            "larger --n to look further"
        )
    frame = pd.DataFrame(
        [
            dict(kind=k, stratum=s, rows=pool.sizes[(k, s)], chosen=len(chosen[(k, s)]))
            for (k, s) in sorted(pool.sizes, key=lambda x: (KINDS.index(x[0]), x[1]))
        ],
        columns=["kind", "stratum", "rows", "chosen"],
    )
    sizes = pool.kind_sizes()
    picked = [c for key in sorted(chosen, key=lambda x: (KINDS.index(x[0]), x[1])) for c in chosen[key]]
    notes.insert(
        0,
        f"{pool.rows:,} row(s) in the record; chose {len(picked)} from "
        + ", ".join(
            f"{sum(len(v) for (k, _), v in chosen.items() if k == kind)} of {sizes[kind]:,} {KIND_WORDS[kind]}"
            for kind in KINDS
        )
        + (f" (seed {seed})" if picked else ""),
    )
    if dropped.get(NO_PASSAGE):
        notes.append(no_passage_note(dropped[NO_PASSAGE]))
    if pool.decided:
        notes.append(
            f"{pool.decided} row(s) were decided before (the ledger of {ledger.path.parent.parent if ledger else ''}) "
            "and are not proposed again"
        )
    if not picked:
        notes.append(
            "no row failed a check, was judged unfaithful or abstained: nothing to propose"
            if not any(sizes.values())
            else "every row chosen was dropped (see the reasons)"
        )
    return TrafficProposal(picked, frame, dropped, notes)
