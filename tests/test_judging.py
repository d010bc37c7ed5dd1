"""Layer 3: quote before score, weakest citation, fail closed, the versioned rubric."""

from __future__ import annotations

import pytest
from conftest import make_case
from helpers import S1, S2, frames, output

from qaeval import UsageError
from qaeval.data.schema import AXES
from qaeval.judges.offline import OfflineJudge, contains_gold
from qaeval.scoring.evaluate import score_outputs
from qaeval.scoring.judge import AxisVerdict, JudgeConfig, JudgeResponse, hardest_decoy
from qaeval.scoring.rubric import Rubric, parse_verdict_json


class Scripted:
    """A judge that answers every request with the same verdicts (or an error)."""

    def __init__(self, verdicts=None, error=None):
        self.config = JudgeConfig(name="scripted", model="fixed")
        self.verdicts, self.error, self.requests = verdicts or [], error, []

    def judge(self, requests):
        self.requests.extend(requests)
        return [JudgeResponse(r.case_id, list(self.verdicts), error=self.error) for r in requests]


GOOD = [
    AxisVerdict("faithfulness", 2, "Eastside Branch opened in 1964", "ok"),
    AxisVerdict("answer_correctness", 2, "the Eastside Branch opened in 1964", "ok"),
    AxisVerdict("citation_correctness", 2, "opened in 1964 on Dunmore Street", "ok", target="s1"),
]


def verdicts(tmp_path, judge, **fields):
    suite, _, outs, _ = frames(tmp_path, outputs=[output(**fields)])
    return score_outputs(suite, outs, judge).verdicts.set_index(["axis", "target"])


def test_valid_verdicts_get_credit_and_carry_the_config(tmp_path):
    v = verdicts(tmp_path, Scripted(GOOD))
    assert v["valid"].all() and v["credit"].all()
    assert set(v["config"]) == {"scripted:fixed t=0 seed=0 rubric=v2"}


def test_quote_not_in_cited_text_is_invalid_and_never_passes(tmp_path):
    bad = [AxisVerdict("faithfulness", 2, "Eastside Branch opened in 1965", "made up"), *GOOD[1:]]
    v = verdicts(tmp_path, Scripted(bad))
    row = v.loc[("faithfulness", "")]
    assert not row["valid"] and not row["credit"] and "not in the text" in row["invalid_reason"]
    assert row["score"] == 2, "the judge's score is recorded, but does not count"


def test_answer_correctness_quote_must_come_from_the_answer(tmp_path):
    bad = [GOOD[0], AxisVerdict("answer_correctness", 2, "Northgate Branch opened in 1978", "quoted a source"), GOOD[2]]
    assert not verdicts(tmp_path, Scripted(bad)).loc[("answer_correctness", ""), "valid"]


def test_positive_score_without_quote_and_off_scale_score_are_invalid(tmp_path):
    bad = [AxisVerdict("faithfulness", 1, "", ""), AxisVerdict("answer_correctness", 3, GOOD[1].quote, ""), GOOD[2]]
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
    both = [{"source_id": "s1", "claim": S1}, {"source_id": "s2", "claim": S2}]
    judge = Scripted(
        [
            *GOOD[:2],
            AxisVerdict("citation_correctness", 2, "opened in 1964 on Dunmore", "", target="s1"),
            AxisVerdict("citation_correctness", 1, "Northgate Branch opened in 1978", "", target="s2"),
        ]
    )
    suite, cases, outs, sources = frames(tmp_path, outputs=[output(answer=f"{S1} {S2}", citations=both)])
    run = score_outputs(suite, outs, judge)
    assert run.per_case.loc[0, "citation_correctness"] == 1


def test_abstained_and_failed_cases_cost_no_judge_call(tmp_path):
    judge = Scripted(GOOD)
    suite, _, outs, _ = frames(
        tmp_path,
        [make_case(id="a"), make_case(id="b")],
        [output("a", abstained=True, answer="", citations=[]), output("b", error="boom")],
    )
    assert score_outputs(suite, outs, judge).verdicts.empty and judge.requests == []


