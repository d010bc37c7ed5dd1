"""Traces made by the real instrumentation libraries, read back as a monitor log: each row is compared with
what the system really retrieved, prompted and answered. The libraries are the ``traces`` extra (and in the
dev extra); without them (the oldest-pins run) this file skips.

Spans are exported with opentelemetry-sdk's in-memory exporter, encoded by
opentelemetry-exporter-otlp-proto-common into an ``ExportTraceServiceRequest`` and written as OTLP/JSON
with protobuf's ``json_format``, its ids then turned from base64 (protobuf's JSON for bytes) into the hex
that OTLP/JSON and the collector's file exporter write."""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk.trace", reason="the traces extra")
pytest.importorskip("opentelemetry.exporter.otlp.proto.common", reason="the traces extra")
pytest.importorskip("openinference.instrumentation.openai", reason="the traces extra")
openai = pytest.importorskip("openai", reason="the openai extra")

from google.protobuf import json_format  # noqa: E402
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans  # noqa: E402
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

from qaeval import api  # noqa: E402
from qaeval.cli import main  # noqa: E402
from qaeval.judges.fake_server import FakeJudgeServer  # noqa: E402

CORPUS = {
    "library-hours": "The library opens at 9 am on weekdays.",
    "library-weekend": "On Saturdays the library opens at 10 am.",
    "parking": "Parking is free after 6 pm.",
}
QUESTION = "When does the library open?"
REPLY = "The library opens at 9 am on weekdays [1]."


def retrieve(question: str, k: int = 2) -> list[tuple[str, str, float]]:
    """The toy system's retriever: documents sharing the most words with the question, best first."""
    words = set(re.findall(r"\w+", question.lower()))
    scored = [(len(words & set(re.findall(r"\w+", t.lower()))) / 10, d, t) for d, t in CORPUS.items()]
    return [(d, t, s) for s, d, t in sorted(scored, key=lambda x: (-x[0], x[1]))[:k]]


def prompt_messages(question: str, docs: list[tuple[str, str, float]]) -> list[dict[str, str]]:
    context = "\n".join(f"[{i}] {text}" for i, (_, text, _) in enumerate(docs, 1))
    return [
        {"role": "system", "content": f"Answer from the passages, citing them as [n].\n{context}"},
        {"role": "user", "content": question},
    ]


def to_otlp_json(spans: Any) -> str:
    """One OTLP/JSON line of these spans, with hex ids as the collector's file exporter writes them."""
    data = json_format.MessageToDict(encode_spans(spans))
    for rs in data["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for span in ss["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if span.get(key):
                        span[key] = base64.b64decode(span[key]).hex()
    return json.dumps(data)


@pytest.fixture
def provider():
    exporter = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    yield tp, exporter
    tp.shutdown()


@pytest.fixture
def server():
    with FakeJudgeServer(reply=REPLY) as s:
        yield s


def _openinference_rag(tp: TracerProvider, client: Any, question: str) -> dict[str, Any]:
    """The docs' example system, traced: a chain that retrieves (a retriever span in OpenInference's
    attributes), prompts and answers (the openai client, traced by openinference-instrumentation-openai)."""
    from openinference.semconv.trace import DocumentAttributes, OpenInferenceSpanKindValues, SpanAttributes

    tracer = tp.get_tracer("rag")
    with tracer.start_as_current_span("rag") as root:
        root.set_attribute(SpanAttributes.OPENINFERENCE_SPAN_KIND, OpenInferenceSpanKindValues.CHAIN.value)
        root.set_attribute(SpanAttributes.INPUT_VALUE, question)
        root.set_attribute(SpanAttributes.SESSION_ID, "session-1")
        with tracer.start_as_current_span("retrieve") as span:
            span.set_attribute(SpanAttributes.OPENINFERENCE_SPAN_KIND, OpenInferenceSpanKindValues.RETRIEVER.value)
            span.set_attribute(SpanAttributes.INPUT_VALUE, question)
            docs = retrieve(question)
            for i, (doc_id, text, score) in enumerate(docs):
                prefix = f"{SpanAttributes.RETRIEVAL_DOCUMENTS}.{i}."
                span.set_attribute(prefix + DocumentAttributes.DOCUMENT_ID, doc_id)
                span.set_attribute(prefix + DocumentAttributes.DOCUMENT_CONTENT, text)
                span.set_attribute(prefix + DocumentAttributes.DOCUMENT_SCORE, score)
        messages = prompt_messages(question, docs)
        reply = client.chat.completions.create(model="gpt-test", messages=messages)
        answer = reply.choices[0].message.content
        root.set_attribute(SpanAttributes.OUTPUT_VALUE, answer)
    return dict(docs=docs, messages=messages, answer=answer)


@pytest.fixture
def openinference_openai(provider):
    from openinference.instrumentation.openai import OpenAIInstrumentor

    tp, exporter = provider
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=tp)
    yield tp, exporter
    instrumentor.uninstrument()


