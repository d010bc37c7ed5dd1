"""Two runs side by side: which metrics moved (with the paired sign-flip test), and per case what changed.

``compare(before, after)`` matches cases by id and fingerprint; a matched case says whether it passes on
each side and what changed (answer, citations, flipped checks, judge scores). Cases on one side only are
new or removed; a case whose content changed is listed as changed, not compared. With trials a matched
case is "regressed" when the gate's case rule (``tiers.case_trials`` at alpha 0.05) would block it and
"flaky" when its trials differ within chance; ``citations_by_trial`` says what each trial cited when they
did not all cite alike. Informational: ``qaeval compare`` exits 0; ``ok`` is false when a case regressed
or a metric moved the wrong way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from qaeval.core.errors import VerdictError
from qaeval.core.frames import frame
from qaeval.core.results import Result
from qaeval.data.schema import AXES
from qaeval.scoring.checks import CHECKS
from qaeval.scoring.metrics import METRIC_NAMES, format_number
from qaeval.scoring.outcomes import PASS_MEANS, FailReason, citation_change, reasons_text
from qaeval.scoring.result import RunResult
from qaeval.verdicts.baseline import baseline_from_run, by_trial, trial_citing
from qaeval.verdicts.tiers import CaseMatch, case_trials, match_cases, metric_movements

CASE_SCHEMA = {
    "case_id": "text",
    "status": "text",
    "before_passed": "boolean",
    "after_passed": "boolean",
    "change": "text",
    "answer_changed": "boolean",
    "citations_changed": "boolean",
    "checks_flipped": "object",
    "scores_changed": "object",
    "new_reasons": "object",
    "before_answer": "text",
    "after_answer": "text",
    "before_why": "text",
    "after_why": "text",
    "trials": "text",
    "citations_by_trial": "text",
}


@dataclass(repr=False)
class Comparison(Result):
    """Two runs of the same cases side by side: metric deltas with their noise, and case-level changes.

    ``ok`` (NO REGRESSION) unless a metric moved the wrong way past noise or a case regressed.

    Attributes:
        before: The earlier run.
        after: The later run.
        metric_deltas: One row per metric: before, after, delta, and whether it is distinguishable
            from noise.
        cases: One row per case: passed before and after, ``change`` (``regressed``, ``fixed``,
            ...), what changed (answer, citations, checks, scores) and why it fails.
        before_label: How the earlier run is named in output.
        after_label: How the later run is named in output.
    """

    before: RunResult
    after: RunResult
    metric_deltas: pd.DataFrame
    cases: pd.DataFrame
    before_label: str = "before"
    after_label: str = "after"

    kind = "compare"
    error_type = VerdictError
    words = ("NO REGRESSION", "REGRESSED")

    @property
    def regressed(self) -> list[str]:
        return self.cases.loc[self.cases["change"] == "regressed", "case_id"].tolist()

    @property
    def fixed(self) -> list[str]:
        return self.cases.loc[self.cases["change"] == "fixed", "case_id"].tolist()

    @property
    def changed(self) -> pd.DataFrame:
        """Cases whose output, verdict, checks or scores differ, or that exist on one side only."""
        c = self.cases
        moved = (
            c["answer_changed"].fillna(False)
            | c["citations_changed"].fillna(False)
            | c["checks_flipped"].map(bool)
            | c["scores_changed"].map(bool)
            | c["new_reasons"].map(bool)
            | c["change"].isin(["regressed", "fixed", "flaky"])
            | c["status"].isin(["new", "removed", "changed"])
        )
        return c[moved.astype(bool)]

    @property
    def worse_metrics(self) -> list[str]:
        d = self.metric_deltas
        return d.loc[~d["passed"], "metric"].tolist()

    @property
    def ok(self) -> bool:
        return not self.regressed and not self.worse_metrics

    @property
    def exit_code(self) -> int:
        return 0

    @property
    def reason(self) -> str:
        parts = [f"{len(self.changed)} case(s) changed", f"{len(self.regressed)} regressed", f"{len(self.fixed)} fixed"]
        if self.worse_metrics:
            parts.append("worse: " + ", ".join(self.worse_metrics))
        return "; ".join(parts)

    def summary_text(self) -> str:
        lines = [
            f"COMPARE: {self.verdict}   {self.before_label} -> {self.after_label}   ({self.reason})",
            f"  ({PASS_MEANS}; answer correctness is not part of it)",
        ]
        lines.append(f"  {'metric':<26} {'before':>8} {'after':>8} {'delta':>8}  noise test")
        for r in self.metric_deltas.itertuples(index=False):
            mark = "" if r.passed else "  <- worse"
            lines.append(
                f"  {r.metric:<26} {format_number(r.baseline):>8} {format_number(r.current):>8} {format_number(r.delta):>8}  {r.note}{mark}"
            )
        changed = self.changed
        if len(changed):
            lines.append("")
            lines.append(f"  {len(changed)} case(s) changed:")
        for r in changed.to_dict("records"):
            what = []
            if r["answer_changed"]:
                what.append("answer")
            if r["citations_by_trial"]:
                what.append(f"cites {r['citations_by_trial']}")
            elif r["citations_changed"]:
                moved = citation_change(
                    self.before.per_case.set_index("case_id").at[r["case_id"], "citations"],
                    self.after.per_case.set_index("case_id").at[r["case_id"], "citations"],
                )
                what.append(moved or "citations reworded")
            if r["checks_flipped"]:
                what.append("checks " + ", ".join(r["checks_flipped"]))
            if r["scores_changed"]:
                what.append("judge " + ", ".join(r["scores_changed"]))
            if r["new_reasons"]:
                what.append("now " + ", ".join(r["new_reasons"]))
            if r["trials"]:
                what.append(f"trials passed {r['trials']}")
            lines.append(f"    {r['case_id']:<24} {r['change']:<15} {'; '.join(what) or r['status']}")
        return "\n".join(lines)


def _new_reasons(before: list[FailReason], after: list[FailReason], compared: list[str]) -> list[str]:
    """Why the case fails now that it did not fail for before, beyond the checks both runs ran
    (``checks_flipped`` names those): "adapter error", "check NAME" (a check only the second run ran),
    "metric NAME", "unfaithful", "judge error", "wrongly abstained", "trajectory failed"."""
    had = {(r.code, r.name) for r in before}
    return list(
        dict.fromkeys(
            f"{r.code} {r.name}" if r.code in ("check", "metric") else r.code.replace("_", " ")
            for r in after
            if (r.code, r.name) not in had and r.code not in CHECKS and not (r.code == "check" and r.name in compared)
        )
    )


def _check_outcomes(run: RunResult) -> dict[tuple[str, str], bool]:
    """{(case, check): passed} for the built-in checks and the registered ones."""
    found = {(r.case_id, r.check): bool(r.passed) for r in run.checks.itertuples(index=False)}
    custom = run.custom[run.custom["kind"] == "check"]
    found.update(
        {(cid, name): bool(passed) for cid, name, passed in zip(custom["case_id"], custom["name"], custom["passed"])}
    )
    return found


def _state(passed: Any) -> str:
    return "passing" if passed else "failing"


@dataclass(frozen=True)
class _Sides:
    """What each run says of its cases, by case id: its per-case rows, what its trials cited, its checks'
    outcomes; and the checks to compare (the built-in ones, then those both runs ran)."""

    before_cases: pd.DataFrame
    after_cases: pd.DataFrame
    before_cited: dict[str, list[str]]
    after_cited: dict[str, list[str]]
    before_checks: dict[tuple[str, str], bool]
    after_checks: dict[tuple[str, str], bool]
    checks: list[str]


def compare(
    before: RunResult, after: RunResult, *, before_label: str = "before", after_label: str = "after"
) -> Comparison:
    """Set two runs side by side. Pure."""
    base = baseline_from_run(before, before_label)
    match = match_cases(after, base)
    verdicts = {r.case_id: r for r in case_trials(after, base, match.matched, 0.05).itertuples(index=False)}
    deltas = metric_movements(after, base, {m: 0.0 for m in METRIC_NAMES}, match.matched)
    sides = _sides(before, after)
    rows = [_after_row(cid, sides, match, verdicts) for cid in after.per_case["case_id"]]
    rows += [_removed_row(cid, sides.before_cases.loc[cid]) for cid in match.removed]
    return Comparison(
        before=before,
        after=after,
        metric_deltas=deltas,
        cases=frame(rows, CASE_SCHEMA),
        before_label=before_label,
        after_label=after_label,
    )


def _sides(before: RunResult, after: RunResult) -> _Sides:
    """Each run's cases, citations and check outcomes, looked up by case id."""
    b_checks, a_checks = _check_outcomes(before), _check_outcomes(after)
    both = {c for _, c in b_checks} & {c for _, c in a_checks}  # a check only one run ran did not flip
    return _Sides(
        before_cases=before.per_case.set_index("case_id"),
        after_cases=after.per_case.set_index("case_id"),
        before_cited=trial_citing(before),
        after_cited=trial_citing(after),
        before_checks=b_checks,
        after_checks=a_checks,
        checks=list(CHECKS) + sorted(both - set(CHECKS)),
    )


