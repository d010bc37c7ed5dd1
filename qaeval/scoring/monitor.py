"""Scoring logged traffic: the gold-free checks on every row, the judge on a sample. Pure but for the judge.

``check_rows(rows)`` runs the checks that need no gold on each ``LogRow``, its passages read as what the
system retrieved, in rank order:

====================== ==========================================================================================
prompt_grounding       ``check_grounding_isolation``: the logged prompt carries the question, the text of a
                       retrieved passage and of every cited one. Not assessed (NA) on a row that logged no prompt
                       and did not say the model went uncalled.
citation_resolvability ``check_citation_resolvability``: every citation names a passage the row holds.
citation_coverage      ``check_citation_coverage``: every load-bearing answer sentence is covered by a claim.
fail_closed            ``check_fail_closed``: nothing retrieved means no answer and (when logged) no model call.
====================== ==========================================================================================

A row logged without ``model_was_called`` calls the model when it logged a prompt, else ``model_called``
is NA. ``check_rows`` returns one row per log row (``ROW_COLUMNS``, and the slice columns);
``sample_rows`` draws the rows the judge grades, ``judge_sample`` scores them as a ``RunResult`` and
``judge_columns`` copies the effective judge scores back onto the row frame.
"""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd

from qaeval.core.frames import frame
from qaeval.core.text import normalize
from qaeval.data.cases import GoldenCase, Suite, case_fingerprint
from qaeval.data.labels import LABELLED_CASE
from qaeval.data.logs import NONE_GROUP, LogRow, content_digest
from qaeval.scoring.checks import check_citation_resolvability, check_fail_closed, check_grounding_isolation
from qaeval.scoring.coverage import check_citation_coverage, coverage_counts
from qaeval.scoring.evaluate import score_outputs
from qaeval.scoring.judge import JudgeClient, effective_scores
from qaeval.scoring.result import RunMeta, RunResult
from qaeval.system.contract import OUTPUT_SCHEMA, output_row

ROW_COLUMNS = {
    "row_id": "text",
    "line": "int",
    "digest": "text",  # what the row said (qaeval.data.logs.content_digest); absent from older records
    "timestamp": "object",
    "answered": "bool",
    "abstained": "bool",
    "model_called": "boolean",
    "citations": "int",
    "sentences": "int",
    "covered": "int",
    "prompt_grounding": "boolean",
    "citation_resolvability": "boolean",
    "citation_coverage": "boolean",
    "fail_closed": "boolean",
    "passed": "bool",
    "fail_reasons": "text",
    "sampled": "bool",
    "stratum": "text",
    "faithfulness": "Int64",
    "citation_correctness": "Int64",
    # rows read from traces (qaeval.data.otlp): absent from other records
    "trace_id": "text",
    "span_id": "text",
    "hidden": "text",  # the content the instrumentation hid: question, prompt, passages, answer
    "citations_from": "text",  # qaeval.citations (a span attribute) or markers (the answer's [1], [doc-id])
    "hops": "Int64",
    "cited_hops": "text",  # each cited passage's hop, and whether it reached the prompt
    "cited_unprompted": "boolean",
    "hop_counts": "text",  # per hop "number:kind:documents:cited:prompted" (prompted empty when hidden), ";"-joined
    "tokens": "Int64",  # the answering LLM span's tokens, where it counts them
    "latency_ms": "float",  # the trace's root span, start to end
}
TRACE_COLUMNS = tuple(ROW_COLUMNS)[list(ROW_COLUMNS).index("trace_id") :]
NEEDS = {  # the content each check reads: hidden, the check is not assessed on the row
    "prompt_grounding": ("question", "prompt", "passages"),
    "citation_resolvability": ("answer",),
    "citation_coverage": ("answer", "passages"),
    "fail_closed": ("answer",),
    "cited_unprompted": ("prompt", "passages", "answer"),
}
NOT_JUDGED = {"sampled": False, "stratum": None, "faithfulness": None, "citation_correctness": None}


def _output(row: LogRow) -> dict[str, Any]:
    """The row as the checks read an output: its passages are what it retrieved, best first."""
    called = row.model_was_called if row.model_was_called is not None else row.prompt is not None
    return dict(
        answer=row.answer,
        citations=list(row.citations),
        retrieved_ids=[p.id for p in row.passages],
        passages=[],
        abstained=row.abstained,
        model_was_called=called,
        prompt_to_model=row.prompt,
        computed_aggregate=None,
    )


