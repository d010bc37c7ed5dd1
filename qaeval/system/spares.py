"""Spare workers: a run's worker interpreters started before its pool needs them, so that starting them
(a tenth of a second of one core each) overlaps work this process does on the other: loading the suite
(``spare_workers``, around the load), and for the command line, importing the rest of qaeval (``early``,
before pandas, half a second on one core while the other waits).

A spare starts and imports qaeval's side of the boundary, then waits for its setup, so no user code runs
in it until a pool sends one (after the data has been validated). A pool takes a spare only when the
spare's environment (``calls.worker_env``, which hides the data folder) and frame limit are its own.
Nothing here imports pandas.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import threading
from collections.abc import Iterator, Mapping

from qaeval.errors import UsageError
from qaeval.system.calls import spawn_worker, worker_env
from qaeval.system.process import DEFAULT_FRAME_LIMIT, UserProcess

SpareKey = tuple[tuple[tuple[str, str], ...], int]
# The spares of the innermost spare_workers block of this thread (a thread starts with none: a run on
# another thread never takes them, and the guard of the run that started them never sweeps its workers).
_SPARES: contextvars.ContextVar[list[tuple[SpareKey, UserProcess]] | None] = contextvars.ContextVar(
    "qaeval_spare_workers", default=None)
# The command line's (``early``), by the thread that started them: for that thread's first spare_workers
# block to adopt.
_EARLY: dict[int, list[tuple[SpareKey, UserProcess]]] = {}
_EARLY_LOCK = threading.Lock()


def spare_key(env: Mapping[str, str], frame_limit: int) -> SpareKey:
    return tuple(sorted(env.items())), frame_limit


def spare_limit() -> int:
    """At most this many spares: twice the cores, what can start while one core loads the suite."""
    return 2 * (os.cpu_count() or 1)


def _spawn(into: list[tuple[SpareKey, UserProcess]], count: int, env: dict[str, str], frame_limit: int) -> None:
    key = spare_key(env, frame_limit)
    with contextlib.suppress(UsageError):  # one that cannot start: fewer, and the pool starts its own
        while len(into) < count:
            into.append((key, spawn_worker(env, frame_limit)))  # listed at once: the block's end finds it


@contextlib.contextmanager
def spare_workers(count: int, data_dir: str | None, frame_limit: int = DEFAULT_FRAME_LIMIT) -> Iterator[None]:
    """Have ``count`` worker interpreters (at most ``spare_limit()``) start now, while this process loads
    the suite: first those ``early`` started for this environment and frame limit, then new ones. A pool
    started in the block, on this thread, takes them when their environment (``worker_env(data_dir)``)
    and frame limit are its own, and stops those it does not need once it has started its workers; the
    block's end stops any still left."""
    mine: list[tuple[SpareKey, UserProcess]] = []
    token = _SPARES.set(mine)
    try:
        env, _ = worker_env(data_dir)
        wanted = min(count, spare_limit())
        mine += _adopt(spare_key(env, frame_limit), wanted)
        _spawn(mine, wanted, env, frame_limit)
        yield
    finally:
        _SPARES.reset(token)
        stop_spares(mine)


@contextlib.contextmanager
def early(count: int, data_dir: str | None, frame_limit: int = DEFAULT_FRAME_LIMIT) -> Iterator[None]:
    """For the command line, before it imports what a run needs: start ``count`` spares (at most
    ``spare_limit()``) for the first ``spare_workers`` block on this thread to adopt, if their environment
    and frame limit are its own; that block stops those it cannot adopt (an environment changed in
    between). The end of this block stops any left (a command that ended up running no system)."""
    thread = threading.get_ident()
    started: list[tuple[SpareKey, UserProcess]] = []
    try:
        env, _ = worker_env(data_dir)
        with _EARLY_LOCK:
            _EARLY.setdefault(thread, started)
            mine = _EARLY[thread] is started
        if mine:  # (a second block on the same thread starts none)
            _spawn(started, min(count, spare_limit()), env, frame_limit)
        yield
    finally:
        with _EARLY_LOCK:
            if _EARLY.get(thread) is started:
                del _EARLY[thread]
        stop_spares(started)


def _adopt(key: SpareKey, count: int) -> list[tuple[SpareKey, UserProcess]]:
    """This thread's early spares for ``key`` (at most ``count``); the others are stopped, none left."""
    with _EARLY_LOCK:
        found = _EARLY.pop(threading.get_ident(), [])
        pending = list(found)
        found.clear()  # the early block's list: nothing left for its end to stop
    taken: list[tuple[SpareKey, UserProcess]] = []
    others: list[tuple[SpareKey, UserProcess]] = []
    for item in pending:
        (taken if item[0] == key and len(taken) < count else others).append(item)
    stop_spares(others)
    return taken


def stop_spares(spares: list[tuple[SpareKey, UserProcess]]) -> None:
    left = list(spares)
    spares.clear()
    for _, proc in left:
        proc.kill()
        proc.reap(1.0)
        proc.close()


def take_spare(env: Mapping[str, str], frame_limit: int) -> UserProcess | None:
    """A spare worker of this thread's block started for this environment and frame limit, if one is
    waiting and alive."""
    spares = _SPARES.get()
    key = spare_key(env, frame_limit)
    while spares:
        found = next((i for i, (k, _) in enumerate(spares) if k == key), None)
        if found is None:
            return None
        _, proc = spares.pop(found)
        if proc.popen.poll() is None:
            return proc
        proc.reap(0.5)  # it went before it was needed: this one is not taken
        proc.close()
    return None


def release_spares() -> None:
    """Stop the spares of this thread's block that no pool has taken (a pool that has started its workers
    needs no more)."""
    spares = _SPARES.get()
    if spares:
        stop_spares(spares)
