"""What a model judge is asked, and reading what it answers.

``Rubric`` is the versioned prompt text in ``qaeval/rubric/<version>/``; a request's ``Prompt`` is built
from it only when a judge reads it. ``parse_verdict_json`` reads a model's reply (code fences and prose
around the object tolerated) into ``AxisVerdict``s, and ``verdict_json_schema`` is the schema a
structured-output judge is asked to follow. (The prompt still says "snippet" to the model: renaming it
would invalidate every cached verdict, so it waits for the next rubric version.)
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from importlib import resources
from string import Template
from typing import Any

from qaeval.core.errors import UsageError
from qaeval.data.schema import CITATION_CORRECTNESS

RUBRIC_VERSION = "v2"


@dataclass(frozen=True)
class CitedSource:
    """One citation as the judge sees it: the claim, the cited source's text and its hardest decoy."""

    source_id: str
    claim: str
    text: str
    decoy_id: str | None
    decoy_text: str | None


@dataclass
class AxisVerdict:
    """One axis's verdict as a judge gives it (for citation correctness, ``target`` is the source id).

    Attributes:
        axis: The rubric axis (``faithfulness``, ``answer_correctness`` or ``citation_correctness``).
        score: 0, 1 or 2 (anything else is refused when the response is read).
        quote: The words of the answer or passage the score rests on.
        rationale: Why, one or two sentences.
        target: For citation correctness, the id of the cited source; else empty.
    """

    axis: str
    score: Any
    quote: str = ""
    rationale: str = ""
    target: str = ""


@dataclass(frozen=True)
class Rubric:
    version: str
    system: str
    user: Template

    @classmethod
    def load(cls, version: str = RUBRIC_VERSION) -> Rubric:
        folder = resources.files("qaeval") / "rubric" / version
        try:
            return cls(
                version, (folder / "system.txt").read_text("utf-8"), Template((folder / "user.txt").read_text("utf-8"))
            )
        except (OSError, FileNotFoundError):
            raise UsageError(f"no rubric version {version!r} in qaeval/rubric/") from None

    def messages(
        self, question: str, answer: str, gold: str | None, citations: Sequence[CitedSource]
    ) -> tuple[dict[str, str], ...]:
        cited_text: dict[str, str] = {}
        for c in citations:
            cited_text.setdefault(c.source_id, c.text)
        cited = "\n".join(f"[{sid}] {text}" for sid, text in cited_text.items()) or "(none)"
        cites = (
            "\n".join(
                f"- snippet_id={c.source_id}\n  claim: {c.claim}\n  cited: {c.text}\n"
                f"  decoy ({c.decoy_id or 'none'}): {c.decoy_text or '(no other snippet)'}"
                for c in citations
            )
            or "(none)"
        )
        user = self.user.safe_substitute(
            question=question, gold_answer=gold or "(none)", answer=answer, cited_snippets=cited, citations=cites
        )
        return ({"role": "system", "content": self.system}, {"role": "user", "content": user})


class Prompt(Sequence[dict[str, str]]):
    """A request's chat messages, built from the rubric only when a judge reads them (the offline judge
    never does), so a hundred thousand requests do not hold a hundred thousand prompts."""

    __slots__ = ("_rubric", "_args")

    def __init__(
        self, rubric: Rubric, question: str, answer: str, gold: str | None, citations: Sequence[CitedSource]
    ) -> None:
        self._rubric, self._args = rubric, (question, answer, gold, citations)

    def _build(self) -> tuple[dict[str, str], ...]:
        return self._rubric.messages(*self._args)

    def __getitem__(self, index: Any) -> Any:
        return self._build()[index]

    def __len__(self) -> int:
        return 2

    def __iter__(self) -> Iterator[dict[str, str]]:
        return iter(self._build())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    def __repr__(self) -> str:
        return f"Prompt(rubric={self._rubric.version})"


def parse_verdict_json(text: Any) -> list[AxisVerdict]:
    """Parse a judge's JSON reply (tolerating code fences and prose around the object). Raises
    ValueError for anything that is not a usable verdict: not text, no object, truncated JSON, no axes."""
    from qaeval.core.jsonfile import loads_strict

    if not isinstance(text, str):
        raise ValueError(f"the reply is {type(text).__name__}, not text")
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        raise ValueError("no JSON object in the reply")
    data = loads_strict(text[start : end + 1])
    if not isinstance(data, dict):
        raise ValueError("the reply is not a JSON object")

    def text_of(value: Any) -> str:
        return value if isinstance(value, str) else ""

    citations = data.get("citations")
    if citations is not None and not isinstance(citations, list):
        raise ValueError(f"'citations' is {type(citations).__name__}, not a list")
    items = [(axis, data.get(axis), "") for axis in ("faithfulness", "answer_correctness")]
    items += [
        (CITATION_CORRECTNESS, c, text_of(c.get("snippet_id") or c.get("source_id")))
        for c in citations or []
        if isinstance(c, dict)
    ]
    verdicts = [
        AxisVerdict(axis, item.get("score"), text_of(item.get("quote")), text_of(item.get("rationale")), target)
        for axis, item, target in items
        if isinstance(item, dict)
    ]
    if not verdicts:
        raise ValueError("the reply has none of the expected axes")
    return verdicts


def verdict_json_schema() -> dict[str, Any]:
    """The JSON schema a structured-output judge is asked to follow."""
    axis: dict[str, Any] = {
        "type": "object",
        "additionalProperties": False,
        "required": ["quote", "rationale", "score"],
        "properties": {
            "quote": {"type": "string"},
            "rationale": {"type": "string"},
            "score": {"type": "integer", "enum": [0, 1, 2]},
        },
    }
    return {
        "type": "object",
        "additionalProperties": False,
        "required": ["faithfulness", "answer_correctness", "citations"],
        "properties": {
            "faithfulness": axis,
            "answer_correctness": axis,
            "citations": {
                "type": "array",
                "items": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["snippet_id", "quote", "rationale", "score"],
                    "properties": {"snippet_id": {"type": "string"}, **axis["properties"]},
                },
            },
        },
    }
