"""Reading a monitor record for candidates, without holding it: its envelope and monitor section in one
pass over the lines (``skeleton``, ``section``), then its rows streamed in a second (``scan_record``),
each candidate row checked field by field and pooled by kind and stratum (``qaeval.proposals.pool``).
A record is the user's file: a row that breaks a rule is a RecordError naming its line (a time span or
a timestamp that is no time, a row twice), never a crash.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from qaeval.core.errors import Problem, RecordError
from qaeval.core.jsonfile import loads_strict
from qaeval.proposals.ledger import Ledger, traffic_key
from qaeval.proposals.pool import Pool
from qaeval.scoring.monitor_metrics import window_keys

CHUNK = 20_000
MAX_PROBLEMS = 100  # a record this broken is reported by its first problems
ROWS_OPEN = '  "rows": ['
CASES_OPEN = ' "cases": ['
RECORD_FORMAT = "qaeval-record"
RECORD_VERSION = 3


def _regular(path: Path) -> None:
    """A record must be a regular file: a FIFO would block the read for ever, /dev/zero never end."""
    import stat

    try:
        info = path.stat()
    except FileNotFoundError:
        raise RecordError("monitor record not found", file=str(path)) from None
    except OSError as exc:
        raise RecordError(f"the monitor record cannot be read ({exc.strerror or exc})", file=str(path)) from None
    if not stat.S_ISREG(info.st_mode):
        raise RecordError("the monitor record is not a regular file", file=str(path))


def skeleton(path: Path) -> tuple[dict[str, Any], bool]:
    """(the record without its rows and judged cases, whether its rows are one a line); pass one."""
    _regular(path)
    parts: list[bytes] = []
    one_a_line = False
    skipping = opened = False
    try:
        with open(path, "rb") as f:
            for raw in f:
                line = raw.rstrip(b"\r\n")
                if opened:  # the line after an opener says whether its items are one a line
                    opened = False
                    item = line.strip().rstrip(b",")
                    skipping = item.startswith(b"{") and item.endswith(b"}") or item in (b"]", b"")
                    if skipping and parts[-1].rstrip(b"\r\n") == ROWS_OPEN.encode():
                        one_a_line = True
                if skipping:
                    if line.strip() in (b"]", b"],"):
                        parts.append(b"]" + (b"," if line.rstrip().endswith(b",") else b"") + b"\n")
                        skipping = False
                    continue
                parts.append(raw)
                opened = line in (ROWS_OPEN.encode(), CASES_OPEN.encode())
    except FileNotFoundError:
        raise RecordError("monitor record not found", file=str(path)) from None
    except IsADirectoryError:
        raise RecordError("the monitor record is a folder, not a file", file=str(path)) from None
    try:
        data = loads_strict(b"".join(parts).decode("utf-8-sig"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise RecordError(f"not a qaeval run record ({str(exc)[:200]})", file=str(path)) from None
    return data, one_a_line


def monitor_section(data: Any, where: str) -> dict[str, Any]:
    if not isinstance(data, dict) or data.get("format") != RECORD_FORMAT:
        raise RecordError("not a qaeval run record", file=where)
    if data.get("version") != RECORD_VERSION:
        raise RecordError(
            f"record version {data.get('version')!r} is not one this qaeval reads ({RECORD_VERSION}): "
            "run `qaeval monitor ... --save` again",
            file=where,
        )
    if data.get("kind") != "monitor":
        raise RecordError(
            f"a {data.get('kind')!r} record, not a monitor record: propose reads what `qaeval monitor --save` writes",
            file=where,
        )
    s = data.get("monitor")
    if not isinstance(s, dict):
        raise RecordError("monitor record is malformed: no monitor section", file=where)
    problems = []
    if not isinstance(s.get("source"), str) or not s["source"]:
        problems.append("monitor.source (the log) missing")
    if not isinstance(s.get("by"), list) or not all(isinstance(b, str) for b in s["by"]):
        problems.append("monitor.by is not a list of column names")
    if s.get("every") is not None and not isinstance(s["every"], str):
        problems.append("monitor.every is not a time span")
    elif s.get("every") is not None and _span_problem(s["every"]):
        problems.append(f"monitor.every {s['every'][:40]!r} is not a time span (such as 1D or 6h)")
    if not isinstance(s.get("seed"), int):
        problems.append("monitor.seed is not a whole number")
    if problems:
        raise RecordError("monitor record is malformed: " + "; ".join(problems), file=where)
    return s


def _row_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of each row line; pass two."""
    inside = False
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            if not inside:
                inside = raw.rstrip(b"\r\n") == ROWS_OPEN.encode()
                continue
            text = raw.decode("utf-8", "surrogatepass").rstrip("\r\n")
            if text.strip() in ("]", "],"):
                return
            yield number, text.rstrip(",")


def _kind_of(row: Mapping[str, Any]) -> str | None:
    if row.get("passed") is False:
        return "check_failed"
    if row.get("faithfulness") == 0:
        return "unfaithful"
    if row.get("abstained") is True:
        return "abstained"
    return None


