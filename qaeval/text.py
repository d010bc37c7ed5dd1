"""Text normalisation and tokenisation shared by the scorers, the reference system and the offline judge,
and making text safe to print on a terminal."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterator, Sequence
from functools import lru_cache
from typing import Any

_WORD = re.compile(r"[a-z0-9]+(?:[.,][0-9]+)*")

STOPWORDS = frozenset(
    """a an and are as at be been by did do does for from had has have how i in is it its of on or
    that the their them there these they this to was were what when where which who whom whose why
    will with would can could should you your our we us any all than then into about after before
    over under between during many much most more""".split()
)


def fold(text: str) -> str:
    """Unicode-fold text for matching: NFKC (so full-width digits and ligatures become plain ones) and
    every invisible format character (Unicode category Cf: zero-width space, soft hyphen, ZWJ, ZWNJ,
    word joiner, byte-order mark) removed, so a gold answer cannot hide behind one."""
    text = text or ""
    if text.isascii():
        return text
    text = unicodedata.normalize("NFKC", text)
    return "".join(ch for ch in text if unicodedata.category(ch) != "Cf")


def not_unicode(text: Any) -> bool:
    """Whether a string holds an unpaired surrogate (JSON's "\\ud800"), which no file can store (False for
    anything that is not a string)."""
    if not isinstance(text, str) or text.isascii():  # isascii reads a flag: no copy of the text
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """Text safe to print on a terminal: control characters (ESC sequences that clear the screen or set
    the window title, bidirectional overrides) are shown as escapes instead of being obeyed. Newlines
    and tabs are kept."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1] if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}",
                        text)


def one_line(text: str) -> str:
    """``printable`` text that stays on its line: line breaks shown as ``\\n`` and ``\\r`` too, so a case id or
    a reason cannot start a line of its own (and pass for one qaeval printed)."""
    return printable(text.replace("\r", "\\r").replace("\n", "\\n"))


# ASCII text's tokens without the regex: every byte but a letter, a digit or a period becomes a space,
# capitals become small, commas go (as ``_normalized`` drops them). A period ending a sentence (before a
# space or at the end) is never inside a token; one left anywhere else ("3.5", "e.g") sends the text to
# the regex, which knows where it belongs.
_KEPT = b"abcdefghijklmnopqrstuvwxyz0123456789."
_ASCII_TABLE = bytes(
    (c | 0x20 if 0x41 <= c <= 0x5A else c) if (c | 0x20 if 0x41 <= c <= 0x5A else c) in _KEPT else 0x20
    for c in range(256))


def _ascii_words(text: str) -> list[bytes] | None:
    """``_WORD``'s tokens of ASCII ``text`` (lower-cased, commas dropped) as bytes, found by ``translate``
    and ``split`` (a few times faster than ``findall``); None when a period is left that only the
    regex can place."""
    clean = text.encode("ascii").translate(_ASCII_TABLE, b",")
    if b"." in clean:
        clean = clean.replace(b". ", b"  ").rstrip(b".")
        if b"." in clean:
            return None
    return clean.split()


def _normalized(text: str) -> str:
    if text.isascii() and (words := _ascii_words(text)) is not None:
        return b" ".join(words).decode("ascii")
    text = fold(text)
    if not text.isascii():
        text = unicodedata.normalize("NFKD", text)
        text = "".join(ch for ch in text if not unicodedata.combining(ch))
    return " ".join(_WORD.findall(text.lower().replace(",", "")))


class _Memo(dict):  # type: ignore[type-arg]
    """text -> ``compute(text)``, for texts met again by the reference system, the checks, the judge and
    the outcomes (a passage is read by all four). Bounded by the characters of the texts it holds: cleared
    when they pass ``limit``, so one pass over a large suite computes each passage once and memory
    stays bounded whatever the suite's size. A thread that races another computes a value twice."""

    def __init__(self, compute: Callable[[str], Any], limit: int) -> None:
        super().__init__()
        self.compute, self.limit, self.chars = compute, limit, 0

    def __missing__(self, text: str) -> Any:
        if self.chars > self.limit:
            self.clear()
            self.chars = 0
        value = self[text] = self.compute(text)
        self.chars += len(text)
        return value


MEMO_CHARS = 1 << 25  # a memo of normal forms or term sets holds texts of up to twice this many characters

_NORMAL = _Memo(_normalized, 2 * MEMO_CHARS)


def normalize(text: str) -> str:
    """Lower-case, strip accents and punctuation, collapse spaces: the form used for containment tests."""
    return _NORMAL[text] if text else ""


def normalize_once(text: str) -> str:
    """``normalize`` for a text read once (a prompt), which is not kept."""
    return _NORMAL[text] if text in _NORMAL else _normalized(text)


def tokens(text: str) -> list[str]:
    """Normalised word tokens, in order, stopwords kept."""
    return normalize(text).split()


def _words(text: str) -> list[str]:
    """``tokens(text)`` without keeping the normal form: the path for text ``_ascii_words`` refuses."""
    if text.isascii():
        return _WORD.findall(text.lower().replace(",", ""))
    return normalize_once(text).split()


_SUFFIXES = ("ies", "es", "ed", "ing", "s", "e")  # tried in this order


def _stem(word: str) -> str:
    # Deliberately crude: enough that "branches" meets "branch" and "opened" meets "open".
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)] + ("y" if suffix == "ies" else "")
    return word


class _Terms(dict):  # type: ignore[type-arg]
    """Token -> its stem, or "" for a stopword, filled as tokens are met; so mapping a passage's tokens
    to terms is one ``map`` over a dict. Bounded: cleared when it outgrows ``LIMIT`` tokens."""

    LIMIT = 1 << 18

    def __missing__(self, token: str) -> str:
        if len(self) >= self.LIMIT:
            self.clear()
        term = "" if token in STOPWORDS else _stem(token)
        self[token] = term
        return term