def _after_row(cid: str, sides: _Sides, match: CaseMatch, verdicts: dict[str, Any]) -> dict[str, Any]:
    """The row of one case of the later run: compared when matched, else new or changed."""
    a = sides.after_cases.loc[cid]
    row: dict[str, Any] = dict(
        case_id=cid,
        after_passed=bool(a["case_passed"]),
        after_answer=a["answer"],
        after_why=reasons_text(a["fail_reasons"]),
        checks_flipped=[],
        scores_changed=[],
        new_reasons=[],
        trials=None,
        citations_by_trial=None,
    )
    if cid in match.new or cid in match.changed:
        return {
            **row,
            "status": "new" if cid in match.new else "changed",
            "change": "not compared",
            "before_passed": None if cid in match.new else bool(sides.before_cases.at[cid, "case_passed"]),
            "answer_changed": None,
            "citations_changed": None,
            "before_answer": None,
            "before_why": None,
        }
    return _matched_row(row, cid, sides, a, verdicts[cid])


def _change(b: pd.Series, a: pd.Series, t: Any) -> str:
    """What happened to a matched case: regressed, flaky, fixed, or still passing/failing."""
    if t.verdict in ("broken", "regressed"):
        return "regressed"
    if t.verdict == "flaky":
        return "flaky"
    if not b["case_passed"] and a["case_passed"]:
        return "fixed"
    return f"still {_state(a['case_passed'])}"