def hop_facts(row: LogRow) -> dict[str, Any]:
    """A trace row's hop columns: for each cited passage the hop that retrieved it and whether its text
    reached the prompt; ``cited_unprompted`` fails when a retrieved, cited document never did."""
    if row.trace is None:
        return dict.fromkeys(TRACE_COLUMNS)
    facts, hidden = row.trace.facts, row.trace.hidden
    hop_of: dict[str, int] = {}
    for hop in row.trace.hops:
        for d in hop["documents"]:
            hop_of.setdefault(d["id"], hop["hop"])
    bodies = {p.id: p.text for p in row.passages}
    prompt = normalize(row.prompt) if row.prompt is not None else None
    parts, unprompted = [], []
    for sid in dict.fromkeys(c["source_id"] for c in row.citations):
        if sid not in hop_of:
            parts.append(f"{sid}: retrieved by no hop")
            continue
        reached = prompt is not None and normalize(bodies[sid]) in prompt
        unprompted += [] if reached else [sid]
        parts.append(f"{sid}: hop {hop_of[sid]}, " + ("in the prompt" if reached else "not in the prompt"))
    assessed = not any(h in hidden for h in NEEDS["cited_unprompted"]) and (row.prompt is not None)
    cited = {c["source_id"] for c in row.citations}
    counts = []
    for hop in row.trace.hops:
        ids = [d["id"] for d in hop["documents"]]
        shown = prompt is not None and "passages" not in hidden
        prompted = sum(normalize(bodies[i]) in prompt for i in ids if i in bodies) if shown and prompt else ""
        counts.append(f"{hop['hop']}:{hop['kind']}:{len(ids)}:{sum(i in cited for i in ids)}:{prompted}")
    return dict(
        trace_id=facts["trace_id"],
        span_id=facts["span_id"],
        hidden=", ".join(hidden) or None,
        citations_from=facts.get("citations_from"),
        hops=len(row.trace.hops),
        cited_hops="; ".join(parts) or None,
        cited_unprompted=(not unprompted) if assessed else None,
        hop_counts=";".join(counts) or None,
        tokens=facts.get("tokens"),
        latency_ms=facts.get("latency_ms"),
        unprompted=unprompted,
    )


def check_row(row: LogRow) -> dict[str, Any]:
    """The four checks and the counts the metrics read, for one row (and a trace row's hop facts)."""
    out = _output(row)
    bodies = {p.id: p.text for p in row.passages}
    titles = {p.id: p.title for p in row.passages}
    case = SimpleNamespace(question=row.question, gold_answer=None, must_abstain=False)
    counts = (0, 0, []) if row.abstained else coverage_counts(out, bodies)
    grounding = None
    if row.prompt is not None or row.model_was_called is False:
        grounding = check_grounding_isolation(case, out, bodies, titles=titles)
    results = {
        "prompt_grounding": grounding,
        "citation_resolvability": check_citation_resolvability(out, bodies),
        "citation_coverage": check_citation_coverage(out, bodies, counts=counts),
        "fail_closed": check_fail_closed(case, out),
    }
    hidden = row.trace.hidden if row.trace else ()
    results = {k: None if any(h in hidden for h in NEEDS[k]) else r for k, r in results.items()}
    if "answer" in hidden or "passages" in hidden:
        counts = (0, 0, [])
    hops = hop_facts(row)
    unprompted = hops.pop("unprompted", [])
    reasons = [f"{name}: {why}" for name, r in results.items() if r is not None and not r[0] for why in [r[1]]]
    if hops["cited_unprompted"] is False:
        reasons.append(
            f"cited_unprompted: cited document(s) {', '.join(unprompted)} were retrieved but never reached the prompt"
        )
    answered = not row.abstained and "answer" not in hidden
    return dict(
        row_id=row.id,
        line=row.line,
        digest=content_digest(row),
        timestamp=row.timestamp,
        answered=answered,
        abstained=row.abstained and "answer" not in hidden,
        model_called=row.model_was_called
        if row.model_was_called is not None
        else (True if row.prompt is not None else None),
        citations=len(row.citations),
        sentences=counts[1],
        covered=counts[0],
        **{name: None if r is None else r[0] for name, r in results.items()},
        passed=not reasons,
        fail_reasons=sys.intern("; ".join(reasons)) if reasons else None,
        **NOT_JUDGED,
        **hops,
    )


