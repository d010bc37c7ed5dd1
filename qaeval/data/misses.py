"""A production miss into the living split: one permanent regression case per real failure.

A miss file is one JSON object in the golden case's field names, without ``id`` and ``split``
(assigned); ``difficulty`` defaults to single-hop and ``adversarial`` to ``production-miss``; ``answer``,
what the system said, is shown back but not stored. ``add_case`` numbers it after the highest id in use
(``single-0008``, ``abstain-0004``), checks it with the whole suite as strictly as a load, refuses one
whose question and passages are already a case, and rewrites ``living.jsonl`` atomically.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from qaeval.core.errors import DatasetError, Problem
from qaeval.core.files import read_bytes, read_text, write_atomic
from qaeval.core.jsonfile import dumps_canonical, json_error_text, loads_strict
from qaeval.core.text import normalize
from qaeval.data.cases import GoldenCase, Suite, build_suite, load_suite
from qaeval.data.schema import OPTIONAL, REQUIRED

MISS_FIELDS = {*REQUIRED, *OPTIONAL, "answer"} - {"id", "split"}
PREFIXES = {"single-hop": "single", "multi-hop": "multi", "aggregation": "agg"}
LIVING = "living.jsonl"


def case_prefix(case: dict[str, Any]) -> str:
    if case.get("expected_behavior") == "unanswerable_must_abstain":
        return "abstain"
    return PREFIXES.get(case.get("difficulty", "single-hop"), "case")


def next_id(suite: Suite, prefix: str) -> str:
    numbers = [int(m.group(1)) for c in suite if (m := re.fullmatch(rf"{re.escape(prefix)}-(\d+)", c.id))]
    return f"{prefix}-{max(numbers, default=0) + 1:04d}"


def _identity(question: str, sources: list[tuple[str, str]]) -> tuple[str, frozenset[str]]:
    return normalize(question), frozenset(normalize(text) for _, text in sources)


def find_duplicate(suite: Suite, question: str, sources: list[tuple[str, str]]) -> GoldenCase | None:
    """A case with the same question and the same passages (compared as normalised text)."""
    wanted = _identity(question, sources)
    return next((c for c in suite if _identity(c.question, [(s.id, s.text) for s in c.sources]) == wanted), None)


def read_json(path: str | Path, what: str) -> Any:
    """One strict JSON value from a file; anything wrong with it is a DatasetError naming the file."""
    text = read_text(path, what)
    try:
        return loads_strict(text)
    except ValueError as exc:
        raise DatasetError(f"not valid JSON ({json_error_text(exc)})", file=str(path)) from None


def read_miss(path: str | Path) -> dict[str, Any]:
    miss = read_json(path, "miss file")
    if not isinstance(miss, dict):
        raise DatasetError("a miss file holds one JSON object", file=str(path))
    return miss


def ask_missing(miss: dict[str, Any], ask: Callable[[str], str]) -> dict[str, Any]:
    """Fill what a miss lacks by asking (``--interactive``): question, sources (a JSON file), the right
    answer (empty: must abstain), the passages that carry it, the difficulty."""
    miss = dict(miss)
    if not miss.get("question"):
        miss["question"] = ask("Question the system got wrong: ").strip()
    if not miss.get("sources"):
        path = ask('JSON file with the passages it saw ([{"id", "text", "title"?}, ...]): ').strip()
        miss["sources"] = read_json(path, "passages file")
    if "gold_answer" not in miss and miss.get("expected_behavior") != "unanswerable_must_abstain":
        gold = ask("The right answer (leave empty if the system must abstain): ").strip()
        if gold:
            miss["gold_answer"] = gold
        else:
            miss.update(expected_behavior="unanswerable_must_abstain", gold_answer=None, gold_source_ids=[])
    if "gold_source_ids" not in miss:
        ids = [s.get("id") for s in miss["sources"] if isinstance(s, dict)]
        picked = ask(f"Which passages carry it ({', '.join(map(str, ids))}; comma-separated): ")
        miss["gold_source_ids"] = [p.strip() for p in picked.split(",") if p.strip()]
    if "difficulty" not in miss:
        miss["difficulty"] = ask("Difficulty [single-hop/multi-hop/aggregation] (single-hop): ").strip() or "single-hop"
    return miss


def build_case(miss: dict[str, Any], suite: Suite, where: str = "the miss") -> dict[str, Any]:
    unknown = sorted(set(miss) - MISS_FIELDS)
    if unknown:
        raise DatasetError(
            f"unknown field(s) in the miss: {', '.join(unknown)} (an id and a split are assigned)", file=where
        )
    if "answer" in miss and not isinstance(miss["answer"], str):
        raise DatasetError("'answer' (what the system said) must be a string", file=where)
    must_abstain = miss.get("expected_behavior") == "unanswerable_must_abstain"
    case = {k: v for k, v in miss.items() if k != "answer"}
    case.setdefault("expected_behavior", "answer")
    case.setdefault("difficulty", "single-hop")
    case.setdefault("adversarial", "production-miss")
    case.setdefault("gold_source_ids", [])
    if must_abstain:
        case.setdefault("gold_answer", None)
    case["split"] = "living"
    case["id"] = next_id(suite, case_prefix(case))
    return case


def add_case(
    data_dir: str | Path, miss: dict[str, Any] | str | Path, *, ask: Callable[[str], str] | None = None
) -> tuple[str, Path]:
    """Append one production miss to ``DIR/living.jsonl``; returns (its new id, the file). The folder's
    lock (``accept`` takes it too) is held from reading the suite to writing the file, so two writers
    never number the same case nor lose one; the questions of ``--interactive`` are asked before."""
    from qaeval.core.locks import holding_the_folder

    root = Path(data_dir)
    load_suite(root)  # a folder that does not load stops here, before anything is asked
    raw = read_miss(miss) if isinstance(miss, (str, Path)) else dict(miss)
    where = str(miss) if isinstance(miss, (str, Path)) else "the miss"
    if ask is not None:
        raw = ask_missing(raw, ask)
    with holding_the_folder(root):
        return _add_case(root, raw, where)


def _add_case(root: Path, raw: dict[str, Any], where: str) -> tuple[str, Path]:
    suite = load_suite(root)  # again, under the lock: what another writer added is counted
    case = build_case(raw, suite, where)
    sources = case.get("sources")
    if isinstance(case.get("question"), str) and isinstance(sources, list):
        pairs = [
            (str(s.get("id")), s["text"]) for s in sources if isinstance(s, dict) and isinstance(s.get("text"), str)
        ]
        duplicate = find_duplicate(suite, case["question"], pairs)
        if duplicate is not None:
            raise DatasetError(
                f"this miss is already in the suite as {duplicate.id} ({duplicate.file}:{duplicate.line}): "
                "same question, same passages",
                file=where,
            )
    target = root / LIVING
    existing = read_bytes(target) if target.exists() else b""
    line_number = (
        existing.decode("utf-8-sig", errors="replace").count("\n")
        + (0 if existing.endswith(b"\n") or not existing else 1)
        + 1
    )
    entries = [(c.file, c.line, c.to_raw()) for c in suite] + [(str(target), line_number, case)]
    try:
        build_suite(entries, str(root))  # the whole suite, with the new case, as strictly as a load
    except DatasetError as exc:
        mine = [p for p in exc.problems if p.file == str(target) and p.line == line_number]
        raise DatasetError([Problem(where, None, p.message) for p in mine] or exc.problems) from None
    if existing and not existing.endswith(b"\n"):
        existing += b"\n"
    write_atomic(target, existing + (dumps_canonical(case) + "\n").encode("utf-8"))
    load_suite(root)  # what was written loads
    return case["id"], target
