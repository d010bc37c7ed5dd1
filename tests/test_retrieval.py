"""Layer 2: retrieval metrics per case."""

from __future__ import annotations

import math

import pytest
from conftest import GOLDEN, make_case
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


def test_a_run_whose_retrieved_ids_the_cases_do_not_know_says_why_retrieval_reads_zero(capsys, tmp_path):
    """A system that names passages its own way ("doc-" + id) answers as well as the reference system and
    stays green, while recall and MRR read 0: said in a note, in the terminal and the report."""
    from qaeval.cli import main

    page = tmp_path / "run.html"
    assert (
        main(["run", "--data", str(GOLDEN), "--adapter", "plugins:make_own_ids", "--quiet", "--html", str(page)]) == 0
    )
    out = capsys.readouterr().out
    assert "TIER 1: GREEN" in out and "rerank_mrr                      0.000" in out
    note = (
        "24 of the 24 retrieved ids (100%) are not ids of the cases' sources: retrieval compares retrieved ids "
        "with the gold source ids, so recall and MRR read 0 for them"
    )
    assert f"note: {note}" in out
    import html

    assert note in html.unescape(page.read_text())  # an apostrophe is &#x27; or &#39;, by nbconvert's version
    assert main(["run", "--data", str(GOLDEN), "--quiet"]) == 0
    assert "retrieved ids" not in capsys.readouterr().out, "the reference system's ids are the cases' own"
