"""Human labels in the two forms calibration and PPI read (docs/guides/judge.md), each checked as strictly
as a golden case, every problem with its file and line.

Keyed labels (JSONL), for outputs of a run: ``{"case_id", "axis", "score": 0|1|2, "reason"?,
"output_fingerprint"?}``, one per case and axis; a label whose output fingerprint has changed is stale.
The labels ``label import`` writes begin with ``LABELS_HEADER``, by which qaeval knows a file it may replace.

Labelled sets (JSONL) carry their own case and output: ``{"id", "question" (may be empty), "sources",
"gold_answer"?, "output": {"answer", "citations", "retrieved_ids"? (default: the cited sources),
"abstained"}, "labels": {axis: {"score", "reason"?}}}``. Checking their outputs against the output
contract is ``qaeval.system.labelled``'s part.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qaeval.core.errors import DatasetError, Problem
from qaeval.core.frames import frame
from qaeval.core.jsonfile import iter_jsonl
from qaeval.data.cases import GoldenCase, Source, Suite, case_fingerprint
from qaeval.data.schema import AXES, LABEL_FIELDS, LABEL_SCHEMA, score_ok

if TYPE_CHECKING:
    import pandas as pd


SET_FIELDS = {"id", "question", "sources", "gold_answer", "output", "labels"}
OUTPUT_FIELDS = {"answer", "citations", "retrieved_ids", "abstained"}
LABELS_HEADER = {"format": "qaeval-labels", "version": 1}  # the first line of the labels qaeval writes


def load_labels(path: str | Path, known_cases: set[str] | None = None) -> pd.DataFrame:
    """Load keyed labels strictly (every problem reported with file and line).

    Returns columns: case_id, axis, human, reason, output_fingerprint (None when absent), line.
    """
    path = Path(path)
    if not path.exists():
        raise DatasetError("labels file not found", file=str(path))
    problems: list[Problem] = []
    rows = []
    seen: dict[tuple[str, str], int] = {}
    for index, (number, raw) in enumerate(iter_jsonl(path, problems)):
        where = partial(Problem, str(path), number)
        if index == 0 and raw == LABELS_HEADER:
            continue
        if not isinstance(raw, dict):
            problems.append(where("each line must be one JSON object"))
            continue
        if "output" in raw or "labels" in raw:
            problems.append(where("a labelled-set line (with output and labels); use calibrate --labelled"))
            continue
        found = [f"unknown field {k!r}" for k in raw if k not in LABEL_FIELDS]
        found += [f"missing required field {k!r}" for k in ("case_id", "axis", "score") if k not in raw]
        cid, axis, score = raw.get("case_id"), raw.get("axis"), raw.get("score")
        if "case_id" in raw and not (isinstance(cid, str) and cid):
            found.append("'case_id' must be a non-empty string")
        elif isinstance(cid, str) and known_cases is not None and cid not in known_cases:
            found.append(f"case {cid!r} is not in the data")
        if "axis" in raw and axis not in AXES:
            found.append(f"'axis' is {axis!r}; expected one of {', '.join(AXES)}")
        if "score" in raw and not score_ok(score):
            found.append(f"'score' is {score!r}; expected 0, 1 or 2")
        for key in ("reason", "output_fingerprint"):
            if key in raw and raw[key] is not None and not isinstance(raw[key], str):
                found.append(f"{key!r} must be a string")
        if not found:
            pair = (str(cid), str(axis))
            if pair in seen:
                found.append(f"a second label for {cid} / {axis} (first on line {seen[pair]})")
            seen[pair] = number
        if found:
            problems.extend(where(p) for p in found)
            continue
        rows.append(
            dict(
                case_id=cid,
                axis=axis,
                human=int(score or 0),
                reason=raw.get("reason") or "",
                output_fingerprint=raw.get("output_fingerprint"),
                line=number,
            )
        )
    if not rows and not problems:
        problems.append(Problem(str(path), None, "no labels in the file"))
    if problems:
        raise DatasetError(problems)
    return frame(rows, LABEL_SCHEMA)


# --------------------------------------------------------------------------- labelled sets


def _case_problems(raw: dict[str, Any]) -> tuple[list[str], set[str]]:
    """What is wrong with a labelled case's id, question, gold answer and sources; and its source ids."""
    problems = []
    if "id" in raw and not (isinstance(raw["id"], str) and raw["id"].strip()):
        problems.append("'id' must be a non-empty string")
    if not isinstance(raw.get("question", ""), str):
        problems.append("'question' must be a string (it may be empty)")
    if raw.get("gold_answer") is not None and not (isinstance(raw["gold_answer"], str) and raw["gold_answer"].strip()):
        problems.append("'gold_answer' must be a non-empty string or null")
    ids: set[str] = set()
    sources = raw.get("sources")
    if "sources" in raw:
        if not isinstance(sources, list) or not sources:
            problems.append("'sources' must be a non-empty list of {id, text, title?}")
        else:
            for i, s in enumerate(sources):
                if not isinstance(s, dict) or set(s) - {"id", "text", "title"}:
                    problems.append(f"sources[{i}] must be an object with id, text and optional title")
                elif not (isinstance(s.get("id"), str) and s["id"]) or not (
                    isinstance(s.get("text"), str) and s["text"].strip()
                ):
                    problems.append(f"sources[{i}] needs a non-empty string id and text")
                elif s["id"] in ids:
                    problems.append(f"sources[{i}].id {s['id']!r} is not unique")
                elif s.get("title") is not None and not isinstance(s["title"], str):
                    problems.append(f"sources[{i}].title must be a string")
                else:
                    ids.add(s["id"])
    return problems, ids


