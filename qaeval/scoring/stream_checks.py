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


def keep_open(user: Any, on: bool) -> None:
    """Tell a process-backed judge or checks runner (``keep_open``) to keep its process between calls while
    the stream runs, and to stop it after each call again afterwards."""
    if user is not None and type(user).__module__.startswith("qaeval.boundary.") and hasattr(type(user), "keep_open"):
        user.keep_open = on
        if not on:
            user.close()


def sample_digest(sample: Any) -> str:
    """The digest the registered checks' rows are kept under: of the sample's whole JSON content."""
    text = json.dumps(sample, sort_keys=True, ensure_ascii=False, allow_nan=True, default=repr)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class ChecksLane:
    """The registered checks and metrics' side of a ``Stream``: one thread, the plan's order, one output
    at a time once its verdict is in. ``rows`` maps a sample's digest to the rows its checks gave, one
    entry each time it was asked (two trials with equal outputs ask twice, as scoring would)."""

    def __init__(
        self, stream: Any, runner: Any, sample_of: Callable[[GoldenCase, dict[str, Any], JudgeMemo], Any]
    ) -> None:
        self.stream, self.runner, self.sample_of = stream, runner, sample_of
        self.rows: dict[str, list[list[dict[str, Any]]]] = {}
        self.lock = threading.Lock()  # the runner is asked by one caller at a time
        self.position = 0
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
        judge = self.stream.judge
        for start, end in self.stream.planned():
            for position in range(start, end):
                got = self.stream.item(position)
                if got is None:
                    return
                _, case, row = got
                pair = judge.request(case, row)
                key = pair[0] if pair is not None else None
                if key is not None and not self.stream.wait(partial(judge.has, key)):
                    return
                with self.stream.cond:
                    memo = {key: self.stream.memo[key]} if key is not None and key in self.stream.memo else {}
                sample = self.sample_of(case, row, memo)
                if sample is not None:  # asked once per output, as scoring would (not once per content)
                    with self.lock:
                        rows = self.runner.score([(case.id, sample)])
                        self.rows.setdefault(sample_digest(sample), []).append(rows)
                with self.stream.cond:
                    self.position = position + 1
                    self.stream.cond.notify_all()

    def caught_up(self) -> bool:
        """(Holding the stream's condition.) Whether every output planned so far is checked."""
        return self.broken is not None or self.position >= len(self.stream.plan_order)

    def join(self) -> None:
        self._thread.join()
        keep_open(self.runner, False)

    def abandon(self) -> None:
        keep_open(self.runner, False)


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
