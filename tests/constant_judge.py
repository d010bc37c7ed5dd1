"""A judge that cannot tell answers apart: it gives every axis the same score, quoting text that is
there (so every verdict counts). Calibration must refuse it wherever people's scores vary."""

from __future__ import annotations

from collections.abc import Sequence

from qaeval import AxisVerdict, JudgeConfig, JudgeRequest, JudgeResponse


class ConstantJudge:
    def __init__(self, score: int = 2) -> None:
        self.score = score
        self.config = JudgeConfig(name="constant", model=f"always-{score}", temperature=0.0, seed=None)

    def judge(self, requests: Sequence[JudgeRequest]) -> list[JudgeResponse]:
        return [JudgeResponse(r.case_id, self.verdicts(r)) for r in requests]

    def verdicts(self, r: JudgeRequest) -> list[AxisVerdict]:
        said = "the same score whatever the answer"
        return [
            AxisVerdict("faithfulness", self.score, r.evidence, said),
            AxisVerdict("answer_correctness", self.score, r.answer, said),
            *(AxisVerdict("citation_correctness", self.score, c.text, said, target=c.source_id) for c in r.citations),
        ]


def make_judge() -> ConstantJudge:
    return ConstantJudge(2)
