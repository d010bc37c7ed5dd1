"""Production traffic logs: one answered request per row, read strictly and in chunks.

A log is JSONL, CSV, Parquet (the ``parquet`` extra), a pandas DataFrame (``qaeval.data.log_formats``)
or OpenTelemetry traces (``qaeval.data.otlp_rows``, whose rows carry ``LogRow.trace``). A row holds
``id`` (absent: ``row-`` and 12 hex digits of the sha256 of the row, ``-2``, ``-3``, ... for identical
rows), ``question``, ``passages`` (``{id, text, title?}`` in rank order, maybe none), ``answer`` (text or
null), ``citations`` (``{source_id, claim}``), and optionally ``abstained`` (absent: no answer),
``model_was_called``, ``prompt`` and ``timestamp`` (ISO 8601, naive is UTC); any other column is a slice
column. RAGAS's names (``user_input``, ``retrieved_contexts``, ``response``, ``reference``) are read too
(docs/guides/drift-monitor.md). ``scan_logs`` yields chunks of ``LogRow`` and puts every problem, with
its file and line (row number for Parquet and DataFrames), in a list the caller raises as one
``DatasetError`` before anything it computed is shown.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

from qaeval.core.errors import DatasetError, Problem
from qaeval.core.jsonfile import dumps_canonical
from qaeval.data.log_formats import BAD, CHUNK, raw_rows
from qaeval.data.otlp_rows import TraceRaw
from qaeval.data.schema import Source

FIELDS = ("id", "question", "passages", "answer", "citations", "abstained", "model_was_called", "prompt", "timestamp")
RAGAS = {"user_input": "question", "retrieved_contexts": "passages", "response": "answer", "reference": "reference"}
NONE_GROUP = "(none)"


@dataclass(frozen=True, slots=True)
class LogRow:
    """One validated log row. ``position`` is its 0-based place in the log; ``line`` where it was."""

    position: int
    line: int
    id: str
    question: str
    passages: tuple[Source, ...]
    answer: str | None
    citations: tuple[dict[str, str], ...]
    abstained: bool
    model_was_called: bool | None
    prompt: str | None
    timestamp: datetime | None
    slices: dict[str, str]
    generated_id: bool = False
    trace: TraceFacts | None = None  # a row read from OpenTelemetry traces (qaeval.data.otlp)


@dataclass(frozen=True, slots=True)
class TraceFacts:
    """What only a row read from a trace has: the content the instrumentation hid (question, prompt,
    passages, answer), the hops that fed the answer (``qaeval.data.otlp_rows``) and the trace's ids,
    model, tokens and latency."""

    hidden: tuple[str, ...]
    hops: tuple[dict[str, Any], ...]
    facts: dict[str, Any]


@dataclass
class LogScan:
    """What a scan found besides its rows: problems, mappings used, slice columns, generated ids."""

    where: str
    problems: list[Problem] = field(default_factory=list)
    mappings: dict[str, int] = field(default_factory=dict)
    slice_columns: dict[str, None] = field(default_factory=dict)  # in order of first appearance
    generated_ids: int = 0
    rows: int = 0
    has_prompt: bool = False
    has_timestamp: bool = False
    has_citations: bool = False
    has_model_flag: bool = False
    hidden: dict[str, int] = field(default_factory=dict)  # rows whose trace hid each kind of content
    # a row read from traces: row number -> (trace id, first line, root line, place among its trace's rows)
    trace_index: dict[int, tuple[str, int, int, int]] = field(default_factory=dict)

    def notes(self) -> list[str]:
        out = [
            f"{self.rows} row(s) read from {self.where}; column names: "
            + ", ".join(f"{name} ({n} rows)" for name, n in self.mappings.items())
        ]
        if self.generated_ids:
            out.append(f"{self.generated_ids} row(s) had no id: theirs is generated from a hash of the row (row-...)")
        if not self.has_prompt:
            out.append("no row logged its prompt: whether the prompt carries the passages is not assessed")
        if not self.has_model_flag:
            out.append("no row logged model_was_called: model calls on empty context are not assessed")
        if not self.has_citations:
            out.append("no row logged citations: every answer sentence is uncited")
        out += [
            f"{n} row(s) have their {what} hidden by the instrumentation: the checks that need it are not "
            "assessed on them (NaN, n = 0 where no row shows it), neither passed nor failed"
            for what, n in self.hidden.items()
        ]
        return out


# --------------------------------------------------------------------------- one row


def _mapping(raw: dict[str, Any]) -> tuple[str, dict[str, Any], list[str]]:
    """(mapping name, the row in qaeval's names, problems): RAGAS names are renamed."""
    if isinstance(raw, TraceRaw):
        return f"OpenTelemetry traces ({raw.facts['convention']})", raw, []
    ragas = [k for k in RAGAS if k in raw and k != RAGAS[k]]
    if not ragas:
        return "qaeval", raw, []
    clash = [f"{k} and {RAGAS[k]}" for k in ragas if RAGAS[k] in raw]
    problems = [f"both {c} given: use the qaeval names or RAGAS's, not both" for c in clash]
    renamed = {RAGAS.get(k, k): v for k, v in raw.items()}
    return "RAGAS (user_input, retrieved_contexts, response)", renamed, problems


# A logged row is held to what a system's output may hold (qaeval.system.contract): as many passages or
# citations, texts as long.
MAX_ITEMS, MAX_CHARS = 1000, 1_000_000


def _passages(value: Any, ragas: bool) -> tuple[tuple[Source, ...], list[str]]:
    if not isinstance(value, list):
        return (), [f"passages must be a list, got {type(value).__name__}"]
    if len(value) > MAX_ITEMS:
        return (), [f"passages holds {len(value)} passages (limit {MAX_ITEMS}, as for a system's output)"]
    texts = (t.get("text") if isinstance(t, dict) else t for t in value)
    if any(isinstance(t, str) and len(t) > MAX_CHARS for t in texts):
        return (), [f"a passage is longer than {MAX_CHARS:,} characters (as for a system's output)"]
    if ragas:
        bad = [i for i, t in enumerate(value, 1) if not isinstance(t, str) or not t.strip()]
        if bad:
            return (), [f"retrieved_contexts item {bad[0]} is not a non-empty text"]
        return tuple(Source(f"ctx{i}", t) for i, t in enumerate(value, 1)), []
    out: list[Source] = []
    problems: list[str] = []
    seen: set[str] = set()
    for i, p in enumerate(value, 1):
        if type(p) is dict and p.keys() <= PASSAGE_KEYS:  # the common, well-formed passage, checked quickly
            pid, text, title = p.get("id"), p.get("text"), p.get("title")
            if (
                type(pid) is str
                and type(text) is str
                and pid.strip()
                and text.strip()
                and pid not in seen
                and (title is None or type(title) is str)
            ):
                seen.add(pid)
                out.append(Source(pid, text, title))
                continue
        problems += _passage_problems(i, p, seen, out)
    return tuple(out), problems


PASSAGE_KEYS = {"id", "text", "title"}


def _passage_problems(i: int, p: Any, seen: set[str], out: list[Source]) -> list[str]:
    """Everything wrong with one passage (and, when it has an id, the passage as far as it goes)."""
    problems: list[str] = []
    if not isinstance(p, dict):
        return [f"passage {i} must be an object {{id, text, title?}}, got {type(p).__name__}"]
    unknown = sorted(set(p) - PASSAGE_KEYS)
    pid, text, title = p.get("id"), p.get("text"), p.get("title")
    if unknown:
        problems.append(f"passage {i} has unknown field(s) {', '.join(map(repr, unknown))}")
    if not isinstance(pid, str) or not pid.strip():
        problems.append(f"passage {i} has no id (a non-empty text)")
    elif pid in seen:
        problems.append(f"passage id {pid!r} appears twice in the row")
    if not isinstance(text, str) or not text.strip():
        problems.append(f"passage {i} ({pid!r}) has no text")
    if title is not None and not isinstance(title, str):
        problems.append(f"passage {i} title must be text, got {type(title).__name__}")
    if isinstance(pid, str):
        seen.add(pid)
        out.append(Source(pid, text if isinstance(text, str) else "", title))
    return problems


def _citations(value: Any) -> tuple[tuple[dict[str, str], ...], list[str]]:
    if not isinstance(value, list):
        return (), [f"citations must be a list, got {type(value).__name__}"]
    if len(value) > MAX_ITEMS:
        return (), [f"citations holds {len(value)} citations (limit {MAX_ITEMS}, as for a system's output)"]
    out, problems = [], []
    for i, c in enumerate(value, 1):
        if (
            not isinstance(c, dict)
            or set(c) != {"source_id", "claim"}
            or not all(isinstance(c[k], str) for k in ("source_id", "claim"))
        ):
            problems.append(f"citation {i} must be {{source_id, claim}}, both text, got {dumps_canonical(c)[:80]}")
            continue
        out.append({"source_id": c["source_id"], "claim": c["claim"]})
    return tuple(out), problems


def parse_timestamp(value: Any) -> tuple[datetime | None, str | None]:
    """(an aware UTC datetime, None) or (None, why it is not ISO 8601)."""
    if not isinstance(value, str):
        return None, f"timestamp must be ISO 8601 text, got {type(value).__name__}"
    try:
        when = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return None, f"timestamp {value!r} is not an ISO 8601 date and time"
    try:  # the year is checked in UTC, as the windows and the history hold it
        when = when.replace(tzinfo=timezone.utc) if when.tzinfo is None else when.astimezone(timezone.utc)
    except (OverflowError, ValueError):
        return None, f"timestamp {value!r} is outside the years 1970 to 2999"
    if not 1970 <= when.year <= 2999:
        return None, f"timestamp {value!r} is outside the years 1970 to 2999 (in UTC)"
    return when, None


def _optional(raw: dict[str, Any], key: str, kind: type, what: str, problems: list[str]) -> Any:
    value = raw.get(key)
    if value is None or value is BAD:
        return None
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        problems.append(f"{key} must be {what}, got {type(value).__name__}")
        return None
    return value


def _slice_value(key: str, value: Any, problems: list[str]) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or isinstance(value, int) or (isinstance(value, float) and math.isfinite(value)):
        return str(value)
    problems.append(f"slice column {key!r} holds {type(value).__name__}; a slice column holds one text or number")
    return NONE_GROUP


KNOWN = set(FIELDS) | {"reference"}


def parse_row(raw: dict[str, Any], position: int, line: int) -> tuple[LogRow | None, str, list[str]]:
    """(the row, or None when it has problems; the mapping used; the problems, without where)."""
    mapping, row, problems = _mapping(raw)
    question = row.get("question")
    if not isinstance(question, str) or not question.strip():
        problems.append("question missing or empty")
    passages, found = (
        _passages(row.get("passages"), "retrieved_contexts" in raw) if row.get("passages") is not BAD else ((), [])
    )
    problems += found if "passages" in row else ["passages missing (a list, empty when nothing was retrieved)"]
    citations, found = _citations(row.get("citations", [])) if row.get("citations") is not BAD else ((), [])
    problems += found
    answer = _optional(row, "answer", str, "text or null", problems)
    abstained = _optional(row, "abstained", bool, "true or false", problems)
    if abstained is None:
        abstained = answer is None or not answer.strip()
    elif abstained and answer and answer.strip():
        problems.append("abstained is true but the row has an answer")
    called = _optional(row, "model_was_called", bool, "true or false", problems)
    prompt = _optional(row, "prompt", str, "text or null", problems)
    for name, text in (("answer", answer), ("prompt", prompt)):
        if text is not None and len(text) > MAX_CHARS:
            problems.append(f"{name} is {len(text):,} characters long (limit {MAX_CHARS:,}, as for a system's output)")
    _optional(row, "reference", str, "text or null", problems)
    when = None
    if row.get("timestamp") is not None:
        when, why = parse_timestamp(row["timestamp"])
        problems += [why] if why else []
    rid = row.get("id")
    if rid is not None and (not isinstance(rid, str) or not rid.strip()):
        problems.append(f"id must be non-empty text, got {rid!r}")
    slices = {k: _slice_value(k, v, problems) for k, v in row.items() if k not in KNOWN}
    if problems:
        return None, mapping, problems
    return (
        LogRow(
            position,
            line,
            rid or "",
            str(question),
            passages,
            answer,
            citations,
            abstained,
            called,
            prompt,
            when,
            slices,
            generated_id=rid is None,
            trace=TraceFacts(raw.hidden, raw.hops, raw.facts) if isinstance(raw, TraceRaw) else None,
        ),
        mapping,
        [],
    )


def content_digest(row: LogRow) -> str:
    """A short hash of what a row says (its question, passages, answer, citations, abstention): a monitor
    record keeps it, so reading the row back later can tell whether the log still says the same."""
    parts = [row.question, row.answer or "", "1" if row.abstained else "0"]
    parts += [f"{p.id}\x01{p.title or ''}\x01{p.text}" for p in row.passages]
    parts += [f"{c.get('source_id', '')}\x01{c.get('claim', '')}" for c in row.citations]
    text = "\x00".join(parts)
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


def row_hash(raw: dict[str, Any]) -> str:
    text = dumps_canonical(raw, default=str)
    return "row-" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]


