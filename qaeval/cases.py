"""Loading golden cases: strict, complete, and reported all at once.

``load_suite(DIR)`` reads every ``*.jsonl`` file directly inside DIR (not its subfolders). Each
non-blank line is one case object. A UTF-8 byte-order mark, CRLF line endings and blank lines are
accepted; anything else that is off (a top-level array, bytes that are not UTF-8, an unknown field, a
wrong type, a bad enum value, a duplicate id, a gold source missing from the fixture, an answerable
case without a gold answer, an empty suite) is a problem. Every problem in the load is collected, each
with its file and line, and raised together as one ``DatasetError`` before anything is scored.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from qaeval.errors import DatasetError, Problem
from qaeval.trajectory import checkpoint_problems

EXPECTED_BEHAVIORS = ("answer", "unanswerable_must_abstain")
DIFFICULTIES = ("single-hop", "multi-hop", "aggregation")
SPLITS = ("frozen", "living")

REQUIRED = ("id", "question", "sources", "gold_source_ids", "expected_behavior", "difficulty", "split")
OPTIONAL = ("gold_answer", "adversarial", "checkpoints")
SOURCE_FIELDS = ("id", "text", "title")


@dataclass(frozen=True)
class Source:
    """One snippet of a case's frozen retrieval fixture."""

    id: str
    text: str
    title: str | None = None


@dataclass(frozen=True)
class GoldenCase:
    """One hand-curated case, labels included. Never handed to a system under test: see CaseView."""

    id: str
    question: str
    sources: tuple[Source, ...]
    gold_answer: str | None
    gold_source_ids: tuple[str, ...]
    expected_behavior: str
    difficulty: str
    split: str
    adversarial: str | None = None
    checkpoints: tuple[Mapping[str, Any], ...] = ()
    file: str = ""
    line: int = 0
    fingerprint: str = field(default="", compare=False)

    @property
    def must_abstain(self) -> bool:
        return self.expected_behavior == "unanswerable_must_abstain"

    @property
    def multi_step(self) -> bool:
        return self.difficulty in ("multi-hop", "aggregation")


CASE_COLUMNS = [
    "id", "split", "difficulty", "expected_behavior", "must_abstain", "adversarial", "question",
    "gold_answer", "gold_source_ids", "n_sources", "checkpoints", "fingerprint", "file", "line",
]


@dataclass(frozen=True)
class Suite:
    """The cases of one load, in file then line order."""

    cases: tuple[GoldenCase, ...]
    root: str

    def __len__(self) -> int:
        return len(self.cases)

    def __iter__(self) -> Iterator[GoldenCase]:
        return iter(self.cases)

    def __getitem__(self, case_id: str) -> GoldenCase:
        for case in self.cases:
            if case.id == case_id:
                return case
        raise KeyError(case_id)

    @property
    def fingerprint(self) -> str:
        """sha256 over the sorted case fingerprints: changes when any case's content changes."""
        digest = hashlib.sha256()
        for fp in sorted(f"{c.id}\0{c.fingerprint}" for c in self.cases):
            digest.update(fp.encode())
        return digest.hexdigest()

    def select(self, *, split: str | None = None) -> Suite:
        """A sub-suite (for example the frozen split that drift re-runs)."""
        kept = tuple(c for c in self.cases if split is None or c.split == split)
        if not kept:
            raise DatasetError(f"no case in split {split!r}", file=self.root)
        return Suite(kept, self.root)

    def to_frame(self) -> pd.DataFrame:
        """One row per case. Columns: see ``CASE_COLUMNS``; list-valued columns hold Python lists."""
        rows = [
            dict(
                id=c.id, split=c.split, difficulty=c.difficulty, expected_behavior=c.expected_behavior,
                must_abstain=c.must_abstain, adversarial=c.adversarial, question=c.question,
                gold_answer=c.gold_answer, gold_source_ids=list(c.gold_source_ids),
                n_sources=len(c.sources), checkpoints=[dict(cp) for cp in c.checkpoints],
                fingerprint=c.fingerprint, file=c.file, line=c.line,
            )
            for c in self.cases
        ]
        frame = pd.DataFrame(rows, columns=CASE_COLUMNS)
        for col in ("gold_answer", "adversarial"):  # keep None as None, not NaN
            frame[col] = pd.Series([r[col] for r in rows], dtype=object, index=frame.index)
        return frame

    def sources_frame(self) -> pd.DataFrame:
        """One row per (case, snippet): case_id, source_id, title, text, is_gold."""
        rows = [
            dict(case_id=c.id, source_id=s.id, title=s.title, text=s.text, is_gold=s.id in c.gold_source_ids)
            for c in self.cases
            for s in c.sources
        ]
        return pd.DataFrame(rows, columns=["case_id", "source_id", "title", "text", "is_gold"])

    def summary(self) -> dict[str, pd.Series]:
        """Case counts by split, difficulty, expected behaviour and adversarial tag."""
        frame = self.to_frame()
        frame["adversarial"] = frame["adversarial"].fillna("(none)")
        return {col: frame[col].value_counts().sort_index() for col in
                ("split", "difficulty", "expected_behavior", "adversarial")}


