"""Layer 3: model-as-judge on a versioned rubric, quote before score.

One judge call per answered case grades three axes on an anchored 0/1/2 scale: faithfulness (answer vs.
cited snippets), answer correctness (answer vs. gold answer) and citation correctness (each citation's
claim vs. its cited snippet and its *hardest decoy*, the most lexically similar snippet not cited).
Abstained and failed cases cost no call. The rubric is text in ``qaeval/rubric/<version>/``.

The library, not the judge, decides whether a verdict counts: a verdict whose quote is not in the text
it must come from (the cited snippets for faithfulness and citations, the answer for answer
correctness), whose score is not 0, 1 or 2, or that gives a positive score with no quote, is recorded
as invalid and never counts as a pass. A judge that fails to answer records an error, distinct from a
score of 0, and also never counts as a pass (fail closed).

Judges implement ``JudgeClient``. The default, ``OfflineJudge``, is mechanical (token overlap), fast
and deterministic: a stand-in that makes the pipeline run anywhere, not a judgement of meaning.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from importlib import resources
from string import Template
from typing import Any, Protocol, runtime_checkable

import pandas as pd

from qaeval.cases import snippet_bodies
from qaeval.text import content_terms, split_sentences, tokens

AXES = ("faithfulness", "answer_correctness", "citation_correctness")
RUBRIC_VERSION = "v1"

VERDICT_COLUMNS = [
    "case_id", "axis", "target", "score", "quote", "rationale", "valid", "invalid_reason", "error",
    "credit", "prompt_tokens", "completion_tokens", "cached", "config",
]


@dataclass(frozen=True)
class JudgeConfig:
    """Everything that identifies a judge's verdicts; recorded with every verdict."""

    name: str
    model: str
    temperature: float = 0.0
    seed: int | None = 0
    prompt_version: str = RUBRIC_VERSION
    base_url: str | None = None

    def label(self) -> str:
        return f"{self.name}:{self.model} t={self.temperature:g} seed={self.seed} rubric={self.prompt_version}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class CitedSnippet:
    snippet_id: str
    claim: str
    text: str
    decoy_id: str | None
    decoy_text: str | None


@dataclass(frozen=True)
class JudgeRequest:
    """One call's worth of grading: an answered case with its cited snippets and decoys."""

    case_id: str
    question: str
    answer: str
    gold_answer: str | None
    citations: tuple[CitedSnippet, ...]
    messages: tuple[dict[str, str], ...]

    @property
    def evidence(self) -> str:
        seen: dict[str, str] = {}
        for c in self.citations:
            seen.setdefault(c.snippet_id, c.text)
        return "\n".join(seen.values())


@dataclass
class AxisVerdict:
    axis: str
    score: Any
    quote: str = ""
    rationale: str = ""
    target: str = ""


@dataclass
class JudgeResponse:
    """What a judge returns for one request. ``error`` set means no verdict arrived or parsed."""

    case_id: str
    verdicts: list[AxisVerdict] = field(default_factory=list)
    error: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached: bool = False


@runtime_checkable
class JudgeClient(Protocol):
    """A judge: a ``config`` and ``judge(requests) -> responses`` (same order, same length)."""

    config: JudgeConfig

    def judge(self, requests: Sequence[JudgeRequest]) -> list[JudgeResponse]: ...


# --------------------------------------------------------------------------- the rubric


