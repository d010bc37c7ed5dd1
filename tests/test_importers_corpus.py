"""``qaeval import squad2|hotpotqa|musique IN --out DIR --corpus``: every paragraph of the file pooled once
into DIR/corpus.jsonl (records refused or left out by --limit included, the same text merged into one
passage whose id is the same on every import), and cases without sources whose gold ids are corpus ids."""

from __future__ import annotations

import copy
import hashlib
import json
import subprocess
import sys

import pytest
from conftest import ROOT, SHARED_DATA, make_case
from test_growing import MUSIQUE  # the same small MuSiQue file as the plain importer's tests

from qaeval import DatasetError, UsageError, load_suite
from qaeval.cli import main
from qaeval.data import pooling
from qaeval.data.corpus import Corpus
from qaeval.data.importers import import_file

SHARED = SHARED_DATA

SQUAD = {
    "version": "v2.0",
    "data": [
        {
            "title": "Harbor",
            "paragraphs": [
                {
                    "context": "The Eastside Branch opened in 1964 on Dunmore Street.",
                    "qas": [
                        {
                            "id": "q1",
                            "question": "When did Eastside open?",
                            "answers": [{"text": "1964", "answer_start": 31}],
                            "is_impossible": False,
                        },
                        {"id": "q2", "question": "When did Eastside close?", "answers": [], "is_impossible": True},
                    ],
                },
                {
                    "context": "The Northgate Branch opened in 1978.",
                    "qas": [
                        {"id": "q3", "question": "When did Northgate open?", "answers": [], "is_impossible": False}
                    ],
                },
                {"context": "The Eastside Branch opened in 1964 on Dunmore Street.", "qas": []},
            ],
        }
    ],
}

HOTPOT = [
    {
        "_id": "h1",
        "question": "Which opened first, Eastside or Northgate?",
        "answer": "Eastside",
        "type": "comparison",
        "supporting_facts": [["Eastside", 0], ["Northgate", 0]],
        "context": [
            ["Eastside", ["Eastside opened in 1964.", " It has a Maker Lab."]],
            ["Northgate", ["Northgate opened in 1978."]],
            ["Printing", ["Printing costs 10 cents."]],
        ],
    },
    {
        "_id": "h2",
        "question": "Who?",
        "answer": "x",
        "type": "bridge",
        "supporting_facts": [["Missing", 0]],
        "context": [["Eastside", ["Eastside opened in 1964."]]],
    },
    {
        "_id": "h3",
        "question": "When did Northgate open?",
        "answer": "1978",
        "type": "bridge",
        "supporting_facts": [["Northgate", 0]],
        "context": [["Northgate", ["Northgate opened in 1978."]], ["Printing", ["Printing costs 10 cents."]]],
    },
]


def write(path, value):
    path.write_text(json.dumps(value))
    return path


def read_cases(path):
    return {c["id"]: c for c in map(json.loads, path.read_text().splitlines())}


def read_corpus(folder):
    """{text: passage} of DIR/corpus.jsonl, after Corpus.open has accepted the file."""
    with Corpus.open(folder / "corpus.jsonl") as corpus:
        passages = list(corpus)
    assert len({p.text for p in passages}) == len(passages), "one passage per distinct text"
    return {p.text: p for p in passages}


def test_squad2_pools_every_paragraph_and_names_the_questions_paragraph(tmp_path):
    report = import_file("squad2", write(tmp_path / "s.json", SQUAD), tmp_path / "out", corpus=True)
    assert (report.read, report.imported, report.pooled, report.merged) == (3, 2, 2, 1)
    by_text = read_corpus(tmp_path / "out")
    eastside = by_text["The Eastside Branch opened in 1964 on Dunmore Street."]
    assert "The Northgate Branch opened in 1978." in by_text, "a refused question's paragraph is still pooled"
    assert eastside.title == "Harbor" and eastside.id.startswith("harbor-")
    cases = read_cases(tmp_path / "out" / "squad2.jsonl")
    assert all("sources" not in c for c in cases.values())
    assert cases["squad2-q1"]["gold_source_ids"] == [eastside.id]
    assert cases["squad2-q2"]["gold_source_ids"] == [] and cases["squad2-q2"]["gold_answer"] is None
    assert (
        "pooled 2 passage(s)" in report.summary_text() and "(1 duplicate paragraph(s) merged)" in report.summary_text()
    )


