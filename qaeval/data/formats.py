"""The mapping rules from public datasets to qaeval's formats (``qaeval.data.importers`` runs them). A
record that cannot become a case raises ``Refused`` with the reason.

squad2    One case per question: its paragraph is the gold source, the article's next paragraphs are
          distractors; ``is_impossible`` questions must be abstained on. single-hop.
hotpotqa  One source per context title; the ``supporting_facts`` titles are the gold sources, each a
          ``retrieved`` checkpoint. multi-hop; the question ``type`` is the adversarial tag.
musique   One source per paragraph; ``is_supporting`` ones are gold (and checkpoints when multi-hop);
          two or more ``question_decomposition`` steps are multi-hop; ``answerable: false`` abstains.
ragas     ``question``, ``contexts``, ``ground_truth`` or ``reference`` (or ``ground_truths``' first);
          the ``reference_contexts`` are the gold sources. single-hop.

Labelled sets (a claim, its evidence, a human faithfulness score): ``wice`` (the page's sentences one
source; supported 2, partially_supported 1, not_supported 0), ``expertqa`` (every claim with evidence;
Complete 2, Partial 1, Missing or Incomplete 0; N/A or none refused), ``ares`` (TSV: Query or Question,
Document, Answer, Answer_Faithfulness_Label 1 or [[Yes]] 2, 0 or [[No]] 0).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

from qaeval.core.jsonfile import loads_strict
from qaeval.data.streams import csv_rows, jsonl_items


class Refused(Exception):
    """A record that cannot become a case, and why (counted, never silently dropped)."""


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise Refused(f"{what} missing or empty")
    return value


def _slug(title: str, taken: set[str]) -> str:
    base = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")[:48] or "source"
    slug, n = base, 2
    while slug in taken:
        slug, n = f"{base}-{n}", n + 1
    taken.add(slug)
    return slug


def _title(article: dict[str, Any]) -> str | None:
    """An article's title when it is text (a title of another type is no title)."""
    title = article.get("title")
    return title if isinstance(title, str) and title.strip() else None


def squad2_passages(article: Any) -> Iterator[tuple[str | None, str]]:
    """(title, text) of every paragraph of an article that has text."""
    paragraphs = article.get("paragraphs") if isinstance(article, dict) else None
    for paragraph in paragraphs if isinstance(paragraphs, list) else []:
        context = paragraph.get("context") if isinstance(paragraph, dict) else None
        if isinstance(context, str) and context.strip():
            yield _title(article), context


def squad2_cases(where: str, article: Any, prefix: str, split: str, distractors: int = 5) -> Iterator[tuple[str, Any]]:
    """The cases of one SQuAD article (or the reasons its questions are refused)."""
    paragraphs = article.get("paragraphs") if isinstance(article, dict) else None
    if not isinstance(paragraphs, list):
        yield where, Refused("an article without paragraphs")
        return
    for p, paragraph in enumerate(paragraphs):
        if not isinstance(paragraph, dict):
            yield f"{where}, paragraph {p + 1}", Refused("a paragraph that is not an object")
            continue
        qas = paragraph.get("qas") or []
        if not isinstance(qas, list):
            yield f"{where}, paragraph {p + 1}", Refused("questions (qas) that are not a list")
            continue
        others = [(p + k) % len(paragraphs) for k in range(1, distractors + 1) if len(paragraphs) > k]
        try:
            sources = [
                {
                    "id": f"p{i}",
                    "title": _title(article),
                    "text": _text(
                        paragraphs[i].get("context") if isinstance(paragraphs[i], dict) else None, "paragraph context"
                    ),
                }
                for i in sorted({p, *others})
            ]
        except Refused as exc:
            for _ in qas:
                yield where, exc
            continue
        for qa in qas:
            here = f"{where}, question {qa.get('id', '?') if isinstance(qa, dict) else '?'}"
            try:
                yield here, _squad2_case(qa, sources, f"p{p}", prefix, split)
            except Refused as exc:
                yield here, exc