def test_openinference_openai_traces_read_back_as_what_the_system_did(openinference_openai, server, tmp_path):
    tp, exporter = openinference_openai
    client = openai.OpenAI(base_url=server.url, api_key="test")
    did = _openinference_rag(tp, client, QUESTION)
    path = tmp_path / "traces.jsonl"
    path.write_text(to_otlp_json(exporter.get_finished_spans()) + "\n")
    result = api.monitor(str(path), by=["session"])
    (row,) = result.rows.to_dict("records")
    sent = server.requests[0]["messages"]
    assert [m["content"] for m in sent] == [m["content"] for m in did["messages"]]
    judged = result.run.suite.cases[0]  # the judged row as read back from the trace
    assert [(p.id, p.text) for p in judged.sources] == [(d, t) for d, t, _ in did["docs"]]
    assert judged.question == QUESTION
    output = result.run.outputs.iloc[0]
    assert output["answer"] == did["answer"] == REPLY
    assert output["prompt_to_model"] == "\n\n".join(m["content"] for m in sent)
    assert [c["source_id"] for c in output["citations"]] == [did["docs"][0][0]]
    assert row["passed"] and row["model_called"] and row["hops"] == 1
    assert row["cited_hops"] == "library-hours: hop 1, in the prompt"
    assert row["session"] == "session-1"
    llm = next(s for s in exporter.get_finished_spans() if s.attributes.get("openinference.span.kind") == "LLM")
    assert row["tokens"] == llm.attributes["llm.token_count.total"] > 0
    root = next(s for s in exporter.get_finished_spans() if s.parent is None)
    assert row["latency_ms"] == (root.end_time - root.start_time) / 1e6
    assert "OpenTelemetry traces (openinference)" in result.notes[0]


def test_an_agent_trace_gives_a_row_per_answer_that_used_retrieved_context(openinference_openai, server, tmp_path):
    tp, exporter = openinference_openai
    client = openai.OpenAI(base_url=server.url, api_key="test")
    tracer = tp.get_tracer("agent")
    with tracer.start_as_current_span("agent") as root:
        root.set_attribute("openinference.span.kind", "AGENT")
        root.set_attribute("input.value", QUESTION)
        first = _openinference_rag(tp, client, QUESTION)
        second = _openinference_rag(tp, client, "When does the library open on Saturdays?")
        root.set_attribute("output.value", second["answer"])
    path = tmp_path / "traces.jsonl"
    path.write_text(to_otlp_json(exporter.get_finished_spans()) + "\n")
    rows = api.monitor(str(path)).rows
    assert len(rows) == 2 and rows["trace_id"].nunique() == 1
    assert rows["hops"].tolist() == [1, 2]  # the second answer had both hops before it
    assert first["docs"] != second["docs"]