def _labelled_problems(raw: dict[str, Any]) -> list[str]:
    problems = [f"unknown field {k!r}" for k in raw if k not in SET_FIELDS]
    problems += [f"missing required field {k!r}" for k in ("id", "sources", "output", "labels") if k not in raw]
    found, ids = _case_problems(raw)
    problems += found
    out = raw.get("output")
    if "output" in raw:
        if not isinstance(out, dict):
            problems.append("'output' must be an object")
        else:
            problems += [f"output has unknown field {k!r}" for k in out if k not in OUTPUT_FIELDS]
            if "answer" not in out:
                problems.append("output needs 'answer'")
            cites = out.get("citations", [])
            if isinstance(cites, list):
                for i, c in enumerate(cites):
                    if (
                        isinstance(c, dict)
                        and isinstance(c.get("source_id"), str)
                        and ids
                        and c["source_id"] not in ids
                    ):
                        problems.append(f"output.citations[{i}] cites {c['source_id']!r}, which is not in sources")
    labels = raw.get("labels")
    if "labels" in raw:
        if not isinstance(labels, dict) or not labels:
            problems.append("'labels' must be an object with at least one axis")
        else:
            for axis, item in labels.items():
                if axis not in AXES:
                    problems.append(f"labels has unknown axis {axis!r}; expected {', '.join(AXES)}")
                elif not isinstance(item, dict) or set(item) - {"score", "reason"} or not score_ok(item.get("score")):
                    problems.append(f'labels.{axis} must be {{"score": 0|1|2, "reason"?: str}}')
                elif item.get("reason") is not None and not isinstance(item["reason"], str):
                    problems.append(f"labels.{axis}.reason must be a string")
    return problems


def _plain_output(out: dict[str, Any]) -> dict[str, Any]:
    citations = out.get("citations", [])
    cited = [c.get("source_id") for c in citations if isinstance(c, dict)] if isinstance(citations, list) else []
    retrieved = out.get("retrieved_ids", list(dict.fromkeys(cited)))
    wrap = lambda v: {"__type__": "list", "items": v} if isinstance(v, list) else v  # noqa: E731  (a one-line wrapper, local to this conversion)
    return dict(
        answer=out.get("answer"),
        citations=wrap(citations),
        retrieved_ids=wrap(retrieved),
        abstained=out.get("abstained", False),
        model_was_called=False,
        prompt_to_model=None,
        computed_aggregate=None,
    )


LABELLED_CASE: dict[str, Any] = dict(
    expected_behavior="answer", difficulty="single-hop", split="frozen"
)  # what the set's cases are
STORED_FIELDS = {"id", "question", "sources", "gold_answer", "gold_source_ids", *LABELLED_CASE}  # as to_raw writes them


