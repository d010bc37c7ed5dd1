"""The metrics, each defined once (``METRICS``), and the scoreboard with bootstrap intervals, per slice.

Every layer (scoreboard, gate, drift, records, reports) reads a run's ``RunResult.metrics``: these, then
the registered ones (``qaeval.scoring.custom``). Every metric is a ratio of per-case numerators and
denominators; one with an empty denominator is NaN with n = 0. Intervals are 95% percentile bootstrap
intervals that resample *cases*, with a fixed seed so reruns agree.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from qaeval.core.frames import columns_frame, frame


@dataclass(frozen=True)
class CaseFacts:
    """What the four layers found about one case: everything a metric's ``unit`` may read.

    Attributes:
        answered: No adapter error and not abstained.
        abstained: Abstained (and no adapter error).
        must_abstain: The case expects an abstention.
        deterministic_passed: Every layer-1 check passed.
        faithfulness: The effective judge score (0, 1 or 2), None when not judged.
        answer_correctness: The effective judge score (0, 1 or 2), None when not judged.
        citations: Citations given (answered cases only).
        good_citations: Citations that resolve and that the judge found to support their claim.
        sentences: Load-bearing answer sentences.
        covered_sentences: Load-bearing sentences carrying a resolvable citation.
        has_gold_sources: The case names gold passages (retrieval metrics count it).
        recall_at_k: Share of the gold passages in the top k retrieved.
        mrr: Reciprocal rank of the first gold passage retrieved (0 when none is).
        multi_step: The case has checkpoints (the trajectory layer counts it).
        trajectory_success: Every checkpoint was reached.
    """

    answered: bool
    abstained: bool
    must_abstain: bool
    deterministic_passed: bool
    faithfulness: int | None
    answer_correctness: int | None
    citations: int
    good_citations: int
    sentences: int
    covered_sentences: int
    has_gold_sources: bool
    recall_at_k: float
    mrr: float
    multi_step: bool
    trajectory_success: bool


@dataclass(frozen=True)
class Metric:
    """One metric: a ratio of sums over cases, with its direction, denominator and gate tolerance.

    Attributes:
        name: The metric's name (``faithfulness_rate``).
        higher_is_better: Its direction: False for a rate that should fall (``over_refusal_rate``).
        over: The denominator, said plainly (``answered cases``).
        meaning: What it counts, one line.
        unit: Per case, ``(numerator, denominator)``; a built-in metric reads ``CaseFacts``, a
            registered one a ``Sample``.
        tolerance: How far the gate lets it move the wrong way; None when it is not gated by default.
        opt_in_tolerance: The tolerance of a metric gated only when asked for (a ``--tolerance``, the
            tolerances file, or a calibration that trusts the judge on its ``label_axis``): answer
            correctness. None for the others.
        drift: What drift alarms on: a ``drop``, a ``rise`` or ``both``.
        label_axis: The human label axis a PPI estimate of it uses, or None.
    """

    name: str
    higher_is_better: bool
    over: str
    meaning: str
    unit: Callable[[Any], tuple[float, float]]
    tolerance: float | None = None
    opt_in_tolerance: float | None = None
    drift: str = "drop"
    label_axis: str | None = None

    @property
    def direction(self) -> str:
        """``higher`` or ``lower``: which way is better."""
        return "higher" if self.higher_is_better else "lower"


def _share(hit: bool, counts: bool) -> tuple[float, float]:
    return (float(hit and counts), float(counts))


METRICS: tuple[Metric, ...] = (
    Metric(
        "deterministic_pass_rate",
        True,
        "cases",
        "share of cases passing every layer-1 check",
        lambda f: _share(f.deterministic_passed, True),
    ),
    Metric(
        "faithfulness_rate",
        True,
        "answered cases",
        "answered cases whose every claim is entailed by the cited source (full credit only)",
        lambda f: _share(f.faithfulness == 2, f.answered),
        tolerance=0.01,
        label_axis="faithfulness",
    ),
    Metric(
        "answer_correctness",
        True,
        "answerable cases",
        "answerable cases answered correctly (full credit)",
        lambda f: _share(f.answered and f.answer_correctness == 2, not f.must_abstain),
        opt_in_tolerance=0.01,
        label_axis="answer_correctness",
    ),
    Metric(
        "citation_precision",
        True,
        "citations",
        "citations that resolve and support their claim",
        lambda f: (float(f.good_citations), float(f.citations)),
        tolerance=0.01,
    ),
    Metric(
        "citation_coverage",
        True,
        "answer sentences",
        "load-bearing answer sentences carrying a resolvable citation",
        lambda f: (float(f.covered_sentences), float(f.sentences)),
    ),
    Metric(
        "abstention_recall",
        True,
        "must-abstain cases",
        "must-abstain cases abstained on",
        lambda f: _share(f.abstained, f.must_abstain),
        tolerance=0.0,
    ),
    Metric(
        "over_refusal_rate",
        False,
        "answerable cases",
        "answerable cases abstained on",
        lambda f: _share(f.abstained, not f.must_abstain),
        tolerance=0.0,
        drift="both",
    ),
    Metric(
        "retrieval_recall_at_k",
        True,
        "cases with gold sources",
        "mean recall@k of gold sources",
        lambda f: (f.recall_at_k if f.has_gold_sources else 0.0, float(f.has_gold_sources)),
        tolerance=0.02,
    ),
    Metric(
        "rerank_mrr",
        True,
        "cases with gold sources",
        "mean reciprocal rank of the first gold source",
        lambda f: (f.mrr if f.has_gold_sources else 0.0, float(f.has_gold_sources)),
        tolerance=0.02,
    ),
    Metric(
        "multi_step_task_success",
        True,
        "multi-step cases",
        "multi-hop and aggregation cases with the right end state and every checkpoint",
        lambda f: _share(f.trajectory_success, f.multi_step),
        tolerance=0.0,
    ),
)
METRIC_NAMES = tuple(m.name for m in METRICS)
BY_NAME = {m.name: m for m in METRICS}
GATED = {m.name: m.tolerance for m in METRICS if m.tolerance is not None}
OPT_IN = {m.name: m.opt_in_tolerance for m in METRICS if m.opt_in_tolerance is not None}  # gated when asked

# What a tracker logs for each scoreboard row (qaeval.commands.tracking): the metric's name with each of these.
LOGGED_SUFFIXES = ("", "_ci_low", "_ci_high", "_n", "_ppi", "_ppi_ci_low", "_ppi_ci_high", "_n_labelled")


def logged_keys(name: str) -> set[str]:
    """Every key a tracker logs for the scoreboard row of metric ``name``."""
    return {name + suffix for suffix in LOGGED_SUFFIXES}


SCOREBOARD_SCHEMA = {
    "metric": "text",
    "value": "float",
    "ci_low": "float",
    "ci_high": "float",
    "n": "int",
    "direction": "text",
    "over": "text",
    "ppi_value": "float",
    "ppi_ci_low": "float",
    "ppi_ci_high": "float",
    "n_labelled": "int",
}
# per slice and group, the scoreboard's metric, value, ci_low, ci_high and n
SLICE_SCHEMA = {"slice": "text", "group": "text", **dict(list(SCOREBOARD_SCHEMA.items())[:5])}
SLICE_BY = ("difficulty", "adversarial", "split")
RESAMPLES = 1000


def units_frame(
    case_ids: Sequence[str],
    facts: Sequence[CaseFacts],
    extra: Mapping[str, Sequence[tuple[float, float]]] | None = None,
) -> pd.DataFrame:
    """One row per case: ``case_id`` and, for every metric, ``<metric>__num`` and ``<metric>__den``: this
    case's share of it (the bookkeeping behind the scoreboard, the gate's paired test and PPI). ``extra``:
    the units of registered checks and metrics, by name, computed elsewhere (``qaeval.scoring.custom``)."""
    schema = {"case_id": "text"}
    columns: dict[str, list[object]] = {"case_id": list(case_ids)}
    given = [(m.name, [m.unit(f) for f in facts]) for m in METRICS] + list((extra or {}).items())
    for name, pairs in given:
        schema[f"{name}__num"] = schema[f"{name}__den"] = "float"
        columns[f"{name}__num"] = [num if den else 0.0 for num, den in pairs]
        columns[f"{name}__den"] = [den for _, den in pairs]
    return columns_frame(columns, schema)


def _resampled_ratios(
    num: np.ndarray, den: np.ndarray, masks: Sequence[np.ndarray], *, resamples: int, seed: int, chunk: int = 50
) -> list[np.ndarray]:
    """For each mask, a (resamples x metrics) array of bootstrap ratios (NaN where a resample has an
    empty denominator). Weights are drawn a chunk of resamples at a time, so memory stays at
    chunk x cases whatever the number of cases."""
    n = num.shape[0]
    out = [np.full((resamples, num.shape[1]), np.nan) for _ in masks]
    if n == 0:
        return out
    rng = np.random.default_rng(seed)
    subsets = [(np.flatnonzero(mask), num[mask].astype(np.float32), den[mask].astype(np.float32)) for mask in masks]
    for start in range(0, resamples, chunk):
        rows = min(chunk, resamples - start)
        weights = np.empty((rows, n), dtype=np.float32)
        for r in range(rows):
            weights[r] = np.bincount(rng.integers(0, n, n), minlength=n)
        for k, (idx, sub_num, sub_den) in enumerate(subsets):
            w = weights[:, idx]
            with np.errstate(invalid="ignore", divide="ignore"):
                out[k][start : start + rows] = (w @ sub_num) / (w @ sub_den)
    return out


N_LIMIT = 2**62  # n is shown as at most this: a registered metric's units may add up past any count


def _scaled(num: np.ndarray, den: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The units of every metric whose denominators are beyond any count (a registered metric may return
    (1e308, 1e308)) divided by its largest denominator: its ratios are unchanged, and its sums (exactly
    and in the bootstrap's float32) stay finite."""
    if not len(den):
        return num, den
    top = den.max(axis=0)
    scale = np.where(top > 1e30, top, 1.0)
    return num / scale, den / scale


