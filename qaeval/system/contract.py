"""The contract between the harness and the system under test (SUT).

The SUT sees a ``CaseView`` and nothing else: an opaque id, the question and the case's sources. The
gold answer, gold sources, expected behaviour, difficulty, split, adversarial tag, checkpoints and even
the readable case id (a label too: ``abstain-0006`` says what is expected) stay in the harness's
process. The opaque id is a random token drawn per run; the mapping back lives in the harness.

The SUT answers with a ``SUTOutput``. What comes back is checked before anything scores it
(``output_row``): wrong types, a source id retrieved or a citation given twice, an abstention that
still carries an answer or a citation, a number that is not finite, passages that are not
``Passage`` objects or name an id twice, ``retrieved_ids`` that disagree with ``passages`` are
*malformed output*, a failed case with the reason, never a crash and never a score.
"""

from __future__ import annotations

import hashlib
import json
import math
import secrets
import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from qaeval.core.text import not_unicode
from qaeval.data.cases import GoldenCase, Source
from qaeval.data.corpus import MAX_PASSAGE_CHARS, Passage


class Citation:
    """One citation: the source the SUT points at and the part of its answer that source supports.

    ``Citation(source_id, claim)``.
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

    answer              the answer text ("" when abstaining)
    citations           list of Citation (none when abstaining)
    retrieved_ids       source ids the system retrieved, best first, each once (the ranking; taken
                        from ``passages`` when only those are given)
    passages            list of Passage: what the system retrieved, in rank order, with the text it
                        used (required for ids its own index holds that are in no source or corpus)
    abstained           True when the system declined to answer
    model_was_called    True when a language model was invoked for this case
    prompt_to_model     the exact prompt sent to the model, or None when none was sent
    computed_aggregate  a number (or text) the system computed for aggregation questions, else None
    """

    answer: str = ""
    citations: list[Citation] = field(default_factory=list)
    retrieved_ids: list[str] = field(default_factory=list)
    passages: list[Passage] = field(default_factory=list)
    abstained: bool = False
    model_was_called: bool = False
    prompt_to_model: str | None = None
    computed_aggregate: float | int | str | None = None


