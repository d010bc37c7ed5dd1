"""The regression gate: decide PASS or BLOCK for a run against the last green baseline.

Tier 1 (hard): every deterministic check green and no adapter error.
Tier 2 (against the baseline):
  * metrics: each gated metric may not move the wrong way by more than its tolerance (moving by
    exactly the tolerance passes);
  * regressions: no case that passed in the baseline may fail now (wrongly abstaining, losing its
    trajectory, failing a check or the judge all count);
  * new cases: every case new since the baseline, or whose content changed under the same id, must pass.

Cases are matched by id; a case whose fingerprint changed is reported as changed and held to the
new-case rule, never compared with its old self. For each gated metric a paired bootstrap over the
matched cases says whether the movement is distinguishable from noise at this n: it informs the
reviewer, the tolerances decide.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from qaeval.baseline import Baseline
from qaeval.errors import DatasetError, GateBlocked, UsageError
from qaeval.metrics import BY_NAME

DEFAULT_TOLERANCES: dict[str, float] = {
    "faithfulness_rate": 0.01,
    "citation_precision": 0.01,
    "abstention_recall": 0.0,
    "multi_step_task_success": 0.0,
    "retrieval_recall_at_k": 0.02,
    "rerank_mrr": 0.02,
    "over_refusal_rate": 0.0,
}
_EPS = 1e-9

TIER_COLUMNS = ["tier", "passed", "detail", "case_ids"]
DELTA_COLUMNS = ["metric", "baseline", "current", "delta", "tolerance", "direction", "passed",
                 "n_baseline", "n_current", "n_paired", "paired_ci_low", "paired_ci_high", "p_value",
                 "distinguishable", "note"]


def load_tolerances(path: str | Path | None = None, overrides: list[str] | None = None) -> dict[str, float]:
    """Defaults, then a JSON file ``{"metric": tolerance}``, then ``metric=value`` overrides."""
    tolerances = dict(DEFAULT_TOLERANCES)
    updates: dict[str, Any] = {}
    if path is not None:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise DatasetError(f"cannot read tolerances: {exc.strerror}", file=str(path)) from None
        except json.JSONDecodeError as exc:
            raise DatasetError(f"tolerances file is not valid JSON: {exc.msg}", file=str(path)) from None
        if not isinstance(data, dict):
            raise DatasetError("tolerances file must hold a JSON object", file=str(path))
        updates.update(data)
    for item in overrides or []:
        name, sep, value = item.partition("=")
        if not sep:
            raise UsageError(f"--tolerance expects metric=value, got {item!r}")
        try:
            updates[name.strip()] = float(value)
        except ValueError:
            raise UsageError(f"--tolerance {item!r}: {value!r} is not a number") from None
    for name, value in updates.items():
        if name not in DEFAULT_TOLERANCES:
            raise UsageError(f"no gated metric named {name!r}; gated: {', '.join(DEFAULT_TOLERANCES)}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
            raise UsageError(f"tolerance for {name} must be a number >= 0, got {value!r}")
        tolerances[name] = float(value)
    return tolerances


def paired_bootstrap(diffs: np.ndarray, *, resamples: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """(ci_low, ci_high, two-sided p) for the mean of paired per-case differences."""
    if diffs.size == 0:
        return math.nan, math.nan, math.nan
    if np.all(diffs == diffs[0]):
        return float(diffs[0]), float(diffs[0]), 1.0 if diffs[0] == 0 else 0.0
    rng = np.random.default_rng(seed)
    means = diffs[rng.integers(0, diffs.size, size=(resamples, diffs.size))].mean(axis=1)
    low, high = np.quantile(means, [0.025, 0.975])
    p = 2 * min((means <= 0).mean(), (means >= 0).mean())
    return float(low), float(high), float(min(1.0, p))


@dataclass
class GateResult:
    """The gate's verdict and the frames behind it."""

    tiers: pd.DataFrame
    metric_deltas: pd.DataFrame
    regressed: pd.DataFrame
    new_failing: pd.DataFrame
    changed_cases: list[str]
    removed_cases: list[str]
    dataset_match: bool
    baseline_path: str
    run: Any
    baseline_judge: dict[str, Any] | None = None

    @property
    def judge_match(self) -> bool:
        """Whether this run was judged like the baseline (same judge, model, settings and rubric)."""
        return self.baseline_judge is None or self.baseline_judge == self.run.judge_config.to_dict()

    @property
    def passed(self) -> bool:
        return bool(self.tiers["passed"].all())

    @property
    def verdict(self) -> str:
        return "PASS" if self.passed else "BLOCK"

    @property
    def failed_tiers(self) -> pd.DataFrame:
        return self.tiers[~self.tiers["passed"]]

    def raise_for_status(self) -> None:
        """Raise GateBlocked (carrying this result) when the gate blocked."""
        if not self.passed:
            names = ", ".join(self.failed_tiers["tier"])
            raise GateBlocked(f"gate BLOCK: failed {names}", self)

    def to_frame(self) -> pd.DataFrame:
        return self.tiers

    def summary_text(self) -> str:
        lines = [f"GATE: {self.verdict}   ({len(self.run.suite)} cases, baseline {self.baseline_path})"]
        if not self.judge_match:
            lines.append(f"note: judged by {self.run.judge_config.label()}, the baseline by "
                         f"{self.baseline_judge.get('name')}:{self.baseline_judge.get('model')}; "
                         "judge metrics may move for that reason alone")
        if not self.dataset_match:
            lines.append(f"note: dataset fingerprint differs from the baseline's "
                         f"({len(self.changed_cases)} changed, {len(self.removed_cases)} removed case(s))")
        for row in self.tiers.itertuples(index=False):
            mark = "ok  " if row.passed else "FAIL"
            lines.append(f"  [{mark}] {row.tier}: {row.detail}")
            if not row.passed and row.case_ids:
                lines.append(f"         cases: {', '.join(row.case_ids)}")
        lines.append("")
        lines.append(f"  {'metric':<26} {'baseline':>9} {'current':>9} {'delta':>8} {'tol':>6}  noise test")
        for row in self.metric_deltas.itertuples(index=False):
            fmt = lambda v: "NaN" if v != v else f"{v:.3f}"  # noqa: E731
            mark = "" if row.passed else "  <- BLOCK"
            lines.append(f"  {row.metric:<26} {fmt(row.baseline):>9} {fmt(row.current):>9} "
                         f"{fmt(row.delta):>8} {row.tolerance:>6.3f}  {row.note}{mark}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary_text()

    def _repr_html_(self) -> str:
        from qaeval.reports import banner_html

        detail = "; ".join(self.failed_tiers["tier"]) or "every tier passed"
        tiers = self.tiers.assign(case_ids=self.tiers["case_ids"].map(", ".join))
        return banner_html(self.verdict, detail) + tiers.to_html(index=False, escape=True)


def gate(run: Any, baseline: Baseline, tolerances: dict[str, float] | None = None) -> GateResult:
    """Compare a RunResult with a Baseline. Pure: no I/O."""
    tolerances = dict(DEFAULT_TOLERANCES if tolerances is None else tolerances)
    per_case = run.per_case.set_index("case_id", drop=False)
    fingerprints = {c.id: c.fingerprint for c in run.suite}
    base_cases = baseline.cases
    matched = [cid for cid in per_case.index if cid in base_cases and base_cases[cid]["fingerprint"] == fingerprints[cid]]
    changed = [cid for cid in per_case.index if cid in base_cases and base_cases[cid]["fingerprint"] != fingerprints[cid]]
    new = [cid for cid in per_case.index if cid not in base_cases]
    removed = sorted(cid for cid in base_cases if cid not in per_case.index)

    tiers = []
    # Tier 1
    errors = per_case[per_case["error"].notna()]["case_id"].tolist()
    bad = per_case[~per_case["deterministic_passed"]]["case_id"].tolist()  # an adapter error fails every check
    failing_checks = run.checks[~run.checks["passed"]]
    by_check = failing_checks.groupby("check")["case_id"].apply(list).to_dict()
    detail = "all deterministic checks green, no adapter error"
    if bad:
        parts = [f"{check} failed on {len(ids)}" for check, ids in sorted(by_check.items())]
        if errors:
            parts.insert(0, f"adapter error on {len(errors)}")
        detail = f"{len(bad)} case(s) not green: " + ", ".join(parts)
    tiers.append(dict(tier="tier 1: deterministic checks", passed=not bad, detail=detail, case_ids=bad))

    # Tier 2: metrics
    base_metrics = baseline.metrics_frame().set_index("metric")
    board = run.scoreboard.set_index("metric")
    base_outcomes: dict[str, dict[str, tuple[float, float]]] = {}
    delta_rows = []
    for name, tol in tolerances.items():
        metric = BY_NAME[name]
        b = float(base_metrics.at[name, "value"]) if name in base_metrics.index else math.nan
        c = float(board.at[name, "value"])
        delta = round(c - b, 9) + 0.0  # no -0.000 from rounding noise
        if math.isnan(b) or math.isnan(c):
            ok, note = True, "not comparable (n=0 on one side)"
        elif metric.higher_is_better:
            ok, note = delta >= -tol - _EPS, ""
        else:
            ok, note = delta <= tol + _EPS, ""
        base_out = base_outcomes[name] = baseline.outcomes(name)
        diffs = []
        for cid in matched:
            row = per_case.loc[cid]
            den = row[f"{name}__den"]
            if cid in base_out and den:
                bn, bd = base_out[cid]
                diffs.append(row[f"{name}__num"] / den - bn / bd)
        lo, hi, p = paired_bootstrap(np.asarray(diffs, dtype=float))
        distinguishable = bool(diffs) and not math.isnan(lo) and (lo > 0 or hi < 0)
        if not note:
            if not diffs:
                note = "no paired cases"
            elif distinguishable:
                note = f"distinguishable from noise (p={p:.3f}, {len(diffs)} paired)"
            else:
                note = f"within noise at n={len(diffs)} (p={p:.2f})"
        delta_rows.append(dict(
            metric=name, baseline=b, current=c, delta=delta, tolerance=tol, direction=metric.direction,
            passed=ok, n_baseline=int(base_metrics.at[name, "n"]) if name in base_metrics.index else 0,
            n_current=int(board.at[name, "n"]), n_paired=len(diffs), paired_ci_low=lo, paired_ci_high=hi,
            p_value=p, distinguishable=distinguishable, note=note))
    deltas = pd.DataFrame(delta_rows, columns=DELTA_COLUMNS)
    failed_metrics = deltas[~deltas["passed"]]
    detail = "no gated metric moved past its tolerance"
    if len(failed_metrics):
        detail = "; ".join(
            f"{r.metric} {r.baseline:.3f} -> {r.current:.3f} ({r.delta:+.3f}, tolerance {r.tolerance:g})"
            for r in failed_metrics.itertuples(index=False))
    unchanged_or_new = set(matched) | set(new) | set(changed)  # removed cases have no current row
    worse_cases = [
        cid for cid in per_case.index if cid in unchanged_or_new and any(
            per_case.at[cid, f"{m}__den"] and _case_worse(per_case.loc[cid], m, base_outcomes[m].get(cid))
            for m in failed_metrics["metric"])
    ]
    tiers.append(dict(tier="tier 2: metrics vs baseline", passed=failed_metrics.empty, detail=detail,
                      case_ids=worse_cases))

    # Tier 2: per-case regressions
    regressed_rows = [
        dict(case_id=cid, baseline_state="passed", current_state="failed", why=per_case.at[cid, "fail_reasons"])
        for cid in matched if base_cases[cid]["passed"] and not per_case.at[cid, "case_passed"]
    ]
    regressed = pd.DataFrame(regressed_rows, columns=["case_id", "baseline_state", "current_state", "why"])
    tiers.append(dict(tier="tier 2: no passing case regresses", passed=regressed.empty,
                      detail=f"{len(regressed)} previously passing case(s) now fail" if len(regressed)
                      else f"{len(matched)} matched case(s), none regressed",
                      case_ids=regressed["case_id"].tolist()))

    # Tier 2: new and changed cases must pass
    new_rows = [
        dict(case_id=cid, status="changed" if cid in changed else "new",
             baseline_state=("passed" if base_cases[cid]["passed"] else "failed") if cid in changed else "absent",
             why=per_case.at[cid, "fail_reasons"])
        for cid in per_case.index if (cid in new or cid in changed) and not per_case.at[cid, "case_passed"]
    ]
    new_failing = pd.DataFrame(new_rows, columns=["case_id", "status", "baseline_state", "why"])
    n_new = len(new) + len(changed)
    tiers.append(dict(tier="tier 2: new cases pass", passed=new_failing.empty,
                      detail=f"{len(new_failing)} of {n_new} new or changed case(s) fail" if len(new_failing)
                      else f"{n_new} new or changed case(s), all pass",
                      case_ids=new_failing["case_id"].tolist()))

    return GateResult(
        tiers=pd.DataFrame(tiers, columns=TIER_COLUMNS), metric_deltas=deltas, regressed=regressed,
        new_failing=new_failing, changed_cases=changed, removed_cases=removed,
        dataset_match=baseline.dataset_fingerprint == run.dataset_fingerprint,
        baseline_path=baseline.path, run=run, baseline_judge=baseline.data.get("judge"),
    )


def _case_worse(row: pd.Series, metric: str, base: tuple[float, float] | None) -> bool:
    """Whether this case contributes to a metric's bad movement: worse than its baseline self (``base``
    is its baseline numerator and denominator), or, when it has none, short of the metric's best."""
    den = row[f"{metric}__den"]
    share = row[f"{metric}__num"] / den
    higher = BY_NAME[metric].higher_is_better
    if base is not None:
        before = base[0] / base[1]
        return share < before - _EPS if higher else share > before + _EPS
    return share < 1 - _EPS if higher else share > _EPS

