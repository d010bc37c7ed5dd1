"""OpenTelemetry traces as a monitor log: OTLP/JSON (the protocol's JSON mapping) read strictly, a trace at a time.

The collector's file exporter writes one ``ExportTraceServiceRequest`` a line (JSONL); a ``.json`` file
may hold one. A trace is held until the line holding its root span has been read, then turned into rows
(``qaeval.data.otlp_rows``) and dropped, so memory follows the longest trace, not the file; a span after
its trace's root line, or a root that never comes, is a problem. Every problem names the file and line:
ids not in hex, integers not decimal, attribute values of the wrong type or nested deeper than
``MAX_DEPTH``, a missing parent, a cycle, a trace with no answering span, and the caps (``MAX_SPANS``,
``MAX_HELD``, ``MAX_ATTRIBUTES``, ``MAX_CHARS``) as the row loader has.
"""

from __future__ import annotations

import json
import re
from collections.abc import Container, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qaeval.core.errors import Problem
from qaeval.core.jsonfile import json_error_text, loads_strict

MAX_DEPTH = 32  # nested arrayValue/kvlistValue: deeper, a request passes protobuf's recursion limit (100)
MAX_SPANS = 10_000  # spans in one trace
MAX_HELD = 200_000  # spans held at once, of traces whose root has not come yet
MAX_ATTRIBUTES = 1_000  # attributes (and events) on one span
MAX_CHARS = 1_000_000  # one text value, as a log row's texts
MAX_JSON_BYTES = 1 << 30  # a .json file holding one request is read whole
HEX_TRACE, HEX_SPAN = re.compile(r"[0-9a-fA-F]{32}"), re.compile(r"[0-9a-fA-F]{16}")
DECIMAL = re.compile(r"-?[0-9]{1,20}")
VALUE_KINDS = ("stringValue", "intValue", "doubleValue", "boolValue", "arrayValue", "kvlistValue", "bytesValue")


class BadTrace(ValueError):
    """One problem with what a line says (its message is the problem's)."""


@dataclass(slots=True)
class Span:
    """One span, decoded: attributes flat (``key -> value``), events as (name, attributes, time)."""

    trace_id: str
    span_id: str
    parent: str
    name: str
    start: int
    end: int
    attrs: dict[str, Any]
    events: list[tuple[str, dict[str, Any], int]]
    line: int
    resource: dict[str, Any] = field(default_factory=dict)
    children: list[Span] = field(default_factory=list)
    first_line: int = 0  # a root's: the first line holding a span of its trace
    memo: dict[str, Any] = field(default_factory=dict)  # what the conventions read of it, read once


# --------------------------------------------------------------------------- values


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise BadTrace(f"{what} must be an integer as a decimal string, got {type(value).__name__}")
    if isinstance(value, str) and not DECIMAL.fullmatch(value):
        raise BadTrace(f"{what} {value[:40]!r} is not a decimal integer (OTLP/JSON writes 64-bit integers so)")
    number = int(value)
    if not -(2**63) <= number < 2**64:
        raise BadTrace(f"{what} {value!r} does not fit in 64 bits")
    return number


def _double(value: Any, what: str) -> float:
    if isinstance(value, str) and value in ("NaN", "Infinity", "-Infinity"):
        return float(value.replace("Infinity", "inf"))
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadTrace(f"{what} must be a number, got {type(value).__name__}")
    return float(value)


