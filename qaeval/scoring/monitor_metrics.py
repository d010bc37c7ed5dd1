"""The monitor's metrics over logged rows: scoreboard, slices and time windows, with intervals and PPI.

Every metric is a ratio of per-row numerators and denominators (``units``), as the golden set's are
(``qaeval.scoring.metrics``), and a metric with an empty denominator is NaN with n = 0. Mechanical
metrics are over every row. Judge metrics are over the judged sample: each judged row stands for
``N_h / n_h`` answered rows of its stratum h (answered rows in the stratum over judged ones), so the
figure estimates the rate over all answered rows even where strata were sampled unevenly.

Intervals are 95% percentile bootstrap intervals (1,000 resamples, fixed seed) that resample rows
within each sampling stratum (mechanical metrics: one stratum), as multinomial counts over the distinct
(numerator, denominator) patterns: the row bootstrap, at a cost that does not grow with the rows. No
finite-population correction is made. Strata that count with a single judged row are resampled
together, or with the largest other stratum, so they do not narrow the interval to zero width; a
metric that counts one row in all has no interval (NaN). Answer correctness needs a gold answer, so
it is absent from the monitor.

PPI (``qaeval.scoring.ppi``): for each judge metric with a label axis and each group, the group's
judged rows and the labelled ones among them give the prediction-powered estimate, treating the
group's judged rows as one uniform sample.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from qaeval.core.frames import frame
from qaeval.scoring import metrics as golden
from qaeval.scoring.metrics import RESAMPLES, SCOREBOARD_SCHEMA
from qaeval.scoring.ppi import labelled_estimate

ALL = "(all)"
# the scoreboard's columns but direction and over, per slice and group
SLICE_SCHEMA = {"slice": "text", "group": "text"} | {
    k: v for k, v in SCOREBOARD_SCHEMA.items() if k not in ("direction", "over")
}
WINDOW_SCHEMA = {"window": "text", **golden.SLICE_SCHEMA, "rows": "int"}
Units = Callable[[pd.DataFrame], tuple[np.ndarray, np.ndarray]]


def _flag(rows: pd.DataFrame, column: str) -> np.ndarray:
    return rows[column].fillna(False).to_numpy(bool)


def _known(rows: pd.DataFrame, column: str) -> np.ndarray:
    return rows[column].notna().to_numpy(bool)


def _score2(rows: pd.DataFrame, column: str) -> np.ndarray:
    return rows[column].fillna(-1).to_numpy(np.int64) == 2


@dataclass(frozen=True)
class MonitorMetric:
    name: str
    direction: str  # higher, lower, or "neither" (a rate to watch both ways)
    over: str
    meaning: str
    units: Units
    judged: bool = False  # over the judged sample (weighted), else over every row
    drift: str = "drop"  # which way the --timeseries band alarms
    label_axis: str | None = None


def _shown(r: pd.DataFrame, what: str) -> np.ndarray:
    """Rows whose ``what`` (answer, prompt, ...) was not hidden by a trace's instrumentation."""
    if "hidden" not in r.columns:
        return np.ones(len(r), dtype=bool)
    return ~r["hidden"].fillna("").astype(str).str.contains(what, regex=False).to_numpy(bool)


def _answered(r: pd.DataFrame) -> np.ndarray:
    return r["answered"].to_numpy(bool)


def _judged(r: pd.DataFrame) -> np.ndarray:
    return r["sampled"].to_numpy(bool) & _answered(r)


