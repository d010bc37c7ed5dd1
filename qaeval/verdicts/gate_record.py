"""How a gate result is kept in a run record and read back: the record's ``gate`` section, its shape
(``SECTION``), and the audit that decides again from the record's own frames whether the stored verdict
follows from them (``GateRecord.audit_section``)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

import pandas as pd

from qaeval.core.audit import Audit
from qaeval.core.frames import (
    Each,
    Fields,
    Fixed,
    Keyed,
    Maybe,
    Valid,
    clean,
    frame,
    frame_rows,
    rows_of,
    shape_problems,
)
from qaeval.scoring.outcomes import REASON, FailReason
from qaeval.scoring.result import RunResult
from qaeval.verdicts.baseline import CORRECTNESS, Baseline, BaselineCase
from qaeval.verdicts.calibration import SECTION as CALIBRATION_SECTION
from qaeval.verdicts.calibration import CalibrationResult
from qaeval.verdicts.tiers import (
    CASE_TRIALS_SCHEMA,
    DELTA_SCHEMA,
    MOVEMENT,
    NEW_SCHEMA,
    REGRESSED_SCHEMA,
    TIER_RULES,
    TIER_SCHEMA,
    CaseMatch,
    CasePasses,
    case_trials,
    decide,
    levels,
    match_cases,
    metric_movements,
    one_trial_each,
)
from qaeval.verdicts.tolerances import gated, opt_in, trusted_axes

DEFAULT_ALPHA = 0.05


def _fields(required: dict[str, Any], optional: dict[str, Any]) -> Fields:
    return Fields(required | optional, optional=tuple(optional))


COUNT, TRIALS = Valid("int", lambda n: 0 <= n <= 100, "0 to 100"), Valid("int", lambda n: 1 <= n <= 100, "1 to 100")
BASELINE_CASE = _fields(  # a baseline case a gate record keeps in full ("units": {metric: [num, den]})
    dict(fingerprint="str", passed="bool", fail_reasons=Each(REASON), units=Keyed(Fixed(("number", "number")))),
    dict(
        answer="text",
        abstained="boolean",
        citations=Maybe(Each("dict")),
        output_fingerprint="text",
        passes=COUNT,
        trials=TRIALS,
        right_passes=COUNT,
        # with trials, what the trials test permutes: each trial's [num, den] per metric, and its pass
        trial_units=Keyed(Each(Fixed(("number", "number")))),
        trial_passed=Each("bool"),
    ),
)
SHOWN = ("answer", "abstained", "citations", "output_fingerprint")  # what a reader of a kept case sees


SECTION = Fields(
    dict(  # the gate section of a record, as GateResult.from_section reads it
        baseline=_fields(
            dict(path="str", dataset_fingerprint="str"),
            dict(
                judge="Dict",
                green="bool",
                allowed_failing="bool",
                created="text",
                git_commit="text",
                adapter="text",
                adapter_code="text",
                corpus_fingerprint="text",
                custom=Maybe(Keyed("str")),
                trials=TRIALS,
            ),
        ),
        baseline_metrics=Keyed(Fixed(("float", "int"))),
        baseline_cases=Keyed(BASELINE_CASE),
        baseline_notes=Maybe(Each("str")),
        tiers=rows_of(
            TIER_SCHEMA,
            tier="str",
            case_ids=Each("str"),
            rule=Valid("str", TIER_RULES.__contains__, f"one of {', '.join(TIER_RULES)}"),
        ),
        metric_deltas=rows_of(DELTA_SCHEMA, optional=("min_p",)),
        regressed=rows_of(REGRESSED_SCHEMA),
        new_failing=rows_of(NEW_SCHEMA),
        match=Fields({name: Each("str") for name in ("matched", "changed", "new", "removed")}),
        calibration=Maybe(CALIBRATION_SECTION),
        notes=Maybe(Each("str")),
        case_trials=rows_of(CASE_TRIALS_SCHEMA),
        alpha=Valid("float", lambda a: 0.0001 <= a <= 0.5, "a number from 0.0001 to 0.5, as --alpha takes"),
    ),
    optional=("baseline_notes", "calibration", "notes", "case_trials", "alpha"),
)


def _case_entry(case: BaselineCase, *, shown: bool) -> dict[str, Any]:
    """A baseline case as a gate record keeps it: in full when a reader may look at it (``shown``), else
    what deciding the gate again needs (its fingerprint, outcome, units and, with trials, each trial's)."""
    entry: dict[str, Any] = dict(
        fingerprint=case.fingerprint,
        passed=case.passed,
        fail_reasons=[r.to_dict() for r in case.fail_reasons],
        units={m: list(v) for m, v in case.units.items()},
        passes=case.pass_count,
        trials=case.trials,
    )
    if case.right_passes is not None:
        entry["right_passes"] = case.right_passes
    if shown:
        entry |= {name: getattr(case, name) for name in SHOWN}
    if case.trial_units is not None:
        entry["trial_units"] = {m: [list(u) for u in units] for m, units in case.trial_units.items()}
        entry["trial_passed"] = list(case.trial_passed or [])
    return entry


def _trial_problems(cases: Mapping[str, Any], prefix: str) -> list[str]:
    """Baseline cases whose counts disagree: more passes than trials, or per-trial lists of other lengths."""
    problems = []
    for cid, c in cases.items():
        trials, passed = c.get("trials", 1), c.get("trial_passed")
        if c.get("passes", 0) > trials:
            problems.append(f"{prefix}.baseline_cases.{cid}.passes is {c['passes']}, more than its {trials} trial(s)")
        if c.get("right_passes", 0) > c.get("passes", trials):
            problems.append(f"{prefix}.baseline_cases.{cid}.right_passes is {c['right_passes']}, more than its passes")
        if passed is not None and (len(passed) > trials or sum(passed) > c.get("passes", len(passed))):
            problems.append(f"{prefix}.baseline_cases.{cid}.trial_passed disagrees with its passes and trials")
        if any(len(units) != len(passed or ()) for units in (c.get("trial_units") or {}).values()):
            problems.append(f"{prefix}.baseline_cases.{cid}.trial_units has not one unit for each trial_passed")
    return problems


def _recorded_tolerances(
    audit: Audit, rows: list[Any], prefix: str, defaults: Mapping[str, float], optional: Mapping[str, float]
) -> dict[str, float] | None:
    """The tolerances a gate record was decided with (one per gated metric, and any of ``optional``, the
    metrics gated only when asked for), or None when they are not."""
    tolerances: dict[str, float] = {}
    found = len(audit.problems)
    for j, row in enumerate(rows):
        name, tol = row.get("metric"), row.get("tolerance")
        if (name not in defaults and name not in optional) or name in tolerances:
            audit.problem(f"{prefix}.metric_deltas[{j}] names {name!r}: not a gated metric, or named twice")
        elif isinstance(tol, bool) or not isinstance(tol, (int, float)) or not math.isfinite(tol) or tol < 0:
            audit.problem(f"{prefix}.metric_deltas[{j}].tolerance ({name}) is {tol!r}, not a finite number >= 0")
        else:
            tolerances[name] = float(tol)
    missing = [m for m in defaults if m not in tolerances]
    if missing:
        audit.problem(f"{prefix}.metric_deltas has no row for {', '.join(missing)}")
    return None if len(audit.problems) > found else tolerances


TRIALS_TEST = ("n_paired", "n_moved", "p_value", "distinguishable", "min_p")  # with trials: what decides a metric


def _keeps_every_case(audit: Audit, s: Mapping[str, Any], prefix: str) -> bool:
    """Whether a gate section decided by the trials test keeps every baseline case it names (a record
    written before they were kept does not: its tests cannot be computed again)."""
    missing = [cid for name in ("matched", "changed", "removed") for cid in s["match"][name]]
    missing = [cid for cid in missing if cid not in s["baseline_cases"]]
    if missing:
        audit.problem(
            f"{prefix}.baseline_cases lacks {len(missing)} baseline case(s) it names ({', '.join(missing[:5])}"
            f"{' ...' if len(missing) > 5 else ''}), so its trials tests cannot be computed again "
            "(written by a qaeval that did not keep them: gate again)"
        )
    return not missing


class GateRecord:
    """The record half of ``GateResult``: its section written, checked, read back and audited."""

    # what GateResult holds (declared here for the type checker; the dataclass fields are GateResult's)
    run: RunResult
    baseline: Baseline
    tiers: pd.DataFrame
    metric_deltas: pd.DataFrame
    regressed: pd.DataFrame
    new_failing: pd.DataFrame
    match: CaseMatch
    calibration: Any
    notes: list[str]
    case_trials: pd.DataFrame
    alpha: float

    @property
    def blocking_cases(self) -> list[str]:
        raise NotImplementedError

    @property
    def passes(self) -> CasePasses:
        raise NotImplementedError

    @property
    def already_failing(self) -> list[str]:
        raise NotImplementedError

    # the record
    def record_section(self) -> dict[str, Any]:
        keep = (
            set(self.blocking_cases)
            | set(self.already_failing)
            | set(self.regressed["case_id"])
            | set(self.new_failing["case_id"])
            | set(self.run.per_case.loc[~self.run.per_case["case_passed"], "case_id"])
            | set(self.case_trials.loc[self.case_trials["verdict"] != "steady", "case_id"])
        )
        passes = self.passes
        if passes.correctness:  # a case answered wrongly fails too: the audit needs its baseline in full
            keep |= {c for c in self.run.per_case["case_id"] if not passes.passing(c)}
        # with trials, the tests that decide are computed again on load from every baseline case's trials
        every = not one_trial_each(self.run, self.baseline, self.match.matched)
        cases = {
            cid: _case_entry(c, shown=cid in keep) for cid, c in self.baseline.cases.items() if every or cid in keep
        }
        trials = self.case_trials[self.case_trials["verdict"] != "steady"]
        return dict(
            baseline=self.baseline.summary(),
            baseline_metrics={m: list(v) for m, v in self.baseline.metrics.items()},
            baseline_cases=cases,
            baseline_notes=self.baseline.notes,
            tiers=frame_rows(self.tiers),
            metric_deltas=frame_rows(self.metric_deltas),
            regressed=frame_rows(self.regressed),
            new_failing=frame_rows(self.new_failing),
            match=asdict(self.match),
            calibration=clean(self.calibration.record_section()) if self.calibration is not None else None,
            notes=self.notes,
            case_trials=frame_rows(trials),
            alpha=self.alpha,
        )

    def _audit_opt_in(self, audit: Audit, tolerances: Mapping[str, float], prefix: str) -> None:
        """A metric gated only when asked (answer correctness) has its metric_deltas row exactly when the
        verdict's notes say it is gated, and has it whenever the calibration the record holds trusts the
        judge on its axis: a row taken out of a gate that gated it is not a gate that did not."""
        trusted = trusted_axes(tolerances, self.run.metrics, self.calibration, adaptive=self.run.meta.adaptive)
        for name in opt_in(self.run.metrics):
            if name in trusted and name not in tolerances:
                audit.problem(
                    f"{prefix}.metric_deltas has no row for {name}, which the calibration it holds trusts the "
                    "judge on, so the gate gated it"
                )
            said = any(n.startswith(f"{name} is gated") for n in self.notes)
            if said != (name in tolerances):
                audit.problem(
                    f"{prefix}.notes say {name} is {'' if said else 'not '}gated, and its metric_deltas "
                    f"{'have no' if said else 'have a'} row for it"
                )

    @classmethod
    def section_problems(cls, s: Mapping[str, Any], prefix: str = "gate") -> list[str]:
        """Every field of a saved section that is missing or of the wrong type (``SECTION``), named by its
        place; ``from_section`` and ``audit_section`` trust the types of a section without any."""
        problems = shape_problems(s, SECTION, prefix)
        return problems or _trial_problems(s["baseline_cases"], prefix)

    @classmethod
    def from_section(cls: type[Any], run: RunResult, s: Mapping[str, Any]) -> Any:
        """The result a record's section holds (a ``GateResult``), its frames typed."""
        b = s["baseline"]
        cases = {
            cid: BaselineCase(
                c["fingerprint"],
                bool(c["passed"]),
                [FailReason.from_dict(r) for r in c["fail_reasons"]],
                {m: (float(v[0]), float(v[1])) for m, v in c["units"].items()},
                **{name: c.get(name) for name in (*SHOWN, "passes", "right_passes")},
                trials=c.get("trials", 1),
                trial_units={m: [(float(n), float(d)) for n, d in u] for m, u in c["trial_units"].items()}
                if "trial_units" in c
                else None,
                trial_passed=[bool(p) for p in c["trial_passed"]] if "trial_passed" in c else None,
            )
            for cid, c in s["baseline_cases"].items()
        }
        trials = b.get("trials", 1)
        for cid in s["match"]["matched"] + s["match"]["changed"]:  # cases the record did not need in full
            same = cid in run.suite and cid not in s["match"]["changed"]  # (a matched case the run lacks: audited)
            cases.setdefault(
                cid,
                BaselineCase(
                    run.suite[cid].fingerprint if same else "",
                    True,
                    [],
                    {},
                    passes=trials,
                    trials=trials,
                    right_passes=trials,
                ),
            )
        baseline = Baseline(
            path=b["path"],
            dataset_fingerprint=b["dataset_fingerprint"],
            **{name: b.get(name) for name in ("judge", "created", "git_commit", "adapter", "adapter_code")},
            metrics={
                m: (math.nan if v[0] is None else float(v[0]), int(v[1])) for m, v in s["baseline_metrics"].items()
            },
            cases=cases,
            green=bool(b.get("green", True)),
            allowed_failing=bool(b.get("allowed_failing", False)),
            notes=list(s.get("baseline_notes") or []),
            corpus_fingerprint=b.get("corpus_fingerprint"),
            custom=dict(b.get("custom") or {}),
            trials=trials,
        )
        calibration = None
        if s.get("calibration"):
            calibration = CalibrationResult.from_section(run, s["calibration"])
        m = s["match"]
        return cls(
            run=run,
            baseline=baseline,
            tiers=frame(s["tiers"], TIER_SCHEMA),
            metric_deltas=frame(s["metric_deltas"], DELTA_SCHEMA),
            regressed=frame(s["regressed"], REGRESSED_SCHEMA),
            new_failing=frame(s["new_failing"], NEW_SCHEMA),
            match=CaseMatch(list(m["matched"]), list(m["changed"]), list(m["new"]), list(m["removed"])),
            calibration=calibration,
            notes=list(s.get("notes") or []),
            case_trials=frame(s.get("case_trials") or [], CASE_TRIALS_SCHEMA),
            alpha=s.get("alpha", DEFAULT_ALPHA),
        )

    def audit_section(self, audit: Audit, s: Mapping[str, Any], prefix: str = "gate") -> None:
        """Decide the gate again from the run's cases and the baseline the record embeds, with the
        tolerances its metric_deltas name, and note where the section disagrees: the match, every metric
        movement (with trials its trials test too, from every baseline case's trials the record keeps),
        the regressed and new failing cases, every tier's pass and cases.

        Not decided again: with one trial a side, the noise test (the record keeps baseline units only for
        the cases that matter; that test does not decide), the cases ``removed`` since the baseline, and
        whether the embedded baseline is the file it names."""
        if self.calibration is not None:
            self.calibration.audit_section(audit, s["calibration"], prefix=f"{prefix}.calibration")
        tolerances = _recorded_tolerances(
            audit, s["metric_deltas"], prefix, gated(self.run.metrics), opt_in(self.run.metrics)
        )
        if tolerances is None:
            return
        self._audit_opt_in(audit, tolerances, prefix)
        match = match_cases(self.run, self.baseline)
        for name in ("matched", "changed", "new"):
            audit.same(f"{prefix}.match.{name}", s["match"][name], getattr(match, name))
        still_there = [c for c in self.match.removed if c in self.run.suite]
        if still_there:
            audit.problem(f"{prefix}.match.removed names case(s) the run has: {', '.join(still_there)}")
        case_level, metric_alpha = levels(self.run, self.baseline, match, self.alpha)
        if metric_alpha is not None and not _keeps_every_case(audit, s, prefix):
            return
        deltas = metric_movements(self.run, self.baseline, tolerances, match.matched, alpha=metric_alpha)
        moves = frame_rows(deltas)
        decided = MOVEMENT[1:] + (TRIALS_TEST if metric_alpha is not None else ())
        for j, (row, move) in enumerate(zip(s["metric_deltas"], moves)):
            for column in decided:
                audit.same(f"{prefix}.metric_deltas[{j}].{column} ({move['metric']})", row.get(column), move[column])
        passes = CasePasses.of(self.run, CORRECTNESS in tolerances)
        trials = case_trials(self.run, self.baseline, match.matched, case_level, passes)
        tiers, regressed, new_failing = decide(self.run, self.baseline, match, deltas, trials, passes)
        if "case_trials" in s:  # the flaky, broken and regressed cases, decided again from the trial counts
            shown = ("case_id", "baseline_passes", "baseline_trials", "passes", "trials", "verdict")
            kept = trials[trials["verdict"] != "steady"]
            audit.same(
                f"{prefix}.case_trials",
                [[row.get(c) for c in shown] for row in s["case_trials"]],
                [list(r) for r in zip(*(kept[c].tolist() for c in shown))],
            )
        for name, stored, computed, columns in (
            ("regressed", s["regressed"], regressed, ("case_id", "baseline_state", "current_state")),
            ("new_failing", s["new_failing"], new_failing, ("case_id", "status", "baseline_state")),
        ):
            audit.same(
                f"{prefix}.{name}",
                [[row.get(c) for c in columns] for row in stored],
                [list(r) for r in zip(*(computed[c].tolist() for c in columns))],
            )
        audit.same(f"{prefix}.tiers' rules", [t.get("rule") for t in s["tiers"]], tiers["rule"].tolist())
        if not audit.same(f"{prefix}.tiers", [t.get("tier") for t in s["tiers"]], tiers["tier"].tolist()):
            return
        # the baseline cases the record did not keep: none of them was named by a tier (those are kept)
        unkept = (set(match.matched) | set(match.changed)) - set(s["baseline_cases"])
        for j, (stored, row) in enumerate(zip(s["tiers"], tiers.to_dict("records"))):
            audit.same(f"{prefix}.tiers[{j}].passed", stored.get("passed"), row["passed"])
            audit.same(
                f"{prefix}.tiers[{j}].case_ids", stored.get("case_ids"), [c for c in row["case_ids"] if c not in unkept]
            )
