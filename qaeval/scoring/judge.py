"""Layer 3: model-as-judge on a versioned rubric (``qaeval/rubric/<version>/``), quote before score.

One call per answered case grades faithfulness, answer correctness and each citation (against its
cited source and its *hardest decoy*) on a 0/1/2 scale; the library decides whether a verdict counts
(``qaeval.scoring.quotes``). A judge is user code: whatever it does wrong (raises, exits, a wrong
number of responses, another case's, text that is not valid Unicode) is a judge error for the cases
it affects, never a pass, and the run goes on.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Protocol, runtime_checkable

import pandas as pd

from qaeval.core.errors import UsageError
from qaeval.core.frames import Rows, is_missing
from qaeval.core.text import distinct_terms, not_unicode, term_set
from qaeval.data.schema import CITATION_CORRECTNESS
from qaeval.scoring.checks import column_rows
from qaeval.scoring.quotes import validate_verdict
from qaeval.scoring.rubric import RUBRIC_VERSION, AxisVerdict, CitedSource, Prompt, Rubric
from qaeval.worker.plugins import contained

VERDICT_SCHEMA = {
    "case_id": "text",
    "axis": "text",
    "target": "text",
    "score": "Int64",
    "quote": "text",
    "rationale": "text",
    "valid": "bool",
    "invalid_reason": "text",
    "error": "text",
    "credit": "bool",
    "decoy_id": "text",
    "prompt_tokens": "Int64",
    "completion_tokens": "Int64",
    "cached": "bool",
    "config": "text",
}


@dataclass(frozen=True)
class JudgeConfig:
    """Everything that identifies a judge's verdicts; recorded with every verdict.

    Attributes:
        name: The judge's name (``offline``, ``openai``, your own).
        model: The model behind it.
        temperature: Its sampling temperature.
        seed: Its sampling seed, or None when it takes none.
        prompt_version: The rubric version its prompts come from (``qaeval/rubric/``).
        base_url: The endpoint it calls, or None for a judge that calls none.
    """

    name: str
    model: str
    temperature: float = 0.0
    seed: int | None = 0
    prompt_version: str = RUBRIC_VERSION
    base_url: str | None = None

    def label(self) -> str:
        """How reports name the judge.

        Returns:
            ``name:model t=T seed=S rubric=V``.
        """
        seed = f" seed={self.seed}" if self.seed is not None else ""
        return f"{self.name}:{self.model} t={self.temperature:g}{seed} rubric={self.prompt_version}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JudgeConfig:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def plain_config(config: object) -> bool:
    """Whether a judge's config is a ``JudgeConfig`` as qaeval makes it: not a subclass, nothing on the
    instance but its fields (a ``label`` set there would be user code), every field a plain value."""
    if type(config) is not JudgeConfig or type(vars(config)) is not dict:
        return False
    state = vars(config)
    return set(state) == {f.name for f in fields(JudgeConfig)} and all(
        type(value) in (str, int, float, bool, type(None)) for value in state.values()
    )


@dataclass(frozen=True)
class JudgeSettings:
    """How to run an HTTP judge, given explicitly to a judge factory that takes ``settings``.

    ``from_env`` is the one place that reads environment variables; explicit values win over them. The
    API key is never part of a record, a cache key or a report: a custom judge's process gets these
    settings without it and reads OPENAI_API_KEY itself (in a scratch folder: ``cache_dir`` is absolute).

    Attributes:
        model: The chat model (``QAEVAL_JUDGE_MODEL``).
        base_url: The OpenAI-compatible endpoint (``OPENAI_BASE_URL``).
        api_key: The API key (``OPENAI_API_KEY``); never recorded, cached or shown.
        temperature: Sampling temperature (``QAEVAL_JUDGE_TEMPERATURE``, default 0).
        seed: Sampling seed, or None to send none (``QAEVAL_JUDGE_SEED``, default 0).
        concurrency: Requests in flight at once (``QAEVAL_JUDGE_CONCURRENCY``, default 8).
        max_retries: Retries of a failed call (``QAEVAL_JUDGE_MAX_RETRIES``, default 4).
        timeout: Seconds per call (``QAEVAL_JUDGE_TIMEOUT``, default 60).
        cache: Whether verdicts are cached on disk (``QAEVAL_JUDGE_CACHE``, default on).
        cache_dir: Where the cache is (``QAEVAL_CACHE_DIR``, default ``.qaeval-cache``).
        show_progress: Whether a progress bar is drawn (None: ``QAEVAL_PROGRESS``, else in a terminal
            or a notebook).
    """

    model: str | None = None
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    temperature: float = 0.0
    seed: int | None = 0
    concurrency: int = 8
    max_retries: int = 4
    timeout: float = 60.0
    cache: bool = True
    cache_dir: str = ".qaeval-cache"
    show_progress: bool | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **explicit: Any) -> JudgeSettings:
        env = os.environ if environ is None else environ

        def number(name: str, default: float, kind: type) -> Any:
            raw = env.get(name)
            if raw is None or raw == "":
                return default
            try:
                return kind(raw)
            except ValueError:
                raise UsageError(f"{name}={raw!r} is not a valid {kind.__name__}") from None

        seed_raw = env.get("QAEVAL_JUDGE_SEED", "0")
        values: dict[str, Any] = dict(
            model=env.get("QAEVAL_JUDGE_MODEL") or None,
            base_url=env.get("OPENAI_BASE_URL") or None,
            api_key=env.get("OPENAI_API_KEY") or None,
            temperature=number("QAEVAL_JUDGE_TEMPERATURE", 0.0, float),
            seed=None if seed_raw.strip().lower() == "none" else number("QAEVAL_JUDGE_SEED", 0, int),
            concurrency=number("QAEVAL_JUDGE_CONCURRENCY", 8, int),
            max_retries=number("QAEVAL_JUDGE_MAX_RETRIES", 4, int),
            timeout=number("QAEVAL_JUDGE_TIMEOUT", 60.0, float),
            cache=env.get("QAEVAL_JUDGE_CACHE", "on").strip().lower() not in ("off", "0", "false", "no"),
            cache_dir=env.get("QAEVAL_CACHE_DIR") or ".qaeval-cache",
        )
        values.update({k: v for k, v in explicit.items() if v is not None})
        return cls(**values)


@dataclass(frozen=True)
class JudgeRequest:
    """One call's worth of grading: an answered case with its cited sources and decoys.

    Attributes:
        case_id: The readable case id (the judge sees labels; the system never does).
        question: The question.
        answer: The system's answer.
        gold_answer: The expected answer, or None for a case that must abstain.
        citations: Each citation with its claim, the cited source's text and its hardest decoy.
        messages: The versioned rubric prompt, ready to send to a chat model.
    """

    case_id: str
    question: str
    answer: str
    gold_answer: str | None
    citations: tuple[CitedSource, ...]
    messages: Sequence[dict[str, str]]

    @property
    def evidence(self) -> str:
        """The cited sources' text, each once, in citation order."""
        seen: dict[str, str] = {}
        for c in self.citations:
            seen.setdefault(c.source_id, c.text)
        return "\n".join(seen.values())


