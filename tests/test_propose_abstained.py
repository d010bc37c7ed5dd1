"""``qaeval propose --from-monitor`` on abstentions that retrieved no passage: nothing tells a right
abstention from a retrieval miss, and a case without passages tests nothing but abstaining on nothing,
so such rows are not proposed; they are dropped, counted, with a note saying why, and the abstentions
that had passages are proposed as before."""

from __future__ import annotations

import csv
import json
from functools import partial

from conftest import ROOT
from monitor_logs import log_row, write_jsonl
from test_resume import qaeval

from qaeval import api
from qaeval.proposals import traffic as traffic_module

cli = partial(qaeval, cwd=ROOT, env={})  # the real command line in a fresh process, as a user runs it


def traffic() -> list[dict]:
    """Eight abstentions: three over passages (two off the question, one holding its answer), five with
    none retrieved (the model rightly not called); and four answered rows that pass."""
    rows = [log_row(i, question=f"When does the library open on visit {i}?", prompt=None) for i in range(4)]
    for i in range(4, 12):
        question = f"Can I rent kayak {i} at the marina?" if i < 6 else f"When does the library open on day {i}?"
        row = log_row(i, question=question, answer=None, citations=[], abstained=True, prompt=None)
        if i >= 7:
            row.update(passages=[], model_was_called=False)
        rows.append(row)
    return rows


def test_abstentions_with_no_passage_are_not_proposed_and_a_note_says_why(tmp_path):
    log = write_jsonl(tmp_path / "log.jsonl", traffic())
    record, sheet = tmp_path / "mon.json", tmp_path / "proposed.csv"
    done = cli("monitor", "--logs", str(log), "--save", str(record), "--quiet")
    assert done.returncode in (0, 3), done.stderr
    done = cli("propose", "--from-monitor", str(record), "--out", str(sheet), "--n", "8")
    assert done.returncode == 0, done.stderr
    with open(sheet, encoding="utf-8-sig", newline="") as f:
        rows = list(csv.DictReader(f))
    # the three abstentions over passages, and none of the five that retrieved nothing
    assert sorted(r["source"].rsplit("(", 1)[1].rstrip(")") for r in rows) == ["r00004", "r00005", "r00006"]
    assert all(json.loads(r["passages"]) for r in rows)
    assert [r["candidate_id"] for r in rows if not json.loads(r["passages"])] == []
    out = " ".join(done.stdout.split())
    assert "5 abstained with no passage retrieved" in out  # the drops, counted
    assert (
        "note: 5 abstained row(s) retrieved no passage and are not proposed: with nothing retrieved there is "
        "nothing to tell a right abstention from a retrieval miss"
    ) in out


def test_a_stratum_of_mostly_empty_abstentions_still_yields_the_ones_with_passages(tmp_path, monkeypatch):
    """Two hundred abstentions with nothing retrieved and two with passages: both are found, and the log is
    read back in a few rounds, each asking for twice as many rows as the last, not once per dropped row."""
    rows = [
        log_row(i, question=f"Is there parking at site {i}?", answer=None, citations=[], abstained=True, prompt=None)
        for i in range(202)
    ]
    for row in rows[2:]:
        row.update(passages=[], model_was_called=False)
    log = write_jsonl(tmp_path / "log.jsonl", rows)
    record = tmp_path / "mon.json"
    assert cli("monitor", "--logs", str(log), "--save", str(record), "--quiet").returncode in (0, 3)
    reads: list[int] = []
    original = traffic_module._source_rows
    monkeypatch.setattr(
        traffic_module, "_source_rows", lambda log, wanted: reads.append(len(wanted)) or original(log, wanted)
    )
    proposal = api.propose(from_monitor=str(record), sheet=str(tmp_path / "proposed.csv"), n=2)
    assert sorted(c.source.rsplit("(", 1)[1].rstrip(")") for c in proposal.candidates) == ["r00000", "r00001"]
    empty = proposal.dropped["abstained with no passage retrieved"]
    assert empty > 50 and len(reads) <= 10, (empty, reads)  # one read a dropped row: about 90
