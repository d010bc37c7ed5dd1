"""What the gate report draws: the tiers, each gated metric against the baseline, the cases that block
(each once, with the tiers it trips), the failing cases that do not, and whether the judge was checked
against people before it gated (the movement chart is ``qaeval.reports.charts.delta_chart``)."""

from __future__ import annotations

from typing import Any

from qaeval.reports.calibration import agreement_table
from qaeval.reports.case_list import drilldown
from qaeval.reports.cases import Tags
from qaeval.reports.html import Col, Html, banner, delta, empty_note, failed, mark, num, table, trial_marks
from qaeval.reports.run import run_facts, run_notes, trial_outcomes
from qaeval.verdicts.gate import GateResult
from qaeval.verdicts.tiers import metric_outcome


def gate_facts(result: GateResult) -> tuple[dict[str, Any], list[str]]:
    """The baseline the run was gated against, then the run's facts; the gate's notes."""
    b = result.baseline
    made = ", ".join(x for x in (b.created, (b.git_commit or "")[:10]) if x) or None
    return {"baseline": b.path, "baseline made": made, **run_facts(result.run)}, result.all_notes() or run_notes(
        result.run
    )


def tier_table(result: GateResult) -> Html:
    cols = [
        Col("tier", "tier"),
        Col("passed", "result", "html", get=lambda r: mark(r["passed"])),
        Col("detail", "detail"),
        Col("cases", "cases", "int", get=lambda r: len(r["case_ids"]) or ""),
    ]
    return table(
        result.tiers.to_dict("records"),
        cols,
        caption="Tiers: each blocking case is shown once below, with the tiers it trips",
        bad=lambda r: failed(r["passed"]),
    )


def delta_table(result: GateResult) -> Html:
    trials = result.run.trials > 1 or result.baseline.trials > 1
    cols = [
        Col("metric", "metric", "id"),
        Col("baseline", "baseline", "html", get=lambda r: num(r["baseline"], r["n_baseline"])),
        Col("current", "now", "html", get=lambda r: num(r["current"], r["n_current"])),
        Col("delta", "change", "html", get=lambda r: delta(r["delta"])),
        Col(
            "tolerance",
            "allowed",
            get=lambda r: f"{r['tolerance']:g} ({'a drop' if r['direction'] == 'higher' else 'a rise'})",
        ),
        Col("passed", "result", "html", get=lambda r: mark(r["passed"], metric_outcome(r), "BLOCKS")),
        Col(
            "note",
            "noise test (with trials it decides past the tolerance; else it informs)"
            if trials
            else "noise test (informs; tolerances decide)",
        ),
    ]
    return table(
        result.metric_deltas.to_dict("records"),
        cols,
        caption="Gated metrics against the baseline",
        bad=lambda r: failed(r["passed"]),
    )


def blocking_cases(result: GateResult) -> Html:
    """Each case a failed tier names, once, with the tiers it trips and, when it regressed, the
    baseline's answer beside the new one."""
    ids = result.blocking_cases
    if not ids:
        return empty_note("No case blocks.")
    tripped: dict[str, list[tuple[str, str]]] = {}
    for r in result.failed_tiers.to_dict("records"):
        for cid in r["case_ids"]:
            tripped.setdefault(cid, []).append((r["rule"], "fail"))
    if result.correctness_gated:  # its own pass (the mark) may hold while the gate counts a wrong answer
        for cid, wrong in result.passes.wrong.items():
            if cid in tripped:
                trials = result.passes.current[cid][1]
                tripped[cid].append((f"answer judged wrong in {wrong} of {trials} trial(s)", "fail"))
    return drilldown(result.run, ids, baseline=result.baseline, tags=tripped, open_failing=True)


def flaky_table(result: GateResult) -> Html:
    """The flaky cases that do not block: their passes in the baseline and now, each trial's mark, and the
    one-sided Fisher p-value of the drop (1 when there is none)."""
    if result.flaky.empty:
        return Html("")
    outcomes = trial_outcomes(result.run)
    cols = [
        Col("case_id", "case", "id"),
        Col("baseline", "passed in the baseline", get=lambda r: f"{r['baseline_passes']} of {r['baseline_trials']}"),
        Col("now", "passed now", get=lambda r: f"{r['passes']} of {r['trials']}"),
        Col("trials", "trials now", "html", get=lambda r: trial_marks(outcomes.get(r["case_id"], []))),
        Col("p", "p (a drop, one-sided Fisher)", get=lambda r: f"{r['p_value']:.3g}"),
    ]
    return table(
        result.flaky.to_dict("records"),
        cols,
        caption="Flaky, not blocking: some trials pass and some fail, on either side, and the "
        "drop is within what chance allows",
    )


def not_blocking(result: GateResult) -> Html:
    """The flaky cases that do not block (``flaky_table``), then the failing cases that do not block,
    labelled with why (already failing in the baseline, or flaky)."""
    blocking = set(result.blocking_cases)
    pc = result.run.per_case
    failing = [c for c in pc.loc[~pc["case_passed"], "case_id"] if c not in blocking]
    if not failing:
        return Html(flaky_table(result).markup or empty_note("No other case fails.").markup)
    already, flaky = set(result.already_failing), set(result.flaky["case_id"])
    why = {**{c: "already failing in the baseline" for c in already}, **{c: "flaky, not blocking" for c in flaky}}
    tags: dict[str, Tags] = {c: [(why.get(c, "not blocking"), "was")] for c in failing}
    return Html(flaky_table(result).markup + drilldown(result.run, failing, baseline=result.baseline, tags=tags).markup)


def gate_calibration(result: GateResult) -> Html:
    """With labels, whether the judge was trusted before it gated; without, say it was not checked."""
    if result.calibration is None:
        return empty_note(
            "No labels were given (gate --labels FILE), so the judge was not checked against people "
            "before its numbers gated this change."
        )
    return banner(result.calibration) + agreement_table(result.calibration)
