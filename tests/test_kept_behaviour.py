"""What a restructuring must not change (issue 48's shorter package): each test here passed before the
package was shortened and failed on a first draft of it, which a review caught."""

from __future__ import annotations

import dataclasses
import json
import pickle
import urllib.request
from urllib.error import HTTPError

import pytest

from qaeval import Citation, SUTOutput, UsageError

NEEDS_SDK = "the openai extra is not installed (pip install -e '.[openai]')"


def test_a_citation_stays_a_citation_in_asdict_and_equals_its_subclass():
    class Mine(Citation):
        __slots__ = ()

    copied = dataclasses.asdict(SUTOutput(answer="a", citations=[Citation("s1", "a")]))
    assert copied["citations"] == [Citation("s1", "a")] and isinstance(copied["citations"][0], Citation)
    assert Citation("s1", "c") == Mine("s1", "c") and hash(Citation("s1", "c")) == hash(Mine("s1", "c"))
    assert pickle.loads(pickle.dumps(Mine("s1", "c"))) == Citation("s1", "c")
    assert repr(Citation("s1", "c")) == "Citation(source_id='s1', claim='c')"


def _post(url: str) -> dict:
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hello"}]}).encode()
    request = urllib.request.Request(url + "/chat/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as reply:
        return json.load(reply)


def test_the_fake_server_numbers_its_requests_whatever_a_test_does_to_its_list():
    from qaeval.judges.fake_server import FakeJudgeServer

    with FakeJudgeServer(fail_every=3) as server:
        assert _post(server.url)["id"] == "chatcmpl-1"
        server.requests.clear()  # a test resetting what it inspects between phases
        assert _post(server.url)["id"] == "chatcmpl-2"
        with pytest.raises(HTTPError):  # the third request is the failing one, counted across the clear
            _post(server.url)


@pytest.mark.parametrize(
    ("given", "refused"),
    [({"model": ""}, "no judge model"), ({"model": "m", "concurrency": 0}, "concurrency must be at least 1")],
)
def test_the_http_judge_checks_its_arguments_before_it_makes_a_client(given, refused):
    """A missing model with a malformed endpoint is the usage error about the model (exit 64), not the
    HTTP library's InvalidURL from building the client first."""
    pytest.importorskip("openai", reason=NEEDS_SDK)
    from qaeval.judges.openai import OpenAIJudge

    with pytest.raises(UsageError, match=refused):
        OpenAIJudge(base_url="http://[::1", **given)


def test_the_generator_checks_its_model_before_it_makes_a_client():
    pytest.importorskip("openai", reason=NEEDS_SDK)
    from qaeval.judges.generator import OpenAIGenerator
    from qaeval.scoring.judge import JudgeSettings

    with pytest.raises(UsageError, match="no generator model"):
        OpenAIGenerator(JudgeSettings(base_url="http://[::1", cache=False), model="")


def test_a_generator_call_that_breaks_inside_the_sdk_costs_its_candidate_only(monkeypatch):
    """A completion call that raises a TypeError or IndexError (an SDK or server gone odd) is that
    request's error reply, as before; it used to escape ``generate`` after the shortening."""
    pytest.importorskip("openai", reason=NEEDS_SDK)
    from qaeval.judges import openai as chat
    from qaeval.judges.generator import GenerationRequest, OpenAIGenerator
    from qaeval.scoring.judge import JudgeSettings

    def broken(*args, **kwargs):
        raise TypeError("'NoneType' object is not subscriptable")

    monkeypatch.setattr(chat, "create_completion", broken)
    generator = OpenAIGenerator(JudgeSettings(base_url="http://127.0.0.1:9/v1", cache=False), model="m")
    request = GenerationRequest("r1", "single", (), ({"role": "user", "content": "hello"},))
    [reply] = generator.generate([request])
    assert reply.request_id == "r1" and reply.error == "a completion without a message", reply


def test_a_failed_case_carries_its_text_for_the_pytest_report():
    from qaeval.pytest_plugin import CaseFailed

    assert CaseFailed("single-0001: answer missing").text == "single-0001: answer missing"


def test_settings_from_params_read_only_the_parameter_table():
    """``from_params`` takes a command's checked parameters: a key that is no parameter (``bootstrap_seed``,
    ``executor_label``) is not read, and ``adaptive`` is a bool whatever was given."""
    from qaeval.lowlevel import RunSettings

    s = RunSettings.from_params({"bootstrap_seed": 7, "executor_label": "mine", "adaptive": 0, "trials": 3})
    assert (s.bootstrap_seed, s.executor_label, s.trials) == (0, None, 3)
    assert s.adaptive is False


def test_a_judge_memo_entry_is_compared_and_hashed_by_identity():
    from qaeval.scoring.judge import JudgeResponse, MemoEntry

    a, b = MemoEntry(JudgeResponse("c")), MemoEntry(JudgeResponse("c"))
    assert a != b and len({a, b}) == 2


def test_the_langchain_adapter_does_not_show_the_users_chain_in_its_repr():
    pytest.importorskip("langchain_core", reason="the langchain extra is not installed (pip install -e '.[langchain]')")
    from qaeval.integrations.langchain import LangChainAdapter

    shown = repr(LangChainAdapter(lambda r: r))
    assert shown.startswith("<qaeval.integrations.langchain.LangChainAdapter object at "), shown
