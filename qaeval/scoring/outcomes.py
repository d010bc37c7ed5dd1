"""The per-case outcome rules: every scored layer of a case joined into its ``per_case`` row (passed or
failed, and why) and its share of every metric (``units``), step by step: index the layers by case
(``index_layers``), add up what the case did (``case_facts``), say why it fails (``fail_reasons``), and
write its row (``per_case_row``). ``case_outcomes`` runs the steps over a suite; the record reads back
through the same rules, so a saved record's outcomes are derived, never trusted.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

import pandas as pd

from qaeval.core.frames import Fields, Rows, RowsByKey, Valid, frame, is_missing
from qaeval.data.cases import GoldenCase, Suite
from qaeval.data.schema import CITATION_CORRECTNESS
from qaeval.scoring import checks as layer1
from qaeval.scoring.checks import column_rows
from qaeval.scoring.coverage import coverage_counts
from qaeval.scoring.custom import (
    CUSTOM_SCHEMA,
    NONE_REGISTERED,
    Registered,
    custom_reasons,
    custom_units,
    sample_to_plain,
)
from qaeval.scoring.judge import effective_scores
from qaeval.scoring.metrics import CaseFacts, units_frame

FailCode = Literal[
    "adapter_error",
    layer1.CheckName,
    "wrongly_abstained",
    "judge_error",
    "unfaithful",
    "trajectory_failed",
    "check",
    "metric",
]
FAIL_CODES: tuple[str, ...] = get_args(FailCode)


@dataclass(frozen=True)
class FailReason:
    """Why a case fails: a ``code`` that code branches on, and a ``message`` that people read (``str()``).

    Attributes:
        code: What failed, for code to branch on: one of ``FailCode`` (a deterministic check's name,
            ``check`` or ``metric`` for a registered one).
        message: Why, for people to read.
        name: The registered check's or metric's name (codes ``check`` and ``metric``), else None.
    """

    code: FailCode
    message: str
    name: str | None = None

    def __str__(self) -> str:
        return self.message

    def to_dict(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message} | ({"name": self.name} if self.name is not None else {})

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> FailReason:
        return cls(raw["code"], raw["message"], raw.get("name"))


REASON = Fields(
    dict(code=Valid("str", FAIL_CODES.__contains__, f"one of {', '.join(FAIL_CODES)}"), message="str", name="text"),
    optional=("name",),
)  # a FailReason as a record stores it


def cited_ids(citations: Sequence[Mapping[str, Any]] | None) -> list[str]:
    """The ids an answer cites, each once, in the order it first cites them."""
    return list(dict.fromkeys(str(c.get("source_id")) for c in citations or ()))


def citation_change(before: Sequence[Mapping[str, Any]] | None, after: Sequence[Mapping[str, Any]] | None) -> str:
    """ "citation changed: hours → history" when the ids cited differ (a claim reworded is not a move), else ""."""
    was, now = cited_ids(before), cited_ids(after)
    if was == now:
        return ""
    return f"citation changed: {', '.join(was) or 'none'} → {', '.join(now) or 'none'}"


def cited_beside_gold(citations: Sequence[Mapping[str, Any]] | None, gold: Sequence[str]) -> str:
    """ "cited history; gold hours": what an answer cites beside what the case says grounds it."""
    return f"cited {', '.join(cited_ids(citations)) or 'nothing'}; gold {', '.join(gold) or 'none'}"


PASS_MEANS = (
    "a case passes on its deterministic checks, the judge's full faithfulness score and, when "
    "multi-step, its trajectory"
)


def passing_line(
    per_case: pd.DataFrame, metrics: Sequence[Any], gated: Collection[str] | None = None, aside: str = ""
) -> str:
    """What a verdict's count of passing cases means, in words: "10 of 15 cases pass; answer correctness
    is not gated" (a case's pass never reads the judge's answer correctness; ``gated``: the metrics a gate
    holds to a tolerance, by default those of ``metrics`` that have one)."""
    names = {m.name for m in metrics if m.tolerance is not None} if gated is None else set(gated)
    return f"{int(per_case['case_passed'].sum())} of {len(per_case)} cases pass{aside}" + (
        "" if "answer_correctness" in names else "; answer correctness is not gated"
    )


def reasons_text(reasons: Sequence[FailReason]) -> str:
    """The reasons as one line: their messages joined by "; "."""
    return "; ".join(r.message for r in reasons)


RETRIEVAL_FIELDS = ("recall_at_k", "precision_at_k", "mrr", "ndcg_at_k")
PER_CASE_SCHEMA = {
    "case_id": "text",
    "split": "text",
    "difficulty": "text",
    "expected_behavior": "text",
    "adversarial": "text",
    "question": "text",
    "gold_answer": "text",
    "answer": "text",
    "abstained": "bool",
    "error": "text",
    "output_fingerprint": "text",
    "retrieved_ids": "object",
    "citations": "object",
    **{c: "bool" for c in layer1.CHECKS},
    "deterministic_passed": "bool",
    **{m: "float" for m in RETRIEVAL_FIELDS},
    "faithfulness": "Int64",
    "answer_correctness": "Int64",
    "citation_correctness": "Int64",
    "judge_error": "text",
    "trajectory_success": "boolean",
    "case_passed": "bool",
    "fail_reasons": "object",
}


@dataclass
class LayerIndex:
    checks: dict[str, dict[str, tuple[bool, str]]] = field(default_factory=dict)
    retrieval: dict[str, dict[str, float]] = field(default_factory=dict)
    scores: dict[tuple[str, str], int] = field(default_factory=dict)
    judge_errors: dict[str, str] = field(default_factory=dict)
    supported: dict[tuple[str, str], bool] = field(default_factory=dict)
    trajectory: dict[str, bool] = field(default_factory=dict)
    trajectory_failures: dict[str, list[str]] = field(default_factory=dict)
    custom: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # registered checks and metrics


def index_layers(
    checks: pd.DataFrame, retrieval: pd.DataFrame, verdicts: pd.DataFrame, trajectory: pd.DataFrame
) -> LayerIndex:
    idx = LayerIndex()
    for cid, check, passed, reason in column_rows(checks, "case_id", "check", "passed", "reason"):
        idx.checks.setdefault(cid, {})[check] = (bool(passed), reason)
    for row in RowsByKey(retrieval):
        idx.retrieval[row["case_id"]] = {m: row[m] for m in RETRIEVAL_FIELDS}
    idx.scores = effective_scores(verdicts)
    for cid, error in column_rows(verdicts, "case_id", "error"):
        if not is_missing(error):
            idx.judge_errors.setdefault(cid, error)
    for cid, axis, target, valid, score in column_rows(verdicts, "case_id", "axis", "target", "valid", "score"):
        if axis == CITATION_CORRECTNESS:
            idx.supported[(cid, target)] = bool(valid) and not is_missing(score) and int(score) >= 1
    for cid, passed, success, description, detail in column_rows(
        trajectory, "case_id", "passed", "success", "description", "detail"
    ):
        idx.trajectory[cid] = bool(success)
        if not passed:
            idx.trajectory_failures.setdefault(cid, []).append(f"{description}: {detail}")
    return idx


def case_facts(case: GoldenCase, out: Mapping[str, Any], idx: LayerIndex, bodies: Mapping[str, str]) -> CaseFacts:
    failed = not is_missing(out["error"])
    answered = not failed and not out["abstained"]
    citations = list(out["citations"]) if answered else []
    retrieved = set(out["retrieved_ids"])
    good = sum(
        1
        for c in citations
        if c["source_id"] in retrieved
        and c["source_id"] in bodies
        and idx.supported.get((case.id, c["source_id"]), False)
    )
    covered, sentences, _ = coverage_counts(out, bodies) if answered else (0, 0, [])
    retr = idx.retrieval.get(case.id)
    return CaseFacts(
        answered=answered,
        abstained=not failed and bool(out["abstained"]),
        must_abstain=case.must_abstain,
        deterministic_passed=all(p for p, _ in idx.checks[case.id].values()),
        faithfulness=idx.scores.get((case.id, "faithfulness")),
        answer_correctness=idx.scores.get((case.id, "answer_correctness")),
        citations=len(citations),
        good_citations=good,
        sentences=sentences,
        covered_sentences=covered,
        has_gold_sources=retr is not None,
        recall_at_k=retr["recall_at_k"] if retr else math.nan,
        mrr=retr["mrr"] if retr else math.nan,
        multi_step=case.multi_step,
        trajectory_success=case.multi_step and idx.trajectory.get(case.id, False),
    )


def fail_reasons(case: GoldenCase, out: Mapping[str, Any], facts: CaseFacts, idx: LayerIndex) -> list[FailReason]:
    if not is_missing(out["error"]):
        return [FailReason("adapter_error", f"adapter error: {out['error']}")]
    reasons = [
        FailReason(check, f"{check}: {reason}")  # type: ignore[arg-type]  # a check's name is its code
        for check, (passed, reason) in idx.checks[case.id].items()
        if not passed
    ]
    if facts.abstained and not case.must_abstain:
        reasons.append(FailReason("wrongly_abstained", "wrongly abstained"))
    if facts.answered and case.id in idx.judge_errors:
        reasons.append(FailReason("judge_error", f"judge error: {idx.judge_errors[case.id]}"))
    elif facts.answered and facts.faithfulness is not None and facts.faithfulness < 2:
        reasons.append(
            FailReason(
                "unfaithful",
                f"judged unfaithful (score {facts.faithfulness}; "
                f"{cited_beside_gold(out['citations'], case.gold_source_ids)})",
            )
        )
    if case.multi_step and not facts.trajectory_success:
        why = ", ".join(idx.trajectory_failures.get(case.id, []))
        reasons.append(FailReason("trajectory_failed", f"trajectory failed ({why})"))
    return reasons + [
        FailReason(kind, message, name)  # type: ignore[arg-type]  # "check" or "metric"
        for kind, name, message in custom_reasons(idx.custom.get(case.id, []))
    ]


def per_case_row(
    case: GoldenCase, out: Mapping[str, Any], facts: CaseFacts, idx: LayerIndex, reasons: list[FailReason]
) -> dict[str, Any]:
    retr = idx.retrieval.get(case.id) or {}
    return dict(
        case_id=case.id,
        split=case.split,
        difficulty=case.difficulty,
        expected_behavior=case.expected_behavior,
        adversarial=case.adversarial,
        question=case.question,
        gold_answer=case.gold_answer,
        answer=out["answer"],
        abstained=bool(out["abstained"]),
        error=out["error"],
        output_fingerprint=out["output_fingerprint"],
        retrieved_ids=out["retrieved_ids"],
        citations=out["citations"],
        **{check: idx.checks[case.id].get(check, (True, ""))[0] for check in layer1.CHECKS},  # absent: older record
        deterministic_passed=facts.deterministic_passed,
        **{m: retr.get(m, math.nan) for m in RETRIEVAL_FIELDS},
        faithfulness=facts.faithfulness,
        answer_correctness=facts.answer_correctness,
        citation_correctness=idx.scores.get((case.id, CITATION_CORRECTNESS)),
        judge_error=idx.judge_errors.get(case.id),
        trajectory_success=facts.trajectory_success if case.multi_step else None,
        case_passed=not reasons,
        fail_reasons=reasons,
        **{r["name"]: r["passed"] for r in idx.custom.get(case.id, []) if r["kind"] == "check"},
    )


def _facts_and_samples(
    suite: Suite, outs: RowsByKey, idx: LayerIndex, samples_too: bool
) -> tuple[list[CaseFacts], list[tuple[str, dict[str, Any]]]]:
    """Each case's facts and, when ``samples_too``, what the registered checks are sent for it."""
    facts, samples = [], []
    for case in suite.cases:
        out = outs[case.id]
        bodies = layer1.case_bodies(case, out, suite.corpus)
        facts.append(case_facts(case, out, idx, bodies))
        if samples_too:
            samples.append((case.id, sample_to_plain(case, out, bodies, facts[-1])))
    return facts, samples


