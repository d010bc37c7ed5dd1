"""Growing the golden set: public formats in (every record imported or refused with a reason), production
misses into the living split (atomically, never twice), and golden cases as pytest tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import GOLDEN, ROOT, make_case, write_cases

from qaeval import DatasetError, UsageError, api, load_suite
from qaeval.cli import main
from qaeval.data.importers import import_file

TESTS = str(ROOT / "tests")


def write(path, rows, kind="json"):
    if kind == "json":
        path.write_text(json.dumps(rows))
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


# --------------------------------------------------------------------------- importers, rule by rule


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
            ],
        }
    ],
}


def test_squad2_mapping(tmp_path):
    report = import_file("squad2", write(tmp_path / "s.json", SQUAD), tmp_path / "out")
    assert (report.read, report.imported) == (3, 2)
    assert report.refused == {"answerable question without an answer": 1}
    cases = {c.id: c for c in load_suite(tmp_path / "out")}
    assert cases["squad2-q1"].gold_source_ids == ("p0",) and cases["squad2-q1"].gold_answer == "1964"
    assert cases["squad2-q2"].must_abstain and cases["squad2-q2"].gold_source_ids == ()
    assert [s.id for s in cases["squad2-q1"].sources] == ["p0", "p1"], "the article's other paragraphs are distractors"


HOTPOT = [
    {
        "_id": "h1",
        "question": "Which opened first, Eastside or Northgate?",
        "answer": "Eastside",
        "type": "comparison",
        "level": "easy",
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
]


def test_hotpotqa_mapping(tmp_path):
    report = import_file("hotpotqa", write(tmp_path / "h.json", HOTPOT), tmp_path / "out", prefix="hp")
    assert report.imported == 1
    assert report.refused == {"a supporting title that is not among the context paragraphs": 1}
    [case] = load_suite(tmp_path / "out")
    assert case.id == "hp-h1" and case.difficulty == "multi-hop" and case.adversarial == "comparison"
    assert case.gold_source_ids == ("eastside", "northgate")
    assert [s.text for s in case.sources][0] == "Eastside opened in 1964. It has a Maker Lab."
    assert [cp["source_id"] for cp in case.checkpoints] == ["eastside", "northgate"]


MUSIQUE = [
    {
        "id": "2hop__1",
        "question": "Where was the founder of Eastside born?",
        "answer": "Harbor City",
        "answerable": True,
        "question_decomposition": [{"id": 1}, {"id": 2}],
        "paragraphs": [
            {
                "idx": 0,
                "title": "Eastside",
                "paragraph_text": "Eastside was founded by Ada Park.",
                "is_supporting": True,
            },
            {
                "idx": 1,
                "title": "Ada Park",
                "paragraph_text": "Ada Park was born in Harbor City.",
                "is_supporting": True,
            },
            {"idx": 2, "title": "Printing", "paragraph_text": "Printing costs 10 cents.", "is_supporting": False},
        ],
    },
    {
        "id": "2hop__2",
        "question": "Where was the founder of Westside born?",
        "answer": "",
        "answerable": False,
        "question_decomposition": [{"id": 1}, {"id": 2}],
        "paragraphs": [
            {
                "idx": 0,
                "title": "Eastside",
                "paragraph_text": "Eastside was founded by Ada Park.",
                "is_supporting": False,
            }
        ],
    },
]


@pytest.mark.parametrize("kind", ["json", "jsonl"])
def test_musique_mapping(tmp_path, kind):
    report = import_file("musique", write(tmp_path / "m.json", MUSIQUE, kind), tmp_path / "out")
    assert report.imported == 2
    cases = {c.id: c for c in load_suite(tmp_path / "out")}
    one, two = cases["musique-2hop__1"], cases["musique-2hop__2"]
    assert one.difficulty == "multi-hop" and one.adversarial == "musique-2hop" and one.gold_source_ids == ("p0", "p1")
    assert two.must_abstain and two.gold_answer is None and two.gold_source_ids == ()


def test_ragas_rows_as_jsonl_and_csv(tmp_path):
    rows = [
        {
            "question": "When did Eastside open?",
            "contexts": ["Eastside opened in 1964.", "Printing costs 10 cents."],
            "ground_truth": "1964",
            "reference_contexts": ["Eastside opened in 1964."],
        },
        {"question": "What does printing cost?", "contexts": ["Printing costs 10 cents."], "reference": "10 cents"},
        {"question": "No truth here", "contexts": ["x y z"]},
    ]
    report = import_file("ragas", write(tmp_path / "r.jsonl", rows, "jsonl"), tmp_path / "a")
    assert report.imported == 2 and report.refused == {"ground_truth/reference missing or empty": 1}
    first, second = load_suite(tmp_path / "a")
    assert first.gold_source_ids == ("c1",) and second.gold_source_ids == ()
    csv_path = tmp_path / "r.csv"
    csv_path.write_text(
        'question,contexts,ground_truth\n"When did Eastside open?","[""Eastside opened in 1964.""]",1964\n'
    )
    assert import_file("ragas", csv_path, tmp_path / "b").imported == 1


def test_limit_and_seed_sample_without_dropping_anything_silently(tmp_path):
    rows = [{"question": f"Question {i}?", "contexts": [f"Context {i}."], "ground_truth": f"{i}"} for i in range(50)]
    path = write(tmp_path / "r.jsonl", rows, "jsonl")
    first = import_file("ragas", path, tmp_path / "first", limit=5)
    assert first.imported == 5 and first.left_by_limit == 45
    assert [c.question for c in load_suite(tmp_path / "first")] == [f"Question {i}?" for i in range(5)]
    a = import_file("ragas", path, tmp_path / "a", limit=5, seed=1)
    import_file("ragas", path, tmp_path / "b", limit=5, seed=1)
    assert (tmp_path / "a" / "ragas.jsonl").read_text() == (tmp_path / "b" / "ragas.jsonl").read_text()
    assert a.imported + a.left_by_limit == 50 and "every record accounted for: 50 = 50" in a.summary_text()


def test_malformed_input_names_the_file_and_line(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text(json.dumps(MUSIQUE[0]) + "\n{broken\n")
    with pytest.raises(DatasetError, match="line 2 is not valid JSON"):
        import_file("musique", path, tmp_path / "out")
    with pytest.raises(DatasetError, match="not valid JSON"):
        import_file("hotpotqa", _broken(tmp_path), tmp_path / "o2")


def _broken(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('[{"_id": "x", "question": ')
    return path


def test_an_import_never_overwrites_and_ids_must_be_unique_in_the_folder(tmp_path, capsys):
    path = write(tmp_path / "s.json", SQUAD)
    assert main(["import", "squad2", str(path), "--out", str(tmp_path / "out")]) == 0
    assert main(["import", "squad2", str(path), "--out", str(tmp_path / "out")]) == 64
    assert "never overwrites" in capsys.readouterr().err
    assert main(["import", "squad2", str(path), "--out", str(tmp_path / "out"), "--prefix", "squad2-again"]) == 0
    capsys.readouterr()


def test_import_streams_a_large_file_in_bounded_memory(tmp_path):
    """A 100 MB HotpotQA-shaped file imports with memory that does not grow with the file."""
    script = f"""
