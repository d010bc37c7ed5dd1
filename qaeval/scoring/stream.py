"""The judge overlapped with the system: each output is judged as soon as it arrives.

``JudgeStream(judge, suite)`` is fed every output the pool collects (``submit(case, row)``, from the
pool's thread) and asks the judge for it on threads of its own while the system answers the next cases.
What it gets back goes into the run's judge memo (``qaeval.scoring.judge.score_with_judge``), keyed by the
request's whole content, so scoring the run afterwards, through the one scoring path, finds every verdict
already there and asks for nothing again. The deterministic layers are computed then too: they take
milliseconds a case, the judge and the system take the time.

Which judges stream (``judge_lanes``): one whose class says ``thread_safe = True`` (the OpenAI-compatible
judge, the slow one a real run has) takes one request per call on as many threads as its concurrency
(``--judge-concurrency``). Any other judge is asked once, for every request, when scoring runs after the
system has answered, as before: the offline judge takes microseconds a case, and a custom judge lives in
a process of its own for one call, chunked, with its own deadlines (``qaeval.boundary.clients``); calling
either from several threads, or in batches whose make-up depends on timing, would buy nothing or make
a misbehaving judge's outcome depend on timing. The stream then holds no thread and judges nothing.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

from qaeval.boundary.plugins import progress_bar
from qaeval.data.cases import GoldenCase, Suite
from qaeval.scoring.judge import (
    JudgeClient,
    JudgeMemo,
    JudgeRequest,
    MemoEntry,
    call_judge,
    is_judged,
    judge_config_of,
    judge_request,
    request_key,
)
from qaeval.scoring.rubric import Rubric

_STOP = object()


def judge_lanes(judge: Any) -> int:
    """How many threads stream ``judge``: its ``concurrency`` when its class says ``thread_safe = True``
    (the OpenAI-compatible judge), else 0 (it is asked once, at scoring)."""
    try:
        if getattr(type(judge), "thread_safe", False) is not True:
            return 0
        concurrency = getattr(judge, "concurrency", 1)
    except Exception:  # noqa: BLE001  (a judge's attribute that raises: it does not stream)
        return 0
    return int.__int__(concurrency) if type(concurrency) is int and 1 <= int.__int__(concurrency) <= 256 else 1


def request_for(suite: Suite, rubric: Rubric, case: GoldenCase, row: dict[str, Any]) -> JudgeRequest | None:
    """The request scoring will build for one output of ``case`` (``build_requests``, without its frames),
    or None when it is not judged (abstained, failed)."""
    from qaeval.scoring.evaluate import judged_fixture

    if not is_judged(row):
        return None
    return judge_request(row, case.question, case.gold_answer, judged_fixture(case, row, suite.corpus), rubric)


class JudgeStream:
    """Judges outputs on its own threads as they arrive; ``finish()`` waits for the last and returns the memo.

    ``on_judged(key, request, response)`` is called (on a judging thread) for each response, for the
    journal. Anything a judge does wrong is contained as in scoring (``call_judge``)."""

    def __init__(
        self,
        judge: JudgeClient,
        suite: Suite,
        *,
        memo: JudgeMemo | None = None,
        on_judged: Callable[[tuple[Any, ...], JudgeRequest, Any], None] | None = None,
        show_progress: bool | None = None,
    ) -> None:
        self.judge, self.suite, self.on_judged = judge, suite, on_judged
        self.rubric = Rubric.load(judge_config_of(judge).prompt_version)
        self.memo: JudgeMemo = memo if memo is not None else {}
        self._asked: set[tuple[Any, ...]] = set(self.memo)
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._pending = 0
        self._queue: queue.Queue[Any] = queue.Queue()
        self.threads = judge_lanes(judge)
        self._defers = callable(getattr(type(judge), "report_rejected", None))
        if self._defers:  # one warning for the run, not one per call (qaeval.judges.openai)
            judge.defer_warnings = True  # type: ignore[attr-defined]  # only the OpenAI judge has it: checked above
        self.sent = 0
        self._bar_cm = progress_bar(len(suite), desc="judge calls", enabled=show_progress)
        self._bar = self._bar_cm.__enter__()
        self._workers = [
            threading.Thread(target=self._work, daemon=True, name=f"qaeval-judge-stream-{n}")
            for n in range(self.threads)
        ]
        for w in self._workers:
            w.start()

    def submit(self, case: GoldenCase, row: dict[str, Any]) -> tuple[Any, ...] | None:
        """Queue the judging of one output, unless the run has (or is getting) a response for its content,
        or the judge does not stream. Returns the request's key, or None when nothing is queued."""
        if not self.threads:
            return None
        req = request_for(self.suite, self.rubric, case, row)
        if req is None:
            return None
        key = request_key(req)
        with self._lock:
            if key in self._asked:
                return key
            self._asked.add(key)
            self.sent += 1
            self._pending += 1
            if hasattr(self._bar, "total"):  # the judge's share grows as outputs arrive
                self._bar.total = self.sent
        self._queue.put((key, req))
        return key

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            key, req = item
            for response in call_judge(self.judge, [req]):
                if self.on_judged is not None:
                    self.on_judged(key, req, response)
                with self._lock:
                    self.memo[key] = MemoEntry(response)
                    self._pending -= 1
                    self._idle.notify_all()
                self._bar.update()

    def drain(self) -> JudgeMemo:
        """Wait until everything submitted so far is judged (the threads keep running); the memo."""
        with self._idle:
            self._idle.wait_for(lambda: self._pending == 0)
        return self.memo

    def finish(self) -> JudgeMemo:
        """Wait for every queued request to be judged; the memo then holds them all."""
        for _ in self._workers:
            self._queue.put(_STOP)
        for w in self._workers:
            w.join()
        self._bar_cm.__exit__(None, None, None)
        self._report()
        return self.memo

    def _report(self) -> None:
        if self._defers:
            from qaeval.boundary.plugins import contained

            self.judge.defer_warnings = False  # type: ignore[attr-defined]  # only the OpenAI judge has it: checked when set
            contained(self.judge.report_rejected, what="the judge")  # type: ignore[attr-defined]  # only the OpenAI judge has it: checked when set

    def abandon(self) -> None:
        """Stop without waiting (Ctrl-C): nothing queued is sent; a call in flight ends on its own thread."""
        with contextlib.suppress(queue.Empty):
            while True:
                self._queue.get_nowait()
        for _ in self._workers:
            self._queue.put(_STOP)
        self._bar_cm.__exit__(None, None, None)
        self._report()


@contextlib.contextmanager
def streaming(judge: JudgeClient, suite: Suite, **options: Any) -> Iterator[JudgeStream]:
    """A ``JudgeStream`` that is abandoned if the block raises (Ctrl-C included)."""
    stream = JudgeStream(judge, suite, **options)
    try:
        yield stream
    except BaseException:
        stream.abandon()
        raise
