"""What the monitor report draws: how the log was scored, the metrics by slice, each metric over time,
the windows appended to the history, the worst rows, and the judge's agreement with the labelled sample.
Everything from the log is escaped (``esc``) or passed through ``plain`` before markup or a figure.
"""

from __future__ import annotations

import math
from typing import Any

import matplotlib.dates as mdates
import pandas as pd

from qaeval.reports.calibration import agreement_table
from qaeval.reports.case_list import drilldown
from qaeval.reports.charts import _figure, plain
from qaeval.reports.html import Chart, Col, Html, empty_note, esc, table
from qaeval.reports.run import metric_columns
from qaeval.scoring.monitor_metrics import ALL, METRIC_NAMES
from qaeval.verdicts.calibration import calibrate
from qaeval.verdicts.monitor import MonitorResult

WORST_ROWS = 200  # failing rows listed by line; the record holds them all
JUDGED_AXES = ("faithfulness", "citation_correctness")


def monitor_facts(result: MonitorResult) -> tuple[dict[str, Any], list[str]]:
    rows = result.rows
    usage = result.run.judge_usage
    return {
        "log": result.source,
        "rows": len(rows),
        "judged": int(rows["sampled"].sum()),
        "by": ", ".join(result.by) or None,
        "window": result.every,
        "judge": result.run.meta.judge.label(),
        "judge calls": f"{usage['calls']} ({usage['cached']} cached, {usage['errors']} errors)",
        "history": result.timeseries or None,
        "time": result.run.meta.created,
    }, list(result.notes)


def monitor_slices(result: MonitorResult) -> Html:
    """Every metric per slice group, with its interval and n; PPI columns where labels were given."""
    slices = result.slices
    if slices.empty:
        return empty_note("No slice: pass --by COLUMN to break the metrics down.")
    ppi = bool((slices["n_labelled"] > 0).any())
    cols = [Col(k, k, "id") for k in ("slice", "group", "metric")] + metric_columns(ppi, "n_labelled")
    return table(
        slices.to_dict("records"),
        cols,
        caption="Each metric per slice group (judge metrics: over the judged rows, weighted by stratum)",
    )


def _panel(ax: Any, part: pd.DataFrame, metric: str) -> None:
    for (column, group), series in part.groupby(["slice", "group"], sort=False):
        series = series.sort_values("window")
        xs = pd.to_datetime(series["window"], utc=True).dt.tz_localize(None)
        label = "all rows" if column == ALL else f"{column}={group}"
        ax.plot(xs, series["value"], marker="o", ms=3, lw=1.2, label=plain(label, 30))
        ax.fill_between(xs, series["ci_low"], series["ci_high"], alpha=0.15, lw=0)
    # At most five dates a panel, each said once (ConciseDateFormatter): readable at any window count.
    locator = mdates.AutoDateLocator(minticks=2, maxticks=5)
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))
    ax.set_ylim(-0.05, 1.05)
    ax.set_title(metric, fontsize=9)
    ax.tick_params(labelsize=7)
    ax.spines[["top", "right"]].set_visible(False)


def metrics_over_time(result: MonitorResult) -> Html | Chart:
    """One panel per metric: its value per window, one line per slice group, the 95% interval shaded."""
    windows = result.windows
    if windows.empty:
        return empty_note("No time windows: pass --window SPAN (1D, 1W, ...) over a timestamp column.")
    cols = 3
    rows = math.ceil(len(METRIC_NAMES) / cols)
    fig = _figure(4.2 * cols, 2.6 * rows)
    for k, metric in enumerate(METRIC_NAMES):
        ax = fig.add_subplot(rows, cols, k + 1)
        _panel(ax, windows[windows["metric"] == metric], metric)
        if k == 0:
            ax.legend(fontsize=6, loc="lower left")
    fig.suptitle(f"Each metric per {plain(result.every)} window, by slice; shaded: 95% interval", fontsize=9.5)
    return Chart(fig, "Each metric over time per slice with its interval")


def timeline_table(result: MonitorResult) -> Html:
    """The windows this run appended to the history: rows, whether compared, alarms."""
    if not result.timeline:
        return empty_note("No window was appended to a history (pass --timeseries FILE with --window).")
    cols = [Col("window", "window", "id"), Col("rows", "rows", "int"), Col("state", "state", get=_window_state)]
    alarms = "".join(f"<li>{esc(a['message'])}</li>" for a in result.alarms)
    return table(result.timeline, cols, caption="Windows appended to the history") + Html(
        f"<ul>{alarms}</ul>" if alarms else ""
    )


def _window_state(e: Any) -> str:
    if e["too_few"]:
        return "too few rows to compare: no alarm"
    return "ALARM: " + ", ".join(e["alarms"]) if e["alarms"] else "inside its bands"


def hop_facts(result: MonitorResult) -> Html:
    """Per retrieval hop of a log read from traces: rows, documents returned, cited, reached the prompt;
    over every row, per slice group and per window."""
    hops = result.hops
    if hops.empty:
        return empty_note("No hop: the log was not read from traces, or no trace retrieved anything.")
    columns = [
        Col("window", "window", get=lambda r: r["window"] or "(all)"),
        Col("where", "rows of", get=lambda r: f"{r['slice']}={r['group']}" if r["slice"] != ALL else ALL),
        Col("hop", "hop", "int"),
        Col("kind", "kind"),
        *(Col(k, k, "int") for k in ("rows", "documents", "cited")),
        Col("prompted", "in the prompt", "int"),
        Col("prompt_rows", "rows showing the prompt", "int"),
    ]
    caption = "Retrieval hops: what each returned, what was cited and prompted"
    return table(hops.to_dict("records"), columns, caption=caption)


def failing_rows(result: MonitorResult) -> Html:
    """Rows failing a check, by line (the first ``WORST_ROWS``), with why."""
    bad = result.rows[~result.rows["passed"]]
    if bad.empty:
        return empty_note("Every row passed every check assessed on it.")
    more = f" (the first {WORST_ROWS} of {len(bad)})" if len(bad) > WORST_ROWS else f" ({len(bad)})"
    return table(
        bad.head(WORST_ROWS).to_dict("records"),
        [Col("row_id", "row", "id"), Col("line", "line", "int"), Col("fail_reasons", "why it fails")],
        caption="Rows failing a check" + more,
    )


def worst_rows(result: MonitorResult) -> Html:
    """The judged rows, worst first (lowest faithfulness, then citation correctness, then failing checks),
    each with the run's drill-down: the passages in rank order with the judge's quote marked."""
    judged = result.rows[result.rows["sampled"]]
    if judged.empty:
        return empty_note("No row was judged.")
    order = judged.assign(
        f=judged["faithfulness"].fillna(3), c=judged["citation_correctness"].fillna(3), p=judged["passed"].astype(int)
    ).sort_values(["f", "c", "p", "line"])
    return drilldown(result.run, order["row_id"].tolist(), gold=False)  # a logged row has no gold


def labelled_agreement(result: MonitorResult) -> Html:
    """How the judge agreed with the labelled sample, per axis (exact agreement, kappa, confusion)."""
    labels = result.run.labels
    if labels is None or labels.empty:
        return empty_note(
            "No labels: pass --labels FILE (keyed by row id) for PPI estimates and the judge's agreement."
        )
    axes = tuple(a for a in JUDGED_AXES if a in set(labels["axis"])) or JUDGED_AXES
    return agreement_table(calibrate(result.run, labels, axes=axes, min_labels=1))
