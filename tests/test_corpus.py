"""The frozen corpus (strict loading, on-demand reads, export to a worker) and the FTS5 corpus retriever."""

from __future__ import annotations

import json
import os
import pickle
import random
import subprocess
import sys
from pathlib import Path

import pytest

from qaeval.core.errors import DatasetError
from qaeval.data.cases import Source
from qaeval.data.corpus import MAX_PROBLEMS, Corpus, Passage, load_corpus
from qaeval.system import retriever as retriever_module
from qaeval.system.reference import lexical_scores
from qaeval.system.retriever import CorpusRetriever, coverage

ROOT = Path(__file__).resolve().parents[1]


def write(folder: Path, lines: list[str | dict], *, raw: bytes | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "corpus.jsonl"
    if raw is not None:
        path.write_bytes(raw)
    else:
        path.write_text("".join((json.dumps(x) if isinstance(x, dict) else x) + "\n" for x in lines), encoding="utf-8")
    return path


def passages(n: int) -> list[dict]:
    return [{"id": f"p{i}", "text": f"Passage number {i} says something."} for i in range(n)]


def problems_of(path: Path) -> list[str]:
    with pytest.raises(DatasetError) as info:
        Corpus.open(path)
    assert info.value.exit_code == 65
    return [str(p) for p in info.value.problems]


# --------------------------------------------------------------------------- strict loading


@pytest.mark.parametrize(
    "line, message",
    [
        ('{"id": "x", "text": "a", "url": "u"}', "passage 'x': unknown field 'url'"),
        ('{"id": "x", "text": ""}', "passage 'x': 'text' must be a non-empty string"),
        ('{"id": "x", "text": "   "}', "'text' must be a non-empty string"),
        ('{"id": "x", "text": 5}', "'text' must be a non-empty string"),
        ('{"id": "x"}', "'text' must be a non-empty string"),
        ('{"id": "", "text": "a"}', "'id' must be a non-empty string"),
        ('{"id": 3, "text": "a"}', "'id' must be a non-empty string"),
        ('{"id": "x", "text": "a", "title": 7}', "'title' must be a string or null"),
        ('{"id": "x", "text": NaN}', "NaN is not valid JSON"),
        ('{"id": "x", "id": "y", "text": "a"}', "key 'id' appears twice"),
        ('{"id": "x", "text": "\\ud800"}', "unpaired surrogate"),
        ('["x", "a"]', "got a JSON array"),
        ('"just text"', "got str"),
        ('{"id": "x", "text": ', "not valid JSON"),
        # a line without its closing brace: json places the error past the line (it said "at column 1")
        (
            '{"id": "x", "text": "a"',
            "not valid JSON (Expecting ',' delimiter at the end of the line: is something "
            "missing, such as a closing } or ]?)",
        ),
        ('{"id": "x" "text": "a"}', "not valid JSON (Expecting ',' delimiter at column 12)"),
        # longer than a system may return for one passage: it could never pass passage fidelity (a review)
        (
            '{"id": "x", "title": "T", "text": "%s"}' % ("a" * 1_000_000),
            "the passage is 1,000,001 characters long (text and title); a system can return at most 1,000,000",
        ),
    ],
)
def test_each_bad_line_is_a_problem_with_file_and_line(tmp_path, line, message):
    path = write(tmp_path, [passages(1)[0], line])
    found = problems_of(path)
    assert len(found) == 1 and found[0].startswith(f"{path}:2: ") and message in found[0], found


def test_bad_utf8_names_the_line_and_byte(tmp_path):
    path = write(tmp_path, [], raw=b'{"id": "a", "text": "ok"}\n{"id": "b", "text": "caf\xe9"}\n')
    assert problems_of(path) == [f"{path}:2: not valid UTF-8 (byte 0xe9 at offset 50)"]


def test_a_duplicate_id_names_both_lines(tmp_path):
    path = write(tmp_path, [*passages(3), {"id": "p1", "text": "again"}])
    assert problems_of(path) == [f"{path}:4: duplicate id 'p1' (first at line 2)"]


def test_every_problem_is_reported_at_once_and_the_list_is_capped(tmp_path):
    path = write(tmp_path, ['{"id": "x", "text": ""}'] * (MAX_PROBLEMS + 7))
    found = problems_of(path)
    assert len(found) == MAX_PROBLEMS + 1
    assert found[-1] == f"{path}: ... and 7 more problems not listed"
    assert [p.split(":")[1] for p in found[:3]] == ["1", "2", "3"]


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda d: d / "corpus.jsonl", "corpus file not found"),
        (lambda d: (d / "corpus.jsonl").mkdir() or d / "corpus.jsonl", "is a folder, not a corpus file"),
        (lambda d: write(d, ["", "  "]), "the corpus is empty"),
    ],
)
def test_missing_folder_and_empty_corpora_are_problems(tmp_path, make, message):
    path = make(tmp_path)
    assert any(message in p for p in problems_of(path))


