"""A run that judges while the system answers (streaming), keeps a journal beside its record, and resumes
from it after an interruption; adaptive trials spend only the calls a case needs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import GOLDEN, ROOT

from qaeval import api
from qaeval.commands.pipeline import evaluate
from qaeval.core.settings import RunSettings
from qaeval.data.cases import load_suite
from qaeval.judges.offline import OfflineJudge
from qaeval.record.read import load_run
from qaeval.record.write import run_record
from qaeval.scoring.evaluate import score_outputs

TESTS = str(ROOT / "tests")
CASES = len(load_suite(GOLDEN))


def qaeval(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "qaeval", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env={**os.environ, "QAEVAL_PROGRESS": "0", "PYTHONPATH": TESTS, **env},
    )


def interrupted(tmp_path: Path, *extra: str, stop_after: int = 7) -> tuple[dict[str, str], list[str]]:
    """A run Ctrl-C'd (by its own adapter) after ``stop_after`` answers: exit 130, its journal left."""
    env = {"QAEVAL_TEST_CALLS": str(tmp_path / "calls"), "QAEVAL_TEST_STOP_AFTER": str(stop_after)}
    args = [
        "run",
        "--data",
        str(GOLDEN),
        "--adapter",
        "plugins:make_interrupter",
        "--concurrency",
        "1",
        "--save",
        "r.json",
        *extra,
    ]
    done = qaeval(*args, cwd=tmp_path, env=env)
    assert done.returncode == 130, done.stderr[-2000:]
    assert (tmp_path / "r.json.journal").exists() and not (tmp_path / "r.json").exists()
    return env, args


def calls(tmp_path: Path) -> int:
    return len((tmp_path / "calls").read_text().splitlines())


def journal_outputs(tmp_path: Path) -> int:
    return sum(json.loads(line)["kind"] == "output" for line in (tmp_path / "r.json.journal").read_text().splitlines())


