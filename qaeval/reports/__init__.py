"""What the notebooks and HTML reports draw: banners, tables, per-case drill-downs and charts.

Every function takes a result object and returns something a notebook displays: ``Html`` (markup
that is already escaped) or ``Chart`` (a PNG). The modules mirror ``qaeval.verdicts``:

==================  ==========================================================================
``html``            escaping, the Html and Chart wrappers, tables, banners
``charts``          the matplotlib figures (scoreboard, gate movements, confusion, drift series)
``cases``           one case's drill-down, built from named sections
``case_list``       every case of a run, failing first, in full or short form (``drilldown``)
``explorer``        the explorable case list (``case_explorer``): filters, search, groups, sorting
``run``             the run's facts, scoreboard, slices and one line per case
``gate``            tiers, metric movements, blocking and non-blocking cases
``calibration``     agreement with people per axis, disagreements, agreeing labels
``drift``           alarms and bands
``compare``         metrics before and after, cases that changed
``proposals``       the propose notebook: what candidates were chosen from, drops, the candidates
``views``           each result's facts line and its rich view in a notebook (``view``)
``render``          executing a notebook and rendering the page (the ``qaeval`` nbconvert template)
==================  ==========================================================================

Everything that came from a case or a system's answer is escaped with ``html.escape`` before it
reaches markup, and has its ``$`` escaped before it reaches a matplotlib label (so mathtext never
interprets it). The page's template carries its own small stylesheet and runs one script, the case
explorer's, which sets every text from a case with ``textContent``.
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
