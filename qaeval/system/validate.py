"""What a system's output must be, checked field by field: ``validate_plain`` takes the plain JSON an
adapter's worker sent and returns the output a run keeps, or every problem with its field named. Nothing
is repaired or guessed."""

from __future__ import annotations

import json
import sys
from collections import Counter
from typing import Any

from qaeval.core.text import not_unicode
from qaeval.system.contract import MAX_PASSAGES, MAX_TEXT, output_to_plain


def _type_name(value: Any) -> str:
    if isinstance(value, dict) and "__type__" in value:
        return str(value["__type__"])
    return type(value).__name__


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
    if repeated := _repeated("retrieved_ids", items):
        return [], repeated
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
    if repeated := _repeated("passages", [p["id"] for p in passages]):
        return [], repeated
    return passages, []


def _repeated(name: str, ids: list[str]) -> list[str]:
    if len(set(ids)) == len(ids):
        return []
    dupes = sorted(i for i, n in Counter(ids).items() if n > 1)
    return [f"{name} lists {', '.join(repr(d) for d in dupes)} more than once"]


def output_problems(output: Any) -> list[str]:
    """Why an adapter's return value is not a well-formed SUTOutput (empty when it is)."""
    return validate_plain(json.loads(json.dumps(output_to_plain(output))))[1]
