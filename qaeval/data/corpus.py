"""The frozen corpus: ``corpus.jsonl`` beside the cases, one ``{"id", "text", "title"?}`` passage a line.

``Corpus.open(path)`` checks every line as strictly as the cases (every problem with its line, the first
``MAX_PROBLEMS`` listed, raised as one ``DatasetError``) while streaming the file once: it keeps the
sha256 of its bytes (``fingerprint``) and, per passage, only where its line is and a 64-bit hash of its
id (about 28 bytes a passage). ``corpus[id]`` reads that line back with ``os.pread`` from the handle it
keeps open, so a corpus replaced by a rename keeps its bytes; one changed in place is refused.
``Corpus.export(folder)`` hands a copy and its index to another process without naming the data folder.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
from array import array
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from qaeval.core.errors import DatasetError, FileAccessError, Problem
from qaeval.core.files import file_kind
from qaeval.core.jsonfile import json_error_text, loads_strict

CORPUS_FILE = "corpus.jsonl"
INDEX_FILE = "corpus.index.npz"  # written by export() beside the copy
INDEX_ARRAYS = ("offsets", "lengths", "lines", "hashes")
PASSAGE_FIELDS = ("id", "text", "title")
MAX_PROBLEMS = 100
_BLOCK = 1 << 20  # bytes read at a time while iterating


@dataclass(frozen=True, slots=True)
class Passage:
    """One passage: its id, its text and, optionally, the title that heads it.

    Attributes:
        id: The passage's id, unique in its corpus (or among one output's passages).
        text: The passage's text.
        title: The title that heads the passage, or None.
    """

    id: str
    text: str
    title: str | None = None


def _is_str(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


# Characters of one passage (text and title): what a system's output may carry back for it
# (``qaeval.system.contract.MAX_TEXT`` is this), so a longer corpus passage could never pass its fidelity check.
MAX_PASSAGE_CHARS = 1_000_000


def passage_problems(raw: Any) -> list[str]:
    """What is wrong with one parsed line of a corpus (empty when it is a valid passage)."""
    if not isinstance(raw, dict):
        kind = "a JSON array" if isinstance(raw, list) else type(raw).__name__
        return [f"each line must be one passage object {{id, text, title?}}, got {kind}"]
    problems = [
        f"unknown field {key!r}; a passage has id, text and an optional title"
        for key in raw
        if key not in PASSAGE_FIELDS
    ]
    if not _is_str(raw.get("id")):
        problems.append("'id' must be a non-empty string")
    if not _is_str(raw.get("text")):
        problems.append("'text' must be a non-empty string")
    if raw.get("title") is not None and not isinstance(raw["title"], str):
        problems.append("'title' must be a string or null")
    elif not problems and (size := len(raw["text"]) + len(raw.get("title") or "")) > MAX_PASSAGE_CHARS:
        problems.append(
            f"the passage is {size:,} characters long (text and title); a system can return at most "
            f"{MAX_PASSAGE_CHARS:,} for one passage"
        )
    return problems


@dataclass
class _Problems:
    """Problems of one load: the first MAX_PROBLEMS kept, the rest counted."""

    file: str
    kept: list[Problem] = field(default_factory=list)
    more: int = 0

    def add(self, line: int | None, message: str) -> None:
        if len(self.kept) < MAX_PROBLEMS:
            self.kept.append(Problem(self.file, line, message))
        else:
            self.more += 1

    def raise_any(self) -> None:
        if not self.kept:
            return
        found = sorted(self.kept, key=lambda p: p.line or 0)
        if self.more:
            found.append(Problem(self.file, None, f"... and {self.more} more problems not listed"))
        raise DatasetError(found)


def _open_regular(path: Path) -> Any:
    """An open binary handle on a regular file; a missing or non-regular file is a DatasetError."""
    where = str(path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise DatasetError("corpus file not found", file=where) from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise DatasetError("is a symbolic link that loops, not a file", file=where) from None
        raise FileAccessError(path, f"cannot read ({exc.strerror or exc})") from None
    if not stat.S_ISREG(info.st_mode):
        kind = file_kind(info.st_mode)
        raise DatasetError(f"is {kind}, not a corpus file", file=where)
    try:
        return open(path, "rb")
    except OSError as exc:
        raise FileAccessError(path, f"cannot read ({exc.strerror or exc})") from None


def _id_hash(passage_id: str) -> int:
    """A 64-bit hash of an id that is the same in every process (``hash()`` is salted per process), so an
    index built by the harness serves a worker as it is."""
    return int.from_bytes(
        hashlib.blake2b(passage_id.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little", signed=True
    )


def _scan(handle: Any, problems: _Problems) -> tuple[dict[str, array[int]], str]:
    """Validate every line of an open corpus file; returns where each valid passage's line is (offset,
    length, line number, id hash: ``INDEX_ARRAYS``) and the sha256 of every byte read."""
    index = {name: array("i" if name == "lines" else "q") for name in INDEX_ARRAYS}
    digest, offset = hashlib.sha256(), 0
    for number, raw in enumerate(handle, start=1):
        digest.update(raw)
        start, offset = offset, offset + len(raw)
        if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
            raw, start = raw[3:], start + 3
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            problems.add(number, f"not valid UTF-8 (byte 0x{raw[exc.start]:02x} at offset {start + exc.start})")
            continue
        if not text.strip():
            continue
        try:
            value = loads_strict(text)
        except ValueError as exc:
            problems.add(number, json_error_text(exc))
            continue
        found = passage_problems(value)
        label = f"passage {value['id']!r}: " if isinstance(value, dict) and _is_str(value.get("id")) else ""
        for message in found:
            problems.add(number, label + message)
        if not found:
            for name, item in zip(INDEX_ARRAYS, (start, len(raw), number, _id_hash(value["id"]))):
                index[name].append(item)
    return index, digest.hexdigest()


def _parse(raw: bytes) -> Passage:
    value = json.loads(raw)
    return Passage(value["id"], value["text"], value.get("title"))


class Corpus:
    """A read-only, validated ``corpus.jsonl``: ``len()``, ``id in corpus``, ``corpus[id]`` (a Passage,
    KeyError when absent), iteration over Passages in file order, and ``fingerprint`` (sha256 of the
    file's bytes). Two corpora are equal when their bytes are. Close it (or use ``with``) when done.

    Make one with ``Corpus.open(path)``; the constructor takes what that method read.

    Args:
        handle: The open file, read with ``os.pread``.
        path: Where the file is.
        index: Where each passage's line is (``INDEX_ARRAYS``: offsets, lengths, line numbers, id hashes).
        fingerprint: The sha256 of the file's bytes.

    Attributes:
        path: Where the file is.
        fingerprint: The sha256 of the file's bytes (hex): records and the gate compare it.
    """

    def __init__(self, handle: Any, path: Path, index: Mapping[str, Any], fingerprint: str) -> None:
        import numpy as np

        self.path = path
        self.fingerprint = fingerprint
        self._handle = handle
        self._fd = handle.fileno()
        info = os.fstat(self._fd)
        self._stamp = (info.st_size, info.st_mtime_ns)
        self._offsets, self._lengths, self._lines, self._hashes = (np.asarray(index[name]) for name in INDEX_ARRAYS)
        hashes = self._hashes
        self._order = np.argsort(hashes, kind="stable")
        self._sorted = hashes[self._order]
        self._order = self._order.astype(np.int32)

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> Corpus:
        """Read and validate a corpus file.

        Args:
            path: The corpus file (``corpus.jsonl``).

        Returns:
            The open corpus.

        Raises:
            DatasetError: Listing every problem, each with its line (exit 65).
            FileAccessError: The file cannot be read (exit 74).
        """
        path = Path(path)
        handle = _open_regular(path)
        problems = _Problems(str(path))
        try:
            index, fingerprint = _scan(handle, problems)
            corpus = cls(handle, path, index, fingerprint)
            corpus._check_duplicates(problems)
        except OSError as exc:
            handle.close()
            raise FileAccessError(path, f"cannot read ({exc.strerror or exc})") from None
        except BaseException:
            handle.close()
            raise
        if not len(corpus) and not problems.kept:
            problems.add(None, "the corpus is empty: no passage in the file")
        if problems.kept:
            corpus.close()
        problems.raise_any()
        return corpus

    def _check_duplicates(self, problems: _Problems) -> None:
        """Rows whose id hashes collide are read back: the same id twice is a problem, first line named."""
        import numpy as np

        equal = np.flatnonzero(self._sorted[1:] == self._sorted[:-1])
        first_seen: dict[str, int] = {}
        for position in np.union1d(equal, equal + 1):
            row = int(self._order[position])
            passage_id = self._read(row).id
            line = int(self._lines[row])
            if passage_id in first_seen and first_seen[passage_id] != line:
                problems.add(line, f"duplicate id {passage_id!r} (first at line {first_seen[passage_id]})")
            first_seen.setdefault(passage_id, line)

    def __len__(self) -> int:
        return len(self._offsets)

    def _find(self, passage_id: object) -> Passage | None:
        if not isinstance(passage_id, str):
            return None
        h = _id_hash(passage_id)
        for position in range(int(self._sorted.searchsorted(h, "left")), int(self._sorted.searchsorted(h, "right"))):
            passage = self._read(int(self._order[position]))
            if passage.id == passage_id:
                return passage
        return None

    def __contains__(self, passage_id: object) -> bool:
        return self._find(passage_id) is not None

    def __getitem__(self, passage_id: str) -> Passage:
        passage = self._find(passage_id)
        if passage is None:
            raise KeyError(passage_id)
        return passage

    def get(self, passage_id: str, default: Passage | None = None) -> Passage | None:
        passage = self._find(passage_id)
        return default if passage is None else passage

    def __iter__(self) -> Iterator[Passage]:
        """Every passage in file order, read in blocks (memory does not grow with the corpus)."""
        block, block_start = b"", 0
        for row in range(len(self)):
            offset, length = int(self._offsets[row]), int(self._lengths[row])
            if offset + length > block_start + len(block):
                self._check_unchanged()
                block, block_start = self._pread(max(_BLOCK, length), offset), offset
            yield _parse(block[offset - block_start : offset - block_start + length])

    def at(self, row: int) -> Passage:
        """The passage on the ``row``-th line of passages (0-based, file order).

        Args:
            row: Its place among the passages, from 0.

        Returns:
            The passage.

        Raises:
            IndexError: There is no such row.
        """
        if not 0 <= row < len(self):
            raise IndexError(row)
        return self._read(row)

    def _read(self, row: int) -> Passage:
        self._check_unchanged()
        return _parse(self._pread(int(self._lengths[row]), int(self._offsets[row])))

    def _pread(self, size: int, offset: int) -> bytes:
        try:
            return os.pread(self._fd, size, offset)
        except OSError as exc:
            raise FileAccessError(self.path, f"cannot read ({exc.strerror or exc})") from None

    def _check_unchanged(self) -> None:
        info = os.fstat(self._fd)
        if (info.st_size, info.st_mtime_ns) != self._stamp:
            raise DatasetError(
                "the corpus file changed on disk after it was opened and checked; open it again", file=str(self.path)
            )

    def export(self, folder: str | os.PathLike[str]) -> Path:
        """A copy of the corpus (the bytes it fingerprinted) as ``folder/corpus.jsonl``, and beside it its index
        (``corpus.index.npz``) for ``Corpus.open_export``. A copy, never a link: a link would let the process
        that reads it write to the user's own corpus.

        Args:
            folder: The folder to put the copy in (a worker's scratch folder).

        Returns:
            The copy's path.
        """
        import numpy as np

        target = Path(folder) / CORPUS_FILE
        try:
            Path(folder).mkdir(parents=True, exist_ok=True)
            for path in (target, target.with_name(INDEX_FILE)):
                if os.path.lexists(path):
                    os.unlink(path)
            self._copy(target)
            with open(target.with_name(INDEX_FILE), "xb") as out:
                np.savez(
                    out,
                    offsets=self._offsets,
                    lengths=self._lengths,
                    lines=self._lines,
                    hashes=self._hashes,
                    fingerprint=np.array(self.fingerprint),
                    size=np.array(self._stamp[0]),
                )
        except OSError as exc:
            raise FileAccessError(target, f"cannot export the corpus ({exc.strerror or exc})") from None
        self._check_unchanged()
        return target

    @classmethod
    def open_export(cls, path: str | os.PathLike[str]) -> Corpus:
        """A corpus ``export`` wrote, opened with the exporter's index (the file is not read again); a copy
        whose size is not the one indexed is refused.

        Args:
            path: The copy ``export`` returned.

        Returns:
            The open corpus.
        """
        import numpy as np

        path = Path(path)
        try:
            with np.load(path.with_name(INDEX_FILE), allow_pickle=False) as saved:
                arrays = {name: saved[name] for name in INDEX_ARRAYS}
                fingerprint, size = str(saved["fingerprint"]), int(saved["size"])
        except (OSError, KeyError, ValueError) as exc:
            raise FileAccessError(path.with_name(INDEX_FILE), f"cannot read the exported index ({exc})") from None
        corpus = cls(_open_regular(path), path, arrays, fingerprint)
        if corpus._stamp[0] != size:
            corpus.close()
            raise DatasetError("the exported corpus is not the size its index was built for", file=str(path))
        return corpus

    def _copy(self, target: Path) -> None:
        with open(target, "wb") as out:
            offset = 0
            while block := self._pread(_BLOCK, offset):
                out.write(block)
                offset += len(block)

    def close(self) -> None:
        self._handle.close()

    def __enter__(self) -> Corpus:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Corpus) and other.fingerprint == self.fingerprint

    def __hash__(self) -> int:
        return hash(self.fingerprint)

    def __repr__(self) -> str:
        return f"<Corpus of {len(self)} passages, sha256 {self.fingerprint[:12]}>"

    def __reduce__(self) -> NoReturn:
        raise TypeError("a Corpus is not pickled: export() it to a folder and Corpus.open() it there")


def load_corpus(folder: str | os.PathLike[str]) -> Corpus | None:
    """The corpus of a data folder (``FOLDER/corpus.jsonl``), or None when the folder has none."""
    path = Path(folder) / CORPUS_FILE
    if not os.path.lexists(path):
        return None
    return Corpus.open(path)