@dataclass
class JudgeResponse:
    """What a judge returns for one request. ``error`` set means no verdict arrived or parsed.

    Attributes:
        case_id: The request's case id.
        verdicts: One ``AxisVerdict`` per axis (and per citation for citation correctness).
        error: Why no verdict arrived or parsed, else None.
        prompt_tokens: Tokens sent, when the judge reports them.
        completion_tokens: Tokens received, when the judge reports them.
        cached: True when the verdicts came from the cache.
    """

    case_id: str
    verdicts: list[AxisVerdict] = field(default_factory=list)
    error: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached: bool = False


@runtime_checkable
class JudgeClient(Protocol):
    """A judge: a ``config`` and ``judge(requests) -> responses`` (same order, same length).

    Attributes:
        config: What identifies the judge's verdicts; recorded with each.
    """

    config: JudgeConfig

    def judge(self, requests: Sequence[JudgeRequest]) -> list[JudgeResponse]:
        """Grade a batch of requests.

        Args:
            requests: The answered cases to grade.

        Returns:
            One response per request, in the same order.
        """
        ...


def judge_config_of(judge: Any) -> JudgeConfig:
    config = getattr(judge, "config", None)
    if not isinstance(config, JudgeConfig):
        raise UsageError(
            f"the judge ({type(judge).__name__}) has no config: give it a qaeval.JudgeConfig "
            "(name, model, temperature, seed, prompt version) so its verdicts can be traced"
        )
    if not callable(getattr(judge, "judge", None)):
        raise UsageError(f"the judge ({type(judge).__name__}) has no judge(requests) method")
    return config