METRICS: tuple[MonitorMetric, ...] = (
    MonitorMetric(
        "deterministic_pass_rate",
        "higher",
        "rows",
        "rows passing every check assessed on them",
        lambda r: (r["passed"].to_numpy(float), np.ones(len(r))),
    ),
    MonitorMetric(
        "citation_resolvability",
        "higher",
        "answered rows",
        "answered rows whose every citation names a passage the row holds",
        lambda r: (
            _flag(r, "citation_resolvability") & _answered(r),
            _answered(r) & _known(r, "citation_resolvability"),
        ),
    ),
    MonitorMetric(
        "citation_coverage",
        "higher",
        "answer sentences",
        "load-bearing answer sentences a claim covers",
        lambda r: (r["covered"].to_numpy(float), r["sentences"].to_numpy(float)),
    ),
    MonitorMetric(
        "prompt_grounding",
        "higher",
        "rows with a prompt or no model call",
        "prompts carrying the question, a retrieved passage and every cited one (a row that called no model passes)",
        lambda r: (_flag(r, "prompt_grounding"), _known(r, "prompt_grounding")),
    ),
    MonitorMetric(
        "fail_closed_rate",
        "higher",
        "rows",
        "rows with nothing retrieved that neither answered nor "
        "called the model, and every row that retrieved something",
        lambda r: (_flag(r, "fail_closed"), _known(r, "fail_closed")),
    ),
    MonitorMetric(
        "abstention_rate",
        "neither",
        "rows",
        "rows abstained on (a row whose trace hid the answer is not counted)",
        lambda r: (r["abstained"].to_numpy(float), _shown(r, "answer")),
        drift="both",
    ),
    MonitorMetric(
        "model_call_rate",
        "neither",
        "rows saying whether the model was called",
        "rows that called the model",
        lambda r: (_flag(r, "model_called"), _known(r, "model_called")),
        drift="both",
    ),
    MonitorMetric(
        "faithfulness_rate",
        "higher",
        "judged answered rows",
        "judged answers whose every claim the cited passages entail (full credit)",
        lambda r: (_score2(r, "faithfulness") & _judged(r), _judged(r)),
        judged=True,
        label_axis="faithfulness",
    ),
    MonitorMetric(
        "citation_correctness_rate",
        "higher",
        "judged answered rows with citations",
        "judged rows whose weakest citation supports its claim (full credit)",
        lambda r: (_score2(r, "citation_correctness") & _judged(r), _judged(r) & (r["citations"].to_numpy() > 0)),
        judged=True,
        label_axis="citation_correctness",
    ),
)
METRIC_NAMES = tuple(m.name for m in METRICS)
BY_NAME = {m.name: m for m in METRICS}
ABSENT_NOTE = "answer_correctness is absent: it needs a gold answer, which logged traffic does not have"