@dataclass(frozen=True)
class Rubric:
    version: str
    system: str
    user: Template

    @classmethod
    def load(cls, version: str = RUBRIC_VERSION) -> Rubric:
        folder = resources.files("qaeval") / "rubric" / version
        return cls(version, (folder / "system.txt").read_text("utf-8"),
                   Template((folder / "user.txt").read_text("utf-8")))

    def messages(self, question: str, answer: str, gold: str | None,
                 citations: Sequence[CitedSnippet]) -> tuple[dict[str, str], ...]:
        snippets: dict[str, str] = {}
        for c in citations:
            snippets.setdefault(c.snippet_id, c.text)
        cited = "\n".join(f"[{sid}] {text}" for sid, text in snippets.items()) or "(none)"
        cites = "\n".join(
            f"- snippet_id={c.snippet_id}\n  claim: {c.claim}\n  cited: {c.text}\n"
            f"  decoy ({c.decoy_id or 'none'}): {c.decoy_text or '(no other snippet)'}"
            for c in citations
        ) or "(none)"
        user = self.user.safe_substitute(question=question, gold_answer=gold or "(none)",
                                         answer=answer, cited_snippets=cited, citations=cites)
        return ({"role": "system", "content": self.system}, {"role": "user", "content": user})


def hardest_decoy(claim: str, candidates: Sequence[tuple[str, str]]) -> tuple[str | None, str | None]:
    """The (id, text) among candidates most lexically similar to the claim (Jaccard on content terms)."""
    claim_terms = set(content_terms(claim))
    best: tuple[float, str | None, str | None] = (-1.0, None, None)
    for sid, text in candidates:
        terms = set(content_terms(text))
        union = claim_terms | terms
        sim = len(claim_terms & terms) / len(union) if union else 0.0
        if sim > best[0]:
            best = (sim, sid, text)
    return best[1], best[2]


def build_requests(cases: pd.DataFrame, outputs: pd.DataFrame, sources: pd.DataFrame,
                   rubric: Rubric | None = None) -> list[JudgeRequest]:
    """One request per answered case (no adapter error, not abstained)."""
    rubric = rubric or Rubric.load()
    bodies = snippet_bodies(sources)
    gold = dict(zip(cases["id"].tolist(), cases["gold_answer"].tolist()))
    questions = dict(zip(cases["id"].tolist(), cases["question"].tolist()))
    requests = []
    for out in outputs.to_dict("records"):
        if out["error"] or out["abstained"]:
            continue
        case_id = out["case_id"]
        fixture = bodies.get(case_id, {})
        cited_ids = {c["snippet_id"] for c in out["citations"]}
        others = [(sid, text) for sid, text in fixture.items() if sid not in cited_ids]
        cited = []
        for c in out["citations"]:
            decoy_id, decoy_text = hardest_decoy(c["claim"], others)
            cited.append(CitedSnippet(c["snippet_id"], c["claim"], fixture.get(c["snippet_id"], ""),
                                      decoy_id, decoy_text))
        g = gold[case_id] if isinstance(gold[case_id], str) else None
        requests.append(JudgeRequest(case_id, questions[case_id], out["answer"], g, tuple(cited),
                                     rubric.messages(questions[case_id], out["answer"], g, cited)))
    return requests


# --------------------------------------------------------------------------- validation


def _squash(text: str) -> str:
    return " ".join((text or "").split()).casefold()


def quote_in(quote: str, text: str) -> bool:
    """Whether the quote occurs in the text, ignoring case and runs of whitespace only."""
    return _squash(quote) in _squash(text)


def _validate(verdict: AxisVerdict | None, source_text: str) -> tuple[int | None, bool, str]:
    if verdict is None:
        return None, False, "no verdict returned for this axis"
    score = verdict.score
    if isinstance(score, bool) or score not in (0, 1, 2):
        return None, False, f"score {score!r} is not 0, 1 or 2"
    score = int(score)
    quote = verdict.quote if isinstance(verdict.quote, str) else ""
    if score > 0 and not quote.strip():
        return score, False, "a positive score with no supporting quote"
    if quote.strip() and not quote_in(quote, source_text):
        return score, False, "the quote is not in the text it must come from"
    return score, True, ""


