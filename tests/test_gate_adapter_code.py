"""The gate notes that the adapter's code changed since its baseline: a run record keeps a digest of the
adapter's source files (``meta.adapter_code``), and a gate whose run's digest differs from its baseline's
says so in its verdict, its report and its record (a note: the verdict is unchanged). A baseline written
before records kept the digest is still read, and says nothing of it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import GOLDEN
from helpers import without_explorer

ADAPTER = '''\
"""A system of the user's own: the reference system, under another name."""
from qaeval.system.reference import make_adapter as _reference


def make():
    return _reference()
'''
NOTE = "the adapter's code changed since the baseline (my_rag:make: its source files' digest"


def cli(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The command line in a fresh process, run from the user's folder (where the adapter's module is)."""
    env = {**os.environ, "QAEVAL_PROGRESS": "0"}
    env.pop("PYTHONPATH", None)
    return subprocess.run(
        [sys.executable, "-m", "qaeval", *args], capture_output=True, text=True, timeout=300, cwd=folder, env=env
    )


@pytest.fixture
def own(tmp_path):
    """A folder with the user's adapter, and a baseline of it."""
    (tmp_path / "my_rag.py").write_text(ADAPTER, encoding="utf-8")
    done = cli(tmp_path, "baseline", "--data", str(GOLDEN), "--adapter", "my_rag:make", "--out", "base.json")
    assert done.returncode == 0, done.stderr
    return tmp_path


def test_a_baseline_records_its_adapters_code_and_the_gate_notes_a_change(own):
    recorded = json.loads((own / "base.json").read_text(encoding="utf-8"))["meta"]["adapter_code"]
    assert isinstance(recorded, str) and len(recorded) == 16
    same = cli(own, "gate", "--data", str(GOLDEN), "--baseline", "base.json", "--adapter", "my_rag:make")
    assert same.returncode == 0 and "adapter's code changed" not in same.stdout, same.stdout
    # the user edits the system: the answers do not change, the code does
    (own / "my_rag.py").write_text(ADAPTER + "\n# retry on timeouts\n", encoding="utf-8")
    done = cli(
        own, "gate", "--data", str(GOLDEN), "--baseline", "base.json", "--adapter", "my_rag:make",
        "--save", "gate.json", "--html", "gate.html",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr  # a note, not a verdict: the gate still passes
    lines = done.stdout.splitlines()
    assert lines[0].startswith("GATE: PASS")
    note = next(line for line in lines if NOTE in line)
    assert note.startswith("note: ") and f"digest {recorded}, now " in note
    assert lines.index(note) < next(i for i, line in enumerate(lines) if "[ok  ]" in line)  # among the first lines
    page = without_explorer((own / "gate.html").read_text(encoding="utf-8"))
    assert NOTE in page.replace("&#x27;", "'")
    # the gate record keeps the baseline's digest and the run's: its report, made again, says the same
    again = cli(own, "report", "gate.json", "--html", "again.html")
    assert again.returncode == 0, again.stderr
    assert NOTE in without_explorer((own / "again.html").read_text(encoding="utf-8")).replace("&#x27;", "'")


def test_a_baseline_written_before_is_read_and_says_nothing_of_the_code(own):
    data = json.loads((own / "base.json").read_text(encoding="utf-8"))
    del data["meta"]["adapter_code"]
    (own / "old.json").write_text(json.dumps(data, indent=1), encoding="utf-8")
    (own / "my_rag.py").write_text(ADAPTER + "\n# changed\n", encoding="utf-8")
    done = cli(own, "gate", "--data", str(GOLDEN), "--baseline", "old.json", "--adapter", "my_rag:make")
    assert done.returncode == 0, done.stderr
    assert "adapter's code" not in done.stdout
