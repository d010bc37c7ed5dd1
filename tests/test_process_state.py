"""A library call leaves the caller's process as it found it (issue 48, item 5).

In a notebook qaeval runs in the user's kernel, beside their own threads. Settings travel as arguments,
never through ``os.environ``: progress bars were switched off by writing ``QAEVAL_PROGRESS`` into the
environment for the length of a call, and every other thread saw it. What a run must change for
containment or speed (docs/guides/boundary.md lists each) is put back exactly on the way out, and runs
that overlap in two threads share it: the last to end puts it back, whichever ends first.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import os
import signal
import sys
import threading
import warnings
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import GOLDEN

import qaeval
import qaeval.notebook as nb
from qaeval.cli import main
from qaeval.commands.common import check_parameters

LINUX = sys.platform.startswith("linux")
CASES = ["agg-0001", "agg-0002", "single-0001", "single-0002"]  # a few cases: what is checked is the process
SPY = """
import gc, os, threading
from qaeval.system.reference import ReferenceHub

seen = []  # what each call saw: the environment, the collector's thresholds


class Spy:
    def __init__(self):
        self.hub = ReferenceHub()

    def answer(self, case):
        seen.append((dict(os.environ), gc.get_threshold(), threading.get_ident()))
        return self.hub.answer(case)


def make():
    return Spy()
