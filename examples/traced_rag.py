"""The docs' example system, traced with OpenTelemetry as a team would trace it, its spans written as the
collector's file exporter writes them (OTLP/JSON, one request a line): what `qaeval monitor` reads.

    python examples/traced_rag.py reports/traces.jsonl        # needs: pip install '.[traces]'

A retriever over a small corpus (a RETRIEVER span with OpenInference's attributes), a prompt with the
numbered passages, and the openai client (traced by openinference-instrumentation-openai) against qaeval's
local fake chat server (127.0.0.1). The system records what its answer cited on its own span, as
``qaeval.citations`` (no tracing convention has an attribute for citations; without it, qaeval reads the
answer's markers, ``[1]`` or ``[doc-id]``). One request in four cites a passage the prompt never held, so
the monitor has a failure to show.
"""

from __future__ import annotations

import base64
import json
import re
import sys
from typing import Any

CORPUS = {
    "library-hours": "The library opens at 9 am on weekdays and closes at 8 pm.",
    "library-weekend": "On Saturdays the library opens at 10 am; it is closed on Sundays.",
    "parking": "Parking behind the library is free after 6 pm.",
    "cards": "A library card is free for residents and lends up to 12 items.",
}
QUESTIONS = [
    "When does the library open on weekdays?",
    "Is the library open on Sundays?",
    "How many items does a library card lend?",
    "Where can I park near the library?",
]


def retrieve(question: str, k: int = 2) -> list[tuple[str, str, float]]:
    """Documents sharing the most words with the question, best first."""
    words = set(re.findall(r"\w+", question.lower()))
    scored = [(len(words & set(re.findall(r"\w+", t.lower()))) / 10, d, t) for d, t in CORPUS.items()]
    return [(d, t, s) for s, d, t in sorted(scored, key=lambda x: (-x[0], x[1]))[:k]]


def answer(tracer: Any, client: Any, question: str, session: str, sloppy: bool) -> None:
    from openinference.semconv.trace import DocumentAttributes, SpanAttributes

    with tracer.start_as_current_span("rag") as root:
        root.set_attribute(SpanAttributes.OPENINFERENCE_SPAN_KIND, "CHAIN")
        root.set_attribute(SpanAttributes.INPUT_VALUE, question)
        root.set_attribute(SpanAttributes.SESSION_ID, session)
        with tracer.start_as_current_span("retrieve") as span:
            span.set_attribute(SpanAttributes.OPENINFERENCE_SPAN_KIND, "RETRIEVER")
            span.set_attribute(SpanAttributes.INPUT_VALUE, question)
            docs = retrieve(question)
            for i, (doc_id, text, score) in enumerate(docs):
                prefix = f"{SpanAttributes.RETRIEVAL_DOCUMENTS}.{i}."
                span.set_attribute(prefix + DocumentAttributes.DOCUMENT_ID, doc_id)
                span.set_attribute(prefix + DocumentAttributes.DOCUMENT_CONTENT, text)
                span.set_attribute(prefix + DocumentAttributes.DOCUMENT_SCORE, score)
        shown = docs[:1] if sloppy else docs  # the sloppy request cites its second passage, never prompted
        context = "\n".join(f"[{i}] {text}" for i, (_, text, _) in enumerate(shown, 1))
        messages = [
            {"role": "system", "content": f"Answer from the passages, citing them as [n].\n{context}"},
            {"role": "user", "content": question},
        ]
        reply = client.chat.completions.create(model="toy-model", messages=messages, extra_body={"reply": docs[0][1]})
        text = reply.choices[0].message.content
        root.set_attribute(SpanAttributes.OUTPUT_VALUE, text)
        cited = docs[-1][0] if sloppy else docs[0][0]
        root.set_attribute("qaeval.citations", json.dumps([{"source_id": cited, "claim": text}]))


def otlp_json(spans: Any) -> str:
    """OTLP/JSON of the spans, ids in hex as OTLP/JSON writes them (protobuf's json_format writes base64)."""
    from google.protobuf.json_format import MessageToDict
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    data = MessageToDict(encode_spans(spans))
    for rs in data["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for span in ss["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if span.get(key):
                        span[key] = base64.b64decode(span[key]).hex()
    return json.dumps(data)


def main(out: str) -> None:
    import openai
    from openinference.instrumentation.openai import OpenAIInstrumentor
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from qaeval.judges.fake_server import FakeJudgeServer

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    OpenAIInstrumentor().instrument(tracer_provider=provider)
    tracer = provider.get_tracer("examples.traced_rag")
    with FakeJudgeServer(echo_reply=True) as server:
        client = openai.OpenAI(base_url=server.url, api_key="local")
        for i in range(12):
            answer(tracer, client, QUESTIONS[i % len(QUESTIONS)], f"session-{i % 3}", sloppy=i % 4 == 3)
    with open(out, "w", encoding="utf-8") as f:
        for span in exporter.get_finished_spans():  # a span a line: a trace spread over lines, as batches do
            f.write(otlp_json([span]) + "\n")
    print(f"{len(exporter.get_finished_spans())} spans of 12 requests written to {out}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "traces.jsonl")
