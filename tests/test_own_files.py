"""qaeval replaces only files it wrote, and knows them by how they begin (a record's first key is its format
mark, a labels file's first line its header, a sheet's header row its columns), never by a mark found
somewhere inside; its locks have names of their own, and it deletes no file it did not make."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from conftest import GOLDEN

from qaeval.cli import main

SOURCE = '''"""Tests of my evaluation."""

RECORD_START = '{"format": "qaeval-record", "version": 3}'
REPORT = '<main class="qaeval-report">'
SHEET = "case_id,axis,output_fingerprint,question"


def test_my_eval():
    assert RECORD_START
'''


def scored(sheet: Path) -> Path:
    """The exported sheet with a score in every row, as an annotator fills it."""
    with open(sheet, encoding="utf-8-sig", newline="") as f:
        rows = list(csv.DictReader(f))
    with open(sheet, "w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows({**row, "score": "2"} for row in rows)
    return sheet


@pytest.fixture
def record(tmp_path):
    path = tmp_path / "run.json"
    assert main(["run", "--data", str(GOLDEN), "--save", str(path), "--quiet"]) == 0
    return path


def test_a_run_saved_as_poetry_leaves_the_projects_poetry_lock(tmp_path, monkeypatch, capsys):
    """The lock was RECORD + ".lock", made if missing and deleted at the end: `run --save poetry` deleted
    the project's poetry.lock."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "poetry.lock").write_text("[[package]]\nname = 'requests'\n")
    assert main(["run", "--data", str(GOLDEN), "--save", "poetry", "--quiet"]) == 0
    assert (tmp_path / "poetry.lock").read_text() == "[[package]]\nname = 'requests'\n"
    assert (tmp_path / "poetry").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["poetry", "poetry.lock"], "its own lock is gone"


def test_a_file_at_the_locks_path_that_qaeval_did_not_make_is_refused_and_kept(tmp_path, capsys):
    from qaeval.core.locks import LOCK_MARK, lock_path

    record = tmp_path / "r.json"
    lock = lock_path(record)
    assert lock.name == ".r.json.qaeval-lock"
    lock.write_text("mine\n")
    assert main(["run", "--data", str(GOLDEN), "--save", str(record), "--quiet"]) == 64
    assert f"{lock} is there and is not a lock qaeval made" in capsys.readouterr().err
    assert lock.read_text() == "mine\n" and not record.exists()
    lock.write_bytes(LOCK_MARK)  # one a run that was killed left behind: nobody holds it
    assert main(["run", "--data", str(GOLDEN), "--save", str(record), "--quiet"]) == 0
    assert record.is_file() and not lock.exists()

