"""Whole numbers past 64 bits from user code or a judge's server: refused or dropped where they arrive in the
harness, never a traceback (exit 70) and never a record that qaeval then refuses to read back."""

from __future__ import annotations

import pytest

from qaeval.core.errors import UsageError
from qaeval.host.wire import config_from_plain
from qaeval.scoring.custom import valid_unit
from qaeval.scoring.judge import AxisVerdict, JudgeConfig, JudgeRequest, JudgeResponse, verdict_frame
from qaeval.scoring.rubric import CitedSource


def test_a_metric_unit_past_any_float_is_not_a_unit():
    """A check's process that sends 400-digit numbers (it can patch its own encoder) crashed the run."""
    assert valid_unit([10**400, 10**401]) is None
    assert valid_unit([1, 2]) == (1.0, 2.0)


def test_token_counts_past_64_bits_are_dropped_not_a_crash():
    """An OpenAI-compatible server's usage, or a hostile judge host, said 2**64 prompt tokens: pandas
    overflowed building the verdicts (exit 70)."""
    text = "The branch hours are nine to five on weekdays."
    req = JudgeRequest(
        case_id="c1",
        question="q",
        answer=text,
        gold_answer=None,
        citations=(CitedSource("s1", text, text, None, None),),
        messages=(),
    )
    verdicts = [AxisVerdict("faithfulness", 2, text, ""), AxisVerdict("answer_correctness", 0, "", "")]
    responses = [JudgeResponse("c1", verdicts, prompt_tokens=2**64, completion_tokens=2**63 - 1)]
    frame = verdict_frame([req], responses, JudgeConfig(name="j", model="m"))
    assert frame["prompt_tokens"].isna().all() and (frame["completion_tokens"] == 2**63 - 1).all()


def test_a_judge_seed_past_64_bits_is_refused_before_the_run():
    """A record keeps 64-bit whole numbers: a run saved with seed 2**64 was refused by every command after."""
    plain = {"name": "j", "model": "m", "prompt_version": "v1", "temperature": 0, "seed": 2**64, "base_url": None}
    with pytest.raises(UsageError, match="seed of 65 bits, out of range"):
        config_from_plain(plain)
    assert config_from_plain({**plain, "seed": 2**63 - 1}).seed == 2**63 - 1
