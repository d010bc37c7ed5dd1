"""The scoreboard: ten headline metrics with bootstrap intervals, per slice and per case.

Every metric is a ratio of per-case numerators and denominators (``case_outcomes``), so each one says
exactly what it is computed over. A metric whose denominator is empty is NaN with n = 0, never 0 or 1.
Intervals are 95% percentile bootstrap intervals that resample *cases* (so a metric counted per
citation or per sentence is resampled with its cases), with a fixed seed so reruns agree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class Metric:
    name: str
    higher_is_better: bool
    over: str  # the denominator, said plainly
    meaning: str

    @property
    def direction(self) -> str:
        return "higher" if self.higher_is_better else "lower"


METRICS = (
    Metric("deterministic_pass_rate", True, "cases", "share of cases passing every layer-1 check"),
    Metric("faithfulness_rate", True, "answered cases",
           "answered cases whose every claim is entailed by the cited source (full credit only)"),
    Metric("answer_correctness", True, "answerable cases", "answerable cases answered correctly (full credit)"),
    Metric("citation_precision", True, "citations", "citations that resolve and support their claim"),
    Metric("citation_coverage", True, "answer sentences", "load-bearing answer sentences carrying a resolvable citation"),
    Metric("abstention_recall", True, "must-abstain cases", "must-abstain cases abstained on"),
    Metric("over_refusal_rate", False, "answerable cases", "answerable cases abstained on"),
    Metric("retrieval_recall_at_k", True, "cases with gold sources", "mean recall@k of gold sources"),
    Metric("rerank_mrr", True, "cases with gold sources", "mean reciprocal rank of the first gold source"),
    Metric("multi_step_task_success", True, "multi-step cases",
           "multi-hop and aggregation cases with the right end state and every checkpoint"),
)
METRIC_NAMES = tuple(m.name for m in METRICS)
BY_NAME = {m.name: m for m in METRICS}

SCOREBOARD_COLUMNS = ["metric", "value", "ci_low", "ci_high", "n", "direction", "over"]
SLICE_COLUMNS = ["slice", "group", "metric", "value", "ci_low", "ci_high", "n"]


def bootstrap_weights(n_cases: int, *, resamples: int = 1000, seed: int = 0) -> np.ndarray:
    """A (resamples x n_cases) matrix: how often each case is drawn in each bootstrap resample."""
    if n_cases == 0:
        return np.zeros((resamples, 0), dtype=np.float32)
    rng = np.random.default_rng(seed)
    weights = np.empty((resamples, n_cases), dtype=np.float32)
    for row in range(resamples):  # one small bincount per resample beats one huge one (cache-friendly)
        weights[row] = np.bincount(rng.integers(0, n_cases, n_cases), minlength=n_cases)
    return weights


def ratio_with_interval(num: np.ndarray, den: np.ndarray, weights: np.ndarray,
                        level: float = 0.95) -> tuple[float, float, float, float]:
    """(value, ci_low, ci_high, n) of sum(num)/sum(den) with a case-resampling bootstrap interval."""
    n = float(den.sum())
    if n == 0:
        return math.nan, math.nan, math.nan, 0.0
    value = float(num.sum()) / n
    # Cases outside the denominator carry den = 0 and num = 0, so they drop out of both products.
    nums, dens = weights @ num.astype(np.float32), weights @ den.astype(np.float32)
    with np.errstate(invalid="ignore", divide="ignore"):
        stats = nums / dens
    stats = stats[np.isfinite(stats)]
    if stats.size == 0:
        return value, math.nan, math.nan, n
    alpha = (1 - level) / 2
    low, high = np.quantile(stats, [alpha, 1 - alpha])
    return value, float(low), float(high), n


def scoreboard(outcomes: pd.DataFrame, weights: np.ndarray | None = None) -> pd.DataFrame:
    """One row per metric: metric, value, ci_low, ci_high, n (units in the denominator), direction,
    over (what the denominator counts). ``outcomes`` comes from ``case_outcomes``."""
    if weights is None:
        weights = bootstrap_weights(len(outcomes))
    rows = []
    for m in METRICS:
        value, low, high, n = ratio_with_interval(
            outcomes[f"{m.name}__num"].to_numpy(float), outcomes[f"{m.name}__den"].to_numpy(float), weights)
        rows.append(dict(metric=m.name, value=value, ci_low=low, ci_high=high, n=int(n),
                         direction=m.direction, over=m.over))
    return pd.DataFrame(rows, columns=SCOREBOARD_COLUMNS)


def slices(outcomes: pd.DataFrame, weights: np.ndarray | None = None,
           by: tuple[str, ...] = ("difficulty", "adversarial", "split")) -> pd.DataFrame:
    """Every metric per slice group (long format): slice, group, metric, value, ci_low, ci_high, n.
    Cases without an adversarial tag form the group "(none)"."""
    if weights is None:
        weights = bootstrap_weights(len(outcomes))
    rows = []
    for column in by:
        groups = outcomes[column].fillna("(none)").astype(str).to_numpy()
        for group in sorted(set(groups)):
            mask = groups == group
            w = weights[:, mask]
            for m in METRICS:
                value, low, high, n = ratio_with_interval(
                    outcomes[f"{m.name}__num"].to_numpy(float)[mask],
                    outcomes[f"{m.name}__den"].to_numpy(float)[mask], w)
                rows.append(dict(slice=column, group=group, metric=m.name, value=value,
                                 ci_low=low, ci_high=high, n=int(n)))
    return pd.DataFrame(rows, columns=SLICE_COLUMNS)


def format_value(value: float, n: int | float) -> str:
    return "NaN (n=0)" if n == 0 or value != value else f"{value:.3f}"


def format_interval(low: float, high: float, n: int | float) -> str:
    return "" if n == 0 or low != low else f"[{low:.3f}, {high:.3f}]"


def format_scoreboard(board: pd.DataFrame) -> str:
    """The scoreboard as fixed-width text for terminals and logs."""
    lines = [f"{'metric':<26} {'value':>10}  {'95% CI':<15} {'n':>5}  better"]
    for row in board.itertuples(index=False):
        value = format_value(row.value, row.n)
        ci = format_interval(row.ci_low, row.ci_high, row.n)
        lines.append(f"{row.metric:<26} {value:>10}  {ci:<15} {row.n:>5}  {row.direction} ({row.over})")
    return "\n".join(lines)
