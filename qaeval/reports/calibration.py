"""What the calibration report draws: the judge's agreement with people per axis, every label it
disagrees with, and the labels it agrees with or left out (the confusion matrices are
``qaeval.reports.charts.confusion_chart``)."""

from __future__ import annotations

from typing import Any

from qaeval.reports.html import Col, Html, empty_note, esc, failed, html_table, mark, num, score
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


def _agreement_row(r: dict[str, Any]) -> dict[str, Any]:
    n = r["n"]
    return dict(
        axis=r["axis"],
        n=n,
        exact=num(r["exact"], n, 2),
        exact_ci=format_interval(r["exact_low"], r["exact_high"], n, digits=2),
        within=num(r["within_one"], n, 2),
        within_ci=format_interval(r["within_one_low"], r["within_one_high"], n, digits=2),
        mae=num(r["mae"], n, 2),
        kappa=num(r["kappa"], None, 2),
        result=_agreement_result(r),
        status=r["status"],
        refused=bool(r["assessed"]) and failed(r["passed"]),
    )


def agreement_table(result: CalibrationResult) -> Html:
    rows = [_agreement_row(r) for r in result.agreement.to_dict("records")]
    note = ""
    if not result.ok and result.overall_clears_bar:
        note = (
            "<p>The overall figure clears the bar, yet the judge is refused: it is only as trustworthy as its "
            "weakest axis, and an average hides the axis where it is wrong.</p>"
        )
    return Html(
        note
        + html_table(
            rows,
            [
                Col("axis", "axis", "id"),
                Col("n", "labels", "int"),
                Col("exact", "exact agreement", "htmlnum"),
                Col("exact_ci", "95% CI (Wilson)", "nowrap"),
                Col("within", "within one", "htmlnum"),
                Col("within_ci", "95% CI", "nowrap"),
                Col("mae", "MAE", "htmlnum"),
                Col("kappa", "kappa (quadratic)", "htmlnum"),
                Col("result", "result", "html"),
                Col("status", "why"),
            ],
            caption="Agreement with human labels per axis (kappa is NaN when there is no spread to agree on)",
            bad=lambda r: r["refused"],
        )
    )


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
    rows = [
        dict(
            case=r["case_id"],
            axis=r["axis"].replace("_", " "),
            human=f"<b>{r['human']}</b> · {esc(r['reason'])}",
            judge=_judge_side(r),
        )
        for r in d.to_dict("records")
    ]
    return Html(
        html_table(
            rows,
            [
                Col("case", "case", "id"),
                Col("axis", "axis"),
                Col("human", "person", "html"),
                Col("judge", "judge", "html"),
            ],
            caption=f"{len(rows)} disagreement(s)",
        )
    )


def agreeing_labels(result: CalibrationResult) -> Html:
    p = result.pairs
    rows = p[(p["status"] != "compared") | p["agree"].fillna(False).astype(bool)]
    if rows.empty:
        return empty_note("No label agrees.")
    table = [
        dict(
            case=r["case_id"],
            axis=r["axis"],
            human=r["human"],
            judge=score(r["judge"]),
            status=r["status"],
            reason=r["reason"],
        )
        for r in rows.to_dict("records")
    ]
    return Html(
        html_table(
            table,
            [
                Col("case", "case", "id"),
                Col("axis", "axis"),
                Col("human", "person", "int"),
                Col("judge", "judge", "html"),
                Col("status", "status"),
                Col("reason", "person's reason"),
            ],
            caption="Labels the judge agrees with, and labels left out (stale or not judged)",
            bad=lambda r: r["status"] != "compared",
        )
    )
