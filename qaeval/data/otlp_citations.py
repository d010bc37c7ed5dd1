"""A trace row's citations: what the system recorded in ``qaeval.citations`` on its own span (a JSON list of
document ids or of ``{source_id, claim}``; no convention records citations), else the answer's markers:
``[1]`` for the row's n-th passage, ``[doc-id]`` for a document id.
"""

from __future__ import annotations

import json
import re
from typing import Any

from qaeval.data.otlp import REDACTED, BadTrace, Span, json_value

MAX_CITATIONS = 1000  # as a log row's (qaeval.data.logs.MAX_ITEMS)

CITATIONS = "qaeval.citations"


def cited_by(span: Span, root: Span, by_id: dict[str, Span], last: bool) -> Span | None:
    """The span whose ``qaeval.citations`` the row takes: the answering span or its nearest ancestor that
    records it, the root only for the trace's last row; None when none does."""
    here: Span | None = span
    while here is not None:
        if (here is not root or last) and here.attrs.get(CITATIONS) not in (None, REDACTED):
            return here
        here = by_id.get(here.parent) if here.parent else None
    return None


def recorded_citations(span: Span, answer: str | None) -> list[dict[str, str]]:
    """The span's ``qaeval.citations`` as ``{source_id, claim}`` (an id alone claims the whole answer);
    a BadTrace naming the span when it is not such a list."""
    value = span.attrs[CITATIONS]
    items = json_value(value)
    where = f"span {span.span_id}'s {CITATIONS}"
    if isinstance(value, str) and items is value:
        raise BadTrace(f"{where} is not JSON: record a JSON list of document ids or of {{source_id, claim}}")
    if not isinstance(items, list):
        raise BadTrace(f"{where} must be a list of document ids or of {{source_id, claim}}, got {type(items).__name__}")
    if len(items) > MAX_CITATIONS:
        raise BadTrace(f"{where} holds {len(items)} citations (limit {MAX_CITATIONS}, as for a log row)")
    out = []
    for i, item in enumerate(items, 1):
        if isinstance(item, dict) and set(item) <= {"source_id", "claim"}:
            source, claim = item.get("source_id"), item.get("claim", answer or "")
        else:
            source, claim = item, answer or ""
        if isinstance(source, bool) or not isinstance(source, (str, int)) or source == "" or not isinstance(claim, str):
            raise BadTrace(
                f"{where}: citation {i} must be a document id or {{source_id, claim}} (both text), "
                f"got {json.dumps(item)[:80]}"
            )
        out.append({"source_id": str(source), "claim": claim})
    return out


MARKER = re.compile(r"\[([^\[\]\n]{1,200})\](?!\()")  # [1], [2, 3], [doc-id]; not a Markdown link's [text](url)
SENTENCE = re.compile(r"(?<=[.!?])\s+")


def citations(answer: str, passages: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The answer's markers as ``{source_id, claim}``: ``[n]`` names the row's n-th passage, ``[id]`` a
    document id; the claim is the marker's sentence without markers (the sentence before, when the
    marker stands after the full stop). A number past the passages names ``[n]``: that citation does not
    resolve."""
    ids = [p["id"] for p in passages]
    known = set(ids)
    out: list[dict[str, str]] = []
    previous = ""
    for sentence in SENTENCE.split(answer):
        claim = MARKER.sub("", sentence).strip() or previous
        for match in MARKER.finditer(sentence):
            for token in (t.strip() for t in match.group(1).split(",")):
                if token.isdigit():
                    n = int(token)
                    source = ids[n - 1] if 1 <= n <= len(ids) else f"[{n}]"
                elif token in known or (token and " " not in token and re.fullmatch(r"[\w.:/#-]+", token)):
                    source = token
                else:
                    continue
                out.append({"source_id": source, "claim": claim})
        previous = claim
    return out
