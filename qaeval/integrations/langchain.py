"""LangChain systems as qaeval adapters (extra ``[langchain]``; docs/guides/adapters.md).

    make_adapter = adapter_factory(model=ChatOpenAI(model="gpt-4o-mini", temperature=0))
    qaeval run --data golden --adapter my_rag:make_adapter

``adapter_factory`` takes ``model=`` (retrieve, then call ``prompt | model`` only when something was
retrieved, asking for the citation syntax of ``qaeval.integrations.citations``) or ``chain=`` (a Runnable
invoked with ``{"question"}`` that returns the answer under ``answer`` or ``result`` and its documents
under ``context`` or ``source_documents``, or a function of a retriever that builds one). Retrieval per
case: ``retriever=`` when given; else a case's own sources through ``index(documents)`` (default
``KeywordRetriever``, the reference system's lexical ranking), and a corpus case through a retriever
built once per worker (``index`` over the corpus, else ``CorpusBM25Retriever``).

The output's ``passages`` are the returned documents (id from ``metadata["source_id"]``, else
``Document.id``, else ``doc-`` and 16 hex digits of the text's sha256); ``model_was_called`` and
``prompt_to_model`` are what a callback handler saw every chat model or LLM start with (a model called
outside LangChain's callbacks is not seen; on Python 3.10 a RunnableLambda must pass its ``config`` on);
answer, citations and abstention come from ``read_answer``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass
from functools import partial
from typing import Any

from qaeval.core.errors import UsageError, install_extra
from qaeval.data.cases import Source
from qaeval.data.corpus import Corpus, Passage
from qaeval.integrations.citations import read_answer
from qaeval.system.contract import CaseView, SUTOutput
from qaeval.system.reference import INDEX_CACHE, RELEVANCE_FLOOR, TOP_K, lexical_scores

try:
    from langchain_core.callbacks import BaseCallbackHandler
    from langchain_core.documents import Document
    from langchain_core.messages import BaseMessage, get_buffer_string
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda
except ImportError as exc:
    raise UsageError(
        f"qaeval.integrations.langchain needs langchain-core ({exc}): {install_extra('langchain')}"
    ) from None

ID_KEY = "source_id"
TITLE_KEY = "title"
ANSWER_KEYS = ("answer", "result")
DOCUMENT_KEYS = ("context", "source_documents")

PROMPT = ChatPromptTemplate.from_messages(
    [
        (
            "system",
            "Answer the question using only the passages below. End every sentence with the ids of the "
            "passages it relies on, in square brackets, like [passage-id]. If the passages do not answer "
            "the question, reply only: I cannot answer.",
        ),
        ("human", "Question: {question}\n\nPassages:\n\n{context}"),
    ]
)

Index = Callable[[list[Document]], BaseRetriever]
ChainBuilder = Callable[[BaseRetriever], Runnable]

# --------------------------------------------------------------------------- documents and passages


def document_id(document: Document) -> str:
    """``metadata["source_id"]``, else ``Document.id``, else ``doc-`` + 16 hex digits of sha256(text)."""
    given = document.metadata.get(ID_KEY)
    if given is not None and str(given).strip():
        return str(given)
    if document.id:
        return str(document.id)
    return "doc-" + hashlib.sha256(document.page_content.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def document_passage(document: Document) -> Passage:
    title = document.metadata.get(TITLE_KEY)
    return Passage(document_id(document), document.page_content, title if isinstance(title, str) else None)


def source_document(source: Source | Passage) -> Document:
    """A case's source or a corpus passage as a Document that keeps its id and title."""
    metadata: dict[str, Any] = {ID_KEY: source.id}
    if source.title is not None:
        metadata[TITLE_KEY] = source.title
    return Document(page_content=source.text, metadata=metadata, id=source.id)


def format_documents(documents: Sequence[Document]) -> str:
    """The ``context`` the prompt gets: each passage as ``[id] title`` on a line, then its text."""
    blocks = []
    for document in documents:
        passage = document_passage(document)
        head = f"[{passage.id}] {passage.title}" if passage.title else f"[{passage.id}]"
        blocks.append(f"{head}\n{passage.text}")
    return "\n\n".join(blocks)


# --------------------------------------------------------------------------- retrievers


