"""A process that runs user code, and the one way the harness talks to it.

Adapters, custom judges and notify hooks are the user's code. Each runs in a fresh interpreter started
here, and everything that crosses between it and the harness is a *frame*: a 4-byte big-endian length
and that many bytes of JSON text (a case handed to a worker goes in ``marshal``'s format instead:
``encode_case``). This module owns the rules every such process gets:

- **Bounded reads.** The harness never blocks on a read: bytes are taken as they arrive
  (``Channel.pump``) and a frame is whole only when all of its announced bytes are in. A half-sent
  frame simply never completes; the caller's deadline then kills the process. A header that announces
  more than the frame limit kills it at once.
- **Bounded parsing.** A frame is parsed only when it holds at most ``MAX_CONTAINERS`` JSON objects and
  arrays, so a reply cannot make the harness build millions of empty dicts.
- **Bounded writes.** Sending waits at most until the deadline, so a process that stops reading cannot
  block the harness.
- **What the process is given.** Its environment loses every variable whose value names the data
  folder as a path (``confined_env``), its working directory is a private scratch folder, its
  argv names no data, and (Linux) it drops ``CAP_SYS_PTRACE`` before any user code runs, so even as
  root it cannot read the harness's memory once the harness is non-dumpable.
- **What the harness does meanwhile** (Linux): it is non-dumpable and a child subreaper, so a
  descendant that escapes its process group is killed when the run ends. Both Linux parts live in
  ``qaeval.system.hardening``.

Nothing here imports pandas: the worker side imports this module too.
"""

from __future__ import annotations

import contextlib
import json
import marshal
import os
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

HEADER = struct.Struct("!I")
DEFAULT_FRAME_LIMIT = 8 * 1024 * 1024
MAX_CONTAINERS = 200_000
_READ_CHUNK = 1 << 16


class FrameError(Exception):
    """The other side broke the protocol (too big, not JSON), went away (``closed``: its end of the socket
    closed, or its process exited) or missed its deadline (``timed_out``); the message says how."""

    def __init__(self, message: str, *, timed_out: bool = False, closed: bool = False) -> None:
        super().__init__(message)
        self.timed_out, self.closed = timed_out, closed


# --------------------------------------------------------------------------- frames


_WIRE = json.JSONEncoder(allow_nan=False, ensure_ascii=True, separators=(",", ":"))  # one, not one a frame


def encode(message: Any) -> bytes:
    data = _WIRE.encode(message).encode("ascii")
    return HEADER.pack(len(data)) + data


# A case goes to a worker as ``_CASE`` and the payload in ``marshal``'s format (strings and tuples): about
# four times faster to write than JSON and two to three to read (``benchmarks/bench_boundary.py
# --wire-only``), for the one frame a run sends per case. Only this direction uses it: the worker, which
# runs the same interpreter, reads what the harness wrote (trusted), while everything the worker sends
# back is JSON, parsed strictly (``parse``).
_CASE = b"\x00"  # a JSON frame starts with "{"


def encode_case(payload: tuple[str, str, tuple[tuple[str, str, str | None], ...]]) -> bytes:
    """The frame that hands a worker one case (``{"case": payload}`` to ``read_frame``). In JSON when a
    field is not exactly a ``str`` (a case built in Python from a ``str`` subclass or ``numpy.str_``,
    which marshal refuses or writes as bytes): the worker reads it as it read every case before."""
    opaque, question, sources = payload
    plain = (type(opaque) is str and type(question) is str
             and all(type(i) is str and type(t) is str and (title is None or type(title) is str)
                     for i, t, title in sources))
    if not plain:
        return encode({"case": payload})
    data = _CASE + marshal.dumps(payload)
    return HEADER.pack(len(data)) + data


