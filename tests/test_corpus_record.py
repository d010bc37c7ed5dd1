"""A run over a frozen corpus saves, loads, gates and exports like any other: the record keeps the
corpus's fingerprint and size and the passages the run touched (not the whole corpus), and reading it
back checks the record against those passages."""

from __future__ import annotations

import json

from qaeval.cli import main

CORPUS = [
    {
        "id": f"p{i}",
        "title": f"Branch {i}",
        "text": f"The Branch {i} library opened in {1950 + i} and lends {i} thousand books a year to its readers.",
    }
    for i in range(40)
]
CASES = [
    {
        "id": f"c{i}",
        "question": f"When did the Branch {i} library open?",
        "gold_answer": str(1950 + i),
        "gold_source_ids": [f"p{i}"],
        "expected_behavior": "answer",
        "difficulty": "single-hop",
        "split": "frozen",
    }
    for i in range(0, 40, 4)
]


def corpus_folder(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "corpus.jsonl").write_text("".join(json.dumps(p) + "\n" for p in CORPUS))
    (data / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in CASES))
    return data


def test_a_corpus_run_round_trips_through_its_record(tmp_path, capsys):
    data = corpus_folder(tmp_path)
    record = tmp_path / "run.json"
    assert main(["run", "--data", str(data), "--save", str(record), "--quiet"]) == 0
    saved = json.loads(record.read_text())
    kept = {p["id"] for p in saved["corpus"]["passages"]}
    assert saved["corpus"]["size"] == 40 and len(saved["corpus"]["fingerprint"]) == 64
    assert {c["gold_source_ids"][0] for c in CASES} <= kept < {p["id"] for p in CORPUS}, "only what the run touched"
    assert main(["report", str(record), "--html", str(tmp_path / "run.html")]) == 0
    assert "top 5 over a frozen corpus of 40 passages" in (tmp_path / "run.html").read_text(), (
        "the report states k and the whole corpus's size, not the excerpt's"
    )
    assert main(["gate", "--data", str(data), "--baseline", str(record), "--quiet"]) == 0
    assert main(["export", "trec", str(record), "--out", str(tmp_path / "trec")]) == 0
    capsys.readouterr()
    edited = json.loads(record.read_text())
    edited["corpus"]["passages"][0]["text"] = "Something else entirely, which grounds nothing at all here."
    record.write_text(json.dumps(edited))
    assert main(["report", str(record), "--html", str(tmp_path / "again.html")]) == 65
    assert "record cases[" in capsys.readouterr().err


def test_the_gate_says_when_the_corpus_changed_since_the_baseline(tmp_path, capsys):
    data = corpus_folder(tmp_path)
    baseline = tmp_path / "baseline.json"
    assert main(["baseline", "--data", str(data), "--out", str(baseline), "--quiet"]) == 0
    extra = {"id": "p99", "text": "A passage added to the corpus after the baseline was written."}
    with (data / "corpus.jsonl").open("a") as f:
        f.write(json.dumps(extra) + "\n")
    capsys.readouterr()
    main(["gate", "--data", str(data), "--baseline", str(baseline)])
    assert "the corpus changed since the baseline" in capsys.readouterr().out


def test_a_system_that_writes_to_its_corpus_leaves_the_users_corpus_alone(tmp_path):
    data = corpus_folder(tmp_path)
    text = (data / "corpus.jsonl").read_text()
    assert main(["run", "--data", str(data), "--adapter", "hostile_adapters:make_corpus_vandal", "--quiet"]) == 0
    assert (data / "corpus.jsonl").read_text() == text, "the worker's corpus is a copy, not the user's file"


def test_a_label_sheet_of_a_corpus_run_shows_the_cited_passage_from_the_corpus(tmp_path, capsys):
    import csv

    data = corpus_folder(tmp_path)
    record, sheet = tmp_path / "run.json", tmp_path / "sheet.csv"
    assert main(["run", "--data", str(data), "--save", str(record), "--quiet"]) == 0
    assert main(["label", "export", str(record), "--out", str(sheet)]) == 0
    rows = list(csv.DictReader(sheet.open(newline="")))
    assert rows, "the reference system answers these cases"
    texts = {p["id"]: p["text"] for p in CORPUS}
    for row in rows:
        assert "(not in the fixture)" not in row["cited"], row["cited"]
        cited = row["cited"].split("]")[0].lstrip("[")
        assert f"source: {texts[cited]}" in row["cited"], "the labeller sees the frozen corpus's passage"


def test_validate_on_a_corpus_folder_says_which_corpus_it_checked(tmp_path, capsys):
    import hashlib

    data = corpus_folder(tmp_path)
    assert main(["validate", "--data", str(data)]) == 0
    out = capsys.readouterr().out
    fingerprint = hashlib.sha256((data / "corpus.jsonl").read_bytes()).hexdigest()
    line = next((x for x in out.splitlines() if x.startswith("  corpus: ")), "")
    assert str(data / "corpus.jsonl") in line and "40 valid passage(s)" in line, out
    assert f"fingerprint {fingerprint[:12]}" in line and f"{len(CASES)} case(s) retrieve from it" in line, out
