"""One per-case index of a scored run: every layer's rows for a case, looked up by its id.

``CaseIndex(run)[case_id]`` is a ``CaseRows``: the output, the case's outcome (its ``per_case`` row:
passed, fail reasons, ...), its metric units, its retrieval row (None for a case without gold sources),
and its checks, verdicts, trajectory steps and registered checks' and metrics' outcomes. The record
writes each case's line from it, and the reports draw each case's drill-down from it; the outcome rules themselves (``qaeval.scoring.outcomes``, through its ``LayerIndex``)
read the layers they need by case as they build ``per_case``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from qaeval.scoring.result import RunResult

Row = Mapping[str, Any]


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
        self._outputs = {r["case_id"]: r for r in run.outputs.to_dict("records")}
        self._outcomes = {r["case_id"]: r for r in run.per_case.to_dict("records")}
        self._units = {r["case_id"]: r for r in run.units.to_dict("records")}
        self._retrieval = {r["case_id"]: r for r in run.retrieval.to_dict("records")}
        self._checks = _grouped(run.checks.to_dict("records"))
        self._verdicts = _grouped(run.verdicts.to_dict("records"))
        self._trajectory = _grouped(run.trajectory.to_dict("records"))
        self._custom = _grouped(run.custom.to_dict("records"))

    def __contains__(self, case_id: object) -> bool:
        return case_id in self._outcomes

    def __getitem__(self, case_id: str) -> CaseRows:
        return CaseRows(
            self._outputs[case_id],
            self._outcomes[case_id],
            self._units[case_id],
            self._retrieval.get(case_id),
            self._checks.get(case_id, []),
            self._verdicts.get(case_id, []),
            self._trajectory.get(case_id, []),
            self._custom.get(case_id, []),
        )

    def passed(self, case_id: str) -> bool:
        return bool(self._outcomes[case_id]["case_passed"])
