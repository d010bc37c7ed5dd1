"""The journal of a run in progress (``RECORD.journal``, one flushed JSON line each), and resuming from it.

Lines: a ``header`` naming the run (``identity``), ``output`` (one place the system answered; a later line
for the same place replaces it) and ``verdict`` (the judge's response, keyed by the sha256 of the
request's content). Every line carries an HMAC-SHA256 (the judge cache's key) over its fields, the run's
random id and its place, so a line this user's qaeval did not write, or one spliced, reordered or
repeated, is refused (65). Only a regular file is read or written (74). ``--resume`` checks every line,
reuses the outputs and their verdicts, and asks again for the rest (and the errored ones unless
``--keep-errors``); a last line cut short is dropped with a note.
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import json
import os
import stat
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qaeval.core.errors import DatasetError, FileAccessError, UsageError
from qaeval.core.jsonfile import loads_strict
from qaeval.scoring.journal_lines import response_from_plain, response_to_plain, row_from_plain
from qaeval.scoring.judge import JudgeResponse

FORMAT = "qaeval-journal"
VERSION = 1
SUFFIX = ".journal"


class JournalError(DatasetError):
    """A journal that this qaeval did not write, or one that is damaged beyond its last line (exit 65)."""


def journal_path(record: str | os.PathLike[str]) -> Path:
    return Path(str(record) + SUFFIX)


def key_digest(key: tuple[Any, ...]) -> str:
    """A judge request's content as a short name (its key holds text and frozen dataclasses)."""
    return hashlib.sha256(repr(key).encode("utf-8", "surrogatepass")).hexdigest()


def _canonical(line: Mapping[str, Any]) -> bytes:
    return json.dumps(
        {k: v for k, v in line.items() if k != "mac"},
        sort_keys=True,
        ensure_ascii=True,
        separators=(",", ":"),
        allow_nan=False,
    ).encode("ascii")


def _mac(secret: bytes, line: Mapping[str, Any]) -> str:
    return hmac.new(secret, _canonical(line), hashlib.sha256).hexdigest()


def _secret() -> bytes:
    from qaeval.judges.cache import load_secret

    return load_secret()


@dataclass
class Restored:
    """What a journal gives back: outputs by place in the run, verdicts by request digest, notes, and
    where to go on writing (the run's id, the next line's place, the length of its whole lines, and
    whether the last of them lacks its newline: the run died between its text and its newline)."""

    outputs: dict[int, dict[str, Any]] = field(default_factory=dict)
    verdicts: dict[str, JudgeResponse] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    run: str = ""
    next_seq: int = 0
    whole: int = 0
    unterminated: bool = False
    path: str = ""


def _regular(path: Path, flags: int, what: str) -> int:
    """An open descriptor on ``path``, a regular file (never a link, FIFO or folder: opening a FIFO would
    wait for a writer), or FileAccessError (exit 74)."""
    try:
        fd = os.open(path, flags | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0), 0o600)
    except OSError as exc:
        raise FileAccessError(
            path, f"cannot {what} the journal ({exc.strerror or exc}; it must be a regular file, not a link)"
        ) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise FileAccessError(path, f"cannot {what} the journal: it is not a regular file")
    return fd


def _authenticated(data: bytes, secret: bytes, restored: Restored) -> tuple[list[dict[str, Any]], str | None]:
    """The journal's lines, each parsed and authenticated (its MAC, its run, its place), and the run's id;
    a last line cut short is dropped with a note (``restored``: where its length is counted)."""
    where = restored.path
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    parsed: list[dict[str, Any]] = []
    run = None
    for number, raw in enumerate(lines, start=1):
        try:
            line = loads_strict(raw.decode("utf-8"))
            if not isinstance(line, dict):
                raise ValueError("not an object")
        except (UnicodeDecodeError, ValueError, TypeError):
            if number == len(lines):  # the run ended while writing it
                restored.notes.append(f"the journal's last line (line {number}) was cut short and is dropped")
                restored.unterminated = False  # cut off before anything is appended
                break
            raise JournalError(
                f"line {number} is not valid JSON: the journal is damaged; delete it to start over", file=where
            ) from None
        if run is None and isinstance(line.get("run"), str):
            run = line["run"]
        try:
            ok = (
                isinstance(line.get("mac"), str)
                and line.get("run") == run
                and line.get("seq") == number - 1
                and hmac.compare_digest(line["mac"], _mac(secret, line))
            )
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise JournalError(
                f"line {number} fails authentication or is out of place: it was not written here by "
                "this user's qaeval (edited, spliced from another journal, reordered or repeated); "
                "delete the journal to start over",
                file=where,
            )
        parsed.append(line)
        restored.whole += len(raw) + (0 if number == len(lines) and restored.unterminated else 1)
    return parsed, run