def any_value(value: Any, what: str, depth: int = 0) -> Any:
    """The Python value of an OTLP ``AnyValue`` (None for an empty one)."""
    if depth > MAX_DEPTH:
        raise BadTrace(f"{what} is nested deeper than {MAX_DEPTH} levels (protobuf parsers refuse such a request)")
    if not isinstance(value, dict):
        raise BadTrace(f"{what} must be an AnyValue object, got {type(value).__name__}")
    kinds = [k for k in value if k in VALUE_KINDS]
    unknown = sorted(set(value) - set(VALUE_KINDS))
    if unknown or len(kinds) > 1:
        raise BadTrace(f"{what} holds {', '.join(sorted(value))}: one of {', '.join(VALUE_KINDS)}")
    if not kinds:
        return None
    kind, v = kinds[0], value[kinds[0]]
    if kind in ("stringValue", "bytesValue"):
        if not isinstance(v, str):
            raise BadTrace(f"{what}: {kind} must be text, got {type(v).__name__}")
        if len(v) > MAX_CHARS:
            raise BadTrace(f"{what} is {len(v):,} characters long (limit {MAX_CHARS:,}, as for a log row)")
        return v
    if kind == "intValue":
        return _int(v, f"{what}'s intValue")
    if kind == "doubleValue":
        return _double(v, f"{what}'s doubleValue")
    if kind == "boolValue":
        if not isinstance(v, bool):
            raise BadTrace(f"{what}: boolValue must be true or false, got {type(v).__name__}")
        return v
    values = v.get("values", []) if isinstance(v, dict) else None
    if not isinstance(values, list):
        raise BadTrace(f"{what}: {kind} must be {{values: [...]}}")
    if len(values) > MAX_ATTRIBUTES:
        raise BadTrace(f"{what} holds {len(values)} values (limit {MAX_ATTRIBUTES})")
    if kind == "arrayValue":
        return [any_value(x, what, depth + 1) for x in values]
    return attributes(values, what, depth + 1)


def attributes(items: Any, what: str, depth: int = 0) -> dict[str, Any]:
    """``[{key, value}]`` as a dict (a key twice is a problem, as protobuf's map would drop one)."""
    if not isinstance(items, list):
        raise BadTrace(f"{what} attributes must be a list of {{key, value}}, got {type(items).__name__}")
    if len(items) > MAX_ATTRIBUTES:
        raise BadTrace(f"{what} has {len(items)} attributes (limit {MAX_ATTRIBUTES})")
    out: dict[str, Any] = {}
    for item in items:
        if type(item) is not dict or type(item.get("key")) is not str or len(item) > 1 + ("value" in item):
            raise BadTrace(f"{what}: an attribute must be {{key: text, value: AnyValue}}")
        key = item["key"]
        if key in out:
            raise BadTrace(f"{what}: attribute {key!r} appears twice")
        value = item.get("value", {})
        text = value.get("stringValue") if type(value) is dict and len(value) == 1 else None
        if type(text) is str and len(text) <= MAX_CHARS:  # the common value, checked quickly
            out[key] = text
        else:
            out[key] = any_value(value, f"{what} attribute {key!r}", depth)
    return out


REDACTED = "__REDACTED__"  # what OpenInference writes in place of content it was told to hide


def json_value(value: Any) -> Any:
    """A text attribute that holds a JSON object or array (conventions write lists and maps so), parsed;
    any other value as it is: a question is not tried as JSON."""
    if isinstance(value, str) and value.lstrip()[:1] in ("{", "["):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _id(value: Any, pattern: re.Pattern[str], what: str, *, empty: bool = False) -> str:
    if value in (None, "") and empty:
        return ""
    if not isinstance(value, str) or not pattern.fullmatch(value):
        digits = 32 if pattern is HEX_TRACE else 16
        hint = " (it looks like base64, protobuf's default JSON for bytes)" if isinstance(value, str) else ""
        raise BadTrace(f"{what} {str(value)[:40]!r} is not {digits} hex digits, as OTLP/JSON writes ids{hint}")
    if not value.strip("0"):
        raise BadTrace(f"{what} is all zeros, which OTLP forbids")
    return value.lower()


