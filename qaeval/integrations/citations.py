"""The citation syntax the LangChain adapter's prompt asks for, and reading it back out of an answer.

Each sentence ends with the ids of the passages it relies on in square brackets (``... renewed
[loan-periods].``; several as ``[a, b]``, ``[a; b]`` or ``[a][b]``, before or after the final
punctuation). ``read_answer`` makes each id a ``Citation(id, claim)``, the claim being its sentence
without markers (a marker alone on its line cites the sentence before); an id that differs from a
retrieved one only in letter case is read as that one, any other is kept as written (so it fails
``citation_resolvability`` instead of vanishing). ``[see above]`` and Markdown links are not markers.
An answer that is empty, or cites nothing and opens with a refusal (``REFUSALS``), is an abstention.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from qaeval.core.text import split_sentences
from qaeval.system.contract import Citation

MARKER = re.compile(r"\[\s*([^\[\]\s,;]+(?:\s*[,;]\s*[^\[\]\s,;]+)*)\s*\](?!\()")
REFUSALS = (
    "i cannot answer",
    "i can't answer",
    "i can not answer",
    "i am unable to answer",
    "i'm unable to answer",
    "i don't know",
    "i do not know",
    "cannot be answered",
    "the passages do not",
    "the passages don't",
    "i cannot find",
    "i can't find",
    "there is no information",
)


@dataclass(frozen=True)
class ReadAnswer:
    """An answer as the adapter reports it: the text without markers, its citations, and whether it is a
    refusal (then ``answer`` is "" and ``citations`` is empty)."""

    answer: str
    citations: list[Citation] = field(default_factory=list)
    abstained: bool = False


def marker_ids(text: str) -> list[str]:
    """The ids cited in ``text``, in order of appearance (repeats included)."""
    return [i for ids in MARKER.findall(text) for i in re.split(r"\s*[,;]\s*", ids)]


def strip_markers(text: str) -> str:
    """``text`` without its markers or the spaces before them ("renewed [x]." reads "renewed."), trimmed.
    (The spaces are cut piece by piece: a leading ``[ \t]*`` in the pattern would be quadratic on a long
    run of spaces.)"""
    pieces, last = [], 0
    for marker in MARKER.finditer(text):
        pieces.append(text[last : marker.start()].rstrip(" \t"))
        last = marker.end()
    pieces.append(text[last:])
    return "".join(pieces).strip()


def is_refusal(text: str) -> bool:
    """True when the (marker-free) text is empty or opens with one of ``REFUSALS``."""
    folded = re.sub(r"\s+", " ", text.replace("\u2019", "'")).strip().lower()
    return not folded or folded.startswith(REFUSALS)


def _canonical(retrieved: Iterable[str]) -> dict[str, str]:
    ids = list(retrieved)
    by_case = {i.casefold(): i for i in reversed(ids)}  # the first spelling wins on a case-only clash
    return {**by_case, **{i: i for i in ids}}


def read_answer(text: str, retrieved: Iterable[str]) -> ReadAnswer:
    """Read a model's answer in the citation syntax above; ``retrieved`` are the ids of the passages it
    was given."""
    canonical = _canonical(retrieved)
    citations: list[Citation] = []
    claim = ""
    for sentence in split_sentences(text):
        cleaned = strip_markers(sentence)
        claim = cleaned or claim  # a marker on its own cites the sentence before it
        for cited in marker_ids(sentence):
            sid = canonical.get(cited) or canonical.get(cited.casefold(), cited)
            citation = Citation(sid, claim)
            if citation not in citations:
                citations.append(citation)
    answer = strip_markers(text)
    if not citations and is_refusal(answer):
        return ReadAnswer("", [], True)
    return ReadAnswer(answer, citations, False)
