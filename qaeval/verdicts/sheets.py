"""The spreadsheet round trip of labels for a run's outputs.

``export_sheet`` writes one CSV row per answered case and axis with empty ``score`` and ``reason`` (the
judge's score is withheld so annotators are not anchored); ``import_sheet`` checks a filled sheet against
the run (scores 0/1/2, known cases, current fingerprints) and counts blank rows, never dropping them. A
cell a spreadsheet would run as a formula (``FORMULA_STARTS``) is written with one leading ``'`` (OWASP's
advice on CSV injection), which ``import_sheet`` takes off again, so the round trip changes no text.
"""

from __future__ import annotations

import csv
import io
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from qaeval.core.errors import DatasetError, Problem
from qaeval.core.files import LABEL_SHEET_COLUMNS, NotRegularFile, read_bytes, read_text
from qaeval.core.frames import RowsByKey
from qaeval.data.schema import AXES, CITATION_CORRECTNESS
from qaeval.scoring.checks import judged_fixture
from qaeval.scoring.result import RunResult

SHEET_COLUMNS = list(LABEL_SHEET_COLUMNS)  # the label sheet's header row (qaeval.core.files)

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")  # what a spreadsheet may run as a formula (OWASP)


def sheet_cell(value: Any) -> Any:
    """A value as a spreadsheet cell that no spreadsheet runs: one leading ``'`` when it would otherwise
    start a formula, or when it already starts with quotes before such a character (so that
    ``sheet_value`` undoes exactly this, whatever the text)."""
    if isinstance(value, str) and value.lstrip("'").startswith(FORMULA_STARTS):
        return "'" + value
    return value


def sheet_value(cell: str) -> str:
    """The text a sheet cell stands for: ``sheet_cell`` undone."""
    if cell.startswith("'") and cell.lstrip("'").startswith(FORMULA_STARTS):
        return cell[1:]
    return cell


def _sheet_text(path: str | Path, what: str) -> str:
    """The sheet's text (UTF-8). A sheet a spreadsheet saved in its own encoding (Excel's "CSV (Comma
    delimited)" is Windows-1252) is bad data naming that encoding, never guessed at."""
    try:
        return read_text(path, what)
    except DatasetError as exc:
        if not any(p.message.startswith("not valid UTF-8") for p in exc.problems):
            raise
        try:
            read_bytes(path).decode("cp1252")
        except (UnicodeDecodeError, OSError, NotRegularFile):
            raise exc from None
        hint = (
            ': the sheet reads as Windows-1252, the encoding of Excel\'s "CSV (Comma delimited)"; save it as '
            '"CSV UTF-8 (Comma delimited)" and try again'
        )
        raise DatasetError([Problem(p.file, p.line, p.message + hint) for p in exc.problems]) from None


def sheet_rows(path: str | Path, what: str, required: tuple[str, ...]) -> Iterator[tuple[int, int, dict[str, str]]]:
    """(line the row starts on, its row number in a spreadsheet, its cells with ``sheet_value`` undone and
    outer spaces stripped) for each row of a CSV sheet; a DatasetError when a required column is missing."""
    text = _sheet_text(path, what)
    limit = csv.field_size_limit(len(text) + 1)  # a cell may be as long as the file (the csv module stops at 128 KiB)
    try:
        reader = csv.DictReader(io.StringIO(text))
        try:
            missing = [c for c in required if c not in (reader.fieldnames or [])]
        except csv.Error as exc:
            raise DatasetError([Problem(str(path), 1, f"not a CSV file qaeval can read ({exc})")]) from None
        if missing:
            raise DatasetError(f"not a {what}: no {', '.join(missing)} column(s)", file=str(path))
        names = [n.strip() for n in reader.fieldnames or []]
        twice = sorted({n for n in names if n and names.count(n) > 1})
        if twice:  # a reader keeps the last of two same-named columns: the first one's cells would be lost
            where = "; ".join(
                f"column {n!r} appears {names.count(n)} times (columns "
                + ", ".join(str(i + 1) for i, m in enumerate(names) if m == n)
                + ")"
                for n in twice
            )
            raise DatasetError([Problem(str(path), 1, f"the header names a column twice: {where}")])
        inner = 0  # line breaks inside earlier rows' cells: a spreadsheet shows each row once, blank ones too
        while True:
            try:
                cells = next(reader)
            except StopIteration:
                return
            except csv.Error as exc:
                raise DatasetError(
                    [Problem(str(path), reader.line_num, f"not a CSV row qaeval can read ({exc})")]
                ) from None
            breaks = sum(v.count("\n") for v in cells.values() if isinstance(v, str))
            line = reader.line_num - breaks  # the line the row starts on (a cell may hold line breaks)
            number, inner = line - inner, inner + breaks  # its row in a spreadsheet
            yield line, number, {k: sheet_value((v or "").strip()) for k, v in cells.items() if isinstance(k, str)}
    finally:
        csv.field_size_limit(limit)


