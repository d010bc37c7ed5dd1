"""The worker side of the process boundary: ``python -m qaeval.system.worker FD``.

A worker is a fresh interpreter started by the harness (``qaeval.system.pool``). It inherits nothing of
the harness's memory: its argv names no data, its environment has had every variable that names a data
folder removed, and its working directory is not inside one. It talks to the harness over one socket
(file descriptor FD) in length-prefixed JSON frames, and nothing else:

    harness -> worker   {"setup": {...}}            once: the adapter to build, sys.path, the log limit
                        {"case": [opaque_id, question, [[id, text, title], ...]]}   one per case
                        {"stop": true}
    worker -> harness   {"ready": true, "logs": "..."}   or   {"init_error": "...", "usage": bool}
                        {"output": {...plain data...}, "logs": "..."}   or   {"error": "...", "logs": "..."}

File descriptors 1 and 2 are pointed at a scratch file before the adapter is built, so nothing the
adapter prints (``print``, ``os.write(1, ...)``, a C library's ``printf``) reaches the harness's
terminal; after each case the last ``log_limit`` characters are sent back with its result. The
worker ends with ``os._exit`` after its last case, so a thread the adapter left running cannot keep it
alive, and it exits by itself when the harness goes away.

``answer_remote`` is the same call for an executor (Dask): one case in, plain data out.
"""

from __future__ import annotations

import asyncio
import base64
import inspect
import io
import json
import os
import signal
import sys
import tempfile
import threading
import time
from typing import Any

FRAME_LIMIT = 64 * 1024 * 1024


# --------------------------------------------------------------------------- building the adapter


def build_adapter(spec: dict[str, Any]) -> Any:
    """The adapter object from a spec: {"name": "module:factory"} or {"pickle": base64 cloudpickle of an
    adapter object or a zero-argument factory}."""
    from qaeval.errors import UsageError
    from qaeval.plugins import resolve

    if "name" in spec:
        obj = resolve(spec["name"], what="adapter")()
    else:
        import cloudpickle

        obj = cloudpickle.loads(base64.b64decode(spec["pickle"]))
        if not callable(getattr(obj, "answer", None)) and callable(obj):
            obj = obj()
    if not callable(getattr(obj, "answer", None)):
        raise UsageError(f"the adapter ({type(obj).__name__}) has no answer(case) method")
    return obj


class Caller:
    """Calls ``adapter.answer``; a coroutine (``async def answer``) is run on this worker's own loop."""

    def __init__(self, adapter: Any) -> None:
        self.answer = adapter.answer
        self.loop: asyncio.AbstractEventLoop | None = None

    def __call__(self, view: Any) -> Any:
        result = self.answer(view)
        if inspect.isawaitable(result):
            if self.loop is None:
                self.loop = asyncio.new_event_loop()
            result = self.loop.run_until_complete(result)
        return result


def answer_one(call: Caller, payload: Any) -> dict[str, Any]:
    """Answer one case; every way the adapter can fail becomes an error string, never an exception."""
    from qaeval.errors import describe
    from qaeval.system.contract import output_to_plain, view_of

    try:
        view = view_of((payload[0], payload[1], tuple(tuple(s) for s in payload[2])))
        return {"output": output_to_plain(call(view))}
    except SystemExit as exc:
        return {"error": f"adapter {describe(exc)}"}
    except BaseException as exc:  # noqa: BLE001  (whatever the adapter raises is its case's failure)
        return {"error": f"adapter raised {describe(exc)}"}


# --------------------------------------------------------------------------- output capture


