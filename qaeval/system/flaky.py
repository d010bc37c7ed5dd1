"""A nondeterministic stand-in, never the default: the reference system, where each call independently
refuses an answerable question with chance ``refuse`` (the model was called), else quotes and cites the
second-ranked passage with chance ``second``. Randomness comes from the operating system.

    --adapter qaeval.system.flaky:make_adapter      # 3% wrongful refusals, 10% second-ranked quotes
    --adapter qaeval.system.flaky:make_regressed    # the same, with 15% wrongful refusals: a real change

Gate ``make_adapter`` against a baseline of itself (noise) and ``make_regressed`` against the same
baseline (a regression) to see what ``--trials`` does."""

from __future__ import annotations

import random

from qaeval.system.contract import CaseView, SUTOutput
from qaeval.system.reference import ReferenceHub, build_prompt, quoting

REFUSE = 0.03
SECOND = 0.10
REGRESSED_REFUSE = 0.15


class FlakyHub(ReferenceHub):
    def __init__(self, *, refuse: float = REFUSE, second: float = SECOND) -> None:
        super().__init__()
        self.refuse, self.second = refuse, second
        self.random = random.SystemRandom()

    def answer(self, case: CaseView) -> SUTOutput:
        retrieved = self.retrieve(case)
        if not retrieved:  # as the reference system: nothing grounds an answer
            return SUTOutput(abstained=True, model_was_called=False)
        prompt = build_prompt(case.question, retrieved)
        ids = [s.id for s in retrieved]
        draw = self.random.random()
        if draw < self.refuse:
            return SUTOutput(abstained=True, model_was_called=True, retrieved_ids=ids, prompt_to_model=prompt)
        quoted = retrieved[1] if draw < self.refuse + self.second and len(retrieved) > 1 else retrieved[0]
        return quoting(quoted, retrieved, prompt)


def make_adapter() -> FlakyHub:
    """Factory for ``--adapter qaeval.system.flaky:make_adapter``: 3% refusals, 10% second-ranked quotes."""
    return FlakyHub()


def make_regressed() -> FlakyHub:
    """Factory for ``--adapter qaeval.system.flaky:make_regressed``: the same with 15% refusals."""
    return FlakyHub(refuse=REGRESSED_REFUSE)
