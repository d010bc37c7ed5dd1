"""From outputs to a scored run: every scoring layer, the per-case outcome rules, then the scoreboard.

``score_outputs(suite, outputs, judge)`` returns a ``RunResult`` holding one DataFrame per layer, the
per-case frame that joins them, the per-case metric units, the scoreboard and the per-slice frame.
Calling the system is ``qaeval.commands.pipeline``'s business; this module is pure apart from the judge call.

How one case's row is put together, step by step:

1. ``index_layers``: each layer's frame indexed by case (checks, retrieval, effective judge scores,
   judge errors, supported citations, trajectory).
2. ``case_facts``: what the layers found about the case (``CaseFacts``), which is all a metric reads.
3. ``fail_reasons``: why the case does not pass, if it does not. A case passes when it has no adapter
   error, passes every deterministic check, is not wrongly abstained, was judged faithful (full
   credit, valid quote) when it answered, and, when multi-step, reached its end state through every
   checkpoint.
4. ``per_case_row``: the row a person reads.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import pandas as pd

from qaeval.core.errors import UsageError
from qaeval.core.frames import RowsByKey, frame
from qaeval.data.cases import Suite
from qaeval.data.corpus import Passage
from qaeval.scoring import checks as layer1
from qaeval.scoring.custom import NONE_REGISTERED, Registered
from qaeval.scoring.judge import (
    JudgeClient,
    JudgeConfig,
    build_requests,
    judge_config_of,
    request_key,
    score_with_judge,
    verdict_frame,
)
from qaeval.scoring.metrics import scoreboard_and_slices
from qaeval.scoring.outcomes import case_outcomes, check_samples
from qaeval.scoring.result import RunMeta, RunResult
from qaeval.scoring.retrieval import score_retrieval
from qaeval.scoring.rubric import Rubric
from qaeval.scoring.trajectory import score_trajectories
from qaeval.scoring.trials import add_trial_columns
from qaeval.system.contract import OUTPUT_SCHEMA

# --------------------------------------------------------------------------- the result


# --------------------------------------------------------------------------- entry points


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


def passages_beyond(case: Any, out: Mapping[str, Any], corpus: Any) -> dict[str, tuple[str | None, str]]:
    """{id: (title, text)} of the passages an output used that its case's sources do not hold: its own
    ``passages``, else the corpus's, by id."""
    if not (out["passages"] or (corpus is not None and out["retrieved_ids"])):
        return {}
    own = {s.id for s in case.sources}
    held: dict[str, tuple[str, str | None, str]] = {}
    if corpus is not None:
        layer1.add_from_corpus(held, out, corpus)
    bodies, titles = layer1.used_passages(held, out)
    return {pid: (titles.get(pid), text) for pid, text in bodies.items() if pid not in own}


def judged_fixture(case: Any, out: Mapping[str, Any], corpus: Any) -> dict[str, str]:
    """{id: text} the judge weighs one output's citations against: ``used_sources``'s rows of its case."""
    return {
        **{s.id: s.text for s in case.sources},
        **{pid: text for pid, (_, text) in passages_beyond(case, out, corpus).items()},
    }


def used_sources(suite: Suite, outputs: pd.DataFrame, sources: pd.DataFrame) -> pd.DataFrame:
    """``sources`` (``Suite.sources_frame()``) plus, per case, the passages its output used that its
    sources do not hold (from the system's ``passages``, else the corpus): what the judge grades against."""
    outs = RowsByKey(outputs)
    rows = []
    for case in suite:
        out = outs[case.id] if case.id in outs else None
        if out is not None:
            rows += [
                (case.id, pid, title, text, pid in case.gold_source_ids)
                for pid, (title, text) in passages_beyond(case, out, suite.corpus).items()
            ]
    if not rows:
        return sources
    extra = pd.DataFrame(rows, columns=["case_id", "source_id", "title", "text", "is_gold"], dtype=object)
    extra["is_gold"] = extra["is_gold"].astype(bool)
    return pd.concat([sources, extra], ignore_index=True)


