"""``qaeval.score``: answers a user already has, scored with the same checks, judge and scoreboard as a run.
Bad answers are refused with their place, all at once, before any judge call."""

from __future__ import annotations

import pandas as pd
import pytest
from conftest import GOLDEN

import qaeval
from qaeval import Citation, DatasetError, SUTOutput, api

FIELDS = ["answer", "citations", "retrieved_ids", "passages", "abstained", "model_was_called", "prompt_to_model",
          "computed_aggregate"]  # fmt: skip


@pytest.fixture(scope="module")
def answers(golden_run) -> pd.DataFrame:
    """The reference system's answers, as a team's own pipeline would hand them over: one row per case."""
    return golden_run.outputs[["case_id", *FIELDS]].copy()


def test_a_dataframe_of_answers_scores_as_the_run_that_gave_them(golden_run, answers):
    scored = qaeval.score(str(GOLDEN), answers)
    assert scored.meta.adapter == "(answers given)"
    columns = ["metric", "value", "ci_low", "ci_high", "n"]
    pd.testing.assert_frame_equal(scored.scoreboard[columns], golden_run.scoreboard[columns])
    pd.testing.assert_frame_equal(
        scored.per_case[["case_id", "case_passed", "faithfulness", "answer_correctness"]],
        golden_run.per_case[["case_id", "case_passed", "faithfulness", "answer_correctness"]],
    )
    assert scored.checks.equals(golden_run.checks)


def test_sutoutputs_by_case_id_and_a_loaded_suite(golden_run):
    suite = qaeval.load_suite(GOLDEN)
    by_id = {}
    for row in golden_run.outputs.to_dict("records"):
        by_id[row["case_id"]] = SUTOutput(
            answer=row["answer"],
            citations=[Citation(c["source_id"], c["claim"]) for c in row["citations"]],
            retrieved_ids=list(row["retrieved_ids"]),
            abstained=row["abstained"],
            model_was_called=row["model_was_called"],
            prompt_to_model=row["prompt_to_model"],
        )
    scored = qaeval.score(suite, by_id)
    assert scored.metric("deterministic_pass_rate") == golden_run.metric("deterministic_pass_rate")
    assert scored.per_case["case_passed"].tolist() == golden_run.per_case["case_passed"].tolist()


def test_bad_answers_are_refused_with_their_place_all_at_once(answers):
    bad = answers.copy()
    bad.at[0, "citations"] = ["digital-lending"]  # an id where a citation goes
    bad.at[3, "abstained"] = True  # abstains, yet answers and cites
    bad.at[5, "case_id"] = "no-such-case"
    with pytest.raises(DatasetError) as info:
        qaeval.score(str(GOLDEN), bad)
    text = str(info.value)
    assert "row 0 (single-0001): citations[0] is str, not Citation" in text
    assert "row 3 (single-0004):" in text and "abstain" in text
    assert "an answer for 'no-such-case', which is no case of" in text
    assert "trial 0 has no answer for 1 case(s) of the suite: multi-0002" in text
    assert info.value.exit_code == 65


def test_a_column_that_is_no_field_is_named_once(answers):
    with pytest.raises(DatasetError, match=r"unknown column\(s\) 'question': answers have case_id, trial and"):
        qaeval.score(str(GOLDEN), answers.assign(question="x"))


def test_a_case_answered_twice_and_a_wrong_trial_number(answers):
    twice = pd.concat([answers, answers.iloc[[2]]], ignore_index=True)
    with pytest.raises(DatasetError, match="'single-0003' is answered twice in trial 0"):
        qaeval.score(str(GOLDEN), twice)
    with pytest.raises(DatasetError, match=r"trial is -1, not 0, 1, 2"):
        qaeval.score(str(GOLDEN), answers.assign(trial=-1))


def test_answers_of_several_trials_score_as_trials(answers):
    two = pd.concat([answers.assign(trial=0), answers.assign(trial=1)], ignore_index=True)
    scored = qaeval.score(str(GOLDEN), two)
    assert scored.trials == 2 and set(scored.per_case["trials"]) == {2}
    assert "pass_hat_k" in set(scored.scoreboard["metric"])


def test_a_scored_record_reads_back(answers, tmp_path):
    record = tmp_path / "scored.json"
    scored = qaeval.score(str(GOLDEN), answers, save=str(record))
    again = api.load_run(record)
    assert again.meta.adapter == "(answers given)"
    pd.testing.assert_frame_equal(again.scoreboard, scored.scoreboard)


@pytest.mark.parametrize("trial, shown", [("x", "'x'"), ("1", "'1'"), ([0], "[0]"), (1e300, "1e+300"), (2.5, "2.5")])
def test_a_trial_that_is_no_number_is_refused_with_its_row_not_a_traceback(answers, trial, shown):
    bad = answers.astype({"case_id": object}).assign(trial=[trial] + [0] * (len(answers) - 1))
    with pytest.raises(DatasetError) as info:
        qaeval.score(str(GOLDEN), bad)
    assert f"row 0 (single-0001): trial is {shown}, not 0, 1, 2, ... up to 100" in str(info.value)


def test_a_case_id_that_is_no_text_and_an_output_key_are_refused(answers):
    rows = answers.to_dict("records")
    rows[0]["case_id"] = ["single-0001"]
    rows[1] = {"case_id": rows[1]["case_id"], "output": {"answer": "Paris"}}
    with pytest.raises(DatasetError) as info:
        qaeval.score(str(GOLDEN), rows)
    text = str(info.value)
    assert "[0]: case_id is ['single-0001'], not a case's id" in text
    assert "[1] (single-0002): unknown field(s) 'output'" in text


def test_a_dict_by_case_id_whose_row_names_another_case_is_refused(answers):
    rows = {r["case_id"]: r for r in answers.to_dict("records")}
    rows["single-0001"] = {**rows["single-0001"], "case_id": "single-0002"}
    with pytest.raises(DatasetError, match=r"\['single-0001'\] \(single-0002\): is a dict under 'single-0001' whose"):
        qaeval.score(str(GOLDEN), rows)
