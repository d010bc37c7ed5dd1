"""What the report functions draw, without a notebook: the drift chart's run labels, rows marked bad from
their data, and drill-downs of cases that have no passages of their own."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from conftest import make_case, write_cases

import qaeval.reports as report
from qaeval import Citation, SUTOutput, api
from qaeval.reports.html import Col, html_table
from qaeval.scoring.metrics import METRIC_NAMES
from qaeval.verdicts.drift import DriftResult, compare, history_frame


def figure_texts(chart) -> str:
    """The figure-level texts (the shared x-axis title among them), in every matplotlib qaeval supports
    (Figure.get_supxlabel is 3.8+)."""
    return " ".join(t.get_text() for t in chart.figure.texts)


def _line(time: str, commit: str, value: float) -> dict:
    return {"metrics": dict.fromkeys(METRIC_NAMES, value), "time": time, "git_commit": commit, "alarms": []}


def drift_result(times: list[str], last_value: float = 0.0) -> DriftResult:
    """A drift verdict over runs at ``times`` (the last one current) whose metrics all hold at 1.0 and
    then move to ``last_value``."""
    history = [_line(t, "b354d3440fac", 1.0) for t in times[:-1]]
    record = _line(times[-1], "c0ffee12aa55", last_value)
    bands, alarms, notes = compare(history, record)
    return DriftResult(
        run=None, record=record, history=history_frame(history, record), bands=bands, alarms=alarms, notes=notes
    )


def tick_labels(chart) -> list[str]:
    return [t.get_text() for t in chart.figure.axes[0].get_xticklabels()]


def test_drift_chart_names_each_run_and_its_time_when_runs_fall_within_one_minute():
    chart = report.drift_chart(drift_result([f"2026-12-01T00:34:{s:02d}+00:00" for s in (10, 15, 20, 25, 30)]))
    assert tick_labels(chart) == ["#1\n00:34:10", "#2\n00:34:15", "#3\n00:34:20", "#4\n00:34:25", "#5\n00:34:30"], (
        "each run by its number and time of day, not bare seconds"
    )
    assert "2026-12-01 (UTC)" in figure_texts(chart), "the one date they share is said once"
    assert all(ax.get_xticklabels()[-1].get_text() == "#5\n00:34:30" for ax in chart.figure.axes)


def test_drift_chart_labels_runs_across_days_by_date_and_across_years_in_full():
    days = [
        "2026-11-28T09:00:00+00:00",
        "2026-11-29T09:00:00+00:00",
        "2026-12-01T18:30:00+00:00",
        "2026-12-03T08:00:00+00:00",
        "2026-12-05T23:59:00+00:00",
    ]
    chart = report.drift_chart(drift_result(days))
    assert tick_labels(chart) == ["#1\nNov 28", "#2\nNov 29", "#3\nDec 01", "#4\nDec 03", "#5\nDec 05"]
    assert "2026" in figure_texts(chart)
    years = report.drift_chart(drift_result(["2025-12-30T10:00:00", *days[1:]]))
    assert tick_labels(years)[:2] == ["#1\n2025-12-30", "#2\n2026-11-29"]


def test_drift_chart_of_many_runs_labels_a_few_always_the_first_and_the_latest():
    times = [f"2026-12-01T{h:02d}:{m:02d}:00" for h in range(10, 15) for m in (0, 15, 30, 45)]
    labels = tick_labels(report.drift_chart(drift_result(times, last_value=1.0)))
    assert 2 <= len(labels) <= 6 and labels[0] == "#1\n10:00" and labels[-1] == "#20\n14:45"


def test_drift_chart_without_recorded_times_labels_run_numbers():
    result = drift_result(["2026-12-01T10:00:00"] * 5)
    result.history["time"] = None
    chart = report.drift_chart(result)
    assert tick_labels(chart) == ["#1", "#2", "#3", "#4", "#5"]
    assert "no times recorded" in figure_texts(chart)


def _bad_rows(markup: str) -> list[str]:
    return re.findall(r'<tr class="bad"><td class="id"><code>([^<]+)</code>', markup)


def test_rows_are_marked_bad_from_their_data():
    result = drift_result([f"2026-12-01T10:0{i}:00" for i in range(5)])
    alarmed = [a["metric"] for a in result.alarms]
    assert alarmed and _bad_rows(report.bands_table(result).markup) == alarmed
    rows = [{"name": "a", "shown": "FAIL", "passed": True}, {"name": "b", "shown": "fine", "passed": False}]
    table = html_table(rows, [Col("name", "name", "id"), Col("shown", "shown")], bad=lambda r: not r["passed"])
    assert _bad_rows(table) == ["b"], "the row's data decides, whatever its cells say"


def test_axes_a_labelled_set_does_not_label_are_not_assessed_rather_than_not_trusted():
    from conftest import ROOT

    result = api.calibrate(labelled=str(ROOT / "examples" / "labelled-set.jsonl"))
    assert result.axes == ("faithfulness",)
    markup = report.agreement_table(result).markup
    rows = {axis: bad for bad, axis in re.findall(r'<tr( class="bad")?><td class="id"><code>([^<]+)</code>', markup)}
    assert rows == {"faithfulness": ' class="bad"', "answer_correctness": "", "citation_correctness": "", "overall": ""}
    assert markup.count("NOT TRUSTED") == 1 and markup.count("not assessed</span>") == 2
    facts = report.facts(result).markup
    assert "<b>axes</b>faithfulness<" in facts and "<b>kappa floor</b>0.40" in facts


class OwnIndex:
    """A system that retrieves from an index of its own: its passage ids are not among the case's."""

    def answer(self, case):
        return SUTOutput(
            answer="The branch opened in 1964.",
            citations=[Citation("ext-1", "opened in 1964")],
            retrieved_ids=["ext-1"],
            model_was_called=True,
            prompt_to_model=case.question,
        )