def test_the_cli_scores_an_exported_trace_file_and_writes_annotations(openinference_openai, server, tmp_path, capsys):
    import pandas as pd

    tp, exporter = openinference_openai
    client = openai.OpenAI(base_url=server.url, api_key="test")
    for _ in range(3):
        _openinference_rag(tp, client, QUESTION)
    spans = exporter.get_finished_spans()
    path = tmp_path / "traces.jsonl"
    path.write_text("".join(to_otlp_json([s]) + "\n" for s in spans))  # a span a line: a trace over lines
    out = tmp_path / "traces-out.otlp.jsonl"
    table = tmp_path / "scores.parquet"
    assert main(["monitor", "--logs", str(path), "--annotations", str(out), "--save", str(tmp_path / "m.json")]) == 0
    assert main(["monitor", "--logs", str(path), "--annotations", str(table)]) == 0
    capsys.readouterr()
    requests = [json_format.Parse(line, ExportTraceServiceRequest()) for line in out.read_text().splitlines()]
    assert len(requests) == 3
    answering = {s.context.span_id for s in spans if s.attributes.get("openinference.span.kind") == "LLM"}
    for req in requests:
        (span,) = req.resource_spans[0].scope_spans[0].spans
        # json_format reads bytes as base64, where OTLP/JSON writes hex: the hex text comes back by encoding
        assert int(base64.b64encode(span.span_id).decode(), 16) in answering
        events = {
            e.attributes[0].value.string_value: {a.key: a.value for a in e.attributes}
            for e in span.events
            if e.name == "gen_ai.evaluation.result"
        }
        assert events["prompt_grounding"]["gen_ai.evaluation.score.value"].double_value == 1.0
        assert events["citation_resolvability"]["gen_ai.evaluation.score.label"].string_value == "pass"
    frame = pd.read_parquet(table).set_index("context.span_id")
    assert set(frame.columns) == {"trace_id", "name", "score", "label", "explanation"}
    assert {int(i, 16) for i in frame.index} == answering
    assert "faithfulness" in set(frame["name"])


def test_openinference_hidden_inputs_are_not_assessed(provider, server, tmp_path):
    from openinference.instrumentation import TraceConfig
    from openinference.instrumentation.openai import OpenAIInstrumentor

    tp, exporter = provider
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=tp, config=TraceConfig(hide_input_messages=True))
    try:
        client = openai.OpenAI(base_url=server.url, api_key="test")
        _openinference_rag(tp, client, QUESTION)
    finally:
        instrumentor.uninstrument()
    path = tmp_path / "traces.jsonl"
    path.write_text(to_otlp_json(exporter.get_finished_spans()) + "\n")
    result = api.monitor(str(path))
    (row,) = result.rows.to_dict("records")
    assert row["hidden"] == "prompt"
    assert row["prompt_grounding"] is None and row["cited_unprompted"] is None
    assert row["citation_resolvability"] is True  # needs the answer and the passages' ids, which it has
    assert result.scoreboard.set_index("metric").loc["prompt_grounding", "n"] == 0
    assert any("1 row(s) have their prompt hidden" in n for n in result.notes)


def test_citations_the_system_records_win_over_the_answers_markers(openinference_openai, server, tmp_path):
    """A system that knows what it cited records it on its own span (``qaeval.citations``); the LLM span is
    the instrumentation's. Here the answer's marker [1] names library-hours, but the system says it cited
    library-weekend for the claim: the row takes the system's record, and says so."""
    tp, exporter = openinference_openai
    client = openai.OpenAI(base_url=server.url, api_key="test")
    claim = "The library opens at 9 am on weekdays."
    recorded = [{"source_id": "library-weekend", "claim": claim}]
    tracer = tp.get_tracer("rag")
    with tracer.start_as_current_span("answer") as span:
        span.set_attribute("openinference.span.kind", "CHAIN")
        did = _openinference_rag(tp, client, QUESTION)
        span.set_attribute("qaeval.citations", json.dumps(recorded))
    _openinference_rag(tp, client, QUESTION)  # records nothing: its markers are read
    with tracer.start_as_current_span("answer") as span:
        span.set_attribute("openinference.span.kind", "CHAIN")
        _openinference_rag(tp, client, QUESTION)
        span.set_attribute("qaeval.citations", ["library-hours", "library-weekend"])  # ids: an OTLP array
    path = tmp_path / "traces.jsonl"
    path.write_text(to_otlp_json(exporter.get_finished_spans()) + "\n")
    result = api.monitor(str(path))
    first, plain, ids = result.rows.to_dict("records")
    outputs = result.run.outputs.set_index("case_id")
    assert did["answer"] == REPLY and "[1]" in REPLY  # the marker names library-hours, the record does not
    assert outputs.loc[first["row_id"], "citations"] == recorded
    assert first["citations_from"] == "qaeval.citations"
    assert first["cited_hops"] == "library-weekend: hop 1, in the prompt"
    assert [c["source_id"] for c in outputs.loc[plain["row_id"], "citations"]] == ["library-hours"]
    assert plain["citations_from"] == "markers"
    # an id alone cites its document for the whole answer
    assert outputs.loc[ids["row_id"], "citations"] == [
        {"source_id": "library-hours", "claim": REPLY},
        {"source_id": "library-weekend", "claim": REPLY},
    ]
    assert ids["citations_from"] == "qaeval.citations" and ids["citation_coverage"]
    hops = result.hops
    overall = hops[hops["window"].isna() & (hops["slice"] == "(all)")].iloc[0]
    assert overall["cited"] == 1 + 1 + 2  # per hop, the documents the answers cited, from either source


