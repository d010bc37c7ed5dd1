"""How far a judge agrees with the people who labelled the same cases, and what decides trust.

Exact agreement with a Wilson interval, and quadratic-weighted kappa (how far the judge discriminates
between the scores the people gave); ``agreement_row`` is one axis of a calibration, ``_decide`` its
verdict. Pure functions over arrays and counts.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Any

import numpy as np
import pandas as pd

DEFAULT_MIN_AGREEMENT = 0.7
DEFAULT_MIN_LABELS = 10
DEFAULT_MIN_KAPPA = 0.4
AGREEMENT_SCHEMA = {
    "axis": "text",
    "n": "int",
    "exact": "float",
    "exact_low": "float",
    "exact_high": "float",
    "within_one": "float",
    "within_one_low": "float",
    "within_one_high": "float",
    "mae": "float",
    "kappa": "float",
    "spread": "bool",
    "assessed": "bool",
    "passed": "bool",
    "failed": "text",
    "status": "text",
}
AGREEMENT_VALUES = tuple(AGREEMENT_SCHEMA)[1:-1]  # what a calibration's audit compares: not the axis nor the words
ONE_SCORE = "the people gave one score only, so discrimination could not be measured"


def wilson(successes: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """The Wilson score interval for a proportion (NaN with n = 0)."""
    if n == 0:
        return math.nan, math.nan
    z = NormalDist().inv_cdf(0.5 + level / 2)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def quadratic_kappa(human: np.ndarray, judge: np.ndarray, categories: int = 3) -> float:
    """Cohen's kappa with quadratic weights; NaN when there is no spread to agree on."""
    if human.size == 0:
        return math.nan
    observed = np.zeros((categories, categories))
    for h, j in zip(human, judge):
        observed[h, j] += 1
    weights = np.array([[(i - j) ** 2 for j in range(categories)] for i in range(categories)], dtype=float)
    expected = np.outer(observed.sum(1), observed.sum(0)) / observed.sum()
    denominator = (weights * expected).sum()
    if denominator == 0:
        return math.nan
    return float(1 - (weights * observed).sum() / denominator)


def _failures(
    n: int, exact: float, kappa: float, spread: bool, *, bar: float, min_labels: int, min_kappa: float
) -> dict[str, str]:
    """The bars an assessed axis missed, each with what it says."""
    failed = {}
    if n < min_labels:
        failed["labels"] = f"too few labels to certify ({n} < {min_labels})"
    if exact < bar - 1e-12:
        failed["exact"] = f"weak: exact agreement {exact:.2f} < {bar:.2f}"
    if spread and kappa < min_kappa - 1e-12:
        failed["kappa"] = f"cannot tell answers apart: quadratic kappa {kappa:.2f} < {min_kappa:.2f}"
    return failed


def _decide(
    n: int,
    exact: float,
    kappa: float,
    spread: bool,
    *,
    assessed: bool,
    bar: float,
    min_labels: int,
    min_kappa: float,
    stale: int = 0,
) -> tuple[bool, str, str]:
    """(passed, failed bars, status) of one axis (``stale``: its labels whose output has changed since)."""
    if not assessed:
        return False, "", "not assessed: not among the axes calibrated"
    if n == 0 and stale:
        why = "the outputs changed since they were labelled; label this run's outputs, or calibrate on the run"
        return False, "labels", f"no usable label: all {stale} are stale ({why} they were given for)"
    if n == 0:
        return False, "labels", "no usable label"
    failed = _failures(n, exact, kappa, spread, bar=bar, min_labels=min_labels, min_kappa=min_kappa)
    words = "; ".join(failed.values()) or "ok"
    if not spread:
        words += f" on exact agreement alone: {ONE_SCORE}" if not failed else f" ({ONE_SCORE})"
    return not failed, ",".join(failed), words


def agreement_row(
    name: str, pairs: pd.DataFrame, *, bar: float, min_labels: int, min_kappa: float, assessed: bool, stale: int = 0
) -> dict[str, Any]:
    """One row of the agreement frame. ``assessed`` rows decide the verdict; the overall row and axes
    not assessed show their figures without deciding anything."""
    h = pairs["human"].to_numpy(int)
    j = pairs["judge"].astype("int64").to_numpy() if len(pairs) else np.zeros(0, dtype=int)
    n = int(h.size)
    spread = bool(np.unique(h).size > 1)
    exact_hits, within_hits = int((h == j).sum()), int((abs(h - j) <= 1).sum())
    exact, kappa = (exact_hits / n if n else math.nan), quadratic_kappa(h, j)
    if name == "overall":
        passed, failed, status = True, "", "not gated: every axis must pass on its own"
    else:
        passed, failed, status = _decide(
            n, exact, kappa, spread, assessed=assessed, bar=bar, min_labels=min_labels, min_kappa=min_kappa, stale=stale
        )
    figures = (exact, *wilson(exact_hits, n), within_hits / n if n else math.nan, *wilson(within_hits, n))
    mae = float(abs(h - j).mean()) if n else math.nan
    values = (name, n, *figures, mae, kappa, spread, assessed and name != "overall", passed, failed, status)
    return dict(zip(AGREEMENT_SCHEMA, values))
