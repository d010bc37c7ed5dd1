"""Reading and writing files without losing or faking anything.

Reading
    ``read_bytes`` opens only regular files (a FIFO, a folder or a looping symlink is a problem, never a
    hang or a silent skip) and turns a permission or I/O failure into ``FileAccessError`` (exit 74).
    JSON is parsed strictly by ``qaeval.core.jsonfile``.
Writing
    ``write_atomic`` writes a whole file to a temporary sibling, flushes and fsyncs it and renames it
    into place: readers see the old file or the new one, never a part; the temporary is removed on any
    failure. ``append_line`` appends one line under an exclusive lock, checks that every byte was
    written, fsyncs, and on failure truncates the file back to its previous length.
Both raise ``FileAccessError`` (exit 74) when the disk says no.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import sys
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from qaeval.core.errors import FileAccessError, Problem

try:  # POSIX advisory locks; elsewhere appends are still single write() calls
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]  # no POSIX locks on this platform


class NotRegularFile(Exception):
    """The path exists but is not something to read as data (FIFO, folder, device, symlink loop)."""


def _file_mode() -> int:
    try:  # Linux says the mask without its being set: os.umask would set it, for every thread, to read it
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


FILE_MODE = _file_mode()  # what open() would give a new file; mkstemp's 0600 is for secrets


def os_reason(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


def file_kind(mode: int) -> str:
    """What a path that is not a regular file is, in words: "a folder", "a FIFO", "not a regular file"."""
    return "a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "not a regular file"


def read_bytes(path: str | Path) -> bytes:
    """The bytes of a regular file. Raises FileNotFoundError when absent, NotRegularFile when it is not a
    regular file (without opening it, so a FIFO never blocks), FileAccessError when it cannot be read."""
    path = Path(path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NotRegularFile("a symbolic link that loops") from None
        raise FileAccessError(path, f"cannot read ({os_reason(exc)})") from None
    if not stat.S_ISREG(info.st_mode):
        kind = file_kind(info.st_mode)
        raise NotRegularFile(kind)
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise FileAccessError(path, f"cannot read ({os_reason(exc)})") from None


def read_text(path: str | Path, what: str = "file") -> str:
    """A UTF-8 (BOM allowed) text file; every way it can be wrong becomes a typed error."""
    from qaeval.core.errors import DatasetError

    try:
        data = read_bytes(path)
    except FileNotFoundError:
        raise DatasetError(f"{what} not found", file=str(path)) from None
    except NotRegularFile as exc:
        raise DatasetError(f"{what} is {exc}, not a file", file=str(path)) from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        at = exc.start + (3 if data.startswith(b"\xef\xbb\xbf") else 0)  # utf-8-sig counts from past the BOM
        line = data.count(b"\n", 0, at) + 1
        raise DatasetError([Problem(str(path), line, f"not valid UTF-8 (byte 0x{data[at]:02x})")]) from None


# --------------------------------------------------------------------------- strict JSON


# --------------------------------------------------------------------------- writing


# How each kind of output qaeval writes begins: an existing file may be replaced by an output of its kind
# only when it begins so. A mark found further in proves nothing (a test file's string literal may quote a
# record's first line), so each kind is known by its structure at the start of the file:
# a JSON object (or a JSONL file's first line) whose first key is qaeval's format mark, an HTML page
# whose body opens with qaeval's report, a CSV sheet whose header row names exactly qaeval's columns.
OUTPUT_STARTS: dict[str, re.Pattern[bytes]] = {
    "record": re.compile(rb'\A(?:\xef\xbb\xbf)?\s*\{\s*"format"\s*:\s*"qaeval-(?:record|baseline/1)"'),
    "journal": re.compile(rb'\A\{"format":\s*"qaeval-journal"'),
    "labels": re.compile(rb'\A\{"format":\s*"qaeval-labels"'),
    "report": re.compile(
        rb'\A\s*<!DOCTYPE html>\s*<html[^>]*>\s*<head>.*?</head>\s*<body>\s*<main class="qaeval-report">', re.S
    ),
}
OUTPUT_WORDS = {
    "record": "run record",
    "report": "HTML report",
    "sheet": "label sheet",
    "review": "review sheet",
    "labels": "labels file",
    "journal": "run's journal",
    "annotations": "span annotations",
}
HEAD_BYTES = 1 << 16  # what is read of an existing file to tell its kind


# The header rows of the CSV sheets qaeval writes, declared here, where the guard that knows them by their
# first row lives: a label sheet (``label export``, qaeval.verdicts.sheets) and a review sheet (``propose``,
# qaeval.proposals.candidates).
LABEL_SHEET_COLUMNS = (
    "case_id",
    "axis",
    "output_fingerprint",
    "question",
    "answer",
    "cited",
    "gold_answer",
    "score",
    "reason",
)
REVIEW_SHEET_COLUMNS = (
    "candidate_id",
    "origin",
    "source",
    "why",
    "checks",
    "question",
    "passages",
    "answer",
    "accept",
    "expected_behavior",
    "gold_answer",
    "gold_source_ids",
    "difficulty",
    "note",
    "fingerprint",
)


def sheet_columns(kind: str) -> tuple[str, ...]:
    """The header row of a CSV sheet qaeval writes: ``sheet`` (label export) or ``review`` (propose)."""
    return LABEL_SHEET_COLUMNS if kind == "sheet" else REVIEW_SHEET_COLUMNS


def is_sheet_header(head: bytes, kind: str) -> bool:
    """Whether the first row of ``head`` names exactly the columns of qaeval's ``kind`` of sheet (in any
    order, quoted or not, with or without a BOM: as a spreadsheet may save it again)."""
    import csv

    first = head.split(b"\n", 1)[0].rstrip(b"\r")
    if first.startswith(b"\xef\xbb\xbf"):
        first = first[3:]
    try:
        row = next(csv.reader([first.decode("ascii")]))  # qaeval's column names are ASCII
    except (UnicodeDecodeError, csv.Error, StopIteration):
        return False
    return sorted(c.strip() for c in row) == sorted(sheet_columns(kind))


def _same_file(a: str, b: str) -> bool:
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _written_as(path: str, kind: str) -> bool:
    """An existing regular file that begins as qaeval's outputs of ``kind`` begin (``OUTPUT_STARTS``)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return False
        with open(path, "rb") as f:
            head = f.read(HEAD_BYTES)
    except OSError:
        return False
    if kind in ("sheet", "review"):
        return is_sheet_header(head, kind)
    if kind == "annotations":
        return _written_annotations(path, head)
    start = OUTPUT_STARTS.get(kind)
    return start is not None and start.match(head) is not None