def case_samples(
    suite: Suite,
    items: Sequence[tuple[Any, Mapping[str, Any]]],
    memo: Mapping[Any, Any],
    *,
    k: int,
    config: JudgeConfig,
) -> list[Any] | None:
    """What scoring will send the registered checks for each of some outputs (``items``: (case, output)
    pairs of distinct cases), computed through the same layers for those cases alone (each case's sample
    depends on its own rows only), their verdicts read from ``memo`` (the judge is never asked here and
    nothing in the memo changes). None when an output is judged and the memo lacks its response."""
    part = Suite(tuple(case for case, _ in items), suite.root, suite.corpus)
    outputs = frame([dict(row) for _, row in items], OUTPUT_SCHEMA)
    cases, sources = part.to_frame(), part.sources_frame()
    requests = build_requests(cases, outputs, used_sources(part, outputs, sources), Rubric.load(config.prompt_version))
    responses = []
    for req in requests:
        entry = memo.get(request_key(req))
        if entry is None:
            return None
        responses.append(entry.response)
    samples = check_samples(
        part,
        outputs,
        layer1.check_outputs(cases, outputs, sources, suite.corpus),
        score_retrieval(cases, outputs, k=k),
        verdict_frame(requests, responses, config),
        score_trajectories(cases, outputs),
    )
    return [sample for _, sample in samples]


def score_outputs(
    suite: Suite,
    outputs: pd.DataFrame,
    judge: JudgeClient,
    *,
    meta: RunMeta | None = None,
    k: int | None = None,
    bootstrap_seed: int = 0,
    custom: Any = None,
    judge_memo: dict[Any, Any] | None = None,
) -> RunResult:
    """Score outputs that were already collected (pure apart from the judge call and the registered
    checks and metrics).

    Args:
        suite: The golden cases the outputs answer.
        outputs: One row per case (one trial), with the columns ``run_suite`` returns.
        judge: The judge (``JudgeClient``).
        meta: What the run records about itself (default: made here, adapter ``(outputs given)``).
        k: How many retrieved passages the retrieval metrics look at (default: the meta's, else 5).
        bootstrap_seed: The seed of the metrics' bootstrap intervals.
        custom: The registered checks and metrics' runner (``qaeval.boundary.custom.make_custom``).
        judge_memo: Shared by the trials of one run, so an output seen in an earlier trial is not
            judged again (``score_with_judge``).

    Returns:
        The scored run.
    """
    config = judge_config_of(judge)
    meta = meta or RunMeta.now(adapter="(outputs given)", judge=config, isolation="none", k=k or 5, data=suite.root)
    if k is not None:
        meta = replace(meta, k=k)
    _one_output_per_case(suite, outputs)
    cases, sources = suite.to_frame(), suite.sources_frame()
    checks = layer1.check_outputs(cases, outputs, sources, suite.corpus)
    retrieval = score_retrieval(cases, outputs, k=meta.k)
    verdicts = score_with_judge(judge, cases, outputs, used_sources(suite, outputs, sources), memo=judge_memo)
    trajectory = score_trajectories(cases, outputs)
    return assemble(
        suite, meta, outputs, checks, retrieval, verdicts, trajectory, bootstrap_seed=bootstrap_seed, runner=custom
    )


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


def assemble(
    suite: Suite,
    meta: RunMeta,
    outputs: pd.DataFrame,
    checks: pd.DataFrame,
    retrieval: pd.DataFrame,
    verdicts: pd.DataFrame,
    trajectory: pd.DataFrame,
    *,
    bootstrap_seed: int = 0,
    skip_scoreboard: bool = False,
    custom: pd.DataFrame | None = None,
    registered: Registered = NONE_REGISTERED,
    runner: Any = None,
) -> RunResult:
    """A RunResult from its layer frames (scoring, or reading a record back, which brings its own
    scoreboard: ``skip_scoreboard``, and its registered outcomes: ``custom``)."""
    per_case, units, custom, registered = case_outcomes(
        suite, outputs, checks, retrieval, verdicts, trajectory, custom, registered, runner
    )
    per_case = add_trial_columns(per_case)
    run = RunResult(
        suite=suite,
        meta=meta,
        outputs=outputs,
        checks=checks,
        retrieval=retrieval,
        verdicts=verdicts,
        trajectory=trajectory,
        per_case=per_case,
        units=units,
        scoreboard=pd.DataFrame(),
        slices=pd.DataFrame(),
        custom=custom,
        registered=registered,
    )
    if skip_scoreboard:
        return run
    board, slices = scoreboard_and_slices(units, per_case, seed=bootstrap_seed, metrics=run.metrics)
    return replace(run, scoreboard=board, slices=slices)