def _genai_rag(tp: TracerProvider, client: Any, question: str) -> dict[str, Any]:
    tracer = tp.get_tracer("rag")
    with tracer.start_as_current_span("invoke_agent rag") as root:
        root.set_attribute("gen_ai.operation.name", "invoke_agent")
        root.set_attribute("gen_ai.conversation.id", "conv-7")
        with tracer.start_as_current_span("retrieval corpus") as span:
            docs = retrieve(question)
            span.set_attribute("gen_ai.operation.name", "retrieval")
            span.set_attribute("gen_ai.retrieval.query.text", question)
            span.set_attribute(
                "gen_ai.retrieval.documents", json.dumps([{"id": d, "content": t, "score": s} for d, t, s in docs])
            )
        messages = prompt_messages(question, docs)
        reply = client.chat.completions.create(model="gpt-test", messages=messages)
    return dict(docs=docs, messages=messages, answer=reply.choices[0].message.content)


@pytest.fixture
def genai_openai(provider, monkeypatch):
    pytest.importorskip("opentelemetry.instrumentation.openai_v2", reason="the traces extra")
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

    def instrument(content: str):
        monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
        monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", content)
        instrumentor.instrument(tracer_provider=provider[0])
        return provider

    instrumentor = OpenAIInstrumentor()
    yield instrument
    instrumentor.uninstrument()


def test_genai_openai_v2_traces_read_back_as_what_the_system_did(genai_openai, server, tmp_path):
    tp, exporter = genai_openai("SPAN_ONLY")
    client = openai.OpenAI(base_url=server.url, api_key="test")
    did = _genai_rag(tp, client, QUESTION)
    path = tmp_path / "traces.jsonl"
    path.write_text(to_otlp_json(exporter.get_finished_spans()) + "\n")
    result = api.monitor(str(path))
    (row,) = result.rows.to_dict("records")
    output = result.run.outputs.iloc[0]
    sent = server.requests[0]["messages"]
    assert output["prompt_to_model"] == "\n\n".join(m["content"] for m in sent)
    assert output["answer"] == did["answer"] == REPLY
    assert [(p.id, p.text) for p in result.run.suite.cases[0].sources] == [(d, t) for d, t, _ in did["docs"]]
    assert result.run.suite.cases[0].question == QUESTION
    assert row["passed"] and row["session"] == "conv-7" and row["model"] == "gpt-test"
    assert "OpenTelemetry traces (genai)" in result.notes[0]


def test_genai_without_opt_in_content_hides_prompt_and_answer(genai_openai, server, tmp_path):
    tp, exporter = genai_openai("NO_CONTENT")
    client = openai.OpenAI(base_url=server.url, api_key="test")
    _genai_rag(tp, client, QUESTION)
    path = tmp_path / "traces.jsonl"
    path.write_text(to_otlp_json(exporter.get_finished_spans()) + "\n")
    result = api.monitor(str(path))
    (row,) = result.rows.to_dict("records")
    assert row["hidden"] == "prompt, answer"
    assert not row["answered"] and not row["abstained"] and not row["sampled"]
    for check in ("prompt_grounding", "citation_resolvability", "citation_coverage", "fail_closed"):
        assert row[check] is None, check
    board = result.scoreboard.set_index("metric")
    assert (
        board.loc[["prompt_grounding", "citation_resolvability", "fail_closed_rate", "abstention_rate"], "n"] == 0
    ).all()


