"""Prediction-powered estimates: a judge's bias measured on a few human labels and taken out of its metric."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from conftest import GOLDEN, LABELS, make_case, write_cases

from qaeval import AxisVerdict, JudgeConfig, JudgeResponse, api
from qaeval.cli import main
from qaeval.scoring.ppi import ppi_mean


class AlwaysFull:
    """A judge biased on purpose: full marks on every axis, with quotes that are really there."""

    config = JudgeConfig(name="always-full", model="biased")

    def judge(self, requests):
        out = []
        for r in requests:
            first = r.citations[0].text if r.citations else ""
            verdicts = [
                AxisVerdict("faithfulness", 2, first, "looks fine"),
                AxisVerdict("answer_correctness", 2, r.answer, ""),
            ]
            verdicts += [AxisVerdict("citation_correctness", 2, c.text, "", target=c.source_id) for c in r.citations]
            out.append(JudgeResponse(r.case_id, verdicts))
        return out


def make_always_full():
    return AlwaysFull()


@pytest.fixture
def forty(tmp_path):
    cases = [make_case(id=f"case-{i:04d}") for i in range(40)]
    return write_cases(tmp_path / "data", cases)


def test_ppi_matches_the_reference_implementation():
    ppi_py = pytest.importorskip("ppi_py", reason="ppi-python (the reference implementation) is not installed")
    rng = np.random.default_rng(3)
    truth = rng.random(300) < 0.6
    judge = np.where(rng.random(300) < 0.8, truth, ~truth).astype(float)
    labelled = rng.choice(300, 60, replace=False)
    y, f = truth[labelled].astype(float), judge[labelled]
    for lam in (None, 1.0):
        value, low, high, _ = ppi_mean(y, f, judge, lam=lam)
        ref_low, ref_high = ppi_py.ppi_mean_ci(y, f, judge, alpha=0.05, lam=lam)
        assert (low, high) == pytest.approx((float(ref_low[0]), float(ref_high[0])), abs=1e-9)
        assert value == pytest.approx(float(ppi_py.ppi_mean_pointestimate(y, f, judge, lam=lam)[0]), abs=1e-9)


def test_a_biased_judge_is_corrected_by_labels(forty, tmp_path, monkeypatch):
    """The judge says every answer is faithful; people say half of the labelled ones are not. The naive
    figure is 1.0; the corrected one covers the true rate (0.5) and excludes 1.0."""
    labels = tmp_path / "labels.jsonl"
    labels.write_text(
        "".join(
            json.dumps({"case_id": f"case-{i:04d}", "axis": "faithfulness", "score": 2 if i % 2 else 0}) + "\n"
            for i in range(20)
        )
    )
    monkeypatch.syspath_prepend(str(__import__("pathlib").Path(__file__).parent))
    run = api.run(str(forty), judge=AlwaysFull(), labels=str(labels))
    row = run.scoreboard.set_index("metric").loc["faithfulness_rate"]
    assert row["value"] == 1.0, "the judge-only figure is as biased as the judge"
    assert row["n_labelled"] == 20
    assert row["ppi_ci_low"] <= 0.5 <= row["ppi_ci_high"] and row["ppi_ci_high"] < 1.0
    assert row["ppi_value"] == pytest.approx(0.5)


def test_without_labels_the_ppi_columns_are_nan_with_n_zero(golden_run):
    board = golden_run.scoreboard
    assert board["ppi_value"].isna().all() and (board["n_labelled"] == 0).all()


def test_run_with_labels_prints_ppi_columns_and_leaves_out_stale_labels(capsys):
    assert main(["run", "--data", str(GOLDEN), "--labels", str(LABELS)]) == 0
    out = capsys.readouterr().out
    assert "PPI 95% CI" in out and "labels" in out
    assert "1 label(s) left out of the PPI estimates" in out
    run = api.run(str(GOLDEN), labels=str(LABELS))
    row = run.scoreboard.set_index("metric").loc["answer_correctness"]
    assert row["value"] == pytest.approx(8 / 12) and row["n_labelled"] == 12
    assert row["ppi_value"] == pytest.approx(8 / 12), "people call eight of the twelve answers right"
    assert row["ppi_ci_high"] - row["ppi_ci_low"] < row["ci_high"] - row["ci_low"], "labels narrow the interval"
    assert math.isnan(run.scoreboard.set_index("metric").at["rerank_mrr", "ppi_value"])


def test_a_constant_judge_falls_back_to_the_labels_alone():
    y = np.array([1, 0, 1, 0, 1, 0, 1, 0], dtype=float)
    value, low, high, lam = ppi_mean(y, np.ones(8), np.ones(40))
    assert lam == 0.0 and value == pytest.approx(0.5) and low < 0.5 < high


def test_too_few_labels_give_no_estimate():
    assert all(math.isnan(v) for v in ppi_mean(np.array([1.0]), np.array([1.0]), np.ones(5)))


def test_labels_that_all_agree_with_a_judge_that_carries_nothing_keep_an_honest_interval():
    """ExpertQA's bing_chat slice: ten labels, every one 0, and a judge that scores every answer 0. The
    normal interval is [0, 0] and excludes the rate the experts measured over all 49 answers (0.245); the
    Wilson interval of ten zeros is [0, 0.278]."""
    value, low, high, lam = ppi_mean(np.zeros(10), np.zeros(10), np.zeros(49))
    assert lam == 0.0 and value == 0.0 and low == 0.0
    assert high == pytest.approx(0.2775, abs=1e-4) and high > 0.245
    statsmodels = pytest.importorskip("statsmodels.stats.proportion")
    assert (low, high) == pytest.approx(statsmodels.proportion_confint(0, 10, alpha=0.05, method="wilson"), abs=1e-12)
    value, low, high, _ = ppi_mean(np.ones(3), np.zeros(3), np.zeros(17))
    assert value == 1.0 and high == 1.0 and low == pytest.approx(0.4385, abs=1e-4)
