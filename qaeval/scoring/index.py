"""One per-case index of a scored run: every layer's rows for a case, looked up by its id.

``CaseIndex(run)[case_id]`` is a ``CaseRows``: the output, the case's outcome (its ``per_case`` row:
passed, fail reasons, ...), its metric units, its retrieval row (None for a case without gold sources),
and its checks, verdicts, trajectory steps and registered checks' and metrics' outcomes. The record
writes each case's line from it, and the reports draw each case's drill-down from it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from qaeval.scoring.result import RunResult

Row = Mapping[str, Any]
ONE_A_CASE = ("outputs", "per_case", "units", "retrieval")  # a run's frames with one row a case (or none)
MANY_A_CASE = ("checks", "verdicts", "trajectory", "custom")  # and with rows a case, as CaseRows orders them


@dataclass(frozen=True)
class CaseRows:
    """Everything a run scored for one case."""

    output: Row
    outcome: Row
    units: Row
    retrieval: Row | None = None
    checks: list[Row] = field(default_factory=list)
    verdicts: list[Row] = field(default_factory=list)
    trajectory: list[Row] = field(default_factory=list)
    custom: list[Row] = field(default_factory=list)  # the registered checks and metrics


def _grouped(rows: Iterable[Row]) -> dict[str, list[Row]]:
    out: dict[str, list[Row]] = {}
    for r in rows:
        out.setdefault(r["case_id"], []).append(r)
    return out


class CaseIndex:
    """The scored layers of a run, looked up by case id (built once, in one pass over each frame)."""

    def __init__(self, run: RunResult) -> None:
        self.run = run
        ones = [{r["case_id"]: r for r in getattr(run, name).to_dict("records")} for name in ONE_A_CASE]
        self._outputs, self._outcomes, self._units, self._retrieval = ones
        self._many = [_grouped(getattr(run, name).to_dict("records")) for name in MANY_A_CASE]

    def __contains__(self, case_id: object) -> bool:
        return case_id in self._outcomes

    def __getitem__(self, case_id: str) -> CaseRows:
        return CaseRows(
            self._outputs[case_id],
            self._outcomes[case_id],
            self._units[case_id],
            self._retrieval.get(case_id),
            *(rows.get(case_id, []) for rows in self._many),
        )

    def passed(self, case_id: str) -> bool:
        return bool(self._outcomes[case_id]["case_passed"])
