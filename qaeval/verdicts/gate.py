"""The regression gate: PASS or BLOCK for a run against the last green baseline.

Tier 1 (hard): every deterministic check green and no adapter error.
Tier 2 (against the baseline):
  * metrics: each gated metric (``Metric.tolerance``) may not move the wrong way by more than its
    tolerance (moving by exactly the tolerance passes);
  * regressions: no case that passed in the baseline may fail now (wrongly abstaining, losing its
    trajectory, failing a check or the judge all count);
  * new cases: every case new since the baseline, or whose content changed under the same id, must pass.
With labels (``gate --labels``) the judge is calibrated first; a judge refused on any axis blocks
(exit 2), because its numbers cannot decide anything.

Cases are matched by id; a case whose fingerprint changed is reported as changed and held to the
new-case rule, never compared with its old self. For each gated metric an exact paired sign-flip
permutation test over the matched cases says whether the movement is distinguishable from noise at
this n (every one of the 2^m sign patterns of the m cases that moved, up to m = 16; a Monte Carlo
estimate with p >= 1/(B+1) beyond). When even the most extreme pattern could not reach p = 0.05 (m <= 5)
it says there are too few paired cases to tell. The test informs the reviewer; the tolerances decide.

With trials (``--trials K`` on either side; ``qaeval.scoring.trials``) tier 1 blocks on a failure in any
trial, and tier 2 tells noise from change (``tiers.case_trials``, ``levels``). Write c_b of n_b baseline
trials passed and c of n current ones:

* broken: c_b = n_b and c = 0 blocks (with n_b = n = 1, the rule above);
* regressed: c / n < c_b / n_b and the one-sided Fisher exact p-value of the drop, conditional on the
  c_b + c passes, sum_{x <= c} C(c_b + c, x) C(n_b + n - c_b - c, n - x) / C(n_b + n, n), is at most
  Tarone's level alpha / (2 m), m the smallest count such that at most m cases could reach p <= alpha
  / (2 m) at all (a case that never moved, 5/5 -> 5/5, has p = 1 whatever happens and costs nothing);
* flaky: any other case with some trials passing and some failing: listed, never blocking;
* a gated metric past its tolerance blocks only when the one-sided paired sign-flip test over the
  matched cases' per-case means has p <= alpha / (2 G), G the number of gated metrics, or when no case
  pairs with the baseline.

What it can and cannot detect: at K = 1 the rule is the one above (any passing case that fails once
blocks, so a system that varies is blocked on noise); at K = 3 a case 3/3 -> 0/3 blocks, and an
unchanged system whose cases pass 90% of the time trips that rule with a chance of 1 - (1 - 0.9^3
0.1^3)^N (7% at N = 100); at K = 5 that chance is 0.06% and a case's drop from 5/5 to 0/5 has Fisher
p = 1/252; at K = 10 a drop from 10/10 to 5/10 has p = 0.016. A metric whose cases are few (m that
moved) cannot reach p below 2^-m, so at the default alpha a zero-tolerance metric over fewer than about
nine cases that moved cannot block on its own with trials; the per-case rules still can. The broken
rule is outside alpha: it is what the gate did before trials, and K >= 5 makes its false alarms rare.

The gate is computed by ``gate(run, baseline)`` in steps a reader can name (``qaeval.verdicts.tiers``):
``match_cases``, ``tier_one``, ``metric_movements``, ``metrics_tier``, ``case_trials``, ``regressions``,
``new_cases``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from qaeval.audit import Audit
from qaeval.errors import GateBlocked, JudgeNotTrusted
from qaeval.frames import Each, Fields, Fixed, Keyed, Maybe, Valid, clean, frame, frame_rows, rows_of, shape_problems
from qaeval.results import Result
from qaeval.scoring.evaluate import RunResult
from qaeval.scoring.metrics import format_number
from qaeval.scoring.retrieval import unknown_ids_note
from qaeval.text import one_line
from qaeval.scoring.outcomes import PASS_MEANS, REASON, FailReason
from qaeval.verdicts.baseline import Baseline, BaselineCase
from qaeval.verdicts.calibration import CalibrationResult
from qaeval.verdicts.calibration import SECTION as CALIBRATION_SECTION
from qaeval.verdicts.tiers import (
    CASE_TRIALS_SCHEMA, DELTA_SCHEMA, MOVEMENT, NEW_SCHEMA, REGRESSED_SCHEMA, TIER_RULES, TIER_SCHEMA, CaseMatch,
    case_trials, gated, match_cases, metric_movements, metrics_tier, movement, new_cases, one_trial_each, regressions,
    tier_one, tier_row,
)

DEFAULT_ALPHA = 0.05
JUDGE_METRICS = ("faithfulness_rate", "answer_correctness", "citation_precision")  # read from the judge's verdicts

BASELINE_CASE = Fields(dict(  # a baseline case a gate record keeps in full ("units": {metric: [num, den]})
    fingerprint="str", passed="bool", fail_reasons=Each(REASON), units=Keyed(Fixed(("number", "number"))), answer="text",
    abstained="boolean", citations=Maybe(Each("dict")), output_fingerprint="text",
    passes=Valid("int", lambda n: 0 <= n <= 100, "0 to 100"), trials=Valid("int", lambda n: 1 <= n <= 100, "1 to 100")),
    optional=("answer", "abstained", "citations", "output_fingerprint", "passes", "trials"))
SECTION = Fields(dict(  # the gate section of a record, as GateResult.from_section reads it
    baseline=Fields(dict(path="str", dataset_fingerprint="str", judge="Dict", green="bool", allowed_failing="bool",
                         created="text", git_commit="text", adapter="text", corpus_fingerprint="text",
                         custom=Maybe(Keyed("str")), trials=Valid("int", lambda n: 1 <= n <= 100, "1 to 100")),
                    optional=("judge", "green", "allowed_failing", "created", "git_commit", "adapter",
                              "corpus_fingerprint", "custom", "trials")),
    baseline_metrics=Keyed(Fixed(("float", "int"))), baseline_cases=Keyed(BASELINE_CASE),
    baseline_notes=Maybe(Each("str")), tiers=rows_of(TIER_SCHEMA, tier="str", case_ids=Each("str"),
                                                        rule=Valid("str", TIER_RULES.__contains__, f"one of {', '.join(TIER_RULES)}")),
    metric_deltas=rows_of(DELTA_SCHEMA), regressed=rows_of(REGRESSED_SCHEMA), new_failing=rows_of(NEW_SCHEMA),
    match=Fields({name: Each("str") for name in ("matched", "changed", "new", "removed")}),
    calibration=Maybe(CALIBRATION_SECTION), notes=Maybe(Each("str")), case_trials=rows_of(CASE_TRIALS_SCHEMA),
    alpha=Valid("float", lambda a: 0.0001 <= a <= 0.5, "a number from 0.0001 to 0.5, as --alpha takes")),
    optional=("baseline_notes", "calibration", "notes", "case_trials", "alpha"))


# --------------------------------------------------------------------------- the result


@dataclass(repr=False)
class GateResult(Result):
    """The gate's verdict and the frames behind it."""

    run: RunResult
    baseline: Baseline
    tiers: pd.DataFrame
    metric_deltas: pd.DataFrame
    regressed: pd.DataFrame
    new_failing: pd.DataFrame
    match: CaseMatch
    calibration: Any = None  # a CalibrationResult when the gate was given labels
    notes: list[str] = field(default_factory=list)
    case_trials: pd.DataFrame = field(default_factory=lambda: frame([], CASE_TRIALS_SCHEMA))  # tiers.case_trials
    alpha: float = DEFAULT_ALPHA

    @property
    def flaky(self) -> pd.DataFrame:
        """Matched cases some of whose trials passed and some failed, on either side, that do not block."""
        return self.case_trials[self.case_trials["verdict"] == "flaky"]

    kind = "gate"
    error_type = GateBlocked
    words = ("PASS", "BLOCK")

    @property
    def judge_trusted(self) -> bool:
        return self.calibration is None or self.calibration.ok

    @property
    def ok(self) -> bool:
        return self.judge_trusted and bool(self.tiers["passed"].all())

    @property
    def exit_code(self) -> int:
        if not self.judge_trusted:
            return JudgeNotTrusted.exit_code
        return 0 if self.ok else GateBlocked.exit_code

    def raise_for_status(self) -> None:
        if not self.judge_trusted:
            raise JudgeNotTrusted(f"BLOCK: {self.reason}", self)
        super().raise_for_status()

    @property
    def failed_tiers(self) -> pd.DataFrame:
        return self.tiers[~self.tiers["passed"]]

    @property
    def reason(self) -> str:
        if not self.judge_trusted:
            return f"the judge is not trusted ({self.calibration.reason}); its numbers cannot gate"
        gated = set(self.metric_deltas["metric"])
        if self.ok:
            already = len(self.already_failing)
            head = self.run.passing_line(gated, f" ({already} fail as they did in the baseline)" if already else "")
            return f"deterministic checks green and every tier-2 rule held against the baseline; {head}"
        head = self.run.passing_line(gated)
        return "failed " + "; ".join(f"{r.tier} ({len(r.case_ids)} case(s))" if r.case_ids else r.tier
                                     for r in self.failed_tiers.itertuples(index=False)) + f"; {head}"

    @property
    def blocking_cases(self) -> list[str]:
        """Every case id named by a failed tier, once, in suite order."""
        named = {c for ids in self.failed_tiers["case_ids"] for c in ids}
        return [c for c in self.run.per_case["case_id"] if c in named]

    @property
    def already_failing(self) -> list[str]:
        """Cases failing now that also failed in the baseline (they do not block; they were not green)."""
        pc = self.run.per_case
        return [c for c, ok in zip(pc["case_id"], pc["case_passed"])
                if not ok and c in self.match.matched and not self.baseline.cases[c].passed]

    @property
    def changed_cases(self) -> list[str]:
        return self.match.changed

    @property
    def removed_cases(self) -> list[str]:
        return self.match.removed

    @property
    def dataset_match(self) -> bool:
        return self.baseline.dataset_fingerprint == self.run.dataset_fingerprint

    @property
    def judge_match(self) -> bool:
        """Whether this run was judged like the baseline (same judge, model, settings and rubric)."""
        return self.baseline.judge is None or self.baseline.judge == self.run.judge_config.to_dict()

    @property
    def baseline_path(self) -> str:
        return self.baseline.path

    @property
    def adapter_match(self) -> bool:
        """Whether this run's system is the one the baseline was recorded from (by its recorded name)."""
        return not self.baseline.adapter or self.baseline.adapter == self.run.meta.adapter

    def differences(self) -> list[str]:
        """What makes this a comparison of different things: another adapter, another judge. The first
        lines of the verdict and of the report."""
        lines = []
        if not self.adapter_match:
            lines.append(f"adapter differs from the baseline's: {self.baseline.adapter}, now {self.run.meta.adapter}")
        if not self.judge_match:
            b = self.baseline.judge or {}
            lines.append(f"judge differs from the baseline's: {b.get('name')}:{b.get('model')} "
                         f"rubric={b.get('prompt_version')}, now {self.run.judge_config.label()}; judge metrics "
                         "may move for that reason alone")
        return [one_line(line) for line in lines]  # names from the baseline file, which is the user's

    def all_notes(self) -> list[str]:
        notes = self.differences() + list(self.notes) + list(self.baseline.notes)
        if not self.baseline.green:
            notes.append("the baseline was not green when it was written (--allow-failing): cases that failed "
                         "there do not count as regressions")
        if not self.dataset_match:
            notes.append(f"the data differs from the baseline's: {len(self.match.changed)} case(s) changed, "
                         f"{len(self.match.new)} new, {len(self.match.removed)} no longer present")
        corpus, base_corpus = self.run.suite.corpus_fingerprint, self.baseline.corpus_fingerprint
        if corpus != base_corpus:
            short = lambda f: f[:12] if f else "none"  # noqa: E731
            notes.append(f"the corpus changed since the baseline (fingerprint {short(base_corpus)} -> {short(corpus)}): "
                         "retrieval and grounding may move for that reason alone")
        changed = self.run.registered.changes_since(self.baseline.custom)
        if changed:
            notes.append(f"the registered checks and metrics changed since the baseline ({', '.join(changed)}): "
                         "their outcomes and pass rates have nothing to compare with")
        notes += unknown_ids_note(self.run.suite, self.run.outputs)
        if self.calibration is None:
            judged = [r.metric for r in self.metric_deltas.itertuples(index=False) if r.metric in JUDGE_METRICS]
            notes.append(f"the judge ({self.run.judge_config.label()}) was not calibrated against human labels in "
                         f"this run (no labels given): {', '.join(judged) or 'its metrics'} gate on its word alone; "
                         "calibrate it first (qaeval calibrate, or gate --labels FILE)")
        if not self.run.meta.boundary_enforced:
            notes.append("isolation none: the boundary was not enforced in this run")
        if self.run.trials != self.baseline.trials:
            notes.append(f"{self.run.trials} trial(s) per case against a baseline of {self.baseline.trials}"
                         + (": a single baseline draw cannot tell whether a case that fails some trials now was "
                            "flaky before, so such a case is reported as flaky, and blocks only when it fails every "
                            "trial" if self.baseline.trials == 1 else ""))
        return notes

    def summary_text(self) -> str:
        lines = [f"GATE: {self.verdict}   {self.reason}   (baseline {self.baseline.path})", f"  ({PASS_MEANS})"]
        notes = self.all_notes()
        lines += [f"note: {n}" for n in notes[:len(self.differences())]]  # what differs from the baseline, first
        if self.calibration is not None:
            lines.append(f"  judge calibration: {self.calibration.verdict} ({self.calibration.reason})")
        lines += [f"note: {n}" for n in notes[len(self.differences()):]]
        for row in self.tiers.itertuples(index=False):
            mark = "ok  " if row.passed else "FAIL"
            lines.append(f"  [{mark}] {row.tier}: {row.detail}")
            if not row.passed and row.case_ids:
                lines.append(f"         cases: {', '.join(row.case_ids)}")
        if self.ok and self.already_failing:
            lines.append(f"  (already failing in the baseline, not blocking: {', '.join(self.already_failing)})")
        flaky = self.flaky
        if len(flaky):
            shown = [f"{r.case_id} {r.baseline_passes}/{r.baseline_trials} -> {r.passes}/{r.trials} (p={r.p_value:.2g})"
                     for r in flaky.head(8).itertuples(index=False)]
            lines.append(f"  flaky, not blocking ({len(flaky)}): {', '.join(shown)}{' ...' if len(flaky) > 8 else ''}")
        lines.append("")
        lines.append(f"  {'metric':<26} {'baseline':>9} {'current':>9} {'delta':>8} {'tol':>6}  noise test")
        for row in self.metric_deltas.itertuples(index=False):
            mark = "" if row.passed else "  <- BLOCK"
            lines.append(f"  {row.metric:<26} {format_number(row.baseline):>9} {format_number(row.current):>9} "
                         f"{format_number(row.delta):>8} {row.tolerance:>6.3f}  {row.note}{mark}")
        return "\n".join(lines)

    def to_frame(self) -> pd.DataFrame:
        return self.tiers

    # the record
    def record_section(self) -> dict[str, Any]:
        keep = set(self.blocking_cases) | set(self.already_failing) | set(self.regressed["case_id"]) | \
            set(self.new_failing["case_id"]) | set(self.run.per_case.loc[~self.run.per_case["case_passed"], "case_id"])
        cases = {cid: dict(fingerprint=c.fingerprint, passed=c.passed, fail_reasons=[r.to_dict() for r in c.fail_reasons],
                           answer=c.answer, abstained=c.abstained, citations=c.citations,
                           output_fingerprint=c.output_fingerprint, units={m: list(v) for m, v in c.units.items()},
                           passes=c.pass_count, trials=c.trials)
                 for cid, c in self.baseline.cases.items() if cid in keep}
        trials = self.case_trials[self.case_trials["verdict"] != "steady"]
        return dict(
            baseline=self.baseline.summary(), baseline_metrics={m: list(v) for m, v in self.baseline.metrics.items()},
            baseline_cases=cases, baseline_notes=self.baseline.notes,
            tiers=frame_rows(self.tiers), metric_deltas=frame_rows(self.metric_deltas),
            regressed=frame_rows(self.regressed), new_failing=frame_rows(self.new_failing),
            match=dict(matched=self.match.matched, changed=self.match.changed, new=self.match.new,
                       removed=self.match.removed),
            calibration=clean(self.calibration.record_section()) if self.calibration is not None else None,
            notes=self.notes, case_trials=frame_rows(trials), alpha=self.alpha,
        )

    @classmethod
    def section_problems(cls, s: Mapping[str, Any], prefix: str = "gate") -> list[str]:
        """Every field of a saved section that is missing or of the wrong type (``SECTION``), named by its
        place; ``from_section`` and ``audit_section`` trust the types of a section without any."""
        problems = shape_problems(s, SECTION, prefix)
        if not problems:
            problems += [f"{prefix}.baseline_cases.{cid}.passes is {c['passes']}, more than its {c.get('trials', 1)} "
                         "trial(s)" for cid, c in s["baseline_cases"].items() if c.get("passes", 0) > c.get("trials", 1)]
        return problems

    @classmethod
    def from_section(cls, run: RunResult, s: Mapping[str, Any]) -> GateResult:
        b = s["baseline"]
        cases = {cid: BaselineCase(c["fingerprint"], bool(c["passed"]), [FailReason.from_dict(r) for r in c["fail_reasons"]],
                                   {m: (float(v[0]), float(v[1])) for m, v in c["units"].items()},
                                   c.get("answer"), c.get("abstained"), c.get("citations"), c.get("output_fingerprint"),
                                   c.get("passes"), c.get("trials", 1))
                 for cid, c in s["baseline_cases"].items()}
        trials = b.get("trials", 1)
        for cid in s["match"]["matched"] + s["match"]["changed"]:  # cases the record did not need in full
            same = cid in run.suite and cid not in s["match"]["changed"]  # (a matched case the run lacks: audited)
            cases.setdefault(cid, BaselineCase(run.suite[cid].fingerprint if same else "", True, [], {},
                                               passes=trials, trials=trials))
        baseline = Baseline(
            path=b["path"], dataset_fingerprint=b["dataset_fingerprint"], judge=b.get("judge"),
            metrics={m: (math.nan if v[0] is None else float(v[0]), int(v[1])) for m, v in s["baseline_metrics"].items()},
            cases=cases, green=bool(b.get("green", True)), allowed_failing=bool(b.get("allowed_failing", False)),
            created=b.get("created"), git_commit=b.get("git_commit"),
            adapter=b.get("adapter"), notes=list(s.get("baseline_notes") or []),
            corpus_fingerprint=b.get("corpus_fingerprint"), custom=dict(b.get("custom") or {}), trials=trials)
        calibration = None
        if s.get("calibration"):
            calibration = CalibrationResult.from_section(run, s["calibration"])
        m = s["match"]
        return cls(run=run, baseline=baseline, tiers=frame(s["tiers"], TIER_SCHEMA),
                   metric_deltas=frame(s["metric_deltas"], DELTA_SCHEMA), regressed=frame(s["regressed"], REGRESSED_SCHEMA),
                   new_failing=frame(s["new_failing"], NEW_SCHEMA),
                   match=CaseMatch(list(m["matched"]), list(m["changed"]), list(m["new"]), list(m["removed"])),
                   calibration=calibration, notes=list(s.get("notes") or []),
                   case_trials=frame(s.get("case_trials") or [], CASE_TRIALS_SCHEMA), alpha=s.get("alpha", DEFAULT_ALPHA))

    def audit_section(self, audit: Audit, s: Mapping[str, Any], prefix: str = "gate") -> None:
        """Decide the gate again from the run's cases and the baseline as the record embeds it (its
        metrics, the cases it kept, which cases were matched, changed and new), with the tolerances its
        metric_deltas name, and note where the section disagrees: the match, every metric movement and
        its pass, the regressed and new failing cases, and every tier's pass and cases.

        Not decided again: the noise test columns (the record keeps baseline units only for the cases
        that matter, so the pairs behind the test are not all there; the test informs, it does not
        decide), the cases ``removed`` since the baseline (listed by the baseline alone), and whether
        the embedded baseline is the baseline file it names."""
        if self.calibration is not None:
            self.calibration.audit_section(audit, s["calibration"], prefix=f"{prefix}.calibration")
        tolerances = _recorded_tolerances(audit, s["metric_deltas"], prefix, gated(self.run.metrics))
        if tolerances is None:
            return
        match = match_cases(self.run, self.baseline)
        for name in ("matched", "changed", "new"):
            audit.same(f"{prefix}.match.{name}", s["match"][name], getattr(match, name))
        still_there = [c for c in self.match.removed if c in self.run.suite]
        if still_there:
            audit.problem(f"{prefix}.match.removed names case(s) the run has: {', '.join(still_there)}")
        board = self.run.scoreboard.set_index("metric")
        by_name = {m.name: m for m in self.run.metrics}
        case_level, metric_level = levels(self.run, self.baseline, match, tolerances, self.alpha)
        stored_p = [row.get("p_value") if metric_level is not None else None for row in s["metric_deltas"]]
        moves = [movement(by_name[name], tol, self.baseline, board, p_worse=p, level=metric_level)
                 for (name, tol), p in zip(tolerances.items(), stored_p)]
        for j, (row, move) in enumerate(zip(s["metric_deltas"], moves)):
            for column in MOVEMENT[1:]:
                audit.same(f"{prefix}.metric_deltas[{j}].{column} ({move['metric']})", row.get(column), move[column])
        trials = case_trials(self.run, self.baseline, match.matched, case_level)
        tiers, regressed, new_failing = decide(self.run, self.baseline, match,
                                               frame(moves, {k: DELTA_SCHEMA[k] for k in MOVEMENT}), trials)
        if "case_trials" in s:  # the flaky, broken and regressed cases, decided again from the trial counts
            shown = ("case_id", "baseline_passes", "baseline_trials", "passes", "trials", "verdict")
            kept = trials[trials["verdict"] != "steady"]
            audit.same(f"{prefix}.case_trials", [[row.get(c) for c in shown] for row in s["case_trials"]],
                       [list(r) for r in zip(*(kept[c].tolist() for c in shown))])
        for name, stored, computed, columns in (
                ("regressed", s["regressed"], regressed, ("case_id", "baseline_state", "current_state")),
                ("new_failing", s["new_failing"], new_failing, ("case_id", "status", "baseline_state"))):
            audit.same(f"{prefix}.{name}", [[row.get(c) for c in columns] for row in stored],
                       [list(r) for r in zip(*(computed[c].tolist() for c in columns))])
        audit.same(f"{prefix}.tiers' rules", [t.get("rule") for t in s["tiers"]], tiers["rule"].tolist())
        if not audit.same(f"{prefix}.tiers", [t.get("tier") for t in s["tiers"]], tiers["tier"].tolist()):
            return
        # the baseline cases the record did not keep: none of them was named by a tier (those are kept)
        unkept = (set(match.matched) | set(match.changed)) - set(s["baseline_cases"])
        for j, (stored, row) in enumerate(zip(s["tiers"], tiers.to_dict("records"))):
            audit.same(f"{prefix}.tiers[{j}].passed", stored.get("passed"), row["passed"])
            audit.same(f"{prefix}.tiers[{j}].case_ids", stored.get("case_ids"),
                       [c for c in row["case_ids"] if c not in unkept])


