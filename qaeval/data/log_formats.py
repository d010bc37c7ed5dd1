"""Reading a traffic log's raw rows, streamed, whatever its format (``qaeval.data.logs`` checks them).

JSONL a line at a time; CSV with list columns parsed as JSON from their cells and flags from
true/false/1/0; Parquet (pyarrow, the ``parquet`` extra) and DataFrames ``CHUNK`` rows at a time. Missing
cells are absent fields; a cell that does not parse is a problem with its line or row and stands as ``BAD``.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Container, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from qaeval.core.errors import Problem, UsageError, install_extra
from qaeval.core.jsonfile import iter_jsonl, loads_strict

LIST_COLUMNS = ("passages", "citations", "retrieved_contexts")
FLAG_COLUMNS = ("abstained", "model_was_called")  # a table column with a gap holds them as 1.0, 0.0 and NaN
FORMATS = {".jsonl": "jsonl", ".csv": "csv", ".parquet": "parquet", ".pq": "parquet", ".json": "otlp"}
LOG_FORMATS = ("jsonl", "csv", "parquet", "otlp")  # what --log-format may name
CHUNK = 5000
BAD = object()  # a cell already reported as a problem


def log_format(source: Any, forced: str | None = None) -> str:
    """``frame`` for a DataFrame, else ``forced`` (``--log-format``) or the format a path's suffix names;
    a JSONL file whose first line is an OTLP/JSON request (``resourceSpans``) is ``otlp``. A UsageError
    otherwise."""
    if not isinstance(source, (str, Path)):
        import pandas as pd

        if isinstance(source, pd.DataFrame):
            return "frame"
        raise UsageError(f"logs must be a path or a pandas DataFrame, got {type(source).__name__}")
    if forced is not None:
        if forced not in LOG_FORMATS:
            raise UsageError(f"log format {forced!r}: give one of {', '.join(LOG_FORMATS)}")
        return forced
    kind = FORMATS.get(Path(source).suffix.lower())
    if kind is None:
        raise UsageError(
            f"logs {source}: the name must end in {', '.join(FORMATS)} (JSONL, CSV, Parquet or OTLP/JSON), "
            "or give --log-format"
        )
    if kind == "jsonl" and _starts_otlp(Path(source)):
        return "otlp"
    return kind


def _starts_otlp(path: Path) -> bool:
    """Whether a regular file's first bytes open an OTLP/JSON request (the collector's file exporter)."""
    from qaeval.data.otlp import is_otlp

    if not path.is_file():  # a FIFO is never opened here; the reader names what it is
        return False
    with open(path, "rb") as handle:
        head = handle.read(4096)
    return is_otlp(head.decode("utf-8", "replace"))


# --------------------------------------------------------------------------- raw rows, by format


def _csv_rows(path: Path, problems: list[Problem]) -> Iterator[tuple[int, dict[str, Any]]]:
    if not path.is_file():  # a FIFO or a folder is named, never opened
        problems.append(Problem(str(path), None, "not found, or not a regular file"))
        return
    with open(path, newline="", encoding="utf-8-sig") as handle:
        reader = csv.reader(handle)
        try:
            header = next(reader, None)
            if header is None:
                return
            twice = sorted({c for c in header if header.count(c) > 1})
            if twice:  # a dict of the row would keep the last cell of each, silently
                problems.append(
                    Problem(str(path), 1, f"the header names column(s) {', '.join(map(repr, twice))} more than once")
                )
                return
            for cells in reader:
                if not cells:
                    continue  # a blank line, as csv.DictReader skips it
                if len(cells) != len(header):  # a torn write, or a cell too many
                    more = "more" if len(cells) > len(header) else "fewer"
                    problems.append(
                        Problem(
                            str(path),
                            reader.line_num,
                            f"{len(cells)} cells, {more} than the header's {len(header)} columns",
                        )
                    )
                    continue
                raw: dict[str, Any] = {}
                for key, value in zip(header, cells):
                    if value != "":
                        raw[key] = _csv_value(key, value, str(path), reader.line_num, problems)
                yield reader.line_num, raw
        except (UnicodeDecodeError, csv.Error) as exc:
            problems.append(Problem(str(path), reader.line_num, f"not readable as CSV ({exc})"))


def _csv_value(key: str, value: str, where: str, line: int, problems: list[Problem]) -> Any:
    if key in LIST_COLUMNS:
        return _parsed_list(key, value, where, line, problems)
    if key in FLAG_COLUMNS:
        word = value.strip().lower()
        if word in ("true", "1"):
            return True
        if word in ("false", "0"):
            return False
        problems.append(Problem(where, line, f"column {key!r} is {value!r}, not true or false"))
        return BAD
    return value


def _parsed_list(key: str, value: str, where: str, line: int, problems: list[Problem]) -> Any:
    try:
        return loads_strict(value)
    except ValueError as exc:
        problems.append(Problem(where, line, f"column {key!r} does not parse as a JSON list ({exc})"))
        return BAD


def _table_rows(
    batches: Iterator[list[dict[str, Any]]], where: str, problems: list[Problem]
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Rows of a DataFrame or Parquet file: missing values dropped, list columns that hold JSON text parsed,
    times (``Timestamp``, ``datetime``) as ISO 8601 text, and flags that a column with gaps made 1.0 or 0.0
    as true or false."""
    number = 0
    for batch in batches:
        for values in batch:
            number += 1
            raw = {}
            for key, value in values.items():
                if (
                    value is None
                    or (isinstance(value, float) and math.isnan(value))
                    or type(value).__name__ == "NaTType"
                ):
                    continue
                if isinstance(value, datetime):  # pandas' Timestamp is one
                    value = value.isoformat()
                elif key in FLAG_COLUMNS and isinstance(value, float) and value in (0.0, 1.0):
                    value = bool(value)
                elif key in LIST_COLUMNS and isinstance(value, str):
                    value = _parsed_list(key, value, where, number, problems)
                elif hasattr(value, "tolist"):  # numpy arrays and scalars (pyarrow lists arrive as lists)
                    value = value.tolist()
                raw[str(key)] = value
            yield number, raw


