"""Checking a judge's verdict against the text it cites: a positive score needs a quote, the quote must
occur in the cited text (ignoring case and runs of whitespace only) and be big enough to check (at least
``MIN_QUOTE_TERMS`` content words, or the whole text when it has fewer). A verdict that fails any of these
is not valid, whatever the judge said.
"""

from __future__ import annotations

from functools import lru_cache

from qaeval.core.text import content_terms, distinct_terms, normalize
from qaeval.scoring.rubric import AxisVerdict

MIN_QUOTE_TERMS = 3


@lru_cache(maxsize=4096)  # a case's evidence is searched once per axis and citation
def _squash(text: str) -> str:
    return " ".join((text or "").split()).casefold()


def quote_in(quote: str, text: str) -> bool:
    """Whether the quote occurs in the text, ignoring case and runs of whitespace only."""
    return _squash(quote) in _squash(text)


def quote_big_enough(quote: str, text: str) -> bool:
    """At least MIN_QUOTE_TERMS content words, or the whole text when the text has fewer."""
    if len(distinct_terms(quote)) >= MIN_QUOTE_TERMS or len(content_terms(quote)) >= MIN_QUOTE_TERMS:
        return True
    return len(content_terms(text)) < MIN_QUOTE_TERMS and normalize(quote) == normalize(text)


def validate_verdict(verdict: AxisVerdict | None, source_text: str) -> tuple[int | None, bool, str]:
    """(score, valid, why not) for one axis verdict against the text its quote must come from."""
    if verdict is None:
        return None, False, "no verdict returned for this axis"
    score = verdict.score
    if isinstance(score, bool) or score not in (0, 1, 2):
        return None, False, f"score {score!r} is not 0, 1 or 2"
    score = int(score)
    quote = verdict.quote if isinstance(verdict.quote, str) else ""
    if score > 0 and not quote.strip():
        return score, False, "a positive score with no supporting quote"
    if quote.strip() and not quote_in(quote, source_text):
        return score, False, "the quote is not in the text it must come from"
    if score > 0 and not quote_big_enough(quote, source_text):
        return score, False, f"the quote is too small to check (fewer than {MIN_QUOTE_TERMS} content words)"
    return score, True, ""
