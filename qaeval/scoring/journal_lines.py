"""What a journal line holds (``qaeval.scoring.journal``), as plain JSON and back: a judge's response,
and an output row checked as a worker's reply is, so a line qaeval could not have written is refused."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, fields
from typing import Any

from qaeval.scoring.judge import JudgeResponse
from qaeval.scoring.rubric import AxisVerdict
from qaeval.system.contract import output_row
from qaeval.system.validate import validate_plain

JOURNAL_TEXT_LIMIT = 1 << 20  # an error or log text a journal line may carry


def response_to_plain(response: Any) -> dict[str, Any] | None:
    """A judge's response as a journal keeps it; None for anything that is not a ``JudgeResponse`` of plain
    values (it is asked again on resume)."""
    if type(response) is not JudgeResponse:
        return None
    try:
        plain = {f.name: getattr(response, f.name) for f in fields(JudgeResponse)}
        plain["verdicts"] = [asdict(v) for v in response.verdicts]
        json.dumps(plain, allow_nan=False)
    except (TypeError, ValueError, AttributeError):
        return None
    return plain


def _count(value: Any) -> bool:
    return value is None or (type(value) is int and 0 <= value < 2**63)


def response_from_plain(raw: Any) -> JudgeResponse | None:
    """The response a journal line holds, or None when it is not one qaeval could have written."""
    if not (
        isinstance(raw, dict)
        and isinstance(raw.get("case_id"), str)
        and isinstance(raw.get("verdicts"), list)
        and (raw.get("error") is None or isinstance(raw.get("error"), str))
        and _count(raw.get("prompt_tokens"))
        and _count(raw.get("completion_tokens"))
        and isinstance(raw.get("cached"), bool)
    ):
        return None
    verdicts = []
    for v in raw["verdicts"]:
        if not (
            isinstance(v, dict)
            and isinstance(v.get("axis"), str)
            and all(isinstance(v.get(k, ""), str) for k in ("quote", "rationale", "target"))
            and (v.get("score") is None or type(v.get("score")) in (int, float, str))
        ):
            return None
        verdicts.append(
            AxisVerdict(v["axis"], v.get("score"), v.get("quote", ""), v.get("rationale", ""), v.get("target", ""))
        )
    return JudgeResponse(
        raw["case_id"], verdicts, raw["error"], raw["prompt_tokens"], raw["completion_tokens"], raw["cached"]
    )


def row_from_plain(raw: Any, case_id: str) -> dict[str, Any] | None:
    """An output row as the pool makes it, from a journal line's output, checked as a worker's reply is."""
    if not isinstance(raw, dict):
        return None
    error, latency, logs = raw.get("error"), raw.get("latency_s"), raw.get("logs", "")
    if not (
        (error is None or (isinstance(error, str) and len(error) <= JOURNAL_TEXT_LIMIT))
        and isinstance(latency, (int, float))
        and not isinstance(latency, bool)
        and math.isfinite(latency)
        and latency >= 0
        and isinstance(logs, str)
        and len(logs) <= JOURNAL_TEXT_LIMIT
    ):
        return None
    if error is not None:
        return output_row(case_id, None, error, float(latency), logs)
    fields = {k: v for k, v in raw.items() if k not in ("case_id", "error", "latency_s", "logs", "output_fingerprint")}
    lists = [fields.get(name) for name in ("citations", "retrieved_ids", "passages")]
    if not all(isinstance(v, list) for v in lists):
        return None
    citations, retrieved, passages = (v if isinstance(v, list) else [] for v in lists)  # as the worker sends them
    fields |= dict(
        citations={"__type__": "list", "items": citations},
        retrieved_ids={"__type__": "list", "items": retrieved},
        passages={"__type__": "list", "items": [{"passage": p} for p in passages]},
    )
    checked, problems = validate_plain(fields)
    if problems or checked is None:
        return None
    return output_row(case_id, checked, None, float(latency), logs)
