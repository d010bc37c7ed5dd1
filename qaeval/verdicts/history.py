"""The drift history: one JSON line a run, appended (``history_line`` checks a line before it is
written) and read back strictly (``read_history``: every metric a rate in [0, 1] or null, counts whole,
times ISO 8601 within plausible years). A history is the user's file: a line that breaks a rule is
named, never trusted.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from qaeval.core.errors import DatasetError, Problem
from qaeval.core.frames import clean
from qaeval.core.jsonfile import dumps_canonical
from qaeval.scoring.metrics import BY_NAME
from qaeval.scoring.monitor_hops import RATE_NAME  # a monitor window's hop rates: rates too

NOT_A_HISTORY = "not a history line (a history holds one JSON object a line): is this the history you meant?"
EARLIEST_YEAR, LATEST_YEAR = 1970, 2999  # a run's time outside these is a typo (and no chart can draw it)


def _is_number(value: Any) -> bool:
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value))


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _metric_problems(metrics: dict[str, Any]) -> list[str]:
    problems = []
    for name, value in metrics.items():
        if not _is_number(value):
            problems.append(f"metric {name!r} is {value!r}, not a number or null")
        elif value is not None and (name in BY_NAME or RATE_NAME.fullmatch(name)) and not 0.0 <= value <= 1.0:
            problems.append(f"metric {name!r} is {value!r}, outside [0, 1] (every metric is a rate)")
    return problems


def time_problem(value: Any) -> str | None:
    from datetime import datetime

    if value is None:
        return None
    if not isinstance(value, str):
        return "'time' must be a string"
    try:
        year = datetime.fromisoformat(value).year
    except ValueError:
        return f"'time' is {value!r}, not an ISO 8601 date and time"
    if not EARLIEST_YEAR <= year <= LATEST_YEAR:
        return f"'time' is {value!r}, outside the years {EARLIEST_YEAR} to {LATEST_YEAR}"
    return None


def history_problems(record: Any) -> list[str]:
    """What is wrong with one parsed history line (nothing: an empty list). Every metric is a rate in
    [0, 1] or null, counts are whole numbers >= 0, the time is ISO 8601 within plausible years."""
    if not isinstance(record, dict):
        return [f"a history line must be a JSON object, got {type(record).__name__}"]
    problems = []
    metrics = record.get("metrics")
    if not isinstance(metrics, dict):
        problems.append("'metrics' missing or not an object")
    else:
        problems += _metric_problems(metrics)
    counts = record.get("n", {})
    if not isinstance(counts, dict):
        problems.append(f"'n' is {counts!r}, not an object of counts")
    else:
        problems += [f"'n' of {k!r} is {v!r}, not a whole number >= 0" for k, v in counts.items() if not _is_count(v)]
    if "cases" in record and not _is_count(record["cases"]):
        problems.append(f"'cases' is {record['cases']!r}, not a whole number >= 0")
    if "trials" in record and not (_is_count(record["trials"]) and record["trials"] >= 1):
        problems.append(f"'trials' is {record['trials']!r}, not a whole number >= 1")
    alarms = record.get("alarms", [])
    if not isinstance(alarms, list) or not all(isinstance(a, str) for a in alarms):
        problems.append(f"'alarms' is {alarms!r}, not a list of metric names")
    when = time_problem(record.get("time"))
    if when is not None:
        problems.append(when)
    for key in ("git_commit", "dataset_fingerprint"):
        if record.get(key) is not None and not isinstance(record.get(key), str):
            problems.append(f"{key!r} must be a string")
    return problems


def read_history(path: str | Path) -> tuple[list[dict[str, Any]], list[str]]:
    """(records, notes). A torn line (JSON cut short: a writer killed mid-line, so it begins as a JSON
    object does) is skipped and named in the notes; anything else that is wrong (a line that is not JSON
    at all, so the file is no history and is never appended to; JSON only a lenient parser accepts; a line
    that is not a history record; a file that is not a regular file) is a DatasetError naming every line."""
    import json

    from qaeval.core.files import NotRegularFile, read_bytes
    from qaeval.core.jsonfile import StrictJSONError, loads_strict

    path = Path(path)
    if not path.exists():
        return [], [f"no history at {path} yet; it starts with this run"]
    try:
        text = read_bytes(path).decode("utf-8", errors="replace")
    except NotRegularFile as exc:
        raise DatasetError(f"history is {exc}, not a file", file=str(path)) from None
    records: list[dict[str, Any]] = []
    bad: list[Problem] = []
    notes: list[str] = []
    # Lines end at "\n" alone: str.splitlines() also splits at U+2028, U+2029, U+0085 and others, which a
    # line qaeval wrote may hold inside a string (its JSON keeps them unescaped), and would tear it in two.
    for number, line in enumerate(text.split("\n"), start=1):
        line = line.removesuffix("\r")
        if not line.strip():
            continue
        try:
            value = loads_strict(line)
        except StrictJSONError as exc:
            bad.append(Problem(str(path), number, str(exc)))
            continue
        except json.JSONDecodeError:
            if not line.lstrip().startswith("{"):  # not even the start of a history line: not a history
                bad.append(Problem(str(path), number, NOT_A_HISTORY))
            else:
                notes.append(f"skipped torn line {number} of {path}")
            continue
        found = history_problems(value)
        if found:
            bad.extend(Problem(str(path), number, p) for p in found)
        else:
            records.append(value)
    if bad:
        raise DatasetError(bad)
    return records, notes


def history_line(record: Mapping[str, Any], where: str | Path) -> str:
    """``record`` as the one line a history gets, checked as ``read_history`` will read it back: a line
    qaeval would refuse later (a rate out of [0, 1], a time out of range, anything the JSON does not keep)
    is a DatasetError now, before anything is appended."""
    from qaeval.core.jsonfile import loads_strict

    line = dumps_canonical(clean(dict(record)))
    found = ["it holds a line break"] if "\n" in line or "\r" in line else []
    found += history_problems(loads_strict(line))
    if found:
        raise DatasetError(
            [
                Problem(str(where), None, f"qaeval would append a history line it could not read back: {p}")
                for p in found
            ]
        )
    return line