class CaseView:
    """What the SUT may see of a case: ``id`` (opaque), ``question`` and ``sources``.

    Immutable, with no ``__dict__``; its repr, pickle and attributes carry nothing else.
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
        """The frozen retrieval fixture: sources with ``id``, ``text`` and optional ``title``."""
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
        return isinstance(other, CaseView) and (self._id, self._question, self._sources) == (
            other._id,
            other._question,
            other._sources,
        )

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

    def answer(self, case: CaseView) -> SUTOutput: ...


# --------------------------------------------------------------------------- what comes back

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

    return {
        name: plain(getattr(output, name, None))
        for name in (
            "answer",
            "citations",
            "retrieved_ids",
            "passages",
            "abstained",
            "model_was_called",
            "prompt_to_model",
            "computed_aggregate",
        )
    }


def _type_name(value: Any) -> str:
    if isinstance(value, dict) and "__type__" in value:
        return str(value["__type__"])
    return {
        type(None): "NoneType",
        dict: "dict",
        list: "list",
        str: "str",
        bool: "bool",
        int: "int",
        float: "float",
    }.get(type(value), type(value).__name__)


def _items(value: Any, kind: str) -> list[Any] | None:
    if isinstance(value, dict) and value.get("__type__") == kind and isinstance(value.get("items"), list):
        return value["items"]
    return None


def validate_plain(data: Any) -> tuple[dict[str, Any] | None, list[str]]:
    """Check plain output data (from ``output_to_plain``, across the process boundary) against the
    contract. Returns (fields, []) when it is well formed, else (None, problems)."""
    if not isinstance(data, dict):
        return None, [f"the worker sent {type(data).__name__}, not an output"]
    if "not_output" in data:
        return None, [f"adapter returned {data['not_output']}, not SUTOutput"]
    answer = data.get("answer")
    problems = _answer_problems(answer)
    citations, found = _citations(data.get("citations"), answer)
    problems += found
    passages, found = _passages(data.get("passages"))
    problems += found
    retrieved, found = _retrieved(data.get("retrieved_ids"), passages)
    problems += found
    problems += _scalar_problems(data)
    if data.get("abstained") is True and not problems:
        problems += _abstention_problems(answer, citations)
    prompt, agg = data.get("prompt_to_model"), data.get("computed_aggregate")
    if not problems:
        texts = [
            answer,
            prompt,
            agg,
            *retrieved,
            *(v for c in citations for v in c.values()),
            *(v for p in passages for v in p.values()),
        ]
        if any(not_unicode(t) for t in texts):
            problems.append("a string in the output is not valid Unicode text (an unpaired surrogate)")
    if problems:
        return None, problems
    return dict(
        answer=answer,
        citations=citations,
        retrieved_ids=retrieved,
        passages=passages,
        abstained=data["abstained"],
        model_was_called=data["model_was_called"],
        prompt_to_model=prompt,
        computed_aggregate=agg,
    ), []


def _answer_problems(answer: Any) -> list[str]:
    if not isinstance(answer, str):
        return [f"answer is {_type_name(answer)}, not str"]
    if len(answer) > MAX_TEXT:
        return [f"answer is {len(answer)} characters long (limit {MAX_TEXT})"]
    return []


def _citations(value: Any, answer: Any) -> tuple[list[dict[str, str]], list[str]]:
    items = _items(value, "list")
    if items is None:
        return [], [f"citations is {_type_name(value)}, not a list"]
    if len(items) > MAX_PASSAGES:
        return [], [f"citations holds {len(items)} citations (limit {MAX_PASSAGES})"]
    citations: list[dict[str, str]] = []
    problems: list[str] = []
    seen: set[tuple[str, str]] = set()
    for i, c in enumerate(items):
        if not (isinstance(c, dict) and set(c) == {"source_id", "claim"}):
            problems.append(f"citations[{i}] is {_type_name(c)}, not Citation")
        elif not isinstance(c["source_id"], str) or not isinstance(c["claim"], str):
            problems.append(f"citations[{i}] must have a str source_id and a str claim")
        elif (c["source_id"], c["claim"]) in seen:
            problems.append(f"citations[{i}] repeats citation of {c['source_id']!r} with the same claim")
        elif len(c["claim"]) > MAX_TEXT:
            problems.append(f"citations[{i}].claim is too long")
        else:
            seen.add((c["source_id"], c["claim"]))
            claim = answer if c["claim"] == answer else c["claim"]  # one string, not two equal copies
            citations.append({"source_id": sys.intern(c["source_id"]), "claim": claim})
    return citations, problems


def _retrieved(value: Any, passages: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """The ranking: ``retrieved_ids``, or the passages' ids when only they were given."""
    items = _items(value, "list")
    if items is None:
        return [], [f"retrieved_ids is {_type_name(value)}, not a list"]
    if len(items) > MAX_PASSAGES:
        return [], [f"retrieved_ids holds {len(items)} ids (limit {MAX_PASSAGES})"]
    if not all(isinstance(r, str) for r in items):
        return [], ["retrieved_ids must hold only strings"]
    dupes = sorted(r for r, n in Counter(items).items() if n > 1) if len(set(items)) < len(items) else []
    if dupes:
        return [], [f"retrieved_ids lists {', '.join(repr(d) for d in dupes)} more than once"]
    retrieved = [sys.intern(r) for r in items]
    if passages and not retrieved:
        return [p["id"] for p in passages], []
    if passages and retrieved != [p["id"] for p in passages]:
        return [], [
            "retrieved_ids and passages disagree (passages are the ranking with its text: "
            "give the same ids in the same order, or passages alone)"
        ]
    return retrieved, []


