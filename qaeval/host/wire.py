"""A judge's requests and responses as plain JSON, both ways: what crosses between the harness and a custom
judge's process (``qaeval.host.clients``, ``qaeval.host.serve``). Decoding is strict: a response that
is not what it says it is becomes a judge error for its case, never a verdict."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from qaeval.core.errors import UsageError
from qaeval.core.text import bounded_text, not_unicode
from qaeval.scoring.judge import NOT_UNICODE, AxisVerdict, CitedSource, JudgeConfig, JudgeRequest, JudgeResponse


def request_to_plain(req: JudgeRequest) -> dict[str, Any]:
    return dict(
        case_id=req.case_id,
        question=req.question,
        answer=req.answer,
        gold_answer=req.gold_answer,
        citations=[
            dict(source_id=c.source_id, claim=c.claim, text=c.text, decoy_id=c.decoy_id, decoy_text=c.decoy_text)
            for c in req.citations
        ],
        messages=[dict(m) for m in req.messages],
    )


def request_from_plain(plain: Mapping[str, Any]) -> JudgeRequest:
    citations = tuple(CitedSource(**c) for c in plain["citations"])
    return JudgeRequest(
        plain["case_id"], plain["question"], plain["answer"], plain["gold_answer"], citations, tuple(plain["messages"])
    )


def _scalar(value: Any) -> Any:
    """A score as JSON can carry it; anything else is shown by its type, and is not a score."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value if abs(value) < 2**63 else f"<int of {len(str(abs(value)))} digits>"
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    return f"<{type(value).__name__}>"


def response_to_plain(resp: Any) -> dict[str, Any]:
    """One of the judge's responses as JSON (in the host). A JudgeResponse in name only is sent as what it is."""
    if not isinstance(resp, JudgeResponse):
        return {"not_a_response": type(resp).__name__}
    if any(
        not_unicode(getattr(v, name, ""))
        for v in (resp.verdicts if isinstance(resp.verdicts, list) else [])
        for name in ("axis", "quote", "rationale", "target")
    ):
        return {"case_id": resp.case_id if isinstance(resp.case_id, str) else "", "verdicts": [], "error": NOT_UNICODE}
    verdicts: Any = resp.verdicts
    if isinstance(verdicts, list):
        verdicts = [
            dict(
                axis=v.axis if isinstance(v.axis, str) else "",
                score=_scalar(v.score),
                quote=v.quote if isinstance(v.quote, str) else "",
                rationale=v.rationale if isinstance(v.rationale, str) else "",
                target=v.target if isinstance(v.target, str) else "",
            )
            if isinstance(v, AxisVerdict)
            else None
            for v in verdicts
        ]
    else:
        verdicts = f"<{type(verdicts).__name__}>"

    def count(value: Any) -> Any:
        return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63 else None

    return dict(
        case_id=resp.case_id if isinstance(resp.case_id, str) else f"<{type(resp.case_id).__name__}>",
        verdicts=verdicts,
        error=None if resp.error is None else bounded_text(str(resp.error)),
        prompt_tokens=count(resp.prompt_tokens),
        completion_tokens=count(resp.completion_tokens),
        cached=resp.cached is True,
    )


_VERDICT_TEXT = ("axis", "quote", "rationale", "target")


def response_from_plain(plain: Any, req: JudgeRequest) -> JudgeResponse:
    """A response from the judge's process, decoded strictly (in the harness). Whatever is malformed is a
    judge error for ``req``'s case: the process is the user's and may send anything."""

    def bad(why: str) -> JudgeResponse:
        return JudgeResponse(req.case_id, error=why)

    if not isinstance(plain, dict):
        return bad("the judge's process sent a response that is not an object")
    if "not_a_response" in plain:
        return bad(f"the judge returned {bounded_text(plain['not_a_response'], 100)}, not a JudgeResponse")
    case_id, verdicts, error = plain.get("case_id"), plain.get("verdicts"), plain.get("error")
    if not isinstance(case_id, str) or not (error is None or isinstance(error, str)):
        return bad("the judge's process sent a response without a case id or with an error that is not text")
    if isinstance(verdicts, str):
        return bad(f"the judge's verdicts are {bounded_text(verdicts, 100).strip('<>')}, not a list")
    if not isinstance(verdicts, list):
        return bad("the judge's process sent verdicts that are not a list")
    decoded = []
    for v in verdicts:
        if v is None:
            continue  # the judge put something other than an AxisVerdict there: no verdict for that axis
        if (
            not isinstance(v, dict)
            or not all(isinstance(v.get(k), str) for k in _VERDICT_TEXT)
            or isinstance(v.get("score"), (dict, list))
        ):
            return bad("the judge's process sent a malformed verdict")
        decoded.append(AxisVerdict(v["axis"], v.get("score"), v["quote"], v["rationale"], target=v["target"]))
    tokens = [plain.get(k) for k in ("prompt_tokens", "completion_tokens")]
    tokens = [t if isinstance(t, int) and not isinstance(t, bool) else None for t in tokens]
    return JudgeResponse(
        case_id,
        decoded,
        error=None if error is None else bounded_text(error),
        prompt_tokens=tokens[0],
        completion_tokens=tokens[1],
        cached=plain.get("cached") is True,
    )


def config_from_plain(plain: Any, what: str = "judge") -> JudgeConfig:
    """The judge's (or generator's) config as its process reported it, checked field by field."""
    import re

    def fail(why: str) -> UsageError:
        return UsageError(f"the {what}'s config {why}")

    if not isinstance(plain, dict):
        raise fail("did not arrive")
    for name in ("name", "model", "prompt_version"):
        if not isinstance(plain.get(name), str) or not plain[name]:
            raise fail(f"has no {name}")
    if not re.fullmatch(r"[A-Za-z0-9._-]{1,64}", plain["prompt_version"]):
        raise fail(f"names rubric {bounded_text(plain['prompt_version'], 80)!r}, which is not a rubric version")
    temperature, seed, base_url = plain.get("temperature"), plain.get("seed"), plain.get("base_url")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not math.isfinite(temperature):
        raise fail("has a temperature that is not a number")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise fail("has a seed that is not a whole number")
    if seed is not None and not abs(seed) < 2**63:  # a record keeps 64-bit whole numbers
        raise fail(f"has a seed of {seed.bit_length()} bits, out of range (a record keeps 64-bit whole numbers)")
    if base_url is not None and not isinstance(base_url, str):
        raise fail("has a base_url that is not text")
    texts = [plain["name"], plain["model"], base_url or ""]
    if any(len(t) > 500 or bounded_text(t) != t for t in texts):
        raise fail("has a name, model or base_url that is too long or not valid Unicode")
    return JudgeConfig(
        name=plain["name"],
        model=plain["model"],
        temperature=float(temperature),
        seed=seed,
        prompt_version=plain["prompt_version"],
        base_url=base_url,
    )
