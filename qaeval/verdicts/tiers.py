"""The gate's steps, each a function a reader can name: the tolerances (``gated``, ``load_tolerances``),
matching the run's cases with the baseline's (``match_cases``), and the four tiers: ``tier_one`` (every
deterministic check green, no adapter error), ``metric_movements`` and ``metrics_tier`` (no gated metric
moves the wrong way by more than its tolerance, with the paired noise test beside it), ``regressions``
(no case that passed in the baseline fails now) and ``new_cases`` (every new or changed case passes).
``qaeval.verdicts.gate`` puts them together into a ``GateResult``."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

import numpy as np
import pandas as pd

from qaeval.errors import DatasetError, UsageError
from qaeval.files import loads_strict, read_text
from qaeval.frames import frame
from qaeval.scoring.evaluate import RunResult
from qaeval.scoring.metrics import GATED, Metric
from qaeval.scoring.outcomes import reasons_text
from qaeval.verdicts.baseline import Baseline
from qaeval.verdicts.noise import noise_note, sign_flip_test

_EPS = 1e-9

DEFAULT_TOLERANCES: dict[str, float] = dict(GATED)

TIER_SCHEMA = {"tier": "text", "rule": "text", "passed": "bool", "detail": "text", "case_ids": "object"}


TierRule = Literal["deterministic checks", "metrics vs baseline", "no passing case regresses", "new cases pass"]
TIER_RULES: tuple[str, ...] = get_args(TierRule)


def tier_row(level: int, rule: TierRule, passed: bool, detail: str, case_ids: list[str]) -> dict[str, Any]:
    """One row of the tiers frame: ``tier`` is the label people read ("tier 2: new cases pass"),
    ``rule`` the rule alone ("new cases pass")."""
    return dict(tier=f"tier {level}: {rule}", rule=rule, passed=passed, detail=detail, case_ids=case_ids)
DELTA_SCHEMA = {
    "metric": "text", "baseline": "float", "current": "float", "delta": "float", "tolerance": "float",
    "direction": "text", "passed": "bool", "n_baseline": "int", "n_current": "int", "n_paired": "int",
    "n_moved": "int", "p_value": "float", "distinguishable": "bool", "note": "text",
}
REGRESSED_SCHEMA = {"case_id": "text", "baseline_state": "text", "current_state": "text", "why": "text"}
NEW_SCHEMA = {"case_id": "text", "status": "text", "baseline_state": "text", "why": "text"}


def gated(metrics: Sequence[Metric]) -> dict[str, float]:
    """The default tolerance of every gated metric among ``metrics`` (a run's, registered ones included)."""
    return {m.name: m.tolerance for m in metrics if m.tolerance is not None}


def load_tolerances(path: str | Path | None = None, overrides: list[str] | None = None,
                    defaults: Mapping[str, float] = DEFAULT_TOLERANCES) -> dict[str, float]:
    """Defaults (the built-in gated metrics', or ``gated(run.metrics)``), then a JSON file
    ``{"metric": tolerance}``, then ``metric=value`` overrides."""
    tolerances = dict(defaults)
    updates: dict[str, Any] = {}
    if path is not None:
        try:
            data = loads_strict(read_text(path, "tolerances file"))
        except ValueError as exc:
            raise DatasetError(f"tolerances file is not valid JSON ({exc})", file=str(path)) from None
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
        if name not in defaults:
            raise UsageError(f"no gated metric named {name!r}; gated: {', '.join(defaults)}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise UsageError(f"tolerance for {name} must be a finite number >= 0, got {value!r}")
        tolerances[name] = float(value)
    return tolerances


# --------------------------------------------------------------------------- the steps


@dataclass(frozen=True)
class CaseMatch:
    matched: list[str]
    changed: list[str]
    new: list[str]
    removed: list[str]


def match_cases(run: RunResult, baseline: Baseline) -> CaseMatch:
    ids = run.per_case["case_id"].tolist()
    base = baseline.cases
    return CaseMatch(
        matched=[c for c in ids if c in base and base[c].fingerprint == run.suite[c].fingerprint],
        changed=[c for c in ids if c in base and base[c].fingerprint != run.suite[c].fingerprint],
        new=[c for c in ids if c not in base],
        removed=sorted(c for c in base if c not in run.suite),
    )


def tier_one(run: RunResult) -> dict[str, Any]:
    bad = run.tier_one_failures
    detail = f"all deterministic{' and tier-1' if run.registered.checks else ''} checks green, no adapter error"
    if bad:
        errored = run.outputs.loc[run.outputs["error"].notna(), "case_id"]
        failing = run.checks[~run.checks["passed"] & ~run.checks["case_id"].isin(errored)]  # not by text
        c = run.custom
        blocking = c[c["blocks"] & ~c["passed"] & ~c["case_id"].isin(errored)].rename(columns={"name": "check"})
        parts = [f"adapter error on {len(errored)}"] if len(errored) else []
        parts += [f"{check} failed on {len(ids)}" for frame_ in (failing, blocking) for check, ids in
                  sorted(frame_.groupby("check")["case_id"].apply(list).items())]
        detail = f"{len(bad)} case(s) not green: " + ", ".join(parts)
    return tier_row(1, "deterministic checks", not bad, detail, bad)


MOVEMENT = ("metric", "baseline", "current", "delta", "tolerance", "direction", "passed", "n_baseline", "n_current")


def movement(metric: Metric, tol: float, baseline: Baseline, board: pd.DataFrame) -> dict[str, Any]:
    """How one gated metric moved from the baseline's value to the run's (``board``: the scoreboard
    indexed by metric), and whether that is within its tolerance: the part of a metric_deltas row that
    decides. A metric the baseline lacks (registered since) is not comparable, and passes."""
    name = metric.name
    b, n_base = baseline.metrics.get(name, (math.nan, 0))
    c = float(board.at[name, "value"])
    delta = round(c - b, 9) + 0.0 if not (math.isnan(b) or math.isnan(c)) else math.nan
    if math.isnan(delta):
        ok = True
    else:
        ok = delta >= -tol - _EPS if metric.higher_is_better else delta <= tol + _EPS
    return dict(metric=name, baseline=b, current=c, delta=delta, tolerance=tol, direction=metric.direction,
                passed=ok, n_baseline=n_base, n_current=int(board.at[name, "n"]))


def metric_movements(run: RunResult, baseline: Baseline, tolerances: Mapping[str, float],
                     matched: list[str]) -> pd.DataFrame:
    """One row per gated metric: baseline and current value, delta, tolerance, pass, and the noise test."""
    board = run.scoreboard.set_index("metric")
    position = {cid: i for i, cid in enumerate(run.units["case_id"])}
    by_name = {m.name: m for m in run.metrics}
    rows = []
    for name, tol in tolerances.items():
        nums, dens = run.units[f"{name}__num"].to_numpy(), run.units[f"{name}__den"].to_numpy()
        moved_by = movement(by_name[name], tol, baseline, board)
        delta = moved_by["delta"]
        note = "not comparable (n=0 on one side)" if math.isnan(delta) else ""
        base_units = baseline.outcomes(name)
        diffs = []
        for cid in matched:
            num, den = nums[position[cid]], dens[position[cid]]
            if den and cid in base_units:
                bn, bd = base_units[cid]
                diffs.append(num / den - bn / bd)
        p, floor, moved = sign_flip_test(np.asarray(diffs, dtype=float))
        distinguishable, noise = noise_note(p, floor, moved, len(diffs))
        if moved == 0 and diffs and not math.isnan(delta) and abs(delta) > _EPS:
            noise += "; the change comes from cases counted on one side only"
        rows.append(dict(**moved_by, n_paired=len(diffs), n_moved=moved, p_value=p if diffs else math.nan,
                         distinguishable=distinguishable, note=note or noise))
    return frame(rows, DELTA_SCHEMA)


def _worse(share: float, higher: bool, base: tuple[float, float] | None) -> bool:
    """Whether a case contributes to a metric's bad movement: worse than its baseline self, or, when it
    has none, short of the metric's best."""
    if base is not None:
        before = base[0] / base[1]
        return share < before - _EPS if higher else share > before + _EPS
    return share < 1 - _EPS if higher else share > _EPS


def metrics_tier(run: RunResult, baseline: Baseline, deltas: pd.DataFrame) -> dict[str, Any]:
    failed = deltas[~deltas["passed"]]
    detail = "no gated metric moved past its tolerance"
    if len(failed):
        detail = "; ".join(f"{r.metric} {r.baseline:.3f} -> {r.current:.3f} ({r.delta:+.3f}, tolerance {r.tolerance:g})"
                           for r in failed.itertuples(index=False))
    worse: set[str] = set()
    higher = {m.name: m.higher_is_better for m in run.metrics}
    for metric in failed["metric"]:
        base = baseline.outcomes(metric)
        for cid, num, den in zip(run.units["case_id"], run.units[f"{metric}__num"], run.units[f"{metric}__den"]):
            if den and _worse(num / den, higher[metric], base.get(cid)):
                worse.add(cid)
    return tier_row(2, "metrics vs baseline", failed.empty, detail, [c for c in run.units["case_id"] if c in worse])


def regressions(run: RunResult, baseline: Baseline, matched: list[str]) -> pd.DataFrame:
    pc = run.per_case.set_index("case_id")
    rows = [dict(case_id=cid, baseline_state="passed", current_state="failed", why=reasons_text(pc.at[cid, "fail_reasons"]))
            for cid in matched if baseline.cases[cid].passed and not pc.at[cid, "case_passed"]]
    return frame(rows, REGRESSED_SCHEMA)


def new_cases(run: RunResult, baseline: Baseline, match: CaseMatch) -> pd.DataFrame:
    pc = run.per_case.set_index("case_id")
    rows = [dict(case_id=cid, status="changed" if cid in match.changed else "new",
                 baseline_state=("passed" if baseline.cases[cid].passed else "failed") if cid in match.changed else "absent",
                 why=reasons_text(pc.at[cid, "fail_reasons"]))
            for cid in pc.index if (cid in match.new or cid in match.changed) and not pc.at[cid, "case_passed"]]
    return frame(rows, NEW_SCHEMA)
