"""What the compare report draws: every metric before and after, and each case that changed, drawn
beside its earlier answer and tagged with what changed."""

from __future__ import annotations

from typing import Any

from qaeval.reports.case_list import drilldown
from qaeval.reports.cases import Tags
from qaeval.reports.html import Col, Html, delta, empty_note, failed, mark, num, table
from qaeval.verdicts.baseline import baseline_from_run
from qaeval.verdicts.compare import Comparison

CHANGE_TAGS = {"regressed": ("regressed", "fail"), "fixed": ("fixed", "pass"), "flaky": ("flaky", "was")}


def compare_metrics(c: Comparison) -> Html:
    cols = [
        Col("metric", "metric", "id"),
        Col("baseline", c.before_label, "html", get=lambda r: num(r["baseline"], r["n_baseline"])),
        Col("current", c.after_label, "html", get=lambda r: num(r["current"], r["n_current"])),
        Col("delta", "change", "html", get=lambda r: delta(r["delta"])),
        Col("passed", "result", "html", get=lambda r: mark(r["passed"], "same or better", "worse")),
        Col("note", "paired sign-flip test"),
    ]
    return table(
        c.metric_deltas.to_dict("records"),
        cols,
        caption="Every metric, before and after",
        bad=lambda r: failed(r["passed"]),
    )


def _change_tags(r: dict[str, Any]) -> Tags:
    """What changed in one case: its verdict, answer, citations, checks and judge scores."""
    what = [CHANGE_TAGS[r["change"]]] if r["change"] in CHANGE_TAGS else []
    what += [
        (x, "")
        for x, flag in (("answer changed", r["answer_changed"]), ("citations changed", r["citations_changed"]))
        if flag is True
    ]
    what += [(f"check {x}", "") for x in r["checks_flipped"]] + [(f"judge {x}", "") for x in r["scores_changed"]]
    what += [(f"now {x}", "") for x in r["new_reasons"]]
    if r["trials"]:
        what.append((f"trials passed {r['trials']}", ""))
    if r["status"] != "matched":
        what.append((r["status"], "was"))
    return what


def compare_cases(c: Comparison) -> Html:
    changed = c.changed
    if changed.empty:
        return empty_note("No case changed.")
    tags = {r["case_id"]: _change_tags(r) for r in changed.to_dict("records")}
    present = [cid for cid in changed["case_id"] if cid in c.after.suite]
    return drilldown(c.after, present, baseline=baseline_from_run(c.before, "before"), tags=tags, open_failing=True)