def test_bom_crlf_blank_lines_quotes_and_unicode_are_read_exactly(tmp_path):
    items = [
        {"id": 'say "hi"', "text": "Ünïcödé \u00a0text ✓ \\ back", "title": "T"},
        {"id": "日本", "text": "line\nbreak \U0001f600"},
    ]
    body = "\r\n".join(["", json.dumps(items[0]), "   ", json.dumps(items[1], ensure_ascii=False), ""])
    path = write(tmp_path, [], raw=b"\xef\xbb\xbf" + body.encode("utf-8"))
    with Corpus.open(path) as corpus:
        assert len(corpus) == 2
        assert corpus['say "hi"'] == Passage('say "hi"', items[0]["text"], "T")
        assert corpus["日本"] == Passage("日本", items[1]["text"])
        assert list(corpus) == [corpus['say "hi"'], corpus["日本"]]


# --------------------------------------------------------------------------- reading


def test_random_access_returns_exact_text_and_iteration_keeps_file_order(tmp_path):
    rng = random.Random(5)
    items = [
        {
            "id": f"id-{rng.random()}",
            "text": " ".join(rng.choice(["alpha", "β", "gamma", '"q"', "\\"]) for _ in range(rng.randrange(1, 40))),
            **({"title": f"t{i}"} if i % 3 else {}),
        }
        for i in range(500)
    ]
    path = write(tmp_path, items)
    with Corpus.open(path) as corpus:
        assert len(corpus) == 500
        assert [(p.id, p.text, p.title) for p in corpus] == [(x["id"], x["text"], x.get("title")) for x in items]
        for x in rng.sample(items, 50):
            assert corpus[x["id"]].text == x["text"]
            assert x["id"] in corpus
        assert "absent" not in corpus and 5 not in corpus and corpus.get("absent") is None
        with pytest.raises(KeyError):
            corpus["absent"]


def test_iteration_crosses_read_blocks(tmp_path, monkeypatch):
    monkeypatch.setattr("qaeval.data.corpus._BLOCK", 64)
    items = passages(40) + [{"id": "long", "text": "word " * 100}]
    with Corpus.open(write(tmp_path, items)) as corpus:
        assert [p.id for p in corpus] == [x["id"] for x in items]


def test_fingerprint_changes_when_one_byte_does(tmp_path):
    path = write(tmp_path / "a", passages(20))
    with Corpus.open(path) as corpus:
        before = corpus.fingerprint
    path.write_bytes(path.read_bytes().replace(b"number 7", b"number 8"))
    with Corpus.open(path) as corpus:
        assert corpus.fingerprint != before and len(before) == 64


def test_a_file_changed_in_place_after_opening_is_refused(tmp_path):
    path = write(tmp_path, passages(5))
    with Corpus.open(path) as corpus:
        with open(path, "ab") as f:
            f.write(b'{"id": "p9", "text": "late"}\n')
        with pytest.raises(DatasetError, match="changed on disk after it was opened"):
            corpus["p1"]


def test_load_corpus_is_none_without_a_corpus_file(tmp_path):
    assert load_corpus(tmp_path) is None
    write(tmp_path, passages(2))
    corpus = load_corpus(tmp_path)
    assert corpus is not None and len(corpus) == 2
    corpus.close()


def test_a_corpus_is_not_pickled_but_exported(tmp_path):
    with Corpus.open(write(tmp_path, passages(2))) as corpus, pytest.raises(TypeError, match="export"):
        pickle.dumps(corpus)


# --------------------------------------------------------------------------- export to a worker