"""


def _prctl(option: int) -> int:
    if not LINUX:
        return -1
    value = ctypes.c_int(0)
    if option == 37:  # PR_GET_CHILD_SUBREAPER writes its answer
        ctypes.CDLL(None).prctl(option, ctypes.byref(value), 0, 0, 0)
        return value.value
    return int(ctypes.CDLL(None).prctl(option, 0, 0, 0, 0))


def process_state() -> dict[str, object]:
    """What a call could leave changed in the process that made it."""
    handlers = {}
    for s in signal.valid_signals():
        try:
            handlers[s] = signal.getsignal(s)
        except (OSError, ValueError):
            continue
    loggers = {"": logging.getLogger()} | {
        name: lg for name, lg in logging.root.manager.loggerDict.items() if isinstance(lg, logging.Logger)
    }
    return {
        "environment": dict(os.environ),
        "collector thresholds": gc.get_threshold(),
        "collector enabled": gc.isenabled(),
        "signal handlers": handlers,
        "working directory": os.getcwd(),
        "sys.path": list(sys.path),
        "logging handlers": {name: (list(lg.handlers), lg.level) for name, lg in loggers.items() if lg.handlers},
        "warnings filters": list(warnings.filters),
        "standard streams": (sys.stdout, sys.stderr),
        "dumpable, child subreaper": (_prctl(3), _prctl(37)),  # PR_GET_DUMPABLE, PR_GET_CHILD_SUBREAPER
    }


def assert_same_state(before: dict[str, object], after: dict[str, object]) -> None:
    for what, value in before.items():
        if isinstance(value, dict):
            changed = sorted(str(k) for k in set(value) | set(after[what]) if value.get(k) != after[what].get(k))
            assert not changed, f"{what} changed: {changed}"
        else:
            assert after[what] == value, f"{what}: {value!r} before, {after[what]!r} after"


@pytest.fixture
def spy(tmp_path, monkeypatch):
    """An adapter module in the working directory (as a user's project has it), named spy_adapter:make; its
    ``seen`` lists what each call of the adapter saw. The working directory is not on sys.path."""
    (tmp_path / "spy_adapter.py").write_text(SPY)
    monkeypatch.chdir(tmp_path)
    assert str(tmp_path) not in sys.path and "" not in sys.path
    yield tmp_path
    sys.modules.pop("spy_adapter", None)


@pytest.fixture
def odd_thresholds():
    """The collector's thresholds as a user may have set them, put back after the test."""
    saved = gc.get_threshold()
    gc.set_threshold(777, 11, 13)
    yield (777, 11, 13)
    gc.set_threshold(*saved)


@pytest.mark.parametrize("isolation", ["none", "process"])
def test_a_run_leaves_the_callers_process_exactly_as_it_found_it(isolation, spy, odd_thresholds):
    """The environment, the collector's thresholds, signal handlers, the working directory, sys.path (the
    adapter is imported from the working directory under isolation none), logging handlers, warnings
    filters, the standard streams and (Linux) the harness guard's prctl flags: all as they were."""
    before = process_state()
    run = qaeval.run(str(GOLDEN), adapter="spy_adapter:make", isolation=isolation, case=CASES)
    assert run.verdict == "GREEN", run.summary_text()
    assert_same_state(before, process_state())
    if isolation == "none":
        import spy_adapter

        assert spy_adapter.seen, "the adapter ran in this process"
        thresholds = {t for _, t, _ in spy_adapter.seen}
        assert thresholds == {(50_000, 20, 100)}, "raised while the run goes: never lowered below the user's"


def _entry_points(spy_dir: Path) -> dict[str, object]:
    """The three ways a run is asked for in this process: the API, a report notebook's cell, the CLI; each
    with progress bars off, the setting the environment used to carry."""

    def api() -> None:
        qaeval.run(str(GOLDEN), adapter="spy_adapter:make", isolation="none", case=CASES, progress=False)

    def notebook() -> None:
        p = check_parameters("run", data=str(GOLDEN), adapter="spy_adapter:make", isolation="none", case=CASES)
        nb.result("run", p)  # a report draws no bar: it used to say so in the environment

    def cli() -> None:
        argv = ["run", "--data", str(GOLDEN), "--adapter", "spy_adapter:make", "--isolation", "none", "--quiet"]
        assert main(argv + [a for c in CASES for a in ("--case", c)]) == 0

    return {"api": api, "notebook": notebook, "cli": cli}


@pytest.mark.parametrize("entry", ["api", "notebook", "cli"])
def test_a_thread_beside_a_run_never_sees_its_settings_in_the_environment(entry, spy, capsys):
    """Each adapter call (isolation none: on a thread of this process, as any thread of the user's kernel)
    copies os.environ: it is the environment from before the run, at every call. Before the fix the
    notebook's and the CLI's runs showed QAEVAL_PROGRESS=0 to every thread for the length of the call."""
    before = dict(os.environ)
    _entry_points(spy)[entry]()
    import spy_adapter

    assert spy_adapter.seen, "the adapter ran in this process"
    assert any(ident != threading.get_ident() for _, _, ident in spy_adapter.seen), "on threads of the run"
    for environ, _, _ in spy_adapter.seen:
        assert environ == before, {k: environ.get(k) for k in set(environ) ^ set(before)}
    assert dict(os.environ) == before


class _WatchedEnviron(type(os.environ)):  # type: ignore[misc]  # os._Environ, recording every write
    writes: list[tuple[str, str]]

    def __setitem__(self, key: str, value: str) -> None:
        self.writes.append(("set", key))
        super().__setitem__(key, value)

    def __delitem__(self, key: str) -> None:
        self.writes.append(("delete", key))
        super().__delitem__(key)


@contextmanager
def environ_writes():
    """os.environ (and os.putenv/os.unsetenv) recording every write for the length of the block, the
    data shared with the real one; yields the list of writes."""
    real, putenv, unsetenv = os.environ, os.putenv, os.unsetenv
    watched = _WatchedEnviron(real._data, real.encodekey, real.decodekey, real.encodevalue, real.decodevalue)
    watched.writes = writes = []

    def recorded_putenv(key: str, value: str) -> None:
        writes.append(("putenv", key))
        putenv(key, value)

    def recorded_unsetenv(key: str) -> None:
        writes.append(("unsetenv", key))
        unsetenv(key)

    # the same variables, seen through an object that records writes (the environment itself is not cleared)
    os.environ = watched  # noqa: B003
    os.putenv, os.unsetenv = recorded_putenv, recorded_unsetenv
    try:
        yield writes
    finally:
        os.environ, os.putenv, os.unsetenv = real, putenv, unsetenv


def test_a_report_rendered_in_this_process_writes_nothing_to_its_environment(tmp_path, monkeypatch):
    """Rendering ran the report kernel with JUPYTER_PATH, QAEVAL_PROGRESS and PYDEVD_DISABLE_FILE_VALIDATION
    written into this process's environment for the length of the call; they are the kernel's own now
    (its kernelspec's), and the kernelspec is found through an argument, not JUPYTER_PATH."""
    monkeypatch.setenv("QAEVAL_PROGRESS", "1")  # as in a terminal: a bar drawn into the report would show
    record = tmp_path / "run.json"
    assert main(["run", "--data", str(GOLDEN), "--save", str(record), "--quiet", "--case", "agg-0001"]) == 0
    with environ_writes() as writes:
        assert main(["report", str(record), "--html", str(tmp_path / "run.html")]) == 0
    assert writes == []
    page = (tmp_path / "run.html").read_text()
    assert "agg-0001" in page and "cases:" not in page, "the report's kernel drew no progress bar"


def test_logging_to_mlflow_writes_nothing_to_this_processs_environment(tmp_path, monkeypatch):
    """MLflow reads its HTTP limits from the environment only: they were written into the caller's for the
    length of the logging. MLflow now runs in a process of its own that is given them."""
    pytest.importorskip("mlflow", reason="the mlflow extra is not installed (the dev set-up installs it)")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", raising=False)
    run = qaeval.load_run(GOLDEN / "ci-baseline.json")
    with environ_writes() as writes:
        tracked = qaeval.api.track(run, f"sqlite:///{tmp_path / 'mlflow.db'}", "process-state")
    assert tracked.ok, tracked.message
    assert writes == []
    assert "MLFLOW_HTTP_REQUEST_MAX_RETRIES" not in os.environ


def test_runs_overlapping_in_two_threads_put_the_standard_streams_back_whichever_ends_first(spy):
    """Isolation none routes sys.stdout and sys.stderr while it runs (an adapter's prints are its case's
    logs). Each run saved the streams it found and put them back: a run begun during another saved the
    other's router, and when the first began ended first, the second left that router in place for good."""
    before = (sys.stdout, sys.stderr)
    first_calling, second_calling, first_done = threading.Event(), threading.Event(), threading.Event()

    class Waits:
        def __init__(self, mine: threading.Event, other: threading.Event) -> None:
            from qaeval.system.reference import ReferenceHub

            self.hub, self.mine, self.other = ReferenceHub(), mine, other

        def answer(self, case):
            self.mine.set()
            assert self.other.wait(60), "the other run never got there"
            return self.hub.answer(case)

    errors = []

    def first() -> None:
        try:
            qaeval.run(str(GOLDEN), adapter=Waits(first_calling, second_calling), isolation="none", case=CASES)
        except BaseException as exc:  # noqa: BLE001  (reported by the test's thread)
            errors.append(exc)
        finally:
            first_done.set()

    def second() -> None:
        try:  # begins while the first is calling its adapter; calls its own only once the first has ended
            qaeval.run(str(GOLDEN), adapter=Waits(second_calling, first_done), isolation="none", case=CASES)
        except BaseException as exc:  # noqa: BLE001  (reported by the test's thread)
            errors.append(exc)

    a = threading.Thread(target=first)
    a.start()
    assert first_calling.wait(60)
    b = threading.Thread(target=second)
    b.start()
    a.join(120)
    b.join(120)
    assert not errors, errors
    assert (sys.stdout, sys.stderr) == before


@pytest.mark.skipif(not LINUX, reason="the guard's prctl flags are Linux's")
def test_overlapping_guards_keep_the_harness_guarded_until_the_last_ends():
    """A run in one thread ending while another still runs its workers left the other unguarded (dumpable,
    no subreaper): the guard that began first put the flags back when it ended."""
    from qaeval.worker.hardening import harness_guard

    before = (_prctl(3), _prctl(37))
    first, second = harness_guard(), harness_guard()
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)  # the first run ends; the second still goes
    assert (_prctl(3), _prctl(37)) == (0, 1), "still non-dumpable and a subreaper while a run goes"
    second.__exit__(None, None, None)
    assert (_prctl(3), _prctl(37)) == before


def test_a_threshold_above_a_runs_is_kept_while_it_goes_and_all_are_put_back(odd_thresholds):
    """The collector's thresholds while a run goes are the larger of the user's and RUN_THRESHOLDS, each
    one, and the user's are what is left after it (docs/guides/boundary.md)."""
    from qaeval.commands.pipeline import RUN_THRESHOLDS, fewer_collections

    gc.set_threshold(100_000, 1, 500)
    with fewer_collections():
        assert gc.get_threshold() == tuple(max(a, b) for a, b in zip((100_000, 1, 500), RUN_THRESHOLDS))
    assert gc.get_threshold() == (100_000, 1, 500)


def test_the_working_folder_is_importable_only_while_a_named_module_is_imported(spy):
    """``module:factory`` names resolve from the working directory, as under ``python -m``; the directory
    was left on sys.path for good after the first name was resolved in this process."""
    from qaeval.worker.plugins import resolve

    before = list(sys.path)
    make = resolve("spy_adapter:make", what="adapter")
    assert make().answer and sys.path == before
