"""The OpenAI-compatible judge against a real HTTP server on 127.0.0.1 that the tests start."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys

import pandas as pd
import pytest
from conftest import GOLDEN

from qaeval import UsageError, api
from qaeval.cli import main
from qaeval.judges.fake_server import FakeJudgeServer
from qaeval.judges.openai import RESPONSE_FORMAT, OpenAIJudge, make_judge, public_url

SECRET = "sk-test-DO-NOT-LEAK-4242"
JUDGE = "qaeval.judges.openai:make_judge"


@pytest.fixture
def env(monkeypatch, tmp_path):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("QAEVAL_JUDGE_MODEL", "judge-model-a")
    monkeypatch.setenv("QAEVAL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("QAEVAL_CACHE_KEY", str(tmp_path / "state" / "cache-key"))
    monkeypatch.setenv("QAEVAL_JUDGE_MAX_RETRIES", "4")
    monkeypatch.setenv("QAEVAL_PROGRESS", "0")
    monkeypatch.chdir(tmp_path)
    return monkeypatch


def serve(env, **options) -> FakeJudgeServer:
    server = FakeJudgeServer(**options).__enter__()
    env.setenv("OPENAI_BASE_URL", server.url)
    return server


@pytest.fixture
def server(env):
    s = serve(env)
    yield s
    s.__exit__(None, None, None)


def judged(**kw):
    return api.run(str(GOLDEN), judge=JUDGE, **kw)


def test_requests_carry_model_temperature_seed_schema_and_rubric(server):
    run = judged()
    assert server.calls == 12, "one call per answered case, none for abstentions"
    body = server.requests[0]
    assert body["model"] == "judge-model-a" and body["temperature"] == 0 and body["seed"] == 0
    assert body["response_format"] == RESPONSE_FORMAT
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert "quote" in body["messages"][0]["content"] and "GOLD ANSWER" in body["messages"][1]["content"]
    assert server.headers[0]["authorization"] == f"Bearer {SECRET}"
    assert run.verdicts["valid"].all()
    assert run.judge_usage["prompt_tokens"] > 0 and run.judge_usage["completion_tokens"] > 0


def test_identical_rerun_makes_zero_calls(server, capsys):
    assert main(["run", "--data", str(GOLDEN), "--judge", JUDGE]) == 0
    first = server.calls
    assert main(["run", "--data", str(GOLDEN), "--judge", JUDGE]) == 0
    assert server.calls == first
    assert "12 from cache" in capsys.readouterr().out


@pytest.mark.parametrize(
    "variable, value",
    [("QAEVAL_JUDGE_MODEL", "judge-model-b"), ("QAEVAL_JUDGE_TEMPERATURE", "0.5"), ("QAEVAL_JUDGE_SEED", "7")],
)
def test_changing_a_key_field_misses_the_cache(server, env, variable, value):
    judged()
    before = server.calls
    env.setenv(variable, value)
    judged()
    assert server.calls == before + 12


def test_changing_the_base_url_or_the_prompt_misses_the_cache(server, env, tmp_path):
    judged()
    with FakeJudgeServer() as other:
        env.setenv("OPENAI_BASE_URL", other.url)
        judged()
        assert other.calls == 12
    env.setenv("OPENAI_BASE_URL", server.url)
    data = tmp_path / "edited"
    data.mkdir()
    text = (
        (GOLDEN / "frozen.jsonl")
        .read_text()
        .replace("How many days can I keep a DVD I borrowed?", "How many days can I keep a DVD I have borrowed?")
    )
    (data / "frozen.jsonl").write_text(text)
    before = server.calls
    api.run(str(data), judge=JUDGE)
    assert server.calls == before + 1, "only the case whose prompt changed is judged again"


def test_rubric_version_is_part_of_the_key():
    a = OpenAIJudge(model="m", base_url="http://127.0.0.1:9/v1", api_key="k")
    b = OpenAIJudge(model="m", base_url="http://127.0.0.1:9/v1", api_key="k", rubric_version="v1")
    from qaeval.scoring.judge import JudgeRequest

    req = JudgeRequest("c", "q", "a", "g", (), ({"role": "user", "content": "x"},))
    assert a._key(req) != b._key(req)
    c = OpenAIJudge(model="m", base_url="http://127.0.0.1:9/v1", api_key="another-key")
    assert a._key(req) == c._key(req), "the API key is not part of the key"


def test_no_cache_flag_bypasses_the_cache(server):
    assert main(["run", "--data", str(GOLDEN), "--judge", JUDGE, "--no-judge-cache"]) == 0
    assert main(["run", "--data", str(GOLDEN), "--judge", JUDGE, "--no-judge-cache"]) == 0
    assert server.calls == 24


def test_concurrency_is_bounded_and_reached(env):
    env.setenv("QAEVAL_JUDGE_CONCURRENCY", "4")
    with FakeJudgeServer(latency=0.15) as s:
        env.setenv("OPENAI_BASE_URL", s.url)
        judged()
        assert s.max_in_flight == 4


def test_transient_failures_are_retried_and_change_nothing(env):
    with FakeJudgeServer() as clean:
        env.setenv("OPENAI_BASE_URL", clean.url)
        env.setenv("QAEVAL_JUDGE_CACHE", "off")
        expected = judged()
    with FakeJudgeServer(fail_every=5) as flaky:  # every fifth request: 429 or 503 with Retry-After
        env.setenv("OPENAI_BASE_URL", flaky.url)
        got = judged()
        assert flaky.failures_sent >= 2
    columns = ["case_id", "axis", "target", "score", "quote", "valid", "error"]
    pd.testing.assert_frame_equal(expected.verdicts[columns], got.verdicts[columns])
    pd.testing.assert_frame_equal(expected.scoreboard, got.scoreboard)


def test_persistent_failure_fails_closed_and_is_never_cached(env):
    env.setenv("QAEVAL_JUDGE_MAX_RETRIES", "1")
    with FakeJudgeServer(fail_always=True) as down:
        env.setenv("OPENAI_BASE_URL", down.url)
        run = judged()
        assert run.verdicts["error"].str.contains("HTTP 5|HTTP 429", regex=True).all()
        assert not run.verdicts["credit"].any()
        assert run.scoreboard.set_index("metric").at["faithfulness_rate", "value"] == 0.0
        answered = run.per_case[~run.per_case["abstained"]]
        assert (
            not answered["case_passed"].any()
            and answered["fail_reasons"].map(lambda rs: "judge_error" in [r.code for r in rs]).all()
        )
        calls = down.calls
        judged()
        assert down.calls > calls, "errors are not cached"


def test_judge_errors_block_the_gate(env, tmp_path, capsys):
    baseline = tmp_path / "b.json"
    assert main(["baseline", "--data", str(GOLDEN), "--out", str(baseline)]) == 0
    env.setenv("QAEVAL_JUDGE_MAX_RETRIES", "0")
    with FakeJudgeServer(fail_always=True) as down:
        env.setenv("OPENAI_BASE_URL", down.url)
        assert main(["gate", "--data", str(GOLDEN), "--baseline", str(baseline), "--judge", JUDGE]) == 1
    out = capsys.readouterr().out
    assert "faithfulness_rate" in out and "<- BLOCK" in out


def test_unparseable_reply_is_a_judge_error_not_a_zero(env):
    with FakeJudgeServer(garbage=True) as s:
        env.setenv("OPENAI_BASE_URL", s.url)
        run = judged()
        assert run.verdicts["error"].str.startswith("unparseable judge reply").all()
        assert run.verdicts["score"].isna().all()
        before = s.calls
        judged()
        assert s.calls == before * 2


def test_server_without_structured_output_falls_back_to_tolerant_parsing(env):
    with FakeJudgeServer(reject_response_format=True) as s:
        env.setenv("OPENAI_BASE_URL", s.url)
        env.setenv("QAEVAL_JUDGE_CONCURRENCY", "1")
        run = judged()
        assert run.verdicts["valid"].all()
        assert "response_format" in s.requests[0] and "response_format" not in s.requests[-1]
        assert s.calls == 13, "one rejected request, then twelve without the schema"


DEADLINE = "the judge did not answer within its deadline of {} s (QAEVAL_JUDGE_TIMEOUT, retries included)"


def test_timeouts_are_judge_errors(env):
    env.setenv("QAEVAL_JUDGE_TIMEOUT", "0.1")
    env.setenv("QAEVAL_JUDGE_MAX_RETRIES", "0")
    with FakeJudgeServer(latency=0.6) as slow:
        env.setenv("OPENAI_BASE_URL", slow.url)
        run = judged()
    assert run.verdicts["error"].eq(DEADLINE.format("0.1")).all()


def test_a_judge_that_drips_its_reply_ends_at_the_deadline_not_never(env, tmp_path):
    """Issue 49, item 15: QAEVAL_JUDGE_TIMEOUT was a per-read timeout, so a server sending one byte every
    half second held `qaeval run` for as long as it dripped. Now it is the whole call's deadline, retries
    included: every judged case gets the judge error naming it, and the run ends."""
    env.setenv("QAEVAL_JUDGE_TIMEOUT", "2")
    with FakeJudgeServer(drip=0.5, drip_bytes=400) as dripping:  # at most 200 s a reply, ended with the server
        env.setenv("OPENAI_BASE_URL", dripping.url)
        done = subprocess.run(
            [sys.executable, "-m", "qaeval", "run", "--data", str(GOLDEN), "--judge", JUDGE, "--save", "run.json"],
            capture_output=True,
            text=True,
            timeout=100,  # generous: the run takes some seconds; before the fix it never ended
        )
        assert dripping.calls >= 1
    assert done.returncode == 0 and "judge calls: 12 (0 from cache, 12 errors)" in done.stdout, done.stderr
    record = json.loads((tmp_path / "run.json").read_text())
    errors = {v["error"] for line in record["cases"] for v in line["verdicts"]}
    assert errors == {DEADLINE.format("2")}, errors


def test_api_key_never_reaches_cache_baseline_report_or_output(env, tmp_path, capsys):
    with FakeJudgeServer() as s:
        env.setenv("OPENAI_BASE_URL", s.url.replace("http://", f"http://user:{SECRET}@"))
        baseline = tmp_path / "b.json"
        assert main(["baseline", "--data", str(GOLDEN), "--judge", JUDGE, "--out", str(baseline)]) == 0
        history = tmp_path / "h.jsonl"
        assert main(["drift", "--data", str(GOLDEN), "--judge", JUDGE, "--timeseries", str(history)]) == 0
        report, record = tmp_path / "gate.html", tmp_path / "gate.json"
        assert (
            main(
                [
                    "gate",
                    "--data",
                    str(GOLDEN),
                    "--judge",
                    JUDGE,
                    "--baseline",
                    str(baseline),
                    "--html",
                    str(report),
                    "--save",
                    str(record),
                ]
            )
            == 0
        )
        run = judged()
    captured = capsys.readouterr()
    cache_bytes = b"".join(p.read_bytes() for p in (tmp_path / "cache").iterdir())
    for blob in (
        baseline.read_text(),
        history.read_text(),
        report.read_text(),
        record.read_text(),
        captured.out,
        captured.err,
        run.verdicts.to_csv(),
        cache_bytes.decode("latin-1"),
        str(run.judge_config.to_dict()),
    ):
        assert SECRET not in blob
    assert run.judge_config.base_url.rstrip("/") == s.url


def test_public_url_strips_credentials():
    assert public_url("https://u:p@example.test:8443/v1?key=x") == "https://example.test:8443/v1"


def test_missing_model_or_key_is_a_usage_error(env, capsys):
    env.delenv("QAEVAL_JUDGE_MODEL")
    env.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    assert main(["run", "--data", str(GOLDEN), "--judge", JUDGE]) == 64
    assert "QAEVAL_JUDGE_MODEL" in capsys.readouterr().err
    env.delenv("OPENAI_API_KEY")
    env.delenv("OPENAI_BASE_URL")
    env.setenv("QAEVAL_JUDGE_MODEL", "m")
    with pytest.raises(UsageError, match="OPENAI_API_KEY"):
        make_judge()


def test_missing_extra_says_how_to_install(env, monkeypatch):
    monkeypatch.setitem(sys.modules, "openai", None)
    with pytest.raises(UsageError, match=r"pip install -e '\.\[openai\]'"):
        OpenAIJudge(model="m", base_url="http://127.0.0.1:9/v1")


def test_cache_is_sqlite_holding_replies_only(server, tmp_path):
    judged()
    db = sqlite3.connect(str(tmp_path / "cache" / "judge-verdicts.sqlite"))
    columns = [r[1] for r in db.execute("PRAGMA table_info(verdicts)")]
    assert columns == ["key", "reply", "prompt_tokens", "completion_tokens", "model", "created", "mac"]
    assert db.execute("SELECT COUNT(*) FROM verdicts").fetchone()[0] == 12


@pytest.mark.parametrize(
    "options, fragment",
    [
        (dict(reply='{"faithfulness": {"quote": "x", "sco'), "unparseable judge reply"),
        (dict(reply="{}"), "none of the expected axes"),
        (dict(reply='{"faithfulness": {"score": 2}, "citations": 5}'), "'citations' is int"),
        (dict(no_choices=True), "unparseable judge reply"),
    ],
)
def test_malformed_replies_are_judge_errors_not_crashes(env, capsys, options, fragment):
    with FakeJudgeServer(**options) as s:
        env.setenv("OPENAI_BASE_URL", s.url)
        assert main(["run", "--data", str(GOLDEN), "--judge", JUDGE]) == 0
        run = judged()
    assert run.verdicts["error"].str.contains(fragment, regex=False).all()
    assert not run.per_case["case_passed"][~run.per_case["abstained"]].any()
    assert "Traceback" not in capsys.readouterr().err


def test_a_corrupted_cache_file_is_moved_aside_and_rebuilt(server, tmp_path):
    judged()
    path = tmp_path / "cache" / "judge-verdicts.sqlite"
    for extra in path.parent.glob("judge-verdicts.sqlite-*"):
        extra.unlink()
    path.write_bytes(b"this is not a database" * 100)
    with pytest.warns(UserWarning, match="moved aside"):
        run = judged()
    assert run.verdicts["valid"].all() and server.calls == 24
    assert list(path.parent.glob("judge-verdicts.sqlite.corrupt-*"))
    judged()
    assert server.calls == 24, "the rebuilt cache answers the next run"


def test_a_cached_reply_that_no_longer_parses_is_a_miss(server, tmp_path):
    judged()
    db = sqlite3.connect(str(tmp_path / "cache" / "judge-verdicts.sqlite"))
    key = db.execute("SELECT key FROM verdicts LIMIT 1").fetchone()[0]
    db.execute("UPDATE verdicts SET reply = ? WHERE key = ?", ("{truncated", key))
    db.commit()
    db.close()
    with pytest.warns(UserWarning, match="1 cached judge verdict"):
        run = judged()
    assert run.verdicts["error"].isna().all() and server.calls == 13, "only the broken entry is asked again"
    assert run.judge_usage["cached"] == 11


def test_settings_flags_reach_the_judge_without_the_environment(server, env, capsys):
    env.delenv("QAEVAL_JUDGE_MODEL")
    assert (
        main(
            ["run", "--data", str(GOLDEN), "--judge", JUDGE, "--judge-model", "flag-model", "--judge-concurrency", "2"]
        )
        == 0
    )
    assert {b["model"] for b in server.requests} == {"flag-model"}
    assert "openai:flag-model" in capsys.readouterr().out


ZERO = json.dumps(
    {
        "faithfulness": {"quote": "", "rationale": "unsupported", "score": 0},
        "answer_correctness": {"quote": "", "rationale": "wrong", "score": 0},
        "citations": [],
    }
)


def cache_rows(tmp_path) -> dict[str, str]:
    with sqlite3.connect(str(tmp_path / "cache" / "judge-verdicts.sqlite")) as db:
        return dict(db.execute("SELECT key, reply FROM verdicts"))


def faithfulness(run) -> float:
    return run.scoreboard.set_index("metric").at["faithfulness_rate", "value"]


def test_a_cache_row_edited_to_a_perfect_score_is_not_used(server, tmp_path):
    perfect = cache_rows(tmp_path) if judged() else {}  # what full marks look like, per key
    (tmp_path / "cache" / "judge-verdicts.sqlite").unlink()
    server.reply = ZERO
    assert faithfulness(judged()) == 0.0 and server.calls == 24
    with sqlite3.connect(str(tmp_path / "cache" / "judge-verdicts.sqlite")) as db:
        db.executemany("UPDATE verdicts SET reply = ? WHERE key = ?", [(r, k) for k, r in perfect.items()])
    with pytest.warns(UserWarning, match="12 cached judge verdict"):
        run = judged()
    assert server.calls == 36, "every edited row was a miss and was asked again"
    assert faithfulness(run) == 0.0 and run.judge_usage["cached"] == 0
    assert set(cache_rows(tmp_path).values()) == {ZERO}, "and rewritten with the judge's real reply"
    judged()
    assert server.calls == 36, "rewritten rows authenticate"


def test_the_cache_key_is_made_once_outside_the_cache_folder_and_private(server, tmp_path):
    judged()
    key = tmp_path / "state" / "cache-key"
    assert (key.stat().st_mode & 0o777) == 0o600 and len(key.read_text().strip()) == 64
    assert not any(p.name == "cache-key" for p in (tmp_path / "cache").iterdir())
    first = key.read_text()
    judged()
    assert key.read_text() == first and server.calls == 12


def test_another_key_authenticates_nothing(server, env, tmp_path):
    judged()
    env.setenv("QAEVAL_CACHE_KEY", str(tmp_path / "other-key"))
    with pytest.warns(UserWarning, match="failed authentication"):
        judged()
    assert server.calls == 24


def test_an_unsigned_cache_from_before_is_asked_again_and_signed(server, tmp_path):
    path = tmp_path / "cache" / "judge-verdicts.sqlite"
    path.parent.mkdir()
    with sqlite3.connect(str(path)) as db:  # the table as qaeval wrote it before rows were signed
        db.execute(
            "CREATE TABLE verdicts (key TEXT PRIMARY KEY, reply TEXT NOT NULL, prompt_tokens INTEGER, "
            "completion_tokens INTEGER, model TEXT, created TEXT DEFAULT CURRENT_TIMESTAMP)"
        )
    judged()
    with sqlite3.connect(str(path)) as db:
        keys = [k for (k,) in db.execute("SELECT key FROM verdicts")]
        db.executemany("UPDATE verdicts SET mac = NULL, reply = ? WHERE key = ?", [(ZERO, k) for k in keys])
    with pytest.warns(UserWarning, match="12 cached"):
        run = judged()
    assert server.calls == 24 and run.verdicts["valid"].all()


def test_a_bad_cache_key_file_is_a_file_access_error(server, tmp_path, capsys):
    key = tmp_path / "state" / "cache-key"
    key.parent.mkdir()
    key.write_text("not a key")
    assert main(["run", "--data", str(GOLDEN), "--judge", JUDGE]) == 74
    assert "the judge cache's key is not 64 hex digits" in capsys.readouterr().err


SURROGATE = json.dumps(
    {
        "faithfulness": {"quote": "", "rationale": "HALF broken", "score": 0},
        "answer_correctness": {"quote": "", "rationale": "x", "score": 0},
        "citations": [],
    }
).replace("HALF", "\\ud800")  # JSON's escape for half a pair


def test_a_reply_with_an_unpaired_surrogate_is_a_judge_error_never_cached(env, tmp_path, capsys):
    assert "\\ud800" in SURROGATE and json.loads(SURROGATE)["faithfulness"]["rationale"] == "\ud800 broken"
    record = tmp_path / "gate.json"
    codes = {}
    for name, reply in (("surrogate", SURROGATE), ("garbage", "I think it is fine.")):
        with FakeJudgeServer(reply=reply) as s:
            env.setenv("OPENAI_BASE_URL", s.url)
            codes[name] = main(
                [
                    "gate",
                    "--data",
                    str(GOLDEN),
                    "--baseline",
                    str(GOLDEN / "ci-baseline.json"),
                    "--judge",
                    JUDGE,
                    "--save",
                    str(record),
                ]
            )
            if name == "surrogate":
                saved = api.load_run(record)
                assert saved.run.verdicts["error"].str.contains("unpaired surrogate").all()
                assert not (tmp_path / "cache" / "judge-verdicts.sqlite").exists() or not cache_rows(tmp_path)
                main(["run", "--data", str(GOLDEN), "--judge", JUDGE])
                assert s.calls == 24, "never cached: the rerun asks again"
    assert codes["surrogate"] == codes["garbage"], "an unparseable reply is an unparseable reply"
    assert "Traceback" not in capsys.readouterr().err
