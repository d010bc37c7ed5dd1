"""Work computed in a forked copy of this process while this one computes something else.

``Ahead`` is the loader's (``qaeval.data.ahead``): a child that reads the case files beside this process
and sends what it computes line by line, taken only when it has arrived. ``Beside`` and ``Pieces`` are
scoring's. After the system has answered, scoring is pure Python on one core; on a machine with two or
more, part of it can run in a copy of the process. ``Beside(fn, *args, rows=n)`` forks, the child
computes ``fn(*args)`` on its copy of the data (nothing is sent to it) and pipes back the pickled value;
``result()`` waits for it. ``score_outputs`` uses it two ways: with qaeval's offline judge (pure), the
cases are cut into shares and the child and this process each score shares through every layer, taking
the next one left from ``Pieces`` (a pipe of share numbers) until none is; with any other judge, the
child runs the deterministic checks while this process asks the judge. Only qaeval's own code runs in the
child: no user judge, check or metric is called in it, and user code running on other threads is excluded
by the rule below.

``first=`` (a callable without arguments) is a share of this process's own next step that the child
computes before ``fn`` and sends ahead: ``first_value()`` returns it (``score_outputs`` has the child choose
the hardest decoys of half the judged cases while it chooses the other half, and then asks the judge).
Without a child, ``first_value()`` calls it here.

When it is not worth it or not safe, ``fn`` simply runs here, at once, and the value is the same:

- not on Linux (macOS frameworks are not fork-safe), or ``os.cpu_count()`` is 1;
- another thread is running (a notebook's kernel, a judge's pool, an adapter abandoned on a timeout):
  a lock it held at the fork would stay held forever in the child;
- fewer than ``MIN_ROWS`` cases (a fork costs milliseconds; small suites score faster here);
- ``ENABLED`` is False (``benchmarks/bench_phases.py`` times each phase in one process);
- the fork itself fails (a limit on processes, or on memory), or would take the last ``FDS_TO_SPARE``
  file descriptors.

And when the child fails, the call is made here in ``first_value()`` and ``result()``: it raised (so its
exception is raised here), exited or was killed, sent something that does not unpickle, or did not finish
within ``DEADLINE`` seconds after this process was ready for it (it is killed). A child is never left
behind: leaving the ``with`` block kills and reaps it (through a pidfd where Linux has one, so the signal
cannot reach another process that took its pid), with Ctrl-C held back meanwhile, as it is while the
child is forked and recorded. With SIGCHLD ignored the system reaps it; a value that unpickles whole is
then taken as its clean finish.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pickle
import select
import signal
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

T = TypeVar("T")

ENABLED = True
MIN_ROWS = 1000
DEADLINE = 600.0  # seconds the child may still take once this process waits for it
# The pipe a child writes into holds this much (64 KiB by default): a child computing ahead (``Ahead``)
# keeps going while this process is busy between reads (validating the lines it read) instead of waiting
# for room after one batch.
PIPE_BYTES = 1 << 20
_LENGTH = struct.Struct(">Q")  # the length before first()'s value, and before each of Ahead's items


def can_fork(rows: int) -> bool:
    return (ENABLED and rows >= MIN_ROWS and sys.platform.startswith("linux") and (os.cpu_count() or 1) > 1
            and threading.active_count() == 1)


class Pieces:
    """Pieces of work numbered ``first``..``count - 1``, each handed to whichever process asks first: their
    numbers wait in a pipe that this process and a child forked after this was made both read, a byte
    (a number) at a time. A pipe read is atomic, so no piece is handed out twice; the writing end is
    closed before anyone reads, so an empty pipe reads as its end. Pieces below ``first`` are not in
    the pipe: the caller hands them out itself (one to each process, so both are sure to have work).
    ``take()`` is None when every piece is out. Pieces a child took and never sent back are the
    caller's to compute again (``Beside`` recomputes the child's value, not its pieces)."""

    MAX = 255

    def __init__(self, count: int, first: int = 0) -> None:
        if not 0 <= first <= count <= self.MAX:
            raise ValueError(f"pieces {first}..{count - 1}: at most {self.MAX}")
        read, write = os.pipe()
        try:
            os.write(write, bytes(range(first, count)))  # far below a pipe's capacity: never blocks
        except OSError:
            os.close(read)
            raise
        finally:
            os.close(write)
        self.fd: int | None = read

    def take(self) -> int | None:
        if self.fd is None:
            return None
        got = os.read(self.fd, 1)
        return got[0] if got else None

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> Pieces:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


FDS_TO_SPARE = 16  # file descriptors that must stay free after a fork (the pipe and pidfd take two)


def _fds_to_spare() -> bool:
    """Whether this process can open ``FDS_TO_SPARE`` more files: a fork must not take the last ones, which
    the caller needs to go on without it."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        return soft == resource.RLIM_INFINITY or soft - len(os.listdir("/proc/self/fd")) > FDS_TO_SPARE
    except (ImportError, OSError, ValueError):
        return True


