"""Adapter calls in this process (``isolation="none"``), on daemon threads, for a debugger. Nothing is
enforced: the adapter shares this process's memory, a timeout abandons its thread, and ``os._exit`` ends
the harness. Every output of such a run says so."""

from __future__ import annotations

import io
import queue
import sys
import threading
import time
from typing import Any

from qaeval.core.errors import UsageError, describe
from qaeval.core.shared import WhileAnyRun
from qaeval.data.cases import Suite
from qaeval.system.calls import USER_TEXT_LIMIT, AdapterSpec, Done, reply_row
from qaeval.system.contract import Payload, make_payload, output_row
from qaeval.worker.serve import Caller, answer_one, with_traceback


class _ThreadOutput(io.TextIOBase):
    """Stands in for sys.stdout/sys.stderr while in-process runs go: writes from an adapter's thread go
    to that thread's buffer, everything else to the real stream."""

    def __init__(self, real: Any, buffers: dict[int, io.StringIO]) -> None:
        self.real, self.buffers = real, buffers

    def write(self, text: str) -> int:
        buffer = self.buffers.get(threading.get_ident())
        if buffer is None:
            return self.real.write(text)
        return buffer.write(text)

    def flush(self) -> None:
        if threading.get_ident() not in self.buffers:
            self.real.flush()

    def isatty(self) -> bool:
        return bool(getattr(self.real, "isatty", lambda: False)())

    @property
    def encoding(self) -> str:  # type: ignore[override]  # a read-only property over the real stream's
        return getattr(self.real, "encoding", "utf-8")


# The adapter threads of every in-process run now going, by thread id, each with the buffer its prints go to.
_buffers: dict[int, io.StringIO] = {}


def _route_output() -> tuple[Any, Any]:
    saved = (sys.stdout, sys.stderr)
    sys.stdout, sys.stderr = _ThreadOutput(sys.stdout, _buffers), _ThreadOutput(sys.stderr, _buffers)
    return saved


def _put_back_output(saved: tuple[Any, Any]) -> None:
    sys.stdout, sys.stderr = saved


# sys.stdout and sys.stderr routed (``_ThreadOutput``) while any in-process run is going; the last run to
# end puts back the streams there were before the first began, whichever ends first.
_adapter_output_captured = WhileAnyRun(_route_output, _put_back_output)


def _build(spec: AdapterSpec) -> Any:
    try:
        adapter = spec.build_here()
    except (UsageError, KeyboardInterrupt):
        raise
    except BaseException as exc:  # noqa: BLE001  (whatever the factory raises is the user's to fix)
        raise UsageError(f"adapter {spec.label}: the factory {describe(exc)}") from None
    if not callable(getattr(adapter, "answer", None)):
        raise UsageError(f"the adapter ({type(adapter).__name__}) has no answer(case) method")
    return adapter


class _ThreadRun:
    """One pass over a suite on daemon threads: a queue of cases, a queue of replies, deadlines watched
    from here (a thread past its deadline is abandoned and another takes its slot)."""

    def __init__(self, adapter: Any, suite: Suite, *, timeout: float, done: Done) -> None:
        self.adapter, self.suite, self.timeout, self.done = adapter, suite, timeout, done
        self.jobs: queue.SimpleQueue[tuple[int, str, Payload] | None] = queue.SimpleQueue()
        self.results: queue.SimpleQueue[tuple[int, dict[str, Any], str]] = queue.SimpleQueue()
        self.started: dict[int, tuple[str, float]] = {}
        self.recorded: set[int] = set()
        self.remaining = len(suite)

    def loop(self) -> None:
        call = Caller(self.adapter)
        me = threading.get_ident()
        buffer = _buffers[me] = io.StringIO()
        while True:
            job = self.jobs.get()
            if job is None:
                _buffers.pop(me, None)
                return
            index, case_id, payload = job
            self.started[index] = (case_id, time.perf_counter())
            reply = answer_one(call, payload)
            text = buffer.getvalue()
            buffer.seek(0)
            buffer.truncate()
            self.results.put((index, reply, with_traceback(text[-USER_TEXT_LIMIT:], reply)[-USER_TEXT_LIMIT:]))

    def spawn(self) -> None:
        threading.Thread(target=self.loop, daemon=True, name="qaeval-adapter").start()

    def record(self, index: int, row: dict[str, Any]) -> None:
        self.recorded.add(index)
        self.remaining -= 1
        self.done(index, row)

    def expire(self) -> None:
        now = time.perf_counter()
        for i, (case_id, t0) in list(self.started.items()):
            if i not in self.recorded and now - t0 >= self.timeout:
                why = f"timed out after {self.timeout:g} s (isolation none: its thread was abandoned, not stopped)"
                self.record(i, output_row(case_id, None, why, now - t0))
                self.spawn()  # the stuck thread keeps its slot busy; add one in its place

    def go(self, concurrency: int) -> None:
        for index, case in enumerate(self.suite.cases):
            self.jobs.put((index, case.id, make_payload(case)))
        try:
            for _ in range(min(concurrency, self.remaining)):  # a thread may answer every case before
                self.spawn()  # start() returns here: a Ctrl-C meanwhile is handled below too
            while self.remaining:
                try:
                    got = self.results.get(timeout=0.05)
                except queue.Empty:
                    self.expire()
                    continue
                self.take(*got)
        except KeyboardInterrupt:
            # Ctrl-C: the adapter's threads may have answered ahead of this loop (or before the last of them
            # was even started); what they finished is handed on (and so journaled) before the interrupt
            # goes up, however far behind the loop was.
            while True:
                try:
                    got = self.results.get_nowait()
                except queue.Empty:
                    raise KeyboardInterrupt from None
                self.take(*got)

    def take(self, index: int, reply: Any, logs: str) -> None:
        if index not in self.recorded:
            case_id, t0 = self.started[index]
            # The reply is plain data already (output_to_plain makes fresh containers of exact types),
            # checked like a worker's reply.
            self.record(index, reply_row(case_id, reply, time.perf_counter() - t0) | {"logs": logs})

    def stop(self, concurrency: int) -> None:
        for _ in range(concurrency + len(self.suite)):
            self.jobs.put(None)


def run_in_process(spec: AdapterSpec, suite: Suite, *, concurrency: int, timeout: float, done: Done) -> None:
    run = _ThreadRun(_build(spec), suite, timeout=timeout, done=done)
    try:
        with _adapter_output_captured():
            run.go(concurrency)
    finally:
        run.stop(concurrency)
