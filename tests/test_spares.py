"""Spare workers (qaeval.system.spares): a run's worker interpreters start while the suite
loads; a pool takes them; no user code runs in one before a pool hands it its setup, so none runs at
all when the data is refused; and none is left behind."""

from __future__ import annotations

import os
import shutil

import pytest
from conftest import GOLDEN, make_case, write_cases

from qaeval import DatasetError, api, load_suite, run_suite
from qaeval.system import calls, spares


@pytest.fixture
def spawned(monkeypatch):
    """Every worker interpreter started, as (where, UserProcess): 'spare' or 'pool' (one the pool
    started itself because no spare was there)."""
    started = []
    real = calls.spawn_worker

    def spawn(env, frame_limit, where):
        proc = real(env, frame_limit)
        started.append((where, proc))
        return proc

    monkeypatch.setattr(spares, "spawn_worker", lambda env, limit: spawn(env, limit, "spare"))
    monkeypatch.setattr(calls, "spawn_worker", lambda env, limit: spawn(env, limit, "pool"))
    return started


def gone(proc) -> bool:
    return proc.popen.poll() is not None and not os.path.exists(proc.scratch)


def test_a_pool_takes_the_spares_started_while_the_suite_loaded(spawned):
    with spares.spare_workers(2, str(GOLDEN)):
        suite = load_suite(GOLDEN)
        frame = run_suite(suite, "plugins:make_pid_teller", concurrency=2)
    started = [proc for where, proc in spawned if where == "spare"]
    assert len(started) == 2 and [where for where, _ in spawned] == ["spare", "spare"], "no worker of its own"
    assert {int(a) for a in frame["answer"]} <= {proc.pid for proc in started}, "the spares answered"
    assert all(gone(proc) for proc in started)


def test_spares_a_pool_does_not_need_are_stopped_once_it_has_started(spawned):
    with spares.spare_workers(3, str(GOLDEN)):
        run_suite(load_suite(GOLDEN), "plugins:make_pid_teller", concurrency=1)
        assert len(spawned) == 3 and all(gone(proc) for _, proc in spawned), "stopped before the block ends"
        assert spares._SPARES.get() == []
    assert spares._SPARES.get() is None


def test_spares_left_when_the_block_ends_are_stopped_and_leave_nothing(spawned):
    with spares.spare_workers(2, str(GOLDEN)):
        assert len(spawned) == 2 and not any(gone(proc) for _, proc in spawned)
    assert all(gone(proc) for _, proc in spawned)


def test_no_more_spares_than_twice_the_cores(spawned, monkeypatch):
    """An adversarial review: --concurrency 64 on a two-case suite started 64 interpreters (5.4 s against
    0.4 s, and 1.1 GB resident while they waited)."""
    monkeypatch.setattr(os, "cpu_count", lambda: 2)  # the same few interpreters on a machine of any size
    with spares.spare_workers(10_000, str(GOLDEN)):
        assert len(spawned) == spares.spare_limit() == 4
    assert all(gone(proc) for _, proc in spawned)


def test_a_run_on_another_thread_never_takes_this_threads_spares(spawned):
    """An adversarial review: a pool on another thread took the main thread's spares, and the main
    run's guard then killed them, mid-case, as children it had not had before."""
    import threading

    answers = {}

    def other_run():
        answers["frame"] = run_suite(load_suite(GOLDEN), "plugins:make_pid_teller", concurrency=1)

    with spares.spare_workers(2, str(GOLDEN)):
        thread = threading.Thread(target=other_run)
        thread.start()
        thread.join()
        assert len(spares._SPARES.get()) == 2, "both still waiting for this thread's pool"
    assert [where for where, _ in spawned] == ["spare", "spare", "pool"]
    assert {int(a) for a in answers["frame"]["answer"]} == {spawned[2][1].pid}


def test_a_spare_that_went_before_it_was_needed_is_not_taken(spawned):
    with spares.spare_workers(2, str(GOLDEN)):
        dead = spawned[0][1]
        dead.kill()
        dead.reap(5)
        frame = run_suite(load_suite(GOLDEN), "plugins:make_pid_teller", concurrency=2)
    assert frame["error"].isna().all()
    assert [where for where, _ in spawned] == ["spare", "spare", "pool"]
    assert dead.pid not in {int(a) for a in frame["answer"]}


def test_a_spare_whose_environment_names_the_data_folder_is_not_taken(spawned, tmp_path, monkeypatch):
    """A worker's environment loses every variable that names its run's data folder. A spare started
    for another folder keeps such a variable, so the pool starts its own worker; a spare started with
    the same environment (no variable names either folder) is as confined, and is taken."""
    other = tmp_path / "other"
    shutil.copytree(GOLDEN, other)
    monkeypatch.setenv("QAEVAL_TEST_WHERE", str(other))
    with spares.spare_workers(1, str(GOLDEN)):
        frame = run_suite(load_suite(other), "plugins:make_pid_teller", concurrency=1)
    assert [where for where, _ in spawned] == ["spare", "pool"]
    assert {int(a) for a in frame["answer"]} == {spawned[1][1].pid}
    assert all(gone(proc) for _, proc in spawned)
    monkeypatch.delenv("QAEVAL_TEST_WHERE")
    spawned.clear()
    with spares.spare_workers(1, str(GOLDEN)):
        run_suite(load_suite(other), "plugins:make_pid_teller", concurrency=1)
    assert [where for where, _ in spawned] == ["spare"]


