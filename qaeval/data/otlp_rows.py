"""One monitor row per answered request of a trace, read from the span conventions in use: OpenInference,
OpenTelemetry's GenAI and OpenLLMetry (their attributes: docs/guides/drift-monitor.md).

A hop is a retriever or reranker span, in start order. Each LLM span that started after a hop and
whose prompt carries a retrieved document's text (or is hidden) gives a row; when none does, the last
LLM span does, and a trace with no LLM span gives one row for its root (no model call). The row's
passages are the last reranker's output, else every hop's documents in hop and rank order (an id once).
Content an instrumentation hid (absent, or ``__REDACTED__``) is named in ``hidden``, never taken for a
blank. Citations are ``qaeval.citations`` when recorded, else the answer's markers
(``qaeval.data.otlp_citations``); ``facts["citations_from"]`` says which.
"""

from __future__ import annotations

import json
from collections.abc import Container, Iterator
from pathlib import Path
from typing import Any

from qaeval.core.errors import Problem
from qaeval.data.otlp import REDACTED, BadTrace, Span, json_value, traces
from qaeval.data.otlp_citations import CITATIONS, citations, cited_by, recorded_citations

HIDDEN_TEXT = "(hidden by the instrumentation)"
LLM_OPERATIONS = {"chat", "text_completion", "generate_content"}
RETRIEVAL_OPERATIONS = {"retrieval", "vector_db_retrieve"}  # GenAI's; OpenLLMetry's LangChain retriever
INPUT_KEYS = ("question", "query", "input", "user_input", "text", "message", "content", "prompt")
OUTPUT_KEYS = ("answer", "output", "response", "text", "content", "result")


class TraceRaw(dict):  # type: ignore[type-arg]
    """A raw row read from a trace, with what only a trace has: the file line of its root, its hops,
    what the instrumentation hid, and the trace's facts (trace and span ids, model, tokens, latency)."""

    line: int = 0
    first_line: int = 0
    index: int = 0  # its place among its trace's rows
    hidden: tuple[str, ...] = ()
    hops: tuple[dict[str, Any], ...] = ()
    facts: dict[str, Any]


# --------------------------------------------------------------------------- attribute helpers


def _text(value: Any) -> str | None:
    """Text an attribute shows, or None when absent or redacted."""
    if value is None or value == REDACTED:
        return None
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False) if isinstance(value, (list, dict)) else str(value)


def indexed(attrs: dict[str, Any], prefix: str) -> list[dict[str, Any]]:
    """``prefix.{i}.rest`` attributes as a list (by i) of ``{rest: value}``."""
    found: dict[int, dict[str, Any]] = {}
    for key, value in attrs.items():
        if key.startswith(prefix):
            head, _, rest = key[len(prefix) :].partition(".")
            if head.isdigit() and rest:
                found.setdefault(int(head), {})[rest] = value
    return [found[i] for i in sorted(found)]


WRAPPERS = ("kwargs", "args", "inputs", "outputs")  # OpenLLMetry's {"args": [...], "kwargs": {...}}, {"inputs": ...}


def _pick(value: Any, keys: tuple[str, ...]) -> str | None:
    """The text a JSON input or output stands for: itself, or its first text field of ``keys``."""
    value = json_value(value)
    if isinstance(value, str):
        return None if value == REDACTED else value
    if isinstance(value, dict):
        for key in WRAPPERS:
            if key in value:
                held = value[key]
                inner = _pick(held[0] if key == "args" and isinstance(held, list) and held else held, keys)
                if inner:
                    return inner
        for key in keys:
            if isinstance(value.get(key), str):
                return str(value[key])
    return None


def _parts_text(message: Any) -> str | None:
    """A GenAI message's text: ``content``, or its text parts joined."""
    if not isinstance(message, dict):
        return _text(message)
    if isinstance(message.get("content"), str):
        return _text(message["content"])
    parts = message.get("parts")
    if isinstance(parts, list):
        texts = [str(p["content"]) for p in parts if isinstance(p, dict) and isinstance(p.get("content"), str)]
        return "\n".join(texts) if texts else None
    return None


# --------------------------------------------------------------------------- span roles


def role(span: Span) -> str:
    """llm, retriever, reranker, or other, by whichever convention the span follows."""
    if "role" not in span.memo:
        span.memo["role"] = _role(span)
    return str(span.memo["role"])


def _role(span: Span) -> str:
    a = span.attrs
    kind = a.get("openinference.span.kind")
    if isinstance(kind, str) and kind.upper() in ("LLM", "RETRIEVER", "RERANKER"):
        return kind.lower()
    operation = a.get("gen_ai.operation.name")
    if operation in LLM_OPERATIONS or a.get("llm.request.type") in ("chat", "completion"):
        return "llm"
    if operation in RETRIEVAL_OPERATIONS or any(name == "db.query.result" for name, _, _ in span.events):
        return "retriever"
    return "other"


