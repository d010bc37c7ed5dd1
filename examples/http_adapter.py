"""A skeleton adapter for a RAG service you run over HTTP. Copy it, point it at your service, and name
it on the command line:

    QAEVAL_SUT_URL=http://localhost:8000/answer \
        .venv/bin/qaeval run --data golden --adapter examples.http_adapter:make_adapter

It sends only what the SUT may see (an opaque id, the question and the case's sources) and maps the
service's JSON reply onto a SUTOutput. Adjust ``to_output`` to your service's field names. Errors and
timeouts need no handling here: the runner records them as failed cases and goes on.
"""

from __future__ import annotations

import json
import os
import urllib.request

from qaeval import CaseView, Citation, SUTOutput


class HttpRagAdapter:
    """Standard library only; swap in httpx or requests with a session if your service needs auth,
    connection pooling or retries."""

    def __init__(self, url: str, timeout: float = 30.0) -> None:
        self.url = url
        self.timeout = timeout

    def answer(self, case: CaseView) -> SUTOutput:
        payload = {
            "request_id": case.id,
            "question": case.question,
            "documents": [{"id": s.id, "title": s.title, "text": s.text} for s in case.sources],
        }
        request = urllib.request.Request(
            self.url, data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"}, method="POST"
        )
        with urllib.request.urlopen(request, timeout=self.timeout) as reply:  # raises on HTTP errors
            return self.to_output(json.loads(reply.read()))

    @staticmethod
    def to_output(data: dict) -> SUTOutput:
        return SUTOutput(
            answer=data.get("answer") or "",
            citations=[Citation(c["document_id"], c["supports"]) for c in data.get("citations", [])],
            retrieved_ids=[d["id"] for d in data.get("retrieved", [])],
            abstained=bool(data.get("abstained", False)),
            model_was_called=bool(data.get("llm_called", False)),
            prompt_to_model=data.get("prompt"),  # record the exact prompt: the leak check needs it
            computed_aggregate=data.get("aggregate"),
        )


def make_adapter() -> HttpRagAdapter:
    return HttpRagAdapter(os.environ.get("QAEVAL_SUT_URL", "http://localhost:8000/answer"))