def _squad2_case(qa: Any, sources: list[dict[str, Any]], gold_id: str, prefix: str, split: str) -> dict[str, Any]:
    if not isinstance(qa, dict):
        raise Refused("a question that is not an object")
    question = _text(qa.get("question"), "question").strip()
    impossible = qa.get("is_impossible", False)
    if not isinstance(impossible, bool):  # "no" is a non-empty string: true to bool()
        raise Refused("is_impossible that is not true or false")
    answers = [a.get("text") for a in qa.get("answers") or [] if isinstance(a, dict)]
    if not impossible and not any(isinstance(a, str) and a.strip() for a in answers):
        raise Refused("answerable question without an answer")
    gold = None if impossible else next(a for a in answers if isinstance(a, str) and a.strip())
    return {
        "id": f"{prefix}-{_text(qa.get('id'), 'question id')}",
        "question": question,
        "sources": [{k: v for k, v in s.items() if v is not None} for s in sources],
        "gold_answer": gold,
        "gold_source_ids": [] if impossible else [gold_id],
        "expected_behavior": "unanswerable_must_abstain" if impossible else "answer",
        "difficulty": "single-hop",
        "split": split,
        "adversarial": "squad2-unanswerable" if impossible else "squad2",
    }


def _items_of(record: Any, key: str, what: str) -> list[Any]:
    """A record's non-empty list field, or Refused."""
    if not isinstance(record, dict):
        raise Refused("a record that is not an object")
    value = record.get(key)
    if not isinstance(value, list) or not value:
        raise Refused(f"no {what}")
    return value


def _hotpotqa_paragraph(item: Any) -> tuple[Any, str]:
    """(title, text) of one context entry, the sentences joined; Refused when it is not [title, sentences]."""
    if not (isinstance(item, list) and len(item) == 2 and isinstance(item[1], list)):
        raise Refused("a context entry that is not [title, sentences]")
    return item[0], "".join(s for s in item[1] if isinstance(s, str)).strip()


def hotpotqa_passages(record: Any) -> Iterator[tuple[str | None, str]]:
    """(title, text) of every context paragraph of a record that has a title and text."""
    context = record.get("context") if isinstance(record, dict) else None
    for item in context if isinstance(context, list) else []:
        try:
            title, text = _hotpotqa_paragraph(item)
        except Refused:
            continue
        if isinstance(title, str) and title.strip() and text:
            yield title, text


def hotpotqa_case(record: Any, prefix: str, split: str) -> dict[str, Any]:
    context = _items_of(record, "context", "context paragraphs")
    taken: set[str] = set()
    sources, ids = [], {}
    for item in context:
        title, text = _hotpotqa_paragraph(item)
        title = _text(title, "context title")
        if not text:
            raise Refused("an empty context paragraph")
        if title in ids:
            continue
        ids[title] = _slug(title, taken)
        sources.append({"id": ids[title], "title": title, "text": text})
    facts = record.get("supporting_facts") or []
    if not isinstance(facts, list) or not all(isinstance(f, list) and f and isinstance(f[0], str) for f in facts):
        raise Refused("a supporting fact that is not [title, sentence number]")
    supporting = [f[0] for f in facts]
    if not supporting:
        raise Refused("no supporting facts")
    missing = [t for t in supporting if t not in ids]
    if missing:
        raise Refused("a supporting title that is not among the context paragraphs")
    gold_ids = list(dict.fromkeys(ids[t] for t in supporting))
    kind = record.get("type")
    return {
        "id": f"{prefix}-{_text(record.get('_id') or record.get('id'), 'id')}",
        "question": _text(record.get("question"), "question").strip(),
        "sources": sources,
        "gold_answer": _text(record.get("answer"), "answer").strip(),
        "gold_source_ids": gold_ids,
        "expected_behavior": "answer",
        "difficulty": "multi-hop",
        "split": split,
        **({"adversarial": kind} if isinstance(kind, str) and kind else {}),
        "checkpoints": [{"kind": "retrieved", "source_id": g} for g in gold_ids],
    }


def musique_passages(record: Any) -> Iterator[tuple[str | None, str]]:
    """(title, text) of every paragraph of a record that has text."""
    paragraphs = record.get("paragraphs") if isinstance(record, dict) else None
    for p in paragraphs if isinstance(paragraphs, list) else []:
        text = p.get("paragraph_text") if isinstance(p, dict) else None
        if isinstance(text, str) and text.strip():
            yield (p["title"] if isinstance(p.get("title"), str) and p["title"] else None), text