def hardest_decoy(claim: str, candidates: Sequence[tuple[str, str]]) -> tuple[str | None, str | None]:
    """The (id, text) among candidates most lexically similar to the claim (Jaccard on content terms)."""
    claim_terms = term_set(claim)
    best: tuple[float, str | None, str | None] = (-1.0, None, None)
    for sid, text in candidates:
        terms = distinct_terms(text)
        shared = len(claim_terms.intersection(terms))
        union = len(claim_terms) + len(terms) - shared  # the union's size, without building it
        sim = shared / union if union else 0.0
        if sim > best[0]:
            best = (sim, sid, text)
    return best[1], best[2]


def is_judged(out: Mapping[str, Any]) -> bool:
    """Whether the judge grades this output: it answered, with no adapter error."""
    return is_missing(out["error"]) and not out["abstained"]


def judge_request(
    out: Mapping[str, Any], question: str, gold: Any, fixture: Mapping[str, str], rubric: Rubric
) -> JudgeRequest:
    """The request for one answered output: its citations with the cited text and the hardest decoy
    among the other passages of ``fixture`` ({id: text}, in the case's order: its sources, then what
    the output used beyond them)."""
    cited_ids = {c["source_id"] for c in out["citations"]}
    others = [(sid, text) for sid, text in fixture.items() if sid not in cited_ids]
    cited = tuple(
        CitedSource(c["source_id"], c["claim"], fixture.get(c["source_id"], ""), *hardest_decoy(c["claim"], others))
        for c in out["citations"]
    )
    g = gold if isinstance(gold, str) else None
    return JudgeRequest(
        out["case_id"], question, out["answer"], g, cited, Prompt(rubric, question, out["answer"], g, cited)
    )


NOT_UNICODE = "the judge's reply has text that is not valid Unicode (an unpaired surrogate)"


def _response_problem(req: JudgeRequest, resp: Any) -> str | None:
    if not isinstance(resp, JudgeResponse):
        return f"the judge returned {type(resp).__name__}, not a JudgeResponse"
    if resp.case_id != req.case_id:
        return f"the judge answered case {resp.case_id!r} in the place of {req.case_id!r}"
    if resp.error:
        error = str(resp.error)
        return error.encode("utf-8", "backslashreplace").decode("utf-8") if not_unicode(error) else error
    if not isinstance(resp.verdicts, list):
        return f"the judge's verdicts are {type(resp.verdicts).__name__}, not a list"
    if any(
        not_unicode(getattr(v, name, ""))
        for v in resp.verdicts
        if isinstance(v, AxisVerdict)
        for name in ("axis", "quote", "rationale", "target")
    ):
        return NOT_UNICODE
    return None


def _shared(text: str) -> str:
    """Short texts that recur verbatim across verdicts (a mechanical judge's rationales) are stored once."""
    return sys.intern(text) if len(text) < 120 else text