def test_hotpotqa_supporting_paragraphs_are_the_gold_ids_and_shared_paragraphs_are_one_passage(tmp_path):
    report = import_file("hotpotqa", write(tmp_path / "h.json", HOTPOT), tmp_path / "out", corpus=True)
    assert (report.imported, report.pooled, report.merged) == (2, 4, 2)
    by_text = read_corpus(tmp_path / "out")
    assert "Eastside opened in 1964." in by_text, "the refused record's paragraph is pooled"
    east, north = by_text["Eastside opened in 1964. It has a Maker Lab."], by_text["Northgate opened in 1978."]
    cases = read_cases(tmp_path / "out" / "hotpotqa.jsonl")
    assert cases["hotpotqa-h1"]["gold_source_ids"] == [east.id, north.id]
    assert cases["hotpotqa-h3"]["gold_source_ids"] == [north.id], "the same paragraph in two records: one id"
    assert [cp["source_id"] for cp in cases["hotpotqa-h1"]["checkpoints"]] == [east.id, north.id]


def test_musique_is_supporting_paragraphs_are_the_gold_ids(tmp_path):
    report = import_file("musique", write(tmp_path / "m.json", MUSIQUE), tmp_path / "out", corpus=True)
    assert (report.imported, report.pooled, report.merged) == (2, 3, 1)
    by_text = read_corpus(tmp_path / "out")
    cases = read_cases(tmp_path / "out" / "musique.jsonl")
    assert cases["musique-2hop__1"]["gold_source_ids"] == [
        by_text["Eastside was founded by Ada Park."].id,
        by_text["Ada Park was born in Harbor City."].id,
    ]
    assert cases["musique-2hop__2"]["gold_source_ids"] == []


def test_two_sources_with_one_text_become_one_gold_id(tmp_path):
    record = copy.deepcopy(MUSIQUE[0])
    record["paragraphs"][1]["paragraph_text"] = record["paragraphs"][0]["paragraph_text"]
    import_file("musique", write(tmp_path / "m.json", [record]), tmp_path / "out", corpus=True)
    [case] = read_cases(tmp_path / "out" / "musique.jsonl").values()
    assert len(case["gold_source_ids"]) == 1 and len(case["checkpoints"]) == 1


def test_limit_keeps_fewer_cases_but_pools_every_passage_with_the_same_ids(tmp_path):
    path = write(tmp_path / "h.json", HOTPOT)
    full = import_file("hotpotqa", path, tmp_path / "all", corpus=True)
    first = import_file("hotpotqa", path, tmp_path / "first", corpus=True, limit=1)
    sampled = import_file("hotpotqa", path, tmp_path / "sampled", corpus=True, limit=1, seed=3)
    assert first.imported == sampled.imported == 1 and first.left_by_limit == 1
    assert first.pooled == sampled.pooled == full.pooled == 4
    corpus = (tmp_path / "all" / "corpus.jsonl").read_bytes()
    assert (tmp_path / "first" / "corpus.jsonl").read_bytes() == corpus
    assert (tmp_path / "sampled" / "corpus.jsonl").read_bytes() == corpus


def test_ids_that_would_collide_get_a_suffix(tmp_path, monkeypatch):
    """Different texts whose digests share the first ten hex digits (forced here) keep distinct ids."""
    monkeypatch.setattr(pooling, "_key", lambda text: bytes(5) + hashlib.sha256(text.encode()).digest()[:11])
    with pooling.PassagePool(tmp_path) as pool:
        first, second = pool.add("Eastside", "One text."), pool.add("Eastside", "Another text.")
        pool.publish()
    assert (first, second) == ("eastside-0000000000", "eastside-0000000000-2")
    assert len(read_corpus(tmp_path)) == 2


