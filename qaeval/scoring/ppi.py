"""Prediction-powered estimates: a judge-scored metric corrected by a small sample of human labels.

PPI (Angelopoulos et al., 2023; the PPI++ power-tuned form, as in ``ppi-python`` and ARES) uses the
cases a person also labelled to measure the judge's bias and remove it:

    estimate = mean over labelled cases of (human - lam * judge)  +  lam * mean over all cases of judge

with ``lam`` in [0, 1] chosen to make the interval as narrow as the data allows. The 95% interval is
the normal interval with the two variances added, except where ``lam`` is 0 (the judge carries no
information): the estimate is then the labelled cases' mean, with the Wilson score interval, which
stays honest when every label agrees. It is wider than the judge-only interval unless the judge agrees
with people on every labelled case, and it covers the rate a person would have measured.

"All cases" are the metric's denominator's; a human label counts 1 when it gives full credit (score
2), as the metric counts the judge. Labels whose output fingerprint no longer matches the run are left
out. Intervals are clipped to [0, 1].
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pandas as pd

from qaeval.scoring.metrics import METRICS


def ppi_mean(
    human: np.ndarray,
    judge_labelled: np.ndarray,
    judge_all: np.ndarray,
    *,
    level: float = 0.95,
    lam: float | None = None,
) -> tuple[float, float, float, float]:
    """(estimate, ci_low, ci_high, lam) of the mean of ``human`` over the whole population, using the
    judge's predictions on the labelled cases and on every case. Unclipped."""
    y = np.asarray(human, dtype=float)
    f = np.asarray(judge_labelled, dtype=float)
    g = np.asarray(judge_all, dtype=float)
    n, big_n = y.size, g.size
    if n < 2 or big_n < 1:
        return math.nan, math.nan, math.nan, math.nan
    if lam is None:
        pooled = np.concatenate([f, g])
        variance = float(np.var(pooled, ddof=1)) if pooled.size > 1 else 0.0
        if variance <= 0:
            lam = 0.0  # the judge says the same thing everywhere: it carries no information
        else:
            covariance = float(np.mean((y - y.mean()) * (f - f.mean())))
            lam = float(np.clip(covariance / ((1 + n / big_n) * variance), 0.0, 1.0))
    estimate = float(np.mean(lam * g) + np.mean(y - lam * f))
    z = NormalDist().inv_cdf(0.5 + level / 2)
    if lam == 0 and np.all((y >= 0) & (y <= 1)):
        low, high = wilson(estimate, n, z)
        return estimate, low, high, lam
    se = math.sqrt((np.std(lam * g) / math.sqrt(big_n)) ** 2 + (np.std(y - lam * f) / math.sqrt(n)) ** 2)
    return estimate, estimate - z * se, estimate + z * se, lam


def wilson(mean: float, n: int, z: float) -> tuple[float, float]:
    """The Wilson score interval of a mean of ``n`` values in [0, 1] (exact for 0/1 values, conservative
    otherwise). Unlike the normal interval it does not collapse to a point when every value is 0 or 1:
    ten labels that all say 0 give [0, 0.28], not [0, 0]."""
    centre = (mean + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(mean * (1 - mean) / n + z * z / (4 * n * n))
    return (0.0 if mean <= 0 else max(0.0, centre - half)), (1.0 if mean >= 1 else min(1.0, centre + half))


def fresh_labels(labels: pd.DataFrame, per_case: pd.DataFrame) -> pd.DataFrame:
    """Labels whose case is in the run and whose output fingerprint (when given) still matches."""
    fingerprints = dict(zip(per_case["case_id"], per_case["output_fingerprint"]))
    keep = [
        cid in fingerprints and (fp is None or fp != fp or fp == fingerprints[cid])
        for cid, fp in zip(labels["case_id"], labels["output_fingerprint"])
    ]
    return labels[keep]


def apply_ppi(
    scoreboard: pd.DataFrame, units: pd.DataFrame, per_case: pd.DataFrame, labels: pd.DataFrame
) -> tuple[pd.DataFrame, list[str]]:
    """The scoreboard with ppi_value, ppi_ci_low, ppi_ci_high and n_labelled filled for every metric
    that a label axis maps onto (``Metric.label_axis``), and notes on what could not be estimated."""
    board = scoreboard.copy()
    usable = fresh_labels(labels, per_case)
    notes = []
    if len(usable) < len(labels):
        notes.append(
            f"{len(labels) - len(usable)} label(s) left out of the PPI estimates: their case is not "
            "in this run or its output has changed since it was labelled"
        )
    ids = units["case_id"].to_numpy(object)
    for m in METRICS:
        if m.label_axis is None:
            continue
        num, den = units[f"{m.name}__num"].to_numpy(float), units[f"{m.name}__den"].to_numpy(float)
        value, low, high, n = labelled_estimate(ids, num, den, usable, m.label_axis)
        row = board.index[board["metric"] == m.name][0]
        board.loc[row, "n_labelled"] = n
        if n >= 2:
            board.loc[row, ["ppi_value", "ppi_ci_low", "ppi_ci_high"]] = [value, low, high]
        elif (usable["axis"] == m.label_axis).any():
            notes.append(f"{m.name}: {n} usable label(s); a PPI estimate needs at least 2")
    board["n_labelled"] = board["n_labelled"].astype("int64")
    return board, notes


def labelled_estimate(
    ids: np.ndarray, num: np.ndarray, den: np.ndarray, labels: pd.DataFrame, axis: str
) -> tuple[float, float, float, int]:
    """(ppi_value, ppi_ci_low, ppi_ci_high, n_labelled) of the rate ``num / den`` over the ``ids`` whose
    ``den`` is not 0, from their labels on ``axis`` (a label of 2 counts 1), clipped to [0, 1]; NaN (and
    the count) with fewer than two usable labels."""
    population = den > 0
    judge = dict(zip(ids[population], num[population] / den[population]))
    on_axis = labels[labels["axis"] == axis]
    pairs = [(1.0 if h == 2 else 0.0, judge[c]) for c, h in zip(on_axis["case_id"], on_axis["human"]) if c in judge]
    if len(pairs) < 2:
        return math.nan, math.nan, math.nan, len(pairs)
    y, f = (np.array(v) for v in zip(*pairs))
    value, low, high, _ = ppi_mean(y, f, np.array(list(judge.values())))
    return min(1.0, max(0.0, value)), max(0.0, low), min(1.0, high), len(pairs)
