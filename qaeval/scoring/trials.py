"""Trials: each case run K times, each trial scored alone, then put together into one run (pure).

``combine_trials(runs)`` takes the K ``RunResult``s of one suite (trial 0 first) and returns the run that
holds them all:

* ``per_case``: one row per case, its output and judge columns trial 0's; each check column,
  ``deterministic_passed`` and ``case_passed`` hold only when they hold in every trial; ``fail_reasons``
  lists each distinct reason once, naming its trials. Added: ``trials`` (K), ``passes``, ``pass_rate``
  (passes / trials) and ``flaky`` (0 < passes < trials).
* ``units``: the mean over a case's trials of its numerators and denominators, so a case weighs the
  same whatever K is and the bootstrap resamples cases, never trials alone. With adaptive trials the
  units are the first trial's: the later ones went to the cases whose first trial failed.
* ``pass_hat_k`` and ``pass_at_k`` join the scoreboard when K > 1. With adaptive trials pass@k is
  estimated under the rule that chose which cases got more (``adaptive_pass_at_k``), and pass^k is
  not estimable (NaN, n = 0).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pandas as pd

from qaeval.scoring.metrics import Metric, scoreboard_and_slices
from qaeval.scoring.outcomes import FailReason

RunResult = Any  # qaeval.scoring.result.RunResult, which imports this module

TRIAL_COLUMNS = {"trials": "int", "passes": "int", "pass_rate": "float", "flaky": "bool"}


def pass_hat_k(passes: int, trials: int, k: int) -> float:
    """tau-bench's pass^k: the chance that k trials drawn without replacement from a case's ``trials``
    all pass, C(passes, k) / C(trials, k), an unbiased estimate of p^k. NaN when k > trials."""
    if k < 1 or k > trials:
        return math.nan
    return math.comb(passes, k) / math.comb(trials, k)


def pass_at_k(passes: int, trials: int, k: int) -> float:
    """Chen et al. (2021)'s pass@k: the chance that at least one of k trials drawn without replacement
    passes, 1 - C(trials - passes, k) / C(trials, k). NaN when k > trials."""
    if k < 1 or k > trials:
        return math.nan
    return 1.0 - math.comb(trials - passes, k) / math.comb(trials, k)


def adaptive_pass_at_k(first_passed: bool, passes: int, trials: int, k: int) -> float:
    """pass@k of one case under adaptive trials, whose later trials ran because its first failed (or
    regardless of it): the mean over the k-trial draws that hold the first trial of "one of them passes",
    1 when the first passed, else 1 - C(trials - 1 - passes, k - 1) / C(trials - 1, k - 1). Each draw is an
    unbiased estimate of 1 - (1 - p)^k whatever the first trial showed, since it needs the later trials
    only when the first failed, which is when they ran. NaN when k > trials and the first failed."""
    if k < 1:
        return math.nan
    if first_passed:
        return 1.0
    if k > trials:
        return math.nan
    return 1.0 - math.comb(trials - 1 - passes, k - 1) / math.comb(trials - 1, k - 1)


def trial_metrics(k: int, *, adaptive: bool = False) -> tuple[Metric, ...]:
    """The two scoreboard rows a run of several trials adds (over cases, not gated, no drift band)."""
    unknown = " (not estimable with adaptive trials: NaN)" if adaptive else ""
    return (
        Metric(
            "pass_hat_k",
            True,
            "cases",
            f"chance that all {k} trials of a case pass (pass^{k}){unknown}",
            lambda f: (math.nan, 0.0),
        ),
        Metric(
            "pass_at_k",
            True,
            "cases",
            f"chance that at least one of {k} trials of a case passes (pass@{k})",
            lambda f: (math.nan, 0.0),
        ),
    )


def merged_reasons(reasons_by_trial: Sequence[Sequence[FailReason]]) -> list[FailReason]:
    """Every distinct reason once, in the order first met; with several trials each names the trials
    it happened in (counted from 1): "judged unfaithful (score 0) [trials 2, 5 of 5]"."""
    seen: dict[tuple[str, str, str | None], list[int]] = {}
    for trial, reasons in enumerate(reasons_by_trial, start=1):
        for r in reasons:
            seen.setdefault((r.code, r.message, r.name), []).append(trial)
    if len(reasons_by_trial) == 1:
        return [FailReason(code, message, name) for code, message, name in seen]  # type: ignore[arg-type]  # a reason's code came from a FailReason
    total = len(reasons_by_trial)

    def where(at: list[int]) -> str:
        if len(at) == total:
            return f"all {total} trials"
        return f"trial{'s' if len(at) > 1 else ''} {', '.join(map(str, at))} of {total}"

    return [
        FailReason(code, f"{message} [{where(at)}]", name)  # type: ignore[arg-type]  # a reason's code came from a FailReason
        for (code, message, name), at in seen.items()
    ]


def add_trial_columns(per_case: pd.DataFrame) -> pd.DataFrame:
    """``per_case`` of a run of one trial with the trial columns: trials 1, passes 1 or 0, never flaky."""
    passed = per_case["case_passed"].to_numpy(bool)
    return per_case.assign(trials=1, passes=passed.astype(int), pass_rate=passed.astype(float), flaky=False)


def combine_trials(
    runs: Sequence[RunResult],
    *,
    bootstrap_seed: int = 0,
    pass_k: int | None = None,
    skip_scoreboard: bool = False,
    trials: int | None = None,
    adaptive: bool = False,
) -> RunResult:
    """One run from the trial runs of one suite: see the module's docstring. ``runs[0]`` is trial 0 and
    holds every case; a later trial's run may hold only some of them (``adaptive``: the cases one trial
    did not settle), so each case is counted over the trials it had. ``trials``: how many were asked
    for (default ``len(runs)``)."""
    first = runs[0]
    k_trials = trials or len(runs)
    k = pass_k or k_trials
    ids = first.per_case["case_id"].tolist()
    rows: dict[str, list[dict[str, Any]]] = {cid: [] for cid in ids}
    units: dict[str, list[dict[str, Any]]] = {cid: [] for cid in ids}
    for run in runs:
        for row in run.per_case.to_dict("records"):
            rows[row["case_id"]].append(row)
        for row in run.units.to_dict("records"):
            units[row["case_id"]].append(row)
    per_case = first.per_case.copy()
    check_columns = [
        c for c in per_case.columns if per_case[c].dtype == bool and c != "abstained" and c not in TRIAL_COLUMNS
    ]
    for column in check_columns:  # a check, deterministic_passed, case_passed, a registered check
        per_case[column] = [all(bool(r[column]) for r in rows[cid]) for cid in ids]
    if "trajectory_success" in per_case.columns:  # nullable: <NA> where the case is not multi-step
        per_case["trajectory_success"] = pd.array(
            [
                None
                if pd.isna(rows[cid][0]["trajectory_success"])
                else all(bool(r["trajectory_success"]) for r in rows[cid] if not pd.isna(r["trajectory_success"]))
                for cid in ids
            ],
            dtype="boolean",
        )
    passes = [sum(bool(r["case_passed"]) for r in rows[cid]) for cid in ids]
    counts = [len(rows[cid]) for cid in ids]
    per_case["fail_reasons"] = [merged_reasons([r["fail_reasons"] for r in rows[cid]]) for cid in ids]
    per_case["trials"] = counts
    per_case["passes"] = passes
    per_case["pass_rate"] = [c / n for c, n in zip(passes, counts)]
    per_case["flaky"] = [0 < c < n for c, n in zip(passes, counts)]
    mean_units = first.units.copy()
    numeric = [c for c in mean_units.columns if c != "case_id"]
    if not adaptive:  # with adaptive trials the first trial alone is an unbiased draw of every case
        for column in numeric:
            mean_units[column] = [sum(float(u[column]) for u in units[cid]) / len(units[cid]) for cid in ids]
    metrics = first.metrics
    if k_trials > 1:
        hat = [math.nan if adaptive else pass_hat_k(c, n, k) for c, n in zip(passes, counts)]
        at = [pass_at_k(c, n, k) for c, n in zip(passes, counts)]
        if adaptive:  # under the rule that chose which cases got more trials (see the module's docstring)
            firsts = [bool(rows[cid][0]["case_passed"]) for cid in ids]
            at = [adaptive_pass_at_k(f, c, n, k) for f, c, n in zip(firsts, passes, counts)]
        mean_units["pass_hat_k__num"] = [0.0 if math.isnan(v) else v for v in hat]
        mean_units["pass_at_k__num"] = [0.0 if math.isnan(v) else v for v in at]
        mean_units["pass_hat_k__den"] = [0.0 if math.isnan(v) else 1.0 for v in hat]
        mean_units["pass_at_k__den"] = [0.0 if math.isnan(v) else 1.0 for v in at]
        metrics = metrics + trial_metrics(k, adaptive=adaptive)
    combined = replace(
        first,
        per_case=per_case,
        units=mean_units,
        trial_runs=tuple(runs) if k_trials > 1 else (),
        meta=replace(
            first.meta, trials=k_trials, pass_k=k if k_trials > 1 else None, adaptive=adaptive and k_trials > 1
        ),
    )
    if skip_scoreboard:
        return combined
    board, slices = scoreboard_and_slices(mean_units, per_case, seed=bootstrap_seed, metrics=metrics)
    return replace(combined, scoreboard=board, slices=slices)


def trials_frame(run: RunResult, layer: str) -> pd.DataFrame:
    """A layer (``outputs``, ``checks``, ``verdicts``, ``per_case``, ...) of every trial of ``run``, with a
    ``trial`` column (0 to K - 1) after ``case_id``, rows in trial then suite order."""
    runs = run.trial_runs or (run,)
    parts = []
    for trial, r in enumerate(runs):
        df = getattr(r, layer).copy()
        df.insert(1, "trial", trial)
        parts.append(df)
    return pd.concat(parts, ignore_index=True)
