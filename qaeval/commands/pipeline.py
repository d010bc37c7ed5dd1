"""The one place that runs a task: ``evaluate`` asks the system under test for every case (the worker pool,
``qaeval.system.pool``) and scores each output as it comes (``qaeval.scoring.stream``). It sits above both,
so neither imports the other."""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from qaeval.core.settings import ResumeSettings, RunSettings
from qaeval.core.shared import WhileAnyRun
from qaeval.data.cases import Suite
from qaeval.scoring.checks import trial_order
from qaeval.scoring.journal import JournalWriter, Restored, journal_path, read_journal
from qaeval.scoring.judge import JudgeClient, judge_config_of
from qaeval.scoring.result import RunMeta, RunResult
from qaeval.scoring.stream import Stream, streaming
from qaeval.scoring.trials import combine_trials
from qaeval.system.calls import adapter_label
from qaeval.system.identity import adapter_code, code_digest
from qaeval.system.pool import run_suite

# A run allocates millions of small containers that live until it ends; with CPython's default first
# threshold (700) the collector runs over a thousand times on a large suite, walking ever more live objects.
# Collecting every 50,000 allocations costs a fraction of that (benchmarks/bench_phases.py).
RUN_THRESHOLDS = (50_000, 20, 100)


def _raise_thresholds() -> tuple[int, int, int]:
    saved = gc.get_threshold()
    if saved[0] != 0:  # a collector turned off by gc.set_threshold(0) stays off
        gc.set_threshold(*(max(now, run) for now, run in zip(saved, RUN_THRESHOLDS)))
    return saved


# The collector's thresholds raised to ``RUN_THRESHOLDS`` (never lowered) while any run is going; the last
# run to end puts back what there was before the first began.
fewer_collections = WhileAnyRun(_raise_thresholds, lambda saved: gc.set_threshold(*saved))


def run_identity(
    suite: Suite,
    label: str,
    judge: JudgeClient,
    k: int,
    trials: int,
    custom: Any,
    adaptive: bool,
    isolation: str = "process",
    adaptive_baseline: str | None = None,
    *,
    code: dict[str, str] | None = None,
) -> dict[str, Any]:
    """What a journal must match for a run to resume from it (``qaeval.scoring.journal``): outputs made
    without the boundary are never taken into a run that enforces it, adaptive trials chosen against one
    baseline (its digest) not into a run choosing them against another, outputs of one version of the
    adapter's code (``code``, else read for ``label``: ``qaeval.system.identity``) not into a run of another."""
    registered = getattr(custom, "registered", None)
    chosen_by = {"adaptive_baseline": adaptive_baseline} if adaptive and adaptive_baseline is not None else {}
    return chosen_by | dict(
        data=suite.fingerprint,
        corpus=suite.corpus_fingerprint,
        adapter=label,
        adapter_code=adapter_code(label)[0] if code is None else code,
        judge=judge_config_of(judge).to_dict(),
        k=k,
        trials=trials,
        adaptive=adaptive,
        isolation=isolation,
        checks=registered.hashes() if registered is not None else {},
    )


