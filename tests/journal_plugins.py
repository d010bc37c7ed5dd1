"""Adapters for the journal's tests: a backend outage that ends between a run and its resume."""

from __future__ import annotations

import os
import signal

from plugins import RaisesOnThird, WrapsHub


class Outage(WrapsHub):
    """The reference system, except that one case raises the first time it is asked while the file
    QAEVAL_TEST_DOWN names exists (a backend outage that ends). Every call adds a line to
    QAEVAL_TEST_CALLS; once that case has been asked QAEVAL_TEST_INTERRUPT_AT times (0: never), or the
    run's calls reach QAEVAL_TEST_INTERRUPT_AT_CALL, Ctrl-C
    (SIGINT) goes to the harness that started it (this very process when QAEVAL_TEST_IN_PROCESS is set:
    isolation none). Counted in the calls file, across workers and runs."""

    question = RaisesOnThird.question

    def answer(self, case):
        with open(os.environ["QAEVAL_TEST_CALLS"], "a") as f:
            f.write(case.question + "\n")
        at_call = int(os.environ.get("QAEVAL_TEST_INTERRUPT_AT_CALL", "0"))
        if at_call:  # the run's at_call-th call of any case: well after the outputs before it were journaled
            with open(os.environ["QAEVAL_TEST_CALLS"]) as f:
                if len(f.read().splitlines()) == at_call:
                    os.kill(os.getpid() if os.environ.get("QAEVAL_TEST_IN_PROCESS") else os.getppid(), signal.SIGINT)
        if case.question != self.question:
            return self.hub.answer(case)
        with open(os.environ["QAEVAL_TEST_CALLS"]) as f:
            asked = f.read().splitlines().count(self.question)
        if asked == int(os.environ.get("QAEVAL_TEST_INTERRUPT_AT", "0")):  # the harness: this process with
            os.kill(os.getpid() if os.environ.get("QAEVAL_TEST_IN_PROCESS") else os.getppid(), signal.SIGINT)
        if asked == 1 and os.path.exists(os.environ.get("QAEVAL_TEST_DOWN", "")):
            raise RuntimeError("backend down for this one")
        return self.hub.answer(case)


def make_outage():
    return Outage()