def _span(raw: Any, line: int, resource: dict[str, Any]) -> Span:
    if not isinstance(raw, dict):
        raise BadTrace(f"a span must be an object, got {type(raw).__name__}")
    span_id = _id(raw.get("spanId"), HEX_SPAN, "spanId")
    what = f"span {span_id}"
    events_raw = raw.get("events", [])
    if not isinstance(events_raw, list) or len(events_raw) > MAX_ATTRIBUTES:
        raise BadTrace(f"{what}: events must be a list of at most {MAX_ATTRIBUTES}")
    events = []
    for e in events_raw:
        if not isinstance(e, dict) or not isinstance(e.get("name", ""), str):
            raise BadTrace(f"{what}: an event must be an object with a name")
        time = _int(e.get("timeUnixNano", "0"), f"{what} event's timeUnixNano")
        events.append((e.get("name", ""), attributes(e.get("attributes", []), f"{what} event"), time))
    name = raw.get("name", "")
    if not isinstance(name, str):
        raise BadTrace(f"{what}: name must be text")
    return Span(
        trace_id=_id(raw.get("traceId"), HEX_TRACE, f"{what}'s traceId"),
        span_id=span_id,
        parent=_id(raw.get("parentSpanId"), HEX_SPAN, f"{what}'s parentSpanId", empty=True),
        name=name,
        start=_int(raw.get("startTimeUnixNano", "0"), f"{what}'s startTimeUnixNano"),
        end=_int(raw.get("endTimeUnixNano", "0"), f"{what}'s endTimeUnixNano"),
        attrs=attributes(raw.get("attributes", []), what),
        events=events,
        line=line,
        resource=resource,
    )


def request_spans(request: Any, line: int) -> list[Span]:
    """Every span of one ``ExportTraceServiceRequest`` (a BadTrace for the first problem)."""
    if not isinstance(request, dict) or not isinstance(request.get("resourceSpans"), list):
        raise BadTrace("not an OTLP/JSON ExportTraceServiceRequest (an object with resourceSpans)")
    out = []
    for rs in request["resourceSpans"]:
        if not isinstance(rs, dict) or not isinstance(rs.get("scopeSpans", []), list):
            raise BadTrace("resourceSpans must hold objects with a scopeSpans list")
        resource = rs.get("resource", {})
        res = attributes(resource.get("attributes", []) if isinstance(resource, dict) else None, "resource")
        for ss in rs.get("scopeSpans", []):
            if not isinstance(ss, dict) or not isinstance(ss.get("spans", []), list):
                raise BadTrace("scopeSpans must hold objects with a spans list")
            out += [_span(s, line, res) for s in ss.get("spans", [])]
    return out


def is_otlp(text: str) -> bool:
    """Whether a file's first line (or start) is an OTLP/JSON request: it opens with resourceSpans."""
    return re.match(r'\s*\{\s*"resourceSpans"\s*:', text.lstrip("\ufeff")) is not None


# --------------------------------------------------------------------------- traces


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


FAST = json.JSONDecoder(parse_constant=_no_constant)  # objects built in C: a trace file's keys are the protocol's


def _jsonl(path: Path, problems: list[Problem], lines: Container[int] | None) -> Iterator[tuple[int, Any]]:
    """(line, parsed value) of each non-blank line (or only ``lines``: the others are not parsed)."""
    where = str(path)
    with open(path, "rb", buffering=1 << 16) as handle:
        for number, raw in enumerate(handle, start=1):
            if lines is not None and number not in lines:
                continue
            try:
                text = raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                problems.append(Problem(where, number, f"not valid UTF-8 (byte 0x{raw[exc.start]:02x})"))
                continue
            if not text.strip():
                continue
            try:
                yield number, FAST.decode(text)
            except RecursionError:
                problems.append(Problem(where, number, "nested too deeply to be data"))
            except ValueError as exc:
                problems.append(Problem(where, number, json_error_text(exc)))


def _requests(path: Path, problems: list[Problem], lines: Container[int] | None = None) -> Iterator[tuple[int, Any]]:
    if not path.is_file():  # a FIFO or a folder is named, never opened
        problems.append(Problem(str(path), None, "not found, or not a regular file"))
        return
    if path.suffix.lower() != ".json":
        yield from _jsonl(path, problems, lines)
        return
    if path.stat().st_size > MAX_JSON_BYTES:
        problems.append(Problem(str(path), None, f"a .json file over {MAX_JSON_BYTES:,} bytes: write JSONL"))
        return
    try:
        yield 1, loads_strict(path.read_text(encoding="utf-8-sig"))
    except (ValueError, UnicodeDecodeError) as exc:
        problems.append(Problem(str(path), 1, f"not valid JSON ({exc})"))


