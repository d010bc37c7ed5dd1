"""Loading on two cores: while this process reads the case files, a forked copy reads them too and computes
ahead of it what this process would otherwise compute on its own core.

Loading 10,000 cases of 4 KB takes about a second and a half on one core while the other waits. The copy
(``qaeval.forked.Ahead``: only where forking is safe, and for files of at least ``MIN_BYTES``) keeps ahead
of the loader in the files and sends, every ``CHUNK`` lines, for each case object: its fingerprint (the
sha256 of its canonical JSON: a fifth of the load) and the term sets of its passages (``qaeval.text``'s
memo, which the reference system, the checks, the judge and the outcomes all read). The loader takes
what has arrived when it reaches a line and computes the rest itself, so it never waits for the copy.
The copy is slower per line than the loader (it does more), so it reads where the loader is (a shared
word of memory) and, when the loader catches up with it, jumps ``LEAD`` bytes ahead of it; the load ends
when it would have, sooner, and the copy is stopped then, done or not.

Nothing it sends is taken on trust about which line it describes: each item carries the line's offset,
length and a digest of its bytes (sha256), and the loader takes it only for the line it has just read at
that offset of that file with bytes of that length and digest (a file rewritten between the two reads is
fingerprinted here). What the copy computes from those bytes is what this process would, with the same
code.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import stat
import struct
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from qaeval.errors import Problem
from qaeval.files import READ_BUFFER, iter_jsonl_lines
from qaeval.forked import MIN_ROWS, Ahead
from qaeval.text import distinct_terms, remember_term_sets

CHUNK = 64  # lines a message: a few milliseconds of the copy's work
MIN_BYTES = 2 << 20  # smaller suites load in a fraction of a second: not worth a fork
LEAD = 256 << 10  # bytes the copy jumps ahead of the loader when the loader has caught up with it
SLACK = 4 * LEAD  # the copy computes term sets (a line's costliest part) only this far ahead of the loader
_AT = struct.Struct("=qq")  # the loader's place: (file index, offset of the end of the line it read last)

# One line's item: (file index, offset, length of its bytes, digest of its bytes, fingerprint, the term sets
# of its sources in order, or None when the case has no plain list of sources).
Item = tuple[int, int, int, bytes, str, "tuple[tuple[str, ...], ...] | None"]


def _digest(raw: bytes) -> bytes:
    """What identifies a line's bytes between the copy and the loader: sha256 (0.04 s for 40 MB), not
    ``hash()``, whose 64 bits a fixed PYTHONHASHSEED lets anyone collide who can rewrite the file between
    the two reads."""
    return hashlib.sha256(raw).digest()[:16]


def _sources_terms(raw: dict[str, Any]) -> tuple[tuple[str, ...], ...] | None:
    sources = raw.get("sources")
    if type(sources) is not list:
        return None
    found = []
    for src in sources:
        text = src.get("text") if type(src) is dict else None
        if type(text) is not str:
            return None
        found.append(distinct_terms(text))
    return tuple(found)


def _case_object(raw: bytes, first: bool) -> dict[str, Any] | None:
    """A line's value as the loader parses it (``iter_jsonl_lines``), when it is an object. Parsed
    leniently, at half the cost: where the two differ (a key twice, NaN, an unpaired surrogate) the
    loader's strict parse refuses the line, so what the copy sent for it is never taken."""
    try:
        line = raw.decode("utf-8-sig" if first else "utf-8")
        value = json.loads(line) if line.strip() else None
    except (ValueError, RecursionError):  # not UTF-8 or not JSON: the loader reports it
        return None
    return value if type(value) is dict else None


def _computed(paths: Sequence[str], place: mmap.mmap, case_fingerprint: Callable[[Any], str]) -> Iterator[list[Item]]:
    """In the copy: the items of the lines ahead of the loader, ``CHUNK`` at a time."""
    batch: list[Item] = []
    for index, path in enumerate(paths):
        try:  # never opens a FIFO or a device (an open can have effects), never waits: the loader refuses both
            if not stat.S_ISREG(os.stat(path).st_mode):
                continue
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            continue
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped for one since
            os.close(fd)
            continue
        with os.fdopen(fd, "rb", buffering=READ_BUFFER) as handle:
            offset = 0
            while True:
                at_index, at_offset = _AT.unpack_from(place)
                if at_index > index:
                    break  # the loader is past this file
                if at_index == index and at_offset >= offset:  # caught up: jump ahead, to the next line's start
                    handle.seek(at_offset + LEAD)
                    offset = at_offset + LEAD + len(handle.readline())
                raw = handle.readline()
                if not raw:
                    break
                value = _case_object(raw, offset == 0)
                if value is not None:
                    spare = at_index < index or offset > at_offset + SLACK  # far enough ahead for term sets too
                    try:
                        batch.append((index, offset, len(raw), _digest(raw), case_fingerprint(value),
                                      _sources_terms(value) if spare else None))
                    except ValueError:  # text no file can hold (an unpaired surrogate): the loader refuses it
                        pass
                    if len(batch) >= CHUNK:
                        yield batch
                        batch = []
                offset += len(raw)
    if batch:
        yield batch


class ReadAhead:
    """The loader's side: ``lines(index, path, problems)`` is ``iter_jsonl`` for the ``index``-th file,
    and ``fingerprint(where, number)`` the fingerprint the copy sent for the line just read, if it did
    (``case_fingerprint`` of its value, computed in the copy)."""

    def __init__(self, paths: Sequence[Path], case_fingerprint: Callable[[Any], str]) -> None:
        try:
            size = sum(os.stat(p).st_size for p in paths)
        except OSError:  # the loader reports it
            size = 0
        self.place = mmap.mmap(-1, _AT.size)  # shared with the copy: it reads where the loader is
        self.got: dict[tuple[int, int], Item] = {}
        self.taken: dict[tuple[str, int], str] = {}
        rows = MIN_ROWS if size >= MIN_BYTES else 0  # (Ahead forks for MIN_ROWS and more)
        self.ahead = Ahead(_computed, [str(p) for p in paths], self.place, case_fingerprint, rows=rows)

    def lines(self, index: int, path: Path, problems: list[Problem]) -> Iterator[tuple[int, Any]]:
        for number, offset, raw, value in iter_jsonl_lines(path, problems):
            if self.ahead.fd is not None or self.got:  # a copy still sending, or items it sent before it ended
                _AT.pack_into(self.place, 0, index, offset + len(raw))
                item = self._item(index, offset)
                if item is not None and item[2] == len(raw) and item[3] == _digest(raw) and type(value) is dict:
                    self.taken[(str(path), number)] = item[4]
                    if item[5] is not None and type(value.get("sources")) is list:
                        remember_term_sets((s["text"] for s in value["sources"]), item[5])
            yield number, value

    def _item(self, index: int, offset: int) -> Item | None:
        key = (index, offset)
        if key not in self.got:
            for batch in self.ahead.arrived():
                for item in batch:
                    if item[:2] >= key:  # not one for a line already read, come too late
                        self.got[item[:2]] = item
        return self.got.pop(key, None)

    def fingerprint(self, where: str, number: int) -> str | None:
        return self.taken.pop((where, number), None)

    def close(self) -> None:
        self.ahead.close()
        self.place.close()
        self.got.clear()
        self.taken.clear()

    def __enter__(self) -> ReadAhead:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
