"""The contract between the harness and the system under test (SUT).

The SUT sees a ``CaseView`` and nothing else: a random opaque id drawn per run, the question and the
case's sources; every label, the readable case id included, stays in the harness. It answers with a
``SUTOutput``, checked before anything scores it (``output_row``, ``qaeval.system.validate``): an output
that breaks a rule is *malformed output*, a failed case with the reason, never a crash or a score."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import secrets
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from qaeval.data.cases import GoldenCase, Source
from qaeval.data.corpus import MAX_PASSAGE_CHARS, Passage


class Citation:
    """One citation: the source the SUT points at and the part of its answer that source supports.

    ``Citation(source_id, claim)``.

    Attributes:
        source_id: The id of the cited passage: a case source's, a corpus passage's or one of the
            output's own ``passages``. It must be among the output's ``retrieved_ids``.
        claim: The part of the answer this passage supports (default ``""``); the judge and the
            grounding checks weigh it against the passage's text.
    """

    __slots__ = ("source_id", "claim")

    def __init__(self, source_id: str, claim: str = "") -> None:
        self.source_id = source_id
        self.claim = claim

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Citation) and (self.source_id, self.claim) == (other.source_id, other.claim)

    def __hash__(self) -> int:
        return hash((self.source_id, self.claim))

    def __repr__(self) -> str:
        return f"Citation(source_id={self.source_id!r}, claim={self.claim!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Citation, (self.source_id, self.claim))


@dataclass
class SUTOutput:
    """What a system under test returns for one case.

    Every field has a default, so ``SUTOutput(abstained=True)`` is a complete abstention. What comes
    back is checked field by field before anything scores it; a broken rule fails the case as
    malformed output, with the reason.

    Attributes:
        answer: The answer text (``""`` when abstaining).
        citations: A list of ``Citation`` (none when abstaining).
        retrieved_ids: Source ids the system retrieved, best first, each once (the ranking; taken
            from ``passages`` when only those are given).
        passages: A list of ``Passage``: what the system retrieved, in rank order, with the text it
            used (required for ids its own index holds that are in no source or corpus).
        abstained: True when the system declined to answer.
        model_was_called: True when a language model was invoked for this case.
        prompt_to_model: The exact prompt sent to the model, or None when none was sent.
        computed_aggregate: A number (or text) the system computed for aggregation questions, else
            None.
    """

    answer: str = ""
    citations: list[Citation] = field(default_factory=list)
    retrieved_ids: list[str] = field(default_factory=list)
    passages: list[Passage] = field(default_factory=list)
    abstained: bool = False
    model_was_called: bool = False
    prompt_to_model: str | None = None
    computed_aggregate: float | int | str | None = None


_FIELDS = tuple(f.name for f in dataclasses.fields(SUTOutput))


class CaseView:
    """What the SUT may see of a case: ``id`` (opaque), ``question`` and ``sources``.

    Immutable, with no ``__dict__``; its repr, pickle and attributes carry nothing else. The harness
    builds it; an adapter only reads it.

    Args:
        opaque_id: A random token drawn per run (read back as ``id``).
        question: The question to answer.
        sources: The case's frozen passages (empty for a case that retrieves from a corpus).

    Attributes:
        id: An opaque token, stable within one run, unrelated to the readable case id.
        question: The question to answer.
        sources: The frozen retrieval fixture: ``Source`` objects with ``id``, ``text`` and an
            optional ``title``.
    """

    __slots__ = ("_id", "_question", "_sources")
    _id: str
    _question: str
    _sources: tuple[Source, ...]

    def __init__(self, opaque_id: str, question: str, sources: tuple[Source, ...]) -> None:
        _fill(self, opaque_id, question, tuple(Source(s.id, s.text, s.title) for s in sources))

    @property
    def id(self) -> str:
        """An opaque token, stable within one run, unrelated to the readable case id."""
        return self._id

    @property
    def question(self) -> str:
        return self._question

    @property
    def sources(self) -> tuple[Source, ...]:
        return self._sources

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("CaseView is read-only")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("CaseView is read-only")

    def __reduce__(self) -> tuple[Any, ...]:
        return (CaseView, (self._id, self._question, self._sources))

    def __repr__(self) -> str:
        return f"CaseView(id={self._id!r}, question={self._question!r}, sources=<{len(self._sources)} sources>)"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CaseView) and self.__reduce__() == other.__reduce__()

    def __hash__(self) -> int:
        return hash((self._id, self._question))


def _fill(view: CaseView, opaque_id: str, question: str, sources: tuple[Source, ...]) -> CaseView:
    object.__setattr__(view, "_id", opaque_id)
    object.__setattr__(view, "_question", question)
    object.__setattr__(view, "_sources", sources)
    return view


Payload = tuple[str, str, tuple[tuple[str, str, "str | None"], ...]]


def make_payload(case: GoldenCase) -> Payload:
    """What crosses the boundary for one case: a fresh random opaque id, the question and the sources,
    as plain tuples. The caller keeps the mapping from the opaque id back to the case."""
    return (secrets.token_hex(8), case.question, tuple((s.id, s.text, s.title) for s in case.sources))


def view_of(payload: Payload) -> CaseView:
    opaque_id, question, sources = payload
    # The sources are made here for this view alone, so the view takes them without another copy.
    return _fill(CaseView.__new__(CaseView), opaque_id, question, tuple(Source(i, t, title) for i, t, title in sources))


def make_view(case: GoldenCase) -> CaseView:
    """A fresh view of a case with a new random opaque id (the caller keeps the mapping)."""
    return view_of(make_payload(case))


@runtime_checkable
class SystemAdapter(Protocol):
    """Anything with ``answer(case: CaseView) -> SUTOutput`` is a system adapter. ``answer`` may be
    ``async def``; it is awaited."""

    def answer(self, case: CaseView) -> SUTOutput:
        """Answer one case.

        Args:
            case: What the system may see of the case: its opaque id, question and sources.

        Returns:
            The system's answer, citations and retrieval for this case.
        """
        ...


MAX_TEXT = MAX_PASSAGE_CHARS  # characters in one answer, claim, prompt or passage before the output is refused
MAX_PASSAGES = 1000  # passages in one output


def output_to_plain(output: Any) -> dict[str, Any]:
    """An adapter's return value as plain JSON-ready data (run inside the worker). Whatever it is, the
    harness validates the plain data again with ``output_row``: the worker is not trusted."""
    if not isinstance(output, SUTOutput):
        return {"not_output": type(output).__name__}

    def plain(value: Any) -> Any:  # str, int and float subclasses become the plain type (their methods are not called)
        kind = type(value)
        if kind is str or value is None or kind is bool:
            return value
        if kind is list or kind is tuple:  # the common containers, without the checks below
            return {"__type__": kind.__name__, "items": [v if type(v) is str else plain(v) for v in value]}
        if isinstance(value, str):
            return str.encode(value, "utf-8", "surrogatepass").decode("utf-8", "surrogatepass")
        if isinstance(value, int):
            return (
                int.__int__(value)
                if abs(int.__int__(value)) < 10**300
                else {"__type__": "an integer too large to compare"}
            )
        if isinstance(value, float):
            value = float.__float__(value)
            return value if math.isfinite(value) else {"__type__": f"non-finite float {value!r}"}
        if isinstance(value, Citation):
            return {"source_id": plain(value.source_id), "claim": plain(value.claim)}
        if isinstance(value, (Passage, Source)):
            return {"passage": {"id": plain(value.id), "text": plain(value.text), "title": plain(value.title)}}
        if isinstance(value, (list, tuple)):
            return {"__type__": type(value).__name__, "items": [plain(v) for v in value]}
        return {"__type__": type(value).__name__}

    return {name: plain(getattr(output, name, None)) for name in _FIELDS}


_FINGERPRINT = json.JSONEncoder(sort_keys=True, ensure_ascii=False)  # json.dumps with these makes one a call


def output_fingerprint(answer: str, citations: list[dict[str, str]], abstained: bool, error: str | None) -> str:
    """A short hash of what a person judging this output reads: answer, citations, abstention, error.
    (Its canonical form keeps the older key ``snippet_id``, so labels written against earlier runs stay valid.)"""
    legacy = [{"snippet_id": c["source_id"], "claim": c["claim"]} for c in citations]
    canon = _FINGERPRINT.encode([answer, legacy, abstained, error])
    return hashlib.sha256(canon.encode()).hexdigest()[:16]


OUTPUT_SCHEMA = {
    "case_id": "text",
    "answer": "text",
    "citations": "object",
    "retrieved_ids": "object",
    "passages": "object",
    "abstained": "bool",
    "model_was_called": "bool",
    "prompt_to_model": "text",
    "computed_aggregate": "object",
    "error": "text",
    "latency_s": "float",
    "logs": "text",
    "output_fingerprint": "text",
}


def output_row(
    case_id: str, fields: dict[str, Any] | None, error: str | None, latency: float, logs: str = ""
) -> dict[str, Any]:
    """One row of the outputs frame: a well-formed output, or a failed case with its reason."""
    if fields is None or error is not None:
        fields = vars(SUTOutput())  # every field's default, fresh
        error = error or "no output"
    row = dict(case_id=case_id, **fields, error=error, latency_s=float(latency), logs=logs)
    row["output_fingerprint"] = output_fingerprint(row["answer"], row["citations"], row["abstained"], error)
    return row