def _labelled_case(
    raw: dict[str, Any], gold_ids: tuple[str, ...], file: str, line: int, fingerprint: str
) -> GoldenCase:
    return GoldenCase(
        id=raw["id"],
        question=raw.get("question") or "",
        sources=tuple(Source(s["id"], s["text"], s.get("title")) for s in raw["sources"]),
        gold_answer=raw.get("gold_answer"),
        gold_source_ids=gold_ids,
        **LABELLED_CASE,
        file=file,
        line=line,
        fingerprint=fingerprint,
    )


def labelled_suite_from_raw(raws: list[Any], root: str, *, file: str, fingerprints: dict[str, str]) -> Suite:
    """The cases of a labelled set as a run record stores them (``GoldenCase.to_raw``), checked by the
    labelled set's rules (the question may be empty, the gold answer absent; the gold sources are the
    cited ones) rather than a golden case's. Raises DatasetError listing every problem."""
    problems: list[Problem] = []
    cases: list[GoldenCase] = []
    for number, raw in enumerate(raws, start=1):
        if not isinstance(raw, dict):
            problems.append(Problem(file, number, "a stored case must be a JSON object"))
            continue
        found, ids = _case_problems(raw)
        found += [f"unknown field {k!r}" for k in raw if k not in STORED_FIELDS]
        found += [f"missing required field {k!r}" for k in ("id", "sources") if k not in raw]
        found += [
            f"{k!r} is {raw.get(k)!r}, not {v!r} as in a labelled set"
            for k, v in LABELLED_CASE.items()
            if raw.get(k) != v
        ]
        gold_ids = raw.get("gold_source_ids")
        if not (
            isinstance(gold_ids, list)
            and all(isinstance(g, str) and g in ids for g in gold_ids)
            and len(set(gold_ids)) == len(gold_ids)
        ):
            found.append("'gold_source_ids' must list source ids of the case (the cited ones), each once")
        if found:
            problems += [Problem(file, number, f"case {raw.get('id')!r}: {p}") for p in found]
            continue
        cases.append(
            _labelled_case(
                raw, tuple(gold_ids or ()), file, number, fingerprints.get(raw["id"]) or case_fingerprint(raw)
            )
        )
    if problems:
        raise DatasetError(problems)
    return Suite(tuple(cases), root)


@dataclass(frozen=True)
class LabelledLine:
    """One line of a labelled set, checked as data: its case, its output as plain data (checked against
    the output contract by ``qaeval.system.labelled``), and the people's scores by axis."""

    case: GoldenCase
    output: dict[str, Any]
    labels: dict[str, dict[str, Any]]


def read_labelled_set(path: str | Path) -> list[LabelledLine]:
    """The lines of a labelled set, strictly: every problem with its file and line (DatasetError)."""
    path = Path(path)
    if not path.exists():
        raise DatasetError("labelled set not found", file=str(path))
    problems: list[Problem] = []
    lines: list[LabelledLine] = []
    seen: dict[str, int] = {}
    for number, raw in iter_jsonl(path, problems):
        where = partial(Problem, str(path), number)
        if not isinstance(raw, dict):
            problems.append(where("each line must be one JSON object"))
            continue
        found = _labelled_problems(raw)
        cid = raw.get("id")
        if isinstance(cid, str) and cid in seen:
            found.append(f"duplicate id {cid!r} (first on line {seen[cid]})")
        elif isinstance(cid, str):
            seen[cid] = number
        if found:
            problems.extend(where((f"case {cid!r}: " if isinstance(cid, str) else "") + p) for p in found)
            continue
        cited = tuple(dict.fromkeys(c["source_id"] for c in raw["output"].get("citations", [])))
        case = _labelled_case(
            raw, cited, str(path), number, case_fingerprint({k: v for k, v in raw.items() if k != "labels"})
        )
        lines.append(LabelledLine(case, _plain_output(raw["output"]), raw["labels"]))
    if not lines and not problems:
        problems.append(Problem(str(path), None, "no labelled cases in the file"))
    if problems:
        raise DatasetError(problems)
    return lines
