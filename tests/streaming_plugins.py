"""A system, a judge and a check that show whether scoring overlaps the system, across processes, for
tests/test_streaming.py. They meet through files named by environment variables (absolute paths)."""

from __future__ import annotations

import os
import time

from qaeval import check
from qaeval.judges.offline import OfflineJudge

WAIT_S = 60.0  # how long the system waits for the marker before it gives up and fails the case


def _mark(variable: str, line: str) -> None:
    with open(os.environ[variable], "a") as f:
        f.write(line + "\n")


class WaitsForAMarker:
    """The reference system, except that after ``QAEVAL_TEST_ANSWER_FIRST`` answers it answers only once the
    file QAEVAL_TEST_MARKER names exists (written by the judge or the check below): a run that scored
    only after the system had answered every case never gets past that point (each later case fails)."""

    def __init__(self) -> None:
        from qaeval.system.reference import ReferenceHub

        self.hub, self.calls = ReferenceHub(), 0

    def answer(self, case):
        self.calls += 1
        if self.calls > int(os.environ["QAEVAL_TEST_ANSWER_FIRST"]):
            marker, give_up = os.environ["QAEVAL_TEST_MARKER"], time.monotonic() + WAIT_S
            while not os.path.exists(marker):  # a condition to wait for, bounded, not a pause for timing
                if time.monotonic() > give_up:
                    raise RuntimeError("nothing was scored while the system answered")
                time.sleep(0.01)
        return self.hub.answer(case)


def make_waiting():
    return WaitsForAMarker()


class MarkingJudge(OfflineJudge):
    """The offline judge in a process of its own (a custom judge): each call appends how many requests it
    had to QAEVAL_TEST_JUDGE_CALLS and touches the marker."""

    def judge(self, requests):
        _mark("QAEVAL_TEST_JUDGE_CALLS", str(len(requests)))
        _mark("QAEVAL_TEST_MARKER", "judged")
        return super().judge(requests)


def make_judge():
    return MarkingJudge()


@check
def marks(case, output, passages):
    """Passes, appending the case's id to QAEVAL_TEST_CHECK_CALLS and touching the marker."""
    _mark("QAEVAL_TEST_CHECK_CALLS", case.id)
    _mark("QAEVAL_TEST_MARKER", "checked")
    return True, "marked"


class ExitsOnceOn(OfflineJudge):
    """The offline judge, except that its process exits the first time a call holds a request for the case
    QAEVAL_TEST_EXIT_CASE names (a file, QAEVAL_TEST_EXITED, remembers it did): every request of that
    call is lost, and which ones those are depends on how requests are put into calls."""

    def judge(self, requests):
        seen = os.environ["QAEVAL_TEST_EXITED"]
        if any(r.case_id == os.environ["QAEVAL_TEST_EXIT_CASE"] for r in requests) and not os.path.exists(seen):
            open(seen, "w").close()
            self.leave()
        return super().judge(requests)

    def leave(self):
        os._exit(3)


def make_exits_once():
    return ExitsOnceOn()


class SlowWhileFlagged(OfflineJudge):
    """The offline judge, except that while the file QAEVAL_TEST_SLOW names exists each call waits for it
    to go (60 s at most): a call the run is interrupted in the middle of."""

    def judge(self, requests):
        give_up = time.monotonic() + WAIT_S
        while os.path.exists(os.environ["QAEVAL_TEST_SLOW"]) and time.monotonic() < give_up:
            time.sleep(0.01)  # a condition to wait for, bounded
        return super().judge(requests)


def make_slow_while_flagged():
    return SlowWhileFlagged()


@check
def exits_on_named(case, output, passages):
    """Passes, except that the checks' process exits on the cases QAEVAL_TEST_EXIT_CASES names
    (comma-separated): cases lost, counted in a row."""
    if case.id in os.environ["QAEVAL_TEST_EXIT_CASES"].split(","):
        os._exit(3)
    return True, "fine"
