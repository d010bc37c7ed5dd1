"""The golden case: its schema, and loading it strictly, completely and all at once.

``load_suite(DIR)`` reads every ``*.jsonl`` directly inside DIR; each non-blank line is one case. Every
problem (bad UTF-8 or JSON, an unknown field, a wrong type or value, a duplicate id, a gold source not
in the fixture, a file that is not a regular file, an empty suite) is collected with its file and line
and raised as one ``DatasetError`` before anything is scored; an unreadable file is a ``FileAccessError``.
A case without ``sources`` is a corpus case: its gold and checkpoint ids must be in ``DIR/corpus.jsonl``.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from qaeval.core.errors import DatasetError, FileAccessError, Problem
from qaeval.core.jsonfile import iter_jsonl
from qaeval.data.corpus import CORPUS_FILE, Corpus, load_corpus
from qaeval.data.schema import (
    DIFFICULTIES,
    EXPECTED_BEHAVIORS,
    OPTIONAL,
    REQUIRED,
    SOURCE_FIELDS,
    SPLITS,
    GoldenCase,
    Source,
    checkpoint_problems,
)

if TYPE_CHECKING:
    import pandas as pd

_SOURCE_KEYS = frozenset(SOURCE_FIELDS)
CASE_COLUMNS = (
    "case_id split difficulty expected_behavior must_abstain adversarial question gold_answer gold_source_ids "
    "n_sources checkpoints fingerprint file line"
).split()


@dataclass(frozen=True)
class Suite:
    """The cases of one load, in file then line order.

    Iterating gives the ``GoldenCase`` objects; ``suite[case_id]`` finds one and ``len(suite)`` counts them.

    Attributes:
        cases: The cases, in file then line order.
        root: The folder they were loaded from.
        corpus: The folder's frozen corpus (``corpus.jsonl``), or None when it has none.
    """

    cases: tuple[GoldenCase, ...]
    root: str
    corpus: Corpus | None = None

    @property
    def corpus_fingerprint(self) -> str | None:
        """sha256 of the corpus file's bytes, or None when the suite has no corpus."""
        return None if self.corpus is None else self.corpus.fingerprint

    def __len__(self) -> int:
        return len(self.cases)

    def __iter__(self) -> Iterator[GoldenCase]:
        return iter(self.cases)

    @cached_property
    def _index(self) -> dict[str, GoldenCase]:
        return {c.id: c for c in self.cases}

    def __getitem__(self, case_id: str) -> GoldenCase:
        return self._index[case_id]

    def __contains__(self, case_id: object) -> bool:
        return case_id in self._index

    @cached_property
    def fingerprint(self) -> str:
        """sha256 over the sorted case fingerprints: changes when any case's content changes."""
        digest = hashlib.sha256()
        for fp in sorted(f"{c.id}\0{c.fingerprint}" for c in self.cases):
            digest.update(fp.encode())
        return digest.hexdigest()

    def select(self, *, split: str | None = None) -> Suite:
        """A sub-suite (for example the frozen split that drift re-runs).

        Args:
            split: The split to keep (None: every case).

        Returns:
            The cases of that split, with the same root and corpus.

        Raises:
            DatasetError: No case is in that split.
        """
        kept = tuple(c for c in self.cases if split is None or c.split == split)
        if not kept:
            raise DatasetError(f"no case in split {split!r}", file=self.root)
        return Suite(kept, self.root, self.corpus)

    def to_frame(self) -> pd.DataFrame:
        """One row per case.

        Returns:
            The cases' frame. Columns: see ``CASE_COLUMNS``; list-valued columns hold Python lists,
            and ``gold_answer`` and ``adversarial`` hold None when absent.
        """
        import pandas as pd

        rows = [
            (
                c.id,
                c.split,
                c.difficulty,
                c.expected_behavior,
                c.must_abstain,
                c.adversarial,
                c.question,
                c.gold_answer,
                list(c.gold_source_ids),
                len(c.sources),
                [dict(cp) for cp in c.checkpoints],
                c.fingerprint,
                c.file,
                c.line,
            )
            for c in self.cases
        ]
        frame = pd.DataFrame(rows, columns=CASE_COLUMNS, dtype=object)
        return frame.astype({"must_abstain": "bool", "n_sources": "int64", "line": "int64"})

    def sources_frame(self) -> pd.DataFrame:
        """One row per (case, passage) of the cases' own sources.

        Returns:
            The frame: case_id, source_id, title, text, is_gold.
        """
        import pandas as pd

        rows = [(c.id, s.id, s.title, s.text, s.id in c.gold_source_ids) for c in self.cases for s in c.sources]
        frame = pd.DataFrame(rows, columns=["case_id", "source_id", "title", "text", "is_gold"], dtype=object)
        frame["is_gold"] = frame["is_gold"].astype(bool)
        return frame

    def summary(self) -> dict[str, pd.Series]:
        """Case counts by split, difficulty, expected behaviour and adversarial tag.

        Returns:
            ``{"split": counts, "difficulty": counts, ...}``, each a Series of counts by value.
        """
        frame = self.to_frame()
        frame["adversarial"] = frame["adversarial"].map(lambda v: "(none)" if v is None else v)
        return {
            col: frame[col].value_counts().sort_index()
            for col in ("split", "difficulty", "expected_behavior", "adversarial")
        }