@pytest.fixture(scope="module")
def sourceless_run(tmp_path_factory):
    folder = write_cases(
        tmp_path_factory.mktemp("sourceless") / "data",
        [make_case(id="none-0001", sources=[], gold_source_ids=[]), make_case(id="some-0002")],
    )
    return api.run(str(folder), adapter=OwnIndex(), isolation="none")


@pytest.mark.parametrize("full", [True, False])
def test_a_case_without_passages_of_its_own_draws_its_drilldown(sourceless_run, monkeypatch, full):
    if not full:
        monkeypatch.setattr("qaeval.reports.case_list.ALL_FULL_UP_TO", 0)
    markup = report.drilldown(sourceless_run).markup
    case = markup[markup.index('id="case-none-0001"') :]
    case = case[: case.index("</details>")]
    assert "[ext-1]" in case and "(not in the fixture)" in case, "the system's passage is named, its text unknown"
    assert "When did the Eastside Branch open?" in case
    assert report.cases_table(sourceless_run).markup.count("<tr") == 3


def test_compare_headers_escape_a_label_once(golden_run):
    from qaeval.verdicts.compare import compare as compare_runs

    c = compare_runs(golden_run, golden_run, before_label="a&b <old>", after_label="new")
    head = report.compare_metrics(c).markup.split("<tbody>")[0]
    assert "<th>a&amp;b &lt;old&gt;</th>" in head, "not escaped twice (&amp;amp;)"


def test_every_result_draws_its_view_with_nothing_imported_first(golden_run):
    """The command line does not pay for the report layer; a notebook's result draws itself anyway."""
    code = "import qaeval.api, qaeval.cli, sys; print('qaeval.reports' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False"], "importing the verbs imported the report layer"
    shown = golden_run._repr_html_()
    assert shown == report.view(golden_run) and "qaeval-banner" in shown and "<table" in shown


def test_blocking_cases_are_tagged_with_the_rules_they_trip(tmp_path):
    """Each blocking case's tag is the rule of the tier that names it (from the tiers frame's ``rule``
    column, not parsed out of the tier's label)."""
    from conftest import GOLDEN

    from qaeval.reports.gate import blocking_cases

    result = api.gate(
        str(GOLDEN), baseline=str(GOLDEN / "ci-baseline.json"), adapter="qaeval.system.saboteur:make_adapter"
    )
    tiers = result.tiers.set_index("rule")
    assert tiers.at["deterministic checks", "tier"] == "tier 1: deterministic checks"
    page = str(blocking_cases(result))
    for rule, ids in zip(result.tiers["rule"], result.tiers["case_ids"]):
        if ids:
            assert f'<span class="tag fail">{rule}</span>' in page
    assert '<span class="tag fail">tier' not in page
