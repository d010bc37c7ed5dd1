"""The baseline a gate compares against: the last green run, as the outcomes and answers that matter.

``baseline_from_run`` takes them from a run (reading the run's record file is the record layer's job:
``qaeval.record.read.read_baseline``).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from qaeval.core.errors import BaselineError
from qaeval.core.frames import clean
from qaeval.scoring.outcomes import FailReason

if TYPE_CHECKING:
    from qaeval.scoring.result import RunResult


@dataclass(frozen=True)
class BaselineCase:
    fingerprint: str
    passed: bool
    fail_reasons: list[FailReason]
    units: dict[str, tuple[float, float]]
    answer: str | None = None
    abstained: bool | None = None
    citations: list[dict[str, str]] | None = None
    output_fingerprint: str | None = None
    passes: int | None = None  # trials that passed (None: as ``passed``, one trial)
    trials: int = 1
    # per metric, each trial's (num, den) that the trials test may use (None: ``units``, one trial); an
    # adaptive baseline keeps its first trial only, the one every case had whatever it showed
    trial_units: dict[str, list[tuple[float, float]]] | None = None
    trial_passed: list[bool] | None = None  # whether each of those trials passed
    # trials that passed and, answerable, were judged fully correct: the pass count of a gate that gates
    # answer correctness (None: not known, as in a gate record written before; ``pass_count`` stands in)
    right_passes: int | None = None
    # what each trial cited, trial 0 first (``trial_citing``), when the baseline ran several (None: one
    # trial, or not kept, as in a gate record): ``answer`` and ``citations`` are trial 0's alone
    trial_cited: tuple[str, ...] | None = None

    @property
    def pass_count(self) -> int:
        return self.passes if self.passes is not None else int(self.passed)

    def gate_passes(self, correctness: bool) -> int:
        """The trials that passed as a gate counts them: with ``correctness``, a right answer too."""
        if correctness and self.right_passes is not None:
            return self.right_passes
        return self.pass_count


@dataclass(frozen=True)
class SettledRule:
    """Callable: whether a case whose first trial passed is settled against a baseline's pass counts
    (every baseline trial passed, or the case is new). ``digest`` names those counts, so the gate can
    tell whether a run's trials were chosen against the baseline it is gated against."""

    counts: Mapping[str, tuple[int, int]]

    def __call__(self, case_id: str) -> bool:
        passes, trials = self.counts.get(case_id, (1, 1))
        return passes == trials

    @property
    def digest(self) -> str:
        text = json.dumps(sorted((cid, list(c)) for cid, c in self.counts.items()), separators=(",", ":"))
        return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class Baseline:
    """What the gate compares against: the last green run, from its record."""

    path: str
    dataset_fingerprint: str
    judge: dict[str, Any] | None
    metrics: dict[str, tuple[float, int]]
    cases: dict[str, BaselineCase]
    green: bool = True
    allowed_failing: bool = False
    created: str | None = None
    git_commit: str | None = None
    adapter: str | None = None
    notes: list[str] = field(default_factory=list)
    corpus_fingerprint: str | None = None  # sha256 of the frozen corpus the baseline ran on, if any
    custom: dict[str, str] = field(default_factory=dict)  # registered check or metric -> sha256 of its code
    trials: int = 1  # each case ran this many times
    adapter_code: str | None = None  # a digest of the adapter's source files (None: a record written before)

    def outcomes(self, metric: str) -> dict[str, tuple[float, float]]:
        return {cid: c.units[metric] for cid, c in self.cases.items() if metric in c.units and c.units[metric][1]}

    def trial_outcomes(self, metric: str) -> dict[str, tuple[tuple[float, ...], tuple[bool, ...]]]:
        """Per case, (each trial's share of ``metric``, num / den, NaN for a trial it does not count for;
        whether each trial passed): what the gate's trials test permutes."""
        out = {}
        for cid, case in self.cases.items():
            if case.trial_units is None:  # one trial
                pairs, passed = [case.units.get(metric, (0.0, 0.0))], [case.passed]
            else:
                pairs, passed = case.trial_units.get(metric, []), case.trial_passed or []
            if len(pairs) == len(passed) and any(den for _, den in pairs):
                out[cid] = (tuple(num / den if den else math.nan for num, den in pairs), tuple(passed))
        return out

    def settled(self) -> SettledRule:
        """The rule ``--adaptive`` uses against this baseline: a case whose first trial passed needs no
        more when it passed every baseline trial (or is new)."""
        return SettledRule({cid: (c.pass_count, c.trials) for cid, c in self.cases.items()})

    def summary(self) -> dict[str, Any]:
        return clean(
            dict(
                path=self.path,
                dataset_fingerprint=self.dataset_fingerprint,
                judge=self.judge,
                green=self.green,
                allowed_failing=self.allowed_failing,
                created=self.created,
                git_commit=self.git_commit,
                adapter=self.adapter,
                corpus_fingerprint=self.corpus_fingerprint,
            )
            | ({"adapter_code": self.adapter_code} if self.adapter_code else {})
            | ({"custom": self.custom} if self.custom else {})
            | ({"trials": self.trials} if self.trials > 1 else {})
        )


def check_shares_cases(baseline: Baseline, case_ids: Collection[str]) -> None:
    """Refuse a baseline that shares no case id with the suite: one of another golden set (one that shares
    fewer than half is gated, with a note: ``GateResult.all_notes``)."""
    if not baseline.cases or not case_ids or any(c in baseline.cases for c in case_ids):
        return
    ours, theirs = sorted(case_ids)[:3], sorted(baseline.cases)[:3]
    raise BaselineError(
        f"a baseline of another golden set: it shares no case id with the {len(case_ids)} case(s) gated "
        f"({', '.join(ours)}{' ...' if len(case_ids) > 3 else ''}); it holds {len(baseline.cases)} "
        f"({', '.join(theirs)}{' ...' if len(baseline.cases) > 3 else ''}). Write a baseline of this golden set "
        "with `qaeval baseline --data DIR --out FILE`",
        file=baseline.path,
    )