@contextlib.contextmanager
def _ctrl_c_held() -> Iterator[None]:
    """Ctrl-C (SIGINT) held back, then handled as it would have been, around forking a child and recording
    it, and around killing and reaping it: a KeyboardInterrupt between the two would leave the child behind.
    Held by Python's handler, not by a signal mask: the kernel gives a signal the main thread blocks to any
    other thread (a C library's), and Python then runs the handler in the main thread all the same."""
    if threading.current_thread() is not threading.main_thread():
        yield  # Python runs signal handlers, and raises KeyboardInterrupt, in the main thread only
        return
    caught: list[Any] = []
    previous = signal.getsignal(signal.SIGINT)
    if previous is None:  # a handler set outside Python: left alone
        yield
        return
    signal.signal(signal.SIGINT, lambda number, frame: caught.append(frame))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if caught and callable(previous):
            previous(signal.SIGINT, caught[0])  # Python's own raises KeyboardInterrupt here
        elif caught and previous == signal.SIG_DFL:
            os.kill(os.getpid(), signal.SIGINT)


class _Child:
    """A forked child that writes to a pipe this process reads (``fd``), killed and reaped by ``close()``
    (or, should every reference to it be dropped first, by the garbage collector)."""

    pid: int | None = None
    pidfd: int | None = None  # the child as a file (Linux 5.3+): a signal can never reach a reused pid
    fd: int | None = None
    parent: int | None = None  # the process that forked it: only that one ever kills or reaps it

    def _spawn(self, body: Callable[[Any], None]) -> bool:
        """Fork a child that runs ``body(pipe)`` (a binary file on the pipe's writing end) and exits; False
        when no process could be forked."""
        if not _fds_to_spare():
            return False
        try:
            read, write = os.pipe()
        except OSError:  # no file descriptor to spare
            return False
        with contextlib.suppress(AttributeError, OSError):  # Linux; up to /proc/sys/fs/pipe-max-size
            fcntl.fcntl(read, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
        with _ctrl_c_held():
            try:
                pid = os.fork()
            except OSError:  # no process to spare (a pids limit, memory): compute here
                os.close(read)
                os.close(write)
                return False
            if pid == 0:  # the child: compute, send, and never return into the caller's code
                code = 1
                try:
                    os.close(read)
                    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and stops us
                    with os.fdopen(write, "wb") as pipe:
                        body(pipe)
                    code = 0
                finally:
                    os._exit(code)
            os.close(write)
            self.pid, self.fd, self.parent = pid, read, os.getpid()
            try:
                self.pidfd = os.pidfd_open(pid)
            except (AttributeError, OSError):
                self.pidfd = None
        return True

    def close(self) -> None:
        """Kill and reap the child if it is still there, and close the pipe. Idempotent; does nothing in
        another process (a forked copy that inherited this object)."""
        if self.parent is not None and self.parent != os.getpid():
            return
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        if self.pid is not None:
            with _ctrl_c_held():
                try:
                    if self.pidfd is not None:
                        signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
                    else:
                        os.kill(self.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                try:
                    os.waitpid(self.pid, 0)
                except ChildProcessError:
                    pass
                self.pid = None
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001  (at interpreter exit, os may be gone)
            pass


class Beside(_Child, Generic[T]):
    """``fn(*args)``, computed in a forked child when ``can_fork(rows)``, else here and at once (so an
    error in it comes before the judge is called, as it would without this class)."""

    _NOTHING: Any = object()

    def __init__(self, fn: Callable[..., T], *args: Any, rows: int, first: Callable[[], Any] | None = None) -> None:
        self.fn, self.args, self.first = fn, args, first
        self._first_unread = first is not None  # the child sends first()'s value before fn's
        self.forked = False  # whether the value came from the child
        self.value: Any = self._NOTHING
        if not (can_fork(rows) and self._fork()):
            self.value = fn(*args)

    def _fork(self) -> bool:
        def send(pipe: Any) -> None:
            if self.first is not None:
                data = pickle.dumps(self.first(), protocol=pickle.HIGHEST_PROTOCOL)
                pipe.write(_LENGTH.pack(len(data)) + data)
                pipe.flush()  # the parent waits for this before fn's value
            pipe.write(pickle.dumps(self.fn(*self.args), protocol=pickle.HIGHEST_PROTOCOL))

        return self._spawn(send)

    def first_value(self) -> Any:
        """``first()``, from the child when it sent it, else computed here. A child that fails to send it
        is stopped, and ``result()`` then computes ``fn`` here too."""
        assert self.first is not None
        if self._first_unread and self.fd is not None:
            self._first_unread = False
            data = self._read_first()
            if data is not None:
                try:
                    return pickle.loads(data)
                except Exception:  # noqa: BLE001  (a torn value: compute it here)
                    pass
            self.close()
        return self.first()

    def result(self) -> T:
        if self.value is not self._NOTHING:
            return self.value  # type: ignore[no-any-return]
        if self._first_unread and self.fd is not None:  # never asked for: read past it
            self._first_unread = False
            if self._read_first() is None:
                self.close()
        data = self._collect()
        if data is not None:
            try:
                value: T = pickle.loads(data)
            except Exception:  # noqa: BLE001  (a torn value: compute it here)
                pass
            else:
                self.forked = True
                return value
        return self.fn(*self.args)

    def _read_first(self) -> bytes | None:
        """The bytes of first()'s value, whole, or None (the child ended or overran before sending them)."""
        header = self._read(_LENGTH.size)
        if header is None or len(header) < _LENGTH.size:
            return None
        (size,) = _LENGTH.unpack(header)
        data = self._read(size)
        return data if data is not None and len(data) == size else None

    def _read(self, size: int | None) -> bytes | None:
        """``size`` bytes from the child (fewer at its end), or all it sends until it closes the pipe
        (``size`` None); None when it overran its deadline (it is then killed)."""
        assert self.fd is not None
        chunks: list[bytes] = []
        got = 0
        until = time.monotonic() + DEADLINE
        while size is None or got < size:
            left = until - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                self.close()  # overran: killed
                return None
            chunk = os.read(self.fd, 1 << 20 if size is None else min(1 << 20, size - got))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    def _collect(self) -> bytes | None:
        """The child's bytes when it exited cleanly, else None (it is killed if it overran)."""
        if self.fd is None or self.pid is None:  # stopped already
            return None
        data = self._read(None)
        if data is None:
            return None
        try:
            _, status = os.waitpid(self.pid, 0)  # it closed the pipe on its way out
            clean = os.waitstatus_to_exitcode(status) == 0
        except ChildProcessError:  # SIGCHLD ignored: the system reaped it; a whole pickle says it finished
            clean = True
        self.pid = None
        self.close()
        return data if clean else None

    def __enter__(self) -> Beside[T]:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Ahead(_Child):
    """Items a forked child computes ahead of this process: it iterates ``produce(*args)`` and pipes each
    item (pickled, behind its length) as soon as it has it; ``arrived()`` returns the items whose bytes
    are all here, in order, and never waits. When ``can_fork(rows)`` refuses or the fork fails, nothing
    arrives; once the child has ended, raised, or sent bytes that do not unpickle, nothing more does: the
    caller computes what it did not get. Only qaeval's own code runs in the child. Leaving the ``with``
    block kills and reaps it, done or not."""

    def __init__(self, produce: Callable[..., Any], *args: Any, rows: int) -> None:
        self.buffer = bytearray()

        def send(pipe: Any) -> None:
            os.nice(10)  # the caller computes whatever has not arrived: it comes first for a core
            for item in produce(*args):
                data = pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL)
                pipe.write(_LENGTH.pack(len(data)) + data)
                pipe.flush()

        try:
            if can_fork(rows) and self._spawn(send):
                assert self.fd is not None
                os.set_blocking(self.fd, False)
        except BaseException:  # a Ctrl-C held back while forking arrives here: no child left behind
            self.close()
            raise

    def arrived(self) -> list[Any]:
        if self.fd is None:
            return []
        ended = False
        while True:
            try:
                chunk = os.read(self.fd, 1 << 20)
            except BlockingIOError:
                break
            except OSError:
                ended = True
                break
            if not chunk:
                ended = True
                break
            self.buffer += chunk
        items, at = [], 0
        while len(self.buffer) - at >= _LENGTH.size:
            (size,) = _LENGTH.unpack_from(self.buffer, at)
            if len(self.buffer) - at - _LENGTH.size < size:
                break
            try:
                items.append(pickle.loads(self.buffer[at + _LENGTH.size:at + _LENGTH.size + size]))
            except Exception:  # noqa: BLE001  (torn: nothing more is taken from this child)
                ended = True
                break
            at += _LENGTH.size + size
        del self.buffer[:at]
        if ended:
            self.close()
            self.buffer.clear()
        return items

    def __enter__(self) -> Ahead:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
