"""The matplotlib figures: scoreboard, gate movements, confusion matrices and drift series.

Each is a ``Figure`` (no pyplot state) wrapped in a ``Chart``; text from a case or a system reaches a
label only through ``plain``, which escapes ``$`` so that mathtext never interprets it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

import pandas as pd

from qaeval.reports.html import FAIL_COLOR, LOWER_COLOR, NEUTRAL, PASS_COLOR, Chart
from qaeval.scoring.result import RunResult
from qaeval.verdicts.calibration import CalibrationResult
from qaeval.verdicts.drift import DriftResult
from qaeval.verdicts.gate import GateResult

MAX_RUN_TICKS = 6  # runs labelled on a drift panel's axis; more runs get evenly spaced ticks


def plain(value: Any, limit: int = 60) -> str:
    """Text safe for a matplotlib label: ``$`` escaped (no mathtext), long text shortened."""
    text = "" if value is None else str(value)
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return text.replace("\\", "\\\\").replace("$", r"\$")


def _figure(width: float, height: float) -> Any:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def _metric_label(metric: str, direction: str) -> str:
    return f"{metric}{' (lower is better)' if direction == 'lower' else ''}"


def scoreboard_chart(run: RunResult) -> Chart:
    """Bars with interval whiskers, one per metric; n = 0 metrics are labelled, not drawn."""
    board = run.scoreboard.iloc[::-1]
    fig = _figure(7.0, 3.4)
    ax = fig.add_subplot()
    y = range(len(board))
    colors = [NEUTRAL if d == "higher" else LOWER_COLOR for d in board["direction"]]
    ax.barh(y, board["value"].fillna(0).to_numpy(), color=colors, height=0.6)
    for i, r in enumerate(board.to_dict("records")):
        if r["n"] == 0 or math.isnan(r["value"]):
            ax.text(0.01, i, "NaN (n=0)", va="center", fontsize=9, color="#555")
            continue
        if not math.isnan(r["ci_low"]):
            whiskers = [[r["value"] - r["ci_low"]], [r["ci_high"] - r["value"]]]
            ax.errorbar(r["value"], i, xerr=whiskers, fmt="none", ecolor="#222", capsize=4, lw=1.2)
        right = r["ci_high"] if not math.isnan(r["ci_high"]) else r["value"]
        ax.text(min(right, 1.0) + 0.015, i, f"{r['value']:.2f}  (n={int(r['n'])})", va="center", fontsize=9)
    ax.set_yticks(list(y), [_metric_label(m, d) for m, d in zip(board["metric"], board["direction"])], fontsize=9)
    ax.set_xlim(0, 1.28)
    ax.set_xticks([0, 0.25, 0.5, 0.75, 1.0])
    ax.set_xlabel("value with 95% bootstrap interval")
    ax.spines[["top", "right"]].set_visible(False)
    return Chart(fig, "Scoreboard: each metric's value with its 95% interval")


def delta_chart(result: GateResult) -> Chart:
    """Each gated metric's movement against the baseline, with its tolerance drawn on the bad side."""
    d = result.metric_deltas.iloc[::-1]
    fig = _figure(7.6, 3.4)
    ax = fig.add_subplot()
    y = list(range(len(d)))
    deltas = d["delta"].fillna(0).to_numpy()
    ax.barh(y, deltas, color=[PASS_COLOR if p else FAIL_COLOR for p in d["passed"]], height=0.55)
    span = max(0.12, float(abs(deltas).max()) * 1.15)
    for i, r in enumerate(d.to_dict("records")):
        bad_side = -r["tolerance"] if r["direction"] == "higher" else r["tolerance"]
        edge = -span if r["direction"] == "higher" else span
        ax.fill_betweenx([i - 0.38, i + 0.38], bad_side, edge, color=FAIL_COLOR, alpha=0.08, lw=0)
        ax.plot([bad_side, bad_side], [i - 0.38, i + 0.38], color=FAIL_COLOR, lw=1.6)
        text = (
            "not comparable"
            if math.isnan(r["delta"])
            else f"{r['baseline']:.3f} → {r['current']:.3f} ({r['delta']:+.3f})"
        )
        ax.text(span + 0.02, i, text, va="center", ha="left", fontsize=8.5)
    ax.set_xlim(-span, span + 0.42)
    ax.axvline(0, color="#888", lw=0.8)
    ax.set_yticks(y, [_metric_label(m, dr) for m, dr in zip(d["metric"], d["direction"])], fontsize=9)
    ax.set_xlabel("change against the baseline (red band: past the tolerance, blocks)")
    ax.spines[["top", "right"]].set_visible(False)
    return Chart(fig, "Movement of each gated metric against the baseline, with tolerances")