def musique_case(record: Any, prefix: str, split: str) -> dict[str, Any]:
    paragraphs = _items_of(record, "paragraphs", "paragraphs")
    sources, gold = [], []
    for n, p in enumerate(paragraphs):
        if not isinstance(p, dict):
            raise Refused("a paragraph that is not an object")
        idx = p.get("idx", n)
        if isinstance(idx, bool) or not isinstance(idx, int):
            raise Refused("a paragraph idx that is not a whole number")
        sid = f"p{idx}"
        sources.append(
            {
                "id": sid,
                "text": _text(p.get("paragraph_text"), "paragraph text"),
                **({"title": p["title"]} if isinstance(p.get("title"), str) and p["title"] else {}),
            }
        )
        if p.get("is_supporting") is True:
            gold.append(sid)
    if len({s["id"] for s in sources}) != len(sources):
        raise Refused("two paragraphs with the same idx")
    steps = record.get("question_decomposition") or []
    if not isinstance(steps, list):
        raise Refused("a question_decomposition that is not a list")
    hops = len(steps) or 1
    answerable = record.get("answerable", True) is not False
    if answerable and not gold:
        raise Refused("an answerable question with no supporting paragraph")
    case = {
        "id": f"{prefix}-{_text(record.get('id'), 'id')}",
        "question": _text(record.get("question"), "question").strip(),
        "sources": sources,
        "gold_answer": _text(record.get("answer"), "answer").strip() if answerable else None,
        "gold_source_ids": gold if answerable else [],
        "expected_behavior": "answer" if answerable else "unanswerable_must_abstain",
        "difficulty": "multi-hop" if hops >= 2 else "single-hop",
        "split": split,
        "adversarial": f"musique-{hops}hop",
    }
    if answerable and hops >= 2:
        case["checkpoints"] = [{"kind": "retrieved", "source_id": g} for g in gold]
    return case


def _listish(value: Any, what: str) -> list[str]:
    if isinstance(value, str):
        try:
            value = loads_strict(value)
        except ValueError:
            raise Refused(f"{what} is text, not a JSON list") from None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise Refused(f"{what} is not a list of strings")
    return value


def ragas_case(record: Any, prefix: str, split: str, number: int) -> dict[str, Any]:
    from qaeval.core.text import normalize

    if not isinstance(record, dict):
        raise Refused("a row that is not an object")
    contexts = [c for c in _listish(record.get("contexts"), "contexts") if c.strip()]
    if not contexts:
        raise Refused("no contexts")
    truth = record.get("ground_truth") or record.get("reference")
    if not truth and record.get("ground_truths"):
        truth = next(iter(_listish(record["ground_truths"], "ground_truths")), None)
    truth = _text(truth, "ground_truth/reference")
    references = record.get("reference_contexts")
    gold: list[str] = []
    if references not in (None, "", []):
        wanted = {normalize(r) for r in _listish(references, "reference_contexts")}
        gold = [f"c{i}" for i, c in enumerate(contexts, start=1) if normalize(c) in wanted]
        if not gold:
            raise Refused("reference_contexts that match none of the contexts")
    sources = [{"id": f"c{i}", "text": c} for i, c in enumerate(contexts, start=1)]
    return {
        "id": f"{prefix}-{number:05d}",
        "question": _text(record.get("question") or record.get("user_input"), "question"),
        "sources": sources,
        "gold_answer": truth.strip(),
        "gold_source_ids": gold,
        "expected_behavior": "answer",
        "difficulty": "single-hop",
        "split": split,
    }


# --------------------------------------------------------------------------- labelled sets


def _labelled(
    cid: str, question: str, sources: list[dict[str, Any]], answer: str, score: int, reason: str
) -> dict[str, Any]:
    return {
        "id": cid,
        "question": question,
        "sources": sources,
        "output": {
            "answer": answer,
            "citations": [{"source_id": s["id"], "claim": answer} for s in sources],
            "abstained": False,
        },
        "labels": {"faithfulness": {"score": score, "reason": reason}},
    }