_CANONICAL = json.JSONEncoder(sort_keys=True, ensure_ascii=False, separators=(",", ":"))  # one, not one a case


def case_fingerprint(raw: Mapping[str, Any]) -> str:
    """sha256 of a case's canonical JSON (sorted keys): the identity gate and drift check content by."""
    canon = _CANONICAL.encode(raw)
    return hashlib.sha256(canon.encode()).hexdigest()[:16]


def _is_str(value: Any) -> bool:
    return isinstance(value, str) and bool(value) and not value.isspace()


def _case_problems(raw: dict[str, Any], corpus: Corpus | None = None) -> list[str]:
    """Why a raw case is not a golden case (empty when it is), step by step."""
    problems = _field_problems(raw, corpus)
    source_ids, found = _source_problems(raw)
    problems += found + _value_problems(raw) + _gold_problems(raw, source_ids, corpus)
    if "checkpoints" in raw:
        cps = raw["checkpoints"]
        if not isinstance(cps, list):
            problems.append("'checkpoints' must be a list")
        else:
            known = corpus if "sources" not in raw and corpus is not None else source_ids
            for i, cp in enumerate(cps):
                problems.extend(f"checkpoints[{i}]: {p}" for p in checkpoint_problems(cp, known))  # type: ignore[arg-type]  # a checkpoint is checked as read: any JSON value
    return problems


def _field_problems(raw: dict[str, Any], corpus: Corpus | None) -> list[str]:
    problems = [f"unknown field {key!r}" for key in raw if key not in REQUIRED and key not in OPTIONAL]
    for key in REQUIRED:
        if key not in raw and not (key == "sources" and corpus is not None):
            hint = f" (or put a {CORPUS_FILE} beside the cases)" if key == "sources" else ""
            problems.append(f"missing required field {key!r}{hint}")
    for key in ("id", "question"):
        if key in raw and not _is_str(raw[key]):
            problems.append(f"{key!r} must be a non-empty string")
    return problems


def _source_problems(raw: dict[str, Any]) -> tuple[set[str], list[str]]:
    """(the case's own source ids, what is wrong with its sources)."""
    source_ids: set[str] = set()
    if "sources" not in raw:
        return source_ids, []
    sources = raw["sources"]
    if not isinstance(sources, list):
        return source_ids, ["'sources' must be a list of {id, text, title?} objects"]
    if (ids := _plain_source_ids(sources)) is not None:
        return ids, []
    problems: list[str] = []
    for i, src in enumerate(sources):
        where = f"sources[{i}]"
        if not isinstance(src, dict):
            problems.append(f"{where} must be an object")
            continue
        problems += [f"{where} has unknown field {key!r}" for key in src if key not in SOURCE_FIELDS]
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
    return source_ids, problems