def confusion_chart(result: CalibrationResult) -> Chart:
    """One 3 x 3 matrix per judge axis: the human's score by the judge's, the diagonal in bold."""
    axes = list(result.confusion)
    fig = _figure(3.0 * len(axes), 2.9)
    for k, axis in enumerate(axes):
        m = result.confusion[axis]
        ax = fig.add_subplot(1, len(axes), k + 1)
        ax.imshow(m.values, cmap="Blues", vmin=0, vmax=max(1, int(m.values.max())))
        for i in range(3):
            for j in range(3):
                v = int(m.values[i, j])
                color, weight = "#fff" if v and v > m.values.max() / 2 else "#222", "bold" if i == j else None
                ax.text(j, i, str(v), ha="center", va="center", fontsize=10, color=color, fontweight=weight)
        ax.set_xticks(range(3), ["0", "1", "2"])
        ax.set_yticks(range(3), ["0", "1", "2"])
        ax.set_xlabel("judge")
        ax.set_ylabel("human")
        weak = axis in result.weak_axes
        ax.set_title(f"{axis}{'  (not trusted)' if weak else ''}", fontsize=9.5, color=FAIL_COLOR if weak else "#222")
    return Chart(fig, "Confusion matrix per judge axis, human score by judge score")


# --------------------------------------------------------------------------- drift


def _parse_time(value: Any) -> datetime | None:
    """A run's recorded time (ISO 8601), or None when absent or unreadable."""
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def time_labels(values: Sequence[Any]) -> tuple[list[str], str]:
    """Each run's time written for the span the runs cover, and what the axis says about them: the
    time of day (with seconds within an hour) when all runs fall on one date, ``Mon DD`` within one
    year, the full date otherwise. Times with an offset are shown in UTC."""
    parsed = [_parse_time(v) for v in values]
    zone = " (UTC)" if any(t is not None and t.tzinfo is not None for t in parsed) else ""
    times = [
        t.astimezone(timezone.utc).replace(tzinfo=None) if t is not None and t.tzinfo is not None else t for t in parsed
    ]
    known = [t for t in times if t is not None]
    if not known:
        return ["" for _ in times], "run in the series (no times recorded)"
    first, last = min(known), max(known)
    if first.date() == last.date():
        fmt = "%H:%M:%S" if (last - first).total_seconds() < 3600 else "%H:%M"
        axis = f"run in the series, and its time on {first:%Y-%m-%d}{zone}"
    elif first.year == last.year:
        fmt, axis = "%b %d", f"run in the series, and its date in {first.year}"
    else:
        fmt, axis = "%Y-%m-%d", "run in the series, and its date"
    return [t.strftime(fmt) if t is not None else "" for t in times], axis


def run_ticks(runs: pd.DataFrame) -> tuple[list[int], list[str], str]:
    """Where a drift panel's x axis is labelled (at most ``MAX_RUN_TICKS`` runs, the first and the
    latest always), each label the run's number in the series (from 1) over its time, and the axis
    title."""
    numbers = [int(r) for r in runs["run"]]
    stamps, axis = time_labels(list(runs["time"]))
    n = len(numbers)
    picked = (
        range(n)
        if n <= MAX_RUN_TICKS
        else sorted({round(i * (n - 1) / (MAX_RUN_TICKS - 1)) for i in range(MAX_RUN_TICKS)})
    )
    labels = [f"#{numbers[i] + 1}\n{stamps[i]}".rstrip() for i in picked]
    return [numbers[i] for i in picked], labels, axis


def _commit_labels(runs: pd.DataFrame) -> list[str]:
    """Each run's short commit where it differs from the run before, else nothing."""
    commits = [(c or "")[:7] for c in runs["commit"]]
    return [c if c and (i == 0 or c != commits[i - 1]) else "" for i, c in enumerate(commits)]