# The columns of the span annotations ``monitor --annotations`` writes (qaeval.reports.annotations).
ANNOTATION_COLUMNS = ("context.span_id", "trace_id", "name", "score", "label", "explanation")


def _written_annotations(path: str, head: bytes) -> bool:
    """Whether a file begins as qaeval's span annotations do: a table's first row or object names
    ``context.span_id`` first, OTLP/JSON names qaeval's scope, a Parquet file has exactly their columns."""
    if head.startswith((b'{"context.span_id"', b"context.span_id,")):
        return True
    if head.startswith(b'{"resourceSpans"') and b'"qaeval.annotations"' in head[:400]:
        return True
    if head.startswith(b"PAR1"):
        try:
            import pyarrow.parquet as pq

            return tuple(pq.read_schema(path).names) == ANNOTATION_COLUMNS
        except (ImportError, OSError, ValueError):  # no pyarrow, or not a Parquet file it reads: not ours
            return False
    return False


def _holds_other_data(path: str, kind: str) -> bool:
    """An existing, non-empty regular file without qaeval's mark for ``kind``: what an output must not replace
    (``/dev/null``, a pipe or an empty file hold nothing to lose)."""
    try:
        info = os.lstat(path)  # a link is the writer's to refuse (a journal), or is replaced, never followed
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_size > 0 and not _written_as(path, kind)