# --------------------------------------------------------------------------- the scan


def _note_row(scan: LogScan, row: LogRow, raw: dict[str, Any]) -> None:
    scan.has_prompt |= row.prompt is not None
    scan.has_timestamp |= row.timestamp is not None
    scan.has_citations |= "citations" in raw
    scan.has_model_flag |= row.model_was_called is not None
    for what in row.trace.hidden if row.trace else ():
        scan.hidden[what] = scan.hidden.get(what, 0) + 1
    for key in row.slices:
        scan.slice_columns.setdefault(key, None)


def scan_logs(source: Any, scan: LogScan, *, chunk: int = CHUNK, fmt: str | None = None) -> Iterator[list[LogRow]]:
    """Chunks of valid rows, in order. Every problem (a row's, a duplicate id's, the file's) goes to
    ``scan.problems`` with its file and line; the caller refuses the log when there are any."""
    seen: dict[str, int] = {}
    batch: list[LogRow] = []
    for position, (line, raw) in enumerate(raw_rows(source, scan.problems, fmt=fmt)):
        scan.rows += 1
        row, mapping, problems = parse_row(raw, position, line)
        scan.mappings[mapping] = scan.mappings.get(mapping, 0) + 1
        if row is None:
            where = raw.line if isinstance(raw, TraceRaw) else line
            scan.problems.extend(Problem(scan.where, where, p) for p in problems)
            continue
        if row.generated_id:
            base = rid = row_hash(raw)
            k = 1
            while rid in seen:
                k += 1
                rid = f"{base}-{k}"
            row = replace(row, id=rid)
            scan.generated_ids += 1
        elif row.id in seen:
            scan.problems.append(Problem(scan.where, line, f"duplicate id {row.id!r} (first on line {seen[row.id]})"))
            continue
        seen[row.id] = line
        _note_row(scan, row, raw)
        if isinstance(raw, TraceRaw):
            scan.trace_index[line] = (raw.facts["trace_id"], raw.first_line, raw.line, raw.index)
        batch.append(row)
        if len(batch) >= chunk:
            yield batch
            batch = []
    if batch:
        yield batch