def parse(raw: bytes | bytearray, *, what: str = "the process") -> Any:
    """JSON text from the other side, parsed within a memory bound. Duplicate keys, NaN and
    infinities, unpaired surrogates and too many containers are all refused with FrameError."""
    containers = raw.count(b"{") + raw.count(b"[")
    if containers > MAX_CONTAINERS:
        raise FrameError(f"{what} sent a frame with {containers} JSON objects and arrays; the limit is "
                         f"{MAX_CONTAINERS}")
    from qaeval.files import loads_strict

    try:
        return loads_strict(bytes(raw).decode("utf-8"))
    except RecursionError:
        raise FrameError(f"{what} sent JSON nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise FrameError(f"{what} sent something that is not JSON ({str(exc)[:200]})") from None


class Channel:
    """The harness's end of a socket to a user-code process: frames in, frames out, never blocking
    past a deadline."""

    def __init__(self, sock: socket.socket, *, limit: int = DEFAULT_FRAME_LIMIT, what: str = "the process") -> None:
        self.sock, self.limit, self.what = sock, limit, what
        self.sock.setblocking(False)
        self.buffer = bytearray()
        self.closed = False
        self._room: int | None = None

    def fileno(self) -> int:
        return self.sock.fileno()

    def send(self, message: Any, deadline: float) -> None:
        """Send one frame; FrameError if the other side has gone or does not read it by ``deadline``
        (a ``time.monotonic()`` value)."""
        self.send_frame(encode(message), deadline)

    def room(self) -> int:
        """Bytes of frames that may wait unread in the socket without a send blocking: a quarter of its
        send buffer (so a frame already waiting and one more always fit). Asked of the socket once."""
        if self._room is None:
            try:
                self._room = int(self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)) // 4
            except OSError:  # closed: nothing more will fit
                return 0
        return self._room

    def send_frame(self, frame: bytes, deadline: float) -> None:
        """``send`` for a frame ``encode`` made already."""
        data = memoryview(frame)
        while data:
            try:
                sent = self.sock.send(data)
            except BlockingIOError:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise FrameError(f"{self.what} did not read its input in time", timed_out=True) from None
                select.select([], [self.sock], [], left)
                continue
            except OSError as exc:
                raise FrameError(f"{self.what} closed its end ({exc.strerror or exc})", closed=True) from None
            data = data[sent:]

    def pump(self) -> list[bytes]:
        """Take whatever bytes have arrived (never blocking) and return the frames now complete.
        FrameError when the other side closed or announced a frame over the limit; frames completed
        before that are kept in ``self.pending`` for the caller."""
        self.pending: list[bytes] = []
        while True:
            try:
                chunk = self.sock.recv(_READ_CHUNK)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:
                self.closed = True
                raise FrameError(f"{self.what} closed its end ({exc.strerror or exc})", closed=True) from None
            if not chunk:
                self.closed = True
                break
            self.buffer += chunk
            self._split()
            if len(chunk) < _READ_CHUNK:
                break
        frames, self.pending = self.pending, []
        if self.closed and not frames:
            raise FrameError(f"{self.what} closed its end" + (" in the middle of a frame" if self.buffer else ""),
                             closed=True)
        return frames

    def _split(self) -> None:
        while len(self.buffer) >= HEADER.size:
            (size,) = HEADER.unpack_from(self.buffer)
            if size > self.limit:
                raise FrameError(f"{self.what} announced a frame of {size} bytes; the limit is {self.limit}")
            if len(self.buffer) < HEADER.size + size:
                return
            self.pending.append(bytes(self.buffer[HEADER.size:HEADER.size + size]))
            del self.buffer[:HEADER.size + size]

    def ask(self, message: dict[str, Any], deadline: float, *, what: str) -> Any:
        """Send one request to a user-code host and read its reply, which must name the request it
        answers: each request carries a fresh ``n`` that the host echoes as ``answers``. A reply that
        answers another request (a second reply: code that forked, and whose copy replied too) is a
        FrameError, so the caller fails that request and replaces the process, as for a broken frame."""
        import secrets

        nonce = secrets.token_hex(8)
        self.send({**message, "n": nonce}, deadline)
        reply = parse(self.receive(deadline), what=what)
        if not isinstance(reply, dict) or reply.get("answers") != nonce:
            raise FrameError(f"{what} sent a reply to a request it was not asked now (a second reply, from code "
                             "that forked?): its process is replaced")
        return reply

    def receive(self, deadline: float, ended: Callable[[], bool] | None = None) -> bytes:
        """Block (up to ``deadline``) for one whole frame. FrameError on a timeout or a broken frame, or
        (``ended``: whether the process on the other side has exited, asked every 50 ms) when the process
        has gone but its socket is still open (a process it started holds it)."""
        while True:
            frames = self.pump()
            if not frames and ended is not None and ended():
                frames = self.pump()  # what it sent just before it went
                if not frames:
                    raise FrameError(f"{self.what} exited", closed=True)
            if frames:
                if len(frames) > 1:
                    raise FrameError(f"{self.what} sent {len(frames)} frames where one was expected")
                return frames[0]
            left = deadline - time.monotonic()
            if left <= 0:
                raise FrameError(f"{self.what} did not answer in time", timed_out=True)
            select.select([self.sock], [], [], left if ended is None else min(left, 0.05))

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