import json, resource, sys
sys.path.insert(0, {str(ROOT)!r})
from qaeval.data.importers import import_file
record = {json.dumps(HOTPOT[0])}
record["context"] = [[f"T{{i}}", ["x " * 2000]] for i in range(10)]
record["supporting_facts"] = [["T0", 0], ["T1", 0]]
with open({str(tmp_path / "big.json")!r}, "w") as f:
    f.write("[")
    for i in range(2600):
        record["_id"] = f"h{{i}}"
        f.write(("," if i else "") + json.dumps(record))
    f.write("]")
import os
size = os.path.getsize({str(tmp_path / "big.json")!r})
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
report = import_file("hotpotqa", {str(tmp_path / "big.json")!r}, {str(tmp_path / "out")!r}, limit=10)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(size, report.read, (after - before) // 1024)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    size, read, grew_mib = map(int, done.stdout.split())
    assert size > 100_000_000 and read == 2600
    assert grew_mib < 60, f"memory grew by {grew_mib} MiB while importing {size // 2**20} MiB"


# --------------------------------------------------------------------------- add-case


def miss(**changes):
    case = make_case()
    base = {k: case[k] for k in ("question", "sources", "gold_answer", "gold_source_ids")}
    base["question"] = "Which street is the Eastside Branch on?"
    base["gold_answer"] = "Dunmore Street"
    base["answer"] = "Main Street"
    base.update(changes)
    return base


@pytest.fixture
def suite_dir(tmp_path):
    return write_cases(
        tmp_path / "data",
        [
            make_case(id="single-0001"),
            make_case(id="single-0007", question="Q?"),
            make_case(id="multi-0002", difficulty="multi-hop", question="Q2?"),
        ],
        name="frozen.jsonl",
    )


def test_add_case_assigns_a_readable_id_and_validates(suite_dir, tmp_path, capsys):
    path = tmp_path / "miss.json"
    path.write_text(json.dumps(miss()))
    assert main(["add-case", "--data", str(suite_dir), "--from", str(path)]) == 0
    assert "added single-0008 to" in capsys.readouterr().out
    assert main(["validate", "--data", str(suite_dir)]) == 0
    case = load_suite(suite_dir)["single-0008"]
    assert case.split == "living" and case.adversarial == "production-miss" and case.gold_answer == "Dunmore Street"
    case_id, _ = api.add_case(
        suite_dir,
        miss(
            question="Nothing grounds this?",
            gold_answer=None,
            gold_source_ids=[],
            expected_behavior="unanswerable_must_abstain",
        ),
    )
    assert case_id == "abstain-0001" and load_suite(suite_dir)[case_id].must_abstain
    case_id, _ = api.add_case(suite_dir, miss(question="Multi?", difficulty="multi-hop"))
    assert case_id == "multi-0003"


def test_adding_the_same_miss_twice_is_refused(suite_dir, tmp_path, capsys):
    path = tmp_path / "miss.json"
    path.write_text(json.dumps(miss()))
    assert main(["add-case", "--data", str(suite_dir), "--from", str(path)]) == 0
    before = (suite_dir / "living.jsonl").read_text()
    spaced = miss(question="  which street is the EASTSIDE branch on? ")
    path.write_text(json.dumps(spaced))
    assert main(["add-case", "--data", str(suite_dir), "--from", str(path)]) == 65
    err = capsys.readouterr().err
    assert "already in the suite as single-0008" in err and f"{path}: this miss" in err and "<input>" not in err
    assert (suite_dir / "living.jsonl").read_text() == before
    path.write_text(json.dumps(miss(bogus=1)))
    assert main(["add-case", "--data", str(suite_dir), "--from", str(path)]) == 65
    assert f"{path}: unknown field(s) in the miss: bogus" in capsys.readouterr().err


def test_an_add_case_beside_another_writer_of_the_folder_is_refused_and_no_case_is_lost(
    suite_dir, tmp_path, monkeypatch, capsys
):
    """add-case rewrote living.jsonl without accept's folder lock: two beside each other both said "added
    single-0008" and one case was lost. Here a second add-case starts while the first is writing."""
    from qaeval.data import misses

    first, second = tmp_path / "first.json", tmp_path / "second.json"
    first.write_text(json.dumps(miss()))
    second.write_text(json.dumps(miss(question="Which floor is the Eastside Branch's archive on?")))
    write_atomic, beside = misses.write_atomic, []

    def write_while_another_adds(target, data):
        if not beside:  # the second add-case runs while the first holds what it read
            beside.append("started")
            beside.append(main(["add-case", "--data", str(suite_dir), "--from", str(second)]))
        return write_atomic(target, data)

    monkeypatch.setattr(misses, "write_atomic", write_while_another_adds)
    assert main(["add-case", "--data", str(suite_dir), "--from", str(first)]) == 0
    monkeypatch.undo()
    out, err = capsys.readouterr()
    assert beside == ["started", 64] and f"another qaeval command is adding cases to {suite_dir}" in err
    assert out.count("added single-0008") == 1
    assert main(["add-case", "--data", str(suite_dir), "--from", str(second)]) == 0
    assert "added single-0009" in capsys.readouterr().out
    living = [json.loads(line) for line in (suite_dir / "living.jsonl").read_text().splitlines()]
    assert [c["id"] for c in living] == ["single-0008", "single-0009"], "both cases are kept"
    assert sorted(p.name for p in (suite_dir / ".qaeval").iterdir()) == [], "the lock goes with the command"


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(gold_source_ids=["s9"]), "gold source id 's9' is not in the case's sources"),
        (dict(gold_answer=None), "an answerable case needs a non-empty 'gold_answer'"),
        (dict(id="mine"), "unknown field(s) in the miss: id"),
        (dict(difficulty="hard"), "'difficulty' is 'hard'"),
    ],
)
def test_a_bad_miss_is_refused_before_anything_is_written(suite_dir, change, message):
    with pytest.raises(DatasetError) as info:
        api.add_case(suite_dir, miss(**change))
    assert message in str(info.value)
    assert not (suite_dir / "living.jsonl").exists()