def test_no_user_code_runs_when_the_data_is_refused(spawned, tmp_path, monkeypatch):
    mark = tmp_path / "built"
    monkeypatch.setenv("QAEVAL_TEST_MARK", str(mark))
    write_cases(tmp_path / "data", [make_case(id="a"), make_case(id="a")])  # a duplicate id
    with pytest.raises(DatasetError, match="duplicate id"):
        api.run(str(tmp_path / "data"), adapter="plugins:make_pid_teller", isolation="process", concurrency=2)
    assert [where for where, _ in spawned] == ["spare", "spare"], "the spares had started"
    assert not mark.exists(), "the adapter's factory never ran"
    assert all(gone(proc) for _, proc in spawned)


def test_a_run_in_worker_processes_uses_its_spares(spawned, tmp_path, monkeypatch):
    mark = tmp_path / "built"
    monkeypatch.setenv("QAEVAL_TEST_MARK", str(mark))
    result = api.run(str(GOLDEN), adapter="plugins:make_pid_teller", isolation="process", concurrency=2)
    assert [where for where, _ in spawned] == ["spare", "spare"]
    built = {int(line) for line in mark.read_text().split()}
    assert {int(a) for a in result.outputs["answer"]} <= built <= {proc.pid for _, proc in spawned}
    assert all(gone(proc) for _, proc in spawned)


def test_no_spares_without_worker_processes(spawned):
    api.run(str(GOLDEN), isolation="none")
    assert spawned == []


_HEAD_START = """
import json, sys
from qaeval.system import calls, hardening, spares
started = []
real = calls.spawn_worker
def spawn(env, limit, where):
    proc = real(env, limit)
    started.append([where, proc.pid, "pandas" in sys.modules, hardening._guard_depth])
    return proc
spares.spawn_worker = lambda env, limit: spawn(env, limit, "spare")
calls.spawn_worker = lambda env, limit: spawn(env, limit, "pool")
from qaeval.cli import main
code = main(sys.argv[1:] + ["--quiet", "--adapter", "plugins:make_pid_teller", "--concurrency", "2"])
print(json.dumps({"code": code, "started": started}))
"""


def _head_start(tmp_path, *args):
    import json
    import subprocess
    import sys

    mark = tmp_path / "built"
    tests = os.path.dirname(__file__)  # plugins.py
    env = {**os.environ, "QAEVAL_TEST_MARK": str(mark),
           "PYTHONPATH": os.pathsep.join(filter(None, [tests, os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", _HEAD_START, *args], env=env, capture_output=True, text=True,
                          timeout=120)
    found = json.loads(done.stdout.splitlines()[-1])
    assert found["code"] in (0, 1, 2), done.stderr  # a verdict, not an error
    built = {int(line) for line in mark.read_text().split()} if mark.exists() else set()
    return found["started"], built


@pytest.mark.parametrize("command", ["run", "baseline", "calibrate"])
def test_the_command_line_starts_a_runs_workers_before_it_imports_pandas_and_the_run_takes_them(tmp_path, command):
    """`qaeval run` (and baseline, and calibrate with labels) starts its workers' interpreters before it
    imports pandas (half a second on one core while the other would wait), and the run answers with
    them: it starts none of its own. (A review: calibrate started them and never used them.)"""
    extra = {"run": [], "baseline": ["--out", str(tmp_path / "b.json"), "--allow-failing"],
             "calibrate": ["--labels", str(GOLDEN / "calibration" / "human_labels.jsonl")]}[command]
    started, built = _head_start(tmp_path, command, "--data", str(GOLDEN), *extra)
    assert [(where, pandas) for where, _, pandas, _ in started] == [("spare", False), ("spare", False)]
    assert all(depth >= 1 for *_, depth in started), "inside the run's guard, whose sweep covers them"
    assert built and built <= {pid for _, pid, *_ in started}, "the adapter was built in those workers"


def test_early_spares_go_to_the_first_block_with_their_environment_and_are_stopped_if_unused(spawned, monkeypatch):
    """``spares.early`` (the command line's head start): a ``spare_workers`` block for the same environment
    adopts them instead of starting its own; one for another environment (a variable set in between)
    starts its own and stops the early ones at once, never handing them a setup; an early block no run
    used stops its spares at its end."""
    with spares.early(2, str(GOLDEN)):
        with spares.spare_workers(2, str(GOLDEN)):
            assert [proc for _, proc in spares._SPARES.get()] == [proc for _, proc in spawned]
        assert len(spawned) == 2 and all(gone(proc) for _, proc in spawned), "the block stopped what it adopted"
    spawned.clear()
    with spares.early(2, str(GOLDEN)):
        monkeypatch.setenv("QAEVAL_TEST_LATER", "1")
        with spares.spare_workers(2, str(GOLDEN)):
            assert len(spawned) == 4 and all(gone(proc) for _, proc in spawned[:2]), "stopped, not adopted"
            assert [proc for _, proc in spares._SPARES.get()] == [proc for _, proc in spawned[2:]]
    assert all(gone(proc) for _, proc in spawned)
    spawned.clear()
    with spares.early(2, str(GOLDEN)):
        assert len(spawned) == 2 and not any(gone(proc) for _, proc in spawned)
    assert all(gone(proc) for _, proc in spawned) and spares._EARLY == {}


def test_early_spares_are_only_adopted_on_their_own_thread(spawned):
    """A review: the early spares were one list for the process, so a run on another thread took them,
    and a second early block replaced the first's list, whose spares were then never stopped."""
    import threading

    found = {}

    def other():
        with spares.early(1, str(GOLDEN)), spares.spare_workers(1, str(GOLDEN)):
            found["other"] = [proc for _, proc in spares._SPARES.get()]

    with spares.early(1, str(GOLDEN)):
        mine = spawned[0][1]
        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
        assert found["other"] and mine not in found["other"] and not gone(mine)
    assert all(gone(proc) for _, proc in spawned) and spares._EARLY == {}
