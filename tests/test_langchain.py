"""The LangChain integration: a retriever and a chat model (or a chain that returns its documents) as a
qaeval adapter, tested with langchain-core's fake chat models and in-memory retrievers, no service."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys

import pytest
from conftest import GOLDEN, ROOT, make_case
from test_corpus_pipeline import corpus_case, corpus_folder

from qaeval.reports.render import run_papermill

pytest.importorskip("langchain_core", reason="the langchain extra is part of dev")

from langchain_core.documents import Document
from langchain_core.language_models.fake_chat_models import FakeListChatModel, GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnableLambda, RunnablePassthrough

from qaeval import CaseView, Citation, Corpus, Passage, Source, load_run
from qaeval.core.errors import UsageError
from qaeval.integrations.citations import read_answer
from qaeval.integrations.langchain import (
    CorpusBM25Retriever,
    KeywordRetriever,
    adapter_factory,
    document_id,
    source_document,
)
from qaeval.system.validate import output_problems

SOURCES = (
    Source(
        "loan-periods", "Books circulate for 21 days. DVDs circulate for 7 days and cannot be renewed.", "Loan periods"
    ),
    Source("printing", "Black-and-white printing costs 10 cents per page.", None),
    Source("library-cards", "Non-residents may purchase an annual card for $40.", "Library cards"),
)
DVD = CaseView("opaque-1", "How many days can I keep a DVD?", SOURCES)


def fake(*answers: str) -> GenericFakeChatModel:
    return GenericFakeChatModel(messages=iter([AIMessage(a) for a in answers]))


class Untouchable(FakeListChatModel):
    """A fake chat model that fails the case if it is ever called."""

    def _call(self, *args, **kwargs):
        raise AssertionError("the model was called")


# --------------------------------------------------------------------------- the citation syntax


def test_markers_before_or_after_the_full_stop_cite_their_sentence_and_leave_the_answer():
    read = read_answer(
        "DVDs circulate for 7 days [loan-periods]. Printing costs 10 cents a page. [printing]",
        ["loan-periods", "printing"],
    )
    assert read.answer == "DVDs circulate for 7 days. Printing costs 10 cents a page."
    assert read.citations == [
        Citation("loan-periods", "DVDs circulate for 7 days."),
        Citation("printing", "Printing costs 10 cents a page."),
    ]
    assert not read.abstained


def test_several_ids_in_one_marker_or_side_by_side_and_a_marker_on_its_own_line():
    read = read_answer("Eastside opened in 1964 [a, b]; Riverside in 2008 [c][a; b].\n\n[d]", ["a", "b", "c", "d"])
    claim = "Eastside opened in 1964; Riverside in 2008."
    assert read.citations == [Citation(s, claim) for s in "abcd"], "each (id, claim) once, the lone [d] included"
    assert read.answer == claim


def test_ids_are_matched_to_the_retrieved_spelling_and_unknown_ids_are_kept_to_fail_resolvability():
    read = read_answer("Fines ended in July 2021 [Fines-Policy-2021] [fines-2019].", ["fines-policy-2021"])
    assert [c.source_id for c in read.citations] == ["fines-policy-2021", "fines-2019"]


def test_bracketed_words_and_markdown_links_are_text_not_citations():
    read = read_answer("See the [loan rules](https://example.org/loans) and [see above] for DVDs [x].", ["x"])
    assert read.answer == "See the [loan rules](https://example.org/loans) and [see above] for DVDs."
    assert read.citations == [Citation("x", read.answer)]


@pytest.mark.parametrize(
    "text",
    [
        "I cannot answer.",
        "  i can\u2019t answer that from these passages",
        "",
        "I don't know.",
        "The passages do not say.",
    ],
)
def test_a_refusal_that_cites_nothing_is_an_abstention(text):
    assert read_answer(text, ["x"]).abstained and read_answer(text, ["x"]).answer == ""


def test_a_refusal_that_still_cites_a_passage_is_an_answer():
    read = read_answer("I cannot answer fully, but DVDs circulate for 7 days [x].", ["x"])
    assert not read.abstained and read.citations[0].source_id == "x"


# --------------------------------------------------------------------------- documents and passages


def test_a_document_id_comes_from_metadata_then_the_document_id_then_a_stable_hash():
    assert document_id(Document("text", metadata={"source_id": 17}, id="uuid-1")) == "17"
    assert document_id(Document("text", id="uuid-1")) == "uuid-1"
    hashed = document_id(Document("some text"))
    assert hashed.startswith("doc-") and len(hashed) == 20 and hashed == document_id(Document("some text"))
    assert hashed != document_id(Document("other text"))
    back = source_document(SOURCES[0])
    assert (back.metadata, back.page_content) == (
        {"source_id": "loan-periods", "title": "Loan periods"},
        SOURCES[0].text,
    )


def test_the_keyword_retriever_ranks_like_the_reference_system_and_keeps_its_floor():
    retriever = KeywordRetriever(documents=[source_document(s) for s in SOURCES])
    assert [document_id(d) for d in retriever.invoke(DVD.question)] == ["loan-periods"]
    assert retriever.invoke("What does the airport charge for parking?") == []


# --------------------------------------------------------------------------- one case, mapped


def test_a_retriever_and_a_chat_model_fill_every_field_of_the_output():
    make = adapter_factory(model=fake("DVDs circulate for 7 days and cannot be renewed [loan-periods]."))
    out = make().answer(DVD)
    assert output_problems(out) == []
    assert out.passages == [Passage("loan-periods", SOURCES[0].text, "Loan periods")]
    assert out.citations == [Citation("loan-periods", "DVDs circulate for 7 days and cannot be renewed.")]
    assert out.model_was_called and not out.abstained
    prompt = out.prompt_to_model
    assert prompt.startswith("System: Answer the question using only the passages below.")
    assert "Human: Question: How many days can I keep a DVD?" in prompt
    assert "[loan-periods] Loan periods\n" + SOURCES[0].text in prompt, "the prompt carries the passage it cites"
    assert "printing" not in prompt, "only what was retrieved is sent"


def test_nothing_retrieved_is_an_abstention_without_a_model_call():
    out = adapter_factory(model=Untouchable(responses=["x"]))().answer(
        CaseView("o", "Does it lend telescopes?", SOURCES)
    )
    assert out.abstained and not out.model_was_called and out.prompt_to_model is None and out.passages == []
    assert output_problems(out) == []


def test_a_model_that_says_it_cannot_answer_abstains_and_keeps_what_it_was_given():
    out = adapter_factory(model=FakeListChatModel(responses=["I cannot answer."]))().answer(DVD)
    assert out.abstained and out.answer == "" and out.citations == []
    assert out.model_was_called and "DVDs circulate" in out.prompt_to_model
    assert [p.id for p in out.passages] == ["loan-periods"] and output_problems(out) == []


def _lcel(model):
    """A chain written the way LangChain's RAG recipe returns its sources: {question, context, answer}."""
    prompt = ChatPromptTemplate.from_template("Context: {context}\nQuestion: {question}")

    def build(retriever):
        docs = RunnableLambda(lambda x: x["question"]) | retriever
        text = RunnableLambda(lambda x: "\n".join(d.page_content for d in x["context"]))
        return RunnablePassthrough.assign(context=docs).assign(
            answer=RunnablePassthrough.assign(context=text) | prompt | model
        )

    return build


