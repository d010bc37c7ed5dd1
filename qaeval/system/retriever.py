"""BM25 over a whole corpus, for the reference system: SQLite FTS5, which ships with Python.

``CorpusRetriever.build(corpus, cache_dir)`` streams the corpus once into a contentless FTS5 index written
atomically to ``cache_dir/fts5-<schema>-<corpus fingerprint>.sqlite``, which later builds of the same
corpus open instead (concurrent builders take turns on a lock file); without ``cache_dir`` the index is a
temporary file ``close()`` removes. ``search(question, k, floor=...)`` returns ``[(passage_id, bm25)]``,
best first. The question's words (qaeval's tokenizer, stopwords dropped) reach FTS5 only as quoted terms
joined by OR, never as operators.

A word found in more than ``COMMON`` passages takes no part in the ranking while the question has a rarer
one (each match costs BM25 time; such a word has a low IDF anyway: ``benchmarks/bench_corpus.py``). BM25
scores mean nothing across corpora, so the relevance floor applies to ``coverage`` (the share of the
question's content terms a passage holds, as ``reference.lexical_scores`` computes over a case's sources)
on the ``CANDIDATES * k`` passages BM25 proposes: a question that abstains over its fixture abstains over
the corpus for the same reason."""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import sqlite3
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from qaeval.core.errors import FileAccessError
from qaeval.core.text import STOPWORDS, content_terms, tokens
from qaeval.data.corpus import Corpus, Passage

try:  # POSIX advisory locks; elsewhere concurrent builders may each build (the rename stays atomic)
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]  # no POSIX locks on this platform

SCHEMA = "1"
CANDIDATES = 4  # with a floor, BM25 proposes CANDIDATES * k passages for the k that clear it
COMMON = 1000  # a word in more passages than this ranks nothing while the question has a rarer one
_TOKENIZER = "porter unicode61 remove_diacritics 2"
_BATCH = 5000


def coverage(question: str, passage: Passage) -> float:
    """The share of the question's content terms that the passage's text or title contains (0 when the
    question has none): the relevance the per-case reference system puts its floor on."""
    q_terms = set(content_terms(question))
    if not q_terms:
        return 0.0
    terms = set(content_terms(passage.text)).union(content_terms(passage.title or ""))
    return len(q_terms & terms) / len(q_terms)


def question_words(question: str) -> list[str]:
    """The question's words as qaeval tokenizes them (stopwords dropped, each once, in order)."""
    return list(
        dict.fromkeys(
            part for token in tokens(question) for part in re.split(r"[.,]", token) if part and part not in STOPWORDS
        )
    )


def match_expression(words: list[str]) -> str | None:
    """An FTS5 query that ORs the words, each a quoted string (None when there is none)."""
    return " OR ".join('"' + w.replace('"', '""') + '"' for w in words) or None


@contextmanager
def _exclusive(path: Path) -> Iterator[None]:
    with open(path, "a+b") as handle:
        if fcntl is not None:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        yield


def _fill(db: sqlite3.Connection, corpus: Corpus) -> None:
    db.executescript(f"""
        PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF; PRAGMA cache_size = -65536;
        CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE ids(row INTEGER PRIMARY KEY, id TEXT NOT NULL);
        CREATE VIRTUAL TABLE passages USING fts5(title, text, content='', tokenize='{_TOKENIZER}');
    """)
    rows: list[tuple[int, str | None, str]] = []
    ids: list[tuple[int, str]] = []
    for row, passage in enumerate(corpus, start=1):
        rows.append((row, passage.title, passage.text))
        ids.append((row, passage.id))
        if len(rows) == _BATCH:
            _flush(db, rows, ids)
    _flush(db, rows, ids)
    db.execute("INSERT INTO passages(passages) VALUES ('optimize')")
    db.executemany("INSERT INTO meta VALUES (?, ?)", [("schema", SCHEMA), ("fingerprint", corpus.fingerprint)])
    db.commit()


def _flush(db: sqlite3.Connection, rows: list[tuple[int, str | None, str]], ids: list[tuple[int, str]]) -> None:
    db.executemany("INSERT INTO passages(rowid, title, text) VALUES (?, ?, ?)", rows)
    db.executemany("INSERT INTO ids VALUES (?, ?)", ids)
    rows.clear()
    ids.clear()


