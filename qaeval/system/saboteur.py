"""The demo saboteur, never the default (``--adapter qaeval.system.saboteur:make_adapter``): a hub with
the three faults the gate exists to catch. It pastes a stale cached answer into its prompt (a leak), cites
a source it never retrieved, and never abstains, calling the model on empty context."""

from __future__ import annotations

from qaeval.core.text import normalize
from qaeval.system.contract import CaseView, Citation, SUTOutput
from qaeval.system.reference import ReferenceHub, build_prompt, lexical_scores, quoting

# Answers cached by an earlier session, keyed by normalised question. Stale by construction.
STALE_CACHE = {
    normalize("How many more visits did Central record than Riverside in fiscal year 2024?"): "249,000",
    normalize("What is the current daily overdue fine for adult books?"): "25 cents per day",
}


class BuggyHub(ReferenceHub):
    def answer(self, case: CaseView) -> SUTOutput:
        retrieved = self.retrieve(case)
        ranked = [src for _, _, src in lexical_scores(case.question, case.sources)]
        best = retrieved[0] if retrieved else ranked[0]  # fault 3: no abstention, even on nothing
        prompt = build_prompt(case.question, retrieved)
        cached = STALE_CACHE.get(normalize(case.question))
        if cached:  # fault 1: the cached answer rides along in the prompt
            prompt += f"\n\nPreviously cached answer (reuse if it fits): {cached}"
        retrieved_ids = [s.id for s in retrieved]
        unretrieved = [s for s in case.sources if s.id not in retrieved_ids and s.id != best.id]
        # fault 2: cite something that was never retrieved
        also = [Citation(unretrieved[-1].id, best.text)] if unretrieved else []
        return quoting(best, retrieved, prompt, also)


def make_adapter() -> BuggyHub:
    """Factory for ``--adapter qaeval.system.saboteur:make_adapter``."""
    return BuggyHub()