def _frame_batches(df: Any) -> Iterator[list[dict[str, Any]]]:
    for start in range(0, len(df), CHUNK):
        yield df.iloc[start : start + CHUNK].to_dict("records")


def _parquet_batches(path: Path) -> Iterator[list[dict[str, Any]]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise UsageError(f"reading Parquet logs needs pyarrow: {install_extra('parquet')}") from None
    for batch in pq.ParquetFile(path).iter_batches(batch_size=CHUNK):
        yield batch.to_pylist()


def _jsonl_lines(path: Path, only: Container[int], problems: list[Problem]) -> Iterator[tuple[int, Any]]:
    """(line, parsed value) of only the lines asked for: the others are not parsed at all. A path that is
    not a regular file (a FIFO would block the read for ever, a folder has no lines) is a problem."""
    import os
    import stat

    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # opening a FIFO must not wait for a writer
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        problems.append(Problem(str(path), None, "not a regular file"))
        return
    os.set_blocking(fd, True)
    with os.fdopen(fd, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if number in only:
                try:
                    yield number, loads_strict(raw.decode("utf-8-sig" if number == 1 else "utf-8"))
                except ValueError as exc:
                    problems.append(Problem(str(path), number, str(exc)))


def raw_rows(
    source: Any,
    problems: list[Problem],
    only: Container[int] | None = None,
    fmt: str | None = None,
    locate: dict[int, Any] | None = None,
) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line or row number, raw row) for every row of the log (or ``only`` those lines), streamed; file
    problems go to ``problems``. For OTLP traces the number is the row's 1-based place among the file's
    rows (``qaeval.data.otlp_rows.trace_rows``), as for Parquet."""
    kind = log_format(source, fmt)
    if kind == "otlp":
        from qaeval.data.otlp_rows import trace_rows

        yield from trace_rows(Path(source), problems, only, locate)
    elif only is not None and kind == "jsonl":
        yield from ((n, v) for n, v in _jsonl_lines(Path(source), only, problems) if isinstance(v, dict))
    elif only is not None:
        yield from ((n, v) for n, v in raw_rows(source, problems, fmt=fmt) if n in only)
    elif kind == "frame":
        yield from _table_rows(_frame_batches(source), "<DataFrame>", problems)
    elif kind == "jsonl":
        for line, value in iter_jsonl(Path(source), problems):
            if isinstance(value, dict):
                yield line, value
            else:
                problems.append(
                    Problem(str(Path(source)), line, f"a row must be a JSON object, got {type(value).__name__}")
                )
    elif kind == "csv":
        yield from _csv_rows(Path(source), problems)
    elif not Path(source).is_file():
        problems.append(Problem(str(Path(source)), None, "not found, or not a regular file"))
    else:
        yield from _table_rows(_parquet_batches(Path(source)), str(Path(source)), problems)
