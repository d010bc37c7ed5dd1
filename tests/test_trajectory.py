"""Layer 4: a multi-step case needs its end state and every checkpoint."""

from __future__ import annotations

from conftest import make_case
from helpers import S1, S2, frames, output

from qaeval.scoring.trajectory import score_trajectories

TWO_HOP = make_case(
    difficulty="multi-hop",
    gold_answer="14 years",
    gold_source_ids=["s1", "s2"],
    question="How many years after Eastside did Northgate open?",
    checkpoints=[
        {"kind": "cited", "source_id": "s1"},
        {"kind": "cited", "source_id": "s2"},
        {"kind": "answer_mentions", "text": "14"},
    ],
)
BOTH = [{"source_id": "s1", "claim": S1}, {"source_id": "s2", "claim": S2}]


def steps(tmp_path, case=TWO_HOP, **fields):
    _, cases, outs, _ = frames(tmp_path, [case], [output(**fields)])
    return score_trajectories(cases, outs)


def test_right_answer_through_every_checkpoint_succeeds(tmp_path):
    t = steps(tmp_path, answer="Northgate opened 14 years after Eastside.", citations=BOTH)
    assert t["passed"].all() and t["success"].all()
    assert list(t["step"]) == ["end_state", "checkpoint 1", "checkpoint 2", "checkpoint 3"]


def test_lucky_answer_through_wrong_evidence_fails(tmp_path):
    t = steps(tmp_path, answer="Northgate opened 14 years after Eastside.")  # cites only s1
    assert t.set_index("step").loc["end_state", "passed"]
    assert not t.set_index("step").loc["checkpoint 2", "passed"] and not t["success"].any()


def test_cited_checkpoint_requires_the_snippet_was_retrieved(tmp_path):
    t = steps(tmp_path, answer="Northgate opened 14 years after Eastside.", citations=BOTH, retrieved_ids=["s1"])
    assert t.set_index("step").loc["checkpoint 2", "detail"] == "cited but never retrieved"


def test_aggregate_checkpoint_and_numeric_end_state(tmp_path):
    case = make_case(difficulty="aggregation", gold_answer="2", checkpoints=[{"kind": "aggregate_equals", "value": 2}])
    assert steps(tmp_path, case, computed_aggregate=2)["success"].all()
    assert not steps(tmp_path, case, computed_aggregate=3)["success"].any()
    assert not steps(tmp_path, case, computed_aggregate=None)["success"].any()


def test_abstention_is_not_a_reached_end_state(tmp_path):
    t = steps(tmp_path, abstained=True, answer="", citations=[])
    assert t.set_index("step").loc["end_state", "detail"] == "abstained"


def test_single_hop_cases_are_not_scored(tmp_path):
    assert steps(tmp_path, make_case()).empty