def test_openinference_langchain_traces_read_back_as_what_the_chain_did(provider, tmp_path):
    pytest.importorskip("openinference.instrumentation.langchain", reason="the traces extra")
    from langchain_core.callbacks import CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.language_models.fake_chat_models import FakeListChatModel
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.runnables import RunnableLambda, RunnablePassthrough
    from openinference.instrumentation.langchain import LangChainInstrumentor

    class Toy(BaseRetriever):
        def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
            return [Document(page_content=t, metadata={"source": d, "score": s}) for d, t, s in retrieve(query)]

    tp, exporter = provider
    instrumentor = LangChainInstrumentor()
    instrumentor.instrument(tracer_provider=tp)
    try:
        template = ChatPromptTemplate.from_messages(
            [("system", "Answer from the passages, citing them as [n].\n{context}"), ("user", "{question}")]
        )
        model = FakeListChatModel(responses=[REPLY])
        number = RunnableLambda(lambda docs: "\n".join(f"[{i}] {d.page_content}" for i, d in enumerate(docs, 1)))
        chain = (
            {"context": Toy() | number, "question": RunnablePassthrough()}
            | template
            | model
            | RunnableLambda(lambda m: m.content)
        )
        answer = chain.invoke(QUESTION)
    finally:
        instrumentor.uninstrument()
    path = tmp_path / "traces.jsonl"
    path.write_text(to_otlp_json(exporter.get_finished_spans()) + "\n")
    result = api.monitor(str(path))
    (row,) = result.rows.to_dict("records")
    docs = retrieve(QUESTION)
    case = result.run.suite.cases[0]
    assert case.question == QUESTION
    assert [(p.id, p.text) for p in case.sources] == [(d, t) for d, t, _ in docs]
    output = result.run.outputs.iloc[0]
    assert output["answer"] == answer == REPLY
    assert all(t in output["prompt_to_model"] for _, t, _ in docs) and QUESTION in output["prompt_to_model"]
    assert [c["source_id"] for c in output["citations"]] == ["library-hours"]
    assert row["passed"] and row["hops"] == 1


