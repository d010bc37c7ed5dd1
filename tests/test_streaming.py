"""Every scorer that waits on something runs while the system still answers: a custom judge in its own
process (asked in the plan's order, in chunks), and the registered checks and metrics (one output at a
time, once its verdict is in). Each output is scored once, as it arrives; the run is built from those
scores, and nothing is scored again afterwards."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import GOLDEN, ROOT

from qaeval import api
from qaeval.core.settings import RunSettings, Settings
from qaeval.data.cases import load_suite
from qaeval.host.custom import make_custom
from qaeval.record.read import load_run
from qaeval.record.write import run_record
from qaeval.scoring import lane, stream
from qaeval.scoring.evaluate import score_outputs

TESTS = str(ROOT / "tests")
CASES = len(load_suite(GOLDEN))


@pytest.fixture
def files(tmp_path, monkeypatch):
    """The files the streaming plugins meet through, and the tests folder on every process's path."""
    monkeypatch.syspath_prepend(TESTS)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [TESTS, os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("QAEVAL_PROGRESS", "0")
    named = {
        "QAEVAL_TEST_MARKER": tmp_path / "marker",
        "QAEVAL_TEST_JUDGE_CALLS": tmp_path / "judge-calls",
        "QAEVAL_TEST_CHECK_CALLS": tmp_path / "check-calls",
    }
    for variable, path in named.items():
        monkeypatch.setenv(variable, str(path))
    return named


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_a_custom_judge_in_its_own_process_is_asked_while_the_system_still_answers(files, monkeypatch):
    """The system stops answering after 20 of 45 calls until the judge has been asked: a judge asked only
    after the system finished would fail every later case."""
    monkeypatch.setenv("QAEVAL_TEST_ANSWER_FIRST", str(stream.CHUNK + 4))
    run = api.run(
        str(GOLDEN),
        adapter="streaming_plugins:make_waiting",
        judge="streaming_plugins:make_judge",
        trials=3,
        concurrency=1,
    )
    assert run.outputs["error"].isna().all(), run.outputs["error"].dropna().tolist()
    asked = [int(n) for n in lines(files["QAEVAL_TEST_JUDGE_CALLS"])]
    assert max(asked) <= stream.CHUNK, "asked in chunks of the plan, not all at once"
    answered = sum(int((~r.per_case["abstained"]).sum()) for r in run.runs)
    assert sum(asked) == int((~run.runs[0].per_case["abstained"]).sum()) < answered, "once per distinct output"
    assert run.judge_usage["errors"] == 0


def test_registered_checks_run_while_the_system_still_answers(files, monkeypatch):
    monkeypatch.setenv("QAEVAL_TEST_ANSWER_FIRST", str(stream.CHUNK + 4))
    run = api.run(str(GOLDEN), adapter="streaming_plugins:make_waiting", check=["streaming_plugins:marks"], trials=3)
    assert run.outputs["error"].isna().all(), run.outputs["error"].dropna().tolist()
    assert len(lines(files["QAEVAL_TEST_CHECK_CALLS"])) == 3 * CASES, "once per (case, trial), as scoring would"


@pytest.fixture
def counted(monkeypatch):
    """How often each place was scored by the lane and how many requests were built, in this process."""
    seen = {"scored": [], "requests": 0}
    real_batch, real_request = lane.ScoringLane.score_batch, stream.request_for

    def score_batch(self, batch):
        seen["scored"] += [place for place, _, _ in batch]
        return real_batch(self, batch)

    def request_for(*args):
        req = real_request(*args)
        seen["requests"] += req is not None
        return req

    monkeypatch.setattr(lane.ScoringLane, "score_batch", score_batch)
    monkeypatch.setattr(stream, "request_for", request_for)
    return seen


def answered(run) -> int:
    trials = run.trial_runs or (run,)
    return sum(int((~r.per_case["abstained"] & r.per_case["error"].isna()).sum()) for r in trials)


@pytest.mark.parametrize(
    "options",
    [
        dict(check=["streaming_plugins:marks"], judge="streaming_plugins:make_judge", trials=2),
        dict(check=["streaming_plugins:marks"], trials=3, adapter="plugins:make_varying", adaptive=True),
    ],
    ids=["custom judge, checks, trials", "adaptive trials"],
)
def test_each_output_is_scored_once_and_each_request_built_once(files, counted, options):
    """The reason the scorers overlap the system, asserted: every (case, trial) place goes through the
    layers once, each judged output's request is built once, and the registered checks are asked once per
    output; nothing is scored again when the run is put together."""
    isolation = "none" if options.get("adaptive") else "process"
    run = api.run(str(GOLDEN), isolation=isolation, **options)
    places = counted["scored"]
    trials = run.trial_runs or (run,)
    assert sorted(places) == sorted(set(places)), "a place scored twice"
    assert len(places) == sum(len(r.per_case) for r in trials)
    assert counted["requests"] == answered(run)
    assert len(lines(files["QAEVAL_TEST_CHECK_CALLS"])) == len(places)
    assert run.per_case["marks"].all()
    if options.get("adaptive"):
        assert 0 < sum(len(r.per_case) for r in trials[1:]) < (len(trials) - 1) * CASES, "some cases settled"


def test_a_resumed_run_scores_each_output_once(tmp_path, files, counted, monkeypatch):
    """Outputs a journal gives back are scored once with the new ones; their verdicts are not asked again."""
    from test_resume import interrupted

    env, args = interrupted(tmp_path, "--check", "streaming_plugins:marks", "--trials", "2", stop_after=CASES + 3)
    env = {**env, **{k: str(v) for k, v in files.items()}, "QAEVAL_TEST_STOP_AFTER": "0"}
    monkeypatch.chdir(tmp_path)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    from qaeval.cli import main

    assert main([*args[args.index("run") :], "--resume"]) == 0
    resumed = load_run(tmp_path / "r.json")
    places = counted["scored"]
    assert sorted(places) == list(range(2 * CASES)), "every place of both trials, once"
    assert counted["requests"] == answered(resumed)
    assert resumed.per_case["marks"].all()


def test_an_output_replaced_after_it_was_scored_is_scored_again_and_its_first_score_dropped(files):
    """A worker's second reply for a case replaces its output with a failure after the lane scored it: the
    lane scores the replacement once more, and the trial holds the failure, not the first answer."""
    from qaeval.judges.offline import OfflineJudge
    from qaeval.system.contract import output_row

    suite = load_suite(GOLDEN)
    first = api.run(str(GOLDEN))
    rows = {r["case_id"]: r for r in first.outputs.to_dict("records")}
    with stream.streaming(OfflineJudge(), suite, k=5) as s:
        s.declare(0, range(CASES))
        s.plan(range(CASES))
        for i, case in enumerate(suite.cases):
            s.put(i, case, rows[case.id])
        s.drain()
        replaced = output_row(suite.cases[0].id, None, "its worker sent a second reply for it (it was stopped)", 0.0)
        s.put(0, suite.cases[0], replaced)
        s.finish()
    run = s.result(0, first.meta, 0)
    assert s.lane.scores.scored == CASES + 1
    row = run.per_case.set_index("case_id").loc[suite.cases[0].id]
    assert not row["case_passed"] and "second reply" in str(row["error"])
    checks = run.checks[run.checks["case_id"] == suite.cases[0].id]
    assert len(checks) == 5 and not checks["passed"].any(), "the failure's rows only, not the first answer's too"
    assert run.per_case["case_passed"].tolist()[1:] == first.per_case["case_passed"].tolist()[1:]


def test_a_streamed_run_with_a_custom_judge_and_checks_is_the_run_its_outputs_score_to(files):
    """Field by field, times aside: a run whose judge (in its own process) and checks (in theirs) were
    asked while the system answered records what scoring the same outputs afterwards in one pass records."""
    from streaming_plugins import MarkingJudge
    from test_resume import timeless

    suite = load_suite(GOLDEN)
    streamed = api.run(str(GOLDEN), judge="streaming_plugins:make_judge", check=["streaming_plugins:marks"])
    runner = make_custom(Settings(check=("streaming_plugins:marks",), run=RunSettings(isolation="none")))
    phased = score_outputs(suite, streamed.outputs, MarkingJudge(), meta=streamed.meta, custom=runner)
    assert timeless(run_record(streamed)) == timeless(run_record(phased))


def test_closing_a_custom_judge_does_not_kill_the_checks_process_still_in_use(files):
    """The judge's process guard was the outermost one, and its sweep on closing killed every process
    started after it: the registered checks' host too, so the first case checked after the judge was
    done failed ('the check runner closed its end'). Failed before."""
    from qaeval.commands.common import check_parameters, make_judge

    p = check_parameters(
        "run", data=str(GOLDEN), judge="streaming_plugins:make_judge", check=["streaming_plugins:marks"]
    )
    judge = make_judge(p)
    runner = make_custom(p)
    try:
        assert type(judge).__name__ == "JudgeProcess" and type(runner).__name__ == "CustomProcess"
        runner.keep_open = True
        suite = load_suite(GOLDEN)
        run = api.run(str(GOLDEN))  # outputs and samples to send
        from qaeval.scoring.outcomes import check_samples

        samples = check_samples(suite, run.outputs, run.checks, run.retrieval, run.verdicts, run.trajectory)
        assert runner.score(samples[:1])[0]["passed"]
        pid = runner.proc.pid
        judge.close()  # its guard's sweep
        rows = runner.score(samples[1:2])
        assert rows[0]["passed"], rows[0]["reason"]
        assert runner.proc is not None and runner.proc.pid == pid, "the same process, still running"
    finally:
        runner.keep_open = False
        runner.close()
        judge.close()


def processes_naming(text: str) -> list[str]:
    """The command lines of the live processes whose environment holds ``text`` (the system's workers and
    the judge's and the checks' hosts hold the test's own file paths)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if text.encode() in Path(f"/proc/{entry}/environ").read_bytes():
                    found.append(Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode())
            except OSError:
                continue
    return found


def gone(text: str, within: float = 5.0) -> list[str]:
    """``processes_naming(text)`` once it is empty, or as it still is after ``within`` seconds (a process
    killed a moment ago may not have been reaped yet; one still there after seconds outlived the run)."""
    import time

    give_up = time.monotonic() + within
    while (left := processes_naming(text)) and time.monotonic() < give_up:
        time.sleep(0.05)  # a condition to wait for, bounded
    return left


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads /proc")
def test_ctrl_c_stops_the_system_the_judge_and_the_checks_and_resume_finishes_the_run(tmp_path, files):
    """Ctrl-C halfway through a run whose custom judge and checks stream: exit 130 with the journal kept,
    no judge or checks process left running, and --resume ends in the run an uninterrupted one gives."""
    from test_resume import interrupted, qaeval

    with_them = ["--judge", "streaming_plugins:make_judge", "--check", "streaming_plugins:marks", "--trials", "2"]
    env, args = interrupted(tmp_path, *with_them, stop_after=CASES + 3)
    env = {**env, **{k: str(v) for k, v in files.items()}}
    assert gone(str(files["QAEVAL_TEST_MARKER"])) == [], "a process outlived the run"
    done = qaeval(*args, "--resume", cwd=tmp_path, env={**env, "QAEVAL_TEST_STOP_AFTER": "0"})
    assert done.returncode == 0, done.stderr[-2000:]
    resumed = load_run(tmp_path / "r.json")
    whole = api.run(str(GOLDEN), trials=2, judge="streaming_plugins:make_judge", check=["streaming_plugins:marks"])
    assert resumed.per_case["case_passed"].tolist() == whole.per_case["case_passed"].tolist()
    assert resumed.per_case["marks"].all() and resumed.judge_usage["errors"] == 0


def test_cases_lost_by_the_checks_are_counted_in_a_row_within_a_trial_as_scoring_counts_them(files, monkeypatch):
    """The checks' process exits on the last case of the suite and on its first two. Streaming kept the
    count of cases lost in a row across trials (the process is kept between calls), so trial 2's first
    two losses made three with trial 1's last, and every later case of the run was 'not asked' and
    failed. Counted within a trial, as scoring one trial at a time counts, both trials fail the same three
    cases and nothing else. Failed before."""
    suite = load_suite(GOLDEN)
    named = [suite.cases[-1].id, suite.cases[0].id, suite.cases[1].id]
    monkeypatch.setenv("QAEVAL_TEST_EXIT_CASES", ",".join(named))
    run = api.run(str(GOLDEN), check=["streaming_plugins:exits_on_named"], trials=2)
    first, second = (r.per_case.set_index("case_id")["exits_on_named"] for r in run.trial_runs)
    assert sorted(first[~first].index) == sorted(named)
    assert second.to_dict() == first.to_dict()


def test_a_custom_judge_that_fails_one_call_costs_the_requests_scoring_would_put_in_that_call(
    tmp_path, files, monkeypatch
):
    """Requests go to a judge that is not thread-safe in the calls scoring makes (a trial's judged
    requests, 16 a call): its process exiting on one call costs the same requests streamed as when the
    same outputs are scored afterwards. Calls of 16 plan places, abstentions and other trials included,
    lost other requests. Failed before."""
    from streaming_plugins import ExitsOnceOn

    monkeypatch.setenv("QAEVAL_TEST_EXITED", str(tmp_path / "exited"))
    suite = load_suite(GOLDEN)
    target = next(c.id for c in suite.cases[8:] if not c.must_abstain)
    monkeypatch.setenv("QAEVAL_TEST_EXIT_CASE", target)
    streamed = api.run(str(GOLDEN), adapter="plugins:make_varying", judge="streaming_plugins:make_exits_once", trials=3)
    (tmp_path / "exited").unlink()

    class RaisesOnce(ExitsOnceOn):
        def leave(self):
            raise SystemExit(3)  # in this process: what the process exiting costs, without ending pytest

    runner = RaisesOnce()
    runner.judge = _in_calls_of_16(runner.judge)  # as JudgeProcess sends them, in this process
    memo: dict = {}
    phased = [
        errored(score_outputs(r.suite, r.outputs, runner, meta=r.meta, judge_memo=memo)) for r in streamed.trial_runs
    ]
    assert [errored(r) for r in streamed.trial_runs] == phased
    assert len(phased[0]) > 1 and not phased[1] and not phased[2], "one call was lost, holding several requests"


def errored(run) -> list[str]:
    return [cid for cid, e in zip(run.per_case["case_id"], run.per_case["judge_error"]) if isinstance(e, str)]


def _in_calls_of_16(judge):
    """A judge asked as JudgeProcess asks its process: 16 requests a call; a call whose process exited
    (here: raised SystemExit) gives each of its requests an error."""
    from qaeval.scoring.judge import JudgeResponse

    def asked(requests):
        out = []
        for start in range(0, len(requests), stream.CHUNK):
            chunk = requests[start : start + stream.CHUNK]
            try:
                out += judge(chunk)
            except SystemExit:
                out += [JudgeResponse(r.case_id, error="the judge's process exited") for r in chunk]
        return out

    return asked


def test_ctrl_c_in_the_middle_of_a_judge_call_journals_no_verdict_from_the_cut_call(tmp_path, files, monkeypatch):
    """Ctrl-C while a custom judge's call is in flight: the call is cut short by stopping its process, and
    what that leaves (each request 'lost', or an error raised under it) is not the judge's verdict. It was
    journaled, and a resume with --keep-errors kept it. Failed before."""
    import json

    from test_resume import interrupted

    flag = tmp_path / "slow"
    flag.touch()  # every judge call waits while it is there: the first one is in flight at the Ctrl-C
    monkeypatch.setenv("QAEVAL_TEST_SLOW", str(flag))
    interrupted(tmp_path, "--judge", "streaming_plugins:make_slow_while_flagged", "--trials", "2", stop_after=CASES + 3)
    lines = [json.loads(line) for line in (tmp_path / "r.json.journal").read_text().splitlines()]
    assert any(line["kind"] == "output" for line in lines)
    assert [line for line in lines if line["kind"] == "verdict"] == [], "no call finished: no verdict"


def test_a_runner_stopped_by_an_interrupt_starts_no_process_again(files):
    """After Ctrl-C a lane may still be finishing a batch: the checks' runner and a custom judge refuse
    to start another process (one started then outlived the command)."""
    from qaeval.commands.common import check_parameters, make_judge
    from qaeval.scoring.judge import JudgeRequest
    from qaeval.scoring.lane import keep_open

    p = check_parameters(
        "run", data=str(GOLDEN), judge="streaming_plugins:make_judge", check=["streaming_plugins:marks"]
    )
    judge, runner = make_judge(p), make_custom(p)
    try:
        keep_open(runner, True)
        keep_open(judge, True)
        keep_open(runner, False, stopped=True)
        keep_open(judge, False, stopped=True)
        rows = runner.score([("single-0001", {"error": None})])
        assert runner.proc is None and "the run was interrupted" in rows[0]["reason"]
        (response,) = judge.judge([JudgeRequest("single-0001", "q", "a", None, (), [])])
        assert judge.proc is None and "the run was interrupted" in response.error
    finally:
        runner.close()
        judge.close()