def test_export_hides_the_data_folder_and_the_worker_reads_the_same_corpus(tmp_path):
    data = tmp_path / "secret-data-folder"
    items = passages(30) + [{"id": "ü", "text": "Ünïcödé", "title": "x"}]
    scratch = tmp_path / "scratch"
    with Corpus.open(write(data, items)) as corpus:
        exported = corpus.export(scratch)
        assert str(data) not in str(exported) and "secret" not in str(exported)
        assert exported.name == "corpus.jsonl" and exported.parent == scratch
        assert os.stat(exported).st_ino != os.stat(data / "corpus.jsonl").st_ino, (
            "a copy: writing it leaves the data alone"
        )
        script = (
            "import json, sys\nfrom qaeval.data.corpus import Corpus\nc = Corpus.open(sys.argv[1])\n"
            "print(json.dumps([c.fingerprint, [[p.id, p.text, p.title] for p in c]]))"
        )
        done = subprocess.run(
            [sys.executable, "-c", script, "corpus.jsonl"],
            cwd=scratch,
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        fingerprint, seen = json.loads(done.stdout)
        assert fingerprint == corpus.fingerprint
        assert seen == [[p.id, p.text, p.title] for p in corpus]
        with Corpus.open(exported) as again:
            assert again == corpus


def test_a_worker_opens_an_export_with_the_exporters_index_and_finds_every_id(tmp_path, monkeypatch):
    """``open_export`` in another process (another hash salt) finds every id by the index the exporter
    built, without reading the file again; a copy of the wrong size is refused."""
    items = passages(200) + [{"id": "ü-ß", "text": "Ünïcödé", "title": "x"}]
    with Corpus.open(write(tmp_path / "data", items)) as corpus:
        exported = corpus.export(tmp_path / "scratch")
    script = (
        "import json, sys\nfrom qaeval.data import corpus as m\n"
        "m._scan = lambda *a: sys.exit('the worker read the file again')\n"
        "c = m.Corpus.open_export(sys.argv[1])\n"
        "ids = [p.id for p in c]\n"
        "print(json.dumps([c.fingerprint, len(c), [c[i].text for i in ids], 'nope' in c]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(exported)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONHASHSEED": "12345"},
    )
    assert done.returncode == 0, done.stderr
    fingerprint, size, texts, absent = json.loads(done.stdout)
    assert (fingerprint, size, absent) == (corpus.fingerprint, len(items), False)
    assert texts == [p["text"] for p in items]
    with open(exported, "ab") as handle:
        handle.write(b'{"id": "extra", "text": "appended by someone"}\n')
    with pytest.raises(DatasetError, match="not the size its index was built for"):
        Corpus.open_export(exported)


def test_export_of_a_file_replaced_since_opening_copies_what_was_read(tmp_path):
    path = write(tmp_path / "data", passages(5))
    with Corpus.open(path) as corpus:
        os.replace(write(tmp_path / "other", passages(9)), path)
        with Corpus.open(corpus.export(tmp_path / "scratch")) as exported:
            assert exported == corpus and len(exported) == 5


# --------------------------------------------------------------------------- the retriever


WORDS = (
    "river bridge market tower museum garden harbour station village castle forest valley island street "
    "school church library council festival railway season record company city"
).split()


def synthetic(n: int, seed: int = 1) -> list[dict]:
    rng = random.Random(seed)
    return [
        {"id": f"doc-{i}", "text": " ".join(rng.choice(WORDS) for _ in range(40)) + f". Reference {i}."}
        for i in range(n)
    ]


@pytest.fixture(scope="module")
def corpus_2000(tmp_path_factory):
    folder = tmp_path_factory.mktemp("corpus")
    items = synthetic(2000)
    items[1234]["text"] += " The zanzibar quokka festival of Vrtnjak was held at dawn."
    items[77]["title"] = "Quokka"
    with Corpus.open(write(folder, items)) as corpus:
        yield corpus


@pytest.fixture(scope="module")
def retriever_2000(corpus_2000, tmp_path_factory):
    retriever = CorpusRetriever.build(corpus_2000, tmp_path_factory.mktemp("cache"))
    yield retriever
    retriever.close()


def test_the_passage_with_the_rare_words_ranks_first(retriever_2000):
    found = retriever_2000.search("Where was the zanzibar quokka festival held?", 5, floor=0.5)
    assert found[0][0] == "doc-1234"
    assert all(isinstance(score, float) for _, score in found)
    assert [s for _, s in found] == sorted((s for _, s in found), reverse=True)


@pytest.mark.parametrize(
    "question",
    [
        'what is "NEAR" AND OR * zanzibar',
        "NEAR(zanzibar quokka, 2)",
        "zanzibar:quokka ^festival -dawn",
        "\"unbalanced 'quotes",
        "title:quokka",
        "(((",
        "AND",
        "*",
        "",
        "   ",
        "the of and",
        "ünïcödé ÿ",
        "\x00 zanzibar \u202e",
    ],
)
def test_hostile_questions_never_raise(retriever_2000, question):
    found = retriever_2000.search(question, 5)
    assert isinstance(found, list)
    if "zanzibar" in question:
        assert found[0][0] == "doc-1234"