WICE_SCORES = {"supported": 2, "partially_supported": 1, "not_supported": 0}
EXPERTQA_SCORES = {"Complete": 2, "Partial": 1, "Missing": 0, "Incomplete": 0}
ARES_SCORES = {"1": 2, "1.0": 2, "[[Yes]]": 2, "Yes": 2, "0": 0, "0.0": 0, "[[No]]": 0, "No": 0}


def refusing(where: str, build: Callable[[], Any]) -> tuple[str, Any]:
    """(where, what ``build`` made, or the Refused it raised)."""
    try:
        return where, build()
    except Refused as exc:
        return where, exc


def _wice_row(record: Any, where: str, prefix: str) -> dict[str, Any]:
    if not isinstance(record, dict):
        raise Refused("a record that is not an object")
    label = record.get("label")
    if label not in WICE_SCORES:
        raise Refused(f"label {label!r} is not supported/partially_supported/not_supported")
    evidence = record.get("evidence")
    if not isinstance(evidence, list) or not any(isinstance(s, str) and s.strip() for s in evidence):
        raise Refused("no evidence text")
    text = " ".join(s.strip() for s in evidence if isinstance(s, str) and s.strip())
    meta: dict[str, Any] = record["meta"] if isinstance(record.get("meta"), dict) else {}
    cid = f"{prefix}-{meta.get('id') or where.rsplit(':', 1)[-1]}"
    claim = _text(record.get("claim"), "claim")
    return _labelled(cid, "", [{"id": "page", "text": text}], claim, WICE_SCORES[label], f"WiCE: {label}")


def wice_rows(path: Path, prefix: str) -> Iterator[tuple[str, Any]]:
    for where, record in jsonl_items(path):
        yield refusing(where, partial(_wice_row, record, where, prefix))


def _expertqa_row(claim: Any, question: str, cid: str) -> dict[str, Any]:
    if not isinstance(claim, dict):
        raise Refused("a claim that is not an object")
    support = claim.get("support")
    if support not in EXPERTQA_SCORES:
        raise Refused(f"support {support!r} is not a judgement of the evidence (N/A or none)")
    evidence = [e for e in claim.get("evidence") or [] if isinstance(e, str) and e.strip()]
    if not evidence:
        raise Refused("no evidence to judge the claim against")
    sources = [{"id": f"e{i}", "text": e.strip()} for i, e in enumerate(evidence, start=1)]
    answer = _text(claim.get("claim_string"), "claim")
    return _labelled(cid, question, sources, answer, EXPERTQA_SCORES[support], f"ExpertQA expert: {support}")


def expertqa_rows(path: Path, prefix: str) -> Iterator[tuple[str, Any]]:
    for where, record in jsonl_items(path):
        if not isinstance(record, dict) or not isinstance(record.get("answers"), dict):
            yield where, Refused("a record without answers")
            continue
        question = record.get("question") if isinstance(record.get("question"), str) else ""
        line = where.rsplit(":", 1)[-1]
        for system, answer in record["answers"].items():
            claims = answer.get("claims") if isinstance(answer, dict) else None
            for n, claim in enumerate(claims or [], start=1):
                cid = f"{prefix}-{line}-{re.sub(r'[^a-z0-9]+', '-', str(system).lower())}-{n}"
                yield refusing(f"{where}, {system} claim {n}", partial(_expertqa_row, claim, str(question), cid))


def _ares_row(row: dict[str, str], cid: str) -> dict[str, Any]:
    label = (row.get("Answer_Faithfulness_Label") or "").strip()
    if label not in ARES_SCORES:
        raise Refused(f"Answer_Faithfulness_Label {label!r} is not 0 or 1 (or [[No]] or [[Yes]])")
    question = _text(row.get("Query", row.get("Question")), "Query (or Question)")  # ARES's files say either
    sources = [{"id": "doc", "text": _text(row.get("Document"), "Document")}]
    answer = _text(row.get("Answer"), "Answer")
    return _labelled(cid, question, sources, answer, ARES_SCORES[label], f"ARES human label {label}")


def ares_rows(path: Path, prefix: str) -> Iterator[tuple[str, Any]]:
    for n, (where, row) in enumerate(csv_rows(path, delimiter="\t"), start=1):
        yield refusing(where, partial(_ares_row, row, f"{prefix}-{n:04d}"))