def messages(span: Span) -> tuple[list[tuple[str, str]] | None, str | None]:
    """(the prompt's (role, text) messages or None when hidden, the output text or None when hidden)."""
    if "messages" not in span.memo:
        span.memo["messages"] = _messages(span)
    return span.memo["messages"]  # type: ignore[no-any-return]


def _messages(span: Span) -> tuple[list[tuple[str, str]] | None, str | None]:
    a = span.attrs
    prompt: list[tuple[str, str]] | None = None
    found = indexed(a, "llm.input_messages.") or indexed(a, "gen_ai.prompt.")
    if found:
        prompt = [
            (str(m.get("message.role", m.get("role", ""))), t)
            for m in found
            for t in [_text(m.get("message.content", m.get("content")))]
            if t is not None
        ] or None
    elif "gen_ai.input.messages" in a:
        listed = json_value(a["gen_ai.input.messages"])
        system = json_value(a.get("gen_ai.system_instructions"))
        items = ([{"role": "system", "parts": system}] if isinstance(system, list) else []) + (
            listed if isinstance(listed, list) else []
        )
        prompt = [(str(m.get("role", "")), t) for m in items if isinstance(m, dict) for t in [_parts_text(m)] if t]
        prompt = prompt or None
    out = indexed(a, "llm.output_messages.") or indexed(a, "gen_ai.completion.")
    answer = None
    if out:
        texts = [t for m in out for t in [_text(m.get("message.content", m.get("content")))] if t is not None]
        answer = "\n".join(texts) if texts else None
    elif "gen_ai.output.messages" in a:
        listed = json_value(a["gen_ai.output.messages"])
        texts = [t for m in (listed if isinstance(listed, list) else []) for t in [_parts_text(m)] if t]
        answer = "\n".join(texts) if texts else None
    return prompt, answer


METADATA_IDS = ("id", "doc_id", "document_id", "source")  # where a document without an id keeps one


def _doc_id(d: dict[str, Any], prefix: str) -> str | None:
    """The document's id, else one its metadata names (LangChain's instrumentation records no id)."""
    found = _text(d.get(prefix + "id"))
    if found:
        return found
    meta = json_value(d.get(prefix + "metadata"))
    if isinstance(meta, dict):
        return next((str(meta[k]) for k in METADATA_IDS if isinstance(meta.get(k), (str, int))), None)
    return None


def _docs(items: list[dict[str, Any]], prefix: str) -> list[dict[str, Any]]:
    return [
        {"id": _doc_id(d, prefix), "text": _text(d.get(prefix + "content")), "score": d.get(prefix + "score")}
        for d in items
    ]


def _entity_documents(output: Any) -> list[dict[str, Any]]:
    """OpenLLMetry's retriever output, ``{"documents": [{page_content, metadata}], "count": n}``."""
    listed = json_value(output)
    items = listed.get("documents") if isinstance(listed, dict) else None
    out = []
    for d in items if isinstance(items, list) else []:
        d = d if isinstance(d, dict) else {"page_content": d}
        meta = d.get("metadata")
        ids = [meta[k] for k in METADATA_IDS if isinstance(meta, dict) and isinstance(meta.get(k), (str, int))]
        text = d.get("page_content")
        out.append({"id": str(ids[0]) if ids else None, "text": _text(text) if isinstance(text, str) else None})
        out[-1]["score"] = None  # OpenLLMetry records none
    return out


def hop_documents(span: Span, kind: str) -> tuple[str | None, list[dict[str, Any]] | None]:
    """(the hop's query, its documents as {id, text, score} in rank order, or None when the instrumentation
    left them out: OpenLLMetry with content tracing off)."""
    a = span.attrs
    if kind == "reranker":
        return _text(a.get("reranker.query")), _docs(indexed(a, "reranker.output_documents."), "document.")
    query = _pick(a.get("input.value", a.get("traceloop.entity.input")), INPUT_KEYS) or _text(
        a.get("gen_ai.retrieval.query.text", a.get("db.query.text"))
    )
    if a.get("gen_ai.operation.name") == "vector_db_retrieve":  # OpenLLMetry's LangChain retriever
        output = a.get("traceloop.entity.output")
        return query, None if output in (None, REDACTED) else _entity_documents(output)
    docs = _docs(indexed(a, "retrieval.documents."), "document.")
    if not docs and "gen_ai.retrieval.documents" in a:
        listed = json_value(a["gen_ai.retrieval.documents"])
        docs = [
            {"id": _text(d.get("id")), "text": _text(d.get("content", d.get("text"))), "score": d.get("score")}
            for d in (listed if isinstance(listed, list) else [])
            if isinstance(d, dict)
        ]
    if not docs:
        docs = [
            {
                "id": _text(e.get("db.query.result.id")),
                "text": _text(e.get("db.query.result.document")),
                "score": e.get("db.query.result.score", e.get("db.query.result.distance")),
            }
            for name, e, _ in span.events
            if name == "db.query.result"
        ]
    return query, docs


