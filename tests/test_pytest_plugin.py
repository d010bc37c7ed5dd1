"""The pytest plugin as docs/guides/ci.md runs it: from the project's root, where pytest also knows the project's
own tests (``testpaths``)."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import ROOT


def pytest_at_root(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args],
                          capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={**os.environ, "QAEVAL_PROGRESS": "0"})


def test_the_readme_command_collects_only_the_golden_cases():
    done = pytest_at_root("--qaeval-data", "golden", "-m", "qaeval")
    # the reference system fails five golden cases by design, as docs/guides/ci.md says
    assert done.returncode == 1, done.stdout[-2000:]
    assert done.stdout.splitlines()[-1].startswith("5 failed, 10 passed in "), done.stdout[-500:]
    assert "deselected" not in done.stdout


def test_paths_given_are_collected_beside_the_golden_cases():
    listed = pytest_at_root("--qaeval-data", "golden", "tests/test_retrieval.py", "--collect-only").stdout
    assert "golden/frozen.jsonl::single-0001" in listed and "tests/test_retrieval.py::" in listed, listed[-2000:]