def refuse_overwrite(
    outputs: Iterable[tuple[str, Any, str]], inputs: Iterable[tuple[str, Any]] = (), data: Any = None
) -> None:
    """Raise UsageError (exit 64), naming both paths, when a command's output would destroy data.
    Anywhere, an output of a kind qaeval marks (a record, a report, a journal, a sheet) replaces only an
    empty file or one qaeval wrote as that kind: never a source file, a README or another tool's output.

    ``outputs`` are (parameter, path, kind) and ``inputs`` (parameter, path); ``None`` is skipped. An output
    may not be an input (the same file by resolved path, or by ``os.path.samefile`` for a hard link) nor
    another output. Inside the data folder ``data`` (a folder of cases; a file is taken as one more input)
    an output may not be a ``*.jsonl`` directly in it (the next load would read it as cases), and may
    replace an existing file only if qaeval wrote it as the same kind (a run record, an HTML report).
    Call it before the command does any work."""
    from qaeval.core.errors import UsageError

    outs = [(name, os.fspath(path), kind) for name, path, kind in outputs if path is not None]
    ins = [(name, os.fspath(path)) for name, path in inputs if isinstance(path, (str, os.PathLike))]
    folder = None
    if isinstance(data, (str, os.PathLike)) and os.fspath(data):
        if os.path.isdir(data):
            folder = os.path.realpath(data)
        elif os.path.isfile(data):
            ins.append(("data", os.fspath(data)))
    for i, (name, path, kind) in enumerate(outs):
        for other, given in [*ins, *((n, p) for n, p, _ in outs[:i])]:
            if _same_file(path, given):
                raise UsageError(
                    f"refusing to write the {OUTPUT_WORDS[kind]} ({name}) to {path}: it is {other} {given}, "
                    "which this command reads "
                    "or writes as well; choose another path"
                )
        real = os.path.realpath(path)
        if folder is None or os.path.commonpath([real, folder]) != folder:
            if _holds_other_data(path, kind):
                raise UsageError(
                    f"refusing to write the {OUTPUT_WORDS[kind]} ({name}) to {path}: a file that is not a "
                    f"{OUTPUT_WORDS[kind]} qaeval wrote is there (your code, a document, another tool's "
                    "output); choose another path, or remove it first"
                )
            continue
        if os.path.dirname(real) == folder and real.endswith(".jsonl"):
            raise UsageError(
                f"refusing to write the {OUTPUT_WORDS[kind]} ({name}) to {path}: a *.jsonl file in the "
                f"data folder {data} is read as "
                "golden cases; write outputs outside the data folder"
            )
        if os.path.lexists(path) and not _written_as(path, kind):
            raise UsageError(
                f"refusing to write the {OUTPUT_WORDS[kind]} ({name}) to {path}: it is inside the data "
                f"folder {data} and is not a "
                f"{OUTPUT_WORDS[kind]} qaeval wrote; write outputs outside the data folder"
            )


def check_writable(outputs: Iterable[tuple[str, Any, str]]) -> None:
    """Raise FileAccessError (exit 74) when an output (parameter, path, kind) cannot be written where it is
    asked for: a folder in the way, a file where a folder must be, a folder that is not writable. ``None``
    is skipped; a folder that does not exist yet is made when the output is written. Call it before the
    command does any work, so a long run is not lost at its end."""
    for name, given, kind in outputs:
        if given is None or not os.fspath(given):  # an empty path is the parameter check's to refuse
            continue
        path = os.path.abspath(os.fspath(given))
        what = f"cannot write the {OUTPUT_WORDS[kind]} ({name})"
        if os.path.isdir(path):
            raise FileAccessError(path, f"{what}: a folder is in the way")
        if _written_in_place(path):
            continue
        parent = os.path.dirname(path)
        while not os.path.lexists(parent) and os.path.dirname(parent) != parent:
            parent = os.path.dirname(parent)
        if not os.path.isdir(parent):
            raise FileAccessError(path, f"{what}: {parent} is not a folder")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise FileAccessError(path, f"{what}: the folder {parent} is not writable")


