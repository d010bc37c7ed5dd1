"""The regression gate: PASS or BLOCK for a run against the last green baseline.

Tier 1: every deterministic check green, no adapter error. Tier 2, against the baseline: no gated metric
moves the wrong way past its tolerance, no case that passed regresses, every new or changed case passes
(cases matched by id and fingerprint). With labels the judge is calibrated first; a refused judge blocks
(exit 2). The steps are in ``qaeval.verdicts.tiers``; the statistics with trials (Fisher, Tarone, the
trials test) and what they can detect are in docs/guides/gate.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import pandas as pd

from qaeval.core.errors import GateBlocked, JudgeNotTrusted
from qaeval.core.frames import frame
from qaeval.core.results import Result
from qaeval.core.text import one_line
from qaeval.scoring.metrics import format_number
from qaeval.scoring.outcomes import PASS_MEANS
from qaeval.scoring.result import RunResult
from qaeval.scoring.retrieval import unknown_ids_note
from qaeval.verdicts.baseline import CORRECTNESS, Baseline, check_shares_cases
from qaeval.verdicts.gate_record import DEFAULT_ALPHA, GateRecord
from qaeval.verdicts.tiers import (
    CASE_TRIALS_SCHEMA,
    CaseMatch,
    CasePasses,
    case_trials,
    decide,
    levels,
    match_cases,
    metric_movements,
    metric_outcome,
)
from qaeval.verdicts.tolerances import ADAPTIVE_WHY, gated, opt_in, refuse_adaptive, trusted_axes

JUDGE_METRICS = ("faithfulness_rate", "answer_correctness", "citation_precision")  # read from the judge's verdicts


# --------------------------------------------------------------------------- the result


@dataclass(repr=False)
class GateResult(GateRecord, Result):
    """The gate's verdict and the frames behind it.

    Attributes:
        run: The run that was gated.
        baseline: What it was gated against.
        tiers: One row per tier: ``tier``, ``rule``, ``passed``, ``detail`` and the ``case_ids`` it names.
        metric_deltas: One row per gated metric: baseline and current value, ``delta``, ``tolerance``,
            ``passed``, the counts behind them and the noise test (``p_value``, ``note``).
        regressed: The matched cases that regressed: ``case_id``, ``baseline_state``, ``current_state``,
            ``why``.
        new_failing: The new or changed cases that fail: ``case_id``, ``status``, ``baseline_state``, ``why``.
        match: Which cases matched the baseline, changed, are new, or are gone.
        calibration: The judge's calibration when the gate was given labels, else None.
        notes: What the verdict says beside its tiers (answer correctness gated or not, and why).
        case_trials: Every matched case's trial counts against the baseline's and their verdict
            (``broken``, ``regressed``, ``flaky``, ``steady``).
        alpha: The family-wise error the trials tests were held to.
    """

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
        if self.ok:
            already = self.already_failing
            flaky = [c for c in self.flaky["case_id"] if c not in already]
            asides = [f"{len(already)} fail as they did in the baseline"] if already else []
            asides += [f"{len(flaky)} flaky, not blocking"] if flaky else []
            head = self._passing_line(f" ({', '.join(asides)})" if asides else "")
            return f"deterministic checks green and every tier-2 rule held against the baseline; {head}"
        head = self._passing_line()
        return (
            "failed "
            + "; ".join(
                f"{r.tier} ({len(r.case_ids)} case(s))" if r.case_ids else r.tier
                for r in self.failed_tiers.itertuples(index=False)
            )
            + f"; {head}"
        )

    @property
    def correctness_gated(self) -> bool:
        """Whether this gate held answer correctness to a tolerance, and so counted a wrong answer as a
        case's failure (``tiers.CasePasses``)."""
        return CORRECTNESS in set(self.metric_deltas["metric"])

    @cached_property
    def passes(self) -> CasePasses:
        """How this gate counted each case's passing trials."""
        return CasePasses.of(self.run, self.correctness_gated)

    def _passing_line(self, aside: str = "") -> str:
        if not self.correctness_gated:
            return self.run.passing_line(set(self.metric_deltas["metric"]), aside)
        passes = self.passes
        right = sum(passes.passing(c) for c in self.run.per_case["case_id"])
        return f"{right} of {len(self.run.per_case)} cases pass with a right answer{aside}"

    @property
    def blocking_cases(self) -> list[str]:
        """Every case id named by a failed tier, once, in suite order."""
        named = {c for ids in self.failed_tiers["case_ids"] for c in ids}
        return [c for c in self.run.per_case["case_id"] if c in named]

    @property
    def already_failing(self) -> list[str]:
        """Cases failing now that also failed in the baseline (they do not block; they were not green)."""
        pc = self.run.per_case
        if self.correctness_gated:
            passes = self.passes
            return [
                c
                for c in pc["case_id"]
                if c in self.match.matched
                and not passes.passing(c)
                and passes.baseline(self.baseline, c)[0] < self.baseline.cases[c].trials
            ]
        return [
            c
            for c, ok in zip(pc["case_id"], pc["case_passed"])
            if not ok and c in self.match.matched and not self.baseline.cases[c].passed
        ]

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

    @property
    def adapter_code_changed(self) -> bool:
        """Whether the adapter's source files differ from those the baseline was recorded from (False when
        either side does not know them: a baseline written before records kept them)."""
        b, now = self.baseline.adapter_code, self.run.meta.adapter_code
        return bool(b and now and b != now)

    def differences(self) -> list[str]:
        """What makes this a comparison of different things: another adapter, or the same one whose code
        changed since the baseline (a note: the verdict is the gate's as ever), another judge.

        Returns:
            The first lines of the verdict and of the report, one per difference.
        """
        lines = []
        if not self.adapter_match:
            lines.append(f"adapter differs from the baseline's: {self.baseline.adapter}, now {self.run.meta.adapter}")
        elif self.adapter_code_changed:
            lines.append(
                f"the adapter's code changed since the baseline ({self.run.meta.adapter}: its source files' digest "
                f"{self.baseline.adapter_code}, now {self.run.meta.adapter_code}): what moved may come from that change"
            )
        if not self.judge_match:
            b = self.baseline.judge or {}
            lines.append(
                f"judge differs from the baseline's: {b.get('name')}:{b.get('model')} "
                f"rubric={b.get('prompt_version')}, now {self.run.judge_config.label()}; judge metrics "
                "may move for that reason alone"
            )
        return [one_line(line) for line in lines]  # names from the baseline file, which is the user's

    def all_notes(self) -> list[str]:
        notes = self.differences() + list(self.notes) + list(self.baseline.notes)
        if not self.baseline.green:
            notes.append(
                "the baseline was not green when it was written (--allow-failing): cases that failed "
                "there do not count as regressions"
            )
        shared = len(self.match.matched) + len(self.match.changed)
        if shared * 2 < len(self.run.per_case):
            notes.append(
                f"the baseline shares only {shared} of this suite's {len(self.run.per_case)} case id(s) (it holds "
                f"{len(self.baseline.cases)}): most cases are gated as new, not against the baseline"
            )
        if not self.dataset_match:
            notes.append(
                f"the data differs from the baseline's: {len(self.match.changed)} case(s) changed, "
                f"{len(self.match.new)} new, {len(self.match.removed)} no longer present"
            )
        corpus, base_corpus = self.run.suite.corpus_fingerprint, self.baseline.corpus_fingerprint
        if corpus != base_corpus:
            short = lambda f: f[:12] if f else "none"  # noqa: E731  (a one-line formatter, local to this message)
            notes.append(
                f"the corpus changed since the baseline (fingerprint {short(base_corpus)} -> {short(corpus)}): "
                "retrieval and grounding may move for that reason alone"
            )
        changed = self.run.registered.changes_since(self.baseline.custom)
        if changed:
            notes.append(
                f"the registered checks and metrics changed since the baseline ({', '.join(changed)}): "
                "their outcomes and pass rates have nothing to compare with"
            )
        notes += unknown_ids_note(self.run.suite, self.run.outputs)
        if self.calibration is None:
            judged = [r.metric for r in self.metric_deltas.itertuples(index=False) if r.metric in JUDGE_METRICS]
            notes.append(
                f"the judge ({self.run.judge_config.label()}) was not calibrated against human labels in "
                f"this run (no labels given): {', '.join(judged) or 'its metrics'} gate on its word alone; "
                "calibrate it first (qaeval calibrate, or gate --labels FILE)"
            )
        if not self.run.meta.boundary_enforced:
            notes.append("isolation none: the boundary was not enforced in this run")
        if self.run.trials != self.baseline.trials:
            notes.append(
                f"{self.run.trials} trial(s) per case against a baseline of {self.baseline.trials}"
                + (
                    ": a single baseline draw cannot tell whether a case that fails some trials now was "
                    "flaky before, so such a case is reported as flaky, and blocks only when it fails every "
                    "trial"
                    if self.baseline.trials == 1
                    else ""
                )
            )
        return notes

    def summary_text(self) -> str:
        means = PASS_MEANS + ("; answer correctness is gated, so a right answer too" if self.correctness_gated else "")
        lines = [f"GATE: {self.verdict}   {self.reason}   (baseline {self.baseline.path})", f"  ({means})"]
        notes = self.all_notes()
        lines += [f"note: {n}" for n in notes[: len(self.differences())]]  # what differs from the baseline, first
        if self.calibration is not None:
            lines.append(f"  judge calibration: {self.calibration.verdict} ({self.calibration.reason})")
        lines += [f"note: {n}" for n in notes[len(self.differences()) :]]
        for row in self.tiers.itertuples(index=False):
            mark = "ok  " if row.passed else "FAIL"
            lines.append(f"  [{mark}] {row.tier}: {row.detail}")
            if not row.passed and row.case_ids:
                lines.append(f"         cases: {', '.join(row.case_ids)}")
        if self.ok and self.already_failing:
            lines.append(f"  (already failing in the baseline, not blocking: {', '.join(self.already_failing)})")
        flaky = self.flaky
        if len(flaky):
            shown = [
                f"{r.case_id} {r.baseline_passes}/{r.baseline_trials} -> {r.passes}/{r.trials} (p={r.p_value:.2g})"
                for r in flaky.head(8).itertuples(index=False)
            ]
            lines.append(f"  flaky, not blocking ({len(flaky)}): {', '.join(shown)}{' ...' if len(flaky) > 8 else ''}")
        lines.append("")
        lines.append(f"  {'metric':<26} {'baseline':>9} {'current':>9} {'delta':>8} {'tol':>6}  noise test")
        for row in self.metric_deltas.itertuples(index=False):
            outcome = metric_outcome(row._asdict())
            mark = "  <- BLOCK" if not row.passed else "  (past tolerance, within noise)" if "noise" in outcome else ""
            lines.append(
                f"  {row.metric:<26} {format_number(row.baseline):>9} {format_number(row.current):>9} "
                f"{format_number(row.delta):>8} {row.tolerance:>6.3f}  {row.note}{mark}"
            )
        return "\n".join(lines)

    def to_frame(self) -> pd.DataFrame:
        return self.tiers


