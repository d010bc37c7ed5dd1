"""Synthetic traffic logs for the monitor's tests, and judges whose verdicts the tests know in advance."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from qaeval import AxisVerdict, JudgeConfig, JudgeResponse

FACT = "The library opens at nine in the morning on weekdays and closes at eight."
ANSWER = "The library opens at nine in the morning on weekdays."


def log_row(i: int, *, day: int = 1, system: str = "a", bad_citation: bool = False, **changes: Any) -> dict[str, Any]:
    row = {
        "id": f"r{i:05d}",
        "question": "When does the library open?",
        "passages": [
            {"id": "hours", "text": FACT, "title": "Hours"},
            {"id": "print", "text": "Printing costs ten cents."},
        ],
        "answer": ANSWER,
        "citations": [{"source_id": "missing" if bad_citation else "hours", "claim": ANSWER}],
        "model_was_called": True,
        "prompt": f"Passages: {FACT} Printing costs ten cents. Question: When does the library open?",
        "timestamp": f"2026-02-{day:02d}T{(i % 24):02d}:00:00+00:00",
        "system": system,
    }
    row.update(changes)
    return row


def traffic(days: int = 3, per_day: int = 40, *, bad_day: int | None = None, start: int = 0) -> list[dict[str, Any]]:
    """``per_day`` rows a day, systems a and b alternating; on ``bad_day`` every citation names a missing passage."""
    rows = []
    for d in range(1, days + 1):
        for k in range(per_day):
            i = start + (d - 1) * per_day + k
            rows.append(log_row(i, day=d, system="ab"[k % 2], bad_citation=d == bad_day or (k % 10 == 0)))
    return rows


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


class ParityJudge:
    """Faithfulness 2 on rows whose number is even, 0 on odd ones; citations always 2 (quotes really there)."""

    config = JudgeConfig(name="parity", model="test")

    def judge(self, requests):
        out = []
        for r in requests:
            text = r.citations[0].text if r.citations else ""
            good = int(r.case_id[1:]) % 2 == 0 if r.case_id[1:].isdigit() else True
            verdicts = [
                AxisVerdict("faithfulness", 2 if good else 0, text if good else "", "parity"),
                AxisVerdict("answer_correctness", 0, "", "no gold"),
            ]
            verdicts += [
                AxisVerdict("citation_correctness", 2, c.text, "", target=c.source_id) for c in r.citations if c.text
            ]
            out.append(JudgeResponse(r.case_id, verdicts))
        return out


def make_parity_judge():
    return ParityJudge()
