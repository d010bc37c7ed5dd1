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


def test_a_source_file_quoting_qaeval_marks_is_never_replaced_by_an_output(tmp_path, record, capsys):
    """The guard looked for the mark anywhere in the first 64 KiB: `run --save test_my_eval.py` replaced a
    test file whose string literal quotes a record's first key (qaeval's own tests/test_record.py too)."""
    source = tmp_path / "test_my_eval.py"
    source.write_text(SOURCE)
    capsys.readouterr()
    assert main(["run", "--data", str(GOLDEN), "--save", str(source), "--quiet"]) == 64
    assert f"refusing to write the run record (save) to {source}: a file that is not a run record qaeval wrote" in (
        capsys.readouterr().err
    )
    assert main(["run", "--data", str(GOLDEN), "--html", str(source), "--quiet"]) == 64
    assert "a file that is not a HTML report qaeval wrote" in capsys.readouterr().err
    assert main(["label", "export", str(record), "--out", str(source)]) == 64
    assert "a file that is not a label sheet qaeval wrote" in capsys.readouterr().err
    assert source.read_text() == SOURCE
    assert not (tmp_path / "test_my_eval.py.journal").exists()


def test_qaeval_own_outputs_are_replaced_by_outputs_of_their_kind(tmp_path, record, capsys):
    """What qaeval wrote is still known: a record, a report, a label sheet and labels are replaced."""
    report = tmp_path / "run.html"
    assert main(["run", "--data", str(GOLDEN), "--html", str(report), "--save", str(record), "--quiet"]) == 0
    assert main(["run", "--data", str(GOLDEN), "--html", str(report), "--save", str(record), "--quiet"]) == 0
    sheet, labels = tmp_path / "sheet.csv", tmp_path / "labels.jsonl"
    for _ in range(2):
        assert main(["label", "export", str(record), "--out", str(sheet)]) == 0
        scored(sheet)
        assert main(["label", "import", str(sheet), "--record", str(record), "--out", str(labels)]) == 0
    assert json.loads(labels.read_text().splitlines()[0]) == {"format": "qaeval-labels", "version": 1}
    capsys.readouterr()
    assert main(["run", "--data", str(GOLDEN), "--html", str(record), "--quiet"]) == 64, "a record is no report"
    assert "a file that is not a HTML report qaeval wrote" in capsys.readouterr().err


def test_label_import_never_replaces_the_adapters_source(tmp_path, record, capsys):
    """`label import --out my_rag.py` replaced the adapter's source with exit 0: labels had no mark."""
    adapter = tmp_path / "my_rag.py"
    adapter.write_text("def make_adapter():\n    ...\n")
    hand_labels = tmp_path / "hand.jsonl"
    hand_labels.write_text('{"case_id": "single-0001", "axis": "faithfulness", "score": 2}\n')
    sheet = tmp_path / "sheet.csv"
    assert main(["label", "export", str(record), "--out", str(sheet)]) == 0
    scored(sheet)
    capsys.readouterr()
    assert main(["label", "import", str(sheet), "--record", str(record), "--out", str(adapter)]) == 64
    assert f"refusing to write the labels file (out) to {adapter}: a file that is not a labels file qaeval" in (
        capsys.readouterr().err
    )
    assert main(["label", "import", str(sheet), "--record", str(record), "--out", str(hand_labels)]) == 64
    assert adapter.read_text() == "def make_adapter():\n    ...\n"
    assert hand_labels.read_text().startswith('{"case_id": "single-0001"'), "a person's labels are theirs"


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


def test_drift_never_appends_its_history_to_a_file_that_is_no_history(tmp_path, capsys):
    """Every line that did not parse was taken for a torn append and skipped: `drift --timeseries my_rag.py`
    appended a history line to the adapter's source (exit 0). A torn line begins as a JSON object does."""
    adapter = tmp_path / "my_rag.py"
    adapter.write_text("def make_adapter():\n    ...\n")
    assert main(["drift", "--data", str(GOLDEN), "--timeseries", str(adapter), "--quiet"]) == 65
    assert f"{adapter}:1: not a history line (a history holds one JSON object a line)" in capsys.readouterr().err
    assert adapter.read_text() == "def make_adapter():\n    ...\n"
