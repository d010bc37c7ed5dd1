"""The boundary between the harness and the system under test (SUT).

The SUT sees a ``CaseView`` and nothing else: an opaque id, the question and the case's sources. The
gold answer, gold sources, expected behaviour, difficulty, split, adversarial tag, checkpoints and even
the readable case id (a label too: ``abstain-0006`` says what is expected) stay on the harness side.
The opaque id is a random token drawn per run; the mapping back to the readable id lives in the runner
and is not reachable from the view.

The SUT answers with a ``SUTOutput``.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from qaeval.cases import GoldenCase, Source


@dataclass(frozen=True)
class Citation:
    """One citation: the snippet the SUT points at and the part of its answer that snippet supports."""

    snippet_id: str
    claim: str


@dataclass
class SUTOutput:
    """What a system under test returns for one case.

    answer              the answer text ("" when abstaining)
    citations           list of Citation
    retrieved_ids       snippet ids the system retrieved, best first
    abstained           True when the system declined to answer
    model_was_called    True when a language model was invoked for this case
    prompt_to_model     the exact prompt sent to the model, or None when none was sent
    computed_aggregate  a number (or text) the system computed for aggregation questions, else None
    """

    answer: str = ""
    citations: list[Citation] = field(default_factory=list)
    retrieved_ids: list[str] = field(default_factory=list)
    abstained: bool = False
    model_was_called: bool = False
    prompt_to_model: str | None = None
    computed_aggregate: float | int | str | None = None


class CaseView:
    """What the SUT may see of a case: ``id`` (opaque), ``question`` and ``sources``.

    Immutable, with no ``__dict__``; its repr, pickle and attributes carry nothing else.
    """

    __slots__ = ("_id", "_question", "_sources")

    def __init__(self, opaque_id: str, question: str, sources: tuple[Source, ...]) -> None:
        object.__setattr__(self, "_id", opaque_id)
        object.__setattr__(self, "_question", question)
        object.__setattr__(self, "_sources", tuple(Source(s.id, s.text, s.title) for s in sources))

    @property
    def id(self) -> str:
        """An opaque token, stable within one run, unrelated to the readable case id."""
        return self._id

    @property
    def question(self) -> str:
        return self._question

    @property
    def sources(self) -> tuple[Source, ...]:
        """The frozen retrieval fixture: snippets with ``id``, ``text`` and optional ``title``."""
        return self._sources

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("CaseView is read-only")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("CaseView is read-only")

    def __reduce__(self) -> tuple[Any, ...]:
        return (CaseView, (self._id, self._question, self._sources))

    def __repr__(self) -> str:
        return f"CaseView(id={self._id!r}, question={self._question!r}, sources=<{len(self._sources)} snippets>)"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CaseView) and (self._id, self._question, self._sources) == (
            other._id, other._question, other._sources)

    def __hash__(self) -> int:
        return hash((self._id, self._question))


def make_view(case: GoldenCase) -> CaseView:
    """A fresh view of a case with a new random opaque id (the caller keeps the mapping)."""
    return CaseView(secrets.token_hex(8), case.question, case.sources)


@runtime_checkable
class SystemAdapter(Protocol):
    """Anything with ``answer(case: CaseView) -> SUTOutput`` is a system adapter."""

    def answer(self, case: CaseView) -> SUTOutput: ...


def output_problems(output: Any) -> list[str]:
    """Why an adapter's return value is not a well-formed SUTOutput (empty when it is)."""
    if not isinstance(output, SUTOutput):
        return [f"adapter returned {type(output).__name__}, not SUTOutput"]
    problems = []
    if not isinstance(output.answer, str):
        problems.append(f"answer is {type(output.answer).__name__}, not str")
    if not isinstance(output.citations, list):
        problems.append(f"citations is {type(output.citations).__name__}, not a list")
    else:
        for i, c in enumerate(output.citations):
            if not isinstance(c, Citation):
                problems.append(f"citations[{i}] is {type(c).__name__}, not Citation")
            elif not isinstance(c.snippet_id, str) or not isinstance(c.claim, str):
                problems.append(f"citations[{i}] must have str snippet_id and claim")
    if not isinstance(output.retrieved_ids, list):
        problems.append(f"retrieved_ids is {type(output.retrieved_ids).__name__}, not a list")
    elif not all(isinstance(r, str) for r in output.retrieved_ids):
        problems.append("retrieved_ids must hold only strings")
    for flag in ("abstained", "model_was_called"):
        if not isinstance(getattr(output, flag), bool):
            problems.append(f"{flag} is {type(getattr(output, flag)).__name__}, not bool")
    if output.prompt_to_model is not None and not isinstance(output.prompt_to_model, str):
        problems.append("prompt_to_model must be a str or None")
    agg = output.computed_aggregate
    if agg is not None and (isinstance(agg, bool) or not isinstance(agg, (int, float, str))):
        problems.append("computed_aggregate must be a number, a str or None")
    return problems