def _count(value: Any) -> int | None:
    """A token count a record can keep (a 64-bit whole number), else None: a judge's reply is not trusted."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63 else None


def verdict_frame(requests: Sequence[JudgeRequest], responses: Sequence[Any], config: JudgeConfig) -> pd.DataFrame:
    """Validate responses into one row per (case, axis, target).

    Columns: case_id; axis; target (the cited source id for citation_correctness, else ""); score
    (0/1/2, or <NA> on error or unusable score); quote; rationale; valid (bool: the quote was found, is
    big enough and the score is on the scale); invalid_reason; error (the judge's failure, else None);
    credit (bool: valid and full score 2); decoy_id (the hardest decoy a citation was weighed against);
    prompt_tokens and completion_tokens (of the one call that graded the case); cached (bool);
    config (the judge's label).
    """
    label = config.label()
    rows = Rows(VERDICT_SCHEMA)
    for req, resp in zip(requests, responses):
        problem = _response_problem(req, resp)
        base = dict(case_id=req.case_id, config=label, cached=False, prompt_tokens=None, completion_tokens=None)
        if isinstance(resp, JudgeResponse):
            base.update(
                prompt_tokens=_count(resp.prompt_tokens),
                completion_tokens=_count(resp.completion_tokens),
                cached=resp.cached is True,
            )
        targets: list[tuple[str, str, str, str | None]] = [
            ("faithfulness", "", req.evidence, None),
            ("answer_correctness", "", req.answer, None),
        ]
        targets += [(CITATION_CORRECTNESS, c.source_id, c.text, c.decoy_id) for c in req.citations]
        by_axis: dict[tuple[str, str], AxisVerdict] = {}
        for v in resp.verdicts if problem is None else ():
            if isinstance(v, AxisVerdict):
                by_axis.setdefault((v.axis, v.target if v.axis == CITATION_CORRECTNESS else ""), v)
        for axis, target, text, decoy in targets:
            v = by_axis.get((axis, target))
            score, valid, why = validate_verdict(v, text) if problem is None else (None, False, "judge error")
            rows.add(
                **base,
                axis=axis,
                target=target,
                score=score,
                quote=v.quote if v and isinstance(v.quote, str) else "",
                rationale=_shared(v.rationale) if v and isinstance(v.rationale, str) else "",
                valid=valid,
                invalid_reason=why,
                error=problem,
                credit=bool(valid and score == 2),
                decoy_id=decoy,
            )
    return rows.frame()


def call_judge(judge: JudgeClient, requests: Sequence[JudgeRequest]) -> list[Any]:
    """Call the judge with every failure contained: a judge that raises, exits or answers with the wrong
    number of responses gives every request a judge error instead."""
    if not requests:
        return []
    ok, value = contained(judge.judge, list(requests), what="the judge")
    if not ok:
        return [JudgeResponse(r.case_id, error=value) for r in requests]
    try:
        responses = list(value)
    except TypeError:
        return [
            JudgeResponse(r.case_id, error=f"the judge returned {type(value).__name__}, not a list") for r in requests
        ]
    if len(responses) != len(requests):
        error = f"the judge returned {len(responses)} responses for {len(requests)} requests"
        return [JudgeResponse(r.case_id, error=error) for r in requests]
    return responses


@dataclass(slots=True, eq=False)  # compared and hashed by identity
class MemoEntry:
    """A response a run already has for a request's content, and how often scoring has used it."""

    response: Any
    uses: int = 0


JudgeMemo = dict[tuple[Any, ...], MemoEntry]  # a request's content -> the response it got, within one run


def request_key(req: JudgeRequest) -> tuple[Any, ...]:
    """Everything a request's prompt is made of (the rubric is the run's): equal keys, equal prompts."""
    return (req.case_id, req.question, req.answer, req.gold_answer, req.citations)


def effective_scores(verdicts: pd.DataFrame) -> dict[tuple[str, str], int]:
    """Per (case, axis), the score that counts: invalid verdicts and judge errors count 0, and citation
    correctness takes the weakest citation."""
    out: dict[tuple[str, str], int] = {}
    for case_id, axis, score, valid in column_rows(verdicts, "case_id", "axis", "score", "valid"):
        value = int(score) if valid and not is_missing(score) else 0
        key = (case_id, axis)
        out[key] = min(out.get(key, value), value)
    return out