def test_a_crash_mid_write_leaves_the_split_loadable(suite_dir, monkeypatch):
    api.add_case(suite_dir, miss())
    before = (suite_dir / "living.jsonl").read_bytes()

    def dies(fd):
        raise OSError(5, "Input/output error")  # the disk fails after the temporary was written

    monkeypatch.setattr(os, "fsync", dies)
    with pytest.raises(Exception, match="Input/output error"):
        api.add_case(suite_dir, miss(question="Another question?"))
    monkeypatch.undo()
    assert (suite_dir / "living.jsonl").read_bytes() == before
    assert len(load_suite(suite_dir)) == 4
    assert sorted(p.name for p in suite_dir.iterdir()) == [".qaeval", "frozen.jsonl", "living.jsonl"]
    assert not any((suite_dir / ".qaeval").iterdir()), "no temporary, and the folder's lock let go"


def test_interactive_mode_asks_for_what_is_missing(suite_dir, tmp_path):
    sources = tmp_path / "sources.json"
    sources.write_text(json.dumps(make_case()["sources"]))
    from qaeval.data.misses import add_case

    answers = iter(["When did Northgate open?", str(sources), "1978", "s2", ""])
    case_id, _ = add_case(suite_dir, {}, ask=lambda prompt: next(answers))
    case = load_suite(suite_dir)[case_id]
    assert case.gold_answer == "1978" and case.gold_source_ids == ("s2",) and case.difficulty == "single-hop"


