"""Passages pooled from a public dataset into a frozen corpus: what ``qaeval import ... --corpus`` writes.

A ``PassagePool`` merges paragraphs with the same text into one passage, its id the title's slug and ten
hex digits of the text's sha256 (``super-bowl-50-3fa1c09e2b``, ``-2`` on a clash), the same on every
import; new passages stream to a temporary file, so memory holds a digest and an id per passage.
``publish()`` checks the file with ``Corpus.open`` and puts it in place, never over an existing one.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from qaeval.core.errors import FileAccessError, UsageError
from qaeval.core.files import FILE_MODE
from qaeval.core.jsonfile import dumps_canonical
from qaeval.data.corpus import CORPUS_FILE, Corpus


def _key(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()[:16]


def _slug(title: str | None) -> str:
    return re.sub(r"[^a-z0-9]+", "-", (title or "").lower()).strip("-")[:40].strip("-") or "passage"


class PassagePool:
    """Distinct passages, written as they come to a temporary file in ``folder``; ``pooled`` counts the
    passages written, ``merged`` the paragraphs whose text was already pooled. Use it with ``with``: a
    pool left without ``publish()`` removes its temporary file."""

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.path = Path(folder) / CORPUS_FILE
        self.pooled = 0
        self.merged = 0
        self._ids: dict[bytes, str] = {}
        self._taken: set[str] = set()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{CORPUS_FILE}.", suffix=".tmp", dir=self.path.parent)
            os.fchmod(fd, FILE_MODE)
        except OSError as exc:
            raise FileAccessError(self.path, f"cannot write ({exc.strerror or exc})") from None
        self._tmp = Path(tmp)
        self._file = os.fdopen(fd, "wb")

    def add(self, title: str | None, text: str) -> str:
        """The id of the passage with this text: pooled now, or merged into the one pooled before."""
        key = _key(text)
        known = self._ids.get(key)
        if known is not None:
            self.merged += 1
            return known
        base = f"{_slug(title)}-{key.hex()[:10]}"
        passage_id, n = base, 2
        while passage_id in self._taken:
            passage_id, n = f"{base}-{n}", n + 1
        self._taken.add(passage_id)
        self._ids[key] = passage_id
        line = {"id": passage_id, "text": text, **({"title": title} if title else {})}
        self._write((dumps_canonical(line) + "\n").encode("utf-8"))
        self.pooled += 1
        return passage_id

    def id_of(self, text: str) -> str:
        """The id of a passage already pooled (KeyError when its text never was)."""
        return self._ids[_key(text)]

    def _write(self, data: bytes) -> None:
        try:
            self._file.write(data)
        except OSError as exc:
            raise FileAccessError(self.path, f"cannot write ({exc.strerror or exc})") from None

    def publish(self) -> Path:
        """Check the pooled passages as a corpus and put them in place as ``corpus.jsonl`` (a UsageError
        when one is already there: an import never overwrites data)."""
        try:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
        except OSError as exc:
            raise FileAccessError(self.path, f"cannot write ({exc.strerror or exc})") from None
        Corpus.open(self._tmp).close()
        try:
            self._put_in_place()
        except FileExistsError:
            raise UsageError(f"{self.path} exists; choose another --out (an import never overwrites data)") from None
        except OSError as exc:
            raise FileAccessError(self.path, f"cannot write ({exc.strerror or exc})") from None
        self.discard()
        return self.path

    def _put_in_place(self) -> None:
        """A hard link fails when the name is taken; where links are not allowed, a rename after a look."""
        try:
            os.link(self._tmp, self.path)
        except FileExistsError:
            raise
        except OSError:
            if os.path.lexists(self.path):
                raise FileExistsError(self.path) from None
            os.rename(self._tmp, self.path)

    def discard(self) -> None:
        """Remove the temporary file (the published corpus, if any, stays)."""
        self._file.close()
        try:
            os.unlink(self._tmp)
        except FileNotFoundError:
            pass

    def __enter__(self) -> PassagePool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.discard()


def corpus_case(case: dict[str, Any], pool: PassagePool) -> dict[str, Any]:
    """A case built with its own ``sources`` (all of them pooled), as a corpus case: no ``sources``, its
    gold source ids and checkpoints naming corpus passages (two sources with one text become one id)."""
    ids = {s["id"]: pool.id_of(s["text"]) for s in case["sources"]}
    out = {k: v for k, v in case.items() if k != "sources"}
    out["gold_source_ids"] = list(dict.fromkeys(ids[g] for g in case["gold_source_ids"]))
    if "checkpoints" in case:
        renamed = ({**cp, "source_id": ids[cp["source_id"]]} if "source_id" in cp else cp for cp in case["checkpoints"])
        out["checkpoints"] = list({dumps_canonical(cp): cp for cp in renamed}.values())
    return out