def convention(span: Span) -> str:
    keys = span.attrs.keys()
    if "openinference.span.kind" in keys:
        return "openinference"
    if "traceloop.span.kind" in keys or any(k.startswith(("traceloop.", "gen_ai.prompt.")) for k in keys):
        return "openllmetry"
    return "genai"


# --------------------------------------------------------------------------- a trace's rows


def walk(root: Span) -> list[Span]:
    """Every span, parent before children, children in start order."""
    out, stack = [], [root]
    while stack:
        span = stack.pop()
        out.append(span)
        stack.extend(reversed(span.children))
    return out


def _hops(spans: list[Span]) -> list[tuple[Span, dict[str, Any]]]:
    hops: list[tuple[Span, dict[str, Any]]] = []
    for span in sorted(spans, key=lambda s: (s.start, s.span_id)):
        kind = role(span)
        if kind in ("retriever", "reranker"):
            query, docs = hop_documents(span, kind)
            number = len(hops) + 1
            for rank, d in enumerate(docs or [], 1):
                d["rank"] = rank
                d["id"] = d["id"] or f"hop{number}-{rank}"
            hop = dict(hop=number, kind=kind, span_id=span.span_id, query=query, documents=docs or [])
            if docs is None:
                hop["hidden"] = True
            hops.append((span, hop))
    return hops


def _question(root: Span, hops: list[dict[str, Any]], prompt: list[tuple[str, str]] | None) -> str | None:
    a = root.attrs
    for value in (a.get("input.value"), a.get("traceloop.entity.input")):
        text = _pick(value, INPUT_KEYS)
        if text and text.strip():
            return text
    for hop in hops:
        if hop["query"]:
            return str(hop["query"])
    users = [t for r, t in (prompt or []) if r == "user"]
    return users[-1] if users else None


def _root_answer(root: Span) -> tuple[bool, str | None]:
    """(whether the root records an output at all, its text or None when hidden)."""
    for key in ("output.value", "traceloop.entity.output"):
        if key in root.attrs:
            return True, _pick(root.attrs[key], OUTPUT_KEYS)
    return False, None


def _answering(spans: list[Span], hops: list[tuple[Span, dict[str, Any]]]) -> list[tuple[Span, list[dict[str, Any]]]]:
    """(each answering LLM span, the hops that fed it): see the module's rule."""
    llms = sorted((s for s in spans if role(s) == "llm"), key=lambda s: (s.start, s.span_id))
    out = []
    for llm in llms:
        fed = [h for s, h in hops if s.start <= llm.start and s.span_id != llm.span_id]
        if not fed:
            continue
        prompt, _ = messages(llm)
        text = "\n".join(t for _, t in prompt) if prompt else None
        if text is None or any(d["text"] and d["text"] in text for h in fed for d in h["documents"]):
            out.append((llm, fed))
    if not out and llms:
        last = llms[-1]
        out.append((last, [h for s, h in hops if s.start <= last.start]))
    return out


def rows_of_trace(root: Span) -> list[TraceRaw]:
    """The trace's rows (a BadTrace when it has no answering span: no LLM span and no root output)."""
    spans = walk(root)
    hops = _hops(spans)
    answering = _answering(spans, hops)
    recorded, root_text = _root_answer(root)
    if not answering:
        if not recorded:
            raise BadTrace(
                f"trace {root.trace_id} has no answering span: no LLM span (OpenInference, GenAI or "
                "OpenLLMetry) and no output on its root"
            )
        return [_row(root, root, None, [h for _, h in hops], root_text, spans, cited_by(root, root, {}, True))]
    by_id = {s.span_id: s for s in spans}
    rows = []
    for i, (llm, fed) in enumerate(answering):
        _, llm_text = messages(llm)
        last = i == len(answering) - 1
        text = root_text if last and root_text is not None and root is not llm else llm_text
        rows.append(_row(root, llm, llm, fed, text, spans, cited_by(llm, root, by_id, last)))
    return rows


