"""A change to the process that overlapping runs share (runs in two threads of a notebook, or nested).

The first run to begin makes it, the last to end undoes it, whichever of them ends first: the harness
guard (``qaeval.worker.hardening``), the standard streams routed for an in-process run
(``qaeval.system.inprocess``) and the garbage collector's thresholds (``qaeval.commands.pipeline``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


class WhileAnyRun:
    """``begin()`` when the first run begins (what it returns is kept), ``end(kept)`` when the last run
    ends; both under one lock, held to the end, so a run that begins meanwhile finds the change made or
    undone, never half of either."""

    def __init__(self, begin: Callable[[], Any], end: Callable[[Any], None]) -> None:
        self._begin, self._end = begin, end
        self._lock = threading.Lock()
        self._runs = 0
        self._kept: Any = None

    @contextmanager
    def __call__(self) -> Iterator[None]:
        with self._lock:
            if self._runs == 0:
                self._kept = self._begin()
            self._runs += 1
        try:
            yield
        finally:
            with self._lock:
                self._runs -= 1
                if self._runs == 0:
                    kept, self._kept = self._kept, None
                    self._end(kept)
