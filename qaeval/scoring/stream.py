"""A run's outputs scored as they arrive: the judge's lanes and the scoring lane, overlapped with the system.

A run tells its ``Stream`` the (case, trial) places it will ask for, in order (``plan``), which cases each
trial holds (``declare``), and hands it every output as the pool collects it (``put``). Meanwhile:

* **the judge** (``JudgeLanes``), each output's request built once (``request_for``). A judge whose class
  says ``thread_safe = True`` takes one request a call on as many threads as its concurrency, as outputs
  arrive. Any other is asked on one thread in the plan's order, ``CHUNK`` requests a call and never two
  trials' together, so which requests share a call (and what a failing call costs) is fixed by the plan,
  not by timing. Responses go into the run's judge memo, keyed by the request's whole content: an equal
  request (the same output in another trial, or one a journal gave back) is not sent again.
* **the scoring lane** (``qaeval.scoring.lane``): every output once, in the plan's order, once its
  verdict is in; the trials' results are built from what it kept (``result``).
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import Any

from qaeval.data.cases import GoldenCase, Suite
from qaeval.scoring.checks import judged_fixture
from qaeval.scoring.journal import key_digest
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
from qaeval.scoring.lane import ScoringLane, keep_open
from qaeval.scoring.rubric import Rubric
from qaeval.worker.plugins import progress_bar

CHUNK = 16  # plan places per call of a judge that is asked on one thread
_STOP = object()


def judge_lanes(judge: Any) -> int:
    """How many threads judge at once, each output as it arrives: a judge's ``concurrency`` when its class
    says ``thread_safe = True``, else 0 (it is asked on one thread, in the plan's order)."""
    try:
        if getattr(type(judge), "thread_safe", False) is not True:
            return 0
        concurrency = getattr(judge, "concurrency", 1)
    except Exception:  # noqa: BLE001  (a judge's attribute that raises: asked in the plan's order)
        return 0
    return int.__int__(concurrency) if type(concurrency) is int and 1 <= int.__int__(concurrency) <= 256 else 1


def request_for(suite: Suite, rubric: Rubric, case: GoldenCase, row: dict[str, Any]) -> JudgeRequest | None:
    """The judge's request for one output of ``case``, or None when it is not judged (abstained, failed):
    the one place a request is built."""
    if not is_judged(row):
        return None
    return judge_request(row, case.question, case.gold_answer, judged_fixture(case, row, suite.corpus), rubric)


class Stream:
    """The run's outputs as they arrive, in the plan's order, and the lanes that score them."""

    def __init__(
        self,
        judge: JudgeClient,
        suite: Suite,
        *,
        k: int,
        memo: JudgeMemo | None = None,
        restored: dict[str, Any] | None = None,
        on_judged: Callable[[tuple[Any, ...], JudgeRequest, Any], None] | None = None,
        show_progress: bool | None = None,
        checks: Any = None,
    ) -> None:
        self.suite = suite
        self.cond = threading.Condition()
        self.plan_order: list[int] = []  # places, in the order the run asks for them
        self.batches: list[tuple[int, int]] = []  # (start, end) in plan_order of each plan() call
        self.items: dict[int, tuple[GoldenCase, dict[str, Any]]] = {}
        self.closed = self.stopped = False
        self.memo: JudgeMemo = memo if memo is not None else {}
        self.judge = JudgeLanes(self, judge, on_judged=on_judged, show_progress=show_progress, restored=restored)
        config = judge_config_of(judge)
        self.lane = ScoringLane(self, config=config, k=k, runner=checks)

    # ------------------------------------------------------------------ fed by the run

    def declare(self, trial: int, indices: Sequence[int]) -> None:
        """Trial ``trial`` holds the suite's cases at ``indices`` (its template is learnt from them)."""
        with self.cond:
            self.lane.declare(trial, indices)
            self.cond.notify_all()

    def plan(self, places: Sequence[int]) -> None:
        """The places the run is about to ask for (or restored), in the order it will read them."""
        with self.cond:
            start = len(self.plan_order)
            self.plan_order += list(places)
            self.batches.append((start, len(self.plan_order)))
            self.cond.notify_all()

    def put(self, place: int, case: GoldenCase, row: dict[str, Any]) -> None:
        """One output. A later one for the same place replaces it: a failure found after the answer."""
        with self.cond:
            again = place in self.items
            self.items[place] = (case, row)
            if again:
                self.lane.arrived_again(place)
            self.cond.notify_all()
        if again:
            self.judge.replaced(place, case, row)
        else:
            self.judge.arrived(place, case, row)

    # ------------------------------------------------------------------ read by the lanes

    def wait(self, ready: Callable[[], bool]) -> bool:
        """Wait (holding nothing) until ``ready()`` or the stream is stopped; whether it is ready."""
        with self.cond:
            self.cond.wait_for(lambda: self.stopped or ready())
            return not self.stopped

    def planned(self) -> Iterator[tuple[int, int]]:
        """Each plan() batch's (start, end) as it is planned, until the run is finished or stopped."""
        seen = 0
        while True:
            with self.cond:
                self.cond.wait_for(partial(self._more, seen))
                if self.stopped or seen >= len(self.batches):
                    return
                batch = self.batches[seen]
            yield batch
            seen += 1

    def _more(self, seen: int) -> bool:
        return self.stopped or self.closed or seen < len(self.batches)

    def item(self, position: int) -> tuple[int, GoldenCase, dict[str, Any]] | None:
        """The plan's ``position``-th place with its output, once it has arrived; None when stopped."""
        place = self.plan_order[position]
        if not self.wait(lambda: place in self.items):
            return None
        with self.cond:
            case, row = self.items[place]
        return place, case, row

    # ------------------------------------------------------------------ the run's side

    def drain(self) -> None:
        """Wait until everything planned so far is judged and scored (the lanes keep running)."""
        with self.cond:
            self.cond.wait_for(
                lambda: self.stopped or (self.judge.caught_up(len(self.plan_order)) and self.lane.caught_up())
            )
        self._raise_broken()

    def finish(self) -> None:
        """Nothing more will be planned: wait for the lanes to score everything, and stop them."""
        with self.cond:
            self.closed = True
            self.cond.notify_all()
        self.judge.join()
        self.lane.join()
        self._raise_broken()
        self.lane.rescore()

    def _raise_broken(self) -> None:
        """A lane that failed is qaeval's bug: it is raised on the run's thread, never hidden."""
        for lane in (self.judge, self.lane):
            if lane.broken is not None:
                raise RuntimeError(f"qaeval's {type(lane).__name__} failed: {lane.broken!r}") from lane.broken

    def abandon(self) -> None:
        """Stop without waiting (Ctrl-C): nothing more is sent; a call in flight ends on its own thread."""
        with self.cond:
            self.stopped = True
            self.cond.notify_all()
        self.judge.abandon()
        self.lane.abandon()

    def result(self, trial: int, meta: Any, bootstrap_seed: int, *, empty: bool = False) -> Any:
        """Trial ``trial`` scored (a ``RunResult``), from what the scoring lane kept; when it has no place,
        None (with ``empty``: the run of no case)."""
        return self.lane.trial_result(trial, meta, bootstrap_seed, empty=empty)

    @property
    def reused(self) -> int:
        """Verdicts a journal gave back that this run used instead of asking the judge."""
        return self.judge.reused


class JudgeLanes:
    """The judge's side of a ``Stream``: see the module's docstring. Anything a judge does wrong is
    contained as in scoring (``call_judge``)."""

    def __init__(
        self,
        stream: Stream,
        judge: JudgeClient,
        *,
        on_judged: Callable[[tuple[Any, ...], JudgeRequest, Any], None] | None,
        show_progress: bool | None,
        restored: dict[str, Any] | None = None,
    ) -> None:
        self.stream, self.judge, self.on_judged = stream, judge, on_judged
        self.restored = restored or {}  # a journal's verdicts by their request's digest
        self.reused = 0
        self.rubric = Rubric.load(judge_config_of(judge).prompt_version)
        self.asked: set[tuple[Any, ...]] = set(stream.memo)
        self.pending = 0  # threaded lanes: queued, not yet answered
        self.position = 0  # the ordered lane: plan positions done
        self.broken: BaseException | None = None  # a lane that failed: raised on the run's thread
        self.threads = judge_lanes(judge)
        self.ordered = self.threads == 0
        Pair = tuple[tuple[Any, ...], JudgeRequest]
        self.requests: dict[int, Pair | None] = {}  # place -> (its request's key, the request); None: not judged
        self._defers = callable(getattr(type(judge), "report_rejected", None))
        if self._defers:  # one warning for the run, not one per call (qaeval.judges.openai)
            judge.defer_warnings = True  # type: ignore[attr-defined]  # only the OpenAI judge has it: checked above
        keep_open(judge, True)
        self.sent = 0
        self._bar_cm = progress_bar(len(stream.suite), desc="judge calls", enabled=show_progress)
        self._bar = self._bar_cm.__enter__()
        self._queue: queue.Queue[Any] = queue.Queue()
        target = self._ordered if self.ordered else self._threaded
        self._workers = [
            threading.Thread(target=self._guarded, args=(target,), daemon=True, name=f"qaeval-judge-{n}")
            for n in range(self.threads or 1)
        ]
        for w in self._workers:
            w.start()

    def request(self, place: int, case: GoldenCase, row: dict[str, Any]) -> tuple[tuple[Any, ...], JudgeRequest] | None:
        """The request for the output at ``place`` (None: not judged), built once and kept in ``requests``."""
        req = request_for(self.stream.suite, self.rubric, case, row)
        pair = None if req is None else (request_key(req), req)
        with self.stream.cond:
            self.requests[place] = pair
            self.stream.cond.notify_all()
        return pair

    def _claim(self, key: tuple[Any, ...]) -> bool:
        """Whether this request is to be sent (the run has no response for its content, nor asked for one)."""
        found = self.restored.get(key_digest(key)) if self.restored else None
        with self.stream.cond:
            if key in self.asked:
                return False
            self.asked.add(key)
            if found is not None:  # the journal has it: used as already counted (this run spent nothing)
                self.stream.memo[key] = MemoEntry(found, uses=1)
                self.reused += 1
                self.stream.cond.notify_all()
                return False
            self.sent += 1
            if hasattr(self._bar, "total"):  # the judge's share grows as outputs arrive
                self._bar.total = self.sent
            return True

    def _answered(self, pairs: Sequence[tuple[tuple[Any, ...], JudgeRequest]], responses: Sequence[Any]) -> None:
        if self.stream.stopped:  # interrupted: what a call cut short says is not the judge's verdict
            return
        for (key, req), response in zip(pairs, responses):
            if self.on_judged is not None:
                self.on_judged(key, req, response)
        with self.stream.cond:
            for (key, _), response in zip(pairs, responses):
                self.stream.memo[key] = MemoEntry(response)
            self.stream.cond.notify_all()
        self._bar.update(len(pairs))

    def arrived(self, place: int, case: GoldenCase, row: dict[str, Any]) -> None:
        """A threaded judge is asked for an output as soon as it arrives (the ordered lane reads the plan)."""
        if self.ordered:
            return
        pair = self.request(place, case, row)
        if pair is None or not self._claim(pair[0]):
            return
        with self.stream.cond:
            self.pending += 1
        self._queue.put(pair)

    def replaced(self, place: int, case: GoldenCase, row: dict[str, Any]) -> None:
        """A later output for a place (a failure found after the answer, never judged): its request, if
        it has one after all, is judged now, on the caller's thread."""
        pair = self.request(place, case, row)
        if pair is not None and self._claim(pair[0]):
            self._answered([pair], call_judge(self.judge, [pair[1]]))

    def _threaded(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            self._answered([item], call_judge(self.judge, [item[1]]))
            with self.stream.cond:
                self.pending -= 1
                self.stream.cond.notify_all()

    def _ordered(self) -> None:
        """Judged requests in the plan's order, ``CHUNK`` a call, a trial's never with another's."""
        n, trial = len(self.stream.suite), -1
        pairs: list[tuple[tuple[Any, ...], JudgeRequest]] = []
        for start, end in self.stream.planned():
            for position in range(start, end):
                got = self.stream.item(position)
                if got is None:
                    return
                place, case, row = got
                if pairs and place // n != trial:
                    self._ask(pairs, position)
                    pairs = []
                trial = place // n
                pair = self.request(place, case, row)
                if pair is not None and self._claim(pair[0]):
                    pairs.append(pair)
                if len(pairs) == CHUNK or not pairs:
                    self._ask(pairs, position + 1)
                    pairs = []
            if pairs:  # what the run planned next may wait on these (adaptive trials)
                self._ask(pairs, end)
                pairs = []

    def _ask(self, pairs: list[tuple[tuple[Any, ...], JudgeRequest]], done: int) -> None:
        """Ask for ``pairs`` (if any); the plan's positions before ``done`` are then judged."""
        if pairs:
            self._answered(pairs, call_judge(self.judge, [req for _, req in pairs]))
        with self.stream.cond:
            self.position = done
            self.stream.cond.notify_all()

    def _guarded(self, target: Callable[[], None]) -> None:
        try:
            target()
        except BaseException as exc:  # noqa: BLE001  (a lane that fails leaves its work to scoring)
            with self.stream.cond:
                self.broken = exc
                self.stream.cond.notify_all()

    def caught_up(self, planned: int) -> bool:
        """(Holding the stream's condition.) Whether every output planned and arrived so far is judged."""
        if self.broken is not None:
            return True
        if self.ordered:
            return self.position >= planned
        return self.pending == 0 and len(self.stream.items) >= planned

    def judged(self, place: int) -> bool:
        """(Holding the stream's condition.) Whether the output at ``place`` has its verdict in the memo, or
        needs none, or will get none (the lane failed: ``Stream.drain`` and ``finish`` raise it)."""
        if self.broken is not None:
            return True
        if place not in self.requests:
            return False
        pair = self.requests[place]
        return pair is None or pair[0] in self.stream.memo

    def join(self) -> None:
        if not self.ordered:
            for _ in self._workers:
                self._queue.put(_STOP)
        for w in self._workers:
            w.join()
        self._end()

    def abandon(self) -> None:
        with contextlib.suppress(queue.Empty):
            while True:
                self._queue.get_nowait()
        for _ in self._workers:
            self._queue.put(_STOP)
        self._end()

    def _end(self) -> None:
        self._bar_cm.__exit__(None, None, None)
        keep_open(self.judge, False, stopped=self.stream.stopped)
        if self._defers:
            from qaeval.worker.plugins import contained

            self.judge.defer_warnings = False  # type: ignore[attr-defined]  # only the OpenAI judge has it: checked when set
            contained(self.judge.report_rejected, what="the judge")  # type: ignore[attr-defined]  # only the OpenAI judge has it: checked when set


@contextlib.contextmanager
def streaming(judge: JudgeClient, suite: Suite, **options: Any) -> Iterator[Stream]:
    """A ``Stream`` that is abandoned if the block raises (Ctrl-C included)."""
    stream = Stream(judge, suite, **options)
    try:
        yield stream
    except BaseException:
        stream.abandon()
        raise