_SYSTEM_FOLDERS = ("/dev/", "/proc/")


def _written_in_place(path: str | Path) -> bool:
    """A device or a FIFO (``/dev/null``, ``/dev/stdout``), or anything under /dev or /proc: written to,
    never replaced. (``/dev/stdout`` is a link to /proc/self/fd/1; with the output redirected to a file it
    points at a regular file, and replacing it would, for root, replace the system's /dev/stdout.)"""
    if os.path.abspath(path).startswith(_SYSTEM_FOLDERS):
        return True
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)


_OWN_STREAM = re.compile(r"/(?:dev/fd|proc/self/fd)/([0-9]+)")


def _own_stream(path: str | Path) -> int | None:
    """The file descriptor of this process that ``path`` names (``/dev/stdout``, ``/dev/fd/N``,
    ``/proc/self/fd/N``), if it names one: written through it, in order with what is printed (opening
    the path again would start a second write at the start of a redirected file, over the output)."""
    p = os.path.abspath(path)
    if p in ("/dev/stdout", "/dev/stderr"):
        return 1 if p == "/dev/stdout" else 2
    m = _OWN_STREAM.fullmatch(p)
    return int(m.group(1)) if m else None


def _write_to(fd: int, path: str | Path, payload: bytes) -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    view = memoryview(payload)
    try:
        while view:
            view = view[os.write(fd, view) :]
    except OSError as exc:
        raise FileAccessError(path, f"cannot write ({os_reason(exc)})") from None


def write_atomic(path: str | Path, data: str | bytes) -> Path:
    """Replace ``path`` with ``data`` all at once (temporary sibling, fsync, rename). A path that is a
    device or a FIFO (``/dev/null``, a pipe), or under /dev or /proc, is written to, never replaced; one
    of this process's own streams (``/dev/stdout``) is written through its file descriptor."""
    path = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    if (fd := _own_stream(path)) is not None:
        _write_to(fd, path, payload)
        return path
    if _written_in_place(path):
        try:
            with open(path, "wb") as f:
                f.write(payload)
        except OSError as exc:
            raise FileAccessError(path, f"cannot write ({os_reason(exc)})") from None
        return path
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_dir():
            raise IsADirectoryError(errno.EISDIR, "a folder is in the way", str(path))
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise FileAccessError(path, f"cannot write ({os_reason(exc)})") from None
    try:
        os.fchmod(fd, FILE_MODE)
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise FileAccessError(path, f"cannot write ({os_reason(exc)})") from None
        raise
    return path


@contextmanager
def _locked(fd: int) -> Iterator[None]:
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield
    finally:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)


def append_line(path: str | Path, line: str) -> None:
    """Append one line (a newline is added) under an exclusive lock. If the file ends in a torn line,
    the new line starts on a fresh one. All or nothing: a short or failed write is undone."""
    path = Path(path)
    data = (line.rstrip("\n") + "\n").encode("utf-8")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError as exc:
        raise FileAccessError(path, f"cannot append ({os_reason(exc)})") from None
    try:
        with _locked(fd):
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                data = b"\n" + data
            try:
                written = os.write(fd, data)
                if written != len(data):
                    raise OSError(errno.ENOSPC, f"only {written} of {len(data)} bytes written")
                os.fsync(fd)
            except OSError as exc:
                try:
                    os.ftruncate(fd, size)
                except OSError:
                    pass
                raise FileAccessError(path, f"cannot append ({os_reason(exc)}); the file is as it was") from None
    finally:
        os.close(fd)
