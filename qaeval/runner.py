"""Driving a system adapter over a suite, one case at a time, with every fault contained.

An adapter that raises, runs past the per-case timeout or returns something malformed yields a failed
row with the reason in ``error``; the run goes on with the next case.
"""

from __future__ import annotations

import hashlib
import json
import queue
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import pandas as pd

from qaeval.boundary import CaseView, SUTOutput, make_view, output_problems
from qaeval.cases import Suite
from qaeval.plugins import progress

DEFAULT_TIMEOUT = 60.0

OUTPUT_COLUMNS = [
    "case_id", "answer", "citations", "retrieved_ids", "abstained", "model_was_called",
    "prompt_to_model", "computed_aggregate", "error", "latency_s", "output_fingerprint",
]


def output_fingerprint(answer: str, citations: list[dict[str, str]], abstained: bool, error: str | None) -> str:
    """A short hash of what a person judging this output reads: answer, citations, abstention, error."""
    canon = json.dumps([answer, citations, abstained, error], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(canon.encode()).hexdigest()[:16]


class _Timeout(BaseException):
    """Raised into an adapter that overran. BaseException, so an adapter's ``except Exception`` does
    not swallow it."""


class _AlarmTimer:
    """Per-case timeout by SIGALRM: used on POSIX in the main thread. It interrupts the adapter itself
    (including blocking sleeps and socket reads) instead of abandoning a thread, and costs microseconds."""

    @staticmethod
    def usable() -> bool:
        return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()

    def _fire(self, signum: int, frame: Any) -> None:
        raise _Timeout

    def call(self, fn: Callable[[Any], Any], arg: Any, timeout: float) -> Any:
        previous = signal.signal(signal.SIGALRM, self._fire)
        signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            return fn(arg)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)


class _Worker:
    """One daemon thread that runs calls handed to it. A call that overruns its timeout is abandoned
    together with its thread (Python cannot kill a thread); the runner then starts a fresh worker."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        threading.Thread(target=self._loop, name="qaeval-adapter", daemon=True).start()

    def _loop(self) -> None:
        while True:
            fn, arg, box, done = self._jobs.get()
            try:
                box.append((True, fn(arg)))
            except BaseException as exc:  # noqa: BLE001  (anything the adapter raises is its failure)
                box.append((False, exc))
            done.set()

    def call(self, fn: Callable[[Any], Any], arg: Any, timeout: float) -> Any:
        box: list[tuple[bool, Any]] = []
        done = threading.Event()
        self._jobs.put((fn, arg, box, done))
        if not done.wait(timeout):
            raise _Timeout
        ok, value = box[0]
        if not ok:
            raise value
        return value


def _row(case_id: str, output: SUTOutput | None, error: str | None, latency: float) -> dict[str, Any]:
    row = _fields(case_id, output, error, latency)
    row["output_fingerprint"] = output_fingerprint(row["answer"], row["citations"], row["abstained"], error)
    return row


def _fields(case_id: str, output: SUTOutput | None, error: str | None, latency: float) -> dict[str, Any]:
    if output is None:
        return dict(case_id=case_id, answer="", citations=[], retrieved_ids=[], abstained=False,
                    model_was_called=False, prompt_to_model=None, computed_aggregate=None,
                    error=error, latency_s=latency)
    return dict(
        case_id=case_id, answer=output.answer,
        citations=[{"snippet_id": c.snippet_id, "claim": c.claim} for c in output.citations],
        retrieved_ids=list(output.retrieved_ids), abstained=output.abstained,
        model_was_called=output.model_was_called, prompt_to_model=output.prompt_to_model,
        computed_aggregate=output.computed_aggregate, error=None, latency_s=latency,
    )


def run_suite(suite: Suite, adapter: Any, *, timeout: float | None = DEFAULT_TIMEOUT,
              show_progress: bool | None = None) -> pd.DataFrame:
    """Ask the adapter for every case of the suite.

    Returns one row per case, in suite order:

    ==================  ==================================================================
    case_id             readable case id (the adapter only ever saw an opaque one)
    answer              answer text ("" on abstention or error)
    citations           list of {snippet_id, claim}
    retrieved_ids       list of snippet ids, best first
    abstained           bool
    model_was_called    bool
    prompt_to_model     str or None
    computed_aggregate  number, str or None
    error               None, or why the case failed: raised, timed out, malformed output
    latency_s           seconds the adapter took
    output_fingerprint  hash of answer, citations, abstention and error (what a labeller saw)
    ==================  ==================================================================

    ``timeout`` is per case in seconds; None runs the adapter in this thread with no limit.
    """
    answer = getattr(adapter, "answer", None)
    if not callable(answer):
        from qaeval.errors import UsageError

        raise UsageError(f"adapter {type(adapter).__name__} has no answer(case) method")
    worker: _AlarmTimer | _Worker | None = None
    if timeout is not None:
        worker = _AlarmTimer() if _AlarmTimer.usable() else _Worker()
    rows = []
    for case in progress(suite.cases, total=len(suite), desc="cases", enabled=show_progress):
        view: CaseView = make_view(case)
        start = time.perf_counter()
        try:
            output = answer(view) if worker is None else worker.call(answer, view, timeout)
        except _Timeout:
            if isinstance(worker, _Worker):
                worker = _Worker()  # the old thread is stuck in the adapter; leave it behind
            rows.append(_row(case.id, None, f"timed out after {timeout:g} s", time.perf_counter() - start))
            continue
        except Exception as exc:  # noqa: BLE001
            rows.append(_row(case.id, None, f"adapter raised {type(exc).__name__}: {exc}",
                             time.perf_counter() - start))
            continue
        latency = time.perf_counter() - start
        problems = output_problems(output)
        if problems:
            rows.append(_row(case.id, None, "malformed output: " + "; ".join(problems), latency))
        else:
            rows.append(_row(case.id, output, None, latency))
    return pd.DataFrame(rows, columns=OUTPUT_COLUMNS)
