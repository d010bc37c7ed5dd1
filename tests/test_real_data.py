"""Real public text (SQuAD 2.0 from ../shared/data, when present): the loader takes it whole, and the
hub's honest weakness shows, since SQuAD 2.0's unanswerable questions look answerable."""

from __future__ import annotations

import pytest
from conftest import ROOT

from qaeval import DatasetError, api
from qaeval.data.importers import squad2_cases, write_jsonl

SQUAD = ROOT.parent / "shared" / "data" / "squad2-small.json"


@pytest.mark.skipif(not SQUAD.is_file(), reason=f"real data absent: {SQUAD} is not part of a clone")
def test_squad2_suite_loads_and_shows_the_lexical_hub_cannot_spot_adversarial_unanswerables(tmp_path):
    write_jsonl(squad2_cases(SQUAD), tmp_path)
    run = api.run(str(tmp_path))
    assert len(run.suite) == 626
    board = run.scoreboard.set_index("metric")
    assert board.at["abstention_recall", "n"] == 333
    assert board.at["abstention_recall", "value"] < 0.5
    checks = run.checks.pivot(index="case_id", columns="check", values="passed")
    assert checks["grounding_isolation"].all() and checks["citation_resolvability"].all()
    must = run.per_case.set_index("case_id")["expected_behavior"] == "unanswerable_must_abstain"
    answered_anyway = must & ~run.per_case.set_index("case_id")["abstained"]
    assert (~checks["fail_closed_abstention"]).sum() >= answered_anyway.sum()


def test_missing_dataset_file_says_so(tmp_path):
    with pytest.raises(DatasetError, match="not shipped with qaeval"):
        squad2_cases(tmp_path / "nope.json")