def _drift_panel(ax: Any, metric: str, xs: list[int], values: list[float], band: Any, commits: list[str]) -> None:
    ax.plot(xs, values, marker="o", ms=3.5, color=NEUTRAL, lw=1.3)
    if not math.isnan(band["low"]) and len(xs) > 1:
        start = xs[max(0, len(xs) - 1 - int(band["window_n"]))]
        ax.fill_between([start, xs[-1]], band["low"], band["high"], color="#9fc5e8", alpha=0.45, lw=0)
    if band["alarm"]:
        ax.plot([xs[-1]], [band["current"]], marker="X", ms=11, color=FAIL_COLOR)
    _label_commits(ax, xs, values, commits, 5)
    alarm = bool(band["alarm"])
    _style_panel(
        ax,
        metric + ("  ALARM" if alarm else ""),
        color=FAIL_COLOR if alarm else "#222",
        fontweight="bold" if alarm else None,
    )


def _label_commits(ax: Any, xs: Sequence[int], values: Sequence[float], commits: list[str], above: int) -> None:
    """Each run's commit over its point where it changes (left out past 40 runs)."""
    if len(xs) > 40:
        return
    for x, v, c in zip(xs, values, commits):
        if c and not math.isnan(v):
            ax.annotate(
                plain(c, 8),
                (x, v),
                textcoords="offset points",
                xytext=(0, above),
                ha="center",
                fontsize=6,
                color="#555",
            )


def _style_panel(ax: Any, title: str, **title_style: Any) -> None:
    ax.set_ylim(-0.05, 1.12)
    ax.set_title(title, fontsize=9.5, **title_style)
    ax.spines[["top", "right"]].set_visible(False)


def drift_chart(result: DriftResult) -> Chart:
    """One small panel per metric against the runs (each tick: the run's number and its time; the
    run's commit on its point where it changes), the band over the trailing window shaded, alarms
    marked ✕."""
    hist = result.history
    bands = result.bands.set_index("metric")
    runs = hist.drop_duplicates("run").sort_values("run")
    xs = [int(r) for r in runs["run"]]
    ticks, tick_labels, axis_title = run_ticks(runs)
    commits = _commit_labels(runs)
    metrics = list(bands.index)
    cols = 4
    rows = math.ceil(len(metrics) / cols)
    fig = _figure(3.3 * cols, 2.4 * rows)
    for k, metric in enumerate(metrics):
        ax = fig.add_subplot(rows, cols, k + 1)
        series = hist[hist["metric"] == metric].sort_values("run")
        _drift_panel(ax, metric, xs, series["value"].tolist(), bands.loc[metric], commits)
        ax.set_xticks(ticks, tick_labels)
        ax.tick_params(labelsize=7)
    fig.suptitle(
        "Each metric run by run (labels: the commit, where it changes); band = trailing mean ± max(3σ, 0.02); "
        "✕ = alarm",
        fontsize=9.5,
    )
    fig.supxlabel(axis_title, fontsize=8)
    return Chart(fig, "Each metric's series over the runs with its band and alarms")


# --------------------------------------------------------------------------- saved runs over time


def runs_chart(runs: pd.DataFrame, metrics: Sequence[str]) -> Chart:
    """One small panel per metric over saved runs in time order (``qaeval.record.runs``' table, timed rows only):
    each run's value with its interval whiskers, its commit written on the point where it changes, its
    time on the axis. A metric with nothing to average in a run (n = 0) has no point there."""
    xs = list(range(len(runs)))
    ticks, tick_labels, axis_title = run_ticks(pd.DataFrame({"run": xs, "time": [t.isoformat() for t in runs["time"]]}))
    commits = _commit_labels(runs)
    cols = min(4, max(1, len(metrics)))
    rows = math.ceil(len(metrics) / cols)
    fig = _figure(3.3 * cols, 2.5 * rows)
    for k, metric in enumerate(metrics):
        ax = fig.add_subplot(rows, cols, k + 1)
        values = runs[metric].to_numpy(float)
        low = (values - runs[f"{metric}_ci_low"].to_numpy(float)).clip(min=0)
        high = (runs[f"{metric}_ci_high"].to_numpy(float) - values).clip(min=0)
        ax.errorbar(xs, values, yerr=[low, high], fmt="-o", ms=3.5, color=NEUTRAL, ecolor="#9fb3cf", lw=1.2, capsize=2)
        _label_commits(ax, xs, list(values), commits, 6)
        ax.set_xticks(ticks, tick_labels)
        ax.tick_params(labelsize=7)
        _style_panel(ax, metric)
    fig.suptitle(
        "Each metric over the saved runs, with its 95% interval (labels: the commit, where it changes)", fontsize=9.5
    )
    fig.supxlabel(axis_title.replace("run in the series", "saved run"), fontsize=8)
    return Chart(fig, "Each headline metric over the saved runs, with intervals and commits")
