"""Driving a system adapter over a suite: ``run_suite`` asks it for every case and returns one row per
case, in suite order. With isolation "process" (the default) ``ProcessPool`` runs ``concurrency`` fresh
worker interpreters (``qaeval.worker.serve``), each sent only what the system may see and replaced when
it hangs, exits, crashes or breaks the protocol (docs/guides/boundary.md); with an ``executor`` the calls
go through ``qaeval.system.remote``; with isolation "none" through ``qaeval.system.inprocess``.

Not a pool library: those hand workers the parent's ``__main__``, unpickle what workers send back, and
break the whole pool, or lose a task, when one worker dies.
"""

from __future__ import annotations

import collections
import contextlib
import math
import select
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any

import pandas as pd

from qaeval.core.errors import UsageError
from qaeval.core.frames import frame
from qaeval.core.settings import RunSettings
from qaeval.data.cases import GoldenCase, Suite
from qaeval.system.calls import USER_TEXT_LIMIT, AdapterSpec, Done, adapter_spec, reply_row, start_worker, worker_env
from qaeval.system.contract import OUTPUT_SCHEMA, Payload, make_payload, output_row
from qaeval.system.inprocess import run_in_process
from qaeval.system.remote import run_on_executor
from qaeval.worker.hardening import harness_guard
from qaeval.worker.messages import MessageError, encode_case, parse
from qaeval.worker.plugins import progress_bar
from qaeval.worker.process import UserProcess, stopped_because

STOP_GRACE = 1.0
# A busy worker is handed its next case before it answers (one case queued in its socket), so it never
# waits for this process to read a reply and send more. Only for a message of at most PREFETCH_BYTES and
# a quarter of the socket's send buffer (Channel.room), so that send never blocks.
PREFETCH_BYTES = 65_536
# How often the loop asks whether a worker's process has ended: one whose socket a descendant holds open.
EXIT_CHECK = 0.05


class _Worker:
    __slots__ = ("proc", "state", "index", "case", "case_id", "opaque", "deadline", "sent_at", "answered", "queued")

    def __init__(self, proc: UserProcess, startup: float) -> None:
        self.proc = proc
        self.state = "starting"
        self.index, self.case_id, self.opaque = -1, "", ""
        self.case: GoldenCase | None = None
        self.deadline = time.monotonic() + startup
        self.sent_at = 0.0
        self.answered: tuple[int, str, str] | None = None  # (index, case id, opaque id) of its last answer
        self.queued: tuple[int, GoldenCase, str] | None = None  # (index, case, opaque id) sent behind its case

    def fileno(self) -> int:
        return self.proc.fileno()


class ProcessPool:
    """Worker processes for one run (see the module docstring)."""

    def __init__(self, spec: AdapterSpec, settings: RunSettings, *, data_dir: str | None) -> None:
        self.spec, self.size, self.settings = spec, settings.concurrency, settings
        self.env, self.sys_path = worker_env(data_dir)

    def run(self, suite: Suite, done: Done) -> None:
        _PoolRun(self, suite, done).go()  # under the harness guard ``run_suite`` holds


