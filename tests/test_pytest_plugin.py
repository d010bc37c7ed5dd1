"""The pytest plugin as docs/guides/ci.md runs it: from the project's root, where pytest also knows the project's
own tests (``testpaths``)."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import ROOT


def pytest_at_root(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**os.environ, "QAEVAL_PROGRESS": "0"},
    )


def test_the_readme_command_collects_only_the_golden_cases():
    done = pytest_at_root("--qaeval-data", "golden", "-m", "qaeval")
    # the reference system fails five golden cases by design, as docs/guides/ci.md says
    assert done.returncode == 1, done.stdout[-2000:]
    assert done.stdout.splitlines()[-1].startswith("5 failed, 10 passed in "), done.stdout[-500:]
    assert "deselected" not in done.stdout


def test_paths_given_are_collected_beside_the_golden_cases():
    listed = pytest_at_root("--qaeval-data", "golden", "tests/test_retrieval.py", "--collect-only").stdout
    assert "golden/frozen.jsonl::single-0001" in listed and "tests/test_retrieval.py::" in listed, listed[-2000:]


def test_a_run_that_fails_is_run_once_and_reported_on_every_item(tmp_path):
    """Issue 40: after a failure each item ran the suite again: a factory that raises was called 15 times
    for 15 cases (and a hanging one waited --startup-timeout 15 times)."""
    calls = tmp_path / "calls"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            "--qaeval-data",
            "golden",
            "-m",
            "qaeval",
            "--qaeval-adapter",
            "plugins:make_counted_raising_factory",
            "--qaeval-isolation",
            "none",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**os.environ, "QAEVAL_PROGRESS": "0", "QAEVAL_TEST_CALLS": str(calls), "PYTHONPATH": str(ROOT / "tests")},
    )
    assert done.stdout.splitlines()[-1].startswith("15 failed"), done.stdout[-1500:]
    assert calls.read_text().splitlines() == ["built"], "the factory is called once, not once per case"
    assert done.stdout.count("the index is not there") >= 15


def test_a_miscitation_names_the_cited_source_beside_the_gold_one():
    """With a cite-the-second-passage bug the message said only `judged unfaithful (score 0)`."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            "--qaeval-data",
            "golden",
            "--qaeval-adapter",
            "plugins:make_cites_second",
            "-m",
            "qaeval",
            "-k",
            "single-0003",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**os.environ, "QAEVAL_PROGRESS": "0", "PYTHONPATH": str(ROOT / "tests")},
    )
    assert done.returncode == 1, done.stdout[-2000:]
    assert "judged unfaithful (score 0; cited media-studio; gold eastside-profile)" in done.stdout, done.stdout[-2000:]


def test_the_judge_is_closed_when_the_run_ends(monkeypatch):
    """A judge of the user's own runs in its own process: the plugin made it for the run and never closed
    it, so the process stayed up for the rest of the pytest session."""
    from types import SimpleNamespace

    from qaeval import pytest_plugin
    from qaeval.host import clients

    closed = []
    monkeypatch.setattr(clients, "close_judge", lambda judge: closed.append(judge))
    given = {"qaeval_data": str(ROOT / "golden"), "qaeval_isolation": "none"}
    runs = pytest_plugin._Runs(SimpleNamespace(getoption=lambda name: given.get(name)))  # type: ignore[arg-type]
    run = runs.run()
    assert len(run.suite) == 15
    assert len(closed) == 1 and closed[0] is not None, closed
