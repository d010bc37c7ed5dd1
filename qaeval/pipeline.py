"""The one place that runs a task: ask the system under test for every case, then score what came back.

``evaluate(suite, adapter, judge)`` is what ``qaeval run`` and every scoring command do: the worker pool
(``qaeval.system.pool``) collects the outputs, the scoring layers turn them into a ``RunResult``. It sits
above both, so neither imports the other.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pandas as pd

import qaeval.record  # noqa: F401  (installs the writer Result.save uses)
from qaeval.data.cases import Suite
from qaeval.scoring.evaluate import RunMeta, RunResult, score_outputs
from qaeval.scoring.trials import combine_trials
from qaeval.scoring.judge import JudgeClient, judge_config_of
from qaeval.system.calls import adapter_label
from qaeval.system.pool import run_suite


# A run allocates millions of small containers that live until it ends (cases, outputs, rows, term
# sets). With CPython's default first threshold (700 allocations) the collector ran about 1,400 times on
# 10,000 cases of 4 KB, walking ever more live objects: 1.5 s of a 9 s run. Collecting every 50,000
# allocations instead cost 0.3 s (benchmarks/bench_phases.py prints the collector's time); memory held
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


def split_trials(outputs: pd.DataFrame, cases: int, trials: int) -> list[pd.DataFrame]:
    """``run_suite``'s rows over ``trial_suite`` cut back into one frame per trial, each in suite order."""
    return [outputs.iloc[t * cases:(t + 1) * cases].reset_index(drop=True) for t in range(trials)]


def evaluate(suite: Suite, adapter: Any, judge: JudgeClient, *, k: int = 5, timeout: float = 60.0,
             concurrency: int = 4, isolation: str = "process", executor: Any = None,
             executor_label: str | None = None, show_progress: bool | None = None, bootstrap_seed: int = 0,
             adapter_name: str | None = None, custom: Any = None, trials: int = 1, pass_k: int | None = None,
             **limits: Any) -> RunResult:
    """Run the adapter over the suite ``trials`` times and score every layer of every trial. ``custom``:
    the registered checks and metrics' runner (``qaeval.judges.custom.make_custom``). ``pass_k``: the k
    of pass_hat_k and pass_at_k (default: ``trials``). ``limits``: ``startup_timeout`` and
    ``max_reply_bytes`` for ``run_suite``."""
    config = judge_config_of(judge)
    with fewer_collections():
        asked = trial_suite(suite, trials) if trials > 1 else suite
        outputs = run_suite(asked, adapter, timeout=timeout, concurrency=concurrency, isolation=isolation,
                            executor=executor, show_progress=show_progress, data_dir=suite.root, **limits)
        label = adapter_name or adapter_label(adapter)
        meta = RunMeta.now(adapter=label, judge=config, isolation=isolation, concurrency=concurrency,
                           executor=executor_label or (type(executor).__name__ if executor is not None else None),
                           k=k, timeout=timeout, data=suite.root)
        if trials == 1:
            return score_outputs(suite, outputs, judge, meta=meta, bootstrap_seed=bootstrap_seed, custom=custom)
        memo: dict[Any, Any] = {}
        runs = [score_outputs(suite, part, judge, meta=meta, bootstrap_seed=bootstrap_seed, custom=custom,
                              judge_memo=memo) for part in split_trials(outputs, len(suite), trials)]
        return combine_trials(runs, bootstrap_seed=bootstrap_seed, pass_k=pass_k)