def _plain_source_ids(sources: list[Any]) -> set[str] | None:
    """The ids of sources that are all well formed, in one quick pass (None: look at them one by one)."""
    ids: set[str] = set()
    for src in sources:
        if type(src) is not dict or not src.keys() <= _SOURCE_KEYS:
            return None
        sid, text, title = src.get("id"), src.get("text"), src.get("title")
        if (
            type(sid) is not str
            or type(text) is not str
            or not sid
            or not text
            or sid.isspace()
            or text.isspace()
            or sid in ids
            or not (title is None or type(title) is str)
        ):
            return None
        ids.add(sid)
    return ids


def _value_problems(raw: dict[str, Any]) -> list[str]:
    problems = [
        f"{key!r} is {raw[key]!r}; expected one of {', '.join(allowed)}"
        for key, allowed in (("expected_behavior", EXPECTED_BEHAVIORS), ("difficulty", DIFFICULTIES), ("split", SPLITS))
        if key in raw and raw[key] not in allowed
    ]
    must_abstain = raw.get("expected_behavior") == "unanswerable_must_abstain"
    gold = raw.get("gold_answer")
    if gold is not None and not _is_str(gold):
        problems.append("'gold_answer' must be a non-empty string or null")
    elif gold is None and not must_abstain and raw.get("expected_behavior") in EXPECTED_BEHAVIORS:
        problems.append("an answerable case needs a non-empty 'gold_answer'")
    if "adversarial" in raw and raw["adversarial"] is not None and not _is_str(raw["adversarial"]):
        problems.append("'adversarial' must be a non-empty string")
    return problems


def _gold_problems(raw: dict[str, Any], source_ids: set[str], corpus: Corpus | None) -> list[str]:
    if "gold_source_ids" not in raw:
        return []
    gold_ids = raw["gold_source_ids"]
    if not isinstance(gold_ids, list) or not all(_is_str(g) for g in gold_ids):
        return ["'gold_source_ids' must be a list of strings"]
    problems = ["'gold_source_ids' lists an id twice"] if len(set(gold_ids)) != len(gold_ids) else []
    if isinstance(raw.get("sources"), list):
        problems += [
            f"gold source id {gid!r} is not in the case's sources" for gid in gold_ids if gid not in source_ids
        ]
    elif "sources" not in raw and corpus is not None:
        problems += [
            f"gold source id {gid!r} is not in the corpus ({CORPUS_FILE})" for gid in gold_ids if gid not in corpus
        ]
    return problems


def _short(value: Any) -> Any:
    """Short strings that recur across cases (source ids, titles, tags, enum values) are interned: a
    hundred thousand cases need one "s1", not a hundred thousand."""
    return sys.intern(value) if isinstance(value, str) and len(value) <= 64 else value


def _build(raw: dict[str, Any], where: str, line: int, fingerprint: str | None = None) -> GoldenCase:
    return GoldenCase(
        id=raw["id"],
        question=raw["question"],
        from_corpus="sources" not in raw,
        sources=tuple(
            Source(_short(s["id"]), s["text"], None if (t := s.get("title")) is None else _short(t))
            for s in raw.get("sources", ())
        ),
        gold_answer=raw.get("gold_answer"),
        gold_source_ids=tuple(_short(g) for g in raw["gold_source_ids"]),
        expected_behavior=_short(raw["expected_behavior"]),
        difficulty=_short(raw["difficulty"]),
        split=_short(raw["split"]),
        adversarial=_short(raw.get("adversarial")),
        checkpoints=tuple(raw.get("checkpoints") or ()),
        file=where,
        line=line,
        fingerprint=fingerprint or case_fingerprint(raw),
    )