def test_a_chain_given_as_a_function_of_the_retriever_gets_each_case_its_own():
    out = adapter_factory(chain=_lcel(fake("Seven days [loan-periods].")))().answer(DVD)
    assert [p.id for p in out.passages] == ["loan-periods"], "retrieved over the case's own sources"
    assert out.citations == [Citation("loan-periods", "Seven days.")]
    assert out.model_was_called and out.prompt_to_model.startswith("Human: Context: Books circulate"), (
        "the prompt is what the nested model was really sent, seen by the callback"
    )


def test_a_fixed_chain_in_the_legacy_shape_and_one_that_never_calls_a_model():
    docs = [Document("DVDs circulate for 7 days.", metadata={"source_id": "kb-9"})]
    legacy = RunnableLambda(lambda x: {"result": "Seven days [kb-9].", "source_documents": docs})
    out = adapter_factory(chain=legacy)().answer(DVD)
    assert out.citations == [Citation("kb-9", "Seven days.")] and [p.id for p in out.passages] == ["kb-9"]
    assert not out.model_was_called and out.prompt_to_model is None, "no model started, so none is claimed"


def test_a_chain_that_returns_the_wrong_shape_fails_its_case_with_the_keys_it_gave():
    from qaeval import load_suite
    from qaeval.core.settings import RunSettings
    from qaeval.lowlevel import run_suite

    make = adapter_factory(chain=RunnableLambda(lambda x: {"text": "7 days"}))
    frame = run_suite(load_suite(GOLDEN), make, RunSettings(isolation="none"))
    assert (
        frame["error"]
        .str.contains(
            "the chain returned the keys ['text']; qaeval needs the answer under answer or result", regex=False
        )
        .all()
    )