CORRECTNESS = "answer_correctness"  # the metric a gate may add to each case's pass (``right_counts``)


def right_counts(run: RunResult) -> dict[str, tuple[int, int]]:
    """Per case, (trials that passed with an answer judged fully correct, or no answer due; trials that
    passed but were answered wrongly)."""
    counts: dict[str, tuple[int, int]] = {}
    for trial in run.runs:
        units = trial.units
        right = {
            cid: not den or num >= den
            for cid, num, den in zip(
                units["case_id"], units[f"{CORRECTNESS}__num"].tolist(), units[f"{CORRECTNESS}__den"].tolist()
            )
        }
        for cid, ok in zip(trial.per_case["case_id"], trial.per_case["case_passed"]):
            good, wrong = counts.get(cid, (0, 0))
            counts[cid] = (good + bool(ok and right[cid]), wrong + bool(ok and not right[cid]))
    return counts


def baseline_from_run(run: RunResult, path: str, data: Mapping[str, Any] | None = None) -> Baseline:
    board = run.scoreboard.set_index("metric")
    units = run.units.set_index("case_id")
    names = [m.name for m in run.metrics]
    trial_runs = run.trial_runs[:1] if run.meta.adaptive else run.trial_runs
    per_trial = trial_units_of(trial_runs, names) if trial_runs else None
    passed: dict[str, list[bool]] = {}
    for trial in trial_runs:
        for cid, ok in zip(trial.per_case["case_id"], trial.per_case["case_passed"]):
            passed.setdefault(cid, []).append(bool(ok))
    right = right_counts(run)
    cited = trial_citing(run) if run.trials > 1 else {}
    cases = {}
    for row in run.per_case.to_dict("records"):
        cid = row["case_id"]
        cases[cid] = BaselineCase(
            fingerprint=run.suite[cid].fingerprint,
            passed=bool(row["case_passed"]),
            fail_reasons=list(row["fail_reasons"]),
            units={m: (float(units.at[cid, f"{m}__num"]), float(units.at[cid, f"{m}__den"])) for m in names},
            answer=row["answer"],
            abstained=bool(row["abstained"]),
            citations=list(row["citations"]),
            output_fingerprint=row["output_fingerprint"],
            passes=int(row["passes"]),
            trials=int(row["trials"]),
            trial_units=per_trial.get(cid, {}) if per_trial is not None else None,
            trial_passed=passed.get(cid, []) if per_trial is not None else None,
            right_passes=right[cid][0] if cid in right else None,
            trial_cited=tuple(cited[cid]) if cid in cited else None,
        )
    data = data or {}
    return Baseline(
        path=path,
        dataset_fingerprint=run.dataset_fingerprint,
        judge=run.meta.judge.to_dict(),
        metrics={m: (float(board.at[m, "value"]), int(board.at[m, "n"])) for m in names},
        cases=cases,
        green=bool(data.get("green", run.ok)),
        allowed_failing=bool(data.get("allowed_failing", False)),
        created=run.meta.created,
        git_commit=run.meta.git_commit,
        adapter=run.meta.adapter,
        adapter_code=run.meta.adapter_code,
        corpus_fingerprint=run.suite.corpus_fingerprint,
        custom=run.registered.hashes(),
        trials=run.trials,
    )


def trial_units_of(runs: Any, names: list[str]) -> dict[str, dict[str, list[tuple[float, float]]]]:
    """Per case, per metric, the (num, den) of each of ``runs`` (trial runs) that holds the case."""
    out: dict[str, dict[str, list[tuple[float, float]]]] = {}
    for trial in runs:
        present = [m for m in names if f"{m}__num" in trial.units.columns]  # not pass_hat_k: over trials
        for row in trial.units.to_dict("records"):
            case = out.setdefault(row["case_id"], {})
            for m in present:
                case.setdefault(m, []).append((float(row[f"{m}__num"]), float(row[f"{m}__den"])))
    return out


def trial_citing(run: RunResult) -> dict[str, list[str]]:
    """Per case, what each of the run's trials cited, trial 0 first, in words: the passage ids it cited
    ("hours, history"), "no citation", "abstained" or "adapter error"."""
    out: dict[str, list[str]] = {}
    for trial in run.runs:
        o = trial.outputs
        for cid, cites, abstained, error in zip(o["case_id"], o["citations"], o["abstained"], o["error"]):
            if isinstance(error, str):
                said = "adapter error"
            elif abstained:
                said = "abstained"
            else:
                said = ", ".join(dict.fromkeys(c["source_id"] for c in cites)) or "no citation"
            out.setdefault(cid, []).append(said)
    return out


def by_trial(cited: Sequence[str]) -> str:
    """What a case's trials cited (``trial_citing``), each distinct citation once with the trials that gave
    it: "hours (trials 1, 3, 5), history (trials 2, 4)"; "hours in all 5 trials"; one trial: "hours"."""
    if len(cited) == 1:
        return cited[0]
    groups: dict[str, list[int]] = {}
    for n, said in enumerate(cited, start=1):
        groups.setdefault(said, []).append(n)
    if len(groups) == 1:
        return f"{cited[0]} in all {len(cited)} trials"
    return ", ".join(
        f"{said} (trial{'s' if len(at) > 1 else ''} {', '.join(map(str, at))})" for said, at in groups.items()
    )
