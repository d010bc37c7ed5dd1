"""A frozen corpus through the pipeline: loading corpus cases, passages in the output, the worker's
corpus, and the checks on what the system really used."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import make_case, write_cases

from qaeval import load_suite
from qaeval.errors import DatasetError

PASSAGES = [
    {"id": "p-eastside", "title": "Eastside", "text": "The Eastside Branch opened in 1964 on Dunmore Street."},
    {"id": "p-northgate", "text": "The Northgate Branch opened in 1978 and is the smallest location."},
    {"id": "p-printing", "text": "Printing costs 10 cents per page."},
]


def corpus_case(**changes: Any) -> dict[str, Any]:
    return make_case(**{"sources": ..., "gold_source_ids": ["p-eastside"], **changes})


def write_corpus(folder: Path, passages: list[dict[str, Any]] | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps(p) + "\n" for p in passages or PASSAGES),
                                         encoding="utf-8")
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
