"""A run's result: ``RunResult`` (every frame one evaluation produced, and what it means) and
``RunMeta`` (how the run was made). The verdicts' results (``GateResult``, ``CalibrationResult``,
``DriftResult``, ``Comparison``, ``MonitorResult``) hold one; all share ``qaeval.core.results.Result``."""

from __future__ import annotations

import platform
import subprocess
from collections.abc import Collection
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

import pandas as pd

from qaeval.core.errors import TierOneFailed
from qaeval.core.frames import RowsByKey, frame, text_frame
from qaeval.core.params import DEFAULT_K
from qaeval.core.results import Result
from qaeval.core.text import one_line
from qaeval.data.cases import Suite
from qaeval.scoring import checks as layer1
from qaeval.scoring.custom import CUSTOM_SCHEMA, Registered
from qaeval.scoring.judge import JudgeConfig
from qaeval.scoring.metrics import METRICS, Metric, format_scoreboard
from qaeval.scoring.outcomes import PASS_MEANS, passing_line, reasons_text
from qaeval.scoring.retrieval import unknown_ids_note


def git_commit(cwd: str | None = None) -> str | None:
    """The checked-out commit of the working directory, when it is a git checkout."""
    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else None


@dataclass(frozen=True)
class RunMeta:
    """How a run was made: what was called, how, on what, when."""

    adapter: str
    judge: JudgeConfig
    isolation: str = "process"
    concurrency: int = 1
    executor: str | None = None
    k: int = DEFAULT_K
    trials: int = 1  # each case was run this many times (``qaeval.scoring.trials``)
    pass_k: int | None = None  # the k of pass_hat_k and pass_at_k, with several trials
    adaptive: bool = False  # the trials after the first went only to the cases it did not settle
    adaptive_baseline: str | None = None  # adaptive against a baseline: the digest of its pass counts
    adapter_code: str | None = None  # a digest of the adapter's source files (qaeval.system.identity.code_digest)
    timeout: float | None = None
    data: str = ""
    created: str | None = None
    git_commit: str | None = None
    qaeval_version: str = ""
    python: str = ""

    @property
    def boundary_enforced(self) -> bool:
        return self.isolation != "none"

    @classmethod
    def now(cls, **fields: Any) -> RunMeta:
        from qaeval import __version__

        return cls(
            created=datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
            git_commit=git_commit(),
            qaeval_version=__version__,
            python=platform.python_version(),
            **fields,
        )