def rows_at(
    source: Any, ids: dict[int, str], where: str, fmt: str | None = None, locate: dict[int, Any] | None = None
) -> list[LogRow]:
    """The rows at these lines (row numbers for Parquet and DataFrames), with the ids a full scan gave them;
    only those lines are parsed. The log was clean when scanned: a problem now means it changed."""
    problems: list[Problem] = []
    out = []
    for line, raw in raw_rows(source, problems, only=ids, fmt=fmt, locate=locate):
        row, _, found = parse_row(raw, 0, line)
        if row is None:
            problems += [Problem(where, line, p) for p in found]
            continue
        out.append(replace(row, id=ids[line]))
    if problems or len(out) != len(ids):
        raise DatasetError("the log changed while it was being scored: score it again", file=where)
    return out


# --------------------------------------------------------------------------- the judged rows, as a record keeps them


def sample_suite_from_raw(raws: list[Any], root: str, *, file: str, fingerprints: dict[str, str]) -> Any:
    """The judged rows a monitor record keeps (``GoldenCase.to_raw``: no gold answer, no gold passages),
    checked as a log row's question and passages are. Raises DatasetError listing every problem."""
    from qaeval.data.cases import GoldenCase, Suite, case_fingerprint
    from qaeval.data.labels import LABELLED_CASE

    fixed = {**LABELLED_CASE, "gold_answer": None, "gold_source_ids": []}
    problems: list[Problem] = []
    cases = []
    for number, raw in enumerate(raws, start=1):
        found = [] if isinstance(raw, dict) else ["a stored row must be a JSON object"]
        if not found:
            found += [f"unknown field {k!r}" for k in raw if k not in {"id", "question", "sources", *fixed}]
            found += [
                f"{k!r} is {raw.get(k)!r}, not {v!r} as for a log row" for k, v in fixed.items() if raw.get(k) != v
            ]
            if not isinstance(raw.get("id"), str) or not raw["id"].strip():
                found.append("'id' must be non-empty text")
            if not isinstance(raw.get("question"), str) or not raw["question"].strip():
                found.append("'question' must be non-empty text")
            passages, more = _passages(raw.get("sources"), False)
            found += more
        if found:
            problems += [
                Problem(file, number, f"row {raw.get('id') if isinstance(raw, dict) else None!r}: {p}") for p in found
            ]
            continue
        cases.append(
            GoldenCase(
                id=raw["id"],
                question=raw["question"],
                sources=passages,
                gold_answer=None,
                gold_source_ids=(),
                **LABELLED_CASE,
                file=file,
                line=number,
                fingerprint=fingerprints.get(raw["id"]) or case_fingerprint(raw),
            )
        )
    if problems:
        raise DatasetError(problems)
    return Suite(tuple(cases), root)
