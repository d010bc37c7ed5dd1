"""Hand-made OTLP/JSON, for the bad-input tests only (good traces come from the real instrumentations:
tests/test_traces.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

T0 = 1767225600_000_000_000  # 2026-01-01T00:00:00Z
PASSAGES = [("library-hours", "The library opens at 9 am on weekdays."), ("parking", "Parking is free after 6 pm.")]
QUESTION = "When does the library open?"
ANSWER = "The library opens at 9 am on weekdays [1]."


def value(v: Any) -> dict[str, Any]:
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": v}
    return {"stringValue": v}


def span(tid: str, sid: str, parent: str, start: int, attrs: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {
        "traceId": tid,
        "spanId": sid,
        "parentSpanId": parent,
        "name": more.pop("name", "span"),
        "kind": 1,
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(start + 500),
        "attributes": [{"key": k, "value": value(v)} for k, v in attrs.items()],
        **more,
    }


def rag_trace(n: int, *, answer: str = ANSWER, prompt_passages: int = 2, hide: tuple[str, ...] = ()) -> list[dict]:
    """One OpenInference RAG trace: a chain root, a retriever, an LLM (spans children first, as exported)."""
    tid, t0 = f"{n + 1:032x}", T0 + n * 3_600_000_000_000
    root_id, ret_id, llm_id = (f"{n * 4 + k:016x}" for k in (1, 2, 3))
    docs: dict[str, Any] = {}
    for i, (pid, text) in enumerate(PASSAGES):
        docs[f"retrieval.documents.{i}.document.id"] = pid
        if "passages" not in hide:
            docs[f"retrieval.documents.{i}.document.content"] = text
    context = " ".join(f"[{i}] {t}" for i, (_, t) in enumerate(PASSAGES[:prompt_passages], 1))
    llm: dict[str, Any] = {"openinference.span.kind": "LLM", "llm.model_name": "gpt-test"}
    if "prompt" not in hide:
        llm |= {
            "llm.input_messages.0.message.role": "system",
            "llm.input_messages.0.message.content": f"Answer from these passages: {context}",
            "llm.input_messages.1.message.role": "user",
            "llm.input_messages.1.message.content": QUESTION,
        }
    root = {"openinference.span.kind": "CHAIN", "input.value": QUESTION, "session.id": f"s{n % 2}"}
    if "answer" not in hide:
        llm["llm.output_messages.0.message.content"] = answer
        root["output.value"] = answer
    else:
        root["output.value"] = "__REDACTED__"
    return [
        span(tid, ret_id, root_id, t0 + 10, {"openinference.span.kind": "RETRIEVER", "input.value": QUESTION, **docs}),
        span(tid, llm_id, root_id, t0 + 100, llm),
        span(tid, root_id, "", t0, root, name="rag"),
    ]


def request(spans: list[dict]) -> dict[str, Any]:
    return {
        "resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{"scope": {"name": "t"}, "spans": spans}]}]
    }


def write(path: Path, lines: list[Any]) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path