class FdCapture:
    """Points file descriptors 1 and 2 (and ``sys.stdout``/``sys.stderr``) at a scratch file and hands
    back what was written since the last call, keeping only the last ``limit`` characters."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.file = tempfile.TemporaryFile(prefix="qaeval-worker-log-")
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001
                pass
        os.dup2(self.file.fileno(), 1)
        os.dup2(self.file.fileno(), 2)
        self.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8", errors="replace",
                                       line_buffering=True)
        self.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="replace",
                                       line_buffering=True)
        self.restore()
        try:
            import ctypes

            self._fflush = ctypes.CDLL(None).fflush
        except Exception:  # noqa: BLE001
            self._fflush = None

    def restore(self) -> None:
        sys.stdout, sys.stderr = self.stdout, self.stderr

    def take(self) -> str:
        for stream in {id(s): s for s in (sys.stdout, sys.stderr, self.stdout, self.stderr)}.values():
            try:
                stream.flush()
            except Exception:  # noqa: BLE001
                pass
        if self._fflush is not None:
            try:
                self._fflush(None)
            except Exception:  # noqa: BLE001
                pass
        self.restore()
        fd = self.file.fileno()
        size = os.fstat(fd).st_size
        if not size:
            return ""
        start = max(0, size - self.limit * 4)
        data = os.pread(fd, size - start, start)
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        text = data.decode("utf-8", errors="replace")
        dropped = start + max(0, len(text) - self.limit)
        if len(text) > self.limit:
            text = text[-self.limit:]
        return (f"[... {dropped} earlier bytes dropped]\n" if dropped else "") + text


# --------------------------------------------------------------------------- the worker process


def _send(conn: Any, message: dict[str, Any]) -> None:
    data = json.dumps(message, allow_nan=False).encode("ascii")
    if len(data) > FRAME_LIMIT:
        data = json.dumps({"error": f"the adapter's output is {len(data)} bytes; the limit is {FRAME_LIMIT}",
                           "logs": message.get("logs", "")[-1000:]}).encode()
    conn.send_bytes(data)


def _watch_parent(parent: int) -> None:
    while True:
        time.sleep(1.0)
        if os.getppid() != parent:
            os._exit(3)


def main(fd: int) -> None:
    from multiprocessing.connection import Connection

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the harness's to handle
    conn = Connection(fd)
    setup = json.loads(conn.recv_bytes())["setup"]
    sys.argv = ["qaeval-worker"]
    here = os.getcwd()
    sys.path[:] = [p for p in setup["sys_path"]] + [p for p in sys.path if p not in setup["sys_path"]]
    sys.path[:] = [here if p == "" else p for p in sys.path]
    threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True, name="qaeval-parent-watch").start()
    capture = FdCapture(int(setup["log_limit"]))
    try:
        call = Caller(build_adapter(setup["adapter"]))
    except BaseException as exc:  # noqa: BLE001
        from qaeval.errors import UsageError, describe

        _send(conn, {"init_error": describe(exc), "usage": isinstance(exc, UsageError), "logs": capture.take()})
        os._exit(0)
    _send(conn, {"ready": True, "logs": capture.take()})
    while True:
        try:
            message = json.loads(conn.recv_bytes())
        except (EOFError, OSError):
            break
        if "case" not in message:
            break
        reply = answer_one(call, message["case"])
        reply["logs"] = capture.take()
        try:
            _send(conn, reply)
        except (TypeError, ValueError) as exc:  # text the adapter produced that JSON cannot carry
            _send(conn, {"error": f"the adapter's output cannot be sent back ({exc})", "logs": ""})
        except OSError:
            break
    os._exit(0)


# --------------------------------------------------------------------------- on an executor

_REMOTE: dict[str, Caller] = {}
_REMOTE_LOCK = threading.Lock()


def answer_remote(spec_json: str, payload: list[Any]) -> str:
    """One case on an executor's worker (a Dask worker, a process pool): build the adapter once per
    process and spec, answer, and return plain data as JSON text. Python-level output is captured."""
    import contextlib
    import hashlib

    key = hashlib.sha256(spec_json.encode()).hexdigest()
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer):
        try:
            with _REMOTE_LOCK:
                if key not in _REMOTE:
                    _REMOTE[key] = Caller(build_adapter(json.loads(spec_json)))
            reply = answer_one(_REMOTE[key], payload)
        except BaseException as exc:  # noqa: BLE001
            from qaeval.errors import describe

            reply = {"error": f"adapter could not start: {describe(exc)}"}
    reply["logs"] = buffer.getvalue()[-4000:]
    return json.dumps(reply, allow_nan=False)


if __name__ == "__main__":
    main(int(sys.argv[1]))
