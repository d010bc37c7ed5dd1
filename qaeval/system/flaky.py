"""A nondeterministic stand-in: the reference system, varying from call to call the way a system built on
a language model does even at temperature 0. Never the default.

Each call, independently: with chance ``refuse`` an answerable question is refused (abstained, the model
was called); otherwise, with chance ``second``, the answer quotes and cites the second-ranked retrieved
passage instead of the first. Nothing else changes. Randomness comes from the operating system, so no
two calls (or workers) repeat each other.

    --adapter qaeval.system.flaky:make_adapter      # 3% wrongful refusals, 10% second-ranked quotes
    --adapter qaeval.system.flaky:make_regressed    # the same, with 15% wrongful refusals: a real change

Use it to see what ``--trials`` does: gate ``make_adapter`` against a baseline of itself (noise) and
``make_regressed`` against the same baseline (a regression).
"""

from __future__ import annotations

import random

from qaeval.system.contract import CaseView, Citation, SUTOutput
from qaeval.system.reference import ReferenceHub, build_prompt

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
        return SUTOutput(
            answer=quoted.text,
            citations=[Citation(quoted.id, quoted.text)],
            retrieved_ids=ids,
            abstained=False,
            model_was_called=True,
            prompt_to_model=prompt,
        )


def make_adapter() -> FlakyHub:
    """Factory for ``--adapter qaeval.system.flaky:make_adapter``: 3% refusals, 10% second-ranked quotes."""
    return FlakyHub()


def make_regressed() -> FlakyHub:
    """Factory for ``--adapter qaeval.system.flaky:make_regressed``: the same with 15% refusals."""
    return FlakyHub(refuse=REGRESSED_REFUSE)