# --------------------------------------------------------------------------- the child's side


def read_frame(sock: socket.socket) -> Any:
    """Block for one frame from the harness (trusted) and parse it; EOFError when it has gone."""
    header = _read_exact(sock, HEADER.size)
    (size,) = HEADER.unpack(header)
    return _decode(_read_exact(sock, size))


def _decode(data: bytes) -> Any:
    if data[:1] == _CASE:
        return {"case": marshal.loads(data[1:])}
    return json.loads(data)


class FrameReader:
    """The child's reading end for a run of frames from the harness (trusted): each ``receive()`` takes
    what has arrived in one ``recv`` (the next case is usually queued behind the last: header and payload
    come in one call, often with the frame after them). EOFError when the harness has gone."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = bytearray()

    def receive(self) -> Any:
        buffer = self.buffer
        while True:
            if len(buffer) >= HEADER.size:
                (size,) = HEADER.unpack_from(buffer)
                end = HEADER.size + size
                if len(buffer) >= end:
                    data = bytes(buffer[HEADER.size:end])
                    del buffer[:end]
                    return _decode(data)
            chunk = self.sock.recv(_READ_CHUNK)
            if not chunk:
                raise EOFError
            buffer += chunk


def _read_exact(sock: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def write_frame(sock: socket.socket, message: Any) -> None:
    sock.sendall(encode(message))


def watch_parent(parent: int) -> None:
    """Run on a daemon thread in a child: exit when the harness that started it is gone."""
    while True:
        time.sleep(1.0)
        if os.getppid() != parent:
            os._exit(3)


# --------------------------------------------------------------------------- the harness's side


def _path_tokens(value: str) -> Iterator[str]:
    for part in value.split(os.pathsep):
        for token in part.replace("=", " ").replace(",", " ").replace(";", " ").split():
            yield token.strip("'\"")


def _names_folder(token: str, folders: list[str]) -> bool:
    if token.startswith("file://"):
        token = token[len("file://"):]
    if "://" in token or not token:
        return False
    candidates = {os.path.abspath(token)}
    with contextlib.suppress(OSError, ValueError):
        candidates.add(os.path.realpath(token))
    return any(c == f or c.startswith(f.rstrip(os.sep) + os.sep) for c in candidates for f in folders)


def hidden_folders(data_dir: str | os.PathLike[str] | None) -> list[str]:
    """The data folder as absolute paths (as given and with symlinks resolved)."""
    if data_dir is None:
        return []
    given = os.fspath(data_dir)
    folders = {os.path.abspath(given)}
    with contextlib.suppress(OSError, ValueError):
        folders.add(os.path.realpath(given))
    return sorted(f for f in folders if f != os.sep)


def environ_now(tries: int = 100) -> dict[str, str]:
    """A copy of ``os.environ`` taken whole while another thread may be changing it: MLflow 3's telemetry
    thread sets and removes a variable of its own at any moment, and a copy that met the change midway
    raised KeyError (or RuntimeError), which stopped the run."""
    for _ in range(tries):
        try:
            return dict(os.environ)
        except (KeyError, RuntimeError):  # a variable came or went during the copy: take it again
            continue
    return dict(os.environ)


def confined_env(environ: Mapping[str, str], folders: list[str]) -> dict[str, str]:
    """``environ`` less every variable whose value names one of ``folders`` (or a path inside one) as a
    path: whole path components only, so ``--data data`` keeps ``HF_HOME=/mnt/data/hf`` and URLs."""
    if not folders:
        return dict(environ)
    return {k: v for k, v in environ.items() if not any(_names_folder(t, folders) for t in _path_tokens(v))}


def scrub_sys_path(paths: Iterable[str], folders: list[str], here: str) -> list[str]:
    """``sys.path`` for a child: absolute, and without entries inside the data folder."""
    out = []
    for p in paths:
        full = os.path.abspath(p) if p else here
        if not _names_folder(full, folders):
            out.append(full)
    return out


def child_launch(data_dir: str | os.PathLike[str] | None) -> tuple[dict[str, str], list[str]]:
    """The environment and ``sys.path`` of every process that runs user code (an adapter's worker, a judge's
    or a hook's host): nothing that names the data folder, qaeval importable, and the working directory
    first when this process's path has neither it nor "", so ``module:factory`` names resolve from the
    folder qaeval was run from whether it was started as ``python -m qaeval`` or as the ``qaeval``
    command (whose path starts with its own folder instead)."""
    folders = hidden_folders(data_dir)
    env = confined_env(environ_now(), folders)
    package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    here = os.getcwd()
    paths = list(sys.path)
    if here not in paths and "" not in paths:
        paths.insert(0, here)
    return env, scrub_sys_path(paths, folders, here)


class UserProcess:
    """One fresh interpreter running ``python -m MODULE FD`` with the rules above: its own process
    group, a private scratch working directory, a confined environment, stdout discarded and stderr
    kept (the last lines explain a start-up failure)."""

    def __init__(self, module: str, *, env: Mapping[str, str], limit: int = DEFAULT_FRAME_LIMIT,
                 what: str = "the process") -> None:
        parent_end, child_end = socket.socketpair()
        # Blocking, whatever the caller's socket.setdefaulttimeout() (a notebook's, say) made it: the child
        # inherits the descriptor's flags, and a non-blocking read with nothing there ended its loop.
        child_end.setblocking(True)
        self.scratch = tempfile.mkdtemp(prefix="qaeval-scratch-")
        try:
            self.popen = subprocess.Popen(
                [sys.executable, "-m", module, str(child_end.fileno())],
                pass_fds=[child_end.fileno()], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE, env=dict(env), cwd=self.scratch, start_new_session=True)
        except OSError as exc:
            parent_end.close()
            shutil.rmtree(self.scratch, ignore_errors=True)
            raise OSError(f"cannot start a worker process ({exc.strerror or exc})") from None
        finally:
            child_end.close()
        self.channel = Channel(parent_end, limit=limit, what=what)
        self.stderr = self.popen.stderr

    @property
    def pid(self) -> int:
        return self.popen.pid

    def fileno(self) -> int:
        return self.channel.fileno()

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, signal.SIGKILL)  # the process leads its own group
        with contextlib.suppress(OSError):
            self.popen.kill()

    def exit_code(self, wait: float) -> int | None:
        """Its exit code if it exits within ``wait`` seconds on its own, else None (it is left running)."""
        try:
            return self.popen.wait(wait)
        except subprocess.TimeoutExpired:
            return None

    def reap(self, wait: float = 2.0) -> int | None:
        """Its exit code once it has exited, killed (with its group) if it has not within ``wait`` seconds;
        None if even that did not end it within 5 s."""
        code = self.exit_code(wait)
        if code is None:
            self.kill()
            code = self.exit_code(5)
        return code

    def close(self) -> None:
        self.channel.close()
        if self.stderr is not None:
            with contextlib.suppress(OSError):
                self.stderr.close()
            self.stderr = None
        shutil.rmtree(self.scratch, ignore_errors=True)

    def stop(self, grace: float = 1.0) -> None:
        """Ask it to stop, give it ``grace`` seconds, then kill its group and clean up."""
        with contextlib.suppress(FrameError):
            self.channel.send({"stop": True}, time.monotonic() + min(grace, 0.2))
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(grace)
        self.kill()
        self.reap(1.0)
        self.close()

    def stderr_tail(self) -> str:
        text = ""
        try:
            if self.stderr is not None:
                os.set_blocking(self.stderr.fileno(), False)
                text = (self.stderr.read(1 << 16) or b"").decode("utf-8", "replace")
        except (OSError, ValueError):
            pass
        lines = [ln for ln in text.strip().splitlines() if ln.strip()]
        return lines[-1][:500] if lines else ""

    def started(self) -> None:
        """The process said it is ready: its stderr is no longer read."""
        if self.stderr is not None:
            with contextlib.suppress(OSError):
                self.stderr.close()
            self.stderr = None


def stopped_because(proc: UserProcess, reason: str, *, closed: bool, starting: bool) -> str:
    """Why a worker is stopped, said as what happened first: it broke the framing (``reason``, whatever became
    of its process since), or went away (``closed``: its socket closed or its process ended). A process
    whose socket closed is given half a second to exit on its own; one still running hung up. ``starting``:
    it had not built the adapter yet (what it printed is added)."""
    if not closed:
        return f"{reason} (it was stopped)"
    code = proc.exit_code(0.5)
    if code is None:
        return ("worker closed its connection before the adapter was built" if starting
                else "adapter process closed its connection and kept running") + " (it was stopped)"
    if not starting:
        return f"adapter process {exit_reason(code)}"
    detail = proc.stderr_tail()
    return f"worker {exit_reason(code)} before the adapter was built" + (f": {detail}" if detail else "")


def exit_reason(code: int | None) -> str:
    if code is None:
        return "stopped answering"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"
