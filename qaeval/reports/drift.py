"""What the drift report draws: the alarms, and this run against each metric's band (the series
chart is ``qaeval.reports.charts.drift_chart``)."""

from __future__ import annotations

from typing import Any

from qaeval.reports.html import Col, Html, empty_note, esc, mark, num, table
from qaeval.reports.run import run_facts
from qaeval.scoring.metrics import format_interval
from qaeval.verdicts.drift import DriftResult

RUN_FACTS = ("adapter", "boundary", "judge", "commit", "time")  # of the run's facts, those a series shares


def drift_facts(result: DriftResult) -> tuple[dict[str, Any], list[str]]:
    shared = {k: v for k, v in run_facts(result.run).items() if k in RUN_FACTS}
    return {"series": result.timeseries, "runs": result.runs, "window": result.window, **shared}, list(result.notes)


def alarms_list(result: DriftResult) -> Html:
    if not result.alarms:
        return empty_note("No alarm: every metric is inside its band.")
    return Html(
        '<ul class="qaeval-notes">'
        + "".join(f'<li class="bad">{esc(a["message"])}</li>' for a in result.alarms)
        + "</ul>"
    )


def bands_table(result: DriftResult) -> Html:
    cols = [
        Col("metric", "metric", "id"),
        Col("current", "now", "html", get=lambda r: num(r["current"], None)),
        Col("band", "band", get=lambda r: format_interval(r["low"], r["high"], r["window_n"]) or "no band yet"),
        Col("window_n", "runs in band", "int"),
        Col("direction", "rule"),
        Col("alarm", "result", "html", get=lambda r: mark(not r["alarm"], "inside", "ALARM")),
    ]
    return table(
        result.bands.to_dict("records"),
        cols,
        caption="This run against each metric's band",
        bad=lambda r: bool(r["alarm"]),
    )