def test_resume_asks_only_for_what_the_journal_lacks_and_scores_as_an_uninterrupted_run(tmp_path):
    env, args = interrupted(tmp_path, "--trials", "2")
    kept, before = journal_outputs(tmp_path), calls(tmp_path)
    assert 0 < kept < 2 * CASES
    done = qaeval(*args, "--resume", cwd=tmp_path, env={**env, "QAEVAL_TEST_STOP_AFTER": "0"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert calls(tmp_path) - before == 2 * CASES - kept, "the system is asked only for the unfinished pairs"
    assert f"{kept} of {2 * CASES} (case, trial) output(s) reused" in done.stdout
    assert not (tmp_path / "r.json.journal").exists(), "the record replaces the journal"
    resumed = load_run(tmp_path / "r.json")
    whole = api.run(str(GOLDEN), trials=2, isolation="none")
    assert resumed.scoreboard[["metric", "value", "n"]].equals(whole.scoreboard[["metric", "value", "n"]])
    assert resumed.per_case["case_passed"].tolist() == whole.per_case["case_passed"].tolist()


def test_resume_is_refused_when_the_run_differs_naming_what(tmp_path):
    env, args = interrupted(tmp_path)
    for flags, named in ((["--trials", "2"], "trials: 1 then, 2 now"), (["--k", "3"], "k: 5 then, 3 now")):
        done = qaeval(*args, "--resume", *flags, cwd=tmp_path, env={**env, "QAEVAL_TEST_STOP_AFTER": "0"})
        assert done.returncode == 64 and named in done.stderr, done.stderr[-1000:]
    other = [a if a != "plugins:make_interrupter" else "plugins:make_call_counter" for a in args]
    done = qaeval(*other, "--resume", cwd=tmp_path, env=env)
    assert done.returncode == 64 and 'adapter: "plugins:make_interrupter" then' in done.stderr


def test_a_forged_journal_line_is_refused(tmp_path):
    env, args = interrupted(tmp_path)
    path = tmp_path / "r.json.journal"
    lines = path.read_text().splitlines()
    line = json.loads(lines[1])
    line["output"]["answer"] = "A forged answer."
    lines[1] = json.dumps(line, sort_keys=True)
    path.write_text("\n".join(lines) + "\n")
    done = qaeval(*args, "--resume", cwd=tmp_path, env={**env, "QAEVAL_TEST_STOP_AFTER": "0"})
    assert done.returncode == 65 and "line 2 fails authentication" in done.stderr, done.stderr[-1000:]


def test_a_torn_last_line_is_dropped_with_a_note(tmp_path):
    env, args = interrupted(tmp_path)
    path = tmp_path / "r.json.journal"
    path.write_text(path.read_text() + '{"kind": "output", "index": 9')  # the run died mid-write
    done = qaeval(*args, "--resume", cwd=tmp_path, env={**env, "QAEVAL_TEST_STOP_AFTER": "0"})
    assert done.returncode == 0, done.stderr[-1000:]
    assert "was cut short and is dropped" in done.stdout


def test_failed_outputs_are_asked_again_unless_kept(tmp_path, monkeypatch):
    """The journal holds a case the adapter failed (it raised on its first call); resuming asks for it
    again, --keep-errors keeps the failure."""
    monkeypatch.syspath_prepend(TESTS)
    record = tmp_path / "r.json"
    from qaeval.scoring.journal import journal_path

    api.run(str(GOLDEN), adapter="plugins:make_raises_on_one", isolation="none", save=str(record), concurrency=1)
    first = load_run(record)
    failed = first.outputs["error"].notna().sum()
    assert failed == 1
    # make the run look interrupted: put back a journal of it (written as a run writes it)
    from qaeval.commands.pipeline import run_identity
    from qaeval.scoring.journal import JournalWriter

    suite = load_suite(GOLDEN)
    ident = run_identity(suite, "plugins:make_raises_on_one", OfflineJudge(), 5, 1, None, False, "none")
    writer = JournalWriter(journal_path(record), ident)
    for i, row in enumerate(first.outputs.to_dict("records")):
        writer.output(i, row, 0)
    writer.close()
    kept = api.run(
        str(GOLDEN),
        adapter="plugins:make_raises_on_one",
        isolation="none",
        save=str(record),
        resume=True,
        keep_errors=True,
    )
    assert kept.outputs["error"].notna().sum() == 1
    writer = JournalWriter(journal_path(record), ident)
    for i, row in enumerate(first.outputs.to_dict("records")):
        writer.output(i, row, 0)
    writer.close()
    again = api.run(str(GOLDEN), adapter="plugins:make_raises_on_one", isolation="none", save=str(record), resume=True)
    assert any("asked again" in n for n in again.notes)


def test_resume_needs_the_record_path(capsys):
    from qaeval.cli import main

    assert main(["run", "--data", str(GOLDEN), "--resume"]) == 64
    assert "give the record's path" in capsys.readouterr().err


class GatedJudge(OfflineJudge):
    """Sets ``asked`` when it is first called: the system below waits for that before answering the rest.
    It says it may be called from several threads, as the OpenAI-compatible judge does, so it streams."""

    thread_safe = True
    concurrency = 2

    def __init__(self) -> None:
        super().__init__()
        self.asked = threading.Event()

    def judge(self, requests):
        self.asked.set()
        return super().judge(requests)


class WaitsForTheJudge:
    """Answers the first case at once, and every later one only once the judge has been asked for
    something: a run that judged only after the system finished would never get here (it times out)."""

    def __init__(self, judge: GatedJudge) -> None:
        from qaeval.system.reference import ReferenceHub

        self.hub, self.judge, self.calls = ReferenceHub(), judge, 0
        self.lock = threading.Lock()

    def answer(self, case):
        with self.lock:
            self.calls += 1
            first = self.calls == 1
        if not first and not self.judge.asked.wait(30):
            raise RuntimeError("the judge was not asked while the system answered")
        return self.hub.answer(case)


def test_the_judge_is_asked_while_the_system_still_answers():
    judge = GatedJudge()
    suite = load_suite(GOLDEN)
    first_judged = next(c for c in suite if not c.must_abstain)  # so the first output is judged
    ordered = type(suite)((first_judged, *[c for c in suite if c.id != first_judged.id]), suite.root, suite.corpus)
    run = evaluate(ordered, WaitsForTheJudge(judge), judge, RunSettings(isolation="none", concurrency=1))
    assert run.outputs["error"].isna().all(), run.outputs["error"].dropna().tolist()


def test_a_streamed_run_is_the_run_its_outputs_score_to(tmp_path):
    """Field by field, times aside: the record of a streamed run equals the record of scoring the same
    outputs in one pass afterwards (``score_outputs``)."""
    suite = load_suite(GOLDEN)
    streamed = evaluate(suite, "qaeval.system.reference:make_adapter", OfflineJudge(), RunSettings(isolation="none"))
    phased = score_outputs(suite, streamed.outputs, OfflineJudge(), meta=streamed.meta)
    assert timeless(run_record(streamed)) == timeless(run_record(phased))


def timeless(record: dict) -> dict:
    """A run record less what depends on when things happened: each output's latency, and which of two
    equal requests was answered first (``cached``)."""
    for line in record["cases"]:
        line["output"].pop("latency_s", None)
        for v in line["verdicts"]:
            v.pop("cached", None)
    return record


def test_a_refused_baseline_keeps_its_journal_for_allow_failing_and_resume(tmp_path, monkeypatch, capsys):
    from qaeval.cli import main

    monkeypatch.syspath_prepend(TESTS)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [TESTS, os.environ.get("PYTHONPATH")])))
    calls = tmp_path / "calls"
    monkeypatch.setenv("QAEVAL_TEST_CALLS", str(calls))
    out = tmp_path / "b.json"
    command = [
        "baseline",
        "--data",
        str(GOLDEN / "buggy"),
        "--out",
        str(out),
        "--adapter",
        "plugins:make_call_counter",
        "--quiet",
    ]
    assert main(command) == 1
    assert "add --resume as well to keep this very run" in capsys.readouterr().err
    asked = len(calls.read_text().splitlines())
    assert (tmp_path / "b.json.journal").is_file() and not out.exists()
    assert main([*command, "--allow-failing", "--resume"]) == 0
    assert len(calls.read_text().splitlines()) == asked, "the system was not asked again"
    assert out.is_file() and not (tmp_path / "b.json.journal").exists(), "the record replaced the journal"