def _openllmetry(server: Any, tmp_path: Path, content: str = "true") -> tuple[Path, dict[str, Any]]:
    """The chain of tests/openllmetry_rag.py, run in its own process (see there why), against the fake
    server: (its trace file, what it printed: the answer and each span's attributes by name)."""
    pytest.importorskip("opentelemetry.instrumentation.langchain", reason="the traces extra")
    pytest.importorskip("opentelemetry.instrumentation.openai", reason="the traces extra")
    pytest.importorskip("langchain_core", reason="the dev extra")
    path = tmp_path / "traces.jsonl"
    env = {**os.environ, "TRACELOOP_TRACE_CONTENT": content}
    done = subprocess.run(
        [sys.executable, str(Path(__file__).parent / "openllmetry_rag.py"), str(path), server.url, QUESTION],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return path, json.loads(done.stdout.strip().splitlines()[-1])


def test_openllmetry_traces_read_back_as_what_the_system_did(server, tmp_path):
    path, did = _openllmetry(server, tmp_path)
    spans = did["spans"]
    assert spans["vector_db_retrieve Toy"]["traceloop.span.kind"] == "task"  # OpenLLMetry's, not OpenInference's
    result = api.monitor(str(path))
    (row,) = result.rows.to_dict("records")
    case, output = result.run.suite.cases[0], result.run.outputs.iloc[0]
    sent = server.requests[0]["messages"]
    assert case.question == QUESTION
    assert [(p.id, p.text) for p in case.sources] == [(d, t) for d, t, _ in retrieve(QUESTION)]
    assert output["prompt_to_model"] == "\n\n".join(m["content"] for m in sent)
    assert output["answer"] == did["answer"] == REPLY
    assert [c["source_id"] for c in output["citations"]] == ["library-hours"]
    assert row["passed"] and row["hops"] == 1 and row["model"] == "gpt-test"
    assert row["cited_hops"] == "library-hours: hop 1, in the prompt"
    assert row["tokens"] == spans["openai.chat"]["gen_ai.usage.total_tokens"] > 0


def test_openllmetry_without_content_tracing_hides_what_it_left_out(server, tmp_path):
    """TRACELOOP_TRACE_CONTENT=false leaves out the retriever's documents too: the row has no passages
    because they are hidden, not because nothing was retrieved, so fail-closed is not failed."""
    path, did = _openllmetry(server, tmp_path, content="false")
    assert "traceloop.entity.output" not in did["spans"]["vector_db_retrieve Toy"]
    (row,) = api.monitor(str(path)).rows.to_dict("records")
    assert row["hidden"] == "question, prompt, passages, answer" and row["hops"] == 1
    for check in ("prompt_grounding", "citation_resolvability", "citation_coverage", "fail_closed"):
        assert row[check] is None, check


def _traffic(openinference_openai, server, tmp_path, n: int = 4) -> Path:
    """n traced requests over two sessions, then one whose answer cites a document it retrieved but did
    not put in the prompt; a span a line, as a batching exporter may spread a trace."""
    from openinference.instrumentation import using_session

    tp, exporter = openinference_openai
    client = openai.OpenAI(base_url=server.url, api_key="test")
    for i in range(n):
        with using_session(f"session-{i % 2}"):
            _openinference_rag(tp, client, QUESTION)
    with FakeJudgeServer(reply="On Saturdays the library opens at 10 am [library-weekend].") as other:
        tracer = tp.get_tracer("rag")
        with tracer.start_as_current_span("rag") as root:
            root.set_attribute("openinference.span.kind", "CHAIN")
            root.set_attribute("input.value", QUESTION)
            root.set_attribute("session.id", "session-0")
            with tracer.start_as_current_span("retrieve") as span:
                span.set_attribute("openinference.span.kind", "RETRIEVER")
                docs = retrieve(QUESTION)
                for i, (doc_id, text, _) in enumerate(docs):
                    span.set_attribute(f"retrieval.documents.{i}.document.id", doc_id)
                    span.set_attribute(f"retrieval.documents.{i}.document.content", text)
            reply = openai.OpenAI(base_url=other.url, api_key="test").chat.completions.create(
                model="gpt-test", messages=prompt_messages(QUESTION, docs[:1])
            )
            root.set_attribute("output.value", reply.choices[0].message.content)
    path = tmp_path / "traces.jsonl"
    path.write_text("".join(to_otlp_json([s]) + "\n" for s in exporter.get_finished_spans()))
    return path


def test_a_cited_document_that_never_reached_the_prompt_is_its_own_failure(openinference_openai, server, tmp_path):
    rows = api.monitor(str(_traffic(openinference_openai, server, tmp_path, n=1))).rows
    bad = rows[~rows["passed"]].to_dict("records")
    assert len(bad) == 1 and bad[0]["cited_unprompted"] is False
    assert bad[0]["cited_hops"] == "library-weekend: hop 1, not in the prompt"
    assert (
        "cited_unprompted: cited document(s) library-weekend were retrieved but never reached the prompt"
        in bad[0]["fail_reasons"]
    )
    assert rows["cited_unprompted"].tolist().count(True) == 1


def test_slices_windows_timeseries_and_hop_facts_work_on_traces(openinference_openai, server, tmp_path):
    from qaeval.reports import hop_facts

    history = tmp_path / "history.jsonl"
    path = _traffic(openinference_openai, server, tmp_path)
    result = api.monitor(str(path), by=["session"], time_window="1D", timeseries=str(history), min_rows=1)
    assert set(result.slices["group"]) == {"session-0", "session-1"}
    assert len(result.windows[result.windows["slice"] == "(all)"]) == len(result.scoreboard)
    (line,) = [json.loads(x) for x in history.read_text().splitlines()]
    assert line["hops"] == [
        dict(hop=1, kind="retriever", rows=5, documents=10, cited=5, prompted=9, prompt_rows=5, prompt_documents=10)
    ]
    assert (
        line["metrics"]["hop1_retriever_prompted_share"] == 9 / 10 and line["n"]["hop1_retriever_prompted_share"] == 10
    )
    assert line["metrics"]["hop1_retriever_cited_share"] == 5 / 10 and line["metrics"]["hop1_retriever_row_share"] == 1
    hops = result.hops
    overall = hops[hops["window"].isna() & (hops["slice"] == "(all)")].to_dict("records")
    assert overall == [
        dict(
            window=None,
            slice="(all)",
            group="(all)",
            hop=1,
            kind="retriever",
            rows=5,
            documents=10,
            cited=5,
            prompted=9,
            prompt_rows=5,
            prompt_documents=10,
        )
    ]
    by_session = hops[hops["window"].isna() & (hops["slice"] == "session")].set_index("group")
    assert by_session.loc["session-0", "rows"] == 3 and by_session.loc["session-0", "prompted"] == 5
    assert set(hops["window"].dropna()) == set(result.windows["window"])
    assert "hop 1 retriever: 5 row(s), 10 document(s), 5 cited, 9 in the prompt" in result.summary_text()
    html = str(hop_facts(result))
    assert "Retrieval hops" in html and "retriever" in html


DAY = 86_400 * 10**9


def _rag_on(tp: TracerProvider, client: Any, day: int, *, prompted: int = 2, rerank: bool = True) -> None:
    """One request of the docs' system on ``day`` (the root's start time), the openai call traced by
    OpenInference's instrumentation: a retriever, a reranker keeping both documents (or none), and a
    prompt holding the first ``prompted`` of them."""
    from openinference.semconv.trace import SpanAttributes

    tracer = tp.get_tracer("rag")
    with tracer.start_as_current_span("rag", start_time=1_767_225_600 * 10**9 + day * DAY) as root:
        root.set_attribute(SpanAttributes.OPENINFERENCE_SPAN_KIND, "CHAIN")
        root.set_attribute(SpanAttributes.INPUT_VALUE, QUESTION)
        docs = retrieve(QUESTION)
        hops = [("retrieve", "RETRIEVER", "retrieval.documents")]
        hops += [("rerank", "RERANKER", "reranker.output_documents")] if rerank else []
        for name, kind, key in hops:
            with tracer.start_as_current_span(name) as span:
                span.set_attribute(SpanAttributes.OPENINFERENCE_SPAN_KIND, kind)
                for i, (doc_id, text, _) in enumerate(docs):
                    span.set_attribute(f"{key}.{i}.document.id", doc_id)
                    span.set_attribute(f"{key}.{i}.document.content", text)
        client.chat.completions.create(model="gpt-test", messages=prompt_messages(QUESTION, docs[:prompted]))


def test_hop_rates_go_into_the_history_and_alarm_when_a_hop_changes(openinference_openai, server, tmp_path):
    """Three days on which every retrieved document reached the prompt through a reranker, then a day on
    which the reranker is gone and the prompt holds one document of two: the day's line has the hops'
    rates, and the retriever's prompted share and the reranker's row share (a hop the history knows, no
    row had) leave their bands. The record's alarms are checked again from its rows when it is loaded."""
    tp, exporter = openinference_openai
    client = openai.OpenAI(base_url=server.url, api_key="test")
    for day in range(3):
        for _ in range(2):
            _rag_on(tp, client, day)
    for _ in range(2):
        _rag_on(tp, client, 3, prompted=1, rerank=False)
    path = tmp_path / "traces.jsonl"
    path.write_text("".join(to_otlp_json([s]) + "\n" for s in exporter.get_finished_spans()))
    history, record = tmp_path / "history.jsonl", tmp_path / "monitor.json"
    result = api.monitor(str(path), time_window="1D", timeseries=str(history), min_rows=1, save=str(record))
    lines = [json.loads(x) for x in history.read_text().splitlines()]
    assert [x["metrics"]["hop1_retriever_prompted_share"] for x in lines] == [1, 1, 1, 0.5]
    assert [x["metrics"]["hop2_reranker_row_share"] for x in lines] == [1, 1, 1, 0]
    assert lines[3]["metrics"]["hop2_reranker_prompted_share"] is None  # no document to be a share of
    assert [h["kind"] for h in lines[3]["hops"]] == ["retriever"]
    alarmed = {a["metric"] for a in result.alarms}
    assert alarmed == {"hop1_retriever_prompted_share", "hop2_reranker_row_share"}, result.alarms
    assert result.rows["passed"].all()  # no check failed: only the hops say the pipeline changed
    text = result.summary_text()  # per window too, where the change shows
    assert "2026-01-04T00:00:00 hop 1 retriever: 2 row(s), 4 document(s), 2 cited, 2 in the prompt" in text
    assert "2026-01-03T00:00:00 hop 2 reranker: 2 row(s)" in text and "ALARM" in text
    assert api.load_run(record).verdict == "ALARM"


def test_a_history_written_before_hops_were_kept_is_read_and_bands_hops_from_the_lines_that_have_them(
    openinference_openai, server, tmp_path
):
    tp, exporter = openinference_openai
    client = openai.OpenAI(base_url=server.url, api_key="test")
    for day in range(4):
        _rag_on(tp, client, day, prompted=1 if day == 3 else 2)
    path = tmp_path / "traces.jsonl"
    path.write_text(to_otlp_json(exporter.get_finished_spans()) + "\n")
    history = tmp_path / "history.jsonl"
    api.monitor(str(path), time_window="1D", timeseries=str(history), min_rows=1)
    old = []
    for text in history.read_text().splitlines()[:3]:  # the first three days, as an older qaeval wrote them
        line = json.loads(text)
        del line["hops"]
        line["metrics"] = {k: v for k, v in line["metrics"].items() if not k.startswith("hop")}
        line["n"] = {k: v for k, v in line["n"].items() if not k.startswith("hop")}
        old.append(json.dumps(line))
    history.write_text("".join(x + "\n" for x in old))
    result = api.monitor(str(path), time_window="1D", timeseries=str(history), min_rows=1)
    assert result.alarms == []  # the metrics held; no earlier line holds a hop's rate to band it with
    (day4,) = result.timeline
    bands = {b["metric"]: b for b in day4["bands"]}
    assert bands["hop1_retriever_prompted_share"]["window_n"] == 0
    assert bands["deterministic_pass_rate"]["window_n"] == 3


def test_propose_from_monitor_reads_the_span_back_from_the_trace_file(openinference_openai, server, tmp_path):
    record = tmp_path / "monitor.json"
    path = _traffic(openinference_openai, server, tmp_path, n=2)
    result = api.monitor(str(path), save=str(record))
    assert (~result.rows["passed"]).sum() == 1
    proposal = api.propose(from_monitor=str(record), sheet=str(tmp_path / "r.csv"), n=3)
    (failed,) = [c for c in proposal.candidates if c.kind == "check_failed"]
    assert failed.question == QUESTION and "cited_unprompted" in failed.why
    assert [p.id for p in failed.passages] == ["library-hours", "library-weekend"]
    assert failed.answer == "On Saturdays the library opens at 10 am [library-weekend]."


def test_a_json_file_and_log_format_otlp(openinference_openai, server, tmp_path, capsys):
    tp, exporter = openinference_openai
    _openinference_rag(tp, openai.OpenAI(base_url=server.url, api_key="test"), QUESTION)
    single = tmp_path / "traces.json"
    single.write_text(json.dumps(json.loads(to_otlp_json(exporter.get_finished_spans())), indent=2))
    assert len(api.monitor(str(single)).rows) == 1
    odd = tmp_path / "spans.txt"
    odd.write_text(to_otlp_json(exporter.get_finished_spans()) + "\n")
    assert main(["monitor", "--logs", str(odd), "--log-format", "otlp"]) == 0
    assert main(["monitor", "--logs", str(odd)]) == 64
    assert "or give --log-format" in capsys.readouterr().err


def test_the_docs_traced_example_walks_through_as_the_traces_page_says(tmp_path, capsys):
    """The traces page's commands, as a new user runs them: the example system writes its traces, monitor
    reads them, and the report shows the hops; the request in four that cites a passage its prompt never
    held fails as cited_unprompted, its citations read from what the system recorded."""
    root = Path(__file__).resolve().parent.parent
    traces = tmp_path / "traces.jsonl"
    done = subprocess.run(
        [sys.executable, str(root / "examples" / "traced_rag.py"), str(traces)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "36 spans of 12 requests written" in done.stdout
    record, html, history = tmp_path / "m.json", tmp_path / "m.html", tmp_path / "h.jsonl"
    args = ["monitor", "--logs", str(traces), "--by", "session", "--annotations", str(tmp_path / "s.parquet")]
    args += ["--window", "1D", "--timeseries", str(history), "--save", str(record), "--html", str(html)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "hop 1 retriever: 12 row(s), 24 document(s), 12 cited, 21 in the prompt (of 12 row(s) showing it)" in out
    rows = api.load_run(record).rows
    assert (rows["citations_from"] == "qaeval.citations").all()
    assert rows["cited_unprompted"].tolist().count(False) == 3
    page = html.read_text()
    assert "Retrieval hops: what each returned, what was cited and prompted" in page
    assert "session=session-0" in page and "rows showing the prompt" in page
    assert json.loads(history.read_text())["metrics"]["hop1_retriever_prompted_share"] == 21 / 24
