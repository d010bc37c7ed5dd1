"""Answers a user already has, as the outputs frame a run collects: what ``qaeval.score`` scores.

``{case_id: SUTOutput or dict}``, a list of dicts or a DataFrame, each row keyed by ``case_id`` (and
``trial``: 0, 1, ...) with ``SUTOutput``'s field names (a field left out, None or NaN takes its default;
citations and passages as objects or dicts). Each answer goes through the check an adapter's output goes
through (``validate.validate_plain``); every bad row is named by its place, all at once."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from qaeval.core.errors import DatasetError, Problem
from qaeval.core.frames import frame
from qaeval.core.text import bounded_text
from qaeval.data.cases import Suite
from qaeval.data.corpus import Passage
from qaeval.system.contract import OUTPUT_SCHEMA, Citation, SUTOutput, output_row, output_to_plain
from qaeval.system.validate import validate_plain

FIELDS = tuple(f.name for f in dataclasses.fields(SUTOutput))
KEYS = ("case_id", "trial")
MAX_TRIALS = 100  # as --trials allows
OUTPUT = object()  # where a SUTOutput given by case id is kept in its row: no key a user's row can hold
WHERE = "<answers>"


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA


def _citation(value: Any) -> Any:
    if isinstance(value, Mapping) and set(value) <= {"source_id", "claim"}:
        return Citation(value.get("source_id"), value.get("claim", ""))  # type: ignore[arg-type]  # checked below
    return value


def _passage(value: Any) -> Any:
    if isinstance(value, Mapping) and set(value) <= {"id", "text", "title"} and {"id", "text"} <= set(value):
        return Passage(value["id"], value["text"], value.get("title"))
    return value


def _as_list(value: Any) -> Any:
    """A list from a DataFrame cell (a list, a tuple, or a numpy array as pyarrow leaves them)."""
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        return value.tolist()
    return list(value) if isinstance(value, tuple) else value


def _output(row: Mapping[str, Any]) -> SUTOutput:
    """An answer row as the SUTOutput it describes (its values unchecked: ``validate_plain`` checks them)."""
    given = {name: row[name] for name in FIELDS if name in row and not _missing(row[name])}
    for name in ("citations", "retrieved_ids", "passages"):
        if name in given:
            given[name] = _as_list(given[name])
    if isinstance(given.get("citations"), list):
        given["citations"] = [_citation(c) for c in given["citations"]]
    if isinstance(given.get("passages"), list):
        given["passages"] = [_passage(p) for p in given["passages"]]
    for name in ("abstained", "model_was_called"):
        if type(given.get(name)).__name__ == "bool_":  # numpy's, from a DataFrame column
            given[name] = bool(given[name])
    return SUTOutput(**given)


def _rows(answers: Any) -> list[tuple[str, dict[Any, Any]]]:
    """(place, row) for every answer, the row a mapping of field names."""
    if isinstance(answers, pd.DataFrame):
        unknown = [str(c) for c in answers.columns if c not in FIELDS and c not in KEYS]
        if unknown:
            raise DatasetError(
                f"unknown column(s) {', '.join(repr(u) for u in unknown)}: answers have case_id, trial and "
                f"SUTOutput's fields ({', '.join(FIELDS)}); drop the others (answers.drop(columns=[...]))",
                file=WHERE,
            )
        return [(f"row {i}", dict(r)) for i, r in enumerate(answers.to_dict("records"))]
    if isinstance(answers, Mapping):
        return [(f"[{bounded_text(repr(key), 80)}]", _keyed(key, value)) for key, value in answers.items()]
    if isinstance(answers, Sequence) and not isinstance(answers, (str, bytes)):
        return [
            (f"[{i}]", dict(r) if isinstance(r, Mapping) else {"not_an_answer": type(r).__name__})
            for i, r in enumerate(answers)
        ]
    raise DatasetError(
        f"answers are a DataFrame, a list of dicts or a dict of case_id to SUTOutput, not {type(answers).__name__}",
        file=WHERE,
    )


def _keyed(key: Any, value: Any) -> dict[Any, Any]:
    """The row of ``{case_id: answer}``: a SUTOutput, or a dict of its fields, keyed by the mapping's key
    (a ``case_id`` inside the dict must be that key)."""
    if isinstance(value, SUTOutput):
        return {"case_id": key, OUTPUT: value}
    if not isinstance(value, Mapping):
        return {"case_id": key, "not_an_answer": type(value).__name__}
    row = {"case_id": key, **value}
    if "case_id" in value and value["case_id"] != key:
        row["not_an_answer"] = f"dict under {bounded_text(repr(key), 80)} whose case_id differs"
    return row


def _trial(value: Any) -> int | None:
    """A trial number (0, 1, ...; missing is 0), or None when ``value`` is none."""
    if _missing(value):
        return 0
    if isinstance(value, bool) or not (isinstance(value, (int, float)) or type(value).__module__ == "numpy"):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return int(number) if number.is_integer() and 0 <= number <= MAX_TRIALS else None


def _checked(place: str, row: dict[Any, Any], problems: list[Problem]) -> tuple[str, int, dict[str, Any]] | None:
    """(case id, trial, the output's checked fields), or None with the row's problems added."""
    bad = []
    if "not_an_answer" in row:
        bad.append(f"is a {row['not_an_answer']}, not an answer (a dict of SUTOutput's fields, or a SUTOutput)")
    unknown = sorted(bounded_text(str(k), 80) for k in row if k not in FIELDS and k not in KEYS and k is not OUTPUT)
    if unknown:
        bad.append(f"unknown field(s) {', '.join(repr(u) for u in unknown)}: an answer has {', '.join(FIELDS)}")
    cid = row.get("case_id")
    if not isinstance(cid, str) or not cid:
        bad.append(f"case_id is {bounded_text(repr(cid), 80)}, not a case's id")
        cid = None
    trial = _trial(row.get("trial"))
    if trial is None:
        bad.append(f"trial is {bounded_text(repr(row.get('trial')), 80)}, not 0, 1, 2, ... up to {MAX_TRIALS}")
    fields: dict[str, Any] | None = None
    if not bad:
        output = row[OUTPUT] if OUTPUT in row else _output(row)
        fields, found = validate_plain(json.loads(json.dumps(output_to_plain(output))))
        bad += found
    if bad or fields is None:
        problems += [Problem(WHERE, None, f"{place}{f' ({cid})' if isinstance(cid, str) else ''}: {b}") for b in bad]
        return None
    return str(cid), int(trial or 0), fields


def answers_by_trial(suite: Suite, answers: Any) -> list[pd.DataFrame]:
    """The outputs frame of each trial (``OUTPUT_SCHEMA``, one row per case of ``suite``, in its order).
    Every bad row, a case answered twice in a trial, a case of no suite, and a trial that leaves out a
    case is a ``DatasetError`` naming it (all of them at once)."""
    problems: list[Problem] = []
    rows = _rows(answers)
    checked = [c for place, row in rows if (c := _checked(place, row, problems)) is not None]
    named = {row.get("case_id") for _, row in rows if isinstance(row.get("case_id"), str)}
    refused = named - {cid for cid, _, _ in checked}  # named already
    if not checked and not problems:
        problems.append(Problem(WHERE, None, "no answers given"))
    ids = [case.id for case in suite]
    known = set(ids)
    trials: dict[int, dict[str, dict[str, Any]]] = {}
    for cid, trial, fields in checked:
        if cid not in known:
            problems.append(Problem(WHERE, None, f"an answer for {cid!r}, which is no case of {suite.root}"))
        elif cid in trials.setdefault(trial, {}):
            problems.append(Problem(WHERE, None, f"{cid!r} is answered twice in trial {trial}"))
        else:
            trials[trial][cid] = fields
    if sorted(trials) != list(range(len(trials))):
        problems.append(Problem(WHERE, None, f"trials are numbered {sorted(trials)}, not 0 to {len(trials) - 1}"))
    for trial, given in sorted(trials.items()):
        missing = [cid for cid in ids if cid not in given and cid not in refused]
        if missing:
            shown = ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else "")
            problems.append(
                Problem(WHERE, None, f"trial {trial} has no answer for {len(missing)} case(s) of the suite: {shown}")
            )
    if problems:
        raise DatasetError(problems)
    return [frame([output_row(cid, trials[t][cid], None, 0.0) for cid in ids], OUTPUT_SCHEMA) for t in sorted(trials)]
