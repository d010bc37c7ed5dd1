"""Length-prefixed messages between the harness and a user-code process: a 4-byte big-endian length and
that much JSON (a case to a worker goes in ``marshal``'s format: ``encode_case``). The harness's reads
never block (``Channel.pump``), a header over the limit or more than ``MAX_CONTAINERS`` objects and
arrays is refused before parsing, and a send waits at most until its deadline. No pandas here."""

from __future__ import annotations

import contextlib
import json
import marshal
import select
import socket
import struct
import time
from collections.abc import Callable
from typing import Any

HEADER = struct.Struct("!I")
DEFAULT_MESSAGE_LIMIT = 8 * 1024 * 1024
MAX_CONTAINERS = 200_000
_READ_CHUNK = 1 << 16


class MessageError(Exception):
    """The other side broke the protocol (too big, not JSON), went away (``closed``: its end of the socket
    closed, or its process exited) or missed its deadline (``timed_out``); the message says how."""

    def __init__(self, message: str, *, timed_out: bool = False, closed: bool = False) -> None:
        super().__init__(message)
        self.timed_out, self.closed = timed_out, closed


_WIRE = json.JSONEncoder(allow_nan=False, ensure_ascii=True, separators=(",", ":"))  # one, not one a message


def encode(message: Any) -> bytes:
    data = _WIRE.encode(message).encode("ascii")
    return HEADER.pack(len(data)) + data


# A case goes to a worker as ``_CASE`` and the payload in ``marshal``'s format: several times faster than
# JSON (``benchmarks/bench_boundary.py --wire-only``). Only this direction: the worker reads what the
# harness wrote (trusted); what it sends back is JSON, parsed strictly (``parse``).
_CASE = b"\x00"  # a JSON message starts with "{"


def encode_case(payload: tuple[str, str, tuple[tuple[str, str, str | None], ...]]) -> bytes:
    """The message that hands a worker one case (``{"case": payload}`` to ``read_message``); in JSON when a
    field is not exactly a ``str`` (a subclass, or ``numpy.str_``, which marshal refuses or writes as bytes)."""
    opaque, question, sources = payload
    plain = (
        type(opaque) is str
        and type(question) is str
        and all(type(i) is str and type(t) is str and (title is None or type(title) is str) for i, t, title in sources)
    )
    if not plain:
        return encode({"case": payload})
    data = _CASE + marshal.dumps(payload)
    return HEADER.pack(len(data)) + data