def _write_index(corpus: Corpus, target: Path) -> None:
    """Build the index into a temporary sibling of ``target``, fsync it, rename it into place."""
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    try:
        db = sqlite3.connect(tmp)
        try:
            _fill(db, corpus)
        finally:
            db.close()
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _fingerprint_of(path: Path) -> str | None:
    """The corpus fingerprint an index file was built for, or None when it is not a readable index."""
    try:
        db = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
        try:
            found = dict(db.execute("SELECT key, value FROM meta").fetchall())
        finally:
            db.close()
    except sqlite3.DatabaseError:
        return None
    return found.get("fingerprint") if found.get("schema") == SCHEMA else None


class CorpusRetriever:
    """BM25 search over a Corpus through an FTS5 index file. ``built`` says whether this object read the
    corpus to build the index (False: it opened one from the cache). Safe to use from several threads."""

    def __init__(self, corpus: Corpus, path: Path, *, built: bool, temporary: bool) -> None:
        self.corpus = corpus
        self.path = path
        self.built = built
        self._temporary = temporary
        self._uri = path.resolve().as_uri() + "?mode=ro&immutable=1"
        self._local = threading.local()
        self._opened: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._known: dict[str, bool] = {}

    @classmethod
    def build(cls, corpus: Corpus, cache_dir: str | os.PathLike[str] | None = None) -> CorpusRetriever:
        """Open the cached index of this corpus, or build it (and cache it when ``cache_dir`` is given)."""
        if cache_dir is None:
            fd, tmp = tempfile.mkstemp(prefix="qaeval-fts5-", suffix=".sqlite")
            os.close(fd)
            os.unlink(tmp)
            _write_index(corpus, Path(tmp))
            return cls(corpus, Path(tmp), built=True, temporary=True)
        folder = Path(cache_dir)
        target = folder / f"fts5-{SCHEMA}-{corpus.fingerprint}.sqlite"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with _exclusive(folder / f"{target.name}.lock"):
                if target.exists() and _fingerprint_of(target) == corpus.fingerprint:
                    return cls(corpus, target, built=False, temporary=False)
                _write_index(corpus, target)
        except OSError as exc:
            raise FileAccessError(target, f"cannot write the retrieval index ({exc.strerror or exc})") from None
        return cls(corpus, target, built=True, temporary=False)

    def _db(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None:
            db = self._local.db = sqlite3.connect(self._uri, uri=True, check_same_thread=False)
            with self._lock:
                self._opened.append(db)
        return db

    def _common(self, word: str) -> bool:
        """A word in more than COMMON passages (counting stops there; answers are remembered)."""
        known = self._known.get(word)
        if known is None:
            sql = "SELECT count(*) FROM (SELECT 1 FROM passages WHERE passages MATCH ? LIMIT ?)"
            known = self._db().execute(sql, (match_expression([word]), COMMON + 1)).fetchone()[0] > COMMON
            if len(self._known) >= 1 << 16:
                self._known.clear()
            self._known[word] = known
        return known

    def search(self, question: str, k: int, *, floor: float = 0.0) -> list[tuple[str, float]]:
        """The ``k`` best passages for ``question`` as ``(passage_id, bm25)``, best first, keeping only
        passages whose ``coverage`` of the question is at least ``floor``. Empty when nothing matches."""
        words = question_words(question)
        if not words or k <= 0:
            return []
        rare = [w for w in words if not self._common(w)] or words
        limit = k if floor <= 0 else CANDIDATES * k
        found = (
            self._db()
            .execute(
                "SELECT ids.id, hits.score FROM (SELECT rowid AS row, -rank AS score FROM passages "
                "WHERE passages MATCH ? ORDER BY rank LIMIT ?) AS hits JOIN ids USING (row) "
                "ORDER BY hits.score DESC, hits.row",
                (match_expression(rare), limit),
            )
            .fetchall()
        )
        if floor <= 0:
            return found
        return list(itertools.islice((hit for hit in found if coverage(question, self.corpus[hit[0]]) >= floor), k))

    def close(self) -> None:
        with self._lock:
            opened, self._opened = self._opened, []
        for db in opened:
            db.close()
        self._local = threading.local()
        if self._temporary:
            with contextlib.suppress(OSError):
                os.unlink(self.path)