_TERMS = _Terms()
_term_of = _TERMS.__getitem__


def content_terms(text: str) -> list[str]:
    """Stemmed tokens without stopwords, in order: what lexical relevance and overlap are computed on."""
    return [term for term in _terms(text or "") if term]


def has_content_terms(text: str, at_least: int) -> bool:
    """``len(content_terms(text)) >= at_least``, read from the normal form (memoised: the checks normalise
    the same sentences) and stopping at the count, instead of tokenising the text again."""
    found = 0
    for token in normalize(text).split():  # content_terms's tokens, in order
        if _term_of(token):
            found += 1
            if found >= at_least:
                return True
    return at_least <= 0


def _terms(text: str) -> Iterator[str]:
    """Each token's term, in order ("" for a stopword): by bytes for ASCII text, else through the regex."""
    if text.isascii() and (words := _ascii_words(text)) is not None:
        return map(_byte_term_of, words)
    return map(_term_of, _words(text))


class _ByteTerms(dict):  # type: ignore[type-arg]
    """``_TERMS`` for the tokens ``_ascii_words`` finds (bytes). Bounded the same way."""

    def __missing__(self, token: bytes) -> str:
        if len(self) >= _Terms.LIMIT:
            self.clear()
        term = self[token] = _term_of(token.decode("ascii"))
        return term


_byte_term_of = _ByteTerms().__getitem__


def _distinct_terms(text: str) -> tuple[str, ...]:
    found = set(_terms(text))
    found.discard("")  # the stopwords' term
    return tuple(found)


_NO_TERMS = frozenset[str]()
# The memo holds each text's distinct terms (the reference system, the judge and the checks all ask for a
# passage's set, several times), as a tuple: a frozenset costs five times the memory (a 100,000-case
# suite's passages took 300 MB more), and making one from the tuple costs about a microsecond.
_TERM_SETS = _Memo(_distinct_terms, 2 * MEMO_CHARS)


def term_set(text: str | None) -> frozenset[str]:
    """The distinct content terms of ``text``: ``set(content_terms(text))``."""
    return frozenset(_TERM_SETS[text]) if text else _NO_TERMS


def distinct_terms(text: str | None) -> tuple[str, ...]:
    """``term_set(text)`` as the memo holds it, a tuple, for counting and for ``a_set.intersection(...)``
    without building a second set."""
    return _TERM_SETS[text] if text else ()


_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9])")
_ABBREVIATIONS = ("e.g.", "i.e.", "etc.", "Dr.", "Mr.", "Mrs.", "Ms.", "St.", "No.", "vs.", "approx.")


def split_sentences(text: str) -> list[str]:
    """Split an answer into sentences (see ``_sentences``)."""
    return list(_sentences(text or ""))


@lru_cache(maxsize=1 << 14)  # answers and evidence are split by the checks, the judge and the outcomes alike
def _sentences(text: str) -> tuple[str, ...]:
    """Split an answer into sentences.

    A sentence ends at ``.``, ``!`` or ``?`` followed by whitespace and a capital letter or digit
    (optionally behind a quote or bracket). A period inside a number ("3.5") or after a common
    abbreviation ("e.g.", "Dr.") does not end a sentence. Line breaks with a blank line between them
    also end a sentence, so bullet lists split per bullet.
    """
    parts: list[str] = []
    for block in re.split(r"\n\s*\n|\n\s*[-*•]\s+", text):
        start = 0
        for match in _SENTENCE_END.finditer(block):
            head = block[start : match.start()].rstrip()
            if head.endswith(_ABBREVIATIONS):
                continue
            parts.append(block[start : match.start()])
            start = match.end()
        parts.append(block[start:])
    return tuple(p.strip() for p in parts if p.strip())


class PromptWords:
    """A normalised prompt's words, indexed by word, for word-bounded containment and removal of many
    normalised pieces (the question, every passage) in one pass each: a piece is compared only where its
    rarest word occurs, so the cost is about the prompt's length plus the pieces', not their product (a
    prompt of 12,000 passages was scanned once per passage)."""

    def __init__(self, normal: str) -> None:
        self.words = normal.split()
        self.at: dict[str, list[int]] = {}
        for i, word in enumerate(self.words):
            self.at.setdefault(word, []).append(i)

    def _starts(self, piece: list[str]) -> Iterator[int]:
        """Where ``piece`` (its words) starts in the prompt, in order."""
        anchor = min(range(len(piece)), key=lambda k: len(self.at.get(piece[k], ())))
        size = len(piece)
        for pos in self.at.get(piece[anchor], ()):
            start = pos - anchor
            if start >= 0 and self.words[start:start + size] == piece:
                yield start

    def contains(self, piece: str) -> bool:
        words = piece.split()
        return bool(words) and next(self._starts(words), None) is not None

    def remove(self, pieces: Sequence[str]) -> str:
        """The prompt with every occurrence of every piece cut out, longest first (a cut word is never cut
        again); each cut leaves a separator, so words on either side never join into a match."""
        cut = bytearray(len(self.words))  # 0: kept; 1: a cut starts here; 2: inside a cut
        for piece in sorted({p for p in pieces if p}, key=len, reverse=True):
            words = piece.split()
            for start in self._starts(words):
                end = start + len(words)
                if not any(cut[start:end]):
                    cut[start:end] = b"\x01" + b"\x02" * (len(words) - 1)
        kept = [w if c == 0 else "|" for w, c in zip(self.words, cut) if c != 2]
        return " " + " ".join(kept) + " "
