"""From outputs already collected to a scored run (``score_outputs``, ``score_trials``), through a run's own
path (``qaeval.scoring.stream``: each output scored once); the per-case rules are ``qaeval.scoring.outcomes``.

A case passes when it has no adapter error, passes every deterministic check, is not wrongly abstained,
was judged faithful (full credit, valid quote) when it answered, and, when multi-step, reached its end
state through every checkpoint.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pandas as pd

from qaeval.core.errors import UsageError
from qaeval.core.frames import RowsByKey
from qaeval.data.cases import Suite
from qaeval.data.corpus import Passage
from qaeval.scoring.judge import JudgeClient, JudgeMemo, judge_config_of
from qaeval.scoring.result import RunMeta, RunResult
from qaeval.scoring.stream import streaming
from qaeval.system.contract import OUTPUT_SCHEMA


def corpus_excerpt(suite: Suite, outputs: pd.DataFrame) -> dict[str, Passage]:
    """The corpus passages a run touched: every corpus case's gold passages and every corpus passage an
    output retrieved, cited or returned (what a record keeps instead of the whole corpus). Empty
    without a corpus. A mapping like this one can stand in for the corpus when cases are read back
    (``suite_from_raw(..., corpus=excerpt)``): loading and the checks only look passages up by id."""
    corpus = suite.corpus
    if corpus is None:
        return {}
    outs = RowsByKey(outputs)
    kept: dict[str, Passage] = {}
    for case in suite:
        out = outs[case.id] if case.id in outs else None
        named = [
            *(case.gold_source_ids if case.from_corpus else ()),
            *((out or {}).get("retrieved_ids") or ()),
            *(c["source_id"] for c in (out or {}).get("citations") or ()),
            *(p["id"] for p in (out or {}).get("passages") or ()),
        ]
        for pid in named:
            if pid not in kept and (passage := corpus.get(pid)) is not None:
                kept[pid] = passage
    return kept


def score_outputs(
    suite: Suite,
    outputs: pd.DataFrame,
    judge: JudgeClient,
    *,
    meta: RunMeta | None = None,
    k: int | None = None,
    bootstrap_seed: int = 0,
    custom: Any = None,
    judge_memo: JudgeMemo | None = None,
) -> RunResult:
    """Score outputs that were already collected (pure apart from the judge call and the registered
    checks and metrics): ``score_trials`` for one trial.

    Args:
        suite: The golden cases the outputs answer.
        outputs: One row per case (one trial), with the columns ``run_suite`` returns.
        judge: The judge (``JudgeClient``).
        meta: What the run records about itself (default: made here, adapter ``(outputs given)``).
        k: How many retrieved passages the retrieval metrics look at (default: the meta's, else 5).
        bootstrap_seed: The seed of the metrics' bootstrap intervals.
        custom: The registered checks and metrics' runner (``qaeval.host.custom.make_custom``).
        judge_memo: A judge memo to share with other scorings (an equal request is judged once).

    Returns:
        The scored run.
    """
    return score_trials(
        suite, [outputs], judge, meta=meta, k=k, bootstrap_seed=bootstrap_seed, custom=custom, judge_memo=judge_memo
    )[0]


def score_trials(
    suite: Suite,
    trials: Sequence[pd.DataFrame],
    judge: JudgeClient,
    *,
    meta: RunMeta | None = None,
    k: int | None = None,
    bootstrap_seed: int = 0,
    custom: Any = None,
    judge_memo: JudgeMemo | None = None,
) -> list[RunResult]:
    """Score each trial's outputs (one frame a trial, each naming every case of the suite once) through a
    ``Stream``, trial by trial: an equal request is judged once across the trials."""
    config = judge_config_of(judge)
    meta = meta or RunMeta.now(adapter="(outputs given)", judge=config, isolation="none", k=k or 5, data=suite.root)
    if k is not None:
        meta = replace(meta, k=k)
    for outputs in trials:
        _one_output_per_case(suite, outputs)
    n = len(suite)
    with streaming(judge, suite, k=meta.k, memo=judge_memo, checks=custom, show_progress=False) as stream:
        stream.plan(range(n * len(trials)))
        for t, outputs in enumerate(trials):
            stream.declare(t, range(n))
            rows = {row["case_id"]: row for row in outputs[list(OUTPUT_SCHEMA)].to_dict("records")}
            for i, case in enumerate(suite.cases):
                stream.put(t * n + i, case, rows[case.id])
        stream.finish()
    return [stream.result(t, meta, bootstrap_seed, empty=True) for t in range(len(trials))]


def _one_output_per_case(suite: Suite, outputs: pd.DataFrame) -> None:
    """Outputs to score name every case of the suite once and nothing else (a UsageError says how not)."""
    ids = outputs["case_id"].tolist() if "case_id" in outputs else []
    wanted = [case.id for case in suite]
    if len(ids) == len(wanted) and set(ids) == set(wanted):
        return
    given, known = set(ids), set(wanted)
    found = (
        ("case(s) without an output", [cid for cid in wanted if cid not in given]),
        ("output(s) for cases not in the suite", [cid for cid in dict.fromkeys(ids) if cid not in known]),
        ("case(s) with more than one output", [cid for cid, n in Counter(ids).items() if n > 1]),
    )
    problems = [f"{len(which)} {what} (first: {which[0]!r})" for what, which in found if which]
    raise UsageError("the outputs do not match the suite: " + "; ".join(problems or ["no case_id column"]))