def export_sheet(
    run: RunResult, *, sample: int | None = None, seed: int = 0, axes: tuple[str, ...] = AXES
) -> tuple[str, int]:
    """(CSV text, answered cases in it): one row per answered case and axis, score and reason empty. A
    cited passage shows the text the judge weighs the citation against: the case's source, else the
    system's own passage, else the frozen corpus's (``judged_fixture``)."""
    answered = [r for r in run.per_case.to_dict("records") if r["error"] is None and not r["abstained"]]
    if sample is not None and sample < len(answered):
        picked = set(random.Random(seed).sample([r["case_id"] for r in answered], sample))
        answered = [r for r in answered if r["case_id"] in picked]
    outs = RowsByKey(run.outputs)
    by_key = {
        (r["case_id"], pid): text
        for r in answered
        for pid, text in judged_fixture(run.suite[r["case_id"]], outs[r["case_id"]], run.suite.corpus).items()
    }
    buffer = io.StringIO()
    writer = csv.DictWriter(
        buffer, fieldnames=SHEET_COLUMNS, lineterminator="\r\n"
    )  # RFC 4180: a cell with a CR is quoted
    writer.writeheader()
    for r in answered:
        cited = "\n".join(
            f"[{c['source_id']}] claim: {c['claim']}\n    source: "
            f"{by_key.get((r['case_id'], c['source_id']), '(not in the fixture)')}"
            for c in r["citations"]
        )
        for axis in axes:
            if axis == CITATION_CORRECTNESS and not r["citations"]:
                continue
            row = dict(
                case_id=r["case_id"],
                axis=axis,
                output_fingerprint=r["output_fingerprint"],
                question=r["question"],
                answer=r["answer"],
                cited=cited,
                gold_answer=(r["gold_answer"] or "") if axis == "answer_correctness" else "",
                score="",
                reason="",
            )
            writer.writerow({k: sheet_cell(v) for k, v in row.items()})
    return buffer.getvalue(), len(answered)


def import_sheet(path: str | Path, run: RunResult) -> tuple[list[dict[str, Any]], int]:
    """(keyed labels, rows left blank) from a filled sheet, checked against ``run``: every row with a bad
    score, an unknown case or axis, or a fingerprint that no longer matches is a problem with its line."""
    where = str(path)
    fingerprints = dict(zip(run.per_case["case_id"], run.per_case["output_fingerprint"]))
    problems: list[Problem] = []
    labels: list[dict[str, Any]] = []
    blank = 0
    seen: dict[tuple[str, str], int] = {}
    for line, number, row in sheet_rows(
        path, "label sheet", ("case_id", "axis", "output_fingerprint", "score", "reason")
    ):
        cid, axis = row.get("case_id", ""), row.get("axis", "")
        score_text = row.get("score", "")
        if not score_text:
            blank += 1
            continue
        found = []
        if cid not in fingerprints:
            found.append(f"case {cid!r} is not in the run")
        elif row.get("output_fingerprint", "") != fingerprints[cid]:
            found.append(
                f"stale: case {cid!r} has a different output now (fingerprint "
                f"{row.get('output_fingerprint', '')!r}, the run has {fingerprints[cid]!r})"
            )
        if axis not in AXES:
            found.append(f"axis {axis!r} is not one of {', '.join(AXES)}")
        if score_text not in ("0", "1", "2"):
            found.append(f"score {score_text!r} is not 0, 1 or 2")
        if not found and (cid, axis) in seen:
            found.append(f"a second score for {cid} / {axis} (first on line {seen[(cid, axis)]})")
        if found:
            problems.extend(Problem(where, line, f"{p} (sheet row {number})") for p in found)
            continue
        seen[(cid, axis)] = line
        reason = row.get("reason", "")
        labels.append(
            dict(case_id=cid, axis=axis, score=int(score_text), reason=reason, output_fingerprint=fingerprints[cid])
        )
    if problems:
        raise DatasetError(problems)
    if not labels:
        raise DatasetError(f"no row has a score ({blank} left blank)", file=where)
    return labels, blank
