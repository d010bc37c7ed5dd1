"""Text normalisation and tokenisation shared by the scorers, the reference system and the offline judge,
and making text safe to print on a terminal."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Container, Iterable, Iterator, Sequence
from functools import lru_cache
from typing import Any

_WORD = re.compile(r"[a-z0-9]+(?:[.,][0-9]+)*")

STOPWORDS = frozenset(
    """a an and are as at be been by did do does for from had has have how i in is it its of on or
    that the their them there these they this to was were what when where which who whom whose why
    will with would can could should you your our we us any all than then into about after before
    over under between during many much most more""".split()
)


USER_TEXT_LIMIT = 2000  # characters kept of an error, a log or a reason that came from user code


def bounded_text(value: Any, limit: int = USER_TEXT_LIMIT) -> str:
    """Text from the user's code or the other side of a process, fit to print and record: at most
    ``limit`` characters (cut with "..."), valid Unicode, a repr when it is not text."""
    text = value if isinstance(value, str) else repr(value)
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text if len(text) <= limit else text[: limit - 3] + "..."


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
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1] if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}", text)


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
    for c in range(256)
)


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


class _Memo(dict):  # type: ignore[type-arg]  # a dict subclass keyed by text
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


class _Terms(dict):  # type: ignore[type-arg]  # a dict subclass keyed by text
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


class _ByteTerms(dict):  # type: ignore[type-arg]  # a dict subclass keyed by bytes
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
# passage's set, several times), as a tuple: a frozenset costs several times the memory, and making one
# from the tuple is cheap (benchmarks/bench_run.py prints peak memory).
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


# A prompt is searched for its pieces (question, passages, ids) directly, one C scan of it per piece and
# two per piece it cuts: fastest for the prompts systems send. A scan is far faster per byte than the
# index of the pieces (``_indexed_search``), but past this many scans, whatever the prompt's length, the
# index takes over (benchmarks/bench_grounding.py measures both), as it does once the direct search has met more occurrences than the prompt has words (a
# repetitive prompt). Both find the same occurrences and cut the same words.
DIRECT_SCANS = 2000


def search_pieces(text: str, cut: Iterable[str], find: Iterable[str] = ()) -> tuple[str, Container[str]]:
    """Normalised ``text`` searched for normalised pieces, word-bounded: (the text with every occurrence
    of every ``cut`` piece cut out, padded with a space at each end; the pieces of ``cut`` and ``find``
    that occur in it, to be asked about no other). Empty pieces never occur. Every word inside an
    occurrence is cut, overlapping occurrences included; each occurrence leaves a separator ``|``
    (occurrences that overlap, one between them), so words on either side never join into a match.
    Time: linear in the text and the pieces (``DIRECT_SCANS``)."""
    cut, find = [p for p in dict.fromkeys(cut) if p], [p for p in dict.fromkeys(find) if p]
    padded = f" {text} "
    if 2 * len(cut) + len(find) <= DIRECT_SCANS:
        spans = _direct_spans(padded, cut, limit=padded.count(" "))
        if spans is not None:
            return _cut_spans(padded, spans), _Words(padded)
    return _indexed_search(text.split(), cut, find)


class _Words:
    """A padded normalised text whose ``in`` is word-bounded containment of a normalised piece."""

    __slots__ = ("padded",)

    def __init__(self, padded: str) -> None:
        self.padded = padded

    def __contains__(self, piece: object) -> bool:
        return isinstance(piece, str) and bool(piece) and f" {piece} " in self.padded


def _direct_spans(padded: str, cut: Sequence[str], limit: int) -> list[tuple[int, int]] | None:
    """(start, end) in ``padded`` of every occurrence of every piece, overlapping ones too; None past
    ``limit`` occurrences."""
    spans: list[tuple[int, int]] = []
    for piece in cut:
        needle = f" {piece} "
        at = padded.find(needle)
        while at >= 0:
            spans.append((at + 1, at + len(needle) - 1))
            if len(spans) > limit:
                return None
            at = padded.find(needle, at + 1)
    return spans


def _cut_spans(padded: str, spans: list[tuple[int, int]]) -> str:
    """``padded`` with each run of overlapping spans replaced by ``|``."""
    out: list[str] = []
    kept_from, run_start, run_end = 0, 0, -1
    for start, end in sorted(spans):
        if start > run_end:  # a new run: the last one (if any) is closed and what lies between kept
            if run_end >= 0:
                out += [padded[kept_from:run_start], "|"]
                kept_from = run_end
            run_start = start
        run_end = max(run_end, end)
    if run_end >= 0:
        out += [padded[kept_from:run_start], "|"]
        kept_from = run_end
    out.append(padded[kept_from:])
    return "".join(out)


def _indexed_search(words: list[str], cut: Sequence[str], find: Sequence[str]) -> tuple[str, frozenset[str]]:
    """``search_pieces`` in one pass over ``words``: an Aho-Corasick automaton of every piece's words,
    read from the end (most pieces end with a passage's body, so backwards they share its states)."""
    goto: list[dict[str, int]] = [{}]  # state -> {word: next state}; state 0 has read nothing
    longest_cut = [0]  # per state: the length in words of the longest cut piece it has just read
    piece_at: dict[int, str] = {}
    for piece, cuts in [*((p, True) for p in cut), *((p, False) for p in find)]:
        state, size = 0, 0
        for word in reversed(piece.split()):
            nxt = goto[state].get(word)
            if nxt is None:
                nxt = goto[state][word] = len(goto)
                goto.append({})
                longest_cut.append(0)
            state, size = nxt, size + 1
        piece_at[state] = piece
        if cuts:
            longest_cut[state] = size
    fail = [0] * len(goto)  # per state: the state of the longest proper suffix of what it has read
    level = list(goto[0].values())
    while level:  # breadth first: a state's fail is known before its children are reached
        deeper: list[int] = []
        for state in level:
            back, children = fail[state], goto[state]
            longest_cut[state] = longest_cut[state] or longest_cut[back]
            for word, child in children.items():
                f, to = back, goto[back].get(word)
                while to is None and f:
                    f = fail[f]
                    to = goto[f].get(word)
                fail[child] = to or 0
            deeper += children.values()
        level = deeper
    state, seen, reach = 0, bytearray(len(goto)), [0] * len(words)  # reach[i]: the longest cut piece at word i
    for i in range(len(words) - 1, -1, -1):
        word = words[i]
        while state and word not in goto[state]:
            state = fail[state]
        state = goto[state].get(word, 0)
        seen[state] = 1
        reach[i] = longest_cut[state]
    found = set()
    for state in [s for s, hit in enumerate(seen) if hit]:
        while state and seen[state] != 2:  # what a state read ends with every piece on its fail chain
            seen[state] = 2
            if state in piece_at:
                found.add(piece_at[state])
            state = fail[state]
    out, cut_to = [], 0  # cut_to: the end of the run of cuts so far
    for i, word in enumerate(words):
        if reach[i] and i >= cut_to:  # an occurrence that overlaps none before it
            out.append("|")
        elif i >= cut_to:
            out.append(word)
        cut_to = max(cut_to, i + reach[i])
    return " " + " ".join(out) + " ", frozenset(found)