def test_a_question_about_nothing_in_the_corpus_finds_nothing_above_the_floor(retriever_2000):
    assert retriever_2000.search("Who painted the ceiling of the opera?", 5, floor=0.5) == []
    assert retriever_2000.search("Which river crosses the opera ceiling painting?", 5, floor=0.5) == []


def test_titles_are_searched(retriever_2000):
    assert retriever_2000.search("quokka", 3)[0][0] in {"doc-77", "doc-1234"}
    assert "doc-77" in [pid for pid, _ in retriever_2000.search("quokka", 3)]


def test_common_words_rank_only_when_the_question_has_nothing_rarer(retriever_2000, monkeypatch):
    monkeypatch.setattr(retriever_module, "COMMON", 100)
    retriever_2000._known.clear()
    assert retriever_2000.search("river bridge zanzibar", 1)[0][0] == "doc-1234"
    assert len(retriever_2000.search("river bridge", 5)) == 5  # all common: they rank
    retriever_2000._known.clear()


def test_coverage_is_the_per_case_reference_relevance():
    question = "When did the Eastside Branch open on Dunmore Street?"
    texts = [
        "The Eastside Branch opened in 1964 on Dunmore Street.",
        "Printing costs 10 cents.",
        "Eastside branches open late.",
    ]
    scored = {
        src.id: relevance
        for relevance, _, src in lexical_scores(
            question, tuple(Source(f"s{i}", t, "Eastside" if i == 1 else None) for i, t in enumerate(texts))
        )
    }
    for i, text in enumerate(texts):
        assert coverage(question, Passage(f"s{i}", text, "Eastside" if i == 1 else None)) == scored[f"s{i}"]


def test_the_cache_is_reused_and_rebuilt_when_the_corpus_changes(tmp_path, monkeypatch):
    reads = []
    original_iter = Corpus.__iter__

    def counting_iter(self):
        reads.append(self.fingerprint)
        return original_iter(self)

    monkeypatch.setattr(Corpus, "__iter__", counting_iter)
    cache = tmp_path / "cache"
    path = write(tmp_path / "data", synthetic(50))
    with Corpus.open(path) as corpus:
        first = CorpusRetriever.build(corpus, cache)
        stamp = first.path.stat().st_mtime_ns
        second = CorpusRetriever.build(corpus, cache)
        assert (first.built, second.built) == (True, False)
        assert second.path == first.path and second.path.stat().st_mtime_ns == stamp
        assert reads == [corpus.fingerprint]
        assert second.search("Reference 7", 1) == first.search("Reference 7", 1)
        first.close(), second.close()
    write(tmp_path / "data", synthetic(50, seed=2))
    with Corpus.open(path) as changed:
        third = CorpusRetriever.build(changed, cache)
        assert third.built and third.path != first.path and reads == [corpus.fingerprint, changed.fingerprint]
        third.close()


def test_a_damaged_cache_file_is_rebuilt(tmp_path):
    with Corpus.open(write(tmp_path / "data", synthetic(20))) as corpus:
        first = CorpusRetriever.build(corpus, tmp_path / "cache")
        first.close()
        first.path.write_bytes(b"not a database")
        again = CorpusRetriever.build(corpus, tmp_path / "cache")
        assert again.built and again.search("Reference 3", 1)[0][0] == "doc-3"
        again.close()


def test_without_a_cache_the_index_is_temporary(tmp_path):
    with Corpus.open(write(tmp_path, synthetic(20))) as corpus:
        retriever = CorpusRetriever.build(corpus)
        assert retriever.path.exists() and retriever.search("Reference 4", 1)[0][0] == "doc-4"
        retriever.close()
        assert not retriever.path.exists()


def test_a_bad_corpus_and_bad_cases_are_reported_at_once(tmp_path):
    """A new user's pass: the cases' problems were found only after the corpus was fixed."""
    from qaeval.data.cases import load_suite

    write(tmp_path, [{"id": "p1", "text": "The Eastside Branch opened in 1964."}, '{"id": "p2", "text": ""}'])
    good = {
        "id": "c1",
        "question": "When did Eastside open?",
        "gold_answer": "1964",
        "gold_source_ids": ["p1"],
        "expected_behavior": "answer",
        "difficulty": "single-hop",
        "split": "frozen",
    }
    bad = dict(good, id="c2", questoin="typo")
    (tmp_path / "cases.jsonl").write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(DatasetError) as err:
        load_suite(tmp_path)
    text = str(err.value)
    assert "corpus.jsonl:2" in text and "cases.jsonl:2" in text and "unknown field 'questoin'" in text, text
    assert "cases.jsonl:1" not in text  # a gold id the broken corpus may hold is not called missing