class KeywordRetriever(BaseRetriever):
    """The reference system's lexical retrieval over a few documents (a case's own sources): ranked by the
    share of the question's content words each holds, those under ``floor`` dropped, the best ``k`` kept."""

    documents: list[Document]
    k: int = TOP_K
    floor: float = RELEVANCE_FLOOR

    def _get_relevant_documents(self, query: str, *, run_manager: Any = None) -> list[Document]:
        sources = [Source(p.id, p.text, p.title) for p in map(document_passage, self.documents)]
        by_source = {id(s): d for s, d in zip(sources, self.documents)}
        ranked = lexical_scores(query, tuple(sources))
        return [by_source[id(s)] for relevance, _, s in ranked if relevance >= self.floor][: self.k]


def keyword_index(documents: list[Document], *, k: int = TOP_K, floor: float = RELEVANCE_FLOOR) -> KeywordRetriever:
    return KeywordRetriever(documents=documents, k=k, floor=floor)


class CorpusBM25Retriever(BaseRetriever):
    """BM25 over a qaeval corpus (``qaeval.system.retriever.CorpusRetriever``, SQLite FTS5), with the same
    relevance floor as ``KeywordRetriever``; documents come back with their corpus id and title."""

    corpus: Any
    bm25: Any
    k: int = TOP_K
    floor: float = RELEVANCE_FLOOR

    @classmethod
    def build(cls, corpus: Corpus, *, k: int = TOP_K, floor: float = RELEVANCE_FLOOR) -> CorpusBM25Retriever:
        from qaeval.system.retriever import CorpusRetriever

        return cls(corpus=corpus, bm25=CorpusRetriever.build(corpus, cache_dir=INDEX_CACHE), k=k, floor=floor)

    def _get_relevant_documents(self, query: str, *, run_manager: Any = None) -> list[Document]:
        return [source_document(self.corpus[pid]) for pid, _ in self.bm25.search(query, self.k, floor=self.floor)]


# --------------------------------------------------------------------------- the chain and what it returns