def verdict_frame(requests: Sequence[JudgeRequest], responses: Sequence[JudgeResponse],
                  config: JudgeConfig) -> pd.DataFrame:
    """Validate responses into one row per (case, axis, target).

    Columns: case_id; axis; target (the cited snippet id for citation_correctness, else ""); score
    (0/1/2, or <NA> on error or unusable score); quote; rationale; valid (bool: the quote was found and
    the score is on the scale); invalid_reason; error (the judge's failure, else None); credit (bool:
    valid and full score 2); prompt_tokens and completion_tokens (of the one call that graded the case);
    cached (bool); config (the judge's label).
    """
    if len(requests) != len(responses):
        raise ValueError(f"judge returned {len(responses)} responses for {len(requests)} requests")
    label = config.label()
    rows: list[dict[str, Any]] = []
    for req, resp in zip(requests, responses):
        base = dict(case_id=req.case_id, prompt_tokens=resp.prompt_tokens,
                    completion_tokens=resp.completion_tokens, cached=resp.cached, config=label)
        targets = [("faithfulness", "", req.evidence), ("answer_correctness", "", req.answer)]
        targets += [("citation_correctness", c.snippet_id, c.text) for c in req.citations]
        if resp.error:
            for axis, target, _ in targets:
                rows.append(dict(base, axis=axis, target=target, score=None, quote="", rationale="",
                                 valid=False, invalid_reason="judge error", error=resp.error, credit=False))
            continue
        by_axis: dict[tuple[str, str], AxisVerdict] = {}
        for v in resp.verdicts:
            by_axis.setdefault((v.axis, v.target if v.axis == "citation_correctness" else ""), v)
        for axis, target, text in targets:
            v = by_axis.get((axis, target))
            score, valid, why = _validate(v, text)
            rows.append(dict(base, axis=axis, target=target, score=score,
                             quote=v.quote if v else "", rationale=v.rationale if v else "",
                             valid=valid, invalid_reason=why, error=None, credit=bool(valid and score == 2)))
    frame = pd.DataFrame(rows, columns=VERDICT_COLUMNS)
    frame["score"] = frame["score"].astype("Int64")
    return frame


def score_with_judge(judge: JudgeClient, cases: pd.DataFrame, outputs: pd.DataFrame,
                     sources: pd.DataFrame) -> pd.DataFrame:
    """Build requests, call the judge once per answered case, validate. Returns the verdict frame."""
    rubric = Rubric.load(judge.config.prompt_version)
    requests = build_requests(cases, outputs, sources, rubric)
    responses = list(judge.judge(requests)) if requests else []
    return verdict_frame(requests, responses, judge.config)


def effective_scores(verdicts: pd.DataFrame) -> pd.DataFrame:
    """Per case and axis, the score that counts: invalid verdicts and judge errors count 0, and
    citation correctness takes the weakest citation. Columns: case_id, axis, score."""
    if verdicts.empty:
        return pd.DataFrame(columns=["case_id", "axis", "score"])
    eff = verdicts.assign(score=verdicts["score"].where(verdicts["valid"], 0).fillna(0).astype(int))
    return eff.groupby(["case_id", "axis"], as_index=False)["score"].min()


# --------------------------------------------------------------------------- the offline judge


def _best_sentence(text: str, target_terms: set[str]) -> str:
    best, best_hits = "", 0
    for sentence in split_sentences(text):
        hits = len(target_terms & set(content_terms(sentence)))
        if hits > best_hits:
            best, best_hits = sentence, hits
    return best


def _share(part: list[str], whole: list[str]) -> float:
    p = set(part)
    return len(p & set(whole)) / len(p) if p else 0.0


def token_f1(prediction: str, reference: str) -> float:
    pred, ref = tokens(prediction), tokens(reference)
    common = sum(min(pred.count(t), ref.count(t)) for t in set(pred) & set(ref))
    if not pred or not ref or not common:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)


