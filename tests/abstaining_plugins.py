"""Test adapters that answer as the reference system does, except that they abstain now and then."""

from __future__ import annotations

import zlib

from qaeval.system.contract import SUTOutput


class AbstainsSometimes:
    """The reference hub, except that a question it answers is abstained on in every third time it is
    asked (which third depends on the question): its answers stay as grounded as the reference's, so
    faithfulness and citation precision, over the answered trials, do not move; over-refusal does."""

    def __init__(self) -> None:
        from qaeval.system.reference import ReferenceHub

        self.hub = ReferenceHub()
        self.asked: dict[str, int] = {}

    def answer(self, case):
        n = self.asked.get(case.question, 0)
        self.asked[case.question] = n + 1
        out = self.hub.answer(case)
        if not out.abstained and (zlib.crc32(case.question.encode()) + n) % 3 == 0:
            return SUTOutput(abstained=True)
        return out


def make_abstains_sometimes():
    return AbstainsSometimes()
