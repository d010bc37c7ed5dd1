"""The journal's promises (issue #49): a line is on disk whole or not at all, a resumed run is a run of
the same adapter code, a refused baseline is kept as it was, an adaptive run resumes into trials its
rule allows, and the user is told what happens to a journal (started over, reused, interrupted)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import GOLDEN, ROOT

from qaeval import api
from qaeval.data.cases import load_suite
from qaeval.record.read import load_run

TESTS = str(ROOT / "tests")
CASES = len(load_suite(GOLDEN))

# The CLI with the journal's file on a disk that is full for one write: the first verdict line goes
# half onto the disk and the write fails (ENOSPC), as a momentary full disk does.
DISK_FULL_ONCE = """
import errno, os, sys
from qaeval.scoring import journal

class FullOnce:
    def __init__(self, file):
        self.file, self.failed = file, False

    def write(self, data):
        text = data.decode() if isinstance(data, bytes) else data
        if not self.failed and '"kind": "verdict"' in text:
            self.failed = True
            open(os.environ["QAEVAL_TEST_FULL"], "w").close()  # the test knows it happened
            self.file.write(data[: len(data) // 2])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return self.file.write(data)

    def __getattr__(self, name):
        return getattr(self.file, name)

started = journal.JournalWriter.__init__

def on_a_full_disk(self, *args, **kwargs):
    started(self, *args, **kwargs)
    self._file = FullOnce(self._file)

journal.JournalWriter.__init__ = on_a_full_disk
from qaeval.cli import main
sys.exit(main(sys.argv[1:]))
"""


def qaeval(*args: str, cwd: Path, env: dict[str, str], script: str | None = None) -> subprocess.CompletedProcess[str]:
    head = ["-c", script] if script is not None else ["-m", "qaeval"]
    return subprocess.run(
        [sys.executable, *head, *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env={**os.environ, "QAEVAL_PROGRESS": "0", "PYTHONPATH": os.pathsep.join([TESTS, str(cwd)]), **env},
    )


TWO = ("--trials", "2")
# The offline judge is asked for a trial's requests together once the next trial's outputs come: a run of
# two trials stopped near its end has journaled the first trial's verdicts.
TRIAL_ONE_JUDGED = {"QAEVAL_TEST_STOP_AFTER": str(2 * CASES - 1)}
GO_ON = {"QAEVAL_TEST_STOP_AFTER": "0"}


def run_args(adapter: str = "plugins:make_interrupter", *extra: str) -> list[str]:
    return ["run", "--data", str(GOLDEN), "--adapter", adapter, "--concurrency", "1", "--save", "r.json", *extra]


def journal_lines(tmp_path: Path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "r.json.journal").read_text().splitlines()]


def test_a_full_disk_during_a_verdict_write_leaves_no_half_line_and_the_journal_resumes(tmp_path):
    """A review: the line a full disk refused stayed buffered and went out later beside the next line,
    with the same sequence number, and the next --resume called the journal forged (65)."""
    env = {**TRIAL_ONE_JUDGED, "QAEVAL_TEST_CALLS": str(tmp_path / "calls"), "QAEVAL_TEST_FULL": str(tmp_path / "full")}
    done = qaeval(*run_args("plugins:make_interrupter", *TWO), cwd=tmp_path, env=env, script=DISK_FULL_ONCE)
    assert done.returncode == 130, done.stderr[-2000:]
    assert (tmp_path / "full").exists(), "a verdict's write failed"
    lines = journal_lines(tmp_path)  # every line is whole JSON: no half line
    assert [line["seq"] for line in lines] == list(range(len(lines))), "no sequence number used twice"
    kept = sum(line["kind"] == "output" for line in lines)
    done = qaeval(*run_args("plugins:make_interrupter", *TWO, "--resume"), cwd=tmp_path, env={**env, **GO_ON})
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"{kept} of {2 * CASES} (case, trial) output(s) reused" in done.stdout, "everything written is reused"


def test_a_full_disk_says_in_the_run_how_many_journal_lines_it_lost(tmp_path, monkeypatch):
    """The run goes on without the line (the judge's verdict is in the run; a resume asks for it again)."""
    import errno

    from qaeval.scoring import journal

    started = journal.JournalWriter.__init__

    class FullOnce:
        def __init__(self, file):
            self.file, self.failed = file, False

        def write(self, data):
            if not self.failed and b'"kind": "verdict"' in data:
                self.failed = True
                self.file.write(data[:10])
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return self.file.write(data)

        def __getattr__(self, name):
            return getattr(self.file, name)

    def on_a_full_disk(self, *args, **kwargs):
        started(self, *args, **kwargs)
        self._file = FullOnce(self._file)

    monkeypatch.setattr(journal.JournalWriter, "__init__", on_a_full_disk)
    run = api.run(str(GOLDEN), isolation="none", save=str(tmp_path / "r.json"))
    assert any("1 journal line(s) could not be written (No space left on device)" in n for n in run.notes), run.notes
    assert run.ok and (tmp_path / "r.json").is_file()


def interrupted(tmp_path: Path, adapter: str = "plugins:make_interrupter") -> dict[str, str]:
    env = {"QAEVAL_TEST_CALLS": str(tmp_path / "calls"), "QAEVAL_TEST_STOP_AFTER": "7"}
    done = qaeval(*run_args(adapter), cwd=tmp_path, env=env)
    assert done.returncode == 130, done.stderr[-2000:]
    return {**env, "QAEVAL_TEST_STOP_AFTER": "0"}


def test_a_last_line_cut_just_before_its_newline_is_kept_and_the_next_resume_reads_on(tmp_path):
    """A review: the line was kept but counted one byte longer than it was; resume padded the file with a
    NUL and glued the next line onto it, so the following resume said "damaged" (65)."""
    env = interrupted(tmp_path)
    path = tmp_path / "r.json.journal"
    path.write_bytes(path.read_bytes()[:-1])  # the run died between the line and its newline
    cut = journal_lines(tmp_path)[-1]
    done = qaeval(*run_args(), "--resume", cwd=tmp_path, env={**env, "QAEVAL_TEST_STOP_AFTER": "2"})
    assert done.returncode == 130, done.stderr[-1000:]
    assert b"\0" not in path.read_bytes()
    lines = journal_lines(tmp_path)
    assert cut in lines and len(lines) > lines.index(cut) + 1, "the cut line was kept, and the next began after it"
    kept = sum(line["kind"] == "output" for line in lines)
    done = qaeval(*run_args(), "--resume", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-1000:]
    assert f"{kept} of {CASES} (case, trial) output(s) reused" in done.stdout


def test_resuming_with_changed_adapter_code_is_refused_naming_the_file(tmp_path):
    """A review: the journal knew the adapter by its name only; version B resumed version A's run, and
    one record held A's answers for some cases and B's for the others."""
    (tmp_path / "my_rag.py").write_text("from plugins import make_interrupter\n")
    env = interrupted(tmp_path, "my_rag:make_interrupter")
    (tmp_path / "my_rag.py").write_text("from plugins import make_interrupter\n# version B\n")
    done = qaeval(*run_args("my_rag:make_interrupter"), "--resume", cwd=tmp_path, env=env)
    assert done.returncode == 64, done.stderr[-1000:]
    assert "adapter_code: my_rag.py changed since the journal was written" in done.stderr
    assert "run without --resume to start over" in done.stderr
    (tmp_path / "my_rag.py").write_text("from plugins import make_interrupter\n")  # version A again
    done = qaeval(*run_args("my_rag:make_interrupter"), "--resume", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-1000:]


def test_a_module_of_a_package_is_known_by_its_packages_code(tmp_path):
    package = tmp_path / "my_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "adapter.py").write_text("from my_pkg.prompts import PROMPT\nfrom plugins import make_interrupter\n")
    (package / "prompts.py").write_text("PROMPT = 'A'\n")
    env = interrupted(tmp_path, "my_pkg.adapter:make_interrupter")
    (package / "prompts.py").write_text("PROMPT = 'B'\n")
    done = qaeval(*run_args("my_pkg.adapter:make_interrupter"), "--resume", cwd=tmp_path, env=env)
    assert done.returncode == 64, done.stderr[-1000:]
    assert "adapter_code: my_pkg/prompts.py changed" in done.stderr


class BuiltInPython:
    """An adapter object made in Python (a notebook's): the reference system."""

    def __init__(self) -> None:
        from qaeval.system.reference import ReferenceHub

        self.hub = ReferenceHub()

    def answer(self, case):
        return self.hub.answer(case)


def test_an_adapter_object_resumes_with_a_note_saying_what_is_not_known(tmp_path):
    from qaeval.commands.pipeline import run_identity
    from qaeval.judges.offline import OfflineJudge
    from qaeval.scoring.journal import JournalWriter, journal_path
    from qaeval.system.calls import adapter_label
    from qaeval.system.identity import adapter_code

    adapter, record = BuiltInPython(), tmp_path / "r.json"
    identity = run_identity(
        load_suite(GOLDEN),
        adapter_label(adapter),
        OfflineJudge(),
        5,
        1,
        None,
        False,
        "none",
        code=adapter_code(adapter)[0],
    )
    assert identity["adapter_code"] == {"test_journal.py": identity["adapter_code"]["test_journal.py"]}
    JournalWriter(journal_path(record), identity).close()  # an interrupted run that got no further
    run = api.run(str(GOLDEN), adapter=adapter, isolation="none", save=str(record), resume=True)
    assert any(
        "weaker check that the adapter is unchanged" in n and "what the object was built with" in n for n in run.notes
    ), run.notes


def test_allow_failing_with_resume_keeps_the_refused_run_without_asking_the_system_again(tmp_path, monkeypatch, capsys):
    """A review: without --keep-errors the failed output, the very reason the baseline was refused, was
    asked for again, and a different, green baseline was written."""
    from qaeval.cli import main
    from qaeval.record.read import read_baseline

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [TESTS, os.environ.get("PYTHONPATH")])))
    calls, down, out = tmp_path / "calls", tmp_path / "down", tmp_path / "b.json"
    monkeypatch.setenv("QAEVAL_TEST_CALLS", str(calls))
    monkeypatch.setenv("QAEVAL_TEST_DOWN", str(down))
    down.touch()  # the backend is down for one case
    command = ["baseline", "--data", str(GOLDEN), "--out", str(out), "--adapter", "journal_plugins:make_outage"]
    assert main([*command, "--quiet"]) == 1
    assert "add --resume as well to keep this very run" in capsys.readouterr().err
    asked = len(calls.read_text().splitlines())
    down.unlink()  # it is up again: asking again would now pass
    assert main([*command, "--allow-failing", "--resume"]) == 0
    assert len(calls.read_text().splitlines()) == asked, "the system was not asked again"
    base = read_baseline(out)
    assert base.allowed_failing and "adapter errors: 1" in capsys.readouterr().out


