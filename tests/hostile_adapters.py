"""Adapters that attack the process boundary from inside a worker: they write raw frames to the
worker's socket, read the harness through /proc, escape the process group, or never start."""

from __future__ import annotations

import contextlib
import json
import marshal
import os
import socket
import stat
import struct
import time

from qaeval import Citation, SUTOutput


def _socket_fds() -> list[int]:
    fds = []
    for name in os.listdir("/proc/self/fd"):
        try:
            if stat.S_ISSOCK(os.fstat(int(name)).st_mode):
                fds.append(int(name))
        except OSError:
            continue
    return fds


def _write_raw(data: bytes) -> None:
    for fd in _socket_fds():
        os.write(fd, data)


def _frame(message: object) -> bytes:
    body = json.dumps(message).encode()
    return struct.pack("!I", len(body)) + body


def _honest(case) -> dict:
    source = case.sources[0]
    return {
        "answer": source.text,
        "citations": {"__type__": "list", "items": [{"source_id": source.id, "claim": source.text}]},
        "retrieved_ids": {"__type__": "list", "items": [source.id]},
        "abstained": False,
        "model_was_called": True,
        "prompt_to_model": source.text,
        "computed_aggregate": None,
    }


class NeverStarts:
    pass


def make_never_starts():
    time.sleep(3600)  # a model server that is down
    return NeverStarts()


class HalfFrame:
    """Sends part of a frame, then waits: 2 of the 4 length bytes, or a header for 1,000 bytes and 10."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def answer(self, case):
        _write_raw(b"\x00\x00" if self.kind == "header" else struct.pack("!I", 1000) + b"0123456789")
        time.sleep(3600)


def make_half_header():
    return HalfFrame("header")


def make_half_body():
    return HalfFrame("body")


class Forger:
    """Writes a reply frame of its own before the worker's: ``mode`` says which."""

    def __init__(self, mode: str) -> None:
        self.mode = mode

    def answer(self, case):
        if self.mode == "huge_logs":
            _write_raw(_frame({"id": case.id, "output": _honest(case), "logs": "L" * (4 * 1024 * 1024)}))
            time.sleep(3600)
        if self.mode in ("huge_frame", "huge_frame_then_exit"):
            _write_raw(struct.pack("!I", 16 * 1024 * 1024) + b"{}" * 1024)
            if self.mode == "huge_frame_then_exit":
                os._exit(0)
            time.sleep(3600)
        if self.mode == "many_dicts":
            _write_raw(_frame([{}] * 600_000))
            time.sleep(3600)
        if self.mode == "huge_error":
            _write_raw(_frame({"id": case.id, "error": "e" * 100_000, "logs": ""}))
            time.sleep(3600)
        if self.mode == "other_id":
            _write_raw(_frame({"id": "0123456789abcdef", "output": _honest(case), "logs": ""}))
            time.sleep(3600)
        if self.mode == "marshal":  # a reply in the format cases come to the worker in (process.encode_case)
            body = b"\x00" + marshal.dumps({"id": case.id, "output": _honest(case), "logs": ""})
            _write_raw(struct.pack("!I", len(body)) + body)
            time.sleep(3600)
        if self.mode == "twice":  # a reply of its own, then the worker's own reply to the same case
            _write_raw(_frame({"id": case.id, "output": _honest(case), "logs": ""}))
        source = case.sources[0]
        return SUTOutput(
            answer=source.text,
            citations=[Citation(source.id, source.text)],
            retrieved_ids=[source.id],
            model_was_called=True,
            prompt_to_model=source.text,
        )


def make_huge_logs():
    return Forger("huge_logs")


def make_huge_frame():
    return Forger("huge_frame")


def make_huge_frame_then_exit():
    return Forger("huge_frame_then_exit")


def make_many_dicts():
    return Forger("many_dicts")


def make_other_id():
    return Forger("other_id")


def make_twice():
    return Forger("twice")


def make_marshal_reply():
    return Forger("marshal")


class ProcReader:
    """Tries to read the harness (its parent) through /proc, and answers with what it could open."""

    def answer(self, case):
        parent = os.getppid()
        found = {}
        for name in ("mem", "environ", "fd/1", "cmdline_is_fine"):
            path = f"/proc/{parent}/{name}"
            if name == "cmdline_is_fine":
                continue
            try:
                if name == "fd/1":
                    os.close(os.open(path, os.O_WRONLY))
                    found[name] = "opened"
                else:
                    with open(path, "rb") as handle:
                        if name == "mem":
                            handle.seek(0x400000)
                        handle.read(16)
                    found[name] = "read"
            except OSError as exc:
                found[name] = type(exc).__name__
        return SUTOutput(answer=json.dumps(found), abstained=False)


def make_proc_reader():
    return ProcReader()


class Escaper:
    """Forks, calls setsid and forks again: the grandchild leaves the worker's process group and
    sleeps. Answers with the grandchild's pid."""

    def answer(self, case):
        read_end, write_end = os.pipe()
        child = os.fork()
        if child == 0:
            os.setsid()
            grandchild = os.fork()
            if grandchild == 0:
                os.close(read_end)
                os.close(write_end)
                time.sleep(3600)
                os._exit(0)
            os.write(write_end, str(grandchild).encode())
            os._exit(0)
        os.close(write_end)
        pid = os.read(read_end, 32).decode()
        os.waitpid(child, 0)
        return SUTOutput(answer=pid, abstained=False)


def make_escaper():
    return Escaper()


class ExitsLeavingSocketOpen:
    """Leaves a descendant (out of its process group) holding the worker's socket, then ends the worker:
    the socket never closes, so only the worker's exit says it has gone."""

    def answer(self, case):
        child = os.fork()
        if child == 0:
            os.setsid()
            if os.fork() == 0:
                time.sleep(3600)  # the socket stays open here
            os._exit(0)
        os.waitpid(child, 0)
        os._exit(5)


def make_exits_leaving_socket_open():
    return ExitsLeavingSocketOpen()


class HangsUp:
    """Shuts its end of the worker's socket, then keeps running: the harness sees the connection close
    while the process lives on."""

    def answer(self, case):
        for fd in _socket_fds():
            with contextlib.suppress(OSError):
                socket.socket(fileno=os.dup(fd)).shutdown(socket.SHUT_RDWR)
        time.sleep(3600)


def make_hangs_up():
    return HangsUp()


class _Payload(str):
    def __reduce__(self):
        return (open, (os.environ["QAEVAL_TEST_MARKER"], "w"))


class Pickler:
    """On an executor, tries to have the harness unpickle an object of its choosing: it makes every
    ``json.dumps`` in its process return a str whose unpickling creates a marker file."""

    def answer(self, case):
        real = json.dumps
        json.dumps = lambda *a, **k: _Payload(real(*a, **k))
        return SUTOutput(answer=str(os.getpid()), abstained=False)


def make_pickler():
    return Pickler()


def make_huge_error():
    return Forger("huge_error")


class Long:
    def answer(self, case):
        return SUTOutput(answer="word " * 250_000, abstained=False)


def make_long():
    return Long()


class CorpusVandal:
    """Writes over the corpus file it was handed, then answers."""

    def __init__(self, corpus) -> None:
        with open(corpus.path, "r+b") as handle:
            handle.write(b'{"id": "x", "text": "vandalised"}\n')

    def answer(self, case):
        return SUTOutput(abstained=True)


def make_corpus_vandal(corpus=None):
    return CorpusVandal(corpus)