def _patterns(num: np.ndarray, den: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    pairs, counts = np.unique(np.stack([num, den], axis=1), axis=0, return_counts=True)
    return pairs[:, 0], pairs[:, 1], counts


def estimate(
    rows: pd.DataFrame, metric: MonitorMetric, *, resamples: int = RESAMPLES, seed: int = 0
) -> tuple[float, float, float, int]:
    """(value, ci_low, ci_high, n) of one metric over ``rows`` (see the module's notes)."""
    num, den = (np.asarray(a, dtype=float) for a in metric.units(rows))
    n = int(round(den.sum()))
    if n == 0:
        return math.nan, math.nan, math.nan, 0
    if metric.judged:
        observed = rows["sampled"].to_numpy(bool)
        strata = rows["stratum"].to_numpy(object)
    else:
        observed = np.ones(len(rows), dtype=bool)
        strata = np.zeros(len(rows), dtype=object)
    weights = np.zeros(len(rows))
    groups: list[np.ndarray] = []
    singles: list[np.ndarray] = []
    for h in pd.unique(strata[observed]):
        here = observed & (strata == h)
        population = int((strata == h).sum()) if metric.judged else int(here.sum())
        weights[here] = population / int(here.sum())
        (singles if int((here & (den > 0)).sum()) == 1 else groups).append(here)
    if len(singles) > 1:  # strata that count with one row each are resampled together (collapsed strata)
        groups.append(np.logical_or.reduce(singles))
    elif singles and groups:  # one such stratum: with the largest other
        biggest = max(range(len(groups)), key=lambda i: int(groups[i].sum()))
        groups[biggest] = groups[biggest] | singles[0]
    measurable = bool(groups)  # else one row in all: nothing to resample
    rng = np.random.default_rng(seed)
    total_num, total_den = float(weights[observed] @ num[observed]), float(weights[observed] @ den[observed])
    boot_num, boot_den = np.zeros(resamples), np.zeros(resamples)
    for group in groups:
        pnum, pden, counts = _patterns(weights[group] * num[group], weights[group] * den[group])
        draws = rng.multinomial(int(group.sum()), counts / counts.sum(), size=resamples)
        boot_num += draws @ pnum
        boot_den += draws @ pden
    with np.errstate(invalid="ignore", divide="ignore"):
        ratios = boot_num / boot_den
    ratios = ratios[np.isfinite(ratios)]
    low, high = np.quantile(ratios, [0.025, 0.975]) if ratios.size and measurable else (math.nan, math.nan)
    return total_num / total_den, float(low), float(high), n


def ppi(rows: pd.DataFrame, metric: MonitorMetric, labels: pd.DataFrame | None) -> tuple[float, float, float, int]:
    """(ppi_value, ppi_ci_low, ppi_ci_high, n_labelled) of a judge metric over ``rows``; NaN (and the
    count) when it has no label axis, no labels or fewer than two usable ones."""
    if labels is None or metric.label_axis is None:
        return math.nan, math.nan, math.nan, 0
    num, den = (np.asarray(a, dtype=float) for a in metric.units(rows))
    return labelled_estimate(rows["row_id"].to_numpy(object), num, den, labels, metric.label_axis)


def _groups(rows: pd.DataFrame, by: Sequence[str]) -> list[tuple[str, str, np.ndarray]]:
    out = [(ALL, ALL, np.ones(len(rows), dtype=bool))]
    for column in by:
        values = rows[column].astype(str).to_numpy(object)
        out += [(column, g, values == g) for g in sorted(set(values.tolist()))]
    return out


def scoreboard(rows: pd.DataFrame, labels: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per metric over every row (``SCOREBOARD_SCHEMA``, PPI columns filled when labelled)."""
    out = [
        dict(zip(SCOREBOARD_SCHEMA, (m.name, *estimate(rows, m), m.direction, m.over, *ppi(rows, m, labels))))
        for m in METRICS
    ]
    return frame(out, SCOREBOARD_SCHEMA)


def slice_frame(rows: pd.DataFrame, by: Sequence[str], labels: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per slice column, group and metric (``SLICE_SCHEMA``)."""
    out = []
    for column, group, mask in _groups(rows, by)[1:]:
        part = rows[mask]
        out += [
            dict(zip(SLICE_SCHEMA, (column, group, m.name, *estimate(part, m), *ppi(part, m, labels)))) for m in METRICS
        ]
    return frame(out, SLICE_SCHEMA)


def window_keys(timestamps: pd.Series, every: str) -> pd.Series:
    """Each row's window (ISO start time, UTC) for a pandas frequency such as 1D, 1W or 6h; NA without a time."""
    times = pd.to_datetime(
        timestamps, utc=True, format="ISO8601"
    )  # a format guessed from the first would refuse "...00.250Z"
    try:
        starts = times.dt.floor(every)
    except ValueError:  # calendar frequencies (weeks, months) have no fixed length: use periods
        starts = times.dt.tz_localize(None).dt.to_period(every).dt.start_time.dt.tz_localize("UTC")
    return starts.map(lambda t: None if pd.isna(t) else t.isoformat())


def window_frame(rows: pd.DataFrame, keys: pd.Series, by: Sequence[str]) -> pd.DataFrame:
    """One row per window, group (all rows, then each slice's) and metric (``WINDOW_SCHEMA``)."""
    out = []
    keys = keys.to_numpy(object)
    for window in sorted({k for k in keys.tolist() if isinstance(k, str)}):  # a row without a time has none
        here = rows[keys == window]
        for column, group, mask in _groups(here, by):
            part = here[mask]
            out += [
                dict(zip(WINDOW_SCHEMA, (window, column, group, m.name, *estimate(part, m), len(part))))
                for m in METRICS
            ]
    return frame(out, WINDOW_SCHEMA)


def metric_values(board: pd.DataFrame) -> tuple[dict[str, float | None], dict[str, int]]:
    """({metric: value or None}, {metric: n}) of a scoreboard or one window's rows of a window frame."""
    values = {m: (None if v != v else float(v)) for m, v in zip(board["metric"], board["value"])}
    return values, {m: int(n) for m, n in zip(board["metric"], board["n"])}