def test_an_adaptive_gate_whose_errored_first_trial_passes_on_resume_finishes(tmp_path):
    """A review: a case whose first adaptive trial was an adapter error got more trials; on resume that
    trial was asked again (it passed) and the later ones were kept, an arrangement the adaptive rule
    never gives, and the gate's trials test divided by zero (exit 70) on every resume."""
    done = qaeval("baseline", "--data", str(GOLDEN), "--out", "b.json", "--trials", "3", cwd=tmp_path, env={})
    assert done.returncode == 0, done.stderr[-1000:]
    (tmp_path / "down").touch()
    env = {"QAEVAL_TEST_CALLS": str(tmp_path / "calls"), "QAEVAL_TEST_DOWN": str(tmp_path / "down")}
    env["QAEVAL_TEST_IN_PROCESS"] = "1"  # adaptive trials run with the boundary given up (isolation none)
    gate = ["gate", "--data", str(GOLDEN), "--baseline", "b.json", "--trials", "3", "--adaptive", "--save", "g.json"]
    gate += ["--adapter", "journal_plugins:make_outage", "--concurrency", "1", "--isolation", "none"]
    # the run asks 27 times (15 first trials, then 2 more for each of the 6 that did not pass), this case at
    # its 2nd, 16th and 22nd call: Ctrl-C at the 26th, once its later trials are in the journal
    done = qaeval(*gate, cwd=tmp_path, env={**env, "QAEVAL_TEST_INTERRUPT_AT_CALL": "26"})
    assert done.returncode == 130, done.stderr[-2000:]
    question = "What does a non-resident pay for an annual library card?"
    assert (tmp_path / "calls").read_text().splitlines().count(question) == 3, "the errored case got more trials"
    journaled = (
        [
            (line["kind"], line.get("trial"), line.get("case_id"))
            for line in map(json.loads, (tmp_path / "g.json.journal").read_text().splitlines())
        ],
        done.stderr[-2000:],
    )
    (tmp_path / "down").unlink()
    done = qaeval(*gate, "--resume", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    run = load_run(tmp_path / "g.json").run
    case = next(c.id for c in load_suite(GOLDEN) if c.question == question)
    assert run.per_case.set_index("case_id").at[case, "trials"] == 1, "the trials the rule gives a passing first"
    assert any("their case's first trial, asked again, settles it" in n for n in run.notes), "\n".join(
        [*run.notes, *map(str, journaled[0]), journaled[1]]
    )


def test_the_trials_test_of_trials_the_rule_could_not_give_tests_them_as_fixed_trials():
    """Trials no arrangement of which the adaptive rule allows (every one passed, yet the case had three: the
    run the review resumed) divided by zero (exit 70); they are tested as fixed trials."""
    from qaeval.verdicts.noise import CaseTrials, trials_test

    first_passed_yet_more = CaseTrials((1.0, 1.0, 1.0), (1.0, 0.5, 0.5), (True,) * 3, (True,) * 3, "first")
    p, floor, moved = trials_test([first_passed_yet_more], higher_is_better=True)
    fixed = trials_test([replace(first_passed_yet_more, rule=None)], higher_is_better=True)
    assert (p, floor, moved) == fixed and moved == 1 and 0 < floor <= p <= 1


def test_a_run_without_resume_says_it_starts_over_from_an_interrupted_runs_journal(tmp_path):
    env = interrupted(tmp_path)
    done = qaeval(*run_args(), cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-1000:]
    assert "qaeval: starting over: r.json.journal held an interrupted run's outputs" in done.stderr
    assert "run the same command with --resume" in done.stderr


def test_reused_verdicts_are_not_counted_as_judge_calls_this_run_spent(tmp_path):
    """A review: a resumed run counted the verdicts it reused as judge calls and tokens spent again."""
    env = {**TRIAL_ONE_JUDGED, "QAEVAL_TEST_CALLS": str(tmp_path / "calls")}
    done = qaeval(*run_args("plugins:make_interrupter", *TWO), cwd=tmp_path, env=env)
    assert done.returncode == 130, done.stderr[-1000:]
    reused = sum(line["kind"] == "verdict" for line in journal_lines(tmp_path))
    assert reused
    done = qaeval(*run_args("plugins:make_interrupter", *TWO, "--resume"), cwd=tmp_path, env={**env, **GO_ON})
    assert done.returncode == 0, done.stderr[-1000:]
    whole = api.run(str(GOLDEN), isolation="none", trials=2).judge_usage
    assert f"{reused} verdict(s) (counted as cached: no judge call or token of this run)" in done.stdout
    assert f"judge calls: {whole['calls']} ({whole['cached'] + reused} from cache" in done.stdout


def test_ctrl_c_names_the_journal_and_the_command_that_resumes_it(tmp_path):
    env = {"QAEVAL_TEST_CALLS": str(tmp_path / "calls"), "QAEVAL_TEST_STOP_AFTER": "7"}
    done = qaeval(*run_args(), cwd=tmp_path, env=env)
    assert done.returncode == 130
    resume = " ".join(["qaeval", *run_args(), "--resume"])
    assert f"qaeval: interrupted; r.json.journal keeps what the run did; to go on from there, run: {resume}" in (
        done.stderr
    ), done.stderr[-1000:]
    done = qaeval(*resume.split()[1:], cwd=tmp_path, env={**env, "QAEVAL_TEST_STOP_AFTER": "0"})
    assert done.returncode == 0, done.stderr[-1000:]


def test_ctrl_c_hands_on_every_answer_the_adapters_threads_finished_before_it(monkeypatch):
    """Isolation none: the adapter's threads can answer ahead of the loop that hands outputs on (and so to
    the journal). Ctrl-C arriving while finished answers still waited in the queue lost them: the adaptive
    resume test's journal twice held none of the later trials under load. Failed before."""
    import queue
    import threading

    from qaeval.system import inprocess
    from qaeval.system.calls import adapter_spec

    suite = load_suite(GOLDEN)
    finished = threading.Semaphore(0)

    class Held:
        """The replies queue, except that the loop's first wait finds every answer finished, then Ctrl-C."""

        def __init__(self):
            self.real, self.first = queue.SimpleQueue(), True

        def put(self, item):
            self.real.put(item)
            finished.release()

        def get(self, timeout):
            if self.first:
                self.first = False
                for _ in range(len(suite)):
                    assert finished.acquire(timeout=60), "the adapter's threads did not answer"
                raise KeyboardInterrupt
            return self.real.get(timeout=timeout)

        def get_nowait(self):
            return self.real.get_nowait()

    real_init = inprocess._ThreadRun.__init__

    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        self.results = Held()

    monkeypatch.setattr(inprocess._ThreadRun, "__init__", init)
    handed: list[int] = []
    spec = adapter_spec("qaeval.system.reference:make_adapter", ship=False)
    with pytest.raises(KeyboardInterrupt):
        inprocess.run_in_process(spec, suite, concurrency=2, timeout=60, done=lambda i, row: handed.append(i))
    assert sorted(handed) == list(range(len(suite))), "every finished answer was handed on before the interrupt"


def test_ctrl_c_while_the_adapters_thread_is_started_hands_on_what_it_answered(monkeypatch):
    """Under load the adapter's thread could answer every case before ``Thread.start`` returned to the loop,
    and a Ctrl-C arriving there (not in the loop) lost every answer: the adaptive resume test's journal
    held none of the later trials. Failed before."""
    import time

    from qaeval.system import inprocess
    from qaeval.system.calls import adapter_spec

    suite = load_suite(GOLDEN)
    real_spawn = inprocess._ThreadRun.spawn

    def spawn(self):
        real_spawn(self)
        give_up = time.monotonic() + 60
        while self.results.qsize() < len(suite):  # a condition to wait for, bounded
            assert time.monotonic() < give_up, "the adapter's thread did not answer"
            time.sleep(0.01)
        raise KeyboardInterrupt  # as if Ctrl-C came while start() was still waiting

    monkeypatch.setattr(inprocess._ThreadRun, "spawn", spawn)
    handed: list[int] = []
    spec = adapter_spec("qaeval.system.reference:make_adapter", ship=False)
    with pytest.raises(KeyboardInterrupt):
        inprocess.run_in_process(spec, suite, concurrency=1, timeout=60, done=lambda i, row: handed.append(i))
    assert sorted(handed) == list(range(len(suite))), "every answer was handed on before the interrupt"


def test_a_ctrl_c_inside_a_journal_write_leaves_a_journal_that_reads_back(tmp_path, monkeypatch):
    """Ctrl-C hands on what the adapter already answered, so lines can follow an interrupted write; one
    cut between its text and its sequence number made the next line repeat the number, and the resume
    refused the journal ('out of place'). Failed before."""
    from qaeval.scoring import journal as J

    path = tmp_path / "r.json.journal"
    writer = J.JournalWriter(path, {"data": "x"}, secret=b"k" * 32)
    row = {"case_id": "a", "answer": "x", "output_fingerprint": "f"}
    writer.output(0, row, 0)
    real = J.JournalWriter._append

    def cut(self, data):
        real(self, data)
        raise KeyboardInterrupt  # after the text, before its sequence number counts

    monkeypatch.setattr(J.JournalWriter, "_append", cut)
    with pytest.raises(KeyboardInterrupt):
        writer.output(1, {**row, "case_id": "b"}, 0)
    monkeypatch.setattr(J.JournalWriter, "_append", real)
    writer.output(2, {**row, "case_id": "c"}, 0)  # handed on after the interrupt
    writer.close()
    seqs = [json.loads(line)["seq"] for line in path.read_text().splitlines()]
    assert seqs == sorted(set(seqs)) == list(range(len(seqs))), seqs