@dataclass
class Collected:
    """Every (case, trial) output of a run by its place (trial * cases + case), and how they came."""

    rows: dict[int, dict[str, Any]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Plan:
    """What a run asks for and how: what ``evaluate`` hands its steps."""

    suite: Suite
    everyone: Suite  # the cases ``trials`` times over, trial by trial: the (case, trial) places
    adapter: Any
    judge: JudgeClient
    settings: RunSettings
    settled: Callable[[str], bool] | None
    meta: RunMeta
    identity: dict[str, Any]  # what a journal must match (empty: no journal)
    weaker: str | None  # why the adapter's identity is weaker than its code (None: it is not)


def evaluate(
    suite: Suite,
    adapter: Any,
    judge: JudgeClient,
    settings: RunSettings | None = None,
    *,
    resume: ResumeSettings | None = None,
    custom: Any = None,
    settled: Callable[[str], bool] | None = None,
) -> RunResult:
    """Run the adapter over the suite ``settings.trials`` times and score every layer of every trial.

    Each output is scored once, as it arrives (``qaeval.scoring.stream``): judged, then through every layer
    and the registered checks; the trials are built from those scores. The garbage collector's thresholds
    are raised for the whole run (``fewer_collections``).

    Args:
        suite: The golden cases (``load_suite``).
        adapter: The system: a ``module:factory`` name, a factory, or an adapter object.
        judge: The judge (``JudgeClient``), such as ``OfflineJudge()``.
        settings: How the system is asked and the run scored (``qaeval.core.settings.RunSettings``: ``k``,
            ``trials``, ``pass_k``, ``adaptive``, ``timeout``, ``startup_timeout``, ``max_reply_mb``,
            ``concurrency``, ``isolation``, ``executor``, ``bootstrap_seed``, ``show_progress``); default:
            the parameter table's defaults.
        resume: The journal kept beside the run's record, and whether to reuse what it holds
            (``ResumeSettings``); default: no journal.
        custom: The registered checks and metrics' runner (``qaeval.host.custom.make_custom``).
        settled: With ``adaptive``, which cases one trial settles (the gate: those the baseline had passing
            every trial); the others get every trial.

    Returns:
        The scored run: its frames, scoreboard and meta.
    """
    settings = settings if settings is not None else RunSettings()
    resume = resume if resume is not None else ResumeSettings()
    with fewer_collections():
        plan = _plan(suite, adapter, judge, settings, custom, settled, resume.journal)
        collected = Collected()
        restored = _resumed(plan, resume, collected) if resume.resume else None
        writer = _journal_writer(resume.journal, plan.identity, restored)
        try:
            runs = _ask(plan, collected, restored, writer, custom)
        finally:
            if writer is not None:
                writer.close()
                collected.notes += writer.notes
        return _combined(runs, settings, collected.notes)


def _plan(
    suite: Suite,
    adapter: Any,
    judge: JudgeClient,
    settings: RunSettings,
    custom: Any,
    settled: Callable[[str], bool] | None,
    journal: str | None,
) -> _Plan:
    """The run's places, its record's meta and its journal's identity; the adapter's files read once."""
    label = adapter_label(adapter)
    chosen = None  # the adaptive rule's digest, which the record and the journal's identity name
    if settings.adaptive:
        chosen = getattr(settled, "digest", "unnamed rule") if settled is not None else None
    isolated = settings.isolation if settings.executor is None else f"executor {settings.executor_name}"
    code, weaker = adapter_code(adapter)
    s = settings
    identity = (
        {}
        if journal is None
        else run_identity(suite, label, judge, s.k, s.trials, custom, s.adaptive, isolated, chosen, code=code)
    )
    meta = RunMeta.now(
        adapter=label,
        judge=judge_config_of(judge),
        isolation=settings.isolation,
        concurrency=settings.concurrency,
        executor=settings.executor_name,
        k=settings.k,
        timeout=settings.timeout,
        data=suite.root,
        adaptive_baseline=chosen,
        adapter_code=code_digest(code),  # a gate notes a change since its baseline
    )
    # each (case, trial) is an independent call: the trials of one case may run on different workers at once
    everyone = Suite(suite.cases * settings.trials, suite.root, suite.corpus)
    return _Plan(suite, everyone, adapter, judge, settings, settled, meta, identity, weaker)


def _combined(runs: list[RunResult], settings: RunSettings, notes: list[str]) -> RunResult:
    """The trials' runs as one result (a single trial's run as it is), the run's notes added."""
    s = settings
    result = (
        runs[0]
        if s.trials == 1
        else combine_trials(
            runs, bootstrap_seed=s.bootstrap_seed, pass_k=s.pass_k, trials=s.trials, adaptive=s.adaptive
        )
    )
    return replace(result, notes=result.notes + notes) if notes else result


def _resumed(plan: _Plan, resume: ResumeSettings, collected: Collected) -> Restored | None:
    """What the journal beside the record holds for this run (None: there is none), its outputs put
    into ``collected``; a note says how far the adapter's identity goes when it is weaker than its code."""
    if resume.journal is None:
        return None
    path = journal_path(resume.journal)
    if not path.exists():
        collected.notes.append(f"nothing to resume: no journal at {path}")
        return None
    ids = [c.id for c in plan.everyone]
    restored = read_journal(path, plan.identity, ids, keep_errors=resume.keep_errors)
    collected.rows.update(restored.outputs)
    collected.notes += restored.notes
    if plan.weaker is not None:
        collected.notes.append(f"resumed with a weaker check that the adapter is unchanged: {plan.weaker}")
    return restored


def _journal_writer(journal: str | None, identity: dict[str, Any], restored: Restored | None) -> JournalWriter | None:
    """The run's journal: the one resumed, else a new one. An interrupted run's journal that a run
    without ``--resume`` starts over from is said on stderr at once, with how to keep it next time."""
    if journal is None:
        return None
    path = journal_path(journal)
    if restored is None and path.is_file() and not path.is_symlink():
        print(
            f"qaeval: starting over: {path} held an interrupted run's outputs, which this run replaces "
            "(to pick such a run up instead, run the same command with --resume)",
            file=sys.stderr,
            flush=True,
        )
    return JournalWriter(path, identity, resumed=restored)


def _ask(
    plan: _Plan, collected: Collected, restored: Restored | None, writer: JournalWriter | None, custom: Any
) -> list[RunResult]:
    """Ask the system for every (case, trial) the journal did not give, each output scored once as it
    comes; returns each trial that has outputs, scored (trial 0 first)."""
    n, s = len(plan.suite), plan.settings
    resumed_at = len(collected.notes)  # where the resumed note goes once the reused verdicts are counted
    with streaming(
        plan.judge,
        plan.suite,
        k=s.k,
        restored=restored.verdicts if restored is not None else None,
        show_progress=s.show_progress,
        on_judged=(lambda key, _req, resp: writer.verdict(key, resp)) if writer is not None else None,
        checks=custom,
    ) as stream:
        for t in range(1 if s.adaptive else s.trials):  # adaptive: later trials' cases are known after trial 0
            stream.declare(t, range(n))
        later = s.adaptive and s.trials > 1  # a journal's later trials wait for trial 0 to say which stay
        _restore(stream, plan, collected, [p for p in sorted(collected.rows) if not (later and p >= n)])
        first = [p for p in range(n) if p not in collected.rows]
        ids = [case.id for case in plan.suite.cases]
        rest = [t * n + i for t in range(1, s.trials) for i in trial_order(ids, t) if t * n + i not in collected.rows]
        runs: list[Any] = []
        if later:
            _collect(plan, first, collected, stream, writer)
            stream.drain()
            runs.append(stream.result(0, plan.meta, s.bootstrap_seed))
            rest, unsettled = _adaptive_rest(plan, runs[0], rest, collected)
            for t in range(1, s.trials):
                stream.declare(t, unsettled)
            _restore(stream, plan, collected, sorted(p for p in collected.rows if p >= n))
            _collect(plan, rest, collected, stream, writer)
        else:
            _collect(plan, first + rest, collected, stream, writer)
        stream.finish()
    if restored is not None:
        collected.notes.insert(
            resumed_at,
            f"resumed from {restored.path}: {len(restored.outputs)} of {len(plan.everyone)} (case, trial) output(s) "
            f"reused, {stream.reused} verdict(s) (counted as cached: no judge call or token of this run)",
        )
    runs += [stream.result(t, plan.meta, s.bootstrap_seed) for t in range(len(runs), s.trials)]
    return [run for run in runs if run is not None]


def _collect(
    plan: _Plan, places: list[int], collected: Collected, stream: Stream, journal: JournalWriter | None
) -> None:
    """Ask the system for the given places; each output is journaled and handed to the stream as it comes."""
    if not places:
        return
    suite, n = plan.suite, len(plan.suite)
    cases = [suite.cases[p % n] for p in places]
    stream.plan(places)

    def arrived(i: int, row: dict[str, Any]) -> None:
        place = places[i]
        collected.rows[place] = row
        if journal is not None:
            journal.output(place, row, place // n)
        stream.put(place, cases[i], row)

    asked = Suite(tuple(cases), suite.root, suite.corpus)
    run_suite(asked, plan.adapter, plan.settings, data_dir=suite.root, on_output=arrived)


def _restore(stream: Stream, plan: _Plan, collected: Collected, places: list[int]) -> None:
    """Hand the stream outputs a journal gave back: judged if still without a verdict, and scored."""
    stream.plan(places)
    for place in places:
        stream.put(place, plan.everyone.cases[place], collected.rows[place])


def _adaptive_rest(
    plan: _Plan, first_run: RunResult, rest: list[int], collected: Collected
) -> tuple[list[int], list[int]]:
    """The later trials an adaptive run asks for, and the suite's indices of the cases they are of: those
    trial 0 does not settle. Later trials a journal gave for a case trial 0 now settles are dropped, so the
    run holds the trials the rule gives it."""
    suite, everyone, n, trials = plan.suite, plan.everyone, len(plan.suite), plan.settings.trials
    passed = {cid for cid, ok in zip(first_run.per_case["case_id"], first_run.per_case["case_passed"]) if ok}
    settled = {cid for cid in passed if plan.settled is None or plan.settled(cid)}  # and the rule lets go
    unsettled = {c.id for c in suite} - settled
    dropped = [p for p in collected.rows if p >= n and everyone.cases[p].id not in unsettled]
    for p in dropped:
        del collected.rows[p]
    collected.notes.append(
        f"adaptive trials: {len(unsettled)} of {n} case(s) got all {trials} trials; "
        f"{(n - len(unsettled)) * (trials - 1)} system call(s) saved of {n * trials}; pass_at_k is estimated "
        "over every case, pass_hat_k is not estimable (NaN): a case whose first trial passed had no more"
    )
    if dropped:
        collected.notes.append(
            f"{len(dropped)} later trial(s) from the journal dropped: their case's first trial, asked again, "
            "settles it (the adaptive rule gives it no more)"
        )
    indices = [i for i, case in enumerate(suite.cases) if case.id in unsettled]
    return [p for p in rest if everyone.cases[p].id in unsettled], indices