def test_add_case_needs_a_miss(suite_dir, capsys):
    assert main(["add-case", "--data", str(suite_dir)]) == 64


# --------------------------------------------------------------------------- pytest plugin


def pytest_in(tmp_path, *args):
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": TESTS, "QAEVAL_PROGRESS": "0"},
    )


def test_pytest_plugin_fails_one_test_per_buggy_case_with_the_check_that_fired(tmp_path):
    done = pytest_in(
        tmp_path, "--qaeval-data", str(GOLDEN / "buggy"), "--qaeval-adapter", "qaeval.system.saboteur:make_adapter"
    )
    assert done.returncode == 1
    assert "4 failed" in done.stdout and "passed" not in done.stdout
    for case_id, check in (
        ("buggy-leak-0001", "grounding_isolation: gold answer '249,000' appears"),
        ("buggy-cite-0002", "citation_resolvability"),
        ("buggy-refuse-0003", "fail_closed_abstention: must abstain but answered"),
        ("buggy-stale-0004", "fail_closed_abstention"),
    ):
        assert f"golden case {case_id} failed:" in done.stdout
        block = done.stdout[done.stdout.index(f"golden case {case_id} failed:") :]
        assert check in block[:800] and "answer:" in block[:1500]


def test_pytest_plugin_on_golden_fails_only_the_known_multi_step_cases(tmp_path):
    done = pytest_in(tmp_path, "--qaeval-data", str(GOLDEN))
    assert "5 failed, 10 passed" in done.stdout
    failed = {line.split("::")[1].split(" ")[0] for line in done.stdout.splitlines() if line.startswith("FAILED")}
    assert failed == {"multi-0001", "multi-0002", "multi-0003", "agg-0001", "agg-0002"}


def test_pytest_plugin_selects_by_id_and_gates(tmp_path):
    baseline = tmp_path / "b.json"
    assert main(["baseline", "--data", str(GOLDEN), "--out", str(baseline)]) == 0
    done = pytest_in(
        tmp_path,
        "--qaeval-data",
        str(GOLDEN),
        "--qaeval-baseline",
        str(baseline),
        "-k",
        "single-0002 or gate",
        "--qaeval-concurrency",
        "2",
    )
    assert "2 passed" in done.stdout and "deselected" in done.stdout, done.stdout
    done = pytest_in(
        tmp_path,
        "--qaeval-data",
        str(GOLDEN),
        "--qaeval-baseline",
        str(baseline),
        "-k",
        "gate",
        "--qaeval-adapter",
        "plugins:make_abstain_on_dvd",
    )
    assert "1 failed" in done.stdout and "GATE: BLOCK" in done.stdout


def test_pytest_plugin_is_inert_without_its_option(tmp_path):
    (tmp_path / "test_x.py").write_text("def test_x():\n    assert True\n")
    done = pytest_in(tmp_path)
    assert "1 passed" in done.stdout


def test_import_refuses_an_unknown_format_and_labelled_on_qa_data(tmp_path):
    with pytest.raises(UsageError):
        import_file("nq", tmp_path / "x", tmp_path)
    with pytest.raises(UsageError, match="--labelled is for wice"):
        api.import_cases("squad2", tmp_path / "x", tmp_path, labelled=True)
