"""The gate's trials test on a system that abstains in some trials of cases it answered in the baseline:
a metric that covers answered trials only (faithfulness, citation precision) did not move, and is not
called a change distinguishable from noise; the metric that did move (over-refusal) still is."""

from __future__ import annotations

import math

import pytest
from conftest import GOLDEN

import qaeval as qa
from qaeval.verdicts.noise import CaseTrials, trials_test


@pytest.fixture(autouse=True)
def quiet(monkeypatch):
    monkeypatch.setenv("QAEVAL_PROGRESS", "0")


def test_a_case_whose_answered_trials_all_score_alike_has_not_moved():
    """Two trials not counted (abstained: NaN) among five that all score 1, against five that scored 1:
    no arrangement of the trials changes the mean of those counted, so the case cannot move. (The
    statistic counted a case's counted trials with a matrix product of two bool arrays, which is a bool:
    'any', not 'how many', and every such case looked moved, p = 1.7e-07 over twelve.)"""
    nan = math.nan
    case = CaseTrials((1.0,) * 5, (nan, 1.0, 1.0, nan, 1.0))
    assert trials_test([case] * 12, higher_is_better=True) == (1.0, 1.0, 0)
    # a real drop among the counted trials is still seen
    worse = CaseTrials((1.0,) * 5, (nan, 0.0, 0.0, nan, 0.0))
    p, _, moved = trials_test([worse] * 12, higher_is_better=True)
    assert moved == 12 and p < 1e-6


def test_a_gate_whose_cases_now_abstain_in_some_trials_flags_only_what_moved(tmp_path):
    base = tmp_path / "base.json"
    qa.baseline(str(GOLDEN), out=str(base), trials=5, isolation="none")
    result = qa.gate(
        str(GOLDEN),
        baseline=str(base),
        adapter="abstaining_plugins:make_abstains_sometimes",
        trials=5,
        isolation="none",
        concurrency=1,
    )
    deltas = result.metric_deltas.set_index("metric")
    for name in ("faithfulness_rate", "citation_precision"):
        row = deltas.loc[name]
        assert row["delta"] == 0 and row["n_paired"] > 0, name
        assert not row["distinguishable"] and row["n_moved"] == 0 and row["p_value"] == 1.0, row["note"]
        assert "no paired case moved" in row["note"]
    over = deltas.loc["over_refusal_rate"]
    assert over["delta"] > 0.2 and over["distinguishable"] and not over["passed"]
    # the untouched metrics no longer count against the level the moved ones are held to
    text = result.summary_text()
    assert "faithfulness_rate" in text and "distinguishable from noise (p=" not in _row(text, "faithfulness_rate")


def _row(text: str, metric: str) -> str:
    return next(line for line in text.splitlines() if line.strip().startswith(metric + " "))
