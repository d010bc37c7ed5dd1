"""The baseline a gate compares against: the last green run, as the outcomes and answers that matter.

``baseline_from_run`` takes them from a run (reading the run's record file is the record layer's job:
``qaeval.record.read.read_baseline``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from qaeval.core.frames import clean
from qaeval.scoring.outcomes import FailReason

if TYPE_CHECKING:
    from qaeval.scoring.result import RunResult


@dataclass(frozen=True)
class BaselineCase:
    fingerprint: str
    passed: bool
    fail_reasons: list[FailReason]
    units: dict[str, tuple[float, float]]
    answer: str | None = None
    abstained: bool | None = None
    citations: list[dict[str, str]] | None = None
    output_fingerprint: str | None = None
    passes: int | None = None  # trials that passed (None: as ``passed``, one trial)
    trials: int = 1

    @property
    def pass_count(self) -> int:
        return self.passes if self.passes is not None else int(self.passed)


@dataclass(frozen=True)
class Baseline:
    """What the gate compares against: the last green run, from its record."""

    path: str
    dataset_fingerprint: str
    judge: dict[str, Any] | None
    metrics: dict[str, tuple[float, int]]
    cases: dict[str, BaselineCase]
    green: bool = True
    allowed_failing: bool = False
    created: str | None = None
    git_commit: str | None = None
    adapter: str | None = None
    notes: list[str] = field(default_factory=list)
    corpus_fingerprint: str | None = None  # sha256 of the frozen corpus the baseline ran on, if any
    custom: dict[str, str] = field(default_factory=dict)  # registered check or metric -> sha256 of its code
    trials: int = 1  # each case ran this many times

    def outcomes(self, metric: str) -> dict[str, tuple[float, float]]:
        return {cid: c.units[metric] for cid, c in self.cases.items() if metric in c.units and c.units[metric][1]}

    def summary(self) -> dict[str, Any]:
        return clean(
            dict(
                path=self.path,
                dataset_fingerprint=self.dataset_fingerprint,
                judge=self.judge,
                green=self.green,
                allowed_failing=self.allowed_failing,
                created=self.created,
                git_commit=self.git_commit,
                adapter=self.adapter,
                corpus_fingerprint=self.corpus_fingerprint,
            )
            | ({"custom": self.custom} if self.custom else {})
            | ({"trials": self.trials} if self.trials > 1 else {})
        )


def baseline_from_run(run: RunResult, path: str, data: Mapping[str, Any] | None = None) -> Baseline:
    board = run.scoreboard.set_index("metric")
    units = run.units.set_index("case_id")
    names = [m.name for m in run.metrics]
    cases = {}
    for row in run.per_case.to_dict("records"):
        cid = row["case_id"]
        cases[cid] = BaselineCase(
            fingerprint=run.suite[cid].fingerprint,
            passed=bool(row["case_passed"]),
            fail_reasons=list(row["fail_reasons"]),
            units={m: (float(units.at[cid, f"{m}__num"]), float(units.at[cid, f"{m}__den"])) for m in names},
            answer=row["answer"],
            abstained=bool(row["abstained"]),
            citations=list(row["citations"]),
            output_fingerprint=row["output_fingerprint"],
            passes=int(row["passes"]),
            trials=int(row["trials"]),
        )
    data = data or {}
    return Baseline(
        path=path,
        dataset_fingerprint=run.dataset_fingerprint,
        judge=run.meta.judge.to_dict(),
        metrics={m: (float(board.at[m, "value"]), int(board.at[m, "n"])) for m in names},
        cases=cases,
        green=bool(data.get("green", run.ok)),
        allowed_failing=bool(data.get("allowed_failing", False)),
        created=run.meta.created,
        git_commit=run.meta.git_commit,
        adapter=run.meta.adapter,
        corpus_fingerprint=run.suite.corpus_fingerprint,
        custom=run.registered.hashes(),
        trials=run.trials,
    )
