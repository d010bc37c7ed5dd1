"""Scoring beside the judge in a forked copy of the process (qaeval.scoring.forked): the same values as
computing here, and every way the child can fail ends in computing here, never in a wrong value, a
hang or a process left behind."""

from __future__ import annotations

import os
import select
import sys
import threading

import pytest
from conftest import GOLDEN

from qaeval import api
from qaeval.scoring import forked

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or (os.cpu_count() or 1) < 2,
                                reason="forking to score is for Linux with two or more cores")

PARENT = os.getpid()


@pytest.fixture
def small_suites_fork(monkeypatch):
    monkeypatch.setattr(forked, "MIN_ROWS", 0)
    # A thread an earlier test abandoned (an adapter hung under isolation none) would turn the fork off
    # for the rest of this worker; the thread rule has its own test below.
    monkeypatch.setattr(forked.threading, "active_count", lambda: 1)


def in_child() -> bool:
    return os.getpid() != PARENT


def pid_and_square(x: int) -> tuple[int, int]:
    return os.getpid(), x * x


def test_the_value_comes_from_a_forked_child(small_suites_fork):
    with forked.Beside(pid_and_square, 7, rows=1) as later:
        child = later.pid
        pid, value = later.result()
    assert later.forked and pid == child != os.getpid() and value == 49
    with pytest.raises(ChildProcessError):  # reaped
        os.waitpid(child, os.WNOHANG)


def test_a_run_scores_the_same_with_and_without_the_fork(small_suites_fork, monkeypatch):
    seen = []
    real = forked.Beside.result

    def result(self):
        value = real(self)
        seen.append(self.forked)
        return value

    monkeypatch.setattr(forked.Beside, "result", result)
    split = api.run(str(GOLDEN), isolation="none")
    monkeypatch.setattr(forked, "ENABLED", False)
    here = api.run(str(GOLDEN), isolation="none")
    assert seen == [True, False]
    for name in ("checks", "verdicts", "per_case", "scoreboard"):
        a, b = (getattr(r, name).drop(columns=["latency_s"], errors="ignore") for r in (split, here))
        assert a.astype(str).equals(b.astype(str)), name


def dies_in_the_child(x: int) -> int:
    if in_child():
        os._exit(3)
    return x + 1


def raises_in_the_child(x: int) -> int:
    if in_child():
        raise MemoryError("child only")
    return x + 1


def test_a_child_that_exits_or_raises_is_replaced_by_computing_here(small_suites_fork):
    for fn in (dies_in_the_child, raises_in_the_child):
        with forked.Beside(fn, 1, rows=1) as later:
            assert later.pid is not None
            assert later.result() == 2 and not later.forked


def raises_everywhere(x: int) -> int:
    raise ValueError(f"bad {x}")


def test_an_error_of_the_step_itself_is_raised_here(small_suites_fork):
    with forked.Beside(raises_everywhere, 5, rows=1) as later, pytest.raises(ValueError, match="bad 5"):
        later.result()


def hangs_in_the_child(x: int) -> int:
    if in_child():
        read, _ = os.pipe()
        select.select([read], [], [])  # nothing will ever arrive
    return x * 10


def test_a_child_past_its_deadline_is_killed_and_the_value_computed_here(small_suites_fork, monkeypatch):
    monkeypatch.setattr(forked, "DEADLINE", 0.3)
    with forked.Beside(hangs_in_the_child, 4, rows=1) as later:
        child = later.pid
        assert later.result() == 40 and not later.forked
    with pytest.raises(ChildProcessError):
        os.waitpid(child, os.WNOHANG)


def test_leaving_early_kills_and_reaps_the_child(small_suites_fork):
    with pytest.raises(KeyError):
        with forked.Beside(hangs_in_the_child, 1, rows=1) as later:
            child = later.pid
            raise KeyError("the judge failed")
    with pytest.raises(ChildProcessError):
        os.waitpid(child, os.WNOHANG)


def test_no_fork_while_another_thread_runs_or_for_a_small_suite(monkeypatch):
    with forked.Beside(pid_and_square, 3, rows=forked.MIN_ROWS - 1) as later:
        assert later.pid is None and later.result() == (os.getpid(), 9)
    monkeypatch.setattr(forked, "MIN_ROWS", 0)
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        with forked.Beside(pid_and_square, 3, rows=1) as later:
            assert later.pid is None and later.result() == (os.getpid(), 9) and not later.forked
    finally:
        stop.set()
        other.join()


def test_a_fork_that_fails_is_replaced_by_computing_here_and_leaks_nothing(small_suites_fork, monkeypatch):
    """An adversarial review: a fork refused by a process limit (EAGAIN) ended the run (exit 74)."""
    import errno

    def refused():
        raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")

    fds = len(os.listdir("/proc/self/fd"))
    monkeypatch.setattr(forked.os, "fork", refused)
    with forked.Beside(pid_and_square, 6, rows=1) as later:
        assert later.pid is None and later.result() == (os.getpid(), 36) and not later.forked
    assert len(os.listdir("/proc/self/fd")) == fds