def test_an_answer_may_be_a_message_with_content_blocks_and_documents_must_be_documents():
    from qaeval.integrations.langchain import chain_result

    blocks = AIMessage(
        content=[
            {"type": "text", "text": "Seven days "},
            {"type": "image_url", "image_url": "x"},
            {"type": "text", "text": "[kb-9]."},
        ]
    )
    assert chain_result({"answer": blocks, "context": []}) == ("Seven days [kb-9].", [])
    with pytest.raises(TypeError, match="the chain's 'context' holds dict, not Documents"):
        chain_result({"answer": "x", "context": [{"page_content": "x"}]})
    with pytest.raises(TypeError, match="the chain returned str; qaeval needs a mapping"):
        chain_result("Seven days")


def test_a_fixed_retriever_is_used_for_every_case_instead_of_its_sources():
    mine = KeywordRetriever(documents=[Document("DVDs go out for 7 days.", metadata={"source_id": "kb-dvd"})])
    out = adapter_factory(model=fake("Seven days [kb-dvd]."), retriever=mine)().answer(DVD)
    assert [p.id for p in out.passages] == ["kb-dvd"] and out.citations[0].source_id == "kb-dvd"


def test_an_in_memory_vector_store_over_each_case_keeps_the_source_ids():
    from langchain_core.embeddings import DeterministicFakeEmbedding
    from langchain_core.vectorstores import InMemoryVectorStore

    def index(documents):
        store = InMemoryVectorStore.from_documents(documents, DeterministicFakeEmbedding(size=16))
        return store.as_retriever(search_kwargs={"k": 2})

    out = adapter_factory(model=FakeListChatModel(responses=["Seven days [loan-periods]."]), index=index)().answer(DVD)
    assert len(out.passages) == 2 and {p.id for p in out.passages} <= {s.id for s in SOURCES}
    assert all(p == Passage(s.id, s.text, s.title) for p in out.passages for s in SOURCES if s.id == p.id)
    assert output_problems(out) == []


@pytest.mark.parametrize(
    "kwargs, says",
    [
        ({}, "exactly one of them"),
        ({"model": "m", "chain": RunnableLambda(lambda x: x)}, "exactly one of them"),
        ({"chain": RunnableLambda(lambda x: x), "prompt": "p"}, "prompt= goes with model="),
        (
            {"chain": RunnableLambda(lambda x: x), "retriever": KeywordRetriever(documents=[])},
            "has its retriever built in",
        ),
        ({"chain": 3}, "must be a Runnable or a function of a retriever, got int"),
    ],
)
def test_a_factory_asked_for_something_that_cannot_work_is_a_usage_error(kwargs, says):
    with pytest.raises(UsageError, match=says):
        adapter_factory(**kwargs)


# --------------------------------------------------------------------------- a corpus, once per worker


def test_a_corpus_case_retrieves_over_the_corpus_indexed_once_per_worker(tmp_path):
    folder = corpus_folder(tmp_path)
    corpus = Corpus.open(folder / "corpus.jsonl")
    adapter = adapter_factory(model=fake("It opened in 1964 [p-eastside]."))(corpus=corpus)
    assert isinstance(adapter.corpus_retriever, CorpusBM25Retriever)
    out = adapter.answer(CaseView("o", "When did the Eastside Branch open?", ()))
    assert [p.id for p in out.passages] == ["p-eastside", "p-northgate"], "BM25 order, past the relevance floor"
    assert out.passages[0] == Passage("p-eastside", "The Eastside Branch opened in 1964 on Dunmore Street.", "Eastside")
    assert out.citations == [Citation("p-eastside", "It opened in 1964.")]


def test_an_index_of_your_own_is_built_once_over_the_corpus_and_per_case_over_sources(tmp_path):
    built = []

    def index(documents):
        built.append(sorted(document_id(d) for d in documents))
        return KeywordRetriever(documents=documents)

    folder = corpus_folder(tmp_path)
    adapter = adapter_factory(model=fake("1964 [p-eastside].", "1964 [s1]."), index=index)(
        corpus=Corpus.open(folder / "corpus.jsonl")
    )
    adapter.answer(CaseView("o", "When did the Eastside Branch open?", ()))
    case = make_case()
    adapter.answer(CaseView("o2", case["question"], tuple(Source(**s) for s in case["sources"])))
    assert built == [["p-eastside", "p-northgate", "p-printing"], ["s1", "s2", "s3"]]


def test_a_corpus_folder_runs_through_worker_processes(tmp_path):
    from qaeval import api

    folder = corpus_folder(tmp_path, [corpus_case(), make_case(id="own-0001")])
    result = api.run(str(folder), adapter="examples.langchain_adapter:make_adapter", concurrency=2)
    assert result.ok, result.reason
    outs = result.outputs.set_index("case_id")
    assert outs.loc["case-0001", "citations"] == [
        {"source_id": "p-eastside", "claim": "The Eastside Branch opened in 1964 on Dunmore Street."}
    ]
    assert outs.loc["own-0001", "retrieved_ids"][0] == "s1"