def tree(spans: list[Span]) -> Span:
    """The root of one trace's spans, children ordered by start time (then span id): a BadTrace for a
    missing parent, a cycle, two roots or a span id twice."""
    by_id: dict[str, Span] = {}
    for s in spans:
        if s.span_id in by_id:
            raise BadTrace(f"span {s.span_id} appears twice in trace {s.trace_id}")
        by_id[s.span_id] = s
    for s in spans:
        s.children = []
    for s in spans:
        if s.parent:
            parent = by_id.get(s.parent)
            if parent is None:
                raise BadTrace(f"span {s.span_id}'s parent {s.parent} is not in trace {s.trace_id}")
            parent.children.append(s)
    roots = [s for s in spans if not s.parent]
    if len(roots) > 1:
        raise BadTrace(f"trace {spans[0].trace_id} has {len(roots)} root spans (spans without a parent), not one")
    if not roots:
        raise BadTrace(f"trace {spans[0].trace_id}: its {len(spans)} span(s) are in a parent cycle")
    seen = 0
    stack = [roots[0]]
    while stack:
        s = stack.pop()
        seen += 1
        s.children.sort(key=lambda c: (c.start, c.span_id))
        stack.extend(s.children)
    if seen != len(spans):
        raise BadTrace(f"trace {spans[0].trace_id}: {len(spans) - seen} span(s) are in a parent cycle")
    return roots[0]


def traces(
    path: Path, problems: list[Problem], lines: Container[int] | None = None, wanted: Container[str] | None = None
) -> Iterator[tuple[int, Span]]:
    """(the line of its root, the root) of each complete trace, in the order their roots were read; or
    only the ``wanted`` traces, from only those ``lines`` (a clean file read again)."""
    open_: dict[str, list[Span]] = {}
    closed: set[str] = set()  # ids only: a late span of a finished trace is named, not merged
    where = str(path)
    held = 0  # spans in open_ (at most: a span dropped on the way is not subtracted)
    for line, request in _requests(path, problems, lines):
        try:
            spans = request_spans(request, line)
        except BadTrace as exc:
            problems.append(Problem(where, line, str(exc)))
            continue
        rooted = []
        held += len(spans)
        if held > MAX_HELD:
            why = "a trace is read as complete once its root's line is read, and these roots do not come"
            problems.append(Problem(where, line, f"over {MAX_HELD:,} spans wait for their traces' roots: {why}"))
            return
        for s in spans:
            if wanted is not None and s.trace_id not in wanted:
                continue
            if s.trace_id in closed:
                late = f"span {s.span_id} of trace {s.trace_id} comes after the line holding the trace's root"
                why = "qaeval reads a trace as complete once its root's line is read"
                problems.append(Problem(where, line, f"{late}: {why}"))
                continue
            trace = open_.setdefault(s.trace_id, [])
            trace.append(s)
            if len(trace) > MAX_SPANS:
                problems.append(Problem(where, line, f"trace {s.trace_id} holds over {MAX_SPANS} spans"))
                closed.add(s.trace_id)
                held -= len(open_.pop(s.trace_id))
                continue
            if not s.parent:
                rooted.append(s.trace_id)
        for trace_id in dict.fromkeys(rooted):
            if trace_id not in open_:
                continue
            closed.add(trace_id)
            try:
                done = open_.pop(trace_id)
                held -= len(done)
                root = tree(done)
                root.first_line = min(s.line for s in done)
                yield line, root
            except BadTrace as exc:
                problems.append(Problem(where, line, str(exc)))
    for spans in open_.values():
        first = min(s.line for s in spans)
        try:
            tree(spans)
        except BadTrace as exc:
            problems.append(Problem(where, first, str(exc)))