def test_calibrate_resumes_an_interrupted_run_from_its_journal(tmp_path):
    """calibrate wrote a journal and left it after Ctrl-C, but had no --resume to use it."""
    from conftest import LABELS

    env = {"QAEVAL_TEST_CALLS": str(tmp_path / "calls"), "QAEVAL_TEST_STOP_AFTER": "7"}
    args = ["calibrate", "--data", str(GOLDEN), "--labels", str(LABELS), "--adapter", "plugins:make_interrupter"]
    args += ["--concurrency", "1", "--save", "r.json"]
    done = qaeval(*args, cwd=tmp_path, env=env)
    assert done.returncode == 130, done.stderr[-2000:]
    kept, before = journal_outputs(tmp_path), calls(tmp_path)
    assert 0 < kept < CASES
    done = qaeval(*args, "--resume", cwd=tmp_path, env={**env, "QAEVAL_TEST_STOP_AFTER": "0"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert calls(tmp_path) - before == CASES - kept, "the system is asked only for the cases the journal lacks"
    assert not (tmp_path / "r.json.journal").exists(), "the record replaces the journal"
    resumed = load_run(tmp_path / "r.json")
    assert f"{kept} of {CASES} (case, trial) output(s) reused" in " ".join(resumed.run.notes)
    whole = api.calibrate(str(GOLDEN), labels=str(LABELS), isolation="none")
    assert resumed.agreement.equals(whole.agreement) and resumed.ok == whole.ok


def test_calibrate_of_a_labelled_set_has_nothing_to_resume(tmp_path, capsys):
    from qaeval.cli import main

    labelled = tmp_path / "set.jsonl"
    labelled.write_text("")
    command = ["calibrate", "--labelled", str(labelled), "--save", str(tmp_path / "c.json"), "--resume"]
    assert main(command) == 64
    assert "a labelled set carries its own outputs and no system is asked" in capsys.readouterr().err


def test_a_second_run_with_the_same_record_path_is_refused_at_once(tmp_path, capsys):
    """Two runs with one --save wrote one journal and replaced one record; the second is refused now."""
    from qaeval.cli import main
    from qaeval.core import locks

    record = tmp_path / "r.json"
    with locks.hold(record):  # another run is writing r.json
        assert main(["run", "--data", str(GOLDEN), "--save", str(record), "--quiet"]) == 64
        assert f"another qaeval run is writing {record}" in capsys.readouterr().err
        assert not record.exists() and not (tmp_path / "r.json.journal").exists(), "nothing of its own was written"
    assert main(["run", "--data", str(GOLDEN), "--save", str(record), "--quiet"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"], "the lock goes with the run"


def test_calibrate_takes_the_record_lock(tmp_path, capsys):
    """calibrate took no lock: two `calibrate --save X` both ran, the second restarted the first's journal
    and the last silently replaced the other's record."""
    from conftest import LABELS

    from qaeval.cli import main
    from qaeval.core import locks

    record = tmp_path / "c.json"
    command = ["calibrate", "--data", str(GOLDEN), "--labels", str(LABELS), "--save", str(record), "--quiet"]
    with locks.hold(record):  # another calibrate is writing c.json
        assert main(command) == 64
        assert f"another qaeval run is writing {record}" in capsys.readouterr().err
        assert not record.exists() and not (tmp_path / "c.json.journal").exists()
    assert main(command) == 0 and record.is_file()


def test_a_run_that_opened_the_lock_file_as_the_holder_let_go_locks_the_file_the_path_names(tmp_path, monkeypatch):
    """The lock file is removed before it is let go: a run that opened it just before locked a file no
    other run could see, and a third run then locked a new one beside it (two runs, one record path)."""
    import fcntl
    from types import SimpleNamespace

    from qaeval.core import locks
    from qaeval.core.errors import UsageError

    record = tmp_path / "r.json"
    lock = tmp_path / ".r.json.qaeval-lock"
    first = locks.hold(record)
    first.__enter__()

    def lock_once_the_first_run_is_done(fd, how):  # between this run's open and its lock, the first run ends
        first.__exit__(None, None, None)
        monkeypatch.setattr(locks, "fcntl", fcntl)  # and nothing else comes between
        return fcntl.flock(fd, how)

    monkeypatch.setattr(
        locks,
        "fcntl",
        SimpleNamespace(flock=lock_once_the_first_run_is_done, LOCK_EX=fcntl.LOCK_EX, LOCK_NB=fcntl.LOCK_NB),
    )
    with locks.hold(record):
        assert lock.exists(), "the lock held is the file the path names"
        with pytest.raises(UsageError, match=f"another qaeval run is writing {record}"):
            with locks.hold(record):
                pass
    assert not lock.exists()


def test_adaptive_trials_give_more_trials_only_to_cases_one_trial_does_not_settle(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(TESTS)
    calls_file = tmp_path / "calls"
    monkeypatch.setenv("QAEVAL_TEST_CALLS", str(calls_file))
    run = api.run(
        str(GOLDEN),
        adapter="plugins:make_call_counter",
        trials=4,
        adaptive=True,
        isolation="none",
        save=str(tmp_path / "a.json"),
    )
    failing = int((~run.per_case["case_passed"]).sum())
    assert len(calls_file.read_text().splitlines()) == CASES + 3 * failing < 4 * CASES
    pc = run.per_case.set_index("case_id")
    assert set(pc.loc[pc["case_passed"], "trials"]) == {1} and set(pc.loc[~pc["case_passed"], "trials"]) == {4}
    assert "system call(s) saved" in run.summary_text() and "adaptive" in run.summary_text()
    back = load_run(tmp_path / "a.json")
    assert back.per_case["trials"].tolist() == run.per_case["trials"].tolist() and back.meta.adaptive


def test_adaptive_trials_run_a_registered_check_once_per_trial(tmp_path, monkeypatch):
    """Trial 0 was scored twice (once to see what it settles, once with the rest): its checks ran twice."""
    monkeypatch.syspath_prepend(TESTS)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [TESTS, os.environ.get("PYTHONPATH")])))
    calls = tmp_path / "checks"
    monkeypatch.setenv("QAEVAL_TEST_CHECK_CALLS", str(calls))
    run = api.run(str(GOLDEN), trials=3, adaptive=True, isolation="none", check=["hostile_checks:counts_its_calls"])
    ran = calls.read_text().splitlines()
    assert len(ran) == int(run.per_case["trials"].sum()), "once per trial that was run"
    assert len(ran) < 3 * CASES


def test_adaptive_in_a_gate_gives_every_trial_to_a_case_the_baseline_had_flaky(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(TESTS)
    base = tmp_path / "b.json"
    api.baseline(
        str(GOLDEN),
        out=str(base),
        adapter="plugins:make_abstain_every_other",
        trials=4,
        isolation="none",
        concurrency=1,
        allow_failing=True,
    )
    result = api.gate(
        str(GOLDEN),
        baseline=str(base),
        trials=4,
        adaptive=True,
        isolation="none",
        adapter="qaeval.system.reference:make_adapter",
    )
    dvd = next(c.id for c in load_suite(GOLDEN) if "DVD" in c.question)
    pc = result.run.per_case.set_index("case_id")
    assert pc.at[dvd, "trials"] == 4 and pc.at[dvd, "case_passed"], "flaky in the baseline: every trial"
    assert result.ok, result.summary_text()


def test_adaptive_needs_trials(capsys):
    from qaeval.cli import main

    assert main(["run", "--data", str(GOLDEN), "--adaptive"]) == 64
    assert "--trials 2 or more" in capsys.readouterr().err


@pytest.mark.parametrize("data", ["golden", "corpus"])
def test_the_judge_weighs_each_citation_against_the_text_the_checks_read(data, tmp_path, monkeypatch):
    """The one request built for an output (``stream.request_for``, per output, no frames) carries, for each
    citation, the text the deterministic checks resolve that id to: the case's own passages, the system's,
    else the corpus's; for cases with their own passages and from a corpus."""
    from qaeval.scoring.checks import case_bodies

    if data == "corpus":
        from test_corpus_pipeline import corpus_folder

        folder = corpus_folder(tmp_path)
    else:
        folder = GOLDEN
    suite = load_suite(folder)
    judge = OfflineJudge()
    asked = []
    real = judge.judge
    monkeypatch.setattr(judge, "judge", lambda requests: asked.extend(requests) or real(requests))
    run = evaluate(suite, "qaeval.system.reference:make_adapter", judge, RunSettings(isolation="none"))
    outs = {row["case_id"]: row for row in run.outputs.to_dict("records")}
    answered = [cid for cid, row in outs.items() if isinstance(row["error"], str) is False and not row["abstained"]]
    assert sorted(r.case_id for r in asked) == sorted(answered) and asked, "one request per answered output"
    for req in asked:
        bodies = case_bodies(suite[req.case_id], outs[req.case_id], suite.corpus)
        for c in req.citations:
            assert c.text == bodies[c.source_id], (req.case_id, c.source_id)


class CountingStreamJudge(OfflineJudge):
    thread_safe = True
    concurrency = 3

    def __init__(self) -> None:
        super().__init__()
        self.asked = 0
        self.lock = threading.Lock()

    def judge(self, requests):
        with self.lock:
            self.asked += len(requests)
        return super().judge(requests)


def test_a_streaming_judge_is_asked_once_per_output_and_never_again_at_scoring():
    judge = CountingStreamJudge()
    run = evaluate(
        load_suite(GOLDEN), "qaeval.system.reference:make_adapter", judge, RunSettings(isolation="none", trials=2)
    )
    answered = int((~run.runs[0].per_case["abstained"]).sum())
    assert judge.asked == answered, "one call per distinct output, all of them while the system answered"
    assert run.judge_usage["cached"] == answered  # the second trial's identical outputs


def test_lines_spliced_from_another_runs_journal_are_refused(tmp_path):
    """A review: each line's MAC covered only its own fields, so the header of a broken system's journal
    followed by a good system's lines resumed with the good system's outputs under the broken one's name.
    Every line is bound to its journal's run and its place."""
    env, args = interrupted(tmp_path)
    good = (tmp_path / "r.json.journal").read_text().splitlines()
    other = tmp_path / "other"
    other.mkdir()
    env2, _ = interrupted(other, stop_after=2)
    theirs = (other / "r.json.journal").read_text().splitlines()
    (tmp_path / "r.json.journal").write_text("\n".join([good[0]] + theirs[1:]) + "\n")
    done = qaeval(*args, "--resume", cwd=tmp_path, env={**env, "QAEVAL_TEST_STOP_AFTER": "0"})
    assert done.returncode == 65 and "line 2 fails authentication or is out of place" in done.stderr, done.stderr
    (tmp_path / "r.json.journal").write_text("\n".join([good[0], good[2], good[1], *good[3:]]) + "\n")  # reordered
    done = qaeval(*args, "--resume", cwd=tmp_path, env={**env, "QAEVAL_TEST_STOP_AFTER": "0"})
    assert done.returncode == 65 and "out of place" in done.stderr


def test_a_second_interruption_after_a_torn_line_leaves_a_journal_that_resumes(tmp_path):
    """A review: resuming dropped a torn last line but appended after it, so the next resume refused the
    journal. The torn line is cut off before anything is appended."""
    env, args = interrupted(tmp_path)
    path = tmp_path / "r.json.journal"
    path.write_bytes(path.read_bytes()[:-40])  # the run died while writing its last line
    done = qaeval(*args, "--resume", cwd=tmp_path, env={**env, "QAEVAL_TEST_STOP_AFTER": "2"})
    assert done.returncode == 130, done.stderr[-1000:]
    done = qaeval(*args, "--resume", cwd=tmp_path, env={**env, "QAEVAL_TEST_STOP_AFTER": "0"})
    assert done.returncode == 0, done.stderr[-1000:]


@pytest.mark.parametrize("kind", ["fifo", "symlink"])
def test_a_journal_path_that_is_not_a_regular_file_is_refused_not_followed_or_waited_on(kind, tmp_path):
    """A review: a FIFO at PATH.journal hung the run; a symbolic link there was written through."""
    journal = tmp_path / "r.json.journal"
    precious = tmp_path / "precious.txt"
    precious.write_text("keep me")
    if kind == "fifo":
        os.mkfifo(journal)
    else:
        journal.symlink_to(precious)
    for extra in ([], ["--resume"]):
        done = qaeval(
            "run", "--data", str(GOLDEN), "--save", "r.json", "--isolation", "none", *extra, cwd=tmp_path, env={}
        )
        assert done.returncode == 74 and "journal" in done.stderr, (extra, done.stderr[-500:])
    assert precious.read_text() == "keep me"


def test_outputs_made_without_the_boundary_are_not_resumed_into_a_run_that_enforces_it(tmp_path):
    env = {"QAEVAL_TEST_CALLS": str(tmp_path / "calls"), "QAEVAL_TEST_STOP_AFTER": "5"}
    args = [
        "run",
        "--data",
        str(GOLDEN),
        "--adapter",
        "plugins:make_interrupter",
        "--concurrency",
        "1",
        "--save",
        "r.json",
    ]
    done = qaeval(*args, "--isolation", "none", cwd=tmp_path, env={**env, "QAEVAL_TEST_IN_HARNESS": "1"})
    assert done.returncode == 130
    done = qaeval(*args, "--resume", cwd=tmp_path, env={**env, "QAEVAL_TEST_STOP_AFTER": "0"})
    assert done.returncode == 64 and 'isolation: "none" then, "process" now' in done.stderr, done.stderr[-800:]


def test_the_journal_may_not_overwrite_an_input(tmp_path):
    """A review: `gate --baseline g.json.journal --save g.json` overwrote, then deleted, the baseline."""
    base = tmp_path / "g.json.journal"
    api.baseline(str(GOLDEN), out=str(tmp_path / "b.json"), isolation="none")
    base.write_bytes((tmp_path / "b.json").read_bytes())
    done = qaeval("gate", "--data", str(GOLDEN), "--baseline", str(base), "--save", "g.json", cwd=tmp_path, env={})
    assert done.returncode == 64 and "run's journal" in done.stderr, done.stderr[-500:]
    assert base.read_bytes() == (tmp_path / "b.json").read_bytes()


def test_an_adaptive_gate_tests_every_trial_it_ran_against_the_baseline_that_chose_them(tmp_path, monkeypatch):
    """The run names the baseline its later trials were chosen against (a digest of its pass counts);
    the trials test then uses every trial under that rule, and against any other baseline only the first
    trial, the one every case had whatever it showed."""
    from dataclasses import replace

    from qaeval.record.read import read_baseline
    from qaeval.record.write import write_record
    from qaeval.verdicts.tiers import _trial_pairs

    monkeypatch.syspath_prepend(TESTS)
    base = tmp_path / "b.json"
    common = dict(isolation="none", concurrency=1)
    api.baseline(
        str(GOLDEN), out=str(base), adapter="plugins:make_abstain_every_other", trials=4, allow_failing=True, **common
    )
    saved = tmp_path / "g.json"
    result = api.gate(
        str(GOLDEN),
        baseline=str(base),
        trials=4,
        adaptive=True,
        adapter="qaeval.system.reference:make_adapter",
        **common,
    )
    baseline = read_baseline(base)
    assert result.run.meta.adaptive_baseline == baseline.settled().digest
    write_record(result.run, saved)
    assert load_run(saved).meta.adaptive_baseline == baseline.settled().digest, "kept in the record"
    dvd = next(c.id for c in load_suite(GOLDEN) if "DVD" in c.question)
    cases = _trial_pairs(result.run, baseline, "faithfulness_rate", result.match.matched)
    assert {c.rule for c in cases} == {"first or baseline"} and max(len(c.current) for c in cases) == 4
    other = replace(baseline, cases={**baseline.cases, dvd: replace(baseline.cases[dvd], passes=4)})
    cases = _trial_pairs(result.run, other, "faithfulness_rate", result.match.matched)
    assert {c.rule for c in cases} == {None} and {len(c.current) for c in cases} == {1}


def test_resuming_adaptive_trials_chosen_against_another_baseline_is_refused_naming_it(tmp_path):
    """The trials a journal holds were chosen against one baseline's pass counts; a run choosing them
    against another would take a design that is not its own, so it may not resume from them."""
    from qaeval.commands.pipeline import run_identity
    from qaeval.core.errors import UsageError
    from qaeval.scoring.journal import JournalWriter, read_journal

    suite = load_suite(GOLDEN)
    judge = OfflineJudge()

    def identity(digest):
        return run_identity(suite, "x:y", judge, 5, 3, None, True, "none", digest)

    path = tmp_path / "r.json.journal"
    JournalWriter(path, identity("sha256:aaa")).close()
    read_journal(path, identity("sha256:aaa"), [c.id for c in suite] * 3, keep_errors=False)
    with pytest.raises(UsageError, match='adaptive_baseline: "sha256:aaa" then, "sha256:bbb" now'):
        read_journal(path, identity("sha256:bbb"), [c.id for c in suite] * 3, keep_errors=False)
    assert "adaptive_baseline" not in run_identity(suite, "x:y", judge, 5, 3, None, False, "none", "sha256:aaa")
