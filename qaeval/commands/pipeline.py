"""The one place that runs a task: ask the system under test for every case, scoring each output as it comes.

``evaluate(suite, adapter, judge)`` is what ``qaeval run`` and every scoring command do: the worker pool
(``qaeval.system.pool``) collects the outputs, the scoring layers turn them into a ``RunResult``. It sits
above both, so neither imports the other.
"""

from __future__ import annotations

import gc
import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from qaeval.core.frames import frame
from qaeval.core.params import DEFAULT_K
from qaeval.data.cases import Suite
from qaeval.scoring.evaluate import case_samples, score_outputs
from qaeval.scoring.journal import JournalWriter, Restored, journal_path, memo_from, read_journal
from qaeval.scoring.judge import JudgeClient, judge_config_of, request_key
from qaeval.scoring.result import RunMeta, RunResult
from qaeval.scoring.rubric import Rubric
from qaeval.scoring.stream import Stream, request_for, streaming
from qaeval.scoring.stream_checks import StreamedChecks
from qaeval.scoring.trials import combine_trials
from qaeval.system.calls import adapter_label
from qaeval.system.contract import OUTPUT_SCHEMA
from qaeval.system.identity import adapter_code, code_digest
from qaeval.system.pool import run_suite

# A run allocates millions of small containers that live until it ends (cases, outputs, rows, term
# sets). With CPython's default first threshold (700 allocations) the collector runs over a thousand times
# on a large suite, walking ever more live objects; collecting every 50,000 allocations costs a fraction
# of that (benchmarks/bench_phases.py prints the collector's time); memory held
# by cycles waits a little longer for a collection, nothing else changes. Restored afterwards.
RUN_THRESHOLDS = (50_000, 20, 100)


_runs = 0  # runs inside fewer_collections now (threads of a notebook may overlap)
_saved: tuple[int, int, int] = (0, 0, 0)
_lock = threading.Lock()


@contextmanager
def fewer_collections() -> Iterator[None]:
    """Raise the garbage collector's thresholds to ``RUN_THRESHOLDS`` (never lower them, and leave a
    collector turned off by ``gc.set_threshold(0)`` off) while any run is going; the last run to end
    puts back what there was before the first began."""
    global _runs, _saved
    with _lock:
        if _runs == 0:
            _saved = gc.get_threshold()
            if _saved[0] != 0:
                gc.set_threshold(*(max(now, run) for now, run in zip(_saved, RUN_THRESHOLDS)))
        _runs += 1
    try:
        yield
    finally:
        with _lock:
            _runs -= 1
            if _runs == 0:
                gc.set_threshold(*_saved)