@pytest.mark.parametrize("fmt", ["ragas", "wice"])
def test_corpus_is_a_usage_error_for_formats_without_paragraphs(tmp_path, capsys, fmt):
    path = tmp_path / "rows.jsonl"
    path.write_text("{}\n")
    assert main(["import", fmt, str(path), "--out", str(tmp_path / "out"), "--corpus"]) == 64
    assert "--corpus is for squad2, hotpotqa, musique" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_an_existing_corpus_is_never_replaced(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "corpus.jsonl").write_text('{"id": "mine", "text": "Kept as it is."}\n')
    assert main(["import", "squad2", str(write(tmp_path / "s.json", SQUAD)), "--out", str(out), "--corpus"]) == 64
    err = capsys.readouterr().err
    assert "corpus.jsonl exists" in err and "never overwrites" in err
    assert sorted(p.name for p in out.iterdir()) == ["corpus.jsonl"]
    assert (out / "corpus.jsonl").read_text() == '{"id": "mine", "text": "Kept as it is."}\n'


def test_nothing_imported_leaves_no_corpus_behind(tmp_path):
    with pytest.raises(DatasetError, match="nothing imported"):
        import_file("hotpotqa", write(tmp_path / "h.json", [HOTPOT[1]]), tmp_path / "out", corpus=True)
    assert list((tmp_path / "out").iterdir()) == []


def test_cli_reports_the_pool(tmp_path, capsys):
    assert (
        main(
            ["import", "musique", str(write(tmp_path / "m.json", MUSIQUE)), "--out", str(tmp_path / "out"), "--corpus"]
        )
        == 0
    )
    assert "pooled 3 passage(s) from every record of the file" in capsys.readouterr().out
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["corpus.jsonl", "musique.jsonl"]


def test_a_squad_question_that_is_not_an_object_is_refused_with_a_reason(tmp_path):
    """Before: an AttributeError (exit 70) from qa.get on a list."""
    squad = copy.deepcopy(SQUAD)
    squad["data"][0]["paragraphs"][0]["qas"].append(["not", "an", "object"])
    report = import_file("squad2", write(tmp_path / "s.json", squad), tmp_path / "out")
    assert report.refused["a question that is not an object"] == 1


def _bent(fmt, change):
    """The format's sample with ``change`` made to its first record (a later record stays whole, so the
    import keeps something and reports its refusals)."""
    data = copy.deepcopy(SQUAD if fmt == "squad2" else HOTPOT if fmt == "hotpotqa" else MUSIQUE)
    if fmt == "musique":
        data.append({**copy.deepcopy(data[0]), "id": "2hop__whole"})
    change(data)
    return data


def _squad_title(value):
    def change(d):
        d["data"][0]["title"] = value

    return change


def _first(path, key, value):
    def change(d):
        target = d
        for step in path:
            target = target[step]
        target[key] = value

    return change


@pytest.mark.parametrize(
    "fmt, change, corpus, reason",
    [
        ("squad2", _first(["data", 0, "paragraphs", 0], "qas", "nope"), False, "questions (qas) that are not a list"),
        (
            "squad2",
            _first(["data", 0, "paragraphs", 0, "qas", 0], "is_impossible", "no"),
            False,
            "is_impossible that is not true or false",
        ),
        (
            "squad2",
            lambda d: d["data"][0]["paragraphs"].insert(1, "a paragraph as text"),
            False,
            "a paragraph that is not an object",
        ),
        (
            "hotpotqa",
            _first([0], "supporting_facts", [[["Eastside"], 0]]),
            False,
            "a supporting fact that is not [title, sentence number]",
        ),
        ("musique", _first([0], "question_decomposition", 5), False, "a question_decomposition that is not a list"),
        ("musique", _first([0, "paragraphs", 0], "idx", 1.5), False, "a paragraph idx that is not a whole number"),
    ],
)
def test_a_record_of_an_unforeseen_shape_is_refused_with_its_reason(tmp_path, fmt, change, corpus, reason):
    """Each of these was a traceback and exit 70 (AttributeError, unhashable list, len() of an int), or a
    wrong case: "is_impossible": "no" became a must-abstain case, "qas": "nope" four refused questions."""
    told = refusals(fmt, write(tmp_path / "in.json", _bent(fmt, change)), tmp_path / "out", corpus=corpus)
    assert f"refused 1: {reason} (first:" in told, told


