"""Custom judges and notify hooks run in their own processes: nothing they do there (exit, patch the
verdict classes, hang, misreport) can choose a verdict, an exit code, or hang the command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import GOLDEN, ROOT

from qaeval import api
from qaeval.commands.common import check_parameters, make_judge
from qaeval.core.errors import UsageError
from qaeval.host import clients
from qaeval.scoring.judge import JudgeSettings

SABOTEUR = "qaeval.system.saboteur:make_adapter"
BASELINE = str(GOLDEN / "ci-baseline.json")


def cli(*args: str, cwd: Path, timeout: float = 300, **env: str) -> tuple[subprocess.CompletedProcess, float]:
    """The real command line in a fresh interpreter, so a judge that ends its process would end this one."""
    environ = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT)]),
        "QAEVAL_PROGRESS": "0",
        **env,
    }
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "qaeval.cli", *args],
        cwd=cwd,
        env=environ,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return done, time.monotonic() - start


def gate(tmp_path: Path, judge: str, *extra: str) -> tuple[subprocess.CompletedProcess, float]:
    return cli(
        "gate",
        "--data",
        str(GOLDEN),
        "--adapter",
        SABOTEUR,
        "--baseline",
        BASELINE,
        "--judge",
        judge,
        "--save",
        str(tmp_path / "gate.json"),
        *extra,
        cwd=tmp_path,
    )


def saved(tmp_path: Path):
    return api.load_run(tmp_path / "gate.json")


def test_a_judge_that_calls_os_exit_cannot_end_the_gate(tmp_path):
    done, _ = gate(tmp_path, "hostile_plugins:make_exiting_judge")
    assert done.returncode == 1 and "GATE: BLOCK" in done.stdout, done.stdout + done.stderr
    verdicts = saved(tmp_path).run.verdicts
    assert verdicts["error"].str.contains("the judge's process exited with code 0 while judging").all()


def test_a_judge_that_patches_the_gate_result_does_not_pass_the_gate(tmp_path):
    done, _ = gate(tmp_path, "hostile_plugins:make_patching_judge")
    assert done.returncode == 1 and "GATE: BLOCK" in done.stdout and "GATE: PASS" not in done.stdout
    assert not saved(tmp_path).ok


def test_a_judge_that_hangs_is_killed_within_its_deadline(tmp_path):
    done, elapsed = gate(tmp_path, "hostile_plugins:make_hanging_judge", "--judge-timeout", "1")
    assert done.returncode == 1 and "GATE: BLOCK" in done.stdout
    run = saved(tmp_path).run
    errors = run.verdicts.drop_duplicates("case_id")["error"]
    assert len(errors) == 15 and errors.str.contains("the judge did not answer within 1 s").all()  # one chunk
    assert elapsed < 60, f"the gate took {elapsed:.1f} s with a judge that never answers"


def test_after_a_lost_chunk_the_judge_is_rebuilt_for_the_next(tmp_path, monkeypatch):
    monkeypatch.setattr(clients, "CHUNK", 4)
    monkeypatch.setenv("QAEVAL_TEST_MARK", str(tmp_path / "hung-once"))
    start = time.monotonic()
    run = api.run(str(GOLDEN), judge="hostile_plugins:make_hangs_on_first_chunk", judge_timeout=1.0)
    per_case = run.verdicts.drop_duplicates("case_id")["error"]
    assert per_case.str.contains("did not answer within 1 s").sum() == 4, "only the first chunk is lost"
    assert per_case.isna().sum() == 8 and time.monotonic() - start < 60


def test_a_judge_that_never_answers_is_given_up_after_two_lost_chunks(monkeypatch):
    monkeypatch.setattr(clients, "CHUNK", 2)
    start = time.monotonic()
    run = api.run(str(GOLDEN), judge="hostile_plugins:make_hanging_judge", judge_timeout=0.5)
    errors = run.verdicts.drop_duplicates("case_id")["error"].tolist()
    assert sum(e.startswith("the judge did not answer within 0.5 s") for e in errors) == 4
    assert sum(e.startswith("not asked: 2 chunks in a row were lost") for e in errors) == 8
    assert time.monotonic() - start < 60


def test_a_judge_factory_that_hangs_is_a_usage_error_within_the_deadline(tmp_path):
    done, elapsed = cli(
        "run",
        "--data",
        str(GOLDEN),
        "--judge",
        "hostile_plugins:make_hanging_factory",
        "--startup-timeout",
        "1",
        cwd=tmp_path,
    )
    assert done.returncode == 64 and "the judge did not start within 1 s (--startup-timeout)" in done.stderr
    assert elapsed < 60


def test_misreported_responses_are_judge_errors_per_case_never_a_pass():
    run = api.run(str(GOLDEN), judge="hostile_plugins:make_misreporting_judge")
    per_case = run.verdicts.set_index(["case_id", "axis", "target"]).sort_index()
    first, second, third = run.verdicts["case_id"].drop_duplicates().tolist()[:3]
    assert per_case.loc[first, "error"].str.contains("the judge returned dict, not a JudgeResponse").all()
    assert per_case.loc[second, "error"].str.contains("the judge answered case 'someone-else'").all()
    assert per_case.loc[(third, "faithfulness", ""), "invalid_reason"] == "no verdict returned for this axis"
    assert not per_case.loc[[first, second], "credit"].any()


def test_text_that_is_not_valid_unicode_is_a_judge_error():
    run = api.run(str(GOLDEN), judge="hostile_plugins:make_unsendable_judge")
    assert run.verdicts["error"].str.contains("unpaired surrogate").all()
    assert not run.verdicts["credit"].any()


def test_settings_cross_as_json_and_the_key_comes_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    monkeypatch.chdir(tmp_path)
    run = api.run(str(GOLDEN), judge="hostile_plugins:make_judge_with_settings", judge_model="m1")
    seen = json.loads(run.judge_config.model)
    assert seen == {"model": "m1", "cache_dir": str(tmp_path / ".qaeval-cache"), "has_key": True}
    assert "api_key" not in clients.settings_to_plain(JudgeSettings(api_key="sk-secret"))


def test_a_judge_object_from_the_api_runs_in_its_own_process():
    import hostile_plugins

    run = api.run(str(GOLDEN), judge=hostile_plugins.make_exiting_judge())
    assert run.verdicts["error"].str.contains("exited with code 0").all()


def test_an_unknown_judge_is_a_usage_error_before_the_run(tmp_path):
    done, _ = cli("run", "--data", str(GOLDEN), "--judge", "hostile_plugins:no_such_judge", cwd=tmp_path)
    assert done.returncode == 64 and "has no attribute 'no_such_judge'" in done.stderr


# --------------------------------------------------------------------------- notify hooks


def alarming_series(tmp_path: Path) -> Path:
    series = tmp_path / "series.jsonl"
    line = {"time": "2026-01-01T00:00:00+00:00", "metrics": {"answer_correctness": 0.9}, "alarms": []}
    series.write_text("".join(json.dumps(line) + "\n" for _ in range(3)))
    return series


def drift(tmp_path: Path, hook: str, *extra: str) -> tuple[subprocess.CompletedProcess, float]:
    return cli(
        "drift",
        "--data",
        str(GOLDEN),
        "--timeseries",
        str(alarming_series(tmp_path)),
        "--quiet",
        "--notify",
        hook,
        *extra,
        cwd=tmp_path,
    )


def test_a_hook_that_calls_os_exit_cannot_hide_the_alarm(tmp_path):
    done, _ = drift(tmp_path, "hostile_plugins:notify_os_exit")
    assert done.returncode == 3 and "DRIFT: ALARM" in done.stdout, done.stdout + done.stderr
    assert "the notify hook's process exited with code 0 before it finished; the alarm stands" in done.stdout


def test_a_hook_that_hangs_is_killed_within_its_deadline(tmp_path):
    done, elapsed = drift(tmp_path, "hostile_plugins:notify_hangs", "--hook-timeout", "1")
    assert done.returncode == 3 and "DRIFT: ALARM" in done.stdout
    assert "the notify hook did not finish within 1 s (its process was killed); the alarm stands" in done.stdout
    assert elapsed < 60


def test_what_a_hook_prints_is_a_note_not_output(tmp_path):
    done, _ = drift(tmp_path, "hostile_plugins:notify_prints")
    assert done.returncode == 3 and "note: the notify hook printed: paged about 1 alarm(s)" in done.stdout
    assert not any(line.startswith("paged about") for line in done.stdout.splitlines())


def test_an_unknown_hook_is_a_usage_error_before_anything_runs(tmp_path):
    series = tmp_path / "s.jsonl"
    with pytest.raises(UsageError, match="has no attribute 'nope'"):
        api.drift(str(GOLDEN), timeseries=str(series), notify="hostile_plugins:nope")
    assert not series.exists()


def test_the_built_in_judges_and_isolation_none_stay_in_this_process():
    from qaeval.judges.offline import OfflineJudge

    assert isinstance(make_judge(check_parameters("run", data=str(GOLDEN))), OfflineJudge)
    p = check_parameters("run", data=str(GOLDEN), judge="hostile_plugins:make_misreporting_judge", isolation="none")
    assert type(make_judge(p)).__name__ == "MisreportingJudge"
    p = check_parameters("run", data=str(GOLDEN), judge="hostile_plugins:make_misreporting_judge")
    judge = make_judge(p)
    try:
        assert isinstance(judge, clients.JudgeProcess) and judge.config.name == "hostile"
    finally:
        clients.close_judge(judge)


def test_a_hook_function_from_the_api_is_shipped_to_its_own_process(tmp_path):
    seen = tmp_path / "seen.txt"

    def hook(alarms):
        seen.write_text(f"{os.getpid()} {len(alarms)}")

    result = api.drift(str(GOLDEN), timeseries=str(alarming_series(tmp_path)), notify=hook)
    pid, count = seen.read_text().split()
    assert not result.ok and int(count) == len(result.alarms) and int(pid) != os.getpid()


def _patched_offline_judges(tmp_path):
    """OfflineJudge objects their user changed: each must run as user code, in its own process."""
    from dataclasses import dataclass

    from qaeval.judges.offline import OfflineJudge
    from qaeval.scoring.judge import JudgeConfig

    marker = tmp_path / "ran-here.txt"

    def spy(requests):  # what a user's patch could do in the harness: read, decide, write
        marker.write_text(str(os.getpid()))
        return OfflineJudge().judge(requests)

    wrapped = OfflineJudge()
    wrapped.judge = spy

    @dataclass(frozen=True)
    class LoudConfig(JudgeConfig):
        def label(self) -> str:
            marker.write_text(str(os.getpid()))
            return super().label()

    relabelled = OfflineJudge()
    relabelled.config = LoudConfig(name="offline", model="token-overlap")

    class Sub(OfflineJudge):
        pass

    def loud_label():
        marker.write_text(str(os.getpid()))
        return "offline:token-overlap"

    shadowed = OfflineJudge()  # a label set on the (frozen) config instance itself
    object.__setattr__(shadowed.config, "label", loud_label)

    class Hiding(dict):  # an instance dict whose keys hide the method set in it
        def __iter__(self):
            return iter(["config"])

        def keys(self):
            return ["config"]

    hidden = OfflineJudge()
    hidden.__dict__ = Hiding(config=hidden.config, judge=spy)

    return marker, {
        "a method set on the instance": wrapped,
        "a config subclass": relabelled,
        "a subclass": Sub(),
        "a label set on the config": shadowed,
        "an instance dict that hides a key": hidden,
    }


def test_a_built_in_judge_object_its_user_changed_runs_in_its_own_process(tmp_path):
    marker, judges = _patched_offline_judges(tmp_path)
    for why, judge in judges.items():
        made = clients.make_judge(
            judge, settings=JudgeSettings(), isolation="process", timeout=30, startup=30, data_dir=str(GOLDEN)
        )
        try:
            assert isinstance(made, clients.JudgeProcess), why
        finally:
            clients.close_judge(made)
    marker.unlink(missing_ok=True)
    run = api.run(str(GOLDEN), judge=judges["a method set on the instance"])
    assert int(marker.read_text()) != os.getpid()  # the patch ran, and not in the harness
    assert run.verdicts["error"].isna().all()


def test_the_offline_judge_object_as_qaeval_makes_it_stays_here_and_an_openai_judge_object_does_not(tmp_path):
    """An OpenAIJudge object's client and cache are objects whose insides cannot be vouched for (their
    methods or hooks can be patched), so it is user code like any judge object; named, it is built here."""
    from qaeval.judges import offline, openai
    from qaeval.judges.fake_server import FakeJudgeServer

    judge = offline.make_judge()
    made = clients.make_judge(
        judge, settings=JudgeSettings(), isolation="process", timeout=30, startup=30, data_dir=None
    )
    assert made is judge
    pytest.importorskip("openai")
    with FakeJudgeServer() as server:
        settings = JudgeSettings(model="m", base_url=server.url, cache=False)
        assert not clients._builtin_judge(openai.OpenAIJudge(model="m", base_url=server.url))
        with pytest.raises(UsageError, match="cannot be shipped to its own process"):
            clients.make_judge(
                openai.OpenAIJudge(model="m", base_url=server.url),
                settings=settings,
                isolation="process",
                timeout=30,
                startup=30,
                data_dir=None,
            )
        named = clients.make_judge(
            "qaeval.judges.openai:make_judge",
            settings=settings,
            isolation="process",
            timeout=30,
            startup=30,
            data_dir=None,
        )
        assert type(named) is openai.OpenAIJudge