def _passages(fed: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rerankers = [h for h in fed if h["kind"] == "reranker"]
    ordered = (rerankers[-1]["documents"] if rerankers else []) + [d for h in fed for d in h["documents"]]
    seen: dict[str, dict[str, Any]] = {}
    for d in ordered:
        seen.setdefault(d["id"], d)
    return list(seen.values())


def _iso(nanos: int) -> str | None:
    from datetime import datetime, timezone

    if nanos <= 0:
        return None
    return datetime.fromtimestamp(nanos / 1e9, tz=timezone.utc).isoformat().replace("+00:00", "Z")


def _first(spans: list[Span], *keys: str) -> Any:
    for span in spans:
        for key in keys:
            if span.attrs.get(key) not in (None, "", REDACTED):
                return span.attrs[key]
    return None


def _row(
    root: Span,
    answering: Span,
    llm: Span | None,
    fed: list[dict[str, Any]],
    answer: str | None,
    spans: list[Span],
    citing: Span | None,
) -> TraceRaw:
    prompt_messages = messages(llm)[0] if llm is not None else None
    passages = _passages(fed)
    question = _question(root, fed, prompt_messages)
    hidden = []
    if question is None:
        hidden.append("question")
    if llm is not None and prompt_messages is None:
        hidden.append("prompt")
    if any(d["text"] is None or not d["text"].strip() for d in passages) or any(h.get("hidden") for h in fed):
        hidden.append("passages")
    if answer is None:
        hidden.append("answer")
    cited_from: str | None = CITATIONS  # the system's record of what it cited wins over the answer's markers
    if citing is not None:
        cited = recorded_citations(citing, answer)
    else:
        cited, cited_from = (citations(answer, passages), "markers") if answer else ([], None)
    raw = TraceRaw(
        id=f"{root.trace_id}-{answering.span_id}",
        question=question or HIDDEN_TEXT,
        passages=[{"id": d["id"], "text": d["text"] or HIDDEN_TEXT} for d in passages],
        answer=answer,
        citations=cited,
        model_was_called=llm is not None,
        abstained=False if answer is None else not answer.strip(),
    )
    if prompt_messages is not None:
        raw["prompt"] = "\n\n".join(text for _, text in prompt_messages)
    when = _iso(root.start)
    if when:
        raw["timestamp"] = when
    chosen = [answering, root, *spans]
    session = _first(chosen, "session.id", "gen_ai.conversation.id", "traceloop.association.properties.session_id")
    model = _first(chosen, "llm.model_name", "gen_ai.response.model", "gen_ai.request.model")
    for name, value in (("session", session), ("model", model)):
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            raw[name] = str(value)
    raw.hidden = tuple(hidden)
    raw.hops = tuple(fed)
    a = answering.attrs
    totals = [
        a[k]
        for k in ("llm.token_count.total", "gen_ai.usage.total_tokens", "llm.usage.total_tokens")
        if isinstance(a.get(k), int)
    ]
    parts = [a[k] for k in ("gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens") if isinstance(a.get(k), int)]
    raw.facts = dict(
        trace_id=root.trace_id,
        span_id=answering.span_id,
        convention=convention(answering),
        citations_from=cited_from,
        tokens=(totals[0] if totals else sum(parts)) or None,
        latency_ms=max(0, root.end - root.start) / 1e6,
        span=dict(
            name=answering.name, parent=answering.parent, start=answering.start, end=answering.end
        ),  # what the OTLP annotations repeat of the answering span
    )
    return raw


def trace_rows(
    path: Path,
    problems: list[Problem],
    only: Container[int] | None = None,
    locate: dict[int, tuple[str, int, int, int]] | None = None,
) -> Iterator[tuple[int, dict[str, Any]]]:
    """(row number, raw row) for every answered request in the traces (``rows_of_trace``): the
    row number is the row's 1-based place in the file's rows, which a monitor record keeps. With
    ``locate`` (a scan's ``trace_index``: row number -> trace id, first line, root line, place among the
    trace's rows), only the lines of the ``only`` rows' traces are read again."""
    number_of = None  # with locate: (trace id, place among its rows) -> row number, of the rows asked for
    if locate is not None and only is not None:
        rows = {n: locate[n] for n in locate if n in only}
        lines = {n for _, first, last, _ in rows.values() for n in range(first, last + 1)}
        number_of = {(trace_id, index): number for number, (trace_id, _, _, index) in rows.items()}
        found = traces(path, problems, lines, {trace_id for trace_id, *_ in rows.values()})
    else:
        found = traces(path, problems)
    number = 0
    for line, root in found:
        try:
            rows_of = rows_of_trace(root)
        except BadTrace as exc:
            problems.append(Problem(str(path), line, str(exc)))
            continue
        for index, raw in enumerate(rows_of):
            number += 1
            place = number if number_of is None else number_of.get((root.trace_id, index))
            if place is not None and (only is None or place in only):
                raw.line, raw.first_line, raw.index = line, root.first_line, index
                yield place, raw