def build_suite(
    entries: Iterable[tuple[str, int, Any]],
    root: str,
    fingerprints: Mapping[str, str] | None = None,
    corpus: Corpus | None = None,
) -> Suite:
    """Validate raw case objects, each with the file and line it came from, into a Suite. Raises one
    DatasetError listing every problem. ``fingerprints`` (by case id) keeps the identity a case had
    when it was first loaded, for cases read back from a run record. With a ``corpus``, a case without
    ``sources`` is a corpus case."""
    problems: list[Problem] = []
    cases: list[GoldenCase] = []
    seen: dict[str, str] = {}
    for where, number, raw in entries:
        if isinstance(raw, list):
            problems.append(Problem(where, number, "a JSON array; each line must be one case object"))
            continue
        if not isinstance(raw, dict):
            problems.append(Problem(where, number, f"each line must be a JSON object, got {type(raw).__name__}"))
            continue
        found = _case_problems(raw, corpus)
        case_id = raw.get("id")
        if _is_str(case_id):
            if str(case_id) in seen:
                found.append(f"duplicate id {case_id!r} (first at {seen[str(case_id)]})")
            else:
                seen[str(case_id)] = f"{where}:{number}"
        label = f"case {case_id!r}: " if _is_str(case_id) else ""
        problems.extend(Problem(where, number, label + p) for p in found)
        if not found:
            known = (fingerprints or {}).get(str(case_id))
            cases.append(_build(raw, sys.intern(where), number, known))
    if not cases and not problems:
        problems.append(Problem(root, None, "the suite is empty: no case in any *.jsonl file"))
    if problems:
        raise DatasetError(problems)
    return Suite(tuple(cases), root, corpus)


def case_files(root: Path) -> list[Path]:
    """The ``*.jsonl`` entries directly inside a folder, whatever they are (the loader says what is wrong)."""
    try:
        return sorted(p for p in root.iterdir() if p.name.endswith(".jsonl") and p.name != CORPUS_FILE)
    except OSError as exc:
        raise FileAccessError(root, f"cannot list ({exc.strerror or exc})") from None


def load_suite(data_dir: str | Path) -> Suite:
    """Load and validate every ``*.jsonl`` directly inside ``data_dir`` (and its ``corpus.jsonl``).

    Args:
        data_dir: The folder that holds the case files.

    Returns:
        The suite, in file then line order.

    Raises:
        DatasetError: Listing every problem found, each with its file and line (exit 65).
        FileAccessError: When the folder or a file cannot be read (exit 74).
    """
    root = Path(data_dir)
    if not root.is_dir():
        what = "not a folder" if root.exists() else "no such folder"
        raise DatasetError(f"{what}: the cases live in *.jsonl files inside a folder", file=str(root))
    files = case_files(root)
    if not files:
        raise DatasetError([Problem(str(root), None, "no *.jsonl files directly inside this folder")])
    broken: list[Problem] = []  # the corpus's problems: the cases are checked too, so all are reported at once
    try:
        corpus = load_corpus(root)
    except DatasetError as exc:
        corpus, broken = None, exc.problems
    problems: list[Problem] = []
    entries = ((str(path), number, raw) for path in files for number, raw in iter_jsonl(path, problems))
    try:  # streamed: each line is validated and built as it is read, no file is held whole
        suite = build_suite(entries, str(root), corpus=cast(Corpus, _AnyId()) if broken else corpus)
    except DatasetError as exc:
        empty = bool(problems or broken)  # "the suite is empty" says nothing more when a line or the corpus is bad
        problems += [p for p in exc.problems if not (empty and p.line is None and "the suite is empty" in p.message)]
    if problems or broken:
        if corpus is not None:
            corpus.close()
        raise DatasetError(broken + sorted(problems, key=lambda p: (p.file, p.line or 0)))
    return suite


class _AnyId:
    """Stands in for a corpus that did not load: every id is taken to be in it (whether one is cannot be
    known, and the corpus's own problems are reported)."""

    def __contains__(self, item: object) -> bool:
        return True


def suite_from_raw(
    raws: Iterable[Mapping[str, Any]],
    root: str,
    *,
    file: str,
    fingerprints: Mapping[str, str] | None = None,
    corpus: Corpus | None = None,
) -> Suite:
    """A Suite from stored case objects (a run record), validated as strictly as a load."""
    return build_suite(((file, i, dict(r)) for i, r in enumerate(raws, start=1)), root, fingerprints, corpus)
