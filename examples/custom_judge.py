"""A skeleton custom judge. A judge is anything with a ``config`` (a JudgeConfig) and
``judge(requests) -> responses``, one JudgeResponse per JudgeRequest, in order.

    .venv/bin/qaeval calibrate --data golden --labels golden/calibration/human_labels.jsonl \
        --judge examples.custom_judge:make_judge

Each request is one answered case: ``question``, ``answer``, ``gold_answer``, ``citations`` (each with the
cited source text and its hardest decoy) and ``messages``, the versioned rubric prompt ready to send to a
chat model. Return an AxisVerdict per axis (and one ``citation_correctness`` verdict per citation, with
``target`` set to its source id). Quote before you score: qaeval checks every quote against the text it
must come from and gives no credit to a verdict whose quote is not there. If your model cannot answer,
set ``error`` on the response: that case fails closed, it is never scored 0 or passed.
"""

from __future__ import annotations

from collections.abc import Sequence

from qaeval import AxisVerdict, JudgeConfig, JudgeRequest, JudgeResponse
from qaeval.core.text import split_sentences


def sentence_with(text: str, needle: str) -> str:
    """The first sentence of ``text`` that contains ``needle`` (a quote worth checking), else ""."""
    return next((s for s in split_sentences(text) if needle.lower() in s.lower()), "")


class KeywordJudge:
    """Example only: full credit when the gold answer appears in the answer."""

    def __init__(self) -> None:
        self.config = JudgeConfig(name="keyword", model="example", temperature=0.0, seed=None)

    def judge(self, requests: Sequence[JudgeRequest]) -> list[JudgeResponse]:
        return [self.grade(r) for r in requests]

    def grade(self, req: JudgeRequest) -> JudgeResponse:
        first_cited = split_sentences(req.citations[0].text)[0] if req.citations else ""
        gold = req.gold_answer or ""
        quote = sentence_with(req.answer, gold) if gold else ""
        verdicts = [
            AxisVerdict("faithfulness", 2 if first_cited else 0, first_cited, "quoted the cited source"),
            AxisVerdict("answer_correctness", 2 if quote else 0, quote, "the gold answer is in this sentence"),
        ]
        verdicts += [
            AxisVerdict("citation_correctness", 2, split_sentences(c.text)[0], "cited text present", target=c.source_id)
            for c in req.citations
        ]
        return JudgeResponse(req.case_id, verdicts)


def make_judge() -> KeywordJudge:
    return KeywordJudge()
