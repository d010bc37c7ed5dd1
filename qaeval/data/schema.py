"""The vocabulary of qaeval's data, defined once: the golden case's fields and values, its checkpoint
rules, the judge's axes and the label schema. It imports nothing else of qaeval's, so ``import
qaeval.data`` stays light (no pandas).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

Axis = Literal["faithfulness", "answer_correctness", "citation_correctness"]
AXES: tuple[Axis, ...] = get_args(Axis)
FAITHFULNESS: Axis = "faithfulness"
ANSWER_CORRECTNESS: Axis = "answer_correctness"
CITATION_CORRECTNESS: Axis = "citation_correctness"  # graded per citation: a verdict's target is the source id
ExpectedBehavior = Literal["answer", "unanswerable_must_abstain"]
Difficulty = Literal["single-hop", "multi-hop", "aggregation"]
Split = Literal["frozen", "living"]

EXPECTED_BEHAVIORS: tuple[ExpectedBehavior, ...] = get_args(ExpectedBehavior)
DIFFICULTIES: tuple[Difficulty, ...] = get_args(Difficulty)
SPLITS: tuple[Split, ...] = get_args(Split)

REQUIRED = ("id", "question", "sources", "gold_source_ids", "expected_behavior", "difficulty", "split")
OPTIONAL = ("gold_answer", "adversarial", "checkpoints")
SOURCE_FIELDS = ("id", "text", "title")


@dataclass(frozen=True, slots=True)
class Source:
    """One passage of a case's frozen retrieval fixture.

    Attributes:
        id: The passage's id, unique within its case; citations and ``gold_source_ids`` name it.
        text: The passage's text.
        title: The title that heads the passage, or None.
    """

    id: str
    text: str
    title: str | None = None


@dataclass(frozen=True, slots=True)
class GoldenCase:
    """One hand-curated case, labels included. Never handed to a system under test: see CaseView.

    Attributes:
        id: The readable case id, unique in the suite (``abstain-0006``).
        question: The question the system is asked.
        sources: The case's frozen passages (empty when it retrieves from the suite's corpus).
        gold_answer: The expected answer, or None for a case that must abstain.
        gold_source_ids: The ids of the passages that ground the gold answer.
        expected_behavior: What the system should do: ``answer`` or ``unanswerable_must_abstain``.
        difficulty: ``single-hop``, ``multi-hop`` or ``aggregation``.
        split: ``frozen`` (drift re-runs it) or ``living`` (where production misses go).
        adversarial: The kind of attack the case carries (for example a prompt injection), or None.
        checkpoints: Intermediate facts a multi-step answer must pass through (the trajectory layer).
        file: The file the case was read from.
        line: The line of ``file`` it was on.
        fingerprint: A hash of the case's content: changes when any field that scoring reads changes.
        from_corpus: True when the case has no sources of its own and retrieves from the corpus.
    """

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
    from_corpus: bool = False  # no sources of its own: its passages are the suite's corpus

    def to_raw(self) -> dict[str, Any]:
        """The case as a JSON object in the golden format (optional fields only when set).

        Returns:
            The object, ready for ``json.dumps``.
        """
        raw: dict[str, Any] = dict(id=self.id, question=self.question)
        if not self.from_corpus:
            raw["sources"] = [
                {"id": s.id, "text": s.text, **({"title": s.title} if s.title is not None else {})}
                for s in self.sources
            ]
        raw.update(
            gold_answer=self.gold_answer,
            gold_source_ids=list(self.gold_source_ids),
            expected_behavior=self.expected_behavior,
            difficulty=self.difficulty,
            split=self.split,
        )
        if self.adversarial is not None:
            raw["adversarial"] = self.adversarial
        if self.checkpoints:
            raw["checkpoints"] = [dict(cp) for cp in self.checkpoints]
        return raw

    @property
    def must_abstain(self) -> bool:
        return self.expected_behavior == "unanswerable_must_abstain"

    @property
    def multi_step(self) -> bool:
        return self.difficulty in ("multi-hop", "aggregation")


# --------------------------------------------------------------------------- checkpoints (multi-step cases)

CHECKPOINT_FIELDS: dict[str, dict[str, tuple[type, ...]]] = {
    "retrieved": {"source_id": (str,)},
    "cited": {"source_id": (str,)},
    "aggregate_equals": {"value": (int, float), "tolerance": (int, float)},
    "answer_mentions": {"text": (str,)},
}
_OPTIONAL = {("aggregate_equals", "tolerance")}

MULTI_STEP: tuple[Difficulty, ...] = ("multi-hop", "aggregation")


def checkpoint_problems(checkpoint: Any, source_ids: set[str]) -> list[str]:
    """Why a checkpoint is malformed (empty list when it is fine). Used by the loader."""
    if not isinstance(checkpoint, Mapping):
        return [f"checkpoint must be an object, got {type(checkpoint).__name__}"]
    kind = checkpoint.get("kind")
    if not isinstance(kind, str) or kind not in CHECKPOINT_FIELDS:
        return [f"checkpoint kind {kind!r} is not one of {sorted(CHECKPOINT_FIELDS)}"]
    fields = CHECKPOINT_FIELDS[kind]
    problems = [f"checkpoint {kind!r} has unknown field {key!r}" for key in checkpoint if key not in {"kind", *fields}]
    for key, types in fields.items():
        if key not in checkpoint:
            if (kind, key) not in _OPTIONAL:
                problems.append(f"checkpoint {kind!r} needs field {key!r}")
            continue
        value = checkpoint[key]
        if isinstance(value, bool) or not isinstance(value, types):
            problems.append(f"checkpoint {kind!r} field {key!r} must be {types[0].__name__}")
        elif isinstance(value, (int, float)) and as_number(value) is None:
            problems.append(f"checkpoint {kind!r} field {key!r} must be a finite number")
        elif key == "source_id" and value not in source_ids:
            problems.append(f"checkpoint names source {value!r}, which is not in the case's sources")
    return problems


def as_number(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        try:
            number = float(value)
        except OverflowError:
            return None
        return number if math.isfinite(number) else None
    if isinstance(value, str):
        match = re.fullmatch(r"\s*[-+]?[\d,]*\.?\d+\s*", value)
        if match:
            number = float(value.replace(",", "").strip())
            return number if math.isfinite(number) else None
    return None


# --------------------------------------------------------------------------- labels

LABEL_FIELDS = {"case_id", "axis", "score", "reason", "output_fingerprint"}
LABEL_SCHEMA = {
    "case_id": "text",
    "axis": "text",
    "human": "int",
    "reason": "text",
    "output_fingerprint": "text",
    "line": "int",
}
LABEL_SCORES = (0, 1, 2)


def score_ok(score: Any) -> bool:
    """A human or judge score is 0, 1 or 2 (and not a bool)."""
    return not isinstance(score, bool) and score in LABEL_SCORES