def judge_axes_notes(
    run: RunResult, asked: Mapping[str, float], gated_now: Mapping[str, float], calibration: Any
) -> list[str]:
    """What the verdict says of the metrics a gate leans on the judge for only when asked (answer
    correctness): gated, at what tolerance and why, or not gated, why, and how to gate it (said once)."""
    notes, adaptive = [], run.meta.adaptive
    for name in opt_in(run.metrics):
        if name in asked:
            notes.append(f"{name} is gated (tolerance {asked[name]:g}, as asked): a case answered wrongly fails")
        elif name in gated_now:
            notes.append(
                f"{name} is gated (tolerance {gated_now[name]:g}): the calibration trusts the judge on its axis, "
                "so a case answered wrongly fails"
            )
        elif calibration is not None and calibration.ok and adaptive:
            notes.append(f"{name} is not gated although the calibration trusts the judge on its axis: {ADAPTIVE_WHY}")
        elif calibration is not None and calibration.ok:
            notes.append(
                f"{name} is not gated: the calibration did not assess the judge on its axis (add labels there, "
                f"or give it a tolerance: --tolerance {name}=0.05)"
            )
        elif calibration is None:
            notes.append(
                f"{name} is not gated: the judge has not earned it here; gate it with --tolerance {name}=0.05, or "
                f"with --labels FILE holding {name} labels the judge agrees with"
            )
    return notes