@dataclass(repr=False)
class RunResult(Result):
    """Everything one evaluation produced. Every attribute that is a table is a DataFrame.

    ``ok`` (verdict GREEN) when tier 1 holds: every deterministic check green and no adapter error.
    ``qaeval run`` still exits 0 when it does not: a run reports, the gate decides.

    Attributes:
        suite: The golden cases the run answered.
        meta: How the run was made (``RunMeta``): adapter, judge, isolation, k, trials, when.
        outputs: What the system returned, one row per case (the columns of ``run_suite``).
        checks: The layer-1 deterministic checks, one row per case and check (``passed``, ``reason``).
        retrieval: Retrieval against the gold passages, one row per case (recall, precision, MRR
            and nDCG at k).
        verdicts: The judge's verdicts, one row per case and axis (and per citation).
        trajectory: Multi-step cases' checkpoints, one row per case and checkpoint.
        per_case: One row per case (per trial with several): passed or not and why (``fail_reasons``,
            a list of ``FailReason``), with the question, answer and gold answer.
        units: Each metric's numerator and denominator per case: what the scoreboard sums.
        scoreboard: One row per metric: its value, 95% interval, n and direction.
        slices: The scoreboard per slice (split, difficulty, adversarial tag).
        labels: The human labels given with ``--labels`` (what PPI estimates use), or None.
        notes: What the run says about itself (unknown ids, a judge that is not trusted, ...).
        custom: The registered checks' and metrics' rows, one per case and name.
        registered: The checks and metrics the run registered, in the order they ran.
        trial_runs: With several trials, every trial's own run (trial 0 first), each scored alone;
            the layer frames above are trial 0's, ``per_case`` and ``units`` hold every trial. Empty
            with one trial.
    """

    suite: Suite
    meta: RunMeta
    outputs: pd.DataFrame
    checks: pd.DataFrame
    retrieval: pd.DataFrame
    verdicts: pd.DataFrame
    trajectory: pd.DataFrame
    per_case: pd.DataFrame
    units: pd.DataFrame
    scoreboard: pd.DataFrame
    slices: pd.DataFrame
    labels: pd.DataFrame | None = None
    notes: list[str] = field(default_factory=list)
    custom: pd.DataFrame = field(default_factory=lambda: frame([], CUSTOM_SCHEMA))
    registered: Registered = Registered()
    trial_runs: tuple[RunResult, ...] = ()

    kind = "run"
    error_type = TierOneFailed
    words = ("GREEN", "RED")

    @property
    def ok(self) -> bool:
        return not self.tier_one_failures

    @property
    def exit_code(self) -> int:
        return 0

    @property
    def metrics(self) -> tuple[Metric, ...]:
        """Every metric of this run: the built-in ones, then a pass rate per registered check, then the
        registered metrics."""
        from qaeval.scoring.trials import trial_metrics

        extra = trial_metrics(self.meta.pass_k or self.trials, adaptive=self.meta.adaptive) if self.trials > 1 else ()
        return METRICS + self.registered.all_metrics() + extra

    @property
    def trials(self) -> int:
        """How many times each case was run."""
        return self.meta.trials

    @property
    def runs(self) -> tuple[RunResult, ...]:
        """Every trial's run, trial 0 first (this run itself with one trial)."""
        return self.trial_runs or (self,)

    def trial_frame(self, layer: str) -> pd.DataFrame:
        """A layer of every trial.

        Args:
            layer: The layer's attribute name (``outputs``, ``checks``, ``verdicts``, ``per_case``...).

        Returns:
            Its rows of every trial, with a ``trial`` column (0 to K - 1) after ``case_id``.
        """
        from qaeval.scoring.trials import trials_frame

        return trials_frame(self, layer)

    @property
    def tier_one_failures(self) -> list[str]:
        """Case ids with an adapter error, a failing deterministic check or a failing tier-1 registered check."""
        pc = self.per_case
        blocked = {
            cid for run in self.runs for cid in run.custom.loc[run.custom["blocks"] & ~run.custom["passed"], "case_id"]
        }
        return [cid for cid, ok in zip(pc["case_id"], pc["deterministic_passed"]) if not ok or cid in blocked]

    @property
    def reason(self) -> str:
        head = self.passing_line()
        bad = self.tier_one_failures
        if bad:
            named = ", ".join(one_line(c) for c in bad[:6])  # a case id is the user's text: one line, always
            return f"tier 1 fails on {len(bad)} case(s): {named}{' ...' if len(bad) > 6 else ''}; {head}"
        kinds = "deterministic and tier-1 checks" if self.registered.checks else "deterministic checks"
        return f"{kinds} green, no adapter error; {head}"

    def passing_line(self, gated: Collection[str] | None = None, aside: str = "") -> str:
        """How many cases pass, and what that means (``outcomes.passing_line``).

        Args:
            gated: The metrics a gate gates (None: the run's own tolerances).
            aside: Text to add at the end.

        Returns:
            One line, such as ``10 of 15 cases pass; ...``.
        """
        return passing_line(self.per_case, self.metrics, gated, aside)

    # convenience views
    @property
    def adapter(self) -> str:
        return self.meta.adapter

    @property
    def judge_config(self) -> JudgeConfig:
        return self.meta.judge

    @property
    def k(self) -> int:
        return self.meta.k

    @property
    def cases(self) -> pd.DataFrame:
        return self.suite.to_frame()

    @property
    def dataset_fingerprint(self) -> str:
        return self.suite.fingerprint

    def metric(self, name: str) -> float:
        return float(self.scoreboard.set_index("metric").at[name, "value"])

    @property
    def adapter_errors(self) -> int:
        return sum(int(run.outputs["error"].notna().sum()) for run in self.runs)

    @property
    def judge_usage(self) -> dict[str, int]:
        """Judge cost of this run: verdict calls (one per answered case), how many the cache answered,
        how many failed, and the prompt and completion tokens spent (cache hits spend none)."""
        per_call = pd.concat([run.verdicts.drop_duplicates("case_id") for run in self.runs], ignore_index=True)
        cached = per_call["cached"].astype(bool)
        spent = per_call[~cached]
        return dict(
            calls=int(len(per_call)),
            cached=int(cached.sum()),
            errors=int(per_call["error"].notna().sum()),
            prompt_tokens=int(spent["prompt_tokens"].fillna(0).sum()),
            completion_tokens=int(spent["completion_tokens"].fillna(0).sum()),
        )

    def failing_cases(self) -> pd.DataFrame:
        """Cases that did not pass: why, the answer beside the gold answer and the cited sources' text.
        Shown in full (wrapped, not cut) in a notebook.

        Returns:
            One row per failing case: case_id, why, answer, gold_answer, cited.
        """
        failing = self.per_case[~self.per_case["case_passed"]]
        outs = RowsByKey(self.outputs)
        by_key = {
            (c.id, pid): text
            for c in self.suite
            if c.id in set(failing["case_id"])
            for pid, text in layer1.case_bodies(c, outs[c.id], self.suite.corpus).items()
        }
        rows = [
            dict(
                case_id=r["case_id"],
                why=reasons_text(r["fail_reasons"]),
                answer="(abstained)" if r["abstained"] else r["answer"],
                gold_answer=r["gold_answer"] if r["gold_answer"] is not None else "(must abstain)",
                cited="\n".join(
                    f"[{c['source_id']}] {by_key.get((r['case_id'], c['source_id']), '(not in the fixture)')}"
                    for c in r["citations"]
                ),
            )
            for r in failing.to_dict("records")
        ]
        return text_frame(
            frame(rows, {"case_id": "text", "why": "text", "answer": "text", "gold_answer": "text", "cited": "text"}),
            empty="No case fails.",
        )

    def summary_text(self) -> str:
        usage = self.judge_usage
        lines = [f"qaeval run: {len(self.suite)} cases from {self.suite.root}  adapter={self.adapter}"]
        if not self.meta.boundary_enforced:
            lines.append("WARNING: isolation none: the boundary was NOT enforced (the adapter ran inside the harness)")
        lines += [
            f"judge: {self.judge_config.label()}",
            "",
            format_scoreboard(self.scoreboard),
            "",
            f"TIER 1: {self.verdict}   {self.reason}"
            + (f"   adapter errors: {self.adapter_errors}" if self.adapter_errors else ""),
            f"  ({PASS_MEANS})",
            *self._trial_lines(),
            *self._failing_lines(),
            f"judge calls: {usage['calls']} ({usage['cached']} from cache, {usage['errors']} errors), "
            f"tokens spent: {usage['prompt_tokens']} prompt + {usage['completion_tokens']} completion",
        ]
        lines += [f"note: {n}" for n in [*self.notes, *unknown_ids_note(self.suite, self.outputs)]]
        return "\n".join(lines)

    SHOWN_FAILING = 5

    def _trial_lines(self) -> list[str]:
        """With several trials: how many, the flaky cases, and what each case's passing means."""
        if self.trials == 1:
            return []
        pc = self.per_case
        flaky_rows = pc.loc[pc["flaky"].astype(bool)]
        flaky = flaky_rows["case_id"].tolist()
        shown = ", ".join(f"{cid} {p}/{self.trials}" for cid, p in zip(flaky[:6], flaky_rows["passes"].tolist()))
        calls = int(pc["trials"].sum())
        how = (
            f"up to {self.trials} per case (adaptive: {calls} system calls of {self.trials * len(pc)})"
            if self.meta.adaptive
            else f"{self.trials} per case ({calls} system calls)"
        )
        return [
            f"trials: {how}; a case passes when every trial passes; flaky (some trials pass): {len(flaky)}"
            + (f": {shown}" if flaky else "")
            + (" ..." if len(flaky) > 6 else "")
        ]

    def _failing_lines(self) -> list[str]:
        """The first failing cases and why, for the terminal (the rest are in the record and the report)."""
        failing = self.per_case.loc[~self.per_case["case_passed"].astype(bool)]
        first = failing.head(self.SHOWN_FAILING)
        whys = [reasons_text(reasons) for reasons in first["fail_reasons"].tolist()]
        lines = [
            f"  {one_line(cid)}: {one_line(why if len(why) <= 160 else why[:157] + '...')}"
            for cid, why in zip(first["case_id"].tolist(), whys)
        ]
        if len(failing) > self.SHOWN_FAILING:
            lines.append(
                f"  ... and {len(failing) - self.SHOWN_FAILING} more, every one in the HTML report (--html "
                "PATH, or qaeval report RECORD --html PATH) and in .failing_cases()"
            )
        return lines

    def with_labels(self, labels: pd.DataFrame | None) -> RunResult:
        """This run with prediction-powered estimates from human labels on its scoreboard.

        Args:
            labels: Keyed human labels (``qaeval.data.labels``), or None.

        Returns:
            A copy of the run with PPI columns on its scoreboard (this run itself when ``labels`` is None).
        """
        from qaeval.scoring.ppi import apply_ppi

        if labels is None:
            return self
        board, notes = apply_ppi(self.scoreboard, self.units, self.per_case, labels)
        return replace(self, scoreboard=board, labels=labels, notes=self.notes + notes)