def refusals(fmt, path, out, **options):
    """What the import says of the records it refused: its report, or the error when it kept none."""
    try:
        return import_file(fmt, path, out, **options).summary_text()
    except DatasetError as exc:
        return str(exc)


def test_a_title_that_is_not_text_is_no_title_in_the_pool(tmp_path):
    """An article titled 5 crashed pooling (int has no lower()); now its passages pool untitled."""
    report = import_file(
        "squad2", write(tmp_path / "s.json", _bent("squad2", _squad_title(5))), tmp_path / "out", corpus=True
    )
    assert report.pooled == 2 and all(p.title is None for p in read_corpus(tmp_path / "out").values())


def test_a_record_no_rule_foresaw_is_refused_not_a_crash(tmp_path, monkeypatch):
    """The safety net under the rules: whatever a record's shape raises, its cases are refused with it."""
    from qaeval.data import importers

    def brittle(record):
        raise TypeError("'int' object is not iterable")
        yield

    monkeypatch.setitem(importers.POOLED, "hotpotqa", (*importers.POOLED["hotpotqa"][:2], brittle))
    told = refusals("hotpotqa", write(tmp_path / "h.json", HOTPOT), tmp_path / "out", corpus=True)
    assert "refused 3: a record of a shape qaeval cannot read (TypeError: 'int' object is not iterable)" in told, told


def test_usage_errors_come_before_anything_is_read(tmp_path):
    with pytest.raises(UsageError, match="--corpus is for"):
        import_file("ares", tmp_path / "missing.tsv", tmp_path / "out", corpus=True)


@pytest.mark.skipif(
    not (SHARED / "squad2-small.json").exists(),
    reason=f"{SHARED / 'squad2-small.json'} not present (set QAEVAL_SHARED_DATA to its folder)",
)
def test_the_shared_squad2_excerpt_imports_with_a_corpus(tmp_path):
    source = SHARED / "squad2-small.json"
    distinct = {p["context"] for a in json.loads(source.read_text())["data"] for p in a["paragraphs"]}
    report = import_file("squad2", source, tmp_path / "out", corpus=True)
    assert (report.imported, report.pooled, report.merged) == (626, len(distinct), 0)
    with Corpus.open(tmp_path / "out" / "corpus.jsonl") as corpus:
        assert len(corpus) == 87
        cases = read_cases(tmp_path / "out" / "squad2.jsonl")
        gold = [g for c in cases.values() for g in c["gold_source_ids"]]
        assert gold and all(g in corpus for g in gold)
    assert sum(not c["gold_source_ids"] for c in cases.values()) == sum(
        c["expected_behavior"] == "unanswerable_must_abstain" for c in cases.values()
    )


def test_the_written_folder_loads_as_a_suite_with_its_corpus(tmp_path):
    import_file("hotpotqa", write(tmp_path / "h.json", HOTPOT), tmp_path / "out", corpus=True)
    suite = load_suite(tmp_path / "out")
    try:
        assert len(suite.corpus) == 4 and all(c.from_corpus for c in suite.cases)
        assert suite.corpus_fingerprint == hashlib.sha256((tmp_path / "out" / "corpus.jsonl").read_bytes()).hexdigest()
    finally:
        suite.corpus.close()


def test_a_folder_that_does_not_load_afterwards_gets_neither_file(tmp_path):
    """Ids must be unique across the folder's files: a clash undoes the cases and the corpus alike."""
    out = tmp_path / "out"
    out.mkdir()
    clash = make_case(id="squad2-q1")
    (out / "mine.jsonl").write_text(json.dumps(clash) + "\n")
    with pytest.raises(DatasetError, match="duplicate id 'squad2-q1'"):
        import_file("squad2", write(tmp_path / "s.json", SQUAD), out, corpus=True)
    assert sorted(p.name for p in out.iterdir()) == ["mine.jsonl"]


