"""Locks that keep two qaeval commands from writing one file at once.

A lock for ``DIR/NAME`` is the file ``DIR/.NAME.qaeval-lock``: a name qaeval owns, so it is never a
user's file (``run --save poetry`` locks ``.poetry.qaeval-lock``, never the project's ``poetry.lock``).
It is born whole, holding exactly ``LOCK_MARK`` (written to a temporary sibling and linked into place),
and held with an exclusive ``fcntl.flock`` for the whole command. A second command asking for it is
refused at once (a usage error, 64, naming the path) instead of waiting. A file already at the lock's
path that does not hold ``LOCK_MARK`` is not qaeval's: it is refused (64) and left as it is. A lock left
by a run that was killed (it holds the mark and nobody holds it) is taken over.

The lock file is removed before it is let go, so a lock is only taken on the file the path names once it
is held: a run that opened the file just before the run holding it removed it and let go would otherwise
hold a lock on a file no later run can see, beside a later run locking a new one (it opens the new one
instead). On a platform without ``fcntl`` (Windows) there is no lock.

Who takes which lock:

* a command that writes a run record (``--save``, baseline's ``--out``) locks the record's path while it
  runs (``qaeval.api.perform``), so two runs never share a journal nor replace each other's record;
* a command that writes the golden folder's shared files (``living.jsonl``, the ledger of decisions
  in ``DIR/.qaeval``: ``add-case`` and ``accept``) locks the folder (``holding_the_folder``).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from qaeval.core.errors import FileAccessError, UsageError

try:  # POSIX advisory locks; elsewhere two commands writing one file are not kept apart
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]  # the platform has none

LOCK_MARK = b"qaeval-lock 1\n"  # the whole content of a lock file qaeval made
LOCK_SUFFIX = ".qaeval-lock"
FOLDER_LOCK = Path(".qaeval") / "cases"  # the golden folder's lock, beside its ledger: .qaeval/.cases.qaeval-lock


def lock_path(target: str | os.PathLike[str]) -> Path:
    """Where the lock for ``target`` lives: ``DIR/.NAME.qaeval-lock``."""
    path = Path(target)
    return path.parent / f".{path.name}{LOCK_SUFFIX}"


@contextmanager
def hold(target: str | os.PathLike[str] | None, *, busy: str | None = None) -> Iterator[None]:
    """An exclusive lock for ``target`` while the block runs; a UsageError at once when another command
    holds it (``busy`` says what that command is doing; by default, writing ``target``)."""
    if target is None or fcntl is None:
        yield
        return
    path = lock_path(target)
    fd = _locked(
        path, busy or f"another qaeval run is writing {target}", "" if busy else ", or give this run another path"
    )
    try:
        try:
            yield
        finally:
            try:
                os.unlink(path)
            except OSError:
                pass
    finally:
        os.close(fd)


def _locked(path: Path, busy: str, instead: str) -> int:
    """An open descriptor of the lock file ``path``, exclusively locked, that ``path`` still names."""
    while True:  # again only when the command that held the lock finished between this one's open and lock
        fd = _open_lock(path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise UsageError(f"{busy} (it holds {path}): wait for it to finish{instead}") from None
        try:
            named = os.stat(path, follow_symlinks=False)
        except OSError:
            named = None
        held = os.fstat(fd)
        if named is not None and (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino):
            if os.pread(fd, len(LOCK_MARK) + 1, 0) == LOCK_MARK:
                return fd
            os.close(fd)
            raise UsageError(
                f"{path} is there and is not a lock qaeval made; qaeval will not touch it: move it away, "
                "or write to another path"
            )
        os.close(fd)


def _open_lock(path: Path) -> int:
    """The lock file at ``path`` opened (made whole, holding ``LOCK_MARK``, when there is none)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _make_lock(path)
        return os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        raise FileAccessError(path, f"cannot take the lock ({exc.strerror or exc})") from None


def _make_lock(path: Path) -> None:
    """A new lock file at ``path`` holding ``LOCK_MARK`` from its first moment; nothing when one is there."""
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        try:
            os.write(fd, LOCK_MARK)
        finally:
            os.close(fd)
        os.link(tmp, path)
    except FileExistsError:
        pass
    except OSError:  # a file system without hard links: made in place (empty for a moment)
        try:
            made = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        except FileExistsError:
            return
        try:
            os.write(made, LOCK_MARK)
        finally:
            os.close(made)
    finally:
        os.unlink(tmp)


def holding_the_folder(root: str | os.PathLike[str]) -> Any:
    """The golden folder's lock, taken by every command that writes its shared files (``living.jsonl``,
    the ledger of decisions): two of them would number and write the same cases."""
    folder = Path(root)
    where = folder / FOLDER_LOCK if folder.is_dir() else None  # no folder: its loader says so, none is made
    return hold(where, busy=f"another qaeval command is adding cases to {root}")