def rag_chain(model: Any, prompt: Any = PROMPT) -> ChainBuilder:
    """A chain builder: given a retriever, a Runnable that retrieves, calls ``prompt | model`` only when
    something was retrieved, and returns ``{"answer": str, "context": [Document]}``."""
    generate = prompt | model | StrOutputParser()

    def build(retriever: BaseRetriever) -> Runnable:
        def run(inputs: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
            documents = retriever.invoke(inputs["question"], config)
            if not documents:
                return {"answer": "", "context": []}  # no model call on empty context
            answer = generate.invoke({"question": inputs["question"], "context": format_documents(documents)}, config)
            return {"answer": answer, "context": documents}

        return RunnableLambda(run, name="qaeval_rag")

    return build


def message_text(value: Any) -> str:
    """An answer given as a string or a message (its text content blocks joined)."""
    if isinstance(value, str):
        return value
    if isinstance(value, BaseMessage):
        if isinstance(value.content, str):
            return value.content
        return "".join(
            b if isinstance(b, str) else str(b.get("text", ""))
            for b in value.content
            if isinstance(b, str) or (isinstance(b, dict) and b.get("type") == "text")
        )
    raise TypeError(f"the chain's answer is {type(value).__name__}, not a string or a message")


def chain_result(result: Any) -> tuple[str, list[Document]]:
    """(answer text, documents) from what a chain returned: a mapping with one of ``ANSWER_KEYS`` and one
    of ``DOCUMENT_KEYS``."""
    if not isinstance(result, Mapping):
        raise TypeError(
            f"the chain returned {type(result).__name__}; qaeval needs a mapping with the answer under "
            "'answer' and the documents it used under 'context'"
        )
    answer_key = next((key for key in ANSWER_KEYS if key in result), None)
    documents_key = next((key for key in DOCUMENT_KEYS if key in result), None)
    if answer_key is None or documents_key is None:
        raise ValueError(
            f"the chain returned the keys {sorted(map(str, result))}; qaeval needs the answer under "
            f"{' or '.join(ANSWER_KEYS)} and the documents under {' or '.join(DOCUMENT_KEYS)}"
        )
    documents = list(result[documents_key] or [])
    strangers = sorted({type(d).__name__ for d in documents if not isinstance(d, Document)})
    if strangers:
        raise TypeError(f"the chain's {documents_key!r} holds {', '.join(strangers)}, not Documents")
    return message_text(result[answer_key]), documents


class ModelWatch(BaseCallbackHandler):
    """Records what each chat model or LLM that starts during one case is sent."""

    def __init__(self) -> None:
        super().__init__()
        self.prompts: list[str] = []

    def on_chat_model_start(self, serialized: Any, messages: list[list[BaseMessage]], **kwargs: Any) -> None:
        self.prompts.extend(get_buffer_string(m) for m in messages)

    def on_llm_start(self, serialized: Any, prompts: list[str], **kwargs: Any) -> None:
        self.prompts.extend(prompts)


def to_output(answer: str, documents: Sequence[Document], prompts: Sequence[str]) -> SUTOutput:
    """The contract's output for one case: what was retrieved, what the model was sent, what it said."""
    passages = [document_passage(d) for d in documents]
    read = read_answer(answer, [p.id for p in passages])
    return SUTOutput(
        answer=read.answer,
        citations=read.citations,
        passages=passages,
        abstained=read.abstained,
        model_was_called=bool(prompts),
        prompt_to_model="\n\n".join(prompts) if prompts else None,
    )


# --------------------------------------------------------------------------- the adapter


@dataclass(eq=False, repr=False)  # compared, hashed and shown by identity, as any adapter
class LangChainAdapter:
    """Answers a case by running the chain with the case's retriever (see the module's docstring)."""

    build_chain: ChainBuilder
    _: KW_ONLY
    retriever: BaseRetriever | None = None
    index: Index = keyword_index
    corpus_retriever: BaseRetriever | None = None

    def retriever_for(self, case: CaseView) -> BaseRetriever:
        if self.retriever is not None:
            return self.retriever
        if case.sources or self.corpus_retriever is None:
            return self.index([source_document(s) for s in case.sources])
        return self.corpus_retriever

    def answer(self, case: CaseView) -> SUTOutput:
        watch = ModelWatch()
        chain = self.build_chain(self.retriever_for(case))
        answer, documents = chain_result(chain.invoke({"question": case.question}, {"callbacks": [watch]}))
        return to_output(answer, documents, watch.prompts)


def _builder(model: Any, chain: Any, retriever: Any, prompt: Any) -> ChainBuilder:
    if (model is None) == (chain is None):
        raise UsageError("adapter_factory takes a chat model (model=) or a chain (chain=): exactly one of them")
    if chain is None:
        return rag_chain(model, PROMPT if prompt is None else prompt)
    if prompt is not None:
        raise UsageError("prompt= goes with model=; a chain (chain=) renders its own prompt")
    if isinstance(chain, Runnable):
        if retriever is not None:
            raise UsageError(
                "a chain given as a Runnable has its retriever built in; to hand it retriever=, "
                "give chain= as a function of the retriever that builds the Runnable"
            )
        return lambda _retriever: chain
    if callable(chain):
        return chain
    raise UsageError(f"chain= must be a Runnable or a function of a retriever, got {type(chain).__name__}")


def adapter_factory(
    model: Any = None,
    *,
    chain: Any = None,
    retriever: BaseRetriever | None = None,
    index: Index | None = None,
    prompt: Any = None,
    k: int = TOP_K,
    floor: float = RELEVANCE_FLOOR,
) -> Callable[..., LangChainAdapter]:
    """An adapter factory (``make_adapter(corpus=None)``) for a LangChain system; see the module's docstring.
    ``k`` and ``floor`` set the default retrievers' depth and relevance floor."""
    build = _builder(model, chain, retriever, prompt)
    per_case = index if index is not None else partial(keyword_index, k=k, floor=floor)

    def make_adapter(corpus: Corpus | None = None) -> LangChainAdapter:
        over_corpus = None
        if corpus is not None and retriever is None:
            over_corpus = (
                index([source_document(p) for p in corpus])
                if index is not None
                else CorpusBM25Retriever.build(corpus, k=k, floor=floor)
            )
        return LangChainAdapter(build, retriever=retriever, index=per_case, corpus_retriever=over_corpus)

    return make_adapter
