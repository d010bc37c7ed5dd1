#!/usr/bin/env python3
"""The monitor on OpenTelemetry traces at scale: 100,000 traces (1,000,000 spans) through ``qaeval monitor``.

    python benchmarks/bench_traces.py                        # 100,000 traces, judge on 2,000
    python benchmarks/bench_traces.py --traces 10000

Each trace is an OpenInference RAG request of 10 spans, written as the collector's file exporter writes a
batch (one ``ExportTraceServiceRequest`` a line): a chain root with the question and the answer, an
embedding span, a retriever returning 4 documents, a reranker keeping 3, four tool spans, and an LLM span
with its prompt, answer and token counts (a tenth of the answers cite a document the reranker dropped,
so the prompt never held it). A whole ``qaeval monitor --logs FILE --by session --window 1D --sample
2000`` runs in a fresh process with the offline judge, the checks on every row: its wall time, CPU time
and peak resident memory (the targets: under 3 minutes on 2 cores, under 1 GB).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

T0 = 1_772_323_200_000_000_000  # 2026-03-01T00:00:00Z
TEXT = "The {w} branch lends {n} items per card and renews them twice unless another patron holds them."
WORDS = ("north", "south", "east", "west", "river", "hill", "harbour")


def _attrs(values: dict) -> list[dict]:
    out = []
    for k, v in values.items():
        kind = "intValue" if isinstance(v, int) else "doubleValue" if isinstance(v, float) else "stringValue"
        out.append({"key": k, "value": {kind: str(v) if kind == "intValue" else v}})
    return out


def _span(tid: str, sid: int, parent: int, start: int, name: str, attrs: dict) -> dict:
    return {
        "traceId": tid,
        "spanId": f"{sid:016x}",
        "parentSpanId": f"{parent:016x}" if parent else "",
        "name": name,
        "kind": "SPAN_KIND_INTERNAL",
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(start + 1_000_000),
        "attributes": _attrs(attrs),
    }


def trace(i: int) -> str:
    tid = f"{i + 1:032x}"
    t0 = T0 + (i % 14) * 86_400_000_000_000 + i * 1_000_000
    base = i * 10 + 1
    docs = [(f"doc-{(i + j) % 50}", TEXT.format(w=WORDS[(i + j) % 7], n=(i + j) % 13 + 2)) for j in range(4)]
    question = f"How many items does the {WORDS[i % 7]} branch lend?"
    kept = docs[:3]
    cited = docs[3][0] if i % 10 == 0 else kept[0][0]
    answer = f"The {WORDS[i % 7]} branch lends {i % 13 + 2} items per card [{cited}]."
    retriever = {"openinference.span.kind": "RETRIEVER", "input.value": question}
    reranker = {"openinference.span.kind": "RERANKER", "reranker.query": question}
    for j, (doc_id, text) in enumerate(docs):
        retriever |= {
            f"retrieval.documents.{j}.document.id": doc_id,
            f"retrieval.documents.{j}.document.content": text,
            f"retrieval.documents.{j}.document.score": 1.0 - j / 10,
        }
    for j, (doc_id, text) in enumerate(kept):
        reranker |= {
            f"reranker.output_documents.{j}.document.id": doc_id,
            f"reranker.output_documents.{j}.document.content": text,
        }
    context = "\n".join(f"[{doc_id}] {text}" for doc_id, text in kept)
    llm = {
        "openinference.span.kind": "LLM",
        "llm.model_name": f"model-{i % 3}",
        "llm.input_messages.0.message.role": "system",
        "llm.input_messages.0.message.content": f"Answer from the passages, citing their ids.\n{context}",
        "llm.input_messages.1.message.role": "user",
        "llm.input_messages.1.message.content": question,
        "llm.output_messages.0.message.role": "assistant",
        "llm.output_messages.0.message.content": answer,
        "llm.token_count.prompt": 120,
        "llm.token_count.completion": 20,
        "llm.token_count.total": 140,
    }
    root = {
        "openinference.span.kind": "CHAIN",
        "input.value": question,
        "output.value": answer,
        "session.id": f"session-{i % 5}",
    }
    spans = [_span(tid, base + 1, base, t0 + 10, "embed", {"openinference.span.kind": "EMBEDDING"})]
    spans += [_span(tid, base + 2, base, t0 + 20, "retrieve", retriever)]
    spans += [_span(tid, base + 3, base, t0 + 30, "rerank", reranker)]
    spans += [
        _span(tid, base + 4 + k, base, t0 + 40 + k, f"tool-{k}", {"openinference.span.kind": "TOOL"}) for k in range(4)
    ]
    spans += [_span(tid, base + 8, base, t0 + 50, "chat", llm), _span(tid, base + 9, base + 8, t0 + 51, "http", {})]
    spans += [_span(tid, base, 0, t0, "rag", root)]
    request = {
        "resourceSpans": [
            {
                "resource": {"attributes": _attrs({"service.name": "rag"})},
                "scopeSpans": [{"scope": {"name": "bench"}, "spans": spans}],
            }
        ]
    }
    return json.dumps(request)


def write_traces(path: Path, n: int) -> Path:
    with open(path, "w", encoding="utf-8") as f:
        for start in range(0, n, 10_000):
            f.write("".join(trace(i) + "\n" for i in range(start, min(n, start + 10_000))))
    return path


def whole_run(path: Path, sample: int) -> tuple[float, float, float, str]:
    """(wall seconds, CPU seconds, peak RSS in MiB, the command's first line) of one `qaeval monitor` process."""
    command = [
        sys.executable,
        "-m",
        "qaeval",
        "monitor",
        "--logs",
        str(path),
        "--by",
        "session",
        "--window",
        "1D",
        "--sample",
        str(sample),
        "--seed",
        "1",
        "--quiet",
    ]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode not in (0, 3):
        sys.exit(f"qaeval monitor failed ({done.returncode}): {done.stderr[-2000:]}")
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, done.stdout.splitlines()[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", type=int, default=100_000)
    parser.add_argument("--sample", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="qaeval-bench-traces-") as tmp:
        path = write_traces(Path(tmp) / "traces.jsonl", args.traces)
        size = path.stat().st_size / 2**20
        before = os.getloadavg()[0]
        wall, cpu, peak, first = whole_run(path, args.sample)
        spans = args.traces * 10
        print(
            f"qaeval monitor, {args.traces:,} traces ({spans:,} spans, {size:,.0f} MiB of OTLP/JSON), judge on "
            f"{args.sample:,}: {wall:,.1f} s wall ({spans / wall:,.0f} spans/s; target under 180 s), {cpu:,.1f} "
            f"CPU s, peak RSS {peak:,.0f} MiB (target: under 1,024 MiB); load average {before:.1f} at the "
            f"start and {os.getloadavg()[0]:.1f} at the end, on {os.cpu_count()} cores (other jobs' load "
            "stretches the wall time, not the CPU time)"
        )
        print(f"  {first}")


if __name__ == "__main__":
    main()
