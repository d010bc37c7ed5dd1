"""The adapter's worker process: ``python -m qaeval.worker.serve FD`` (started by
``qaeval.system.pool`` through ``qaeval.worker.process.UserProcess``). It drops ``CAP_SYS_PTRACE`` before any
user code is imported and talks to the harness over socket FD only:

    harness -> worker   {"setup": {...}}   once: the adapter, sys.path, the limits, the corpus copy's path
                        {"case": (opaque_id, question, ((id, text, title), ...))}   in marshal's format
                        {"stop": true}
    worker -> harness   {"ready": true, "logs": "..."}   or   {"init_error": "...", "usage": bool}
                        {"id": opaque_id, "output": {...}, "logs": "..."}   or   {"id": ..., "error": "...", "logs": ...}

What the adapter prints goes to a scratch file (file descriptors 1 and 2); the last ``log_limit``
characters go back with each case. It ends with ``os._exit``, and by itself when the harness goes away."""

from __future__ import annotations

import inspect
import io
import os
import signal
import sys
import tempfile
import threading
from typing import Any


def call_factory(factory: Any, corpus: Any) -> Any:
    """Call an adapter factory, with ``corpus=`` when its signature names a ``corpus`` parameter."""
    try:
        takes_corpus = "corpus" in inspect.signature(factory).parameters
    except (TypeError, ValueError):  # a builtin or C callable without a signature
        takes_corpus = False
    return factory(corpus=corpus) if takes_corpus else factory()


def is_adapter_object(obj: Any) -> bool:
    """Whether ``obj`` answers cases itself: it has a callable ``answer`` and is not a class (whose ``answer``
    is a function that wants an instance)."""
    return not isinstance(obj, type) and callable(getattr(obj, "answer", None))


def is_factory(adapter: Any) -> bool:
    """Whether ``adapter`` is called to make the adapter: a class, or any other callable that does not
    answer cases itself."""
    return callable(adapter) and not is_adapter_object(adapter)


def build_adapter(spec: dict[str, Any], corpus: Any = None) -> Any:
    """The adapter object from a spec: {"name": "module:factory"} or {"pickle": base64 cloudpickle of an
    adapter object or a factory}. A factory with a ``corpus`` parameter gets ``corpus`` (a read-only
    ``qaeval.Corpus``, or None when the suite has none)."""
    from qaeval.core.errors import UsageError
    from qaeval.worker.plugins import resolve, unpickle

    if "name" in spec:
        obj = call_factory(resolve(spec["name"], what="adapter"), corpus)
    else:
        obj = unpickle(spec)
        if is_factory(obj):
            obj = call_factory(obj, corpus)
    if not is_adapter_object(obj):
        raise UsageError(f"the adapter ({type(obj).__name__}) has no answer(case) method")
    return obj


class Caller:
    """Calls ``adapter.answer``; a coroutine (``async def answer``) is run on this worker's own loop."""

    def __init__(self, adapter: Any) -> None:
        self.answer = adapter.answer
        self.loop: Any = None  # an asyncio event loop, made for the first coroutine

    def __call__(self, view: Any) -> Any:
        result = self.answer(view)
        if inspect.isawaitable(result):
            if self.loop is None:
                import asyncio  # only for an async adapter: costly at every worker's start otherwise

                self.loop = asyncio.new_event_loop()
            result = self.loop.run_until_complete(result)
        return result


def answer_one(call: Caller, payload: Any) -> dict[str, Any]:
    """Answer one case; every way the adapter can fail becomes an error string, never an exception. An
    exception's error names the file and line it was raised at, and its traceback (the adapter's frames,
    not this module's) goes with it, for the case's logs (``with_traceback``)."""
    from qaeval.core.errors import describe
    from qaeval.system.contract import output_to_plain, view_of

    try:
        view = view_of((payload[0], payload[1], tuple(tuple(s) for s in payload[2])))
        return {"output": output_to_plain(call(view))}
    except SystemExit as exc:
        return {"error": f"adapter {describe(exc)}"}
    except BaseException as exc:  # noqa: BLE001  (whatever the adapter raises is its case's failure)
        where, trace = _where_raised(exc)
        return {"error": f"adapter raised {describe(exc)}{where}", "traceback": trace}


def _where_raised(exc: BaseException) -> tuple[str, str]:
    """(" (at my_rag.py:42 in retrieve)", the traceback from the adapter's first frame), for an exception
    the adapter raised; ("", "") when there is nothing to say."""
    import traceback

    try:
        frames = traceback.extract_tb(exc.__traceback__)
        while frames and frames[0].filename == __file__:  # this module's calls into the adapter
            frames = traceback.StackSummary.from_list(frames[1:])
        if not frames:
            return "", ""
        last = frames[-1]
        trace = (
            "Traceback (most recent call last):\n"
            + "".join(frames.format())
            + "".join(traceback.format_exception_only(type(exc), exc))
        )
        return f" (at {os.path.basename(last.filename)}:{last.lineno} in {last.name})", trace
    except Exception:  # noqa: BLE001  (an exception whose text cannot be formatted still fails its case)
        return "", ""


