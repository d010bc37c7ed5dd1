"""Each result's facts line and its rich view in a notebook (``view`` is every result's ``_repr_html_``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from qaeval.core.results import Result
from qaeval.reports.calibration import agreement_table, calibration_facts
from qaeval.reports.compare import compare_metrics
from qaeval.reports.drift import alarms_list, bands_table, drift_facts
from qaeval.reports.gate import delta_table, gate_facts, tier_table
from qaeval.reports.html import Html, banner, facts_html, notes_html
from qaeval.reports.monitor import monitor_facts, timeline_table
from qaeval.reports.run import run_facts, run_notes, scoreboard_table
from qaeval.scoring.result import RunResult
from qaeval.verdicts.calibration import CalibrationResult
from qaeval.verdicts.compare import Comparison
from qaeval.verdicts.drift import DriftResult
from qaeval.verdicts.gate import GateResult
from qaeval.verdicts.monitor import MonitorResult

FACTS: dict[type, Callable[[Any], tuple[dict[str, Any], list[str]]]] = {
    RunResult: lambda run: (run_facts(run), run_notes(run)),
    GateResult: gate_facts,
    CalibrationResult: calibration_facts,
    DriftResult: drift_facts,
    MonitorResult: monitor_facts,
}

MAIN_TABLES: dict[type, Callable[[Any], list[Html]]] = {  # what a result shows under its banner
    RunResult: lambda r: [scoreboard_table(r)],
    GateResult: lambda r: [tier_table(r), delta_table(r)],
    CalibrationResult: lambda r: [agreement_table(r)],
    DriftResult: lambda r: [alarms_list(r), bands_table(r)],
    Comparison: lambda r: [compare_metrics(r)],
    MonitorResult: lambda r: [scoreboard_table(r), timeline_table(r)],
}


def _for_type(table: dict[type, Any], result: Result) -> Any:
    return next((value for cls, value in table.items() if isinstance(result, cls)), None)


def facts(result: Result) -> Html:
    """How the result was made, one line of facts; and its notes."""
    made = _for_type(FACTS, result)
    items, notes = made(result) if made is not None else ({}, [])
    return Html(facts_html(items) + notes_html(notes))


def view(result: Result) -> str:
    """A result's rich view: its banner and main table."""
    tables = _for_type(MAIN_TABLES, result)
    parts = [banner(result), *(tables(result) if tables is not None else [])]
    return '<div class="qaeval-view">' + "".join(p.markup for p in parts) + "</div>"