def test_one_request_per_answered_case_with_hardest_decoy(tmp_path):
    judge = Scripted(GOOD)
    suite, _, outs, _ = frames(tmp_path)
    score_outputs(suite, outs, judge)
    [req] = judge.requests
    assert req.citations[0].decoy_id == "s2", "the Northgate snippet is the most similar uncited one"
    assert req.messages[0]["role"] == "system" and "quote" in req.messages[0]["content"]
    assert req.question in req.messages[1]["content"] and "1964" in req.messages[1]["content"]


def test_hardest_decoy_is_the_most_similar_uncited_snippet():
    assert hardest_decoy("Eastside opened in 1964", [("x", "printing costs"), ("y", "Eastside opened 1965")])[0] == "y"
    assert hardest_decoy("anything", []) == (None, None)


def test_rubric_is_versioned_text_in_the_package():
    for version in ("v1", "v2"):
        rubric = Rubric.load(version)
        assert rubric.version == version and "quote" in rubric.system
        for axis in AXES:
            assert axis in rubric.system
    assert "at least three content words" in Rubric.load("v2").system
    with pytest.raises(UsageError, match="no rubric version"):
        Rubric.load("v9")


def test_a_one_character_quote_earns_no_credit(tmp_path):
    tiny = [AxisVerdict("faithfulness", 2, "a", "the quote is in the text"), *GOOD[1:]]
    row = verdicts(tmp_path, Scripted(tiny)).loc[("faithfulness", "")]
    assert not row["valid"] and not row["credit"] and "too small to check" in row["invalid_reason"]


def test_a_short_text_may_be_quoted_whole(tmp_path):
    judge = Scripted([GOOD[0], AxisVerdict("answer_correctness", 2, "$40", "it is the whole answer"), GOOD[2]])
    v = verdicts(tmp_path, judge, answer="$40", citations=[{"source_id": "s1", "claim": S1}])
    assert v.loc[("answer_correctness", ""), "valid"]
    judge = Scripted([GOOD[0], AxisVerdict("answer_correctness", 2, "$40", "part of a longer answer"), GOOD[2]])
    v = verdicts(
        tmp_path, judge, answer="A non-resident card costs $40 a year.", citations=[{"source_id": "s1", "claim": S1}]
    )
    assert not v.loc[("answer_correctness", ""), "valid"]


class Raises:
    config = JudgeConfig(name="raises", model="x")

    def __init__(self, error: BaseException):
        self.error = error

    def judge(self, requests):
        raise self.error


@pytest.mark.parametrize(
    "error, fragment",
    [
        (RuntimeError("socket closed"), "the judge raised RuntimeError: socket closed"),
        (SystemExit(0), "the judge called sys.exit(0)"),
    ],
)
def test_a_judge_that_raises_or_exits_gives_judge_errors_not_a_crash(tmp_path, error, fragment):
    v = verdicts(tmp_path, Raises(error))
    assert v["error"].eq(fragment).all() and not v["credit"].any()


class Answers:
    def __init__(self, responses):
        self.config = JudgeConfig(name="odd", model="x")
        self.responses = responses

    def judge(self, requests):
        return self.responses(requests)


@pytest.mark.parametrize(
    "responses, fragment",
    [
        (lambda reqs: [], "the judge returned 0 responses for 1 requests"),
        (lambda reqs: [JudgeResponse("someone-else", GOOD)], "in the place of 'case-0001'"),
        (lambda reqs: ["not a response"], "not a JudgeResponse"),
        (lambda reqs: 5, "the judge returned int, not a list"),
        (lambda reqs: [JudgeResponse(reqs[0].case_id, "nonsense")], "not a list"),
        (
            lambda reqs: [
                JudgeResponse(
                    reqs[0].case_id,
                    [
                        *GOOD[:2],
                        AxisVerdict(
                            "citation_correctness",
                            2,
                            "opened in 1964 on Dunmore Street",
                            "half a pair \ud800",
                            target="s1",
                        ),
                    ],
                )
            ],
            "not valid Unicode (an unpaired surrogate)",
        ),
        (lambda reqs: [JudgeResponse(reqs[0].case_id, error="down \udc80")], "down \\udc80"),
    ],
)
def test_a_judge_answering_wrongly_fails_closed_per_case(tmp_path, responses, fragment):
    v = verdicts(tmp_path, Answers(responses))
    assert v["error"].str.contains(fragment, regex=False).all() and not v["credit"].any()