def check_rows(rows: Sequence[LogRow], slice_columns: Sequence[str]) -> pd.DataFrame:
    """One row per log row: ``ROW_COLUMNS``, then each slice column (text, "(none)" where the row has none)."""
    checked = [check_row(r) for r in rows]
    out = frame(checked, ROW_COLUMNS)
    for name in slice_columns:
        out[name] = pd.Categorical([r.slices.get(name, NONE_GROUP) for r in rows])
    return out


def sample_rows(rows: pd.DataFrame, size: int | None, seed: int, by: Sequence[str]) -> pd.DataFrame:
    """Mark ``sampled`` and ``stratum`` on the answered rows the judge grades: all of them when ``size``
    is None or at least their number, else a uniform random ``size`` of them, stratified by the ``by``
    columns (each stratum gets its proportional share, remainders to the largest fractions, at least one)."""
    rows = rows.copy()
    answered = rows.index[rows["answered"].to_numpy()]
    strata = _strata(rows.loc[answered], by)
    rows["stratum"] = None
    rows.loc[answered, "stratum"] = strata
    if size is None or size >= len(answered):
        rows.loc[answered, "sampled"] = True
        return rows
    rng = np.random.default_rng(seed)
    groups = pd.Series(np.arange(len(answered)), index=answered).groupby(strata.to_numpy())
    sizes = {h: len(g) for h, g in groups}
    quota = allocate(sizes, size)
    picked = [g.index.to_numpy()[rng.choice(len(g), quota[h], replace=False)] for h, g in groups if quota[h]]
    rows.loc[np.concatenate(picked) if picked else [], "sampled"] = True
    return rows


def _strata(rows: pd.DataFrame, by: Sequence[str]) -> pd.Series:
    if not by:
        return pd.Series(["(all)"] * len(rows), index=rows.index, dtype=object)
    return functools.reduce(lambda a, b: a + " | " + b, [rows[c].astype(str) for c in by]).astype(object)


def allocate(sizes: Mapping[str, int], total: int) -> dict[str, int]:
    """Proportional allocation of ``total`` over strata (largest remainder), each stratum at least one
    when the total allows, never more than its size."""
    whole = sum(sizes.values())
    exact = {h: total * n / whole for h, n in sizes.items()}
    quota = {h: min(sizes[h], max(1 if total >= len(sizes) else 0, math.floor(x))) for h, x in exact.items()}
    for h in sorted(exact, key=lambda k: exact[k] - math.floor(exact[k]), reverse=True):
        if sum(quota.values()) >= total:
            break
        if quota[h] < sizes[h]:
            quota[h] += 1
    while sum(quota.values()) > total:  # the at-least-one rule overshot: take from the largest
        h = max(quota, key=lambda k: quota[k])
        quota[h] -= 1
    return quota


def sample_case(row: LogRow) -> GoldenCase:
    """A judged row as the case a run holds: no gold answer, no gold passages."""
    case = GoldenCase(
        id=row.id,
        question=row.question,
        sources=row.passages,
        gold_answer=None,
        gold_source_ids=(),
        **LABELLED_CASE,
        file="",
        line=row.line,
    )
    return replace(case, fingerprint=case_fingerprint(case.to_raw()))


def judge_sample(rows: Sequence[LogRow], judge: JudgeClient, meta: RunMeta, root: str) -> RunResult:
    """The judged rows scored as a run (checks, judge, outcomes). Answer correctness needs gold: its
    verdicts are left out of the monitor's figures (``judge_columns``)."""
    cases = tuple(sample_case(r) for r in rows)
    outputs = frame([output_row(r.id, _output(r), None, 0.0) for r in rows], OUTPUT_SCHEMA)
    return score_outputs(Suite(cases, root), outputs, judge, meta=meta)


def judge_columns(rows: pd.DataFrame, run: RunResult) -> pd.DataFrame:
    """The row frame with ``faithfulness`` and ``citation_correctness`` (the effective judge score: an
    invalid verdict or a judge error counts 0, citations take the weakest) for every judged row."""
    rows = rows.copy()
    scores = effective_scores(run.verdicts)
    ids = rows["row_id"].tolist()
    for axis in ("faithfulness", "citation_correctness"):
        rows[axis] = pd.array([scores.get((rid, axis)) for rid in ids], dtype="Int64")
    return rows