def _recorded_tolerances(audit: Audit, rows: list[Any], prefix: str,
                         defaults: Mapping[str, float]) -> dict[str, float] | None:
    """The tolerances a gate record was decided with (one per gated metric), or None when they are not."""
    tolerances: dict[str, float] = {}
    found = len(audit.problems)
    for j, row in enumerate(rows):
        name, tol = row.get("metric"), row.get("tolerance")
        if name not in defaults or name in tolerances:
            audit.problem(f"{prefix}.metric_deltas[{j}] names {name!r}: not a gated metric, or named twice")
        elif isinstance(tol, bool) or not isinstance(tol, (int, float)) or not math.isfinite(tol) or tol < 0:
            audit.problem(f"{prefix}.metric_deltas[{j}].tolerance ({name}) is {tol!r}, not a finite number >= 0")
        else:
            tolerances[name] = float(tol)
    missing = [m for m in defaults if m not in tolerances]
    if missing:
        audit.problem(f"{prefix}.metric_deltas has no row for {', '.join(missing)}")
    return None if len(audit.problems) > found else tolerances


def _regression_detail(regressed: pd.DataFrame, trials: pd.DataFrame, match: CaseMatch) -> str:
    flaky = int((trials["verdict"] == "flaky").sum())
    tail = f"; {flaky} flaky, not blocking" if flaky else ""
    if len(regressed):
        return f"{len(regressed)} previously passing case(s) now fail{tail}"
    return f"{len(match.matched)} matched case(s), none regressed{tail}"


