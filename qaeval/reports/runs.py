"""The index page of saved runs (``qaeval runs DIR --html PATH``): a row per run linking its report, the
records that could not be read, and each headline metric over time. Everything in it is escaped, and
links are relative to the page, so the folder can be moved or served as it is.
"""

from __future__ import annotations

import base64
import os
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pandas as pd

from qaeval.core.files import write_atomic
from qaeval.core.frames import is_missing
from qaeval.record.runs import metrics_shown
from qaeval.reports.charts import runs_chart
from qaeval.reports.html import NA, Chart, Col, esc, facts_html, html_table, num
from qaeval.reports.render import page

GOOD = {"GREEN", "PASS", "TRUSTED", "OK"}


def _link(target: Any, page_dir: Path, text: str) -> str:
    if is_missing(target):
        return '<span class="na">none</span>'
    href = quote(Path(os.path.relpath(Path(target).resolve(), page_dir)).as_posix())
    return f'<a href="{esc(href)}">{esc(text)}</a>'


def _interval(row: dict[str, Any], metric: str) -> str:
    n = row[f"{metric}_n"]
    if is_missing(n):
        return NA
    value = num(row[metric], int(n))
    if int(n) == 0 or is_missing(row[f"{metric}_ci_low"]):
        return value
    return (
        f'{value} <span class="na">[{num(row[f"{metric}_ci_low"])}, {num(row[f"{metric}_ci_high"])}] n={int(n)}</span>'
    )


def runs_table_html(table: pd.DataFrame, page_dir: Path) -> str:
    """A row per readable record: when, what, verdict, commit, its report (or none) and every metric."""
    columns = [
        Col(
            "time", "time (UTC)", "nowrap", get=lambda r: "" if pd.isna(r["time"]) else f"{r['time']:%Y-%m-%d %H:%M:%S}"
        ),
        Col("kind", "kind", "nowrap"),
        Col("verdict", "verdict", "nowrap"),
        Col("commit", "commit", "id", get=lambda r: (r["commit"] or "")[:12]),
        Col("report", "report", "html", get=lambda r: _link(r["report"], page_dir, "report")),
        Col("path", "record", "html", get=lambda r: _link(r["path"], page_dir, r["path"])),
        Col("adapter", "adapter"),
        Col("judge", "judge"),
        Col("data_fingerprint", "data", "id", get=lambda r: (r["data_fingerprint"] or "")[:12]),
    ] + [Col(m, m, "htmlnum", get=partial(_interval, metric=m)) for m in metrics_shown(table)]
    readable = table[table["reason"].isna()].to_dict("records")
    return html_table(readable, columns, bad=lambda r: r["verdict"] not in GOOD)


def unreadable_html(table: pd.DataFrame, page_dir: Path) -> str:
    rows = [
        {"file": _link(r["path"], page_dir, r["path"]), "reason": r["reason"]}
        for r in table[table["reason"].notna()].to_dict("records")
    ]
    if not rows:
        return '<p class="qaeval-empty">every record under the folder was read</p>'
    return html_table(
        rows, [Col("file", "file", "html"), Col("reason", "why it could not be read")], bad=lambda r: True
    )


def chart_html(chart: Chart) -> str:
    data = base64.b64encode(chart.png()).decode("ascii")
    return f'<div class="qaeval-figure"><img alt="{esc(chart.alt)}" src="data:image/png;base64,{data}"></div>'


def runs_page(table: pd.DataFrame, folder: str, page_dir: Path) -> str:
    readable = table[table["reason"].isna()]
    timed = readable[readable["time"].notna()]
    untimed = len(readable) - len(timed)
    body = (
        "<h1>qaeval runs</h1>"
        + facts_html(
            {
                "folder": folder,
                "records": len(table),
                "read": len(readable),
                "could not be read": len(table) - len(readable),
            }
        )
        + "<h2>Runs</h2>"
        + runs_table_html(table, page_dir)
        + "<h2>Records that could not be read</h2>"
        + unreadable_html(table, page_dir)
        + "<h2>Each metric over time</h2>"
    )
    if len(timed):
        body += chart_html(runs_chart(timed, metrics_shown(timed)))
    else:
        body += '<p class="qaeval-empty">no record with a time to plot</p>'
    if untimed:
        body += (
            f'<p class="qaeval-empty">{untimed} record(s) without a time (baselines leave it out) are in the '
            "table but not plotted</p>"
        )
    return page("qaeval runs", body)


def render_runs(table: pd.DataFrame, html_path: str | Path, *, folder: str = "") -> Path:
    """Write the index page of ``table`` (``qaeval.record.runs.runs_table``) to ``html_path``."""
    page_dir = Path(html_path).resolve().parent
    return write_atomic(html_path, runs_page(table, folder, page_dir))
