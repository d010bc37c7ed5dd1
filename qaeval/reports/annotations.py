"""Scores back where the team looks: a monitor's per-row results as span annotations.

One row per (answering span, metric) of a log read from traces: ``trace_id``, ``context.span_id``,
``name`` (the metric), ``score``, ``label`` and ``explanation``. ``.jsonl``, ``.csv`` or ``.parquet``
write a table in the shape of Arize Phoenix's ``SpanEvaluations``; ``.json`` or ``.otlp.jsonl`` write
OTLP/JSON, each answering span again with a ``gen_ai.evaluation.result`` event per metric.

A check scores 1 (passed) or 0 (failed), citation coverage the share of sentences covered, the judge
its 0-2 score; a check not assessed on a row has no score and the label ``not_assessed``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd

from qaeval.core.errors import UsageError
from qaeval.core.files import ANNOTATION_COLUMNS, write_atomic

COLUMNS = ANNOTATION_COLUMNS
CHECKS = ("prompt_grounding", "citation_resolvability", "citation_coverage", "fail_closed", "cited_unprompted")
JUDGED = ("faithfulness", "citation_correctness")
EVENT = "gen_ai.evaluation.result"
TABLES = (".jsonl", ".csv", ".parquet")


def annotation_kind(path: str) -> str:
    """``otlp`` or ``table`` by the name (a UsageError for another ending)."""
    name = path.lower()
    if name.endswith((".otlp.jsonl", ".json")):
        return "otlp"
    if name.endswith(TABLES):
        return "table"
    raise UsageError(
        f"annotations {path}: the name must end in .jsonl, .csv or .parquet (a table of span annotations) "
        "or .json or .otlp.jsonl (OTLP/JSON with gen_ai.evaluation.result events)"
    )


def _reason(reasons: Any, check: str) -> str:
    if not isinstance(reasons, str):
        return ""
    return "; ".join(part[len(check) + 2 :] for part in reasons.split("; ") if part.startswith(check + ": "))


def _item(r: dict[str, Any], name: str, score: float | None, label: str, explanation: str) -> dict[str, Any]:
    return {
        "context.span_id": r["span_id"],
        "trace_id": r["trace_id"],
        "name": name,
        "score": score,
        "label": label,
        "explanation": explanation,
    }


def span_annotations(rows: pd.DataFrame) -> Iterator[dict[str, Any]]:
    """One dict per (trace row, metric): the ``COLUMNS``."""
    for r in rows.to_dict("records"):
        if not isinstance(r.get("span_id"), str):
            continue
        for check in CHECKS:
            value = r.get(check)
            if value is None or value is pd.NA:
                hidden = r.get("hidden")
                why = (
                    f"not assessed: the instrumentation hid the {hidden}" if isinstance(hidden, str) else "not assessed"
                )
                yield _item(r, check, None, "not_assessed", why)
                continue
            score = 1.0 if value else 0.0
            if check == "citation_coverage" and r["sentences"]:
                score = r["covered"] / r["sentences"]
            why = _reason(r.get("fail_reasons"), check) or ("passed" if value else "failed")
            if check == "cited_unprompted" and isinstance(r.get("cited_hops"), str):
                why = f"{why} ({r['cited_hops']})"
            yield _item(r, check, score, "pass" if value else "fail", why)
        for axis in JUDGED:
            value = r.get(axis)
            if r.get("sampled") and value is not None and value is not pd.NA:
                yield _item(r, axis, float(value), f"{int(value)}/2", "the judge's score (0 to 2)")


def _attr(key: str, value: Any) -> dict[str, Any]:
    kind = {float: "doubleValue", str: "stringValue"}[type(value)]
    return {"key": key, "value": {kind: value}}


def _otlp_lines(rows: pd.DataFrame, spans: dict[str, dict[str, Any]]) -> Iterator[str]:
    by_span: dict[str, list[dict[str, Any]]] = {}
    for a in span_annotations(rows):
        by_span.setdefault(a["context.span_id"], []).append(a)
    for span_id, items in by_span.items():
        facts = spans[span_id]
        events = []
        for a in items:
            attrs = [_attr("gen_ai.evaluation.name", a["name"])]
            if a["score"] is not None and math.isfinite(a["score"]):
                attrs.append(_attr("gen_ai.evaluation.score.value", float(a["score"])))
            attrs += [
                _attr("gen_ai.evaluation.score.label", a["label"]),
                _attr("gen_ai.evaluation.explanation", a["explanation"]),
            ]
            events.append({"timeUnixNano": str(facts["end"]), "name": EVENT, "attributes": attrs})
        span = {
            "traceId": items[0]["trace_id"],
            "spanId": span_id,
            "name": facts["name"],
            "startTimeUnixNano": str(facts["start"]),
            "endTimeUnixNano": str(facts["end"]),
            "events": events,
        }
        if facts["parent"]:
            span["parentSpanId"] = facts["parent"]
        yield json.dumps(
            {
                "resourceSpans": [
                    {
                        "resource": {"attributes": [_attr("service.name", "qaeval")]},
                        "scopeSpans": [{"scope": {"name": "qaeval.annotations"}, "spans": [span]}],
                    }
                ]
            },
            ensure_ascii=False,
        )


def _span_facts(source: Any, fmt: str | None) -> dict[str, dict[str, Any]]:
    """The answering spans' names, parents and times, read again from the traces."""
    from qaeval.data.log_formats import raw_rows
    from qaeval.data.otlp_rows import TraceRaw

    problems: list[Any] = []
    return {
        raw.facts["span_id"]: raw.facts["span"]
        for _, raw in raw_rows(source, problems, fmt=fmt)
        if isinstance(raw, TraceRaw)
    }


def write_annotations(rows: pd.DataFrame, path: str, source: Any, fmt: str | None = None) -> str:
    """Write the annotations; the note that says where and how many."""
    items = list(span_annotations(rows))
    if annotation_kind(path) == "otlp":
        lines = list(_otlp_lines(rows, _span_facts(source, fmt)))
        if path.lower().endswith(".json"):
            merged = [json.loads(x)["resourceSpans"][0] for x in lines]
            write_atomic(path, json.dumps({"resourceSpans": merged}, ensure_ascii=False) + "\n")
        else:
            write_atomic(path, "".join(x + "\n" for x in lines))
    else:
        table = pd.DataFrame(items, columns=list(COLUMNS))
        table["score"] = table["score"].astype(float)
        suffix = Path(path).suffix.lower()
        if suffix == ".csv":
            write_atomic(path, table.to_csv(index=False))
        elif suffix == ".jsonl":
            write_atomic(path, table.to_json(orient="records", lines=True, force_ascii=False))
        else:
            import io

            buffer = io.BytesIO()
            table.to_parquet(buffer, index=False)
            write_atomic(path, buffer.getvalue())
    spans = len({a["context.span_id"] for a in items})
    return f"{len(items)} annotation(s) on {spans} span(s) written to {path}"


def check_annotations_path(path: str, source: Any, fmt: str | None) -> None:
    """Before anything is read: the name gives a kind, and the log is read from traces."""
    from qaeval.data.log_formats import log_format

    annotation_kind(path)
    if log_format(source, fmt) != "otlp":
        raise UsageError(
            "annotations are written back on the traces' spans: give logs read from OpenTelemetry traces "
            "(OTLP/JSON), not rows"
        )
    if re.search(r"\.parquet$", path, re.I):
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            from qaeval.core.errors import install_extra

            raise UsageError(f"writing Parquet annotations needs pyarrow: {install_extra('parquet')}") from None