def test_pooling_a_large_file_streams_in_bounded_memory(tmp_path):
    """100 MB of HotpotQA records, every paragraph distinct: the pool keeps a digest and an id per passage,
    not its text, so memory does not grow with the file (26,000 passages pooled, 10 cases kept)."""
    script = f"""
import json, os, resource, sys
sys.path.insert(0, {str(ROOT)!r})
from qaeval.data.importers import import_file
record = {{"_id": "h", "question": "Q?", "answer": "A", "type": "bridge", "supporting_facts": [["T0", 0], ["T1", 0]]}}
with open({str(tmp_path / "big.json")!r}, "w") as f:
    f.write("[")
    for i in range(2600):
        record["_id"] = f"h{{i}}"
        record["context"] = [[f"T{{j}}", [f"Record {{i}}, paragraph {{j}}. " + "x " * 2000]] for j in range(10)]
        f.write(("," if i else "") + json.dumps(record))
    f.write("]")
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
report = import_file("hotpotqa", {str(tmp_path / "big.json")!r}, {str(tmp_path / "out")!r}, limit=10, corpus=True)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(os.path.getsize({str(tmp_path / "big.json")!r}), report.pooled, report.imported, (after - before) // 1024)
"""
    done = subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True, timeout=300)
    size, pooled, imported, grew_mib = map(int, done.stdout.split())
    assert size > 100_000_000 and (pooled, imported) == (26_000, 10)
    assert grew_mib < 60, f"memory grew by {grew_mib} MiB while pooling {size // 2**20} MiB"


@pytest.mark.parametrize("corpus", [False, True])
def test_a_file_of_another_format_is_refused_saying_what_the_format_expects(tmp_path, corpus):
    """A new user's pass: squad2 on a HotpotQA file said "imported 0 of 0", and hotpotqa on an indented
    SQuAD file said its line 1 was not valid JSON. Each names the shape the format expects."""
    hotpot, squad = write(tmp_path / "hotpot.json", HOTPOT), tmp_path / "squad.json"
    squad.write_text(json.dumps(SQUAD, indent=2))
    for fmt, path, expects in (
        ("squad2", hotpot, "one JSON object with a 'data' list"),
        ("hotpotqa", squad, "a JSON array of records, or one record per line"),
        ("musique", squad, "a JSON array of records, or one record per line"),
    ):
        with pytest.raises(DatasetError) as err:
            import_file(fmt, path, tmp_path / f"out-{fmt}", corpus=corpus)
        assert expects in str(err.value) and "0 of 0" not in str(err.value), (fmt, str(err.value))
    with pytest.raises(DatasetError, match="one JSON object with a 'data' list"):  # an object without articles
        import_file("squad2", write(tmp_path / "other.json", {"version": "v2.0", "rows": []}), tmp_path / "o3")


def test_the_format_hint_comes_on_the_first_line_with_text(tmp_path):
    squad = tmp_path / "squad.json"
    squad.write_text("\n\n" + json.dumps(SQUAD, indent=2))
    with pytest.raises(DatasetError, match="line 3 is not valid JSON .*a hotpotqa file is a JSON array"):
        import_file("hotpotqa", squad, tmp_path / "out")


@pytest.mark.parametrize("fmt, data", [("squad2", SQUAD), ("hotpotqa", HOTPOT)])
def test_a_byte_order_mark_before_a_json_dataset_is_read_past(tmp_path, fmt, data):
    # Windows tools write one; the streaming JSON parser took it for an invalid character (exit 65).
    plain = import_file(fmt, write(tmp_path / "plain.json", data), tmp_path / "plain", corpus=True)
    marked = tmp_path / "marked.json"
    marked.write_bytes(b"\xef\xbb\xbf" + json.dumps(data).encode())
    report = import_file(fmt, marked, tmp_path / "marked", corpus=True)
    assert (report.read, report.imported, report.pooled) == (
        plain.read,
        plain.imported,
        plain.pooled,
    ) and report.imported
    assert read_cases(tmp_path / "marked" / f"{fmt}.jsonl") == read_cases(tmp_path / "plain" / f"{fmt}.jsonl")
