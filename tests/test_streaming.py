"""Every scorer that waits on something runs while the system still answers: a custom judge in its own
process (asked in the plan's order, in chunks), and the registered checks and metrics (one output at a
time, once its verdict is in). What scoring reads afterwards is what they gave then."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import GOLDEN, ROOT

from qaeval import api
from qaeval.boundary.custom import make_custom
from qaeval.commands import pipeline
from qaeval.data.cases import load_suite
from qaeval.record.read import load_run
from qaeval.record.write import run_record
from qaeval.scoring import stream, stream_checks
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


class Counted(stream_checks.StreamedChecks):
    made: list[stream_checks.StreamedChecks] = []

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        Counted.made.append(self)


def test_scoring_finds_every_check_result_the_stream_computed_and_asks_for_none(files, monkeypatch):
    """The reason the checks overlap the system, asserted: scoring reads each (case, trial)'s rows from
    the stream by its sample's digest; none is asked for again (each trial's checks ran once)."""
    Counted.made = []
    monkeypatch.setattr(pipeline, "StreamedChecks", Counted)
    run = api.run(str(GOLDEN), check=["streaming_plugins:marks"], trials=2, adaptive=False)
    (checks,) = Counted.made
    assert (checks.found, checks.asked) == (2 * CASES, 0)
    assert len(lines(files["QAEVAL_TEST_CHECK_CALLS"])) == 2 * CASES
    assert run.per_case["marks"].all()


def test_an_output_replaced_after_it_was_checked_is_checked_again_at_scoring(files, monkeypatch):
    """A lane can only save time: a sample scoring builds that the stream never saw is asked for then."""
    Counted.made = []
    monkeypatch.setattr(pipeline, "StreamedChecks", Counted)
    real = stream_checks.sample_digest
    seen: list[str] = []

    def differs_at_scoring(sample):  # the stream's digests never match what scoring builds
        seen.append("x")
        return real(sample) + str(len(seen))

    monkeypatch.setattr(stream_checks, "sample_digest", differs_at_scoring)
    run = api.run(str(GOLDEN), check=["streaming_plugins:marks"])
    (checks,) = Counted.made
    assert (checks.found, checks.asked) == (0, CASES)
    assert len(lines(files["QAEVAL_TEST_CHECK_CALLS"])) == 2 * CASES  # streamed, then again at scoring
    assert run.per_case["marks"].all()


def test_a_streamed_run_with_a_custom_judge_and_checks_is_the_run_its_outputs_score_to(files):
    """Field by field, times aside: a run whose judge (in its own process) and checks (in theirs) were
    asked while the system answered records what scoring the same outputs afterwards in one pass records."""
    from streaming_plugins import MarkingJudge

    suite = load_suite(GOLDEN)
    streamed = api.run(str(GOLDEN), judge="streaming_plugins:make_judge", check=["streaming_plugins:marks"])
    runner = make_custom(dict(check=["streaming_plugins:marks"], metric=[], isolation="none"))
    phased = score_outputs(suite, streamed.outputs, MarkingJudge(), meta=streamed.meta, custom=runner)
    a, b = run_record(streamed), run_record(phased)
    for line in a["cases"] + b["cases"]:
        line["output"].pop("latency_s", None)
        for v in line["verdicts"]:
            v.pop("cached", None)
    assert a == b


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


def processes_naming(text: str) -> list[int]:
    """The live processes whose environment holds ``text`` (the judge's and the checks' hosts hold the
    test's own file paths)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if text.encode() in Path(f"/proc/{entry}/environ").read_bytes():
                    found.append(int(entry))
            except OSError:
                continue
    return found


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads /proc")
def test_ctrl_c_stops_the_system_the_judge_and_the_checks_and_resume_finishes_the_run(tmp_path, files):
    """Ctrl-C halfway through a run whose custom judge and checks stream: exit 130 with the journal kept,
    no judge or checks process left running, and --resume ends in the run an uninterrupted one gives."""
    from test_resume import interrupted, qaeval

    with_them = ["--judge", "streaming_plugins:make_judge", "--check", "streaming_plugins:marks", "--trials", "2"]
    env, args = interrupted(tmp_path, *with_them, stop_after=CASES + 3)
    env = {**env, **{k: str(v) for k, v in files.items()}}
    assert processes_naming(str(files["QAEVAL_TEST_MARKER"])) == [], "a judge or checks process outlived the run"
    done = qaeval(*args, "--resume", cwd=tmp_path, env={**env, "QAEVAL_TEST_STOP_AFTER": "0"})
    assert done.returncode == 0, done.stderr[-2000:]
    resumed = load_run(tmp_path / "r.json")
    whole = api.run(str(GOLDEN), trials=2, judge="streaming_plugins:make_judge", check=["streaming_plugins:marks"])
    assert resumed.per_case["case_passed"].tolist() == whole.per_case["case_passed"].tolist()
    assert resumed.per_case["marks"].all() and resumed.judge_usage["errors"] == 0