class _PoolRun:
    """One pass of a pool over a suite: hand cases to idle workers, read replies as they arrive, enforce
    every deadline, replace what failed."""

    def __init__(self, pool: ProcessPool, suite: Suite, done: Done) -> None:
        self.pool, self.settings, self.done = pool, pool.settings, done
        self.cases = collections.deque(enumerate(suite.cases))
        self.prepared: tuple[int, str, bytes] | None = None  # (index, opaque id, frame) of the next case
        self.undispatched = self.remaining = len(suite)
        self.workers: list[_Worker] = []
        self.ever_ready = False
        self.start_failures = 0
        self.last_start_error = ""
        self.poller = select.poll()  # Linux and macOS (Windows is not supported)
        self.polled: dict[int, _Worker] = {}  # the sockets registered with the poller, by descriptor
        self.next_exit_check = 0.0

    def go(self) -> None:
        try:
            for _ in range(min(self.pool.size, self.remaining)):
                self.start()
            while self.remaining > 0:
                self.dispatch()
                if not self.workers:  # no worker could be started: the cases left cannot be answered
                    if not self.ever_ready:  # not one ever built the adapter: refused, as a factory that raises
                        raise UsageError(
                            f"adapter {self.pool.spec.label} did not start: "
                            f"{self.last_start_error or 'no reason given'}"
                        )
                    self.fail_undispatched()
                    return
                self.wait()
                self.expire()
        finally:
            self.shutdown()

    def start(self) -> None:
        proc = start_worker(self.pool.spec, self.pool.env, self.pool.sys_path, self.settings)
        self.workers.append(_Worker(proc, self.settings.startup_timeout))

    def retire(self, w: _Worker, reason: str, *, hand_back: bool = False) -> None:
        """Stop a worker for good; its case (if it held one) fails with ``reason`` (or, ``hand_back``, is
        handed out again: what stopped the worker was not this case), the case queued behind it (never
        started) goes back to be handed out again; start another while there are cases left."""
        if w.queued is not None:
            index, case, _ = w.queued
            w.queued = None
            self.give_back(index, case)
        if w.state == "busy" and hand_back and w.case is not None:
            self.give_back(w.index, w.case)
            w.state = "idle"
        if w.state == "busy":
            self.finish(w, output_row(w.case_id, None, reason, time.perf_counter() - w.sent_at))
        elif w.state == "starting":
            self.start_failures += 1
            self.last_start_error = reason
        w.proc.end(0.5)
        self.workers.remove(w)
        if self.undispatched and self.start_failures <= 2 * self.pool.size:
            self.start()

    def shutdown(self) -> None:
        for w in list(self.workers):  # a reply that arrived with or after the last answer is still checked
            if w.state == "idle":
                self.read(w)
        deadline = time.monotonic() + STOP_GRACE
        for w in self.workers:
            with contextlib.suppress(MessageError):
                w.proc.channel.send({"stop": True}, time.monotonic() + 0.1)
        for w in self.workers:
            with contextlib.suppress(subprocess.TimeoutExpired):
                w.proc.popen.wait(max(0.0, deadline - time.monotonic()))
            w.proc.end(1.0)  # the group too: nothing the adapter started outlives the run

    def fail_undispatched(self) -> None:
        reason = f"the adapter could not start in a worker: {self.last_start_error or 'no reason given'}"
        for index, case in self.cases:
            self.done(index, output_row(case.id, None, reason, 0.0))
        self.cases.clear()

    def give_back(self, index: int, case: GoldenCase) -> None:
        self.cases.appendleft((index, case))
        self.undispatched += 1

    def dispatch(self) -> None:
        for w in self.workers:
            if not self.undispatched:
                return
            if w.state == "idle":
                index, case = self.cases[0]
                opaque, frame = self.next_frame()
                self.take()
                self.begin(w, index, case, opaque)
                self.send(w, frame, w.deadline)
            elif w.state == "busy" and w.queued is None:
                index, case = self.cases[0]
                opaque, frame = self.next_frame()
                if len(frame) > min(PREFETCH_BYTES, w.proc.channel.room()):
                    continue
                self.take()
                w.queued = (index, case, opaque)
                self.send(w, frame, w.deadline)

    def next_frame(self) -> tuple[str, bytes]:
        """(opaque id, frame) of the next case to hand out, made once however often it is looked at."""
        index, case = self.cases[0]
        if self.prepared is None or self.prepared[0] != index:
            payload: Payload = make_payload(case)
            self.prepared = (index, payload[0], encode_case(payload))
        return self.prepared[1], self.prepared[2]

    def take(self) -> None:
        self.cases.popleft()
        self.prepared = None
        self.undispatched -= 1

    def send(self, w: _Worker, frame: bytes, deadline: float) -> None:
        with contextlib.suppress(MessageError):  # a worker that has gone or stopped reading: see expire()
            w.proc.channel.send_message(frame, deadline)

    def begin(self, w: _Worker, index: int, case: GoldenCase, opaque: str) -> None:
        """The worker is now on this case: its clock and its deadline start (for a queued case: when this
        process read the reply before it, the worker having turned to it when it sent that reply)."""
        w.index, w.case, w.case_id, w.opaque = index, case, case.id, opaque
        w.state, w.sent_at = "busy", time.perf_counter()
        w.deadline = time.monotonic() + self.settings.timeout

    def finish(self, w: _Worker, row: dict[str, Any]) -> None:
        self.done(w.index, row)
        self.remaining -= 1
        w.answered = (w.index, w.case_id, w.opaque)
        w.state, w.index = "idle", -1
        if w.queued is not None:
            index, case, opaque = w.queued
            w.queued = None
            self.begin(w, index, case, opaque)

    def wait(self) -> None:
        now = time.monotonic()
        deadlines = [w.deadline for w in self.workers if w.state in ("starting", "busy")]
        timeout = min(0.5, max(0.0, min(deadlines) - now)) if deadlines else 0.5
        for w in self.readable(timeout):
            if w in self.workers:
                self.read(w)

    def readable(self, timeout: float) -> list[_Worker]:
        """The workers with something to read (a frame, or their end closed) within ``timeout`` seconds.
        One ``poll`` object for the run, its sockets registered again only when the workers change: a
        run waits thousands of times, and a selector made for each wait would cost each of them."""
        current = {fd: w for w in self.workers if (fd := w.fileno()) >= 0}
        if current != self.polled:  # a worker came or went (compared by identity: a new one may reuse an fd)
            for fd in self.polled:
                self.poller.unregister(fd)
            for fd in current:
                self.poller.register(fd, select.POLLIN | select.POLLPRI)
            self.polled = current
        return [current[fd] for fd, _ in self.poller.poll(math.ceil(timeout * 1000))]

    def read(self, w: _Worker) -> None:
        try:
            frames = w.proc.channel.pump()
        except MessageError as exc:
            self.broken(w, str(exc), closed=exc.closed)
            return
        for raw in frames:
            try:
                message = parse(raw, what="the worker")
            except MessageError as exc:
                self.retire(w, f"{exc} (it was stopped)")
                return
            self.handle(w, message)
            if w not in self.workers:
                return
        if w.proc.channel.closed and w in self.workers:
            self.broken(w, "closed its end", closed=True)

    def broken(self, w: _Worker, reason: str, *, closed: bool) -> None:
        """The worker broke the framing, or went away: its socket closed, or its process ended (a
        descendant may hold the socket open). ``process.stopped_because`` says which."""
        self.retire(w, stopped_because(w.proc, reason, closed=closed, starting=w.state == "starting"))

    def handle(self, w: _Worker, message: Any) -> None:
        if w.state == "starting":
            self.on_setup_reply(w, message)
            return
        answers = message.get("id") if isinstance(message, dict) else None
        if w.state == "busy" and answers == w.opaque:
            self.finish(w, reply_row(w.case_id, message, time.perf_counter() - w.sent_at, USER_TEXT_LIMIT))
            return
        if w.answered is not None and answers == w.answered[2]:  # a second reply to a case it already answered
            index, case_id, _ = w.answered
            self.done(index, output_row(case_id, None, "its worker sent a second reply for it (it was stopped)", 0.0))
            self.retire(w, "its worker sent a second reply for the case before (it was stopped)", hand_back=True)
            return
        why = "a reply for a case it was not asked" if w.state == "busy" else "a reply nobody asked for"
        self.retire(w, f"its worker sent {why} (it was stopped)")

    def on_setup_reply(self, w: _Worker, message: Any) -> None:
        if isinstance(message, dict) and message.get("ready") is True:
            w.state = "idle"
            w.proc.started()
            self.ever_ready = True
            return
        error = message.get("init_error") if isinstance(message, dict) else None
        error = (
            error[:USER_TEXT_LIMIT] if isinstance(error, str) and error else "the worker could not build the adapter"
        )
        if not self.ever_ready:
            usage = isinstance(message, dict) and message.get("usage") is True
            raise UsageError(error if usage else f"adapter {self.pool.spec.label}: {error}")
        self.retire(w, error)

    def expire(self) -> None:
        now = time.monotonic()
        for w in [w for w in self.workers if w.state in ("starting", "busy") and now >= w.deadline]:
            if w.state == "busy":
                self.retire(w, f"timed out after {self.settings.timeout:g} s (its worker was stopped and replaced)")
            elif not self.ever_ready:
                raise UsageError(
                    f"adapter {self.pool.spec.label} did not start: its factory had not returned "
                    f"after {self.settings.startup_timeout:g} s (--startup-timeout), so its worker was stopped"
                )
            else:
                self.retire(w, f"a replacement worker did not start within {self.settings.startup_timeout:g} s")
        if now < self.next_exit_check:  # a worker that exits closes its socket, which wakes the wait anyway
            return
        self.next_exit_check = now + EXIT_CHECK
        for w in [w for w in self.workers if w.proc.popen.poll() is not None]:
            self.read(w)  # what it sent before it went
            if w in self.workers:
                self.broken(w, "exited", closed=True)