def _matched_row(row: dict[str, Any], cid: str, sides: _Sides, a: pd.Series, t: Any) -> dict[str, Any]:
    """A matched case compared: its change, what differs between the outputs, its trials."""
    b = sides.before_cases.loc[cid]
    change = _change(b, a, t)
    new = _new_reasons(b["fail_reasons"], a["fail_reasons"], sides.checks)
    errored = "adapter error" in new  # its checks and scores changed because it has no output
    citing, cites_changed = _citing(
        sides.before_cited[cid], sides.after_cited[cid], list(b["citations"]) != list(a["citations"])
    )
    b_checks, a_checks = sides.before_checks, sides.after_checks
    return {
        **row,
        "status": "matched",
        "change": change,
        "before_passed": bool(b["case_passed"]),
        "answer_changed": (b["answer"], bool(b["abstained"])) != (a["answer"], bool(a["abstained"])),
        "citations_changed": cites_changed,
        "citations_by_trial": citing,
        "checks_flipped": []
        if errored
        else [c for c in sides.checks if b_checks.get((cid, c)) != a_checks.get((cid, c))],
        "scores_changed": [] if errored else [ax for ax in AXES if not _same(b[ax], a[ax])],
        "new_reasons": new,
        "before_answer": b["answer"],
        "before_why": reasons_text(b["fail_reasons"]),
        "trials": f"{t.baseline_passes}/{t.baseline_trials} -> {t.passes}/{t.trials}"
        if t.baseline_trials > 1 or t.trials > 1
        else None,
    }


def _removed_row(cid: str, b: pd.Series) -> dict[str, Any]:
    """A case only the earlier run has."""
    row = dict.fromkeys(CASE_SCHEMA) | dict(checks_flipped=[], scores_changed=[], new_reasons=[])
    return row | dict(
        case_id=cid,
        status="removed",
        before_passed=bool(b["case_passed"]),
        change="not compared",
        before_answer=b["answer"],
        before_why=reasons_text(b["fail_reasons"]),
    )


def _citing(before: list[str], after: list[str], first_differ: bool) -> tuple[str | None, bool]:
    """(what each side's trials cited, "hours (trials 1, 3, 5), nowhere (trials 2, 4) → hours", or None
    when neither side ran trials or every trial of both cited alike; whether the citations changed). With
    one trial a side, they changed when its citations differ (``first_differ``: a claim reworded counts);
    with trials, when a side cited something the other never did, in any trial."""
    if len(before) == 1 and len(after) == 1:
        return None, first_differ
    alike = len(set(before) | set(after)) == 1
    return (None if alike else f"{by_trial(before)} → {by_trial(after)}"), set(before) != set(after)


def _same(x: Any, y: Any) -> bool:
    missing_x, missing_y = pd.isna(x), pd.isna(y)
    if missing_x or missing_y:
        return bool(missing_x and missing_y)
    return int(x) == int(y)
