"""Layer 3: quote before score, weakest citation, fail closed, the versioned rubric."""

from __future__ import annotations

from conftest import make_case
from helpers import S1, S2, frames, output

from qaeval.evaluation import score_outputs
from qaeval.judging import (
    AXES, AxisVerdict, JudgeConfig, JudgeResponse, OfflineJudge, Rubric, build_requests, hardest_decoy,
    parse_verdict_json, score_with_judge,
)


class Scripted:
    """A judge that answers every request with the same verdicts (or an error)."""

    def __init__(self, verdicts=None, error=None):
        self.config = JudgeConfig(name="scripted", model="fixed")
        self.verdicts, self.error, self.requests = verdicts or [], error, []

    def judge(self, requests):
        self.requests.extend(requests)
        return [JudgeResponse(r.case_id, list(self.verdicts), error=self.error) for r in requests]


GOOD = [AxisVerdict("faithfulness", 2, "opened in 1964", "ok"),
        AxisVerdict("answer_correctness", 2, "1964", "ok"),
        AxisVerdict("citation_correctness", 2, "opened in 1964", "ok", target="s1")]


def verdicts(tmp_path, judge, **fields):
    _, cases, outs, sources = frames(tmp_path, outputs=[output(**fields)])
    return score_with_judge(judge, cases, outs, sources).set_index(["axis", "target"])


def test_valid_verdicts_get_credit_and_carry_the_config(tmp_path):
    v = verdicts(tmp_path, Scripted(GOOD))
    assert v["valid"].all() and v["credit"].all()
    assert set(v["config"]) == {"scripted:fixed t=0 seed=0 rubric=v1"}


def test_quote_not_in_cited_text_is_invalid_and_never_passes(tmp_path):
    bad = [AxisVerdict("faithfulness", 2, "opened in 1965", "made up"), *GOOD[1:]]
    v = verdicts(tmp_path, Scripted(bad))
    row = v.loc[("faithfulness", "")]
    assert not row["valid"] and not row["credit"] and "not in the text" in row["invalid_reason"]
    assert row["score"] == 2, "the judge's score is recorded, but does not count"


def test_answer_correctness_quote_must_come_from_the_answer(tmp_path):
    bad = [GOOD[0], AxisVerdict("answer_correctness", 2, "Northgate", "quoted a snippet"), GOOD[2]]
    assert not verdicts(tmp_path, Scripted(bad)).loc[("answer_correctness", ""), "valid"]


def test_positive_score_without_quote_and_off_scale_score_are_invalid(tmp_path):
    bad = [AxisVerdict("faithfulness", 1, "", ""), AxisVerdict("answer_correctness", 3, "1964", ""), GOOD[2]]
    v = verdicts(tmp_path, Scripted(bad))
    assert "no supporting quote" in v.loc[("faithfulness", ""), "invalid_reason"]
    assert "not 0, 1 or 2" in v.loc[("answer_correctness", ""), "invalid_reason"]


def test_judge_error_is_recorded_distinct_from_zero_and_fails_closed(tmp_path):
    v = verdicts(tmp_path, Scripted(error="HTTP 500 after 3 retries"))
    assert v["error"].eq("HTTP 500 after 3 retries").all()
    assert v["score"].isna().all() and not v["credit"].any()


def test_missing_axis_in_reply_is_invalid(tmp_path):
    v = verdicts(tmp_path, Scripted(GOOD[:1]))
    assert v.loc[("answer_correctness", ""), "invalid_reason"] == "no verdict returned for this axis"


def test_weakest_citation_sets_citation_correctness(tmp_path):
    both = [{"snippet_id": "s1", "claim": S1}, {"snippet_id": "s2", "claim": S2}]
    judge = Scripted([*GOOD[:2], AxisVerdict("citation_correctness", 2, "1964", "", target="s1"),
                      AxisVerdict("citation_correctness", 1, "Northgate", "", target="s2")])
    suite, cases, outs, sources = frames(tmp_path, outputs=[output(answer=f"{S1} {S2}", citations=both)])
    run = score_outputs(suite, outs, judge)
    assert run.per_case.loc[0, "citation_correctness"] == 1


def test_abstained_and_failed_cases_cost_no_judge_call(tmp_path):
    judge = Scripted(GOOD)
    _, cases, outs, sources = frames(tmp_path, [make_case(id="a"), make_case(id="b")],
                                     [output("a", abstained=True, answer="", citations=[]), output("b", error="boom")])
    assert score_with_judge(judge, cases, outs, sources).empty and judge.requests == []


def test_one_request_per_answered_case_with_hardest_decoy(tmp_path):
    _, cases, outs, sources = frames(tmp_path)
    [req] = build_requests(cases, outs, sources)
    assert req.citations[0].decoy_id == "s2", "the Northgate snippet is the most similar uncited one"
    assert req.messages[0]["role"] == "system" and "quote" in req.messages[0]["content"]
    assert req.question in req.messages[1]["content"] and "1964" in req.messages[1]["content"]


def test_hardest_decoy_is_the_most_similar_uncited_snippet():
    assert hardest_decoy("Eastside opened in 1964", [("x", "printing costs"), ("y", "Eastside opened 1965")])[0] == "y"
    assert hardest_decoy("anything", []) == (None, None)


def test_rubric_is_versioned_text_in_the_package():
    rubric = Rubric.load("v1")
    assert rubric.version == "v1" and "quote" in rubric.system
    for axis in AXES:
        assert axis in rubric.system


def test_offline_judge_rewards_quotes_and_penalises_verbose_answers(tmp_path):
    v = verdicts(tmp_path, OfflineJudge())
    assert v.loc[("faithfulness", ""), "score"] == 2 and v.loc[("faithfulness", ""), "valid"]
    assert v.loc[("answer_correctness", ""), "score"] == 1, "1964 is in the answer but F1 is low"
    assert v.loc[("citation_correctness", "s1"), "score"] == 2


def test_offline_judge_gives_no_credit_to_unsupported_answer(tmp_path):
    v = verdicts(tmp_path, OfflineJudge(), answer="The library lends telescopes on weekends.",
                 citations=[{"snippet_id": "s1", "claim": "The library lends telescopes on weekends."}])
    assert v.loc[("faithfulness", ""), "score"] == 0 and not v.loc[("faithfulness", ""), "credit"]
    assert v.loc[("citation_correctness", "s1"), "score"] == 0


def test_tolerant_parsing_of_fenced_json():
    text = 'Sure!\n```json\n{"faithfulness": {"quote": "a", "rationale": "r", "score": 2},' \
           ' "answer_correctness": {"quote": "", "rationale": "r", "score": 0},' \
           ' "citations": [{"snippet_id": "s1", "quote": "a", "rationale": "r", "score": 1}]}\n```'
    parsed = parse_verdict_json(text)
    assert [(v.axis, v.score, v.target) for v in parsed] == [
        ("faithfulness", 2, ""), ("answer_correctness", 0, ""), ("citation_correctness", 1, "s1")]
