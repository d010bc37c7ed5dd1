"""What the notebooks and HTML reports draw: banners, tables, per-case drill-downs and charts.

Every function takes a result object and returns ``Html`` (markup already escaped) or ``Chart`` (a PNG);
the modules mirror ``qaeval.verdicts`` (``run``, ``gate``, ``calibration``, ``drift``, ``compare``,
``monitor``, ``proposals``), beside ``html`` (escaping, tables, banners), ``charts``, ``cases`` and
``case_list`` (the drill-down), ``explorer`` (the scripted case list), ``views`` and ``render``.

Everything that came from a case or a system's answer is escaped with ``html.escape`` before it
reaches markup, and has its ``$`` escaped before it reaches a matplotlib label (so mathtext never
interprets it). The page runs one script, the case explorer's, which sets every text with ``textContent``.
"""

from __future__ import annotations

from qaeval.reports.calibration import agreeing_labels, agreement_table, disagreements
from qaeval.reports.case_list import drilldown
from qaeval.reports.charts import confusion_chart, delta_chart, drift_chart, scoreboard_chart
from qaeval.reports.compare import compare_cases, compare_metrics
from qaeval.reports.drift import alarms_list, bands_table
from qaeval.reports.explorer import case_explorer
from qaeval.reports.gate import blocking_cases, delta_table, gate_calibration, not_blocking, tier_table
from qaeval.reports.html import Chart, Html, banner, esc, facts_html
from qaeval.reports.monitor import (
    failing_rows,
    hop_facts,
    labelled_agreement,
    metrics_over_time,
    monitor_slices,
    timeline_table,
    worst_rows,
)
from qaeval.reports.proposals import candidates_table, proposal_drops, proposal_pool
from qaeval.reports.run import cases_table, scoreboard_table, slice_table
from qaeval.reports.views import facts, view

__all__ = [
    "Chart",
    "Html",
    "agreeing_labels",
    "agreement_table",
    "alarms_list",
    "bands_table",
    "banner",
    "blocking_cases",
    "case_explorer",
    "cases_table",
    "compare_cases",
    "compare_metrics",
    "confusion_chart",
    "delta_chart",
    "delta_table",
    "disagreements",
    "drift_chart",
    "drilldown",
    "esc",
    "facts",
    "facts_html",
    "gate_calibration",
    "not_blocking",
    "scoreboard_chart",
    "failing_rows",
    "hop_facts",
    "labelled_agreement",
    "metrics_over_time",
    "monitor_slices",
    "timeline_table",
    "worst_rows",
    "candidates_table",
    "proposal_drops",
    "proposal_pool",
    "scoreboard_table",
    "slice_table",
    "tier_table",
    "view",
]
