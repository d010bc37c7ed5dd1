"""Citation coverage: is every load-bearing sentence of an answer covered by a claim it cites?

A sentence (``qaeval.core.text.split_sentences``) is load-bearing when it has at least two content words; a
claim covers it when, normalised, one contains the other or the claim holds ``COVERAGE_OVERLAP`` of the
sentence's content terms. Comparing every sentence with every claim is quadratic (5,000 sentences against
1,000 claims took six minutes), so past ``COVERAGE_PAIRS`` pairs or ``COVERAGE_CHARS`` characters the check
fails, saying why, instead of comparing. Results are memoised per (answer, claims): the check and the
case's outcome both ask.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from qaeval.core.text import distinct_terms, has_content_terms, normalize, split_sentences

COVERAGE_OVERLAP = 0.6
COVERAGE_PAIRS = 250_000  # sentences x claims (an honest answer of a hundred sentences and citations: 10,000)
COVERAGE_CHARS = 100_000_000  # characters read by the containment tests: claims x answer + sentences x claims


def resolvable(out: Mapping[str, Any], bodies: Mapping[str, str]) -> list[dict[str, str]]:
    retrieved = set(out["retrieved_ids"])
    return [c for c in out["citations"] if c["source_id"] in retrieved and c["source_id"] in bodies]


def is_load_bearing(sentence: str) -> bool:
    return has_content_terms(sentence, 2)


def claim_covers(claim: str, sentence: str) -> bool:
    c, s = normalize(claim), normalize(sentence)
    if not c or not s:
        return False
    if c in s or s in c:
        return True
    s_terms = distinct_terms(sentence)
    return (
        bool(s_terms) and len(frozenset(s_terms).intersection(distinct_terms(claim))) / len(s_terms) >= COVERAGE_OVERLAP
    )


def coverage_counts(out: Mapping[str, Any], bodies: Mapping[str, str]) -> tuple[int, int, list[str]]:
    """(covered, load-bearing, uncovered sentences) for an answered output."""
    covered, total, uncovered = _coverage(out["answer"], tuple(c["claim"] for c in resolvable(out, bodies)))
    return covered, total, list(uncovered)


Coverage = tuple[int, int, tuple[str, ...]]
_COVERAGE: dict[tuple[str, tuple[str, ...]], Coverage] = {}  # the check and the case's outcome both ask
_COVERAGE_LIMIT = 1 << 15


def _too_much_to_cover(sentences: list[str], claims: tuple[str, ...]) -> bool:
    pairs = len(sentences) * len(claims)
    chars = len(claims) * sum(map(len, sentences)) + len(sentences) * sum(map(len, claims))
    return pairs > COVERAGE_PAIRS or chars > COVERAGE_CHARS


def _load_bearing(answer: str) -> list[str]:
    return [s for s in split_sentences(answer) if is_load_bearing(s)]


def _coverage(answer: str, claims: tuple[str, ...]) -> Coverage:
    found = _COVERAGE.get((answer, claims))
    if found is None:
        sentences = _load_bearing(answer)
        if _too_much_to_cover(sentences, claims):
            uncovered = tuple(sentences)  # not compared: none counts as covered
        else:
            uncovered = tuple(s for s in sentences if not any(claim_covers(cl, s) for cl in claims))
        found = (len(sentences) - len(uncovered), len(sentences), uncovered)
        if len(_COVERAGE) >= _COVERAGE_LIMIT:
            _COVERAGE.clear()
        _COVERAGE[(answer, claims)] = found
    return found


def check_citation_coverage(
    out: Mapping[str, Any], bodies: Mapping[str, str], counts: tuple[int, int, list[str]] | None = None
) -> tuple[bool, str]:
    """``counts``: ``coverage_counts(out, bodies)`` when the caller has it already."""
    if out["abstained"]:
        return True, "abstained: nothing to cover"
    covered, total, uncovered = counts if counts is not None else coverage_counts(out, bodies)
    if total == 0:
        return False, "the answer has no load-bearing sentence"
    if uncovered:
        claims = tuple(c["claim"] for c in resolvable(out, bodies))
        if _too_much_to_cover(_load_bearing(out["answer"]), claims):
            return False, (
                f"too much to check: {total} load-bearing sentence(s) against {len(claims)} claim(s) "
                f"(qaeval compares at most {COVERAGE_PAIRS:,} pairs and {COVERAGE_CHARS:,} characters)"
            )
        return False, f"{len(uncovered)} of {total} sentence(s) uncited, first: {uncovered[0][:80]!r}"
    return True, f"{covered} of {total} sentence(s) cited"
