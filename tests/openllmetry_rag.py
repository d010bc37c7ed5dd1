"""A LangChain RAG chain traced by OpenLLMetry (traceloop's opentelemetry-instrumentation-langchain and
-openai), run in its own process by tests/test_traces.py:

    python tests/openllmetry_rag.py OUT.jsonl BASE_URL QUESTION

OpenLLMetry's ``uninstrument()`` leaves its wrappers in place (it names what it wrapped as
``unwrap("openai.resources.chat.completions", "Completions.create")``, which opentelemetry-instrumentation's
``unwrap`` reads as the module ``openai.resources.chat`` and finds nothing to undo), so its spans would go
on being made around every later openai and LangChain call of a test process. Here they end with the
process. Writes the spans, a span a line, as OTLP/JSON, and prints what the chain answered (JSON).
"""

from __future__ import annotations

import json
import sys
from typing import Any


def chain(client: Any) -> Any:
    """The retriever (a LangChain retriever: OpenLLMetry's ``vector_db_retrieve`` span) feeds a step that
    prompts the model with the numbered passages through the openai client."""
    from langchain_core.callbacks import CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.runnables import RunnableLambda
    from test_traces import prompt_messages, retrieve

    class Toy(BaseRetriever):
        def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
            return [Document(page_content=t, metadata={"source": d, "score": s}) for d, t, s in retrieve(query)]

    def generate(given: dict[str, Any]) -> str:
        docs = [(d.metadata["source"], d.page_content, 0.0) for d in given["docs"]]
        reply = client.chat.completions.create(model="gpt-test", messages=prompt_messages(given["question"], docs))
        return str(reply.choices[0].message.content)

    return {"docs": Toy(), "question": RunnableLambda(lambda q: q)} | RunnableLambda(generate)


def main(out: str, base_url: str, question: str) -> None:
    import openai
    from opentelemetry.instrumentation.langchain import LangchainInstrumentor
    from opentelemetry.instrumentation.openai import OpenAIInstrumentor
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from test_traces import to_otlp_json

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    LangchainInstrumentor().instrument(tracer_provider=provider)
    OpenAIInstrumentor().instrument(tracer_provider=provider)
    answer = chain(openai.OpenAI(base_url=base_url, api_key="test")).invoke(question)
    spans = exporter.get_finished_spans()
    with open(out, "w", encoding="utf-8") as f:
        f.write("".join(to_otlp_json([s]) + "\n" for s in spans))  # a span a line, as batches spread a trace
    attributes = {
        s.name: {k: v if isinstance(v, (str, int, float)) else list(v) for k, v in s.attributes.items()} for s in spans
    }
    print(json.dumps({"answer": answer, "spans": attributes}))


if __name__ == "__main__":
    main(*sys.argv[1:4])