def check_samples(
    suite: Suite,
    outputs: pd.DataFrame,
    checks: pd.DataFrame,
    retrieval: pd.DataFrame,
    verdicts: pd.DataFrame,
    trajectory: pd.DataFrame,
) -> list[tuple[str, dict[str, Any]]]:
    """(case id, sample) for each case: what ``case_outcomes`` sends the registered checks and metrics."""
    return _facts_and_samples(suite, RowsByKey(outputs), index_layers(checks, retrieval, verdicts, trajectory), True)[1]


def case_outcomes(
    suite: Suite,
    outputs: pd.DataFrame,
    checks: pd.DataFrame,
    retrieval: pd.DataFrame,
    verdicts: pd.DataFrame,
    trajectory: pd.DataFrame,
    custom: pd.DataFrame | None = None,
    registered: Registered = NONE_REGISTERED,
    runner: Any = None,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, Registered]:
    """(per_case, units, custom, registered): one row per case joining every layer, its share of every
    metric, and the outcomes of the registered checks and metrics (``custom``, as stored, or run now by
    ``runner``: ``qaeval.host.custom``) with what ran. Each case's outcome depends on its own rows of the
    layers and nothing else, so a suite of some of the cases gives their rows alone.

    per_case columns: the case's labels (case_id, split, difficulty, expected_behavior, adversarial,
    question, gold_answer); the output (answer, abstained, error, output_fingerprint, retrieved_ids,
    citations); one bool column per deterministic check and ``deterministic_passed``; recall_at_k,
    precision_at_k, mrr, ndcg_at_k (NaN without gold sources); faithfulness, answer_correctness,
    citation_correctness (the effective judge score 0/1/2, <NA> when the case was not judged);
    judge_error; trajectory_success (<NA> for single-hop); case_passed and fail_reasons (a list of
    ``FailReason``); then one bool column per registered check.
    """
    idx = index_layers(checks, retrieval, verdicts, trajectory)
    outs = RowsByKey(outputs)
    cases = suite.cases
    facts, samples = _facts_and_samples(suite, outs, idx, runner is not None)
    if runner is not None:
        custom, registered = frame(runner.score(samples), CUSTOM_SCHEMA), runner.registered
    custom = custom if custom is not None else frame([], CUSTOM_SCHEMA)
    for row in custom.to_dict("records"):
        idx.custom.setdefault(row["case_id"], []).append(row)
    rows = Rows({**PER_CASE_SCHEMA, **{c.name: "bool" for c in registered.checks}})
    for case, f in zip(cases, facts):
        out = outs[case.id]
        rows.add(**per_case_row(case, out, f, idx, fail_reasons(case, out, f, idx)))
    ids = [c.id for c in cases]
    return rows.frame(), units_frame(ids, facts, custom_units(idx.custom, registered, ids)), custom, registered
