"""A system with its own index: it builds an inverted index over the frozen corpus once per worker and
returns the passages it retrieved, as a real RAG stack over a vector store or search engine would.

    .venv/bin/qaeval run --data DIR --adapter examples.own_index_adapter:make_adapter

DIR holds ``corpus.jsonl`` beside the cases. The factory takes ``corpus``: qaeval hands it a read-only
``qaeval.Corpus`` (iterate it for ``Passage(id, text, title)``; ``corpus[id]``, ``id in corpus``).
Replace ``TinyIndex`` with your own retriever (or query an index you keep outside qaeval) and keep the
output: ``passages`` in rank order with the text you put in the prompt. qaeval checks that text against
the frozen corpus (``passage_fidelity``), so a stale production index shows up as a failed case.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

from qaeval import CaseView, Citation, Corpus, Passage, SUTOutput

STOP = frozenset(
    "a an and are as at be by did does for from has have how in is it of on or that the this "
    "to was were what when where which who why with".split()
)
MIN_SHARE = 0.5  # of the question's words a passage must hold, else the system abstains


def words(text: str) -> list[str]:
    return [w for w in re.findall(r"\w+", text.lower()) if w not in STOP]


class TinyIndex:
    """TF-IDF over an inverted index: {word: {passage id: count}}, over anything with id, text and title
    (the corpus's passages, or a case's own)."""

    def __init__(self, corpus: Iterable[Any]) -> None:
        self.postings: dict[str, dict[str, int]] = defaultdict(dict)
        self.size = 0
        for passage in corpus:
            self.size += 1
            for word, n in Counter(words(f"{passage.title or ''} {passage.text}")).items():
                self.postings[word][passage.id] = n

    def search(self, question: str, k: int) -> list[str]:
        asked = set(words(question))
        scores: Counter[str] = Counter()
        hits: Counter[str] = Counter()
        for word in asked:
            found = self.postings.get(word, {})
            idf = math.log(1 + self.size / (1 + len(found)))
            for pid, n in found.items():
                scores[pid] += n * idf
                hits[pid] += 1
        return [pid for pid, _ in scores.most_common() if hits[pid] >= MIN_SHARE * len(asked)][:k]


class OwnIndexAdapter:
    def __init__(self, corpus: Corpus, k: int = 5) -> None:
        self.corpus = corpus
        self.index = TinyIndex(corpus)
        self.k = k

    def answer(self, case: CaseView) -> SUTOutput:
        if case.sources:  # a folder may mix corpus cases and cases with passages of their own: search those
            own = {s.id: s for s in case.sources}
            found: list[Any] = [own[pid] for pid in TinyIndex(case.sources).search(case.question, self.k)]
        else:
            found = [self.corpus[pid] for pid in self.index.search(case.question, self.k)]
        if not found:
            return SUTOutput(abstained=True, model_was_called=False)  # nothing grounds an answer
        best = found[0]
        prompt = "\n\n".join([f"Question: {case.question}", *(f"[{p.id}] {p.title or ''}\n{p.text}" for p in found)])
        # Corpus passages go back with their text (qaeval checks it against the frozen corpus); a case's
        # own are named by id, as qaeval already holds them.
        passages = [p for p in found if isinstance(p, Passage)]
        return SUTOutput(
            answer=best.text,
            citations=[Citation(best.id, best.text)],
            passages=passages,
            retrieved_ids=[] if passages else [p.id for p in found],
            model_was_called=True,
            prompt_to_model=prompt,
        )


def make_adapter(corpus: Corpus | None = None) -> OwnIndexAdapter:
    if corpus is None:
        raise ValueError("this adapter retrieves over a corpus: put corpus.jsonl beside the cases")
    return OwnIndexAdapter(corpus)