def gate(
    run: RunResult,
    baseline: Baseline,
    tolerances: Mapping[str, float] | None = None,
    *,
    calibration: Any = None,
    alpha: float = DEFAULT_ALPHA,
) -> GateResult:
    """Compare a RunResult with a Baseline. Pure: no I/O.

    Args:
        run: the run to gate.
        baseline: what it is gated against (``qaeval.record.read.read_baseline``).
        tolerances: per gated metric, how far it may move the wrong way (default: every metric's own);
            answer correctness is gated when it is named here.
        calibration: the judge's calibration against human labels in this gate, if any: a judge it
            refuses blocks, and a metric gated only when asked (answer correctness) is gated when the
            calibration trusts the judge on its axis.
        alpha: the family-wise error the trials tests are held to.
    """
    check_shares_cases(baseline, run.per_case["case_id"].tolist())
    asked = dict(gated(run.metrics) if tolerances is None else tolerances)
    refuse_adaptive(asked, run.metrics, run.meta.adaptive)
    tolerances = trusted_axes(asked, run.metrics, calibration, adaptive=run.meta.adaptive)
    passes = CasePasses.of(run, CORRECTNESS in tolerances)
    match = match_cases(run, baseline)
    case_level, metric_alpha = levels(run, baseline, match, alpha)
    deltas = metric_movements(run, baseline, tolerances, match.matched, alpha=metric_alpha)
    trials = case_trials(run, baseline, match.matched, case_level, passes)
    tiers, regressed, new_failing = decide(run, baseline, match, deltas, trials, passes)
    return GateResult(
        run=run,
        baseline=baseline,
        tiers=tiers,
        metric_deltas=deltas,
        regressed=regressed,
        new_failing=new_failing,
        match=match,
        calibration=calibration,
        case_trials=trials,
        alpha=alpha,
        notes=judge_axes_notes(run, asked, tolerances, calibration),
    )