class OfflineJudge:
    """A mechanical judge: token overlap against the cited span. Deterministic, offline, free.

    faithfulness: share of the answer's content terms found in the cited snippets (2 at 0.9+, 1 at
    0.5+). answer_correctness: SQuAD-style token F1 with the gold answer (2 at 0.8+), 1 when every gold
    token appears in the answer, else 0. citation_correctness: share of the claim's terms in the cited
    snippet versus in the decoy (2 at 0.9+ and ahead of the decoy; 1 at 0.5+).

    It is a stand-in. Its known weakness is answer correctness: a long answer that contains the gold
    answer scores 1 on F1 where a person gives 2. Calibration against the demo labels catches exactly
    that, which is the point of calibrating.
    """

    def __init__(self) -> None:
        self.config = JudgeConfig(name="offline", model="token-overlap", temperature=0.0, seed=0)

    def judge(self, requests: Sequence[JudgeRequest]) -> list[JudgeResponse]:
        return [self.judge_one(r) for r in requests]

    def judge_one(self, req: JudgeRequest) -> JudgeResponse:
        answer_terms = content_terms(req.answer)
        evidence = req.evidence
        support = _share(answer_terms, content_terms(evidence))
        f_score = 2 if support >= 0.9 else 1 if support >= 0.5 else 0
        f_quote = _best_sentence(evidence, set(answer_terms)) if f_score else ""
        verdicts = [AxisVerdict("faithfulness", f_score, f_quote,
                                f"{support:.0%} of the answer's content words are in the cited snippets")]
        gold = req.gold_answer or ""
        f1 = token_f1(req.answer, gold)
        gold_tokens = tokens(gold)
        all_in = bool(gold_tokens) and set(gold_tokens) <= set(tokens(req.answer))
        a_score = 2 if f1 >= 0.8 else 1 if all_in else 0
        a_quote = _best_sentence(req.answer, set(content_terms(gold)) | set(gold_tokens)) if a_score else ""
        verdicts.append(AxisVerdict("answer_correctness", a_score, a_quote,
                                    f"token F1 {f1:.2f} with the gold answer"
                                    + ("; every gold token present" if all_in else "")))
        for c in req.citations:
            claim = content_terms(c.claim)
            cited = _share(claim, content_terms(c.text))
            decoy = _share(claim, content_terms(c.decoy_text or ""))
            if cited >= 0.9 and cited > decoy:
                score = 2
            elif cited >= 0.5:
                score = 1
            else:
                score = 0
            quote = _best_sentence(c.text, set(claim)) if score else ""
            verdicts.append(AxisVerdict("citation_correctness", score, quote,
                                        f"claim overlap {cited:.0%} with the cited snippet, "
                                        f"{decoy:.0%} with decoy {c.decoy_id}", target=c.snippet_id))
        return JudgeResponse(req.case_id, verdicts, prompt_tokens=0, completion_tokens=0)


def make_judge() -> OfflineJudge:
    """Factory for ``--judge qaeval.judging:make_judge`` (the default)."""
    return OfflineJudge()


def parse_verdict_json(text: str) -> list[AxisVerdict]:
    """Parse a judge's JSON reply (tolerating code fences and prose around the object)."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        raise ValueError("no JSON object in the reply")
    data = json.loads(text[start : end + 1])
    if not isinstance(data, dict):
        raise ValueError("the reply is not a JSON object")
    verdicts = []
    for axis in ("faithfulness", "answer_correctness"):
        item = data.get(axis)
        if isinstance(item, dict):
            verdicts.append(AxisVerdict(axis, item.get("score"), str(item.get("quote") or ""),
                                        str(item.get("rationale") or "")))
    for item in data.get("citations") or []:
        if isinstance(item, dict):
            verdicts.append(AxisVerdict("citation_correctness", item.get("score"),
                                        str(item.get("quote") or ""), str(item.get("rationale") or ""),
                                        target=str(item.get("snippet_id") or "")))
    if not verdicts:
        raise ValueError("the reply has none of the expected axes")
    return verdicts

