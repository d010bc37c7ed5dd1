"""Checks and metrics that misbehave, for tests/test_custom.py."""

from __future__ import annotations

import math
import os
import sys
import time

from qaeval import Metric, check


@check(tier=1)
def raises(case, output, passages):
    raise RuntimeError("rule engine down")


@check(name="garbage")
def returns_garbage(case, output, passages):
    return "yes"


@check(tier=1)
def exits(case, output, passages):
    if case.id == "single-0001":
        os._exit(3)
    return True, "fine"


@check
def calls_sys_exit(case, output, passages):
    sys.exit(0)


@check(tier=1)
def hangs(case, output, passages):
    if case.id == "single-0002":
        time.sleep(3600)
    return True, "fine"


@check(tier=1, name="faithfulness_rate")
def takes_a_builtin_name(case, output, passages):
    return True, ""


nan_metric = Metric("nan_metric", True, "cases", "a metric that returns NaN", unit=lambda s: (math.nan, 1.0))
above_one = Metric("above_one", False, "cases", "a numerator larger than its denominator", unit=lambda s: (2, 1))
raising_metric = Metric("raising_metric", True, "cases", "a metric that raises", unit=lambda s: 1 / 0)


def _words_under_limit(sample):
    if not sample.facts.answered:
        return 0.0, 0.0
    return float(len(sample.output.answer.split()) <= int(os.environ.get("QAEVAL_TEST_WORDS", "1000"))), 1.0


gated_length = Metric(
    "gated_length",
    True,
    "answered cases",
    "answers under QAEVAL_TEST_WORDS words",
    unit=_words_under_limit,
    tolerance=0.0,
)
not_a_metric = 42


@check(tier=1)
def hangs_always(case, output, passages):
    time.sleep(3600)


huge_units = Metric("huge_units", True, "cases", "valid units near the largest float", unit=lambda s: (1e308, 1e308))


@check(tier=1)
def forks(case, output, passages):
    """Forks without ending its child, so the child replies too (issue 40): passes on answered cases,
    fails on abstentions, so a verdict recorded for the wrong case shows."""
    os.fork()
    return (not output.abstained), "answered" if not output.abstained else "abstained"


@check(tier=1, name="faithfulness_rate_n")
def takes_a_logged_key(case, output, passages):
    return True, ""


@check
def counts_its_calls(case, output, passages):
    """One line per call in the file QAEVAL_TEST_CHECK_CALLS names (absolute): how often it ran on a case."""
    with open(os.environ["QAEVAL_TEST_CHECK_CALLS"], "a") as f:
        f.write(case.id + "\n")
    return True