# --------------------------------------------------------------------------- the golden set, through the pool


def _cli(*args, env=None, cwd=ROOT):
    return subprocess.run(
        [sys.executable, "-m", "qaeval", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env={**os.environ, "QAEVAL_PROGRESS": "0", **(env or {})},
    )


def test_the_golden_set_runs_through_the_worker_pool_at_concurrency_4(tmp_path):
    done = _cli(
        "run",
        "--data",
        "golden",
        "--adapter",
        "examples.langchain_adapter:make_adapter",
        "--concurrency",
        "4",
        "--save",
        str(tmp_path / "run.json"),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    run = load_run(tmp_path / "run.json")
    assert run.meta.concurrency == 4 and run.meta.adapter == "examples.langchain_adapter:make_adapter"
    checks = run.checks
    assert len(checks) == 15 * 5 and checks["passed"].all(), checks[~checks["passed"]].to_string()
    outs = run.outputs.set_index("case_id")
    assert outs["error"].isna().all()
    abstain = [c.id for c in run.suite if c.expected_behavior == "unanswerable_must_abstain"]
    assert outs.loc[abstain, "abstained"].all() and not outs.loc[abstain, "model_was_called"].any(), (
        "nothing clears the relevance floor, so no model is called"
    )
    dvd = outs.loc["single-0001"]
    assert dvd["answer"] == "DVDs circulate for 7 days and cannot be renewed."
    assert dvd["citations"] == [{"source_id": "loan-periods", "claim": dvd["answer"]}]
    assert "Human: Question: How many days can I keep a DVD I borrowed?" in dvd["prompt_to_model"]
    assert run.per_case.set_index("case_id").loc["single-0001", "recall_at_k"] == 1.0


def test_importing_the_integration_without_langchain_core_is_a_usage_error_naming_the_extra(monkeypatch):
    for name in [m for m in sys.modules if m.split(".")[0] == "langchain_core"]:
        monkeypatch.setitem(sys.modules, name, None)  # as if it were not installed
    monkeypatch.delitem(sys.modules, "qaeval.integrations.langchain")
    with pytest.raises(UsageError, match=r"needs langchain-core .*pip install -e '\.\[langchain\]'"):
        importlib.import_module("qaeval.integrations.langchain")


def test_without_langchain_core_the_adapter_is_a_usage_error_naming_the_extra(tmp_path):
    shadow = tmp_path / "shadow" / "langchain_core"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError(\"No module named 'langchain_core'\")\n")
    env = {"PYTHONPATH": os.pathsep.join([str(shadow.parent), os.environ.get("PYTHONPATH", "")])}
    done = _cli("run", "--data", "golden", "--adapter", "examples.langchain_adapter:make_adapter", env=env)
    assert done.returncode == 64, done.stdout + done.stderr
    assert "needs langchain-core" in done.stderr and "pip install -e '.[langchain]'" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_extra_is_declared_in_dev_and_its_lower_bound_is_the_oldest_pin():
    tomllib = pytest.importorskip("tomllib")
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert extras["langchain"] == ["langchain-core>=0.3"] and "langchain-core>=0.3" in extras["dev"]
    assert "langchain-core==0.3.0" in (ROOT / ".ci" / "oldest.txt").read_text().splitlines()


# --------------------------------------------------------------------------- the example notebook


def test_the_example_notebook_is_committed_clean():
    nb = json.loads((ROOT / "examples" / "langchain-adapter.ipynb").read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert all(c["outputs"] == [] and c["execution_count"] is None for c in code)


@pytest.mark.parametrize("cwd", ["", "examples"])
def test_the_example_notebook_runs_the_golden_set(tmp_path, monkeypatch, cwd):
    import nbformat

    monkeypatch.setenv("QAEVAL_PROGRESS", "0")
    out = tmp_path / "out.ipynb"
    run_papermill(
        ROOT / "examples" / "langchain-adapter.ipynb",
        out,
        kernel_name="python3",
        progress_bar=False,
        cwd=str(ROOT / cwd),
    )
    text = "\n".join(
        o.get("text", "") + str(o.get("data", {}).get("text/plain", ""))
        for c in nbformat.read(out, as_version=4).cells
        for o in c.get("outputs", [])
    )
    assert "Human: Question: How many days can I keep a DVD I borrowed?" in text
    assert "answer:           DVDs circulate for 7 days and cannot be renewed." in text
    assert "[Citation(source_id='loan-periods', claim='DVDs circulate for 7 days and cannot be renewed.')]" in text
    assert "adapter=examples.langchain_adapter:make_adapter" in text
    assert "TIER 1: GREEN   deterministic checks green, no adapter error; 10 of 15 cases pass" in text
    assert "grounding_isolation      15     15" in text, "every check passes on every case"
