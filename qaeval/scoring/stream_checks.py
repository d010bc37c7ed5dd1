"""The registered checks and metrics' side of a run that streams (``qaeval.scoring.stream``).

``ChecksLane`` asks the runner for each output in the plan's order, once its verdict is in, and keeps the
rows under a digest of the sample it sent; ``StreamedChecks`` is the runner scoring is then given: it
finds those rows by the digest of the sample scoring builds, and asks for any other sample itself.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from qaeval.data.cases import GoldenCase
from qaeval.scoring.judge import JudgeMemo


def keep_open(user: Any, on: bool, *, stopped: bool = False) -> None:
    """Tell a process-backed judge or checks runner (``keep_open``) to keep its process between calls while
    the stream runs, and to stop it after each call again afterwards; ``stopped`` (the run was
    interrupted): stop it for good, so a lane still finishing a call cannot start another process."""
    if user is not None and type(user).__module__.startswith("qaeval.host.") and hasattr(type(user), "keep_open"):
        user.keep_open = on
        if stopped:
            user.stopped = True
        if not on:
            user.close()


def sample_digest(sample: Any) -> str:
    """The digest the registered checks' rows are kept under: of the sample's whole JSON content."""
    text = json.dumps(sample, sort_keys=True, ensure_ascii=False, allow_nan=True, default=repr)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


BATCH = 64  # outputs whose samples are computed together (the layers' frames cost the same for one or many)


class ChecksLane:
    """The registered checks and metrics' side of a ``Stream``: one thread, the plan's order, one output
    at a time once its verdict is in. ``rows`` maps a sample's digest to the rows its checks gave, one
    entry each time it was asked (two trials with equal outputs ask twice, as scoring would)."""

    def __init__(
        self, stream: Any, runner: Any, sample_of: Callable[[list[tuple[GoldenCase, dict[str, Any]]], JudgeMemo], Any]
    ) -> None:
        self.stream, self.runner, self.sample_of = stream, runner, sample_of
        self.rows: dict[str, list[list[dict[str, Any]]]] = {}
        self.lock = threading.Lock()  # the runner is asked by one caller at a time
        self.position, self.trial = 0, 0
        self.broken: BaseException | None = None
        keep_open(runner, True)
        self._thread = threading.Thread(target=self._guarded, daemon=True, name="qaeval-checks")
        self._thread.start()

    def _guarded(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # noqa: BLE001  (a lane that fails leaves its work to scoring)
            with self.stream.cond:
                self.broken = exc
                self.stream.cond.notify_all()

    def _run(self) -> None:
        n = len(self.stream.suite)
        for start, end in self.stream.planned():
            position = start
            while position < end:
                batch = self._batch(position, end)
                if batch is None:
                    return
                items = [(case, row) for _, case, row, _ in batch]
                with self.stream.cond:
                    memo = {key: self.stream.memo[key] for *_, key in batch if key is not None}
                samples = self.sample_of(items, memo)
                for (place, case, _, _), sample in zip(batch, samples or ()):
                    if self.stream.stopped:
                        return
                    if place // n != self.trial and hasattr(type(self.runner), "new_trial"):
                        self.runner.new_trial()  # cases lost in a row are counted within a trial, as scoring does
                    self.trial = place // n
                    with self.lock:  # asked once per output, as scoring would (not once per content)
                        rows = self.runner.score([(case.id, sample)])
                        self.rows.setdefault(sample_digest(sample), []).append(rows)
                position += len(batch)
                with self.stream.cond:
                    self.position = position
                    self.stream.cond.notify_all()

    def _batch(self, position: int, end: int) -> list[tuple[int, Any, dict[str, Any], Any]] | None:
        """The next plan positions to check: the one at ``position`` once it has arrived with its verdict,
        then (without waiting) the ones after it that have too, up to ``BATCH``, each case once. Each is
        (place, case, output, its request's key or None); None when the stream was stopped."""
        judge, ids = self.stream.judge, set()
        batch: list[tuple[int, Any, dict[str, Any], Any]] = []
        while position + len(batch) < end and len(batch) < BATCH:
            place = self.stream.plan_order[position + len(batch)]
            if not batch:
                if not self.stream.wait(partial(self._ready, place)):
                    return None
            else:
                with self.stream.cond:
                    if not self._ready(place):
                        break
            with self.stream.cond:
                case, row = self.stream.items[place]
                key = judge.keys.get(place)
            if case.id in ids:
                break
            batch.append((place, case, row, key))
            ids.add(case.id)
        return batch

    def _ready(self, place: int) -> bool:
        """(Holding the stream's condition.) Whether the output at ``place`` has arrived and been judged."""
        return place in self.stream.items and self.stream.judge.judged(place)

    def caught_up(self) -> bool:
        """(Holding the stream's condition.) Whether every output planned so far is checked."""
        return self.broken is not None or self.position >= len(self.stream.plan_order)

    def join(self) -> None:
        self._thread.join()
        keep_open(self.runner, False)

    def abandon(self) -> None:
        keep_open(self.runner, False, stopped=True)


class StreamedChecks:
    """The runner scoring is given when checks streamed: the rows a sample got while the system answered,
    found by the sample's digest (each used once); any other sample is asked for now. ``found`` and
    ``asked`` count them."""

    def __init__(self, runner: Any, lane: ChecksLane | None, stream: Any | None = None) -> None:
        self.runner, self.lane, self.stream = runner, lane, stream
        self.registered = runner.registered
        self.found = self.asked = 0

    def score(self, samples: Sequence[tuple[str, Any]]) -> list[dict[str, Any]]:
        if self.stream is not None:
            self.stream.drain()
        kept = self.lane.rows if self.lane is not None else {}
        rows: list[dict[str, Any]] = []
        missing: list[tuple[int, tuple[str, Any]]] = []
        parts: list[list[dict[str, Any]]] = []
        for i, (cid, sample) in enumerate(samples):
            queued = kept.get(sample_digest(sample))
            got = queued.pop(0) if queued else None  # each streamed answer is used once
            if got is not None and all(r.get("case_id") == cid for r in got):
                parts.append(got)
                self.found += 1
            else:
                parts.append([])
                missing.append((i, (cid, sample)))
        if missing:
            self.asked += len(missing)
            lock = self.lane.lock if self.lane is not None else contextlib.nullcontext()
            with lock:
                fresh = self.runner.score([s for _, s in missing])
            by_case: dict[str, list[dict[str, Any]]] = {}
            for r in fresh:
                by_case.setdefault(r["case_id"], []).append(r)
            for i, (cid, _) in missing:
                parts[i] = by_case.pop(cid, [])
        for part in parts:
            rows += part
        return rows
