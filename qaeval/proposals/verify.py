"""The mechanical rules a generated candidate must pass before a person sees it. Pure functions.

Each rule returns the reason it drops a candidate, or None. The reasons are the drop counts' keys.

=========================  ==========================================================================
``NOT_IN_PASSAGE``         the gold answer does not occur, normalised (``qaeval.core.text.normalize``:
                           case, accents, punctuation and spacing folded), in a gold passage
``COPIES_PASSAGE``         the question shares a run of ``COPY_WORDS`` words or more with a passage
``GIVES_AWAY``             the question contains its own answer
``NEAR_DUPLICATE``         the question's content terms overlap another candidate's, or an existing
                           case's, by ``DUPLICATE_JACCARD`` or more (Jaccard)
``RETRIEVABLE``            (must-abstain) the corpus retriever finds a passage holding at least the
                           floor's share of the question's content terms: the corpus may answer it
``WRONG_SOURCES``          the reply names passages it was not given, or a multi-hop candidate does
                           not rest on both
``SHAPE``                  an answerable candidate without an answer, or a must-abstain one with one
``SAME_TEXT``              a multi-hop candidate whose two passages hold the same text (one contains the
                           other, normalised): nothing needs both
=========================  ==========================================================================
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from qaeval.core.text import content_terms, normalize
from qaeval.data.schema import Source

COPY_WORDS = 8
DUPLICATE_JACCARD = 0.8

NOT_IN_PASSAGE = "the answer is not in its passage"
COPIES_PASSAGE = f"the question copies {COPY_WORDS}+ words of a passage"
GIVES_AWAY = "the question contains its answer"
NEAR_DUPLICATE = "a near-duplicate of another candidate or a case"
RETRIEVABLE = "must-abstain, but the retriever finds a passage above its floor"
WRONG_SOURCES = "the reply names passages it was not given"
SHAPE = "an answer where none belongs, or none where one does"
SAME_TEXT = "multi-hop over two passages of the same text"
RULES = (SHAPE, WRONG_SOURCES, SAME_TEXT, NOT_IN_PASSAGE, GIVES_AWAY, COPIES_PASSAGE, NEAR_DUPLICATE, RETRIEVABLE)


def same_text(a: str, b: str) -> bool:
    """Whether one passage's text holds the other's (normalised): a duplicate chunk, not a second fact."""
    x, y = f" {normalize(a)} ", f" {normalize(b)} "
    return x in y or y in x


def _contains(haystack: str, needle: str) -> bool:
    """Whether ``needle`` occurs in ``haystack`` as whole words, both normalised."""
    h, n = f" {normalize(haystack)} ", f" {normalize(needle)} "
    return bool(n.strip()) and n in h


def answer_in_passages(answer: str, passages: Sequence[Source]) -> str | None:
    return None if any(_contains(p.text, answer) for p in passages) else NOT_IN_PASSAGE


def gives_away(question: str, answer: str) -> str | None:
    return GIVES_AWAY if _contains(question, answer) else None


def copies_passage(question: str, passages: Sequence[Source], words: int = COPY_WORDS) -> str | None:
    """Whether the question and a passage share a run of ``words`` normalised words (linear in both)."""
    q = normalize(question).split()
    if len(q) < words:
        return None
    runs = {tuple(q[i : i + words]) for i in range(len(q) - words + 1)}
    for p in passages:
        t = normalize(p.text).split()
        if any(tuple(t[i : i + words]) in runs for i in range(len(t) - words + 1)):
            return COPIES_PASSAGE
    return None


def terms(question: str) -> frozenset[str]:
    return frozenset(content_terms(question))


class Seen:
    """The questions already taken (existing cases, earlier candidates), for the near-duplicate rule."""

    def __init__(self, questions: Iterable[str] = (), threshold: float = DUPLICATE_JACCARD) -> None:
        self.threshold = threshold
        self._sets: list[frozenset[str]] = []
        self._exact: set[str] = set()
        for q in questions:
            self.add(q)

    def add(self, question: str) -> None:
        self._sets.append(terms(question))
        self._exact.add(normalize(question))

    def near(self, question: str) -> str | None:
        if normalize(question) in self._exact:
            return NEAR_DUPLICATE
        mine = terms(question)
        if not mine:
            return None
        for other in self._sets:
            union = len(mine | other)
            if union and len(mine & other) / union >= self.threshold:
                return NEAR_DUPLICATE
        return None


def check_shape(kind: str, answer: str | None) -> str | None:
    return SHAPE if (answer is None) != (kind == "abstain") else None


def check_sources(
    kind: str, named: Sequence[str], given: Sequence[Source]
) -> tuple[tuple[str, ...] | None, str | None]:
    """(the gold source ids, None) or (None, the reason). A single-passage candidate rests on its
    passage, a multi-hop one on both, a must-abstain one on none."""
    ids = [p.id for p in given]
    if any(i not in ids for i in named):
        return None, WRONG_SOURCES
    if kind == "abstain":
        return (), None
    if kind == "multi":
        if set(named) not in (set(ids), set()):
            return None, WRONG_SOURCES
        return (None, SAME_TEXT) if same_text(given[0].text, given[1].text) else (tuple(ids), None)
    return (ids[0],), None