def test_a_judge_without_config_is_a_usage_error(tmp_path):
    class NoConfig:
        def judge(self, requests):
            return []

    with pytest.raises(UsageError, match="has no config"):
        verdicts(tmp_path, NoConfig())


@pytest.mark.parametrize(
    "reply, fragment",
    [
        ('{"faithfulness": {"quote": "x", "score": 2}', "Expecting ',' delimiter"),  # truncated
        ("Sorry, I cannot grade this.", "no JSON object"),
        ("{}", "none of the expected axes"),
        ('{"faithfulness": {"score": 2}, "citations": 5}', "'citations' is int"),
        ('{"faithfulness": {"score": 2, "score": 0}}', "appears twice"),
        (None, "not text"),
    ],
)
def test_malformed_replies_are_value_errors(reply, fragment):
    with pytest.raises(ValueError, match=fragment):
        parse_verdict_json(reply)


def test_offline_judge_credits_an_answer_that_contains_the_gold_answer(tmp_path):
    """A quoted passage that contains the gold answer ("1964") is right (2), whatever its token F1: SQuAD-style
    containment after normalisation, as ALCE's str_em. A score of 1 counts as wrong, so it was 0 before."""
    v = verdicts(tmp_path, OfflineJudge())
    assert v.loc[("faithfulness", ""), "score"] == 2 and v.loc[("faithfulness", ""), "valid"]
    row = v.loc[("answer_correctness", "")]
    assert row["score"] == 2 and row["credit"], "1964 is in the answer: right, though F1 is low"
    assert "the answer contains the gold answer" in row["rationale"]
    assert v.loc[("citation_correctness", "s1"), "score"] == 2


def test_offline_judge_containment_is_on_whole_words_after_normalisation():
    assert contains_gold("The Eastside Branch opened in 1964.", "1964")
    assert contains_gold("DVDs may be borrowed for 7 days.", "Seven days") is False  # words, not meaning
    assert contains_gold("It is THE Harborview Room, on floor 2.", "Harborview room")
    assert contains_gold("It is the Harborview Room.", "the  Harborview  Room!")
    assert not contains_gold("Membership costs $15 a year.", "5"), "5 is not in 15"
    assert not contains_gold("Days: 7 or more.", "7 days"), "the gold words must come together, in order"
    assert not contains_gold("anything", "")


def test_offline_judge_gives_no_credit_to_unsupported_answer(tmp_path):
    v = verdicts(
        tmp_path,
        OfflineJudge(),
        answer="The library lends telescopes on weekends.",
        citations=[{"source_id": "s1", "claim": "The library lends telescopes on weekends."}],
    )
    assert v.loc[("faithfulness", ""), "score"] == 0 and not v.loc[("faithfulness", ""), "credit"]
    assert v.loc[("citation_correctness", "s1"), "score"] == 0


def test_tolerant_parsing_of_fenced_json():
    text = (
        'Sure!\n```json\n{"faithfulness": {"quote": "a", "rationale": "r", "score": 2},'
        ' "answer_correctness": {"quote": "", "rationale": "r", "score": 0},'
        ' "citations": [{"source_id": "s1", "quote": "a", "rationale": "r", "score": 1}]}\n```'
    )
    parsed = parse_verdict_json(text)
    assert [(v.axis, v.score, v.target) for v in parsed] == [
        ("faithfulness", 2, ""),
        ("answer_correctness", 0, ""),
        ("citation_correctness", 1, "s1"),
    ]


def test_a_citation_with_no_other_passage_is_weighed_without_a_decoy_and_says_so():
    from qaeval.scoring.judge import JudgeRequest
    from qaeval.scoring.rubric import CitedSource

    text = "The Harbor branch opened in 1931 beside the ferry terminal."
    cited = (CitedSource("p1", text, text, None, None),)
    request = JudgeRequest("c1", "When did the Harbor branch open?", text, "1931", cited, [])
    verdict = next(v for v in OfflineJudge().judge_one(request).verdicts if v.axis == "citation_correctness")
    assert verdict.score == 2 and "None" not in verdict.rationale
    assert verdict.rationale.endswith("no other passage to weigh it against")


def test_a_judge_without_a_seed_is_labelled_without_one():
    assert JudgeConfig(name="kw", model="example", seed=None).label() == "kw:example t=0 rubric=v2"
    assert "seed=7" in JudgeConfig(name="kw", model="example", seed=7).label()