def with_traceback(logs: str, reply: dict[str, Any]) -> str:
    """What a case printed, then the traceback of what it raised (taken out of ``reply``)."""
    trace = reply.pop("traceback", "")
    return f"{logs}{chr(10) if logs and not logs.endswith(chr(10)) else ''}{trace}" if trace else logs


def _flush(*streams: Any) -> None:
    for stream in streams:
        try:
            stream.flush()
        except Exception:  # noqa: BLE001  (a stream the adapter replaced may fail to flush)
            pass


class FdCapture:
    """Points file descriptors 1 and 2 (and ``sys.stdout``/``sys.stderr``) at a scratch file and hands
    back what was written since the last call, keeping only the last ``limit`` characters."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.file = tempfile.TemporaryFile(prefix="qaeval-worker-log-")
        _flush(sys.stdout, sys.stderr)
        os.dup2(self.file.fileno(), 1)
        os.dup2(self.file.fileno(), 2)
        self.stdout, self.stderr = (
            io.TextIOWrapper(io.FileIO(fd, "w", closefd=False), encoding="utf-8", errors="replace", line_buffering=True)
            for fd in (1, 2)
        )
        self.restore()
        try:
            import ctypes

            self._fflush: Any = ctypes.CDLL(None).fflush
        except Exception:  # noqa: BLE001  (no C library to flush: nothing buffered there)
            self._fflush = None

    def restore(self) -> None:
        sys.stdout, sys.stderr = self.stdout, self.stderr

    def take(self) -> str:
        _flush(*{id(s): s for s in (sys.stdout, sys.stderr, self.stdout, self.stderr)}.values())
        if self._fflush is not None:
            try:
                self._fflush(None)
            except Exception:  # noqa: BLE001  (no C library to flush: nothing buffered there)
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
        if not start and len(text) <= self.limit:
            return text
        keep = max(0, self.limit - 60)  # room for the note, so the whole stays within the limit
        note = f"[... {start + len(text) - keep} earlier bytes dropped]\n"
        return note + text[len(text) - keep :]


def _send(sock: Any, message: dict[str, Any], limit: int) -> None:
    from qaeval.worker.messages import HEADER, encode

    data = encode(message)
    if len(data) - HEADER.size > limit:
        too_big = f"the adapter's reply is {len(data) - HEADER.size} bytes; the limit is {limit} (--max-reply-mb)"
        logs = str(message.get("logs", ""))[-1000:]
        data = encode({k: v for k, v in message.items() if k == "id"} | {"error": too_big, "logs": logs})
    sock.sendall(data)


def _open_corpus(path: str | None) -> Any:
    if path is None:
        return None
    from qaeval.data.corpus import Corpus

    return Corpus.open_export(path)


def main(fd: int) -> None:
    import socket

    from qaeval.worker.hardening import drop_ptrace
    from qaeval.worker.messages import MessageReader, read_message
    from qaeval.worker.process import watch_parent

    drop_ptrace()  # before any user code: a root worker must not be able to read the harness's memory
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the harness's to handle
    sock = socket.socket(fileno=fd)
    setup = read_message(sock)["setup"]
    limit = int(setup["message_limit"])
    sys.argv = ["qaeval-worker"]
    sys.path[:] = [p for p in setup["sys_path"]] + [p for p in sys.path if p and p not in setup["sys_path"]]
    threading.Thread(target=watch_parent, args=(os.getppid(),), daemon=True, name="qaeval-parent-watch").start()
    capture = FdCapture(int(setup["log_limit"]))
    try:
        call = Caller(build_adapter(setup["adapter"], _open_corpus(setup.get("corpus"))))
    except BaseException as exc:  # noqa: BLE001  (whatever building the adapter raises is reported to the harness)
        from qaeval.core.errors import UsageError, describe

        usage = isinstance(exc, UsageError)  # its message already names the adapter and what is wrong
        _send(sock, {"init_error": str(exc) if usage else describe(exc), "usage": usage, "logs": capture.take()}, limit)
        os._exit(0)
    _send(sock, {"ready": True, "logs": capture.take()}, limit)
    messages = MessageReader(sock)
    while True:
        try:
            message = messages.receive()
        except (EOFError, OSError):
            break
        if "case" not in message:
            break
        reply = {"id": message["case"][0], **answer_one(call, message["case"])}
        reply["logs"] = with_traceback(capture.take(), reply)
        try:
            _send(sock, reply, limit)
        except (TypeError, ValueError) as exc:  # text the adapter produced that JSON cannot carry
            _send(
                sock,
                {"id": reply["id"], "error": f"the adapter's output cannot be sent back ({exc})", "logs": ""},
                limit,
            )
        except OSError:
            break
    os._exit(0)


if __name__ == "__main__":
    main(int(sys.argv[1]))