def _summarise(
    num: np.ndarray, den: np.ndarray, ratios: np.ndarray, level: float = 0.95, raw_den: np.ndarray | None = None
) -> list[tuple[float, float, float, int]]:
    """(value, ci_low, ci_high, n) per metric; ``raw_den``: the denominators before ``_scaled``, whose
    sum is n (at most ``N_LIMIT``)."""
    rows = []
    alpha = (1 - level) / 2
    raw_den = den if raw_den is None else raw_den
    for j in range(num.shape[1]):
        n = float(den[:, j].sum())
        with np.errstate(over="ignore"):
            total = float(raw_den[:, j].sum())  # inf past the largest float: n is then N_LIMIT
        if n == 0:
            rows.append((math.nan, math.nan, math.nan, 0))
            continue
        value = float(num[:, j].sum()) / n
        stats = ratios[:, j][np.isfinite(ratios[:, j])]
        low, high = np.quantile(stats, [alpha, 1 - alpha]) if stats.size else (math.nan, math.nan)
        rows.append((value, float(low), float(high), int(round(total)) if total < N_LIMIT else N_LIMIT))
    return rows


def scoreboard_and_slices(
    units: pd.DataFrame,
    groups: pd.DataFrame,
    *,
    resamples: int = RESAMPLES,
    seed: int = 0,
    metrics: Sequence[Metric] = METRICS,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The scoreboard (one row per metric of ``metrics``: the built-in ones, then a run's registered
    ones) and the per-slice frame (one row per slice, group and metric), from the per-case units and a
    frame of the slicing columns (same row order). Cases without an adversarial tag form the group
    "(none)"."""
    raw_num, raw_den = (units[[f"{m.name}__{part}" for m in metrics]].to_numpy(np.float64) for part in ("num", "den"))
    num, den = _scaled(raw_num, raw_den)
    masks = [np.ones(len(units), dtype=bool)]
    labels: list[tuple[str, str]] = []
    for column in SLICE_BY:
        values = np.array(["(none)" if v is None or v != v else str(v) for v in groups[column].tolist()], dtype=object)
        for group in sorted(set(values.tolist())):
            masks.append(values == group)
            labels.append((column, group))
    ratios = _resampled_ratios(num, den, masks, resamples=resamples, seed=seed)
    no_ppi = (math.nan, math.nan, math.nan, 0)
    board = [
        dict(zip(SCOREBOARD_SCHEMA, (m.name, *summary, m.direction, m.over, *no_ppi)))
        for m, summary in zip(metrics, _summarise(num, den, ratios[0], raw_den=raw_den))
    ]
    slices = [
        dict(zip(SLICE_SCHEMA, (column, group, m.name, *summary)))
        for (column, group), mask, ratio in zip(labels, masks[1:], ratios[1:])
        for m, summary in zip(metrics, _summarise(num[mask], den[mask], ratio, raw_den=raw_den[mask]))
    ]
    return frame(board, SCOREBOARD_SCHEMA), frame(slices, SLICE_SCHEMA)


def ratio_with_interval(
    num: np.ndarray, den: np.ndarray, *, resamples: int = RESAMPLES, seed: int = 0
) -> tuple[float, float, float, int]:
    """(value, ci_low, ci_high, n) of sum(num)/sum(den) with a case-resampling bootstrap interval."""
    num2, den2 = np.asarray(num, float).reshape(-1, 1), np.asarray(den, float).reshape(-1, 1)
    ratios = _resampled_ratios(num2, den2, [np.ones(len(num2), dtype=bool)], resamples=resamples, seed=seed)
    return _summarise(num2, den2, ratios[0])[0]


def format_number(value: Any, digits: int = 3, missing: str = "NaN") -> str:
    """A number as every summary and report shows it: fixed digits, or ``missing`` for None/NaN/NA."""
    if value is None or value != value or type(value).__name__ == "NAType":
        return missing
    return f"{float(value):.{digits}f}"


def format_value(value: float, n: int | float) -> str:
    return "NaN (n=0)" if n == 0 else format_number(value)


def format_interval(low: float, high: float, n: int | float, digits: int = 3) -> str:
    if n == 0 or low != low:
        return ""
    return f"[{format_number(low, digits)}, {format_number(high, digits)}]"


def format_scoreboard(board: pd.DataFrame) -> str:
    """The scoreboard as fixed-width text for terminals and logs (PPI columns when there are labels)."""
    ppi = bool((board["n_labelled"] > 0).any()) if "n_labelled" in board else False
    ppi_head = f"{'PPI':>6} {'PPI 95% CI':<15} {'labels':>6}  " if ppi else ""
    lines = [f"{'metric':<26} {'value':>10}  {'95% CI':<15} {'n':>5}  {ppi_head}better"]
    for row in board.itertuples(index=False):
        value = format_value(row.value, row.n)
        ci = format_interval(row.ci_low, row.ci_high, row.n)
        cells = ""
        if ppi:
            p = "" if row.n_labelled == 0 else format_number(row.ppi_value, missing="")
            pci = format_interval(row.ppi_ci_low, row.ppi_ci_high, row.n_labelled)
            cells = f"{p:>6} {pci:<15} {row.n_labelled or '':>6}  "
        lines.append(f"{row.metric:<26} {value:>10}  {ci:<15} {row.n:>5}  {cells}{row.direction} ({row.over})")
    return "\n".join(lines)
