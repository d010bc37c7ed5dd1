"""Proposed cases: ``qaeval propose`` from a monitor record and from a corpus, the review sheet, and
``qaeval accept`` with every refusal; the generator through the fake server, and a custom one in its own
process. Each verification rule is asserted by the reason it drops a candidate, not by a count alone."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
from pathlib import Path

import nbformat
import pytest
from conftest import GOLDEN, ROOT
from monitor_logs import FACT, log_row, write_jsonl

from qaeval import api
from qaeval.cli import main
from qaeval.core.errors import DatasetError, RecordError, UsageError
from qaeval.data.cases import load_suite
from qaeval.data.corpus import Corpus
from qaeval.data.schema import Source
from qaeval.judges.fake_server import FakeJudgeServer
from qaeval.judges.generator import GenerationReply, parse_reply, request_for
from qaeval.proposals import verify
from qaeval.proposals.candidates import SHEET_COLUMNS
from qaeval.proposals.pool import Pool
from qaeval.reports.render import run_papermill

TESTS = str(ROOT / "tests")
PARITY = "monitor_logs:make_parity_judge"


@pytest.fixture(autouse=True)
def test_code_importable(monkeypatch):
    monkeypatch.syspath_prepend(TESTS)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [TESTS, os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("QAEVAL_PROGRESS", "0")


# --------------------------------------------------------------------------- traffic


def traffic_rows() -> list[dict]:
    """60 rows over 3 days and 2 systems: every 10th cites a missing passage (fails a check), odd ids are
    judged unfaithful by the parity judge, rows 55-59 abstained (55-57 with nothing on topic, 58-59 with
    the answer right there)."""
    rows = []
    for i in range(60):
        row = log_row(i, day=1 + i % 3, system="ab"[i % 2], bad_citation=i % 10 == 0)
        question = f"When does the library open on visit {i}?"  # rows alike would be proposed once
        if i >= 55:
            question = f"Can I rent kayak {i} at the marina?" if i < 58 else question
            row.update(answer=None, citations=[], abstained=True)
        row.update(question=question, prompt=row["prompt"].replace("When does the library open?", question))
        rows.append(row)
    return rows


@pytest.fixture(scope="module")
def monitored(tmp_path_factory):
    folder = tmp_path_factory.mktemp("traffic")
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [TESTS, old]))
    try:
        log = write_jsonl(folder / "log.jsonl", traffic_rows())
        record = folder / "mon.json"
        assert main(
            [
                "monitor",
                "--logs",
                str(log),
                "--by",
                "system",
                "--window",
                "1D",
                "--judge",
                PARITY,
                "--save",
                str(record),
                "--quiet",
            ]
        ) in (0, 3)
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old
    return folder, log, record


def sheet_rows(path: Path) -> list[dict[str, str]]:
    before = csv.field_size_limit(1 << 30)  # a passages cell may be longer than the csv module's 128 KiB
    try:
        with open(path, encoding="utf-8-sig", newline="") as f:
            return list(csv.DictReader(f))
    finally:
        csv.field_size_limit(before)  # what qaeval reads with is its own to set


def write_rows(path: Path, rows: list[dict[str, str]]) -> Path:
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else list(SHEET_COLUMNS))
        writer.writeheader()
        writer.writerows(rows)
    return path


def test_a_monitor_record_keeps_one_row_a_line_and_reads_the_same(monitored):
    _, _, record = monitored
    lines = record.read_text().splitlines()
    start = lines.index('  "rows": [')
    assert all(line.startswith('   {"abstained"') for line in lines[start + 1 : start + 61])
    assert lines[start + 61] == "  ],"
    assert len(json.loads(record.read_text())["monitor"]["rows"]) == 60


def test_traffic_candidates_of_each_kind_split_evenly_and_say_what_they_chose_from(monitored, tmp_path):
    folder, log, record = monitored
    sheet = tmp_path / "s.csv"
    proposal = api.propose(from_monitor=str(record), sheet=str(sheet), n=9)
    kinds = [c.kind for c in proposal.candidates]
    assert sorted(set(kinds)) == ["abstained", "check_failed", "unfaithful"]
    assert kinds.count("abstained") == 3, "the three kinds share n evenly"
    sizes = proposal.pool.groupby("kind")["rows"].sum().to_dict()
    # a failed check first (rows 0, 10, ..., 50), then faithfulness 0 (the odd answered rows, 1 to 53)
    assert sizes == {"check_failed": 6, "unfaithful": 27, "abstained": 5}
    assert (
        "chose 9 from 3 of 6 failed a deterministic check, 3 of 27 judged unfaithful, 3 of 5 abstained"
        in proposal.notes[0]
    )
    rows = sheet_rows(sheet)
    assert [r["candidate_id"] for r in rows] == [c.id for c in proposal.candidates]
    assert list(rows[0]) == list(SHEET_COLUMNS)
    failed = next(r for r in rows if "citation_resolvability" in r["why"])
    assert failed["source"].startswith(f"{log} line ") and failed["accept"] == "" and failed["gold_answer"] == ""
    assert json.loads(failed["passages"])[0] == {
        "id": "hours",
        "text": log_row(0)["passages"][0]["text"],
        "title": "Hours",
    }
    by_question = {r["question"]: r for r in rows if "abstained" in r["why"]}
    assert all(r["expected_behavior"] == "unanswerable_must_abstain" for q, r in by_question.items() if "kayak" in q)
    assert all(
        r["expected_behavior"] == "answer" and "over-refusal" in r["why"]
        for q, r in by_question.items()
        if "library" in q
    )


def test_the_draw_is_seeded_and_strata_spread_across_slices_and_windows(monitored, tmp_path):
    _, _, record = monitored
    one = api.propose(from_monitor=str(record), sheet=str(tmp_path / "a.csv"), n=12, seed=3)
    again = api.propose(from_monitor=str(record), sheet=str(tmp_path / "b.csv"), n=12, seed=3)
    other = api.propose(from_monitor=str(record), sheet=str(tmp_path / "c.csv"), n=12, seed=4)
    assert [c.id for c in one.candidates] == [c.id for c in again.candidates]
    assert [c.id for c in one.candidates] != [c.id for c in other.candidates]
    unfaithful = one.pool[one.pool["kind"] == "unfaithful"]  # the odd rows: system b, on each of 3 days
    assert unfaithful["stratum"].str.startswith("system=b | window 2026-02-0").all() and len(unfaithful) == 3
    assert unfaithful["chosen"].sum() == 4 and (unfaithful["chosen"] >= 1).all(), "each stratum has its share"
    assert set(one.pool["stratum"].str.split(" | ").str[0]) == {"system=a", "system=b"}


def test_an_older_record_with_rows_over_several_lines_gives_the_same_candidates(monitored, tmp_path):
    _, _, record = monitored
    old = tmp_path / "old.json"
    old.write_text(json.dumps(json.loads(record.read_text()), indent=1))
    new = api.propose(from_monitor=str(record), sheet=str(tmp_path / "a.csv"), n=6)
    read_whole = api.propose(from_monitor=str(old), sheet=str(tmp_path / "b.csv"), n=6)
    assert [c.id for c in read_whole.candidates] == [c.id for c in new.candidates]
    assert any("read whole" in n for n in read_whole.notes)


def test_a_row_the_log_no_longer_holds_as_recorded_is_dropped_and_replaced(monitored, tmp_path):
    folder, log, record = monitored
    rows = traffic_rows()
    for r in rows:  # the failing rows are fixed in the log after the monitor ran
        if r["citations"] and r["citations"][0]["source_id"] == "missing":
            r["citations"] = [{"source_id": "hours", "claim": r["answer"]}]
    changed = write_jsonl(tmp_path / "changed.jsonl", rows)
    proposal = api.propose(from_monitor=str(record), sheet=str(tmp_path / "s.csv"), n=9, logs=str(changed))
    changed_why = "the log's row changed since the monitor scored it"
    assert proposal.dropped == {changed_why: 6}, "three chosen, three replacements"
    assert not [c for c in proposal.candidates if c.kind == "check_failed"]
    # a record written before rows kept their digest: the checks, run again, still catch it
    old = tmp_path / "old.json"
    old.write_text(re.sub(r'"digest": "[0-9a-f]+", ', "", record.read_text()))
    older = api.propose(from_monitor=str(old), sheet=str(tmp_path / "t.csv"), n=9, logs=str(changed))
    assert older.dropped == {"the log's row passes every check now": 6}
    assert all("not compared with what the monitor scored" in " ".join(c.checks) for c in older.candidates)


def test_a_row_whose_content_changed_is_not_proposed_with_the_old_verdict(tmp_path):
    """A log rewritten after the monitor ran (or another day's log whose ids restart) paired new content
    with the old judge's verdict, "the checks give the same result again" and all: the record now keeps a
    digest of each row's content, compared on reading back."""
    rows = [log_row(i, question=f"When does branch {i} open?", prompt=None) for i in range(4)]
    write_jsonl(tmp_path / "log.jsonl", rows)
    record = tmp_path / "mon.json"
    assert main(
        ["monitor", "--logs", str(tmp_path / "log.jsonl"), "--judge", PARITY, "--save", str(record), "--quiet"]
    ) in (0, 3)
    for r in rows:
        r.update(
            question=f"What is the capital of country {r['id']}?",
            answer="Paris is the capital.",
            passages=[{"id": "geo", "text": "Paris is the capital."}],
            citations=[{"source_id": "geo", "claim": "Paris is the capital."}],
        )
    later = write_jsonl(tmp_path / "later.jsonl", rows)
    proposal = api.propose(from_monitor=str(record), sheet=str(tmp_path / "s.csv"), n=2, logs=str(later))
    assert proposal.candidates == [] and proposal.dropped == {"the log's row changed since the monitor scored it": 2}
    same = api.propose(from_monitor=str(record), sheet=str(tmp_path / "t.csv"), n=2)
    assert len(same.candidates) == 2 and all("it says what the monitor scored" in c.checks for c in same.candidates)


def test_a_log_that_moved_is_named_and_can_be_given(monitored, tmp_path, capsys):
    folder, log, record = monitored
    moved = tmp_path / "moved.jsonl"
    shutil.copy(log, moved)
    bad = tmp_path / "rec.json"
    data = record.read_text().replace(json.dumps(str(log)), json.dumps(str(tmp_path / "gone.jsonl")))
    bad.write_text(data)
    assert main(["propose", "--from-monitor", str(bad), "--out", str(tmp_path / "s.csv")]) == 65
    assert "if it moved, give its new path with --logs" in capsys.readouterr().err
    assert (
        main(
            ["propose", "--from-monitor", str(bad), "--out", str(tmp_path / "s.csv"), "--logs", str(moved), "--n", "3"]
        )
        == 0
    )


def in_rows(text: str, old: str, new: str) -> str:
    at = text.index('  "rows": [')
    assert old in text[at:]
    return text[:at] + text[at:].replace(old, new, 1)


@pytest.mark.parametrize(
    "edit, why",
    [
        (lambda t: in_rows(t, '"row_id": "r00001"', '"row_id": 7'), "'row_id' missing or not str"),
        (lambda t: in_rows(t, '"passed": false', '"passed": "no"'), "'passed' missing or not bool"),
        (lambda t: in_rows(t, '"line": 2,', '"line": -2,'), "'line' must be at least 1"),
        (lambda t: in_rows(t, '"row_id": "r00001", ', '"row_id": "r00001" '), "a row that is not JSON"),
        (lambda t: t.replace('"kind": "monitor"', '"kind": "run"', 1), "a 'run' record, not a monitor record"),
        (lambda t: t.replace('"version": 3', '"version": 2', 1), "record version 2"),
    ],
)
def test_a_malformed_monitor_record_is_refused_by_what_is_wrong(monitored, tmp_path, capsys, edit, why):
    _, _, record = monitored
    bad = tmp_path / "bad.json"
    bad.write_text(edit(record.read_text()))
    assert main(["propose", "--from-monitor", str(bad), "--out", str(tmp_path / "s.csv")]) == 65
    assert why in capsys.readouterr().err


def test_the_pool_keeps_at_most_its_limit_per_stratum_whatever_the_log():
    pool = Pool()
    for i in range(10_000):
        pool.add("check_failed", "s", rank=(i * 7919) % 10_007, row={"line": i + 1, "row_id": f"r{i}"}, limit=5)
    assert pool.sizes == {("check_failed", "s"): 10_000}
    kept = pool.ranked(("check_failed", "s"))
    assert len(kept) == 5
    ranks = sorted((i * 7919) % 10_007 for i in range(10_000))[:5]
    assert [((r["line"] - 1) * 7919) % 10_007 for r in kept] == ranks, "the smallest ranks, best first"


# --------------------------------------------------------------------------- accept (traffic)


@pytest.fixture
def golden_copy(tmp_path):
    target = tmp_path / "golden"
    shutil.copytree(GOLDEN, target, ignore=shutil.ignore_patterns("calibration", "buggy", "*.json"))
    return target


def test_accept_adds_reviewed_rows_rejects_are_remembered_and_the_grown_set_runs(
    monitored, tmp_path, golden_copy, capsys
):
    _, _, record = monitored
    sheet = tmp_path / "s.csv"
    assert (
        main(["propose", "--from-monitor", str(record), "--out", str(sheet), "--n", "6", "--data", str(golden_copy)])
        == 0
    )
    rows = sheet_rows(sheet)
    answerable = [r for r in rows if r["expected_behavior"] == "answer"]
    abstain = [r for r in rows if r["expected_behavior"] != "answer"]
    answerable[0].update(accept="y", gold_answer="nine in the morning", gold_source_ids="hours", note="real miss")
    answerable[1].update(accept="n", note="noise")
    abstain[0].update(accept="Y")
    filled = write_rows(tmp_path / "filled.csv", rows)
    before = len(load_suite(golden_copy))
    assert main(["accept", str(filled), "--data", str(golden_copy)]) == 0
    out = capsys.readouterr().out
    assert "added 2 case(s)" in out and "1 rejected" in out and "3 row(s) with accept blank" in out
    suite = load_suite(golden_copy)
    assert len(suite) == before + 2
    added = [c for c in suite if c.adversarial == "production-miss" and c.split == "living"]
    assert {c.id.split("-")[0] for c in added} == {"single", "abstain"}
    assert next(c for c in added if c.gold_answer).sources[0].id == "hours"
    decisions = [json.loads(x) for x in (golden_copy / ".qaeval" / "decisions.jsonl").read_text().splitlines()]
    assert sorted(d["decision"] for d in decisions) == ["accepted", "accepted", "rejected"]
    # the same sheet again changes nothing; decided rows are not proposed again
    assert main(["accept", str(filled), "--data", str(golden_copy)]) == 0
    assert "3 row(s) decided the same way before" in capsys.readouterr().out
    again = api.propose(from_monitor=str(record), sheet=str(tmp_path / "t.csv"), n=6, data=str(golden_copy))
    decided = {answerable[0]["candidate_id"], answerable[1]["candidate_id"], abstain[0]["candidate_id"]}
    assert not decided & {c.id for c in again.candidates}
    assert any("3 row(s) were decided before" in n for n in again.notes)
    assert main(["run", "--data", str(golden_copy), "--quiet"]) in (0, 1)  # the grown set loads and runs


REFUSALS = [
    (dict(accept="maybe"), "accept 'maybe' is not y or n"),
    (dict(accept="y", gold_answer="", gold_source_ids="hours"), "an answerable case needs a gold_answer"),
    (dict(accept="y", gold_answer="nine", gold_source_ids=""), "needs gold_source_ids"),
    (
        dict(accept="y", gold_answer="nine", gold_source_ids="nowhere"),
        "gold source id 'nowhere' is not one of the row's",
    ),
    (
        dict(accept="y", expected_behavior="unanswerable_must_abstain", gold_answer="nine"),
        "a must-abstain case has no gold_answer",
    ),
    (dict(accept="y", expected_behavior="refuse"), "expected_behavior 'refuse' is not"),
    (dict(accept="y", gold_answer="nine", gold_source_ids="hours", difficulty="hard"), "difficulty 'hard' is not"),
    (
        dict(accept="y", gold_answer="nine", gold_source_ids="hours", question="When does it open?"),
        "the proposal was edited after it was proposed",
    ),
    (dict(accept="y", gold_answer="nine", gold_source_ids="hours", passages="[1, 2]"), "passages must be a JSON list"),
]


@pytest.mark.parametrize("change, why", REFUSALS)
def test_accept_refuses_a_bad_row_with_its_line_and_writes_nothing(
    monitored, tmp_path, golden_copy, capsys, change, why
):
    _, _, record = monitored
    sheet = tmp_path / "s.csv"
    api.propose(from_monitor=str(record), sheet=str(sheet), n=3)
    rows = sheet_rows(sheet)
    good = next(r for r in rows if r["expected_behavior"] == "answer")
    good.update(change)
    other = next(r for r in rows if r is not good)
    other.update(accept="n")
    living = (golden_copy / "living.jsonl").read_bytes()
    assert main(["accept", str(write_rows(tmp_path / "f.csv", rows)), "--data", str(golden_copy)]) == 65
    err = capsys.readouterr().err
    assert why in err and f"(sheet row {rows.index(good) + 2}, {good['candidate_id']})" in err
    assert (golden_copy / "living.jsonl").read_bytes() == living
    assert not (golden_copy / ".qaeval" / "decisions.jsonl").exists(), "not even the rejection is recorded"


def test_accept_refuses_a_duplicate_of_a_case_and_a_decision_reversed(monitored, tmp_path, golden_copy, capsys):
    _, _, record = monitored
    sheet = tmp_path / "s.csv"
    api.propose(from_monitor=str(record), sheet=str(sheet), n=3)
    rows = sheet_rows(sheet)
    row = next(r for r in rows if r["expected_behavior"] == "answer")
    row.update(accept="y", gold_answer="nine", gold_source_ids="hours")
    assert main(["accept", str(write_rows(tmp_path / "f.csv", [row])), "--data", str(golden_copy)]) == 0
    twin = dict(row, candidate_id="cand-000000000000")  # the same case under another id: its fingerprint fails
    assert main(["accept", str(write_rows(tmp_path / "g.csv", [twin])), "--data", str(golden_copy)]) == 65
    assert "the proposal was edited" in capsys.readouterr().err
    row["accept"] = "n"
    assert main(["accept", str(write_rows(tmp_path / "h.csv", [row])), "--data", str(golden_copy)]) == 65
    err = capsys.readouterr().err
    assert "already accepted on" in err and "the sheet now says rejected" in err


def test_accept_refuses_a_row_already_in_the_suite(monitored, tmp_path, golden_copy, capsys):
    _, _, record = monitored
    sheet = tmp_path / "s.csv"
    api.propose(from_monitor=str(record), sheet=str(sheet), n=3)
    row = next(r for r in sheet_rows(sheet) if r["expected_behavior"] == "answer")
    case_id, _ = api.add_case(
        golden_copy,
        {
            "question": row["question"],
            "sources": json.loads(row["passages"]),
            "gold_answer": "nine",
            "gold_source_ids": ["hours"],
        },
    )
    row.update(accept="y", gold_answer="nine", gold_source_ids="hours")
    assert main(["accept", str(write_rows(tmp_path / "f.csv", [row])), "--data", str(golden_copy)]) == 65
    assert f"already in the suite as {case_id}" in capsys.readouterr().err


def test_rows_alike_are_proposed_once_and_a_row_id_may_hold_brackets(tmp_path, golden_copy):
    rows = [log_row(i, id=f"req (shard {i})", bad_citation=True) for i in range(3)]
    log = write_jsonl(tmp_path / "log.jsonl", rows)
    record = tmp_path / "mon.json"
    assert main(["monitor", "--logs", str(log), "--save", str(record), "--quiet"]) == 0
    sheet = tmp_path / "s.csv"
    proposal = api.propose(from_monitor=str(record), sheet=str(sheet), n=3)
    assert len(proposal.candidates) == 1, "three rows alike make one case"
    assert proposal.dropped == {"the same question and passages as another candidate": 2}
    got = sheet_rows(sheet)
    got[0].update(accept="y", gold_answer="nine in the morning", gold_source_ids="hours")
    assert api.accept(write_rows(tmp_path / "f.csv", got), data=str(golden_copy)).added
    decisions = (golden_copy / ".qaeval" / "decisions.jsonl").read_text()
    assert '"key": "row:req (shard ' in decisions


def test_two_rows_of_a_sheet_that_make_the_same_case_are_refused(monitored, tmp_path, golden_copy, capsys):
    _, _, record = monitored
    sheet = tmp_path / "s.csv"
    api.propose(from_monitor=str(record), sheet=str(sheet), n=3)
    row = next(r for r in sheet_rows(sheet) if r["expected_behavior"] == "answer")
    row.update(accept="y", gold_answer="nine", gold_source_ids="hours")
    twin = dict(row)  # a merged sheet: the same proposal under another id (its fingerprint made to match)
    from qaeval.proposals.candidates import fingerprint

    twin["candidate_id"] = "cand-000000000000"
    twin["fingerprint"] = fingerprint(
        twin["candidate_id"],
        twin["origin"],
        twin["source"],
        twin["question"],
        [Source(p["id"], p["text"], p.get("title")) for p in json.loads(twin["passages"])],
        twin["answer"] or None,
    )
    assert main(["accept", str(write_rows(tmp_path / "f.csv", [row, twin])), "--data", str(golden_copy)]) == 65
    assert "the same question and passages as the row on line 2" in capsys.readouterr().err


def test_a_cell_a_spreadsheet_would_run_is_quoted_and_accepted_as_it_was(tmp_path, golden_copy):
    rows = [log_row(i, question='=HYPERLINK("http://x") when does it open?', bad_citation=True) for i in range(3)]
    log = write_jsonl(tmp_path / "log.jsonl", rows)
    record = tmp_path / "mon.json"
    assert main(["monitor", "--logs", str(log), "--save", str(record), "--quiet"]) == 0
    sheet = tmp_path / "s.csv"
    api.propose(from_monitor=str(record), sheet=str(sheet), n=1)
    raw = sheet.read_text(encoding="utf-8-sig")
    assert "'=HYPERLINK" in raw and ",=HYPERLINK" not in raw
    got = sheet_rows(sheet)
    got[0].update(accept="y", gold_answer="nine in the morning", gold_source_ids="hours")
    api.accept(write_rows(tmp_path / "f.csv", got), data=str(golden_copy))
    added = [c for c in load_suite(golden_copy) if c.question.startswith("=HYPERLINK")]
    assert len(added) == 1, "the quote a spreadsheet needs is not part of the question"


# --------------------------------------------------------------------------- the verification rules


def test_each_rule_drops_what_it_names():
    p = Source("p1", "The Harbor Museum opened in 1887 after the Great Fire destroyed the old customs house.")
    assert verify.answer_in_passages("1887", [p]) is None
    assert verify.answer_in_passages("1888", [p]) == verify.NOT_IN_PASSAGE
    assert verify.answer_in_passages("188", [p]) == verify.NOT_IN_PASSAGE, "whole words, not a prefix"
    assert verify.answer_in_passages("the GREAT fire!", [p]) is None, "normalised"
    assert (
        verify.copies_passage("When was it built after the Great Fire destroyed the old customs house?", [p])
        == verify.COPIES_PASSAGE
    )
    assert verify.copies_passage("When did the museum by the harbor open its doors?", [p]) is None
    assert verify.gives_away("Did the museum open in 1887?", "1887") == verify.GIVES_AWAY
    seen = verify.Seen(["When did the Harbor Museum open?"])
    assert seen.near("When did the harbor museum open") == verify.NEAR_DUPLICATE
    assert seen.near("Harbor museum: when did it open?") == verify.NEAR_DUPLICATE, "the same content terms"
    assert seen.near("When did the Harbor Museum first open?") is None, "3 of 4 terms shared: 0.75 < 0.8"
    assert seen.near("Who founded the Harbor Museum library?") is None
    assert verify.check_shape("abstain", "1887") == verify.SHAPE and verify.check_shape("single", None) == verify.SHAPE
    two = [p, Source("p2", "x")]
    assert verify.check_sources("multi", ["p1"], two) == (None, verify.WRONG_SOURCES)
    assert verify.check_sources("multi", [], two) == (("p1", "p2"), None)
    assert verify.check_sources("single", ["p9"], [p]) == (None, verify.WRONG_SOURCES)


def test_a_reply_for_another_request_or_malformed_costs_only_that_candidate():
    req = request_for("single", [Source("p1", "text")], "0")
    ok = json.dumps({"request": req.request_id, "question": "Q?", "answer": "text", "source_ids": ["p1"]})
    assert parse_reply(GenerationReply(req.request_id, ok), req)[0] is not None
    other = json.dumps({"request": "gen-other", "question": "Q?", "answer": "text", "source_ids": ["p1"]})
    assert parse_reply(GenerationReply(req.request_id, other), req) == (None, "the generator answered another request")
    assert parse_reply(GenerationReply("gen-other", ok), req) == (None, "the generator answered another request")
    for bad in ('{"request": "' + req.request_id + '", "question": 3}', "no json here", '{"a": NaN}', "x" * 30_000):
        assert parse_reply(GenerationReply(req.request_id, bad), req) == (None, "malformed reply")
    assert parse_reply(GenerationReply(req.request_id, error="boom"), req) == (None, "the generator failed: boom")


# --------------------------------------------------------------------------- from a corpus


TOPICS = ["harbor", "library", "museum", "railway", "garden", "bridge", "market", "theatre", "school", "stadium"]
TOWNS = ["Aldport", "Brenmoor", "Calder", "Dunwick", "Eastholm", "Farrow", "Glenby", "Hartsea"]


def write_corpus(folder: Path, n: int = 80, short: int = 0) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for i in range(n):
        topic, town = TOPICS[i % len(TOPICS)], TOWNS[(i // len(TOPICS)) % len(TOWNS)]
        text = (
            f"The {topic} of {town} opened in {1800 + (i * 7) % 220} after a public subscription raised "
            f"{1000 + i * 13} pounds. Its first keeper served for {3 + i % 30} years and wrote a history of "
            f"the {topic} district number {i}."
        )
        lines.append(json.dumps({"id": f"p{i:05d}", "title": f"{town} {topic}", "text": text}))
    lines += [json.dumps({"id": f"short{i}", "text": "Too short to ask about."}) for i in range(short)]
    (folder / "corpus.jsonl").write_text("\n".join(lines) + "\n")
    return folder


@pytest.fixture
def generator_env(monkeypatch, tmp_path):
    monkeypatch.setenv("QAEVAL_JUDGE_MODEL", "fake-generator")
    monkeypatch.setenv("QAEVAL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("QAEVAL_JUDGE_MAX_RETRIES", "0")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)

    def serve(**options) -> FakeJudgeServer:
        server = FakeJudgeServer(**options).__enter__()
        monkeypatch.setenv("OPENAI_BASE_URL", server.url)
        servers.append(server)
        return server

    servers: list[FakeJudgeServer] = []
    yield serve
    for s in servers:
        s.__exit__(None, None, None)


def test_corpus_candidates_of_three_kinds_are_verified_and_written(tmp_path, generator_env):
    server = generator_env()
    corpus = write_corpus(tmp_path / "corpus", short=5)
    sheet = tmp_path / "s.csv"
    proposal = api.propose(from_corpus=str(corpus), sheet=str(sheet), n=10)
    kinds = [c.kind for c in proposal.candidates]
    assert (kinds.count("single"), kinds.count("multi"), kinds.count("abstain")) == (6, 2, 2)
    assert proposal.calls == server.generations == 10, "nothing dropped: one call a candidate"
    assert server.requests[0]["response_format"]["json_schema"]["name"] == "qaeval_candidate"
    for c in proposal.candidates:
        gold = [p for p in c.passages if p.id in c.gold_source_ids]
        if c.kind == "abstain":
            assert c.gold_answer is None and c.expected_behavior == "unanswerable_must_abstain"
        else:
            assert verify.answer_in_passages(c.gold_answer, gold) is None
        assert len(gold) == {"single": 1, "multi": 2, "abstain": 0}[c.kind]
        assert not any(p.id.startswith("short") for p in c.passages), "short passages are not asked about"
    rows = sheet_rows(sheet)
    assert [r["gold_source_ids"] for r in rows][:1] == [", ".join(proposal.candidates[0].gold_source_ids)]
    # the same proposal again is answered from the signed cache
    api.propose(from_corpus=str(corpus), sheet=str(tmp_path / "t.csv"), n=10)
    assert server.generations == 10


@pytest.mark.parametrize(
    "fault, reason",
    [
        ("malformed", "malformed reply"),
        ("wrong_request", "the generator answered another request"),
        ("not_in_passage", verify.NOT_IN_PASSAGE),
        ("copies", verify.COPIES_PASSAGE),
        ("duplicate", verify.NEAR_DUPLICATE),
        ("answerable", verify.RETRIEVABLE),
    ],
)
def test_each_generator_fault_costs_its_candidate_for_its_reason(tmp_path, generator_env, fault, reason):
    generator_env(generation_faults={fault: 2})
    corpus = write_corpus(tmp_path / "corpus")
    proposal = api.propose(from_corpus=str(corpus), sheet=str(tmp_path / "s.csv"), n=10, generator_cache=False)
    assert proposal.dropped.get(reason, 0) >= 1, proposal.dropped
    assert set(proposal.dropped) == {reason}, "no other rule fired"
    assert len(proposal.candidates) == 10, "the run went on and made its number"


def test_a_hanging_generator_call_costs_that_candidate(tmp_path, generator_env, monkeypatch):
    monkeypatch.setenv("QAEVAL_JUDGE_TIMEOUT", "0.3")
    generator_env(generation_faults={"hang": 3}, hang_seconds=10)
    corpus = write_corpus(tmp_path / "corpus")
    proposal = api.propose(from_corpus=str(corpus), sheet=str(tmp_path / "s.csv"), n=6, generator_cache=False)
    why = "the generator failed: the generator did not answer within its deadline of 0.3 s (QAEVAL_JUDGE_TIMEOUT, retries included)"
    assert set(proposal.dropped) == {why} and proposal.dropped[why] >= 2
    assert len(proposal.candidates) == 6


def test_candidates_that_repeat_a_case_or_a_rejected_one_are_not_proposed(tmp_path, generator_env):
    generator_env()
    corpus = write_corpus(tmp_path / "corpus")
    first = api.propose(from_corpus=str(corpus), sheet=str(tmp_path / "s.csv"), n=4)
    cases = tmp_path / "corpus" / "cases.jsonl"
    c = first.candidates[0]
    cases.write_text(
        json.dumps(
            {
                "id": "single-0001",
                "question": c.question,
                "gold_answer": c.gold_answer,
                "gold_source_ids": list(c.gold_source_ids),
                "expected_behavior": "answer",
                "difficulty": "single-hop",
                "split": "frozen",
            }
        )
        + "\n"
    )
    again = api.propose(from_corpus=str(corpus), sheet=str(tmp_path / "t.csv"), n=4)
    assert c.question not in [x.question for x in again.candidates]
    assert again.dropped == {verify.NEAR_DUPLICATE: 1}
    assert any("are the golden set the candidates are for" in n for n in again.notes)


def test_a_corpus_with_nothing_to_ask_about_says_so(tmp_path, generator_env, capsys):
    generator_env()
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "corpus.jsonl").write_text(
        "".join(json.dumps({"id": f"s{i}", "text": "Too short."}) + "\n" for i in range(5))
    )
    assert main(["propose", "--from-corpus", str(corpus), "--out", str(tmp_path / "s.csv"), "--n", "3"]) == 0
    out = capsys.readouterr().out
    assert "PROPOSED: no candidate" in out and "5 passage(s) drawn had fewer than 12 content terms" in out
    assert "the corpus ran out of passages to draw" in out


def test_accepted_corpus_candidates_become_corpus_cases_and_run(tmp_path, generator_env):
    generator_env()
    corpus = write_corpus(tmp_path / "golden")
    (corpus / "cases.jsonl").write_text(
        json.dumps(
            {
                "id": "single-0001",
                "question": "When did the harbor of Aldport open?",
                "gold_answer": "1800",
                "gold_source_ids": ["p00000"],
                "expected_behavior": "answer",
                "difficulty": "single-hop",
                "split": "frozen",
            }
        )
        + "\n"
    )
    sheet = tmp_path / "s.csv"
    api.propose(from_corpus=str(corpus), sheet=str(sheet), n=5)
    rows = sheet_rows(sheet)
    for r in rows:
        r["accept"] = "y"
    result = api.accept(write_rows(tmp_path / "f.csv", rows), data=str(corpus))
    assert len(result.added) == 5
    suite = load_suite(corpus)
    added = [c for c in suite if c.split == "living"]
    assert all(c.from_corpus and not c.sources for c in added), "the corpus holds their passages"
    assert {c.id.split("-")[0] for c in added} == {"single", "multi", "abstain"}
    run = api.run(str(corpus))
    assert set(run.per_case["case_id"]) >= {c.id for c in added}


def test_without_the_corpus_an_accepted_candidate_carries_its_passages(tmp_path, generator_env, golden_copy):
    generator_env()
    corpus = write_corpus(tmp_path / "corpus")
    sheet = tmp_path / "s.csv"
    api.propose(from_corpus=str(corpus), sheet=str(sheet), n=3)
    rows = sheet_rows(sheet)
    rows[0]["accept"] = "y"
    api.accept(write_rows(tmp_path / "f.csv", rows), data=str(golden_copy))
    added = next(c for c in load_suite(golden_copy) if c.adversarial == "generated")
    assert [s.id for s in added.sources] == [p["id"] for p in json.loads(rows[0]["passages"])]
    assert not added.from_corpus


def test_a_custom_generator_runs_in_its_own_process_and_its_failures_cost_candidates(tmp_path, generator_env):
    corpus = write_corpus(tmp_path / "corpus")
    proposal = api.propose(
        from_corpus=str(corpus), sheet=str(tmp_path / "s.csv"), n=4, generator="plugins:make_pid_generator"
    )
    assert len(proposal.candidates) == 4
    assert {c.question.split(" pid ")[1].rstrip("?") for c in proposal.candidates} != {str(os.getpid())}
    broken = api.propose(
        from_corpus=str(corpus),
        sheet=str(tmp_path / "t.csv"),
        n=3,
        max_calls=20,
        generator="plugins:make_raising_generator",
    )
    # what it raised is kept; and after the first 8 calls all failed nothing more was asked (max_calls was 20)
    why = "the generator failed: the generator raised RuntimeError: the model is down"
    assert broken.candidates == [] and set(broken.dropped) == {why} and 8 <= broken.dropped[why] < 20
    assert any("the first 8 generator calls all failed" in n for n in broken.notes), broken.notes


def test_a_custom_generator_that_hangs_loses_its_chunk_not_the_run(tmp_path, generator_env):
    corpus = write_corpus(tmp_path / "corpus")
    proposal = api.propose(
        from_corpus=str(corpus),
        sheet=str(tmp_path / "s.csv"),
        n=3,
        max_calls=40,
        generator="plugins:make_hanging_generator",
        generator_timeout=0.5,
    )
    assert proposal.candidates == []
    # its first chunk lost to the timeout, every call of it failed: nothing more is sent (max_calls was 40)
    why = "the generator failed: the generator did not answer within 0.5 s (its process was killed)"
    assert set(proposal.dropped) == {why} and 8 <= proposal.calls == proposal.dropped[why] <= 16
    assert any("the first 8 generator calls all failed" in n for n in proposal.notes), proposal.notes


def test_a_generator_that_answered_then_hangs_is_given_up_on_after_two_lost_chunks(
    tmp_path, generator_env, monkeypatch
):
    monkeypatch.setenv("QAEVAL_TEST_MARK", str(tmp_path / "answered"))
    corpus = write_corpus(tmp_path / "corpus", n=200)
    proposal = api.propose(
        from_corpus=str(corpus),
        sheet=str(tmp_path / "s.csv"),
        n=60,
        max_calls=200,
        generator="plugins:make_answers_then_hangs",
        generator_timeout=0.5,
    )
    lost = "the generator failed: the generator did not answer within 0.5 s (its process was killed)"
    gave_up = "not asked: the generator's process lost two chunks in a row"
    assert proposal.candidates and proposal.dropped[lost] == 32 and proposal.dropped[gave_up] >= 1
    assert any("given up on" in n for n in proposal.notes) and proposal.calls < 200


def test_a_generator_cannot_fake_being_given_up_on(tmp_path, generator_env):
    """Its own error text saying "not asked:" is its failure, not the proxy's decision (which is a flag the
    generator's process cannot send)."""
    corpus = write_corpus(tmp_path / "corpus")
    proposal = api.propose(
        from_corpus=str(corpus),
        sheet=str(tmp_path / "s.csv"),
        n=3,
        max_calls=20,
        generator="plugins:make_liar_generator",
    )
    assert set(proposal.dropped) == {"the generator failed: not asked: made up"}
    assert not any("given up on" in n for n in proposal.notes), proposal.notes
    req = request_for("single", [Source("p1", "text")], "0")
    sent = {"request_id": req.request_id, "error": "x", "given_up": True}
    assert GenerationReply.from_plain(sent, req).given_up is False


def test_a_custom_generator_with_a_bad_config_is_a_usage_error(tmp_path, generator_env, capsys):
    corpus = write_corpus(tmp_path / "corpus")
    assert (
        main(
            [
                "propose",
                "--from-corpus",
                str(corpus),
                "--out",
                str(tmp_path / "s.csv"),
                "--generator",
                "plugins:make_configless_generator",
            ]
        )
        == 64
    )
    assert "the generator's config has no name" in capsys.readouterr().err


def test_the_retrieval_index_is_kept_when_the_reply_cache_is_off(tmp_path, generator_env):
    generator_env()
    corpus = write_corpus(tmp_path / "corpus")
    api.propose(from_corpus=str(corpus), sheet=str(tmp_path / "s.csv"), n=2, generator_cache=False)
    assert list((tmp_path / "cache").glob("fts5-*.sqlite")), "built once, found by the next proposal"


def test_propose_refuses_what_cannot_work(tmp_path, capsys):
    assert main(["propose", "--out", str(tmp_path / "s.csv")]) == 64
    assert "exactly one of --from-monitor RECORD and --from-corpus DIR" in capsys.readouterr().err
    assert main(["propose", "--from-corpus", str(tmp_path), "--out", str(tmp_path / "s.jsonl")]) == 64
    assert "a path ending in .csv" in capsys.readouterr().err
    assert main(["propose", "--from-corpus", str(tmp_path), "--out", str(tmp_path / "s.csv")]) == 65
    assert "no corpus" in capsys.readouterr().err
    with pytest.raises(UsageError, match="n must be at least 1"):
        api.propose(from_corpus=str(tmp_path), sheet=str(tmp_path / "s.csv"), n=0)
    with pytest.raises(RecordError):
        api.propose(from_monitor=str(tmp_path / "none.json"), sheet=str(tmp_path / "s.csv"))
    shutil.copytree(GOLDEN, tmp_path / "g", ignore=shutil.ignore_patterns("calibration", "buggy", "*.json"))
    with pytest.raises(DatasetError, match="review sheet not found"):
        api.accept(tmp_path / "none.csv", data=str(tmp_path / "g"))


# --------------------------------------------------------------------------- the notebook


def test_the_propose_notebook_proposes_from_a_record_and_shows_the_checks(monitored, tmp_path):
    _, _, record = monitored
    out = tmp_path / "out.ipynb"
    sheet = tmp_path / "nb.csv"
    run_papermill(
        ROOT / "notebooks" / "propose.ipynb",
        out,
        parameters=dict(from_monitor=str(record), sheet=str(sheet), n=4),
        kernel_name="python3",
        progress_bar=False,
        cwd=str(ROOT),
    )
    text = json.dumps([c.get("outputs", []) for c in nbformat.read(out, as_version=4).cells])
    assert "PROPOSED: 4 candidate(s) from traffic" in text and "What the candidates were chosen from" in text
    assert len(sheet_rows(sheet)) == 4


def test_the_propose_notebook_is_committed_clean_and_refuses_an_unknown_parameter(tmp_path):
    from papermill.exceptions import PapermillExecutionError

    nb = nbformat.read(ROOT / "notebooks" / "propose.ipynb", as_version=4)
    assert all(c.outputs == [] and c.execution_count is None for c in nb.cells if c.cell_type == "code")
    with pytest.raises(PapermillExecutionError, match="has no parameter 'shet'"):
        run_papermill(
            ROOT / "notebooks" / "propose.ipynb",
            tmp_path / "o.ipynb",
            parameters=dict(shet="x.csv"),
            kernel_name="python3",
            progress_bar=False,
            cwd=str(ROOT),
        )


def test_corpus_passages_are_read_by_position():
    corpus_dir = write_corpus(Path(os.environ.get("TMPDIR", "/tmp")) / f"qaeval-corpus-{os.getpid()}", n=3)
    with Corpus.open(corpus_dir / "corpus.jsonl") as corpus:
        assert [corpus.at(i).id for i in range(3)] == ["p00000", "p00001", "p00002"]
        with pytest.raises(IndexError):
            corpus.at(3)
    shutil.rmtree(corpus_dir)


def test_a_sheet_with_a_cell_over_128_kib_is_read(monitored, tmp_path, golden_copy):
    """The csv module refuses a field over 128 KiB (exit 70 was the result): a passage that long is real."""
    from qaeval.verdicts.sheets import sheet_rows as read_rows

    long_text = "word " * 40_000  # 200 KB
    rows = [
        log_row(
            i,
            bad_citation=True,
            question=f"When does branch {i} open?",
            prompt=None,
            passages=[{"id": "hours", "text": long_text}],
        )
        for i in range(2)
    ]
    log = write_jsonl(tmp_path / "log.jsonl", rows)
    record = tmp_path / "mon.json"
    assert main(["monitor", "--logs", str(log), "--save", str(record), "--quiet"]) == 0
    sheet = tmp_path / "s.csv"
    api.propose(from_monitor=str(record), sheet=str(sheet), n=1)
    got = sheet_rows(sheet)
    got[0].update(accept="y", gold_answer="word", gold_source_ids="hours")
    assert len(api.accept(write_rows(tmp_path / "f.csv", got), data=str(golden_copy)).added) == 1
    label_sheet = tmp_path / "labels.csv"
    label_sheet.write_text("case_id,axis,score\nx," + "y" * 200_000 + ",1\n")
    assert [r["axis"] for _, _, r in read_rows(label_sheet, "label sheet", ("case_id", "axis", "score"))] == [
        "y" * 200_000
    ]


def test_a_record_whose_log_is_a_fifo_is_refused_not_waited_on(monitored, tmp_path):
    import subprocess
    import sys

    _, log, record = monitored
    fifo = tmp_path / "log.jsonl"
    os.mkfifo(fifo)
    forged = tmp_path / "forged.json"
    forged.write_text(record.read_text().replace(json.dumps(str(log)), json.dumps(str(fifo))))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "qaeval",
            "propose",
            "--from-monitor",
            str(forged),
            "--out",
            str(tmp_path / "s.csv"),
            "--n",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 65 and "not a regular file" in done.stderr, done.stderr


def test_review_fixes_record_fifo_mixed_times_outer_spaces_and_the_ledger(tmp_path, golden_copy, capsys):
    """From the adversarial review: a FIFO record hung; mixed second precision was exit 70; an answer ending
    in a line break could never be accepted; a ledger that could not be written left the cases written."""
    from qaeval.core.locks import holding_the_folder

    fifo = tmp_path / "rec.json"
    os.mkfifo(fifo)
    assert main(["propose", "--from-monitor", str(fifo), "--out", str(tmp_path / "s.csv")]) == 65
    assert "not a regular file" in capsys.readouterr().err
    rows = [
        log_row(
            i,
            bad_citation=True,
            question=f"When does branch {i} open?",
            answer="Nine.\n",
            citations=[{"source_id": "missing", "claim": "Nine."}],
            timestamp="2026-02-01T10:00:00.250Z" if i % 2 else "2026-02-01T09:00:00Z",
        )
        for i in range(4)
    ]
    log = write_jsonl(tmp_path / "log.jsonl", rows)
    record = tmp_path / "mon.json"
    assert main(["monitor", "--logs", str(log), "--window", "1D", "--save", str(record), "--quiet"]) == 0
    sheet = tmp_path / "s.csv"
    assert main(["propose", "--from-monitor", str(record), "--out", str(sheet), "--n", "2"]) == 0
    got = sheet_rows(sheet)
    for r in got:
        r.update(accept="y", gold_answer="nine in the morning", gold_source_ids="hours")
    filled = write_rows(tmp_path / "f.csv", got)
    (golden_copy / ".qaeval").write_text("in the way")  # the ledger cannot be written
    living = (golden_copy / "living.jsonl").read_bytes()
    assert main(["accept", str(filled), "--data", str(golden_copy)]) == 74
    assert (golden_copy / "living.jsonl").read_bytes() == living, "nothing written"
    (golden_copy / ".qaeval").unlink()
    (golden_copy / ".qaeval").mkdir()
    with holding_the_folder(golden_copy):  # another accept is at work
        assert main(["accept", str(filled), "--data", str(golden_copy)]) == 64
        assert f"another qaeval command is adding cases to {golden_copy}" in capsys.readouterr().err
    capsys.readouterr()
    assert main(["accept", str(filled), "--data", str(golden_copy)]) == 0, capsys.readouterr().err


# --------------------------------------------------------------------------- from the review of #41


def _mon_record(folder: Path, rows: list[dict], *options: str) -> Path:
    log = write_jsonl(folder / "log.jsonl", rows)
    record = folder / "mon.json"
    assert main(["monitor", "--logs", str(log), "--save", str(record), "--quiet", *options]) in (0, 3)
    return record


def test_passage_ids_with_spaces_or_commas_are_read_back_as_given(tmp_path, golden_copy):
    """gold_source_ids was split on spaces too: an id such as "opening hours" could never be accepted.
    Commas separate ids; a JSON list carries an id that holds a comma, and the sheet writes one so."""
    from qaeval.proposals.candidates import ids_cell, ids_of_cell

    assert ids_of_cell("opening hours, fees") == (["opening hours", "fees"], None)
    assert ids_of_cell(ids_cell(("fees,2024", "a b"))) == (["fees,2024", "a b"], None)
    assert ids_cell(("a", "b c")) == "a, b c" and ids_of_cell("[3]")[1] is not None
    passages = [{"id": "opening hours", "text": FACT}, {"id": "fees,2024", "text": "Printing costs ten cents."}]
    record = _mon_record(tmp_path, [log_row(0, bad_citation=True, prompt=None, passages=passages)])
    api.propose(from_monitor=str(record), sheet=str(tmp_path / "s.csv"), n=1)
    rows = sheet_rows(tmp_path / "s.csv")
    rows[0].update(accept="y", gold_answer="nine in the morning", gold_source_ids='["opening hours", "fees,2024"]')
    api.accept(write_rows(tmp_path / "f.csv", rows), data=str(golden_copy))
    added = [c for c in load_suite(golden_copy) if c.adversarial == "traffic" or c.question == log_row(0)["question"]]
    assert added and added[-1].gold_source_ids == ("opening hours", "fees,2024")


def test_propose_never_replaces_a_review_sheet_someone_has_started(monitored, tmp_path, capsys):
    _, _, record = monitored
    sheet = tmp_path / "s.csv"
    api.propose(from_monitor=str(record), sheet=str(sheet), n=3)
    again = api.propose(from_monitor=str(record), sheet=str(sheet), n=3)  # nothing decided yet: replaced
    rows = sheet_rows(sheet)
    rows[1]["accept"] = "y"
    write_rows(sheet, rows)
    before = sheet.read_bytes()
    capsys.readouterr()
    assert main(["propose", "--from-monitor", str(record), "--out", str(sheet), "--n", "3"]) == 64
    assert "1 of its row(s) hold a reviewer's decision" in capsys.readouterr().err
    assert sheet.read_bytes() == before and again.candidates


def test_a_reviewed_sheet_saved_as_windows_1252_is_never_replaced(monitored, tmp_path, golden_copy, capsys):
    """Excel's default "CSV" saves Windows-1252: a note with "é" failed the strict read, propose took that
    as "not a review sheet" and replaced the reviewer's decisions."""
    _, _, record = monitored
    sheet = tmp_path / "s.csv"
    api.propose(from_monitor=str(record), sheet=str(sheet), n=3)
    rows = sheet_rows(sheet)
    rows[0].update(accept="n", note="déjà proposé")
    with open(sheet, "w", encoding="cp1252", newline="") as f:  # as Excel saves it: no BOM, Windows-1252
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    before = sheet.read_bytes()
    capsys.readouterr()
    assert main(["propose", "--from-monitor", str(record), "--out", str(sheet), "--n", "3"]) == 65
    err = capsys.readouterr().err
    assert "not valid UTF-8 (byte 0xe9)" in err and "reads as Windows-1252" in err and "CSV UTF-8" in err
    assert "refusing to replace this review sheet" in err
    assert sheet.read_bytes() == before, "the reviewer's decisions are kept"
    assert main(["accept", str(sheet), "--data", str(golden_copy)]) == 65
    assert "reads as Windows-1252" in capsys.readouterr().err


def test_a_sheet_naming_a_column_twice_is_refused_not_half_read(monitored, tmp_path, golden_copy, capsys):
    """csv's DictReader keeps the last of two same-named columns: a second, empty accept column made
    every decision vanish, exit 0."""
    _, _, record = monitored
    api.propose(from_monitor=str(record), sheet=str(tmp_path / "s.csv"), n=3)
    rows = list(csv.reader(open(tmp_path / "s.csv", encoding="utf-8-sig", newline="")))
    with open(tmp_path / "dup.csv", "w", encoding="utf-8", newline="") as f:
        csv.writer(f).writerows([rows[0] + ["accept"]] + [[*r[:8], "y", *r[9:], ""] for r in rows[1:]])
    capsys.readouterr()
    assert main(["accept", str(tmp_path / "dup.csv"), "--data", str(golden_copy)]) == 65
    err = capsys.readouterr().err
    assert "the header names a column twice: column 'accept' appears 2 times (columns 9," in err, err


@pytest.mark.parametrize(
    "forge, said",
    [
        (
            lambda text, row: text.replace('"every": "1D"', '"every": "banana"', 1),
            "monitor.every 'banana' is not a time span",
        ),
        (
            lambda text, row: text.replace(row["timestamp"], "not a time", 1),
            "timestamp 'not a time' is not an ISO 8601 time",
        ),
        (
            lambda text, row: text.replace(
                '  "rows": [\n', '  "rows": [\n   ' + json.dumps(row, sort_keys=True) + ",\n", 1
            ),
            "appears twice",
        ),
    ],
    ids=["every", "timestamp", "row twice"],
)
def test_a_forged_monitor_record_is_bad_data_with_its_line_not_a_crash(tmp_path, capsys, forge, said):
    record = _mon_record(
        tmp_path, [log_row(i, bad_citation=True, question=f"Q{i} open?") for i in range(3)], "--window", "1D"
    )
    text = record.read_text()
    start = text.index('  "rows": [\n') + len('  "rows": [\n')
    row = json.loads(text[start:].split("\n", 1)[0].strip().rstrip(","))
    forged = tmp_path / "forged.json"
    forged.write_text(forge(text, row))
    capsys.readouterr()
    assert main(["propose", "--from-monitor", str(forged), "--out", str(tmp_path / "s.csv"), "--n", "2"]) == 65
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err, err


@pytest.mark.parametrize(
    "factory, said",
    [
        ("plugins:make_config_raises", "ConfigRaises"),
        ("plugins:make_exits_in_generate", "the generator called sys.exit"),
    ],
)
def test_a_generator_inside_qaeval_cannot_end_the_run_or_its_exit_code(tmp_path, generator_env, factory, said):
    corpus = write_corpus(tmp_path / "corpus")
    proposal = api.propose(
        from_corpus=str(corpus), sheet=str(tmp_path / "s.csv"), n=3, max_calls=10, generator=factory, isolation="none"
    )
    text = proposal.summary_text()
    assert said in text and "isolation none" in text, text


def test_a_candidate_is_the_same_however_the_log_path_is_spelled_and_from_wherever_propose_runs(
    tmp_path, monkeypatch, golden_copy, capsys
):
    """The candidate id held the log's path as spelled: the same row given with --logs /abs/log.jsonl was a
    new candidate, refused by accept as "already accepted; the sheet now says accepted". A relative
    monitor.source was read from propose's working folder, not the record's."""
    rows = [log_row(i, bad_citation=True, question=f"When does branch {i} open?") for i in range(3)]
    write_jsonl(tmp_path / "log.jsonl", rows)
    monkeypatch.chdir(tmp_path)
    assert main(["monitor", "--logs", "log.jsonl", "--save", "mon.json", "--quiet"]) in (0, 3)
    assert json.loads((tmp_path / "mon.json").read_text())["monitor"]["source"] == "log.jsonl"
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")  # the record's relative source is beside the record
    first = api.propose(from_monitor="../mon.json", sheet="a.csv", n=3)
    spelled = api.propose(from_monitor="../mon.json", sheet="b.csv", n=3, logs=str(tmp_path / "log.jsonl"))
    assert len(first.candidates) == 3 and [c.id for c in first.candidates] == [c.id for c in spelled.candidates]
    filled = sheet_rows(Path("a.csv"))
    for r in filled:
        r.update(accept="y", gold_answer="nine in the morning", gold_source_ids="hours")
    assert main(["accept", str(write_rows(Path("fa.csv"), filled)), "--data", str(golden_copy)]) == 0
    again = sheet_rows(Path("b.csv"))
    for r in again:
        r.update(accept="y", gold_answer="nine in the morning", gold_source_ids="hours")
    capsys.readouterr()
    assert main(["accept", str(write_rows(Path("fb.csv"), again)), "--data", str(golden_copy)]) == 0
    assert "3 row(s) decided the same way before were left as they are" in capsys.readouterr().out


def test_a_record_whose_source_is_no_log_says_so_of_the_record(tmp_path, capsys):
    record = _mon_record(tmp_path, [log_row(i, bad_citation=True, question=f"Q{i} open?") for i in range(2)])
    data = json.loads(record.read_text())
    forged = tmp_path / "forged.json"
    source = '"source": ' + json.dumps(data["monitor"]["source"])
    assert source in record.read_text()
    forged.write_text(record.read_text().replace(source, '"source": "/dev/zero"', 1))
    capsys.readouterr()
    assert main(["propose", "--from-monitor", str(forged), "--out", str(tmp_path / "s.csv"), "--n", "1"]) == 65
    err = capsys.readouterr().err
    assert "monitor.source '/dev/zero'" in err and "--logs" not in err.split("monitor.source")[0], err


def test_a_multi_hop_candidate_never_rests_on_two_copies_of_one_passage(tmp_path):
    """In a corpus with duplicate chunks the nearest passage was a copy of the first: a "question that
    needs both passages" that needs one, with both ids gold."""
    from qaeval.proposals import verify

    given = [Source("p1", "The harbor opened in 1801."), Source("p1-copy", "The harbor  opened in 1801!")]
    assert verify.check_sources("multi", ["p1", "p1-copy"], given) == (None, verify.SAME_TEXT)
    other = [given[0], Source("p2", "Its first keeper served for three years.")]
    assert verify.check_sources("multi", ["p1", "p2"], other) == (("p1", "p2"), None)
    assert verify.same_text("A b c.", "Before that: a b c. And more.") and not verify.same_text("a b", "a c")


def test_in_a_corpus_of_duplicate_chunks_a_multi_hop_candidate_pairs_two_different_passages(tmp_path, generator_env):
    corpus = write_corpus(tmp_path / "corpus")
    lines = (corpus / "corpus.jsonl").read_text().splitlines()
    copies = [json.dumps({**json.loads(line), "id": json.loads(line)["id"] + "-copy"}) for line in lines]
    (corpus / "corpus.jsonl").write_text("\n".join(lines + copies) + "\n")
    proposal = api.propose(
        from_corpus=str(corpus), sheet=str(tmp_path / "s.csv"), n=10, generator="plugins:make_pid_generator"
    )
    multi = [c for c in proposal.candidates if c.kind == "multi"]
    assert multi and all(c.passages[0].text != c.passages[1].text for c in multi)
    assert verify_rules_unused(proposal), "the partner is chosen apart from its copies; no candidate had to be dropped"


def verify_rules_unused(proposal) -> bool:
    from qaeval.proposals.verify import SAME_TEXT

    return SAME_TEXT not in proposal.dropped


def test_repetitive_traffic_does_not_run_the_pool_dry(tmp_path):
    """190 rows of one popular question and 10 others: 11 distinct candidates. The scan kept 2n + 8 rows a
    stratum, mostly the popular one, dropped as alike after the cut: --n 5 gave 2, saying nothing."""
    rows = [
        log_row(
            i, bad_citation=True, question="When does the library open?" if i >= 10 else f"When does branch {i} open?"
        )
        for i in range(200)
    ]
    record = _mon_record(tmp_path, rows)
    proposal = api.propose(from_monitor=str(record), sheet=str(tmp_path / "s.csv"), n=5)
    assert len(proposal.candidates) == 5 and len({c.question for c in proposal.candidates}) == 5
    assert not any("were not kept" in n for n in proposal.notes)


def test_a_record_read_whole_names_its_rows_by_place_and_never_parses_a_string_row(tmp_path, capsys):
    """Rows read whole (not one a line) were reported by their index as if it were a line of the file, and
    a row that is a JSON string was parsed as JSON text."""
    record = _mon_record(tmp_path, [log_row(i, bad_citation=True, question=f"Q{i} open?") for i in range(2)])
    data = json.loads(record.read_text())
    row = data["monitor"]["rows"][0]
    data["monitor"]["rows"][1] = json.dumps(row)  # a string holding a row, not a row
    whole = tmp_path / "whole.json"
    whole.write_text(json.dumps(data, indent=1))
    capsys.readouterr()
    assert main(["propose", "--from-monitor", str(whole), "--out", str(tmp_path / "s.csv"), "--n", "1"]) == 65
    err = capsys.readouterr().err
    assert "monitor.rows[1]: a row must be a JSON object" in err and f"{whole}:2:" not in err, err


def test_a_generator_that_drips_its_reply_ends_at_the_deadline_not_never(tmp_path, generator_env):
    """Issue 49, item 16: the generator's QAEVAL_JUDGE_TIMEOUT was a per-read timeout, so a server sending
    one byte every half second held `propose --from-corpus` for as long as it dripped. Now each call
    has a whole-call deadline: it costs its candidate, for that reason, and the proposal ends."""
    import subprocess
    import sys

    generator_env(drip=0.5, drip_bytes=400)  # at most 200 s a reply, ended with the server
    corpus = write_corpus(tmp_path / "corpus")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "qaeval",
            "propose",
            "--from-corpus",
            str(corpus),
            "--out",
            str(tmp_path / "s.csv"),
            "--n",
            "2",
            "--max-calls",
            "4",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "QAEVAL_JUDGE_TIMEOUT": "2"},
        timeout=100,  # generous: the proposal takes some seconds; before the fix it never ended
    )
    why = "the generator did not answer within its deadline of 2 s (QAEVAL_JUDGE_TIMEOUT, retries included)"
    assert done.returncode == 0 and "PROPOSED: no candidate" in done.stdout, done.stderr
    assert why in done.stdout, done.stdout