def parse(raw: bytes | bytearray, *, what: str = "the process") -> Any:
    """JSON text from the other side, parsed within a memory bound. Duplicate keys, NaN and
    infinities, unpaired surrogates and too many containers are all refused with MessageError."""
    containers = raw.count(b"{") + raw.count(b"[")
    if containers > MAX_CONTAINERS:
        raise MessageError(
            f"{what} sent a message with {containers} JSON objects and arrays; the limit is {MAX_CONTAINERS}"
        )
    from qaeval.core.jsonfile import loads_strict

    try:
        return loads_strict(bytes(raw).decode("utf-8"))
    except RecursionError:
        raise MessageError(f"{what} sent JSON nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise MessageError(f"{what} sent something that is not JSON ({str(exc)[:200]})") from None


class Channel:
    """The harness's end of a socket to a user-code process: messages in, messages out, never blocking
    past a deadline."""

    def __init__(self, sock: socket.socket, *, limit: int = DEFAULT_MESSAGE_LIMIT, what: str = "the process") -> None:
        self.sock, self.limit, self.what = sock, limit, what
        self.sock.setblocking(False)
        self.buffer = bytearray()
        self.closed = False
        self._room: int | None = None

    def fileno(self) -> int:
        return self.sock.fileno()

    def send(self, message: Any, deadline: float) -> None:
        """Send one message; MessageError if the other side has gone or does not read it by ``deadline``
        (a ``time.monotonic()`` value)."""
        self.send_message(encode(message), deadline)

    def room(self) -> int:
        """Bytes of messages that may wait unread in the socket without a send blocking: a quarter of its
        send buffer (so a message already waiting and one more always fit). Asked of the socket once."""
        if self._room is None:
            try:
                self._room = int(self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)) // 4
            except OSError:  # closed: nothing more will fit
                return 0
        return self._room

    def send_message(self, data_: bytes, deadline: float) -> None:
        """``send`` for a message ``encode`` made already."""
        data = memoryview(data_)
        while data:
            try:
                sent = self.sock.send(data)
            except BlockingIOError:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise MessageError(f"{self.what} did not read its input in time", timed_out=True) from None
                select.select([], [self.sock], [], left)
                continue
            except OSError as exc:
                raise MessageError(f"{self.what} closed its end ({exc.strerror or exc})", closed=True) from None
            data = data[sent:]

    def pump(self) -> list[bytes]:
        """Take whatever bytes have arrived (never blocking) and return the messages now complete.
        MessageError when the other side closed or announced a message over the limit; messages completed
        before that are kept in ``self.pending`` for the caller."""
        self.pending: list[bytes] = []
        while True:
            try:
                chunk = self.sock.recv(_READ_CHUNK)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:
                self.closed = True
                raise MessageError(f"{self.what} closed its end ({exc.strerror or exc})", closed=True) from None
            if not chunk:
                self.closed = True
                break
            self.buffer += chunk
            self._split()
            if len(chunk) < _READ_CHUNK:
                break
        messages, self.pending = self.pending, []
        if self.closed and not messages:
            raise MessageError(
                f"{self.what} closed its end" + (" in the middle of a message" if self.buffer else ""), closed=True
            )
        return messages

    def _split(self) -> None:
        while len(self.buffer) >= HEADER.size:
            (size,) = HEADER.unpack_from(self.buffer)
            if size > self.limit:
                raise MessageError(f"{self.what} announced a message of {size} bytes; the limit is {self.limit}")
            if len(self.buffer) < HEADER.size + size:
                return
            self.pending.append(bytes(self.buffer[HEADER.size : HEADER.size + size]))
            del self.buffer[: HEADER.size + size]

    def ask(self, message: dict[str, Any], deadline: float, *, what: str) -> Any:
        """Send one request to a user-code host and read its reply, which must echo the request's fresh
        ``n`` as ``answers``; a reply to another request (code that forked, whose copy replied too) is a
        MessageError, as a broken message is."""
        import secrets

        nonce = secrets.token_hex(8)
        self.send({**message, "n": nonce}, deadline)
        reply = parse(self.receive(deadline), what=what)
        if not isinstance(reply, dict) or reply.get("answers") != nonce:
            raise MessageError(
                f"{what} sent a reply to a request it was not asked now (a second reply, from code "
                "that forked?): its process is replaced"
            )
        return reply

    def receive(self, deadline: float, ended: Callable[[], bool] | None = None) -> bytes:
        """Block (up to ``deadline``) for one whole message. MessageError on a timeout or a broken message, or
        (``ended``: whether the process on the other side has exited, asked every 50 ms) when the process
        has gone but its socket is still open (a process it started holds it)."""
        while True:
            messages = self.pump()
            if not messages and ended is not None and ended():
                messages = self.pump()  # what it sent just before it went
                if not messages:
                    raise MessageError(f"{self.what} exited", closed=True)
            if messages:
                if len(messages) > 1:
                    raise MessageError(f"{self.what} sent {len(messages)} messages where one was expected")
                return messages[0]
            left = deadline - time.monotonic()
            if left <= 0:
                raise MessageError(f"{self.what} did not answer in time", timed_out=True)
            select.select([self.sock], [], [], left if ended is None else min(left, 0.05))

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


def read_message(sock: socket.socket) -> Any:
    """Block for one message from the harness (trusted) and parse it; EOFError when it has gone."""
    header = _read_exact(sock, HEADER.size)
    (size,) = HEADER.unpack(header)
    return _decode(_read_exact(sock, size))


def _decode(data: bytes) -> Any:
    if data[:1] == _CASE:
        return {"case": marshal.loads(data[1:])}
    return json.loads(data)


class MessageReader:
    """The child's reading end for a run of messages from the harness (trusted): each ``receive()`` takes
    what has arrived in one ``recv`` (the next case is usually queued behind the last: header and payload
    come in one call, often with the message after them). EOFError when the harness has gone."""

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
                    data = bytes(buffer[HEADER.size : end])
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


def write_message(sock: socket.socket, message: Any) -> None:
    sock.sendall(encode(message))