def read_journal(
    path: Path, identity: Mapping[str, Any], case_ids: Sequence[str], *, keep_errors: bool, secret: bytes | None = None
) -> Restored:
    """Read a journal back for ``identity`` (a run of ``case_ids``, trial by trial). A header for another
    run is a UsageError naming what differs (exit 64); a line not written by this qaeval, or damaged
    before the last line, is a JournalError (exit 65)."""
    secret = secret if secret is not None else _secret()
    where = str(path)
    fd = _regular(path, os.O_RDONLY, "read")
    try:
        with os.fdopen(fd, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise FileAccessError(path, f"cannot read the journal ({exc.strerror or exc})") from None
    restored = Restored(unterminated=bool(data) and not data.endswith(b"\n"), path=where)
    parsed, run = _authenticated(data, secret, restored)
    restored.run, restored.next_seq = run or "", len(parsed)
    if not parsed or parsed[0].get("kind") != "header" or parsed[0].get("format") != FORMAT:
        raise JournalError("the journal has no header", file=where)
    if parsed[0].get("version") != VERSION:
        raise JournalError(f"journal version {parsed[0].get('version')!r} is not {VERSION}", file=where)
    theirs = parsed[0].get("identity")
    differs = [name for name in identity if not isinstance(theirs, dict) or theirs.get(name) != identity[name]]
    if differs:
        shown = "; ".join(
            _difference(name, theirs.get(name) if isinstance(theirs, dict) else None, identity[name])
            for name in differs
        )
        raise UsageError(
            f"cannot resume from {where}: the run differs from the journal's ({shown}); run without "
            "--resume to start over"
        )
    for number, line in enumerate(parsed[1:], start=2):
        if line.get("kind") == "output":
            index, cid = line.get("index"), line.get("case_id")
            if not (type(index) is int and 0 <= index < len(case_ids) and cid == case_ids[index]):
                raise JournalError(f"line {number} names a case this run does not have at that place", file=where)
            row = row_from_plain(line.get("output"), cid)
            if row is None:
                raise JournalError(f"line {number}: the output is not one a system could have returned", file=where)
            restored.outputs[index] = row
        elif line.get("kind") == "verdict":
            response = response_from_plain(line.get("response"))
            digest = line.get("key")
            if response is None or not isinstance(digest, str):
                raise JournalError(f"line {number}: the verdict is malformed", file=where)
            if response.error is None or keep_errors:  # a judge error (an outage) is asked again
                restored.verdicts[digest] = response
        else:
            raise JournalError(f"line {number} is of no kind a journal holds", file=where)
    if not keep_errors:
        errored = [i for i, row in restored.outputs.items() if row["error"] is not None]
        for i in errored:
            del restored.outputs[i]
        if errored:
            restored.notes.append(f"{len(errored)} output(s) that failed are asked again (--keep-errors keeps them)")
    return restored


def _difference(name: str, then: Any, now: Any) -> str:
    """One part of the run that differs from the journal's, said so a person sees what changed: for a
    table of digests (the adapter's files, the registered checks), the names whose digest changed."""
    if isinstance(then, dict) and isinstance(now, dict):
        changed = [k for k in now if k in then and then[k] != now[k]]
        parts = [f"{', '.join(changed[:5])}{' ...' if len(changed) > 5 else ''} changed"] if changed else []
        added, gone = [k for k in now if k not in then], [k for k in then if k not in now]
        parts += [f"{', '.join(added[:5])} added"] if added else []
        parts += [f"{', '.join(gone[:5])} removed"] if gone else []
        return f"{name}: {'; '.join(parts)} since the journal was written"
    return f"{name}: {_short(then)} then, {_short(now)} now"


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


class JournalWriter:
    """Appends signed lines to a journal, one at a time, from any thread. ``resumed``: the journal read
    back (``read_journal``), to go on after its last whole line; else a new journal is started.

    A line is on disk whole or not at all: it is written unbuffered, and a write that fails (a full
    disk) is cut off again, so the line is lost (``notes`` says how many; a resume asks for them
    again) and the next line takes its place in the sequence. A journal that cannot even be cut back
    takes no more lines: what it holds stays readable to its last whole line."""

    def __init__(
        self, path: Path, identity: Mapping[str, Any], *, resumed: Restored | None = None, secret: bytes | None = None
    ) -> None:
        import secrets

        self.path, self._secret = path, secret if secret is not None else _secret()
        self._lock = threading.Lock()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise FileAccessError(path, f"cannot write the journal ({exc.strerror or exc})") from None
        if resumed is None and (path.is_symlink() or (path.exists() and not path.is_file())):
            raise FileAccessError(path, "cannot write the journal: something that is not a regular file is there")
        if resumed is None:
            path.unlink(missing_ok=True)  # a new journal, never written through what was there
        fd = _regular(path, os.O_WRONLY | os.O_CREAT | (0 if resumed is not None else os.O_EXCL), "write")
        self._size = resumed.whole if resumed is not None else 0
        os.ftruncate(fd, self._size)  # a last line cut short is cut off, so the next starts whole
        os.lseek(fd, self._size, os.SEEK_SET)
        os.set_blocking(fd, True)
        self._file: Any = os.fdopen(fd, "wb", buffering=0)
        self.run = resumed.run if resumed is not None else secrets.token_hex(16)
        self.seq = resumed.next_seq if resumed is not None else 0
        self.lost: list[str] = []  # why lines were not written
        self.stopped = False  # a failed write that could not be cut back: no more lines
        self.torn = False  # a write cut short by an exception (Ctrl-C): no more lines
        if resumed is not None and resumed.unterminated:
            with self._lock:
                self.stopped = not self._append(b"\n")  # the last whole line's newline, before any other
        if resumed is None:
            self._write(dict(kind="header", format=FORMAT, version=VERSION, identity=dict(identity)))
            if self.seq == 0:  # without its header a journal is no journal
                self._file.close()
                raise FileAccessError(path, f"cannot write the journal ({self.lost[0]})")

    @property
    def notes(self) -> list[str]:
        """What the run should say about its journal: lines it could not write."""
        if not self.lost:
            return []
        what = f"{len(self.lost)} journal line(s) could not be written ({self.lost[0]})"
        if self.stopped:
            return [f"{what}; the journal took no more after that: a resume asks again for what it lacks"]
        return [f"{what}; a resume asks again for what they held"]

    def _write(self, line: dict[str, Any]) -> None:
        with self._lock:
            if self._file.closed or self.stopped or self.torn:
                return
            # Set until the line and its sequence number are both done: a Ctrl-C raised in between leaves
            # it set, and the journal takes no more lines (one after it would repeat or skip a number).
            self.torn = True
            line.update(run=self.run, seq=self.seq)
            line["mac"] = _mac(self._secret, line)
            text = json.dumps(line, sort_keys=True, ensure_ascii=True, allow_nan=False) + "\n"  # no separator inside
            if self._append(text.encode("ascii")):
                self.seq += 1
            self.torn = False

    def _append(self, data: bytes) -> bool:
        """(Holding the lock.) ``data`` at the journal's end, whole, or (False) nothing of it."""
        try:
            done = 0
            while done < len(data):
                wrote = self._file.write(data[done:])
                if not wrote:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                done += wrote
            self._file.flush()
        except OSError as exc:
            self.lost.append(exc.strerror or str(exc))
            try:
                self._file.truncate(self._size)
                self._file.seek(self._size)
            except OSError:
                self.stopped = True
            return False
        self._size += len(data)
        return True

    def output(self, index: int, row: Mapping[str, Any], trial: int) -> None:
        plain = {k: v for k, v in row.items() if k not in ("case_id", "output_fingerprint")}
        try:
            self._write(dict(kind="output", index=index, case_id=row["case_id"], trial=trial, output=plain))
        except (TypeError, ValueError):  # text JSON cannot carry: the output is asked again on resume
            pass

    def verdict(self, key: tuple[Any, ...], response: Any) -> None:
        plain = response_to_plain(response)
        if plain is not None:
            self._write(dict(kind="verdict", key=key_digest(key), response=plain))

    def close(self) -> None:
        with self._lock:
            self._file.close()