def _scalar_problems(data: dict[str, Any]) -> list[str]:
    problems = [
        f"{flag} is {_type_name(data.get(flag))}, not bool"
        for flag in ("abstained", "model_was_called")
        if not isinstance(data.get(flag), bool)
    ]
    prompt = data.get("prompt_to_model")
    if prompt is not None and not isinstance(prompt, str):
        problems.append(f"prompt_to_model is {_type_name(prompt)}, not a str or None")
    elif isinstance(prompt, str) and len(prompt) > MAX_TEXT:
        problems.append(f"prompt_to_model is {len(prompt)} characters long (limit {MAX_TEXT})")
    agg = data.get("computed_aggregate")
    if agg is not None and (isinstance(agg, bool) or not isinstance(agg, (int, float, str))):
        problems.append(f"computed_aggregate is {_type_name(agg)}, not a number, a str or None")
    elif isinstance(agg, int) and not abs(agg) < 2**63:  # a record keeps 64-bit whole numbers
        problems.append(
            f"computed_aggregate is a whole number of {agg.bit_length()} bits, out of range (a record "
            "keeps 64-bit whole numbers; give a float or a str)"
        )
    return problems


def _abstention_problems(answer: Any, citations: list[dict[str, str]]) -> list[str]:
    problems = []
    if isinstance(answer, str) and answer.strip():
        problems.append("abstained but still returned answer text (an abstention carries no answer)")
    if citations:
        problems.append("abstained but still cited sources (an abstention carries no citation)")
    return problems


def _passage_problem(i: int, item: Any) -> str | None:
    if not (isinstance(item, dict) and set(item) == {"passage"} and isinstance(item["passage"], dict)):
        return f"passages[{i}] is {_type_name(item)}, not Passage"
    p = item["passage"]
    if not set(p) <= {"id", "text", "title"}:
        return f"passages[{i}] has unknown fields {sorted(set(p) - {'id', 'text', 'title'})}"
    if not isinstance(p.get("id"), str) or not p["id"].strip():
        return f"passages[{i}].id must be a non-empty str"
    if not isinstance(p.get("text"), str) or not p["text"].strip():
        return f"passages[{i}].text must be a non-empty str"
    if p.get("title") is not None and not isinstance(p["title"], str):
        return f"passages[{i}].title is {_type_name(p['title'])}, not a str or None"
    if len(p["text"]) + len(p.get("title") or "") > MAX_TEXT:
        return f"passages[{i}] ({p['id']!r}) is too long (limit {MAX_TEXT} characters)"
    return None


def _passages(value: Any) -> tuple[list[dict[str, Any]], list[str]]:
    """The output's passages as {id, text, title} dicts, or the problems with them."""
    if value is None or value == {"__type__": "list", "items": []}:
        return [], []
    items = _items(value, "list")
    if items is None:
        return [], [f"passages is {_type_name(value)}, not a list"]
    if len(items) > MAX_PASSAGES:
        return [], [f"passages holds {len(items)} passages (limit {MAX_PASSAGES})"]
    problems = [why for i, item in enumerate(items) if (why := _passage_problem(i, item))]
    if problems:
        return [], problems
    passages = [
        {"id": sys.intern(p["passage"]["id"]), "text": p["passage"]["text"], "title": p["passage"].get("title")}
        for p in items
    ]
    ids = [p["id"] for p in passages]
    dupes = sorted(i for i, n in Counter(ids).items() if n > 1) if len(set(ids)) < len(ids) else []
    if dupes:
        return [], [f"passages lists {', '.join(repr(d) for d in dupes)} more than once"]
    return passages, []


def output_problems(output: Any) -> list[str]:
    """Why an adapter's return value is not a well-formed SUTOutput (empty when it is)."""
    return validate_plain(json.loads(json.dumps(output_to_plain(output))))[1]


_FINGERPRINT = json.JSONEncoder(sort_keys=True, ensure_ascii=False)  # json.dumps with these makes one a call


def output_fingerprint(answer: str, citations: list[dict[str, str]], abstained: bool, error: str | None) -> str:
    """A short hash of what a person judging this output reads: answer, citations, abstention, error.
    (Its canonical form predates the name ``source_id`` and keeps the older key, so labels written
    against earlier runs stay valid.)"""
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
        fields = dict(
            answer="",
            citations=[],
            retrieved_ids=[],
            passages=[],
            abstained=False,
            model_was_called=False,
            prompt_to_model=None,
            computed_aggregate=None,
        )
        error = error or "no output"
    row = dict(case_id=case_id, **fields, error=error, latency_s=float(latency), logs=logs)
    row["output_fingerprint"] = output_fingerprint(row["answer"], row["citations"], row["abstained"], error)
    return row
