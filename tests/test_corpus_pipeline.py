"""A frozen corpus through the pipeline: loading corpus cases, passages in the output, the worker's
corpus, and the checks on what the system really used."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import make_case, write_cases

from qaeval import Citation, Passage, SUTOutput, load_suite
from qaeval.core.errors import DatasetError

PASSAGES = [
    {"id": "p-eastside", "title": "Eastside", "text": "The Eastside Branch opened in 1964 on Dunmore Street."},
    {"id": "p-northgate", "text": "The Northgate Branch opened in 1978 and is the smallest location."},
    {"id": "p-printing", "text": "Printing costs 10 cents per page."},
]


def corpus_case(**changes: Any) -> dict[str, Any]:
    return make_case(**{"sources": ..., "gold_source_ids": ["p-eastside"], **changes})


def write_corpus(folder: Path, passages: list[dict[str, Any]] | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps(p) + "\n" for p in passages or PASSAGES), encoding="utf-8")
    return folder


def corpus_folder(tmp_path: Path, cases: list[dict[str, Any]] | None = None) -> Path:
    folder = write_corpus(tmp_path / "data")
    return write_cases(folder, cases or [corpus_case()])


# --------------------------------------------------------------------------- loading


def test_a_corpus_folder_loads_corpus_cases_beside_cases_with_their_own_sources(tmp_path):
    folder = corpus_folder(tmp_path, [corpus_case(), make_case(id="own-0001")])
    suite = load_suite(folder)
    assert [c.id for c in suite] == ["case-0001", "own-0001"], "corpus.jsonl is not read as a case file"
    assert suite.corpus is not None and len(suite.corpus) == 3
    assert suite.corpus_fingerprint == suite.corpus.fingerprint
    corpus_case_, own = suite.cases
    assert corpus_case_.from_corpus and corpus_case_.sources == ()
    assert "sources" not in corpus_case_.to_raw()
    assert not own.from_corpus and [s.id for s in own.sources] == ["s1", "s2", "s3"]


def test_a_folder_without_corpus_has_none_and_still_requires_sources(tmp_path):
    suite = load_suite(write_cases(tmp_path / "d", [make_case()]))
    assert suite.corpus is None and suite.corpus_fingerprint is None
    with pytest.raises(DatasetError) as err:
        load_suite(write_cases(tmp_path / "e", [corpus_case()]))
    assert "missing required field 'sources'" in str(err.value)
    assert "corpus.jsonl" in str(err.value), "the message says how a case may go without sources"


def test_a_corpus_case_whose_gold_id_is_not_in_the_corpus_is_a_load_error_with_file_and_line(tmp_path):
    folder = corpus_folder(tmp_path, [corpus_case(), corpus_case(id="case-0002", gold_source_ids=["nowhere"])])
    with pytest.raises(DatasetError) as err:
        load_suite(folder)
    [problem] = err.value.problems
    assert problem.file.endswith("cases.jsonl") and problem.line == 2
    assert "gold source id 'nowhere' is not in the corpus" in problem.message


def test_a_corpus_case_checkpoint_names_a_corpus_passage(tmp_path):
    cp_ok = {"kind": "retrieved", "source_id": "p-northgate"}
    cp_bad = {"kind": "cited", "source_id": "p-missing"}
    assert load_suite(corpus_folder(tmp_path / "a", [corpus_case(checkpoints=[cp_ok])]))
    with pytest.raises(DatasetError, match="p-missing"):
        load_suite(corpus_folder(tmp_path / "b", [corpus_case(checkpoints=[cp_bad])]))


def test_a_bad_corpus_is_a_load_error_naming_its_file(tmp_path):
    folder = write_cases(tmp_path / "d", [corpus_case()])
    (folder / "corpus.jsonl").write_text('{"id": "p1", "text": ""}\n', encoding="utf-8")
    with pytest.raises(DatasetError) as err:
        load_suite(folder)
    assert err.value.problems[0].file.endswith("corpus.jsonl") and err.value.problems[0].line == 1


# --------------------------------------------------------------------------- the contract


def _fields(**changes: Any) -> tuple[Any, list[str]]:
    from qaeval.system.contract import output_to_plain
    from qaeval.system.validate import validate_plain

    out = SUTOutput(
        answer=PASSAGES[0]["text"],
        citations=[Citation("p-eastside", PASSAGES[0]["text"])],
        model_was_called=True,
        prompt_to_model="q",
    )
    for key, value in changes.items():
        setattr(out, key, value)
    return validate_plain(json.loads(json.dumps(output_to_plain(out))))


def test_passages_alone_give_the_ranking_and_cross_the_boundary():
    fields, problems = _fields(passages=[Passage("own-1", "Own text."), Passage("p-eastside", "x", "Eastside")])
    assert problems == []
    assert fields["retrieved_ids"] == ["own-1", "p-eastside"]
    assert fields["passages"] == [
        {"id": "own-1", "text": "Own text.", "title": None},
        {"id": "p-eastside", "text": "x", "title": "Eastside"},
    ]
    fields, problems = _fields(retrieved_ids=["own-1"], passages=[Passage("own-1", "Own text.")])
    assert problems == [] and fields["retrieved_ids"] == ["own-1"]
    fields, _ = _fields(retrieved_ids=["p-eastside"])
    assert fields["passages"] == []


@pytest.mark.parametrize(
    "passages, retrieved, reason",
    [
        ([Passage("a", "x"), Passage("a", "y")], [], "passages lists 'a' more than once"),
        (["a"], [], "passages[0] is str, not Passage"),
        ([{"id": "a", "text": "x"}], [], "passages[0] is dict, not Passage"),
        ([Passage("a", 5)], [], "passages[0].text must be a non-empty str"),  # type: ignore[arg-type]  # the wrong type is the test
        ([Passage("", "x")], [], "passages[0].id must be a non-empty str"),
        ([Passage("a", "x", 3)], [], "passages[0].title is int"),  # type: ignore[arg-type]  # the wrong type is the test
        ([Passage("a", "x")], ["b"], "retrieved_ids and passages disagree"),
        ([Passage("a", "x"), Passage("b", "y")], ["b", "a"], "retrieved_ids and passages disagree"),
        (("tuple",), [], "passages is tuple, not a list"),
        ([Passage(str(i), "x") for i in range(1001)], [], "passages holds 1001 passages (limit 1000)"),
    ],
)
def test_bad_passages_are_malformed_output_with_the_reason(passages, retrieved, reason):
    fields, problems = _fields(passages=passages, retrieved_ids=retrieved)
    assert fields is None and any(reason in p for p in problems), problems


def test_qaeval_exports_passage_and_corpus():
    import qaeval
    from qaeval.data.corpus import Corpus

    assert qaeval.Passage is Passage and qaeval.Corpus is Corpus


# --------------------------------------------------------------------------- the worker's corpus


class OwnIndex:
    """A system with its own index over the corpus: word overlap, one passage of its own beside."""

    def __init__(self, corpus: Any, *, alter: str | None = None) -> None:
        import os

        self.where = (str(corpus.path), os.getcwd())
        self.passages = {p.id: p for p in corpus}
        self.passages["own-note"] = Passage("own-note", "A note only this system's index holds.")
        self.alter = alter

    def answer(self, case: Any) -> SUTOutput:
        print("corpus", self.where[0], "cwd", self.where[1])
        words = set(case.question.lower().replace("?", "").split())
        ranked = sorted(self.passages.values(), key=lambda p: -len(words & set(p.text.lower().split())))[:2]
        ranked = [Passage(p.id, self.alter if p.id == self.alter_id(ranked) else p.text, p.title) for p in ranked]
        ranked.append(self.passages["own-note"])
        best = ranked[0]
        prompt = f"Question: {case.question}\n" + "\n".join(f"{p.title or ''}\n{p.text}" for p in ranked)
        return SUTOutput(
            answer=best.text,
            citations=[Citation(best.id, best.text)],
            passages=ranked,
            model_was_called=True,
            prompt_to_model=prompt,
        )

    def alter_id(self, ranked: list[Passage]) -> str | None:
        return ranked[0].id if self.alter else None


def make_own_index(corpus=None):
    return OwnIndex(corpus)


def make_altering(corpus=None):
    return OwnIndex(corpus, alter="The Eastside Branch opened in 1971 on Dunmore Street.")


@pytest.mark.parametrize("isolation", ["process", "none"])
def test_a_factory_with_a_corpus_parameter_gets_the_corpus_and_never_the_data_folder(tmp_path, isolation):
    from qaeval.core.settings import RunSettings
    from qaeval.lowlevel import run_suite

    folder = corpus_folder(tmp_path)
    suite = load_suite(folder)
    outputs = run_suite(suite, make_own_index, RunSettings(isolation=isolation, concurrency=1, show_progress=False))
    row = outputs.iloc[0]
    assert row["error"] is None, row["error"]
    assert row["retrieved_ids"] == ["p-eastside", "p-northgate", "own-note"]
    assert row["passages"][2] == {"id": "own-note", "text": "A note only this system's index holds.", "title": None}
    if isolation == "process":
        corpus_path, cwd = row["logs"].split()[1], row["logs"].split()[3]
        for shown in (corpus_path, cwd):
            assert str(folder) not in shown and str(folder.resolve()) not in shown
        assert corpus_path.startswith(cwd), "the worker's copy sits in its own scratch folder"
    else:
        assert row["logs"].split()[1] == str(folder / "corpus.jsonl"), "in process: the same corpus object"


def test_a_corpus_case_view_carries_the_question_and_no_passages(tmp_path):
    from qaeval.system.contract import make_view

    case = load_suite(corpus_folder(tmp_path)).cases[0]
    view = make_view(case)
    assert view.question == case.question and view.sources == ()


def test_a_factory_without_a_corpus_parameter_is_called_as_before(tmp_path):
    from qaeval.worker.serve import call_factory

    assert call_factory(lambda: "plain", corpus=object()) == "plain"
    assert call_factory(lambda corpus: corpus, corpus="c") == "c"


# --------------------------------------------------------------------------- checks on what the system used


def _run(folder: Path, adapter: Any, isolation: str = "none"):
    from qaeval import api

    return api.run(str(folder), adapter=adapter, isolation=isolation, concurrency=1)


def _checks(result, case_id: str = "case-0001") -> dict[str, tuple[bool, str]]:
    rows = result.checks[result.checks["case_id"] == case_id]
    return {c: (bool(p), r) for c, p, r in zip(rows["check"], rows["passed"], rows["reason"])}


def test_a_system_with_its_own_index_scores_and_passes(tmp_path):
    result = _run(corpus_folder(tmp_path, [corpus_case(), make_case(id="own-0001")]), make_own_index, "process")
    checks = _checks(result)
    assert all(ok for ok, _ in checks.values()), checks
    assert "2 passage(s) match their frozen text, 1 of the system's own" in checks["passage_fidelity"][1]
    row = result.retrieval.set_index("case_id").loc["case-0001"]
    assert row["recall_at_k"] == 1.0 and row["n_retrieved"] == 3 and row["precision_at_k"] == pytest.approx(1 / 5), (
        "the system's own passage counts as non-gold (precision@5 over 5 ranks)"
    )
    assert result.ok, result.reason


def test_altered_text_for_a_corpus_id_fails_passage_fidelity_with_the_reason(tmp_path):
    result = _run(corpus_folder(tmp_path), make_altering)
    ok, reason = _checks(result)["passage_fidelity"]
    assert not ok
    assert "the system's passage 'p-eastside' differs from the frozen corpus" in reason and "1971" in reason
    assert not result.ok


def _passage_labels(html: str, case_id: str) -> dict[str, str]:
    import re
    from html import unescape

    block = html.split(f'id="case-{case_id}"', 1)[1].split('<details class="case', 1)[0]
    return {
        m.group(2): unescape(m.group(1))
        for m in re.finditer(r'<span class="pid">([^<]*\[([^\]]+)\][^<]*)</span>', block)
    }


def test_the_drilldown_says_where_each_passage_came_from_and_diffs_an_altered_one(tmp_path):
    from qaeval.api import load_run
    from qaeval.record.write import write_record
    from qaeval.reports.case_list import drilldown

    result = _run(corpus_folder(tmp_path, [corpus_case(), make_case(id="own-0001")]), make_altering)
    write_record(result, tmp_path / "run.json")
    for shown in (result, load_run(tmp_path / "run.json")):  # the record's corpus excerpt is enough
        html = str(drilldown(shown))
        corpus_case_labels, own_case_labels = _passage_labels(html, "case-0001"), _passage_labels(html, "own-0001")
        assert "from the corpus" in corpus_case_labels["p-eastside"]
        assert "from the corpus" in corpus_case_labels["p-northgate"]
        assert "the system's own" in corpus_case_labels["own-note"]
        assert "from the case" in own_case_labels["s1"] and "not retrieved" in own_case_labels["s1"]
        assert "from the corpus" in own_case_labels["p-eastside"], "a corpus id a case with sources retrieved"
        assert "<del>1964</del> <ins>1971</ins>" in html, (
            "the word diff shows the frozen word struck, the new one added"
        )
        assert html.count('<div class="fidelity">') == 2, "one altered passage in each case, nothing else"


def test_whitespace_invisible_characters_and_canonical_equivalence_are_not_infidelity():
    from qaeval.scoring.checks import check_passage_fidelity

    frozen = {"p": ("The cafe\u0301 ope\u200bned  its first\nbranch.", None, "frozen corpus")}
    out = {"passages": [{"id": "p", "text": " The caf\u00e9 opened its first branch. ", "title": None}]}
    assert check_passage_fidelity(out, frozen)[0]


@pytest.mark.parametrize(
    "frozen, given",
    [
        ("It holds 106 books.", "It holds 10\u2076 books."),  # a million
        ("Half: 1/2 of them.", "Half: \u00bd of them."),
        ("The first branch.", "The \ufb01rst branch."),
    ],
)
def test_superscripts_fractions_and_ligatures_are_differences(frozen, given):
    """Issue 40: NFKC folding took "10⁶" (a million) for a frozen "106"; only what cannot change meaning is
    folded now."""
    from qaeval.scoring.checks import check_passage_fidelity

    ok, why = check_passage_fidelity(
        {"passages": [{"id": "p", "text": given, "title": None}]}, {"p": (frozen, None, "frozen corpus")}
    )
    assert not ok and "differs from the frozen corpus" in why


def _grounding(prompt: str) -> tuple[bool, str]:
    from qaeval.scoring.checks import check_grounding_isolation, prompt_remainder

    case = type("C", (), {"question": "Which branch opened in 1964?", "gold_answer": "Eastside"})()
    out = {"model_was_called": True, "prompt_to_model": prompt, "retrieved_ids": ["p-eastside"], "citations": []}
    bodies, titles = {"p-eastside": PASSAGES[0]["text"]}, {"p-eastside": "Eastside"}
    return check_grounding_isolation(case, out, bodies, remainder=prompt_remainder(case, out, bodies, titles))


def test_a_gold_answer_equal_to_a_title_is_context_only_where_the_title_heads_its_passage():
    body = PASSAGES[0]["text"]
    assert _grounding(f"Which branch opened in 1964?\n[p-eastside] Eastside\n{body}")[0]
    assert _grounding(f"Which branch opened in 1964?\nEastside: {body}")[0]
    ok, reason = _grounding(f"Which branch opened in 1964? (hint: Eastside)\n[p-eastside] Eastside\n{body}")
    assert not ok and "gold answer 'Eastside' appears in the prompt outside the retrieved sources" in reason


class BadPassages:
    def __init__(self, corpus: Any) -> None:
        self.corpus = corpus

    def answer(self, case: Any) -> SUTOutput:
        text = self.corpus["p-eastside"].text
        return SUTOutput(
            answer=text,
            citations=[Citation("p-eastside", text)],
            retrieved_ids=["p-northgate"],
            passages=[Passage("p-eastside", text)],
            model_was_called=True,
            prompt_to_model=text,
        )


def make_bad_passages(corpus=None):
    return BadPassages(corpus)


@pytest.mark.parametrize("isolation", ["process", "none"])
def test_disagreeing_passages_are_a_failed_case_with_the_reason_not_a_traceback(tmp_path, isolation):
    result = _run(corpus_folder(tmp_path), make_bad_passages, isolation)
    error = result.outputs.iloc[0]["error"]
    assert error.startswith("malformed output: ") and "retrieved_ids and passages disagree" in error
    assert not result.ok


# --------------------------------------------------------------------------- the reference system over a corpus


def test_the_reference_system_retrieves_over_the_corpus_and_abstains_out_of_it(tmp_path, monkeypatch):
    from qaeval.system import reference

    monkeypatch.setattr(reference, "INDEX_CACHE", tmp_path / "index-cache")
    out_of_corpus = corpus_case(
        id="abstain-0001",
        question="Who painted the ceiling of the chapel?",
        gold_answer=None,
        gold_source_ids=[],
        expected_behavior="unanswerable_must_abstain",
    )
    folder = corpus_folder(tmp_path, [corpus_case(), out_of_corpus, make_case(id="own-0001")])
    result = _run(folder, reference.make_adapter)
    outputs = result.outputs.set_index("case_id")
    assert outputs.loc["case-0001", "retrieved_ids"][0] == "p-eastside"
    assert outputs.loc["case-0001", "passages"][0]["text"] == PASSAGES[0]["text"]
    assert outputs.loc["abstain-0001", "abstained"] and not outputs.loc["abstain-0001", "model_was_called"]
    assert outputs.loc["own-0001", "retrieved_ids"][0] == "s1" and outputs.loc["own-0001", "passages"] == []
    assert result.ok, result.reason
    assert list((tmp_path / "index-cache").glob("fts5-*.sqlite")), "the index is cached by the corpus's fingerprint"


def test_the_own_index_example_scores_and_passes(tmp_path, monkeypatch):
    from conftest import ROOT

    monkeypatch.syspath_prepend(str(ROOT))
    out_of_corpus = corpus_case(
        id="abstain-0001",
        question="Who painted the ceiling of the chapel?",
        gold_answer=None,
        gold_source_ids=[],
        expected_behavior="unanswerable_must_abstain",
    )
    folder = corpus_folder(tmp_path, [corpus_case(), out_of_corpus, make_case(id="own-0001")])
    result = _run(folder, "examples.own_index_adapter:make_adapter", "process")
    assert result.ok, result.reason
    outputs = result.outputs.set_index("case_id")
    assert outputs.loc["case-0001", "passages"][0]["id"] == "p-eastside"
    assert outputs.loc["abstain-0001", "abstained"]
    # a case with passages of its own is answered over them (it was wrongly abstained on: a new user's pass)
    assert outputs.loc["own-0001", "retrieved_ids"][0] == "s1" and not outputs.loc["own-0001", "abstained"]
    assert result.per_case.set_index("case_id").loc["own-0001", "case_passed"]


def test_a_runs_corpus_excerpt_stands_in_for_the_corpus_when_cases_are_read_back(tmp_path):
    from qaeval.data.cases import suite_from_raw
    from qaeval.scoring.checks import check_outputs
    from qaeval.scoring.evaluate import corpus_excerpt

    result = _run(corpus_folder(tmp_path, [corpus_case(), make_case(id="own-0001")]), make_altering)
    excerpt = corpus_excerpt(result.suite, result.outputs)
    assert set(excerpt) == {"p-eastside", "p-northgate"}, "gold, retrieved and cited corpus passages only"
    back = suite_from_raw([c.to_raw() for c in result.suite], "rec", file="rec.json", corpus=excerpt)
    again = check_outputs(back.to_frame(), result.outputs, back.sources_frame(), excerpt)
    assert again["passed"].tolist() == result.checks["passed"].tolist()
    assert "differs from the frozen corpus" in " ".join(again["reason"])


class StaleCopy:
    """A system whose own index holds a stale copy of a case's frozen source: it returns that copy as
    its passage and cites it."""

    def answer(self, case: Any) -> SUTOutput:
        src = case.sources[0]
        stale = Passage(src.id, src.text.replace(" ", " stale ", 1), src.title)
        return SUTOutput(
            answer=stale.text,
            citations=[Citation(src.id, stale.text)],
            passages=[stale],
            model_was_called=True,
            prompt_to_model=f"Question: {case.question}\n{stale.text}",
        )


def test_a_stale_copy_of_a_case_source_fails_fidelity_and_its_record_reads_back(tmp_path):
    """The judge grades a case's own source ids against the frozen text; the record's check recomputes
    each verdict against that same text, so the record of such a run reads back (it was refused)."""
    from qaeval.api import load_run
    from qaeval.record.write import write_record

    folder = write_cases(tmp_path / "data", [make_case(id="stale-0001"), make_case(id="stale-0002")])
    result = _run(folder, lambda: StaleCopy())
    ok, reason = _checks(result, "stale-0001")["passage_fidelity"]
    assert not ok and "differs from the case's frozen sources" in reason
    write_record(result, tmp_path / "run.json")
    back = load_run(tmp_path / "run.json")
    assert (
        back.verdicts[["case_id", "axis", "valid", "score"]]
        .astype(str)
        .equals(result.verdicts[["case_id", "axis", "valid", "score"]].astype(str))
    )