def test_with_sigchld_ignored_the_childs_value_is_still_taken(small_suites_fork):
    """An adversarial review: with SIGCHLD ignored (inherited, or set by user code) the system reaps
    the child, waitpid raised ECHILD, and the run ended with exit 74, "No child processes"."""
    import signal

    before = signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    try:
        with forked.Beside(pid_and_square, 8, rows=1) as later:
            child = later.pid
            pid, value = later.result()
        assert later.forked and pid == child and value == 64
    finally:
        signal.signal(signal.SIGCHLD, before)


def test_without_a_fork_the_step_runs_at_once(monkeypatch):
    """An adversarial review: computed lazily, an error in the checks (a corpus file changed on disk)
    came only after every judge call had been made and paid for; it comes first, as it used to."""
    calls = []
    with forked.Beside(calls.append, "ran", rows=0) as later:
        assert calls == ["ran"]
        later.result()
    assert calls == ["ran"]


# --------------------------------------------------------------------------- a share of the next step first


def own_pid() -> int:
    return os.getpid()


def test_the_child_sends_its_share_of_the_next_step_before_its_value(small_suites_fork):
    with forked.Beside(pid_and_square, 7, rows=1, first=own_pid) as later:
        child = later.pid
        assert later.first_value() == child != os.getpid(), "the share was computed in the child"
        assert later.result() == (child, 49) and later.forked


def test_a_share_never_asked_for_is_read_past(small_suites_fork):
    with forked.Beside(pid_and_square, 3, rows=1, first=own_pid) as later:
        child = later.pid
        assert later.result() == (child, 9) and later.forked


def big_share() -> bytes:
    return bytes(3 << 20)  # far more than a pipe holds: the child blocks until it is read


def test_a_share_larger_than_the_pipe_arrives_whole(small_suites_fork):
    with forked.Beside(pid_and_square, 2, rows=1, first=big_share) as later:
        assert later.first_value() == bytes(3 << 20)
        assert later.result()[1] == 4 and later.forked


def share_dies_in_the_child() -> int:
    if in_child():
        os._exit(3)
    return os.getpid()


def test_a_child_that_dies_before_its_share_has_both_computed_here(small_suites_fork):
    with forked.Beside(pid_and_square, 5, rows=1, first=share_dies_in_the_child) as later:
        assert later.first_value() == os.getpid()
        assert later.result() == (os.getpid(), 25) and not later.forked


def share_raises() -> int:
    raise LookupError("the share itself is wrong")


def test_an_error_of_the_share_itself_is_raised_here(small_suites_fork):
    with forked.Beside(pid_and_square, 5, rows=1, first=share_raises) as later, pytest.raises(LookupError):
        later.first_value()


def test_a_share_past_the_deadline_is_computed_here(small_suites_fork, monkeypatch):
    monkeypatch.setattr(forked, "DEADLINE", 0.3)

    def share_hangs_in_the_child() -> int:
        if in_child():
            read, _ = os.pipe()
            select.select([read], [], [])
        return os.getpid()

    with forked.Beside(pid_and_square, 6, rows=1, first=share_hangs_in_the_child) as later:
        child = later.pid
        assert later.first_value() == os.getpid()
        assert later.result() == (os.getpid(), 36) and not later.forked
    with pytest.raises(ChildProcessError):
        os.waitpid(child, os.WNOHANG)


def test_without_a_fork_the_share_is_computed_here():
    with forked.Beside(pid_and_square, 4, rows=0, first=own_pid) as later:
        assert later.pid is None and later.first_value() == os.getpid()


def test_a_run_has_the_child_choose_half_the_decoys(small_suites_fork, monkeypatch, tmp_path):
    """The hardest decoys of every other judged case come from the child, and the verdicts are the same
    as when one process chooses them all (the golden comparison above)."""
    from qaeval.scoring import evaluate

    real = evaluate.choose_decoys

    def choose(outputs, sources, part=(0, 1)):
        chosen = real(outputs, sources, part)
        (tmp_path / f"part-{part[0]}-of-{part[1]}").write_text(f"{os.getpid()} {len(chosen)}")
        return chosen

    monkeypatch.setattr(evaluate, "choose_decoys", choose)
    api.run(str(GOLDEN), isolation="none")
    child_pid, child_n = map(int, (tmp_path / "part-1-of-2").read_text().split())
    here_pid, here_n = map(int, (tmp_path / "part-0-of-2").read_text().split())
    assert here_pid == os.getpid() != child_pid
    assert child_n > 0 and here_n > 0


def test_a_child_that_dies_after_its_share_gives_the_share_and_the_value_is_computed_here(small_suites_fork):
    with forked.Beside(dies_in_the_child, 1, rows=1, first=own_pid) as later:
        child = later.pid
        assert later.first_value() == child
        assert later.result() == 2 and not later.forked
