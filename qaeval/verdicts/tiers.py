"""The gate's steps: ``match_cases``, then the four tiers: ``tier_one`` (deterministic checks),
``metric_movements`` and ``metrics_tier`` (gated metrics within tolerance, with the noise test),
``regressions`` and ``new_cases``. ``qaeval.verdicts.gate`` puts them together into a ``GateResult``."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

import numpy as np
import pandas as pd

from qaeval.core.frames import frame
from qaeval.scoring.metrics import Metric
from qaeval.scoring.outcomes import reasons_text
from qaeval.scoring.result import RunResult
from qaeval.verdicts.baseline import CORRECTNESS, Baseline, right_counts
from qaeval.verdicts.noise import (
    CaseTrials,
    fisher_drop_p,
    metric_level,
    noise_note,
    sign_flip_test,
    tarone_level,
    trials_test,
)

_EPS = 1e-9

TIER_SCHEMA = {"tier": "text", "rule": "text", "passed": "bool", "detail": "text", "case_ids": "object"}
TierRule = Literal["deterministic checks", "metrics vs baseline", "no passing case regresses", "new cases pass"]
TIER_RULES: tuple[str, ...] = get_args(TierRule)


def tier_row(level: int, rule: TierRule, passed: bool, detail: str, case_ids: list[str]) -> dict[str, Any]:
    """One row of the tiers frame: ``tier`` is the label people read ("tier 2: new cases pass"),
    ``rule`` the rule alone ("new cases pass")."""
    return dict(tier=f"tier {level}: {rule}", rule=rule, passed=passed, detail=detail, case_ids=case_ids)


DELTA_SCHEMA = {
    "metric": "text",
    "baseline": "float",
    "current": "float",
    "delta": "float",
    "tolerance": "float",
    "direction": "text",
    "passed": "bool",
    "n_baseline": "int",
    "n_current": "int",
    "n_paired": "int",
    "n_moved": "int",
    "p_value": "float",
    "distinguishable": "bool",
    "note": "text",
    "min_p": "float",  # with trials: the smallest p the metric's trials test allows (NaN otherwise)
}
MOVEMENT = tuple(DELTA_SCHEMA)[:9]  # the columns ``movement`` gives: what decides a metric
REGRESSED_SCHEMA = {"case_id": "text", "baseline_state": "text", "current_state": "text", "why": "text"}
NEW_SCHEMA = {"case_id": "text", "status": "text", "baseline_state": "text", "why": "text"}
CASE_TRIALS_SCHEMA = {
    "case_id": "text",
    "baseline_passes": "int",
    "baseline_trials": "int",
    "passes": "int",
    "trials": "int",
    "p_value": "float",
    "min_p": "float",
    "verdict": "text",
}


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
    if bad:  # over every trial: a case is not green when any of its trials is not
        errored: set[str] = set()
        failed: dict[str, set[str]] = {}
        for trial in run.trial_runs or (run,):
            erred = set(trial.outputs.loc[trial.outputs["error"].notna(), "case_id"])
            errored |= erred
            failing = trial.checks[~trial.checks["passed"] & ~trial.checks["case_id"].isin(erred)]  # not by text
            c = trial.custom
            blocking = c[c["blocks"] & ~c["passed"] & ~c["case_id"].isin(erred)].rename(columns={"name": "check"})
            for frame_ in (failing, blocking):
                for check, ids in frame_.groupby("check")["case_id"]:
                    failed.setdefault(str(check), set()).update(ids)
        parts = [f"adapter error on {len(errored)}"] if errored else []
        parts += [f"{check} failed on {len(ids)}" for check, ids in sorted(failed.items())]
        detail = f"{len(bad)} case(s) not green: " + ", ".join(parts)
    return tier_row(1, "deterministic checks", not bad, detail, bad)


def movement(
    metric: Metric,
    tol: float,
    baseline: Baseline,
    board: pd.DataFrame,
    *,
    p_worse: float | None = None,
    level: float | None = None,
) -> dict[str, Any]:
    """The ``MOVEMENT`` part of a metric_deltas row (``board``: the scoreboard indexed by metric). A metric
    the baseline lacks is not comparable, and passes. With trials (``level``), a move past the tolerance
    blocks only when ``p_worse`` <= ``level``, or when no case pairs with the baseline (``p_worse`` NaN)."""
    name = metric.name
    b, n_base = baseline.metrics.get(name, (math.nan, 0))
    c = float(board.at[name, "value"])
    delta = round(c - b, 9) + 0.0 if not (math.isnan(b) or math.isnan(c)) else math.nan
    if math.isnan(delta):
        ok = True
    else:
        ok = delta >= -tol - _EPS if metric.higher_is_better else delta <= tol + _EPS
        if not ok and level is not None and p_worse is not None and not math.isnan(p_worse):
            ok = p_worse > level  # no paired case to test (p_worse NaN): the tolerance alone decides
    return dict(zip(MOVEMENT, (name, b, c, delta, tol, metric.direction, ok, n_base, int(board.at[name, "n"]))))


def metric_outcome(row: Mapping[str, Any]) -> str:
    """What decided a metric_deltas row: "within", "past tolerance, within noise", "not comparable" or
    "BLOCKS"."""
    delta, tol = row["delta"], row["tolerance"]
    if not row["passed"]:
        return "BLOCKS"
    if delta is None or math.isnan(delta):
        return "not comparable"
    past = delta < -tol - _EPS if row["direction"] == "higher" else delta > tol + _EPS
    return "past tolerance, within noise" if past else "within"


def metric_movements(
    run: RunResult, baseline: Baseline, tolerances: Mapping[str, float], matched: list[str], alpha: float | None = None
) -> pd.DataFrame:
    """One ``DELTA_SCHEMA`` row per gated metric. Without ``alpha`` (one trial a side) the tolerance alone
    decides and ``p_value`` is the two-sided sign-flip p, a note. With ``alpha`` (trials) ``p_value`` is the
    trials test's one-sided p that the run is worse, and a move past the tolerance blocks only when it is
    at most ``metric_level`` (Tarone over the metrics' tests)."""
    board = run.scoreboard.set_index("metric")
    position = {cid: i for i, cid in enumerate(run.units["case_id"])}
    by_name = {m.name: m for m in run.metrics}
    tests = []
    for name, tol in tolerances.items():
        nums, dens = run.units[f"{name}__num"].to_numpy(), run.units[f"{name}__den"].to_numpy()
        delta = movement(by_name[name], tol, baseline, board)["delta"]
        if alpha is None:
            diffs, outcomes = [], baseline.outcomes(name)
            for cid in matched:
                num, den = nums[position[cid]], dens[position[cid]]
                if den and cid in outcomes:
                    bn, bd = outcomes[cid]
                    diffs.append(num / den - bn / bd)
            p, floor, moved = sign_flip_test(np.asarray(diffs, dtype=float))
            paired = len(diffs)
        else:
            pairs = _trial_pairs(run, baseline, name, matched)
            p, floor, moved = trials_test(pairs, higher_is_better=by_name[name].higher_is_better)
            paired = len(pairs)
        tests.append((name, tol, delta, p, floor, moved, paired))
    level = metric_level([floor for *_, floor, _, paired in tests if paired], alpha) if alpha is not None else None
    rows = []
    for name, tol, delta, p, floor, moved, paired in tests:
        note = "not comparable (n=0 on one side)" if math.isnan(delta) else ""
        moved_by = movement(by_name[name], tol, baseline, board, p_worse=p if paired else math.nan, level=level)
        distinguishable, noise = noise_note(p, floor, moved, paired)
        if level is not None:
            noise = f"one-sided p={p:.3g} against level {level:.3g} (trials test); " + noise
        if moved == 0 and paired and not math.isnan(delta) and abs(delta) > _EPS:
            noise += "; the change comes from cases counted on one side only"
        if distinguishable and (math.isnan(delta) or abs(delta) <= _EPS):  # the value did not move: no change
            distinguishable = False  # to tell from noise, whatever the cases' shares did
            noise += "; not a change: the metric's value did not move"
        rows.append(
            dict(
                **moved_by,
                n_paired=paired,
                n_moved=moved,
                p_value=p if paired else math.nan,
                distinguishable=distinguishable,
                note=note or noise,
                min_p=floor if paired and level is not None else math.nan,
            )
        )
    return frame(rows, DELTA_SCHEMA)


def _trial_pairs(run: RunResult, baseline: Baseline, name: str, matched: list[str]) -> list[CaseTrials]:
    """Each matched case's trials of ``name``, both sides. An adaptive run's rule comes with them when its
    trials were chosen on their own (``"first"``) or against this very baseline (``"first or baseline"``);
    against another baseline only its first trial, the one every case had, is given."""
    trials = run.trial_runs or (run,)
    rule = None
    if run.meta.adaptive:
        chosen_by = run.meta.adaptive_baseline
        rule = "first" if chosen_by is None else "first or baseline" if chosen_by == baseline.settled().digest else None
        trials = trials if rule is not None else trials[:1]
    current: dict[str, tuple[list[float], list[bool]]] = {}
    for trial in trials:
        units = trial.units.set_index("case_id")
        for cid, ok in zip(trial.per_case["case_id"], trial.per_case["case_passed"]):
            num, den = float(units.at[cid, f"{name}__num"]), float(units.at[cid, f"{name}__den"])
            values, passed = current.setdefault(cid, ([], []))
            values.append(num / den if den else math.nan)
            passed.append(bool(ok))
    base = baseline.trial_outcomes(name)
    return [
        CaseTrials(base[cid][0], tuple(current[cid][0]), base[cid][1], tuple(current[cid][1]), rule)
        for cid in matched
        if cid in base and cid in current
    ]


def _worse(share: float, higher: bool, base: tuple[float, float] | None) -> bool:
    """Whether a case moved a metric the bad way: worse than its baseline self, or short of the best."""
    if base is not None:
        before = base[0] / base[1]
        return share < before - _EPS if higher else share > before + _EPS
    return share < 1 - _EPS if higher else share > _EPS


def metrics_tier(run: RunResult, baseline: Baseline, deltas: pd.DataFrame) -> dict[str, Any]:
    """The metrics tier's row: the gated metrics that blocked, and the cases that moved them."""
    failed = deltas[~deltas["passed"]]
    detail = "no gated metric moved past its tolerance"
    if len(failed):
        detail = "; ".join(
            f"{r.metric} {r.baseline:.3f} -> {r.current:.3f} ({r.delta:+.3f}, tolerance {r.tolerance:g})"
            for r in failed.itertuples(index=False)
        )
    worse: set[str] = set()
    higher = {m.name: m.higher_is_better for m in run.metrics}
    for metric in failed["metric"]:
        base = baseline.outcomes(metric)
        for cid, num, den in zip(run.units["case_id"], run.units[f"{metric}__num"], run.units[f"{metric}__den"]):
            if den and _worse(num / den, higher[metric], base.get(cid)):
                worse.add(cid)
    return tier_row(2, "metrics vs baseline", failed.empty, detail, [c for c in run.units["case_id"] if c in worse])


def _state(passes: int, trials: int) -> str:
    return ("passed" if passes else "failed") if trials == 1 else f"passed {passes}/{trials}"


@dataclass(frozen=True)
class CasePasses:
    """How the gate counts a case's passing trials: ``case_passed``, and with answer ``correctness`` gated
    a fully correct answer too, on both sides. ``current``: per case (passes, trials) as counted;
    ``wrong``: per case the trials that passed on their own rules but were answered wrongly."""

    correctness: bool
    current: Mapping[str, tuple[int, int]]
    wrong: Mapping[str, int]

    @classmethod
    def of(cls, run: RunResult, correctness: bool) -> CasePasses:
        pc = run.per_case
        trials = dict(zip(pc["case_id"], pc["trials"].astype(int).tolist()))
        if not correctness:
            return cls(False, dict(zip(pc["case_id"], zip(pc["passes"].astype(int).tolist(), trials.values()))), {})
        counts = right_counts(run)
        return cls(
            True,
            {cid: (counts[cid][0], n) for cid, n in trials.items()},
            {cid: wrong for cid, (_, wrong) in counts.items() if wrong},
        )

    def baseline(self, baseline: Baseline, cid: str) -> tuple[int, int]:
        case = baseline.cases[cid]
        return case.gate_passes(self.correctness), case.trials

    def passing(self, cid: str) -> bool:
        """Every trial of the case passed, as the gate counts them."""
        passes, trials = self.current[cid]
        return passes == trials

    def why(self, cid: str, reasons: Any, score: Any) -> str:
        """Why a case fails: its reasons, and the trials answered wrongly when correctness is gated."""
        text = reasons_text(reasons)
        wrong = self.wrong.get(cid, 0)
        if wrong:
            _, trials = self.current[cid]
            said = f"score {score}" if trials == 1 and not pd.isna(score) else f"{wrong} of {trials} trials"
            text = "; ".join(t for t in (text, f"answer judged wrong ({CORRECTNESS}: {said})") if t)
        return text


def regressions(run: RunResult, trials: pd.DataFrame, passes: CasePasses | None = None) -> pd.DataFrame:
    """The cases ``case_trials`` calls broken or regressed (with one trial each: passed then, fail now)."""
    pc = run.per_case.set_index("case_id")
    passes = passes or CasePasses.of(run, False)
    rows = []
    for r in trials[trials["verdict"].isin(["broken", "regressed"])].itertuples(index=False):
        why = passes.why(r.case_id, pc.at[r.case_id, "fail_reasons"], pc.at[r.case_id, CORRECTNESS])
        if r.verdict == "regressed":
            why = f"passes less often than in the baseline (one-sided Fisher p={r.p_value:.3g}): {why}"
        states = _state(r.baseline_passes, r.baseline_trials), _state(r.passes, r.trials)
        rows.append(dict(zip(REGRESSED_SCHEMA, (r.case_id, *states, why))))
    return frame(rows, REGRESSED_SCHEMA)


def new_cases(run: RunResult, baseline: Baseline, match: CaseMatch, passes: CasePasses | None = None) -> pd.DataFrame:
    pc = run.per_case.set_index("case_id")
    passes = passes or CasePasses.of(run, False)
    rows = [
        dict(
            case_id=cid,
            status="changed" if cid in match.changed else "new",
            baseline_state=("passed" if baseline.cases[cid].passed else "failed") if cid in match.changed else "absent",
            why=passes.why(cid, pc.at[cid, "fail_reasons"], pc.at[cid, CORRECTNESS]),
        )
        for cid in pc.index
        if (cid in match.new or cid in match.changed) and not passes.passing(cid)
    ]
    return frame(rows, NEW_SCHEMA)


def case_trials(
    run: RunResult, baseline: Baseline, matched: list[str], alpha: float, passes: CasePasses | None = None
) -> pd.DataFrame:
    """One ``CASE_TRIALS_SCHEMA`` row per matched case, its passes counted as ``passes`` says. ``verdict``:
    ``broken`` (passed every baseline trial, fails every current one; blocks), ``regressed`` (one-sided
    Fisher p at most Tarone's level for ``alpha`` over the cases not broken; blocks), ``flaky`` (some
    trials pass and some fail, on either side; never blocks) or ``steady``."""
    passes = passes or CasePasses.of(run, False)
    rows: list[dict[str, Any]] = []
    for cid in matched:
        (cb, nb), (cc, nc) = passes.baseline(baseline, cid), passes.current[cid]
        verdict = "broken" if cb == nb and cc == 0 else "steady"
        p_and_floor = fisher_drop_p(cb, nb, cc, nc)  # p_value, min_p
        rows.append(dict(zip(CASE_TRIALS_SCHEMA, (cid, cb, nb, cc, nc, *p_and_floor, verdict))))
    level, _ = tarone_level([r["min_p"] for r in rows if r["verdict"] != "broken"], alpha)
    for r in rows:
        if r["verdict"] == "broken":
            continue
        if r["passes"] * r["baseline_trials"] < r["baseline_passes"] * r["trials"] and r["p_value"] <= level:
            r["verdict"] = "regressed"
        elif 0 < r["passes"] < r["trials"] or 0 < r["baseline_passes"] < r["baseline_trials"]:
            r["verdict"] = "flaky"
    return frame(rows, CASE_TRIALS_SCHEMA)


def one_trial_each(run: RunResult, baseline: Baseline, matched: list[str]) -> bool:
    """Whether both sides ran every matched case once: the gate then decides as it did before trials."""
    return run.trials == 1 and all(baseline.cases[c].trials == 1 for c in matched)


def _regression_detail(regressed: pd.DataFrame, trials: pd.DataFrame, match: CaseMatch) -> str:
    flaky = int((trials["verdict"] == "flaky").sum())
    tail = f"; {flaky} flaky, not blocking" if flaky else ""
    if len(regressed):
        return f"{len(regressed)} previously passing case(s) now fail{tail}"
    return f"{len(match.matched)} matched case(s), none regressed{tail}"


def levels(run: RunResult, baseline: Baseline, match: CaseMatch, alpha: float) -> tuple[float, float | None]:
    """(the cases' share of alpha, the gated metrics' share or None): with one trial on both sides the
    tolerances alone decide; otherwise half for the cases and half for the metrics."""
    if one_trial_each(run, baseline, match.matched):
        return alpha, None
    return alpha / 2, alpha / 2


def decide(
    run: RunResult,
    baseline: Baseline,
    match: CaseMatch,
    deltas: pd.DataFrame,
    trials: pd.DataFrame,
    passes: CasePasses | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(tiers, regressed, new_failing) from the match, the metric movements and the cases' trials."""
    regressed = regressions(run, trials, passes)
    new_failing = new_cases(run, baseline, match, passes)
    n_new = len(match.new) + len(match.changed)
    tiers = [
        tier_one(run),
        metrics_tier(run, baseline, deltas),
        tier_row(
            2,
            "no passing case regresses",
            regressed.empty,
            _regression_detail(regressed, trials, match),
            regressed["case_id"].tolist(),
        ),
        tier_row(
            2,
            "new cases pass",
            new_failing.empty,
            f"{len(new_failing)} of {n_new} new or changed case(s) fail"
            if len(new_failing)
            else f"{n_new} new or changed case(s), all pass",
            new_failing["case_id"].tolist(),
        ),
    ]
    return frame(tiers, TIER_SCHEMA), regressed, new_failing