def run_suite(
    suite: Suite,
    adapter: Any,
    settings: RunSettings | None = None,
    *,
    data_dir: str | None = None,
    on_output: Callable[[int, dict[str, Any]], None] | None = None,
) -> pd.DataFrame:
    """Ask the adapter for every case of the suite.

    ``adapter`` is a ``module:factory`` name, a zero-argument factory or an adapter object. ``settings``
    says how (``qaeval.core.settings.RunSettings``, under the parameter table's names): a worker that has
    not built the adapter within ``startup_timeout`` seconds is stopped (a usage error when none ever
    started); a case past ``timeout`` fails; a reply over ``max_reply_mb`` stops its worker and fails its
    case. With ``isolation`` process the harness guard (``qaeval.worker.hardening.harness_guard``) is
    held for the call, this being where user code runs out of process. The frame it returns has one row
    per case, in suite order:

    | column | what it holds |
    | --- | --- |
    | `case_id` | readable case id (the adapter only ever saw an opaque one) |
    | `answer` | answer text ("" on abstention or error) |
    | `citations` | list of {source_id, claim} |
    | `retrieved_ids` | list of source ids, best first |
    | `passages` | list of {id, text, title}: the system's own passages |
    | `abstained` | bool |
    | `model_was_called` | bool |
    | `prompt_to_model` | str or None |
    | `computed_aggregate` | number, str or None |
    | `error` | None, or why the case failed: raised, exited, crashed, timed out, malformed |
    | `latency_s` | seconds from handing the case over (for a case queued behind another: from reading the reply before it) to having its answer |
    | `logs` | the last characters the adapter printed while answering this case |
    | `output_fingerprint` | hash of answer, citations, abstention and error (what a labeller saw) |

    Args:
        suite: The golden cases.
        adapter: A ``module:factory`` name, a zero-argument factory or an adapter object.
        settings: How the system is asked: ``timeout``, ``startup_timeout``, ``max_reply_mb``,
            ``concurrency``, ``isolation`` (``process``: workers that never see the labels; ``none``: this
            process), ``executor`` (a ``concurrent.futures.Executor`` to run the calls on instead of local
            workers) and ``show_progress`` (default: ``RunSettings()``, the table's defaults).
        data_dir: The data folder, hidden from the workers (default: the suite's root).
        on_output: Called as ``on_output(index, row)`` with each row as it arrives (the index is the
            case's place in the suite), on the thread that called ``run_suite``; again with a later
            row for the same case (a failure found after it answered), which replaces the first.

    Returns:
        The outputs frame, one row per case (columns above).

    Raises:
        UsageError: An adapter that cannot be imported or built, or an executor given by its address
            (the verbs connect to it; give ``run_suite`` the executor) (exit 64).
    """
    settings = settings if settings is not None else RunSettings()
    executor = _the_executor(settings.executor)
    spec = adapter_spec(adapter, ship=settings.isolation == "process", corpus=suite.corpus)
    rows: list[dict[str, Any] | None] = [None] * len(suite)
    guard = harness_guard() if settings.isolation == "process" else contextlib.nullcontext()
    with guard, progress_bar(len(suite), desc="cases", enabled=settings.show_progress) as bar:

        def done(index: int, row: dict[str, Any]) -> None:
            if rows[index] is None:
                bar.update()
            rows[index] = row  # a later row for the same case is a failure found after it was answered
            if on_output is not None:
                on_output(index, row)

        _ask_every_case(spec, suite, settings, executor, data_dir, done)
    missing = [c.id for c, r in zip(suite.cases, rows) if r is None]
    if missing:  # pragma: no cover  (every path above answers every case)
        raise RuntimeError(f"no result for {len(missing)} case(s), first {missing[0]}")
    return frame(rows, OUTPUT_SCHEMA)  # type: ignore[arg-type]  # no row is None past the check above


def _the_executor(executor: str | Executor | None) -> Executor | None:
    """The executor given, if any; never its address: the verbs are the ones that connect to one."""
    if isinstance(executor, str):
        raise UsageError(
            f"run_suite takes the executor itself, not its address {executor!r}: connect to it first "
            "(qaeval.system.remote.executor_from_url)"
        )
    return executor


def _ask_every_case(
    spec: AdapterSpec, suite: Suite, settings: RunSettings, executor: Executor | None, data_dir: str | None, done: Done
) -> None:
    """Hand every case to the system where the settings say: an executor, worker processes, or this process."""
    if executor is not None:
        run_on_executor(executor, spec, suite, settings, done=done)
    elif settings.isolation == "process":
        ProcessPool(spec, settings, data_dir=data_dir if data_dir is not None else suite.root).run(suite, done)
    else:
        run_in_process(spec, suite, concurrency=settings.concurrency, timeout=settings.timeout, done=done)