ROW_TYPES: dict[str, tuple[type, ...]] = {
    "row_id": (str,),
    "line": (int,),
    "passed": (bool,),
    "abstained": (bool,),
    "faithfulness": (int, type(None)),
    "fail_reasons": (str, type(None)),
    "timestamp": (str, type(None)),
    "digest": (str, type(None)),  # absent from a record written before rows kept it
}


def _row_problems(row: Any, by: list[str]) -> list[str]:
    if not isinstance(row, dict):
        return ["a row must be a JSON object"]
    out = [
        f"{k!r} missing or not {' or '.join(t.__name__ for t in types)}"
        for k, types in ROW_TYPES.items()
        if not isinstance(row.get(k), types) or (isinstance(row.get(k), bool) and bool not in types)
    ]
    if isinstance(row.get("line"), int) and row["line"] < 1:
        out.append("'line' must be at least 1")
    out += [f"slice {b!r} missing or not text" for b in by if not isinstance(row.get(b), str)]
    return out


def _rank(seed: int, row_id: str) -> int:
    digest = hashlib.blake2b(f"{seed}\x00{row_id}".encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def _span_problem(every: str) -> bool:
    """Whether ``every`` is not a span ``window_keys`` can cut time into."""
    try:
        window_keys(pd.Series(["2026-01-01T00:00:00+00:00"], dtype=object), every)
    except (ValueError, TypeError):
        return True
    return False


def _windows(rows: list[dict[str, Any]], every: str, where: str) -> list[Any]:
    """Each pooled row's window; a RecordError naming every row whose timestamp is not a time."""
    try:
        return window_keys(pd.Series([r["timestamp"] for r in rows], dtype=object), every).tolist()
    except (ValueError, TypeError, OverflowError):
        bad = [r for r in rows if not _is_time(r["timestamp"])]
        raise RecordError(
            [
                Problem(where, r["at"], f"timestamp {str(r['timestamp'])[:60]!r} is not an ISO 8601 time")
                for r in bad[:MAX_PROBLEMS]
            ]
            or [Problem(where, None, "the rows' timestamps cannot be cut into windows")]
        ) from None


def _is_time(value: Any) -> bool:
    if value is None:
        return True
    try:
        pd.to_datetime(pd.Series([value], dtype=object), utc=True, format="ISO8601")
    except (ValueError, TypeError, OverflowError):
        return False
    return True


def scan_record(
    path: Path,
    section: Mapping[str, Any],
    *,
    seed: int,
    limit: int,
    ledger: Ledger | None,
    rows: list[Any] | None = None,
) -> Pool:
    """Pass two: the candidate rows, pooled by kind and stratum (see the module's steps 2 and 3)."""
    where = str(path)
    by, every = list(section["by"]), section.get("every")
    pool = Pool()
    batch: list[tuple[str, dict[str, Any]]] = []
    problems: list[Problem] = []
    seen: dict[str, int] = {}  # a candidate row's id: where it was first

    def flush() -> None:
        windows = _windows([r for _, r in batch], every, where) if every else [None] * len(batch)
        for (kind, row), window in zip(batch, windows):
            parts = [f"{b}={row[b]}" for b in by] + ([f"window {window or '(no time)'}"] if every else [])
            pool.add(kind, " | ".join(parts) or "(all)", _rank(seed, row["row_id"]), row, limit)
        batch.clear()

    whole = rows is not None  # read whole: a row is a value of monitor.rows, not a line of the file
    lines: Iterator[tuple[int, Any]] = enumerate(rows or [], 1) if whole else _row_lines(path)
    for number, text in lines:
        pool.rows += 1
        if not whole:
            if '"passed": true' in text and '"abstained": false' in text and '"faithfulness": 0,' not in text:
                continue  # not a candidate: counted, not parsed
            try:
                row = json.loads(text)
            except ValueError as exc:
                row, found = None, [f"a row that is not JSON ({str(exc)[:100]})"]
            else:
                found = _row_problems(row, by)
        else:
            row, found = text, [f"monitor.rows[{number - 1}]: {p}" for p in _row_problems(text, by)]
        if found:
            problems += [Problem(where, None if whole else number, p) for p in found]
            if len(problems) >= MAX_PROBLEMS:
                break
            continue
        kind = _kind_of(row)
        if kind is None:
            continue
        first = seen.setdefault(row["row_id"], number)
        if first != number:  # a forged or hand-edited record: one row twice would be proposed twice
            problems.append(
                Problem(
                    where,
                    None if whole else number,
                    (f"monitor.rows[{number - 1}]: " if whole else "")
                    + f"row id {str(row['row_id'])[:80]!r} appears twice (first at {first})",
                )
            )
            continue
        if ledger is not None and ledger.decided(traffic_key(row["row_id"])):
            pool.decided += 1
            continue
        pooled = {k: row.get(k) for k in ("row_id", "line", "timestamp", "faithfulness", "digest", *by)}
        batch.append((kind, {**pooled, "at": None if whole else number}))  # "at": its line in the record
        if len(batch) >= CHUNK:
            flush()
    if problems:
        raise RecordError(problems)
    if batch:
        flush()
    return pool