def snippet_bodies(sources: pd.DataFrame) -> dict[str, dict[str, str]]:
    """{case_id: {snippet_id: text}} from ``Suite.sources_frame()``."""
    bodies: dict[str, dict[str, str]] = {}
    for case_id, sid, text in zip(sources["case_id"].tolist(), sources["source_id"].tolist(),
                                  sources["text"].tolist()):
        bodies.setdefault(case_id, {})[sid] = text
    return bodies


def case_fingerprint(raw: Mapping[str, Any]) -> str:
    """sha256 of a case's canonical JSON (sorted keys): the identity gate and drift check content by."""
    canon = json.dumps(raw, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canon.encode()).hexdigest()[:16]


def _is_str(value: Any, *, allow_empty: bool = False) -> bool:
    return isinstance(value, str) and (allow_empty or bool(value.strip()))


def _case_problems(raw: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    for key in raw:
        if key not in REQUIRED and key not in OPTIONAL:
            problems.append(f"unknown field {key!r}")
    for key in REQUIRED:
        if key not in raw:
            problems.append(f"missing required field {key!r}")

    if "id" in raw and not _is_str(raw["id"]):
        problems.append("'id' must be a non-empty string")
    if "question" in raw and not _is_str(raw["question"]):
        problems.append("'question' must be a non-empty string")

    source_ids: set[str] = set()
    sources = raw.get("sources")
    if "sources" in raw:
        if not isinstance(sources, list):
            problems.append("'sources' must be a list of {id, text, title?} objects")
        else:
            for i, src in enumerate(sources):
                where = f"sources[{i}]"
                if not isinstance(src, dict):
                    problems.append(f"{where} must be an object")
                    continue
                for key in src:
                    if key not in SOURCE_FIELDS:
                        problems.append(f"{where} has unknown field {key!r}")
                if not _is_str(src.get("id")):
                    problems.append(f"{where}.id must be a non-empty string")
                elif src["id"] in source_ids:
                    problems.append(f"{where}.id {src['id']!r} is not unique within the case")
                else:
                    source_ids.add(src["id"])
                if not _is_str(src.get("text")):
                    problems.append(f"{where}.text must be a non-empty string")
                if "title" in src and src["title"] is not None and not isinstance(src["title"], str):
                    problems.append(f"{where}.title must be a string")

    for key, allowed in (("expected_behavior", EXPECTED_BEHAVIORS), ("difficulty", DIFFICULTIES),
                         ("split", SPLITS)):
        if key in raw and raw[key] not in allowed:
            problems.append(f"{key!r} is {raw[key]!r}; expected one of {', '.join(allowed)}")

    must_abstain = raw.get("expected_behavior") == "unanswerable_must_abstain"
    gold = raw.get("gold_answer")
    if gold is not None and not _is_str(gold):
        problems.append("'gold_answer' must be a non-empty string or null")
    elif gold is None and not must_abstain and raw.get("expected_behavior") in EXPECTED_BEHAVIORS:
        problems.append("an answerable case needs a non-empty 'gold_answer'")

    if "gold_source_ids" in raw:
        gold_ids = raw["gold_source_ids"]
        if not isinstance(gold_ids, list) or not all(_is_str(g) for g in gold_ids):
            problems.append("'gold_source_ids' must be a list of strings")
        else:
            if len(set(gold_ids)) != len(gold_ids):
                problems.append("'gold_source_ids' lists an id twice")
            if isinstance(sources, list):
                for gid in gold_ids:
                    if gid not in source_ids:
                        problems.append(f"gold source id {gid!r} is not in the case's sources")

    if "adversarial" in raw and raw["adversarial"] is not None and not _is_str(raw["adversarial"]):
        problems.append("'adversarial' must be a non-empty string")

    if "checkpoints" in raw:
        cps = raw["checkpoints"]
        if not isinstance(cps, list):
            problems.append("'checkpoints' must be a list")
        else:
            for i, cp in enumerate(cps):
                problems.extend(f"checkpoints[{i}]: {p}" for p in checkpoint_problems(cp, source_ids))
    return problems


def _decode(path: Path, data: bytes, problems: list[Problem]) -> str | None:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        problems.append(Problem(str(path), line, f"not valid UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start})"))
        return None


def _build(raw: dict[str, Any], path: Path, line: int) -> GoldenCase:
    return GoldenCase(
        id=raw["id"], question=raw["question"],
        sources=tuple(Source(s["id"], s["text"], s.get("title")) for s in raw["sources"]),
        gold_answer=raw.get("gold_answer"), gold_source_ids=tuple(raw["gold_source_ids"]),
        expected_behavior=raw["expected_behavior"], difficulty=raw["difficulty"], split=raw["split"],
        adversarial=raw.get("adversarial"), checkpoints=tuple(raw.get("checkpoints") or ()),
        file=str(path), line=line, fingerprint=case_fingerprint(raw),
    )


def iter_jsonl(path: Path, problems: list[Problem]) -> Iterator[tuple[int, Any]]:
    """Yield (line number, parsed value) for each non-blank line; parse problems go to ``problems``."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        problems.append(Problem(str(path), None, f"cannot read: {exc.strerror or exc}"))
        return
    text = _decode(path, data, problems)
    if text is None:
        return
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            if line.strip().startswith("["):
                msg = "a JSON array; write one JSON object per line (JSONL), not an array"
            else:
                msg = f"not valid JSON ({exc.msg} at column {exc.colno})"
            problems.append(Problem(str(path), number, msg))
            continue
        yield number, value


def load_suite(data_dir: str | Path) -> Suite:
    """Load and validate every ``*.jsonl`` directly inside ``data_dir``. Raises DatasetError listing
    every problem found."""
    root = Path(data_dir)
    if not root.is_dir():
        raise DatasetError(f"no such directory: {root}", file=str(root))
    problems: list[Problem] = []
    cases: list[GoldenCase] = []
    seen: dict[str, str] = {}
    files = sorted(p for p in root.glob("*.jsonl") if p.is_file())
    for path in files:
        for number, raw in iter_jsonl(path, problems):
            if isinstance(raw, list):
                problems.append(Problem(str(path), number, "a JSON array; each line must be one case object"))
                continue
            if not isinstance(raw, dict):
                problems.append(Problem(str(path), number, f"each line must be a JSON object, got {type(raw).__name__}"))
                continue
            found = _case_problems(raw)
            case_id = raw.get("id")
            if _is_str(case_id):
                if case_id in seen:
                    found.append(f"duplicate id {case_id!r} (first at {seen[case_id]})")
                else:
                    seen[case_id] = f"{path}:{number}"
            label = f"case {case_id!r}: " if _is_str(case_id) else ""
            problems.extend(Problem(str(path), number, label + p) for p in found)
            if not found:
                cases.append(_build(raw, path, number))
    if not files:
        problems.append(Problem(str(root), None, "no *.jsonl files directly inside this directory"))
    elif not cases and not problems:
        problems.append(Problem(str(root), None, "the suite is empty: no case in any *.jsonl file"))
    if problems:
        raise DatasetError(problems)
    return Suite(tuple(cases), str(root))
