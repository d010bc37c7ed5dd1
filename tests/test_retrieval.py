"""Layer 2: retrieval metrics per case."""

from __future__ import annotations

import math

import pytest
from conftest import make_case
from helpers import frames, output

from qaeval.scoring.retrieval import case_retrieval, score_retrieval


def test_perfect_single_gold_at_rank_one():
    r = case_retrieval(["a"], ["a", "b", "c"], 5)
    assert r == dict(recall_at_k=1.0, precision_at_k=pytest.approx(1 / 5), mrr=1.0, ndcg_at_k=1.0)


def test_gold_at_rank_two_and_outside_k():
    r = case_retrieval(["a", "z"], ["b", "a", "c", "z"], 3)
    assert r["recall_at_k"] == 0.5 and r["mrr"] == 0.5
    assert r["ndcg_at_k"] == pytest.approx((1 / math.log2(3)) / (1 + 1 / math.log2(3)))


def test_empty_ranking_scores_zero():
    r = case_retrieval(["a"], [], 5)
    assert r["recall_at_k"] == 0 and r["mrr"] == 0 and r["precision_at_k"] == 0


def test_precision_divides_by_k_as_trec_eval_does():
    """One gold among two retrieved at k = 5 is P@5 = 0.2 (trec_eval), not 0.5 (hits / retrieved)."""
    assert case_retrieval(["a"], ["a", "b"], 5)["precision_at_k"] == pytest.approx(0.2)


def test_cases_without_gold_sources_have_no_row(tmp_path):
    case = make_case(expected_behavior="unanswerable_must_abstain", gold_answer=None, gold_source_ids=[])
    _, cases, outs, _ = frames(tmp_path, [case], [output()])
    assert score_retrieval(cases, outs).empty


def test_k_is_respected(tmp_path):
    _, cases, outs, _ = frames(tmp_path, outputs=[output(retrieved_ids=["s2", "s1"])])
    assert score_retrieval(cases, outs, k=1)["recall_at_k"].item() == 0.0
    assert score_retrieval(cases, outs, k=2)["recall_at_k"].item() == 1.0
