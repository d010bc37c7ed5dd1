"""The reference system (the default adapter, ``qaeval.system.reference:make_adapter``): a deliberate,
documented stand-in for a real RAG system. It retrieves lexically over the case's own sources, keeps those
that clear a relevance floor, and quotes its best source verbatim, citing it; when nothing clears the floor
it abstains without calling a model. So it is faithful and correctly cited by construction, fail-closed on
out-of-corpus questions, weak on answer correctness and unable to do any multi-step case.

Given a corpus, a case without sources is answered by BM25 over the whole corpus
(``qaeval.system.retriever``), with the same floor, its index built once per worker or opened from
``INDEX_CACHE`` (``$QAEVAL_INDEX_CACHE``, else ``qaeval-index`` in the temporary folder)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from qaeval.core.text import distinct_terms, term_set
from qaeval.data.cases import Source
from qaeval.data.corpus import Corpus, Passage
from qaeval.system.contract import CaseView, Citation, SUTOutput

RELEVANCE_FLOOR = 0.5
TOP_K = 5


def _terms_of(src: Source | Passage) -> frozenset[str] | tuple[str, ...]:
    return term_set(src.text) | term_set(src.title) if src.title else distinct_terms(src.text)


def _share(hits: int, of: int) -> float:
    """Relevance (``of``: the question's terms) or focus (``of``: the source's), 0.0 over nothing."""
    return hits / of if of else 0.0


def lexical_scores(question: str, sources: tuple[Source, ...]) -> list[tuple[float, float, Source]]:
    """(relevance, focus, source) for every source, best first. Relevance is the share of the
    question's content terms the source contains; focus breaks ties toward shorter sources."""
    q_terms = term_set(question)
    scored = []
    for src in sources:
        terms = _terms_of(src)
        hits = len(q_terms.intersection(terms))
        relevance, focus = _share(hits, len(q_terms)), _share(hits, len(terms))
        scored.append((relevance, focus, src))
    order = sorted(range(len(scored)), key=lambda i: (-scored[i][0], -scored[i][1], i))
    return [scored[i] for i in order]


def relevant_sources(question: str, sources: tuple[Source, ...], floor: float, top_k: int) -> list[Source]:
    """The sources ``lexical_scores`` ranks at or above ``floor``, in its order, at most ``top_k``."""
    return [src for relevance, _, src in lexical_scores(question, sources) if relevance >= floor][:top_k]


def build_prompt(question: str, passages: list[Source] | list[Passage]) -> str:
    """The prompt the hub records: an instruction, the question and the retrieved passage bodies."""
    lines = [
        "Answer the question using only the passages below. Cite the passage you rely on by its id.",
        "If the passages do not answer the question, say that you cannot answer.",
        "",
        f"Question: {question}",
        "",
        "Passages:",
    ]
    lines += [f"[{p.id}] {p.text}" for p in passages]
    return "\n".join(lines)


class ReferenceHub:
    """Lexical retrieval with a relevance floor, then a verbatim quote of the best source."""

    def __init__(
        self,
        *,
        floor: float = RELEVANCE_FLOOR,
        top_k: int = TOP_K,
        corpus: Corpus | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        from qaeval.system.retriever import CorpusRetriever

        self.floor = floor
        self.top_k = top_k
        self.corpus = corpus
        self.retriever = None if corpus is None else CorpusRetriever.build(corpus, cache_dir=cache_dir)

    def retrieve(self, case: CaseView) -> list[Any]:
        if not case.sources and self.retriever is not None and self.corpus is not None:
            found = self.retriever.search(case.question, self.top_k, floor=self.floor)
            return [self.corpus[pid] for pid, _ in found]
        return relevant_sources(case.question, case.sources, self.floor, self.top_k)

    def answer(self, case: CaseView) -> SUTOutput:
        retrieved = self.retrieve(case)
        if not retrieved:
            # Nothing grounds an answer: abstain, and spend no model call on empty context.
            return SUTOutput(abstained=True, model_was_called=False)
        return quoting(retrieved[0], retrieved, build_prompt(case.question, retrieved))


def quoting(best: Any, retrieved: list[Any], prompt: str, also: list[Citation] | None = None) -> SUTOutput:
    """An answer that quotes ``best`` verbatim and cites it (then ``also``), the model called."""
    return SUTOutput(
        answer=best.text,
        citations=[Citation(best.id, best.text), *(also or [])],
        retrieved_ids=[s.id for s in retrieved],
        passages=[p for p in retrieved if isinstance(p, Passage)],
        abstained=False,
        model_was_called=True,
        prompt_to_model=prompt,
    )


INDEX_CACHE = Path(os.environ.get("QAEVAL_INDEX_CACHE") or Path(tempfile.gettempdir()) / "qaeval-index")


def make_adapter(corpus: Corpus | None = None) -> ReferenceHub:
    """Factory for ``--adapter qaeval.system.reference:make_adapter`` (the default). With a corpus, its
    BM25 index is built once per worker (or opened from ``INDEX_CACHE``)."""
    return ReferenceHub(corpus=corpus, cache_dir=INDEX_CACHE if corpus is not None else None)
