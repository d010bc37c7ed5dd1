"""What the calibration report draws: the judge's agreement with people per axis, every label it
disagrees with, and the labels it agrees with or left out (the confusion matrices are
``qaeval.reports.charts.confusion_chart``)."""

from __future__ import annotations

from typing import Any

from qaeval.reports.html import Col, Html, empty_note, esc, failed, mark, num, score, table
from qaeval.scoring.metrics import format_interval
from qaeval.verdicts.calibration import CalibrationResult

OVERALL = "overall"  # the agreement row over every axis: shown, never gated


def calibration_facts(result: CalibrationResult) -> tuple[dict[str, Any], list[str]]:
    return {
        "labels": result.source,
        "judge": result.judge_label,
        "axes": ", ".join(result.axes),
        "bar": f"{result.min_agreement:.2f} exact agreement",
        "kappa floor": f"{result.min_kappa:.2f} where people's scores vary",
        "labels needed per axis": result.min_labels,
        "cases": len(result.run.suite),
    }, list(result.notes)


def _agreement_result(r: dict[str, Any]) -> str:
    """The verdict on one axis: an axis not assessed (and the overall row) decides nothing."""
    if r["axis"] == OVERALL:
        return '<span class="na">not gated</span>'
    if not r["assessed"]:
        return '<span class="na">not assessed</span>'
    return mark(r["passed"], "ok", "NOT TRUSTED")


def agreement_table(result: CalibrationResult) -> Html:
    note = ""
    if not result.ok and result.overall_clears_bar:
        note = (
            "<p>The overall figure clears the bar, yet the judge is refused: it is only as trustworthy as its "
            "weakest axis, and an average hides the axis where it is wrong.</p>"
        )
    cols = [
        Col("axis", "axis", "id"),
        Col("n", "labels", "int"),
        Col("exact", "exact agreement", "htmlnum", get=lambda r: num(r["exact"], r["n"], 2)),
        Col("exact_ci", "95% CI (Wilson)", "nowrap", get=lambda r: _interval(r, "exact")),
        Col("within", "within one", "htmlnum", get=lambda r: num(r["within_one"], r["n"], 2)),
        Col("within_ci", "95% CI", "nowrap", get=lambda r: _interval(r, "within_one")),
        Col("mae", "MAE", "htmlnum", get=lambda r: num(r["mae"], r["n"], 2)),
        Col("kappa", "kappa (quadratic)", "htmlnum", get=lambda r: num(r["kappa"], None, 2)),
        Col("result", "result", "html", get=_agreement_result),
        Col("status", "why"),
    ]
    return Html(note) + table(
        result.agreement.to_dict("records"),
        cols,
        caption="Agreement with human labels per axis (kappa is NaN when there is no spread to agree on)",
        bad=lambda r: bool(r["assessed"]) and failed(r["passed"]),
    )


def _interval(r: dict[str, Any], name: str) -> str:
    return format_interval(r[f"{name}_low"], r[f"{name}_high"], r["n"], digits=2)


def _judge_side(r: dict[str, Any]) -> str:
    quote = f" · quote: “{esc(r['judge_quote'])}”" if r["judge_quote"] else ""
    why = f" · {esc(r['judge_rationale'])}" if r["judge_rationale"] else ""
    return f"<b>{score(r['judge'])}</b>{quote}{why}"


def disagreements(result: CalibrationResult) -> Html:
    """Every label the judge disagrees with, largest gap first: the person's score and reason beside the
    judge's score, quote and rationale."""
    d = result.disagreements()
    if d.empty:
        return empty_note("The judge agrees with every compared label.")
    cols = [
        Col("case_id", "case", "id"),
        Col("axis", "axis", get=lambda r: r["axis"].replace("_", " ")),
        Col("human", "person", "html", get=lambda r: f"<b>{r['human']}</b> · {esc(r['reason'])}"),
        Col("judge", "judge", "html", get=_judge_side),
    ]
    return table(d.to_dict("records"), cols, caption=f"{len(d)} disagreement(s)")


def agreeing_labels(result: CalibrationResult) -> Html:
    p = result.pairs
    rows = p[(p["status"] != "compared") | p["agree"].fillna(False).astype(bool)]
    if rows.empty:
        return empty_note("No label agrees.")
    cols = [
        Col("case_id", "case", "id"),
        Col("axis", "axis"),
        Col("human", "person", "int"),
        Col("judge", "judge", "html", get=lambda r: score(r["judge"])),
        Col("status", "status"),
        Col("reason", "person's reason"),
    ]
    return table(
        rows.to_dict("records"),
        cols,
        caption="Labels the judge agrees with, and labels left out (stale or not judged)",
        bad=lambda r: r["status"] != "compared",
    )
