"""Turning public QA datasets into golden cases, for trying qaeval on real text.

``squad2_cases`` reads a SQuAD 2.0 file (official format) and builds one case per question: the
paragraph the question was written on is the gold source, and the next paragraphs of the same article
are near-miss distractors (same topic, same vocabulary). SQuAD 2.0's unanswerable questions were
written to look answerable from that very paragraph, so they become must-abstain cases that are much
harder than an out-of-corpus question. None of these files ships with qaeval.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from qaeval.errors import DatasetError

FORMATS = ("squad2", "hotpotqa", "musique", "ragas", "wice", "expertqa", "ares")


def squad2_cases(path: str | Path, *, limit: int | None = None, distractors: int = 5,
                 split: str = "frozen") -> list[dict[str, Any]]:
    """Golden case dicts from a SQuAD 2.0 JSON file (raises DatasetError when absent or malformed)."""
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"SQuAD 2.0 file not found: {path} (it is not shipped with qaeval)", file=str(path))
    try:
        articles = json.loads(path.read_text(encoding="utf-8"))["data"]
    except (ValueError, KeyError, TypeError) as exc:
        raise DatasetError(f"not a SQuAD 2.0 file: {exc}", file=str(path)) from None
    cases: list[dict[str, Any]] = []
    for a, article in enumerate(articles):
        paragraphs = article["paragraphs"]
        for p, paragraph in enumerate(paragraphs):
            others = [(p + k) % len(paragraphs) for k in range(1, distractors + 1) if len(paragraphs) > k]
            fixture = [p, *others]
            sources = [{"id": f"a{a}p{i}", "title": article.get("title", ""), "text": paragraphs[i]["context"]}
                       for i in sorted(set(fixture))]
            for qa in paragraph["qas"]:
                impossible = bool(qa.get("is_impossible")) or not qa.get("answers")
                cases.append({
                    "id": f"squad2-{qa['id']}",
                    "question": qa["question"].strip() or "(empty question)",
                    "sources": sources,
                    "gold_answer": None if impossible else qa["answers"][0]["text"],
                    "gold_source_ids": [] if impossible else [f"a{a}p{p}"],
                    "expected_behavior": "unanswerable_must_abstain" if impossible else "answer",
                    "difficulty": "single-hop",
                    "split": split,
                    "adversarial": "squad2-unanswerable" if impossible else "squad2",
                })
                if limit is not None and len(cases) >= limit:
                    return cases
    return cases


def write_jsonl(cases: list[dict[str, Any]], folder: str | Path, name: str = "cases.jsonl") -> Path:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    with path.open("w", encoding="utf-8") as f:
        for case in cases:
            f.write(json.dumps(case, ensure_ascii=False) + "\n")
    return path