def levels(run: RunResult, baseline: Baseline, match: CaseMatch, tolerances: Mapping[str, float],
           alpha: float) -> tuple[float, float | None]:
    """(the cases' share of alpha, each gated metric's level or None). With one trial on both sides the
    gate decides as before trials (the tolerances alone; a case regresses when it passed and fails now)
    and alpha is not used. Otherwise alpha is split in two: half for the cases (``case_trials``), half
    for the gated metrics, Bonferroni over them, so an unchanged system is blocked by the regression
    test or a metric with a chance of at most alpha."""
    if one_trial_each(run, baseline, match.matched):
        return alpha, None
    return alpha / 2, alpha / 2 / max(1, len(tolerances))


def gate(run: RunResult, baseline: Baseline, tolerances: Mapping[str, float] | None = None, *,
         calibration: Any = None, alpha: float = DEFAULT_ALPHA) -> GateResult:
    """Compare a RunResult with a Baseline. Pure: no I/O."""
    tolerances = dict(gated(run.metrics) if tolerances is None else tolerances)
    match = match_cases(run, baseline)
    case_level, metric_level = levels(run, baseline, match, tolerances, alpha)
    deltas = metric_movements(run, baseline, tolerances, match.matched, level=metric_level)
    trials = case_trials(run, baseline, match.matched, case_level)
    tiers, regressed, new_failing = decide(run, baseline, match, deltas, trials)
    return GateResult(run=run, baseline=baseline, tiers=tiers, metric_deltas=deltas,
                      regressed=regressed, new_failing=new_failing, match=match, calibration=calibration,
                      case_trials=trials, alpha=alpha)


def decide(run: RunResult, baseline: Baseline, match: CaseMatch, deltas: pd.DataFrame,
           trials: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(tiers, regressed, new_failing): the four tiers from the matched cases, their trials
    (``case_trials``) and the metric movements."""
    regressed = regressions(run, trials)
    new_failing = new_cases(run, baseline, match)
    n_new = len(match.new) + len(match.changed)
    tiers = [
        tier_one(run),
        metrics_tier(run, baseline, deltas),
        tier_row(2, "no passing case regresses", regressed.empty, _regression_detail(regressed, trials, match),
                 regressed["case_id"].tolist()),
        tier_row(2, "new cases pass", new_failing.empty,
                 f"{len(new_failing)} of {n_new} new or changed case(s) fail" if len(new_failing)
                 else f"{n_new} new or changed case(s), all pass", new_failing["case_id"].tolist()),
    ]
    return frame(tiers, TIER_SCHEMA), regressed, new_failing