def trial_suite(suite: Suite, trials: int) -> Suite:
    """The suite's cases ``trials`` times over, trial by trial: what the pool is asked for. Each entry is
    an independent call (a fresh opaque id, the same view of the case), so the trials of one case may
    run on different workers at once."""
    return Suite(suite.cases * trials, suite.root, suite.corpus)


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
    adapter: Any = None,
) -> dict[str, Any]:
    """What a journal must match for a run to resume from it (``qaeval.scoring.journal``): outputs made
    without the boundary (isolation none) are never taken into a run that enforces it, adaptive
    trials chosen against one baseline (``adaptive_baseline``, its digest) are not taken into a run
    choosing them against another, and outputs of one version of the adapter's code are not taken into
    a run of another (``adapter_code``: its module's files, ``qaeval.system.identity``; ``adapter``: the
    adapter, when it is not the ``label`` given)."""
    registered = getattr(custom, "registered", None)
    chosen_by = {"adaptive_baseline": adaptive_baseline} if adaptive and adaptive_baseline is not None else {}
    return chosen_by | dict(
        data=suite.fingerprint,
        corpus=suite.corpus_fingerprint,
        adapter=label,
        adapter_code=adapter_code(label if adapter is None else adapter)[0],
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
    asked: int = 0  # system calls made by this run (not restored from a journal)
    notes: list[str] = field(default_factory=list)


def _collect(
    suite: Suite,
    adapter: Any,
    places: list[int],
    collected: Collected,
    stream: Stream,
    journal: JournalWriter | None,
    run_options: dict[str, Any],
) -> None:
    """Ask the system for the given places; each output is journaled and handed to the stream as it comes."""
    if not places:
        return
    n = len(suite)
    cases = [suite.cases[p % n] for p in places]
    stream.plan(places)

    def arrived(i: int, row: dict[str, Any]) -> None:
        place = places[i]
        collected.rows[place] = row
        if journal is not None:
            journal.output(place, row, place // n)
        stream.put(place, cases[i], row)

    run_suite(Suite(tuple(cases), suite.root, suite.corpus), adapter, on_output=arrived, **run_options)
    collected.asked += len(places)


def evaluate(
    suite: Suite,
    adapter: Any,
    judge: JudgeClient,
    *,
    k: int = DEFAULT_K,
    timeout: float = 60.0,
    concurrency: int = 4,
    isolation: str = "process",
    executor: Any = None,
    executor_label: str | None = None,
    show_progress: bool | None = None,
    bootstrap_seed: int = 0,
    adapter_name: str | None = None,
    custom: Any = None,
    trials: int = 1,
    pass_k: int | None = None,
    journal: str | os.PathLike[str] | None = None,
    resume: bool = False,
    keep_errors: bool = False,
    adaptive: bool = False,
    settled: Callable[[str], bool] | None = None,
    **limits: Any,
) -> RunResult:
    """Run the adapter over the suite ``trials`` times and score every layer of every trial.

    The judge and the registered checks run beside the system: each output is judged, then checked, as it
    arrives (``qaeval.scoring.stream``), and scoring afterwards finds every verdict and every check's
    rows already there.

    Args:
        suite: The golden cases (``load_suite``).
        adapter: The system: a ``module:factory`` name, a factory, or an adapter object.
        judge: The judge (``JudgeClient``), such as ``OfflineJudge()``.
        k: How many retrieved passages the retrieval metrics look at.
        timeout: Seconds one case may take.
        concurrency: Worker processes, each on one case at a time.
        isolation: ``process`` (the default: the system runs in workers that never see the labels)
            or ``none`` (in this process, for a debugger; nothing is enforced).
        executor: A ``concurrent.futures.Executor`` (a Dask client's) to run the calls on instead.
        executor_label: How the record names that executor.
        show_progress: Whether to draw a progress bar (None: ``QAEVAL_PROGRESS``, else for 50 cases or more in a
            terminal or a notebook).
        bootstrap_seed: The seed of the metrics' bootstrap intervals.
        adapter_name: How the record names the adapter (default: derived from it).
        custom: The registered checks and metrics' runner (``qaeval.boundary.custom.make_custom``).
        trials: How many times each case is run.
        pass_k: The k of pass_hat_k and pass_at_k (default: ``trials``).
        journal: The journal's path (``qaeval.scoring.journal``), or None to keep none.
        resume: Reuse what the journal holds.
        keep_errors: On resume, reuse the failed outputs too.
        adaptive: Every case gets one trial, and the other ``trials - 1`` go only to the cases that
            one trial does not settle: it failed, or ``settled(case_id)`` is false.
        settled: Which cases one trial settles (the gate: those the baseline had passing every trial).
        **limits: ``startup_timeout`` and ``max_reply_bytes`` for ``run_suite``.

    Returns:
        The scored run: its frames, scoreboard and meta.
    """
    config = judge_config_of(judge)
    label = adapter_name or adapter_label(adapter)
    everyone = trial_suite(suite, trials)
    chosen_by = (getattr(settled, "digest", "unnamed rule") if settled is not None else None) if adaptive else None
    isolated = isolation if executor is None else f"executor {executor_label or type(executor).__name__}"
    chosen = chosen_by if trials > 1 else None
    identity = (  # the adapter's files are read only for a journal, the one thing the identity is for
        {}
        if journal is None
        else run_identity(suite, label, judge, k, trials, custom, adaptive, isolated, chosen, adapter=adapter)
    )
    collected = Collected()
    restored = _resumed(journal, identity, everyone, keep_errors, adapter, collected) if resume else None
    memo = _restored_memo(suite, everyone, config.prompt_version, restored, collected)
    writer = _journal_writer(journal, identity, restored)
    run_options = dict(
        timeout=timeout,
        concurrency=concurrency,
        isolation=isolation,
        executor=executor,
        show_progress=show_progress,
        data_dir=suite.root,
        **limits,
    )
    meta = RunMeta.now(
        adapter=label,
        judge=config,
        isolation=isolation,
        concurrency=concurrency,
        executor=executor_label or (type(executor).__name__ if executor is not None else None),
        k=k,
        timeout=timeout,
        data=suite.root,
        adaptive_baseline=chosen,
        adapter_code=code_digest(adapter),  # a gate notes a change since its baseline
    )
    plan = _Plan(suite, everyone, adapter, judge, trials, adaptive, settled, run_options, meta, bootstrap_seed)
    try:
        first_run, checks, memo = _ask(plan, collected, memo, writer, custom, show_progress, k)
    finally:
        if writer is not None:
            writer.close()
            collected.notes += writer.notes
    result = _scored(plan, collected, first_run, checks, memo, pass_k)
    if collected.notes:
        result = replace(result, notes=result.notes + collected.notes)
    return result


@dataclass(frozen=True)
class _Plan:
    """What a run asks for and how: the settings ``evaluate`` hands its steps."""

    suite: Suite
    everyone: Suite
    adapter: Any
    judge: JudgeClient
    trials: int
    adaptive: bool
    settled: Callable[[str], bool] | None
    run_options: dict[str, Any]
    meta: RunMeta
    bootstrap_seed: int


def _resumed(
    journal: str | os.PathLike[str] | None,
    identity: dict[str, Any],
    everyone: Suite,
    keep_errors: bool,
    adapter: Any,
    collected: Collected,
) -> Restored | None:
    """What the journal beside the record holds for this run (None: there is none), its outputs put
    into ``collected``; a note says how far the adapter's identity goes when it is weaker than its code."""
    if journal is None:
        return None
    path = journal_path(journal)
    if not path.exists():
        collected.notes.append(f"nothing to resume: no journal at {path}")
        return None
    restored = read_journal(path, identity, [c.id for c in everyone], keep_errors=keep_errors)
    collected.rows.update(restored.outputs)
    collected.notes += restored.notes
    weaker = adapter_code(adapter)[1]
    if weaker is not None:
        collected.notes.append(f"resumed with a weaker check that the adapter is unchanged: {weaker}")
    return restored


def _restored_memo(
    suite: Suite, everyone: Suite, prompt_version: str, restored: Restored | None, collected: Collected
) -> dict[Any, Any]:
    """The judge's verdicts the journal holds for the restored outputs. They count as cached: this run
    spent nothing on them (``judge_usage``), and the note says how many there were."""
    if restored is None:
        return {}
    rubric = Rubric.load(prompt_version)
    keys = {p: request_for(suite, rubric, everyone.cases[p], row) for p, row in restored.outputs.items()}
    memo = memo_from(restored, {p: request_key(req) for p, req in keys.items() if req is not None})
    collected.notes.append(
        f"resumed from {restored.path}: {len(restored.outputs)} of {len(everyone)} (case, trial) "
        f"output(s) reused, {len(memo)} verdict(s) (counted as cached: no judge call or token of this run)"
    )
    return memo


def _journal_writer(
    journal: str | os.PathLike[str] | None, identity: dict[str, Any], restored: Restored | None
) -> JournalWriter | None:
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
    plan: _Plan,
    collected: Collected,
    memo: dict[Any, Any],
    writer: JournalWriter | None,
    custom: Any,
    show_progress: bool | None,
    k: int,
) -> tuple[RunResult | None, Any, dict[Any, Any]]:
    """Ask the system for every (case, trial) the journal did not give, judging and checking each output as
    it comes. Returns trial 0 scored (adaptive: to see what it settles, and kept), the checks' runner
    scoring is to use, and the judge's memo."""
    suite, everyone, n, trials = plan.suite, plan.everyone, len(plan.suite), plan.trials
    config = judge_config_of(plan.judge)
    first_run, checks = None, None
    with (
        fewer_collections(),
        streaming(
            plan.judge,
            suite,
            memo=memo,
            show_progress=show_progress,
            on_judged=(lambda key, _req, resp: writer.verdict(key, resp)) if writer is not None else None,
            checks=custom,
            sample_of=lambda items, known: case_samples(suite, items, known, k=k, config=config),
        ) as stream,
    ):
        restored_places = sorted(collected.rows)
        stream.plan(restored_places)  # restored outputs: judged if still without a verdict, checked
        for place in restored_places:
            stream.put(place, everyone.cases[place], collected.rows[place])
        first = [p for p in range(n) if p not in collected.rows]
        rest = [p for p in range(n, n * trials) if p not in collected.rows]
        if custom is not None:
            checks = StreamedChecks(custom, stream.checks, stream)
        if plan.adaptive and trials > 1:
            _collect(suite, plan.adapter, first, collected, stream, writer, plan.run_options)
            first_run = _score_first(
                suite, collected, plan.judge, stream.drain(), plan.meta, plan.bootstrap_seed, checks
            )
            rest = _adaptive_rest(plan, first_run, rest, collected)
            _collect(suite, plan.adapter, rest, collected, stream, writer, plan.run_options)
        else:
            _collect(suite, plan.adapter, first + rest, collected, stream, writer, plan.run_options)
        return first_run, checks, stream.finish()


def _adaptive_rest(plan: _Plan, first_run: RunResult, rest: list[int], collected: Collected) -> list[int]:
    """The later trials an adaptive run asks for: those of the cases trial 0 does not settle. Later
    trials a journal gave for a case trial 0 now settles (its first trial failed then, and passes now
    that it was asked again) are dropped, so the run holds the trials the rule gives it."""
    suite, everyone, n, trials = plan.suite, plan.everyone, len(plan.suite), plan.trials
    unsettled = {c.id for c in suite} - _settled_by(first_run, plan.settled)
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
    return [p for p in rest if everyone.cases[p].id in unsettled]


def _scored(
    plan: _Plan,
    collected: Collected,
    first_run: RunResult | None,
    checks: Any,
    memo: dict[Any, Any],
    pass_k: int | None,
) -> RunResult:
    """Every trial scored (trial 0 of an adaptive run already is) and the trials combined."""
    suite, everyone, n, trials = plan.suite, plan.everyone, len(plan.suite), plan.trials
    runs = [] if first_run is None else [first_run]
    for t in range(1 if first_run is not None else 0, trials):
        places = [t * n + i for i in range(n) if t * n + i in collected.rows]
        if not places:
            continue
        part = Suite(tuple(everyone.cases[p] for p in places), suite.root, suite.corpus)
        outputs = frame([collected.rows[p] for p in places], OUTPUT_SCHEMA)
        runs.append(
            score_outputs(
                part,
                outputs,
                plan.judge,
                meta=plan.meta,
                bootstrap_seed=plan.bootstrap_seed,
                custom=checks,
                judge_memo=memo,
            )
        )
    if trials == 1:
        return runs[0]
    return combine_trials(
        runs, bootstrap_seed=plan.bootstrap_seed, pass_k=pass_k, trials=trials, adaptive=plan.adaptive
    )


def _score_first(
    suite: Suite,
    collected: Collected,
    judge: JudgeClient,
    memo: dict[Any, Any],
    meta: RunMeta,
    bootstrap_seed: int,
    custom: Any,
) -> RunResult:
    """Trial 0 scored now (its verdicts all in: the judge is waited for), as the run will keep it: its
    registered checks run once, here."""
    first = frame([collected.rows[i] for i in range(len(suite))], OUTPUT_SCHEMA)
    return score_outputs(suite, first, judge, meta=meta, bootstrap_seed=bootstrap_seed, custom=custom, judge_memo=memo)


def _settled_by(first: RunResult, settled: Callable[[str], bool] | None) -> set[str]:
    """The cases whose first trial passed and that ``settled`` does not hold back."""
    passed = {cid for cid, ok in zip(first.per_case["case_id"], first.per_case["case_passed"]) if ok}
    return {cid for cid in passed if settled is None or settled(cid)}
