"""From outputs to a scored run: every scoring layer, the per-case outcome rules, then the scoreboard.

``score_outputs(suite, outputs, judge)`` returns a ``RunResult`` holding one DataFrame per layer, the
per-case frame that joins them, the per-case metric units, the scoreboard and the per-slice frame.
Calling the system is ``qaeval.pipeline``'s business; this module is pure apart from the judge call.

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

import platform
import subprocess
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field, fields, replace
from datetime import datetime, timezone
from functools import partial
from typing import Any

import pandas as pd

from qaeval.data.cases import Suite
from qaeval.data.corpus import Passage
from qaeval.errors import TierOneFailed, UsageError
from qaeval.forked import Beside, Pieces
from qaeval.frames import RowsByKey, frame, text_frame
from qaeval.judges.offline import grades_in_a_copy
from qaeval.results import Result
from qaeval.scoring import checks as layer1
from qaeval.scoring.custom import CUSTOM_SCHEMA, Registered
from qaeval.scoring.judge import JudgeClient, JudgeConfig, choose_decoys, judge_config_of, score_with_judge
from qaeval.scoring.metrics import METRICS, Metric, format_scoreboard, scoreboard_and_slices
from qaeval.scoring.retrieval import score_retrieval, unknown_ids_note
from qaeval.scoring.outcomes import PASS_MEANS, case_outcomes, passing_line, reasons_text
from qaeval.scoring.trajectory import score_trajectories
from qaeval.text import one_line


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
    k: int = 5
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

        return cls(created=datetime.now(timezone.utc).isoformat(timespec="milliseconds"), git_commit=git_commit(),
                   qaeval_version=__version__, python=platform.python_version(), **fields)


# --------------------------------------------------------------------------- the result


@dataclass(repr=False)
class RunResult(Result):
    """Everything one evaluation produced. Every attribute that is a table is a DataFrame.

    ``ok`` (verdict GREEN) when tier 1 holds: every deterministic check green and no adapter error.
    ``qaeval run`` still exits 0 when it does not: a run reports, the gate decides.
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
    custom: pd.DataFrame = field(default_factory=lambda: frame([], CUSTOM_SCHEMA))  # registered checks, metrics
    registered: Registered = Registered()

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
        return METRICS + self.registered.all_metrics()

    @property
    def tier_one_failures(self) -> list[str]:
        """Case ids with an adapter error, a failing deterministic check or a failing tier-1 registered check."""
        pc, c = self.per_case, self.custom
        blocked = set(c.loc[c["blocks"] & ~c["passed"], "case_id"])
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
        """"10 of 15 cases pass; answer correctness is not gated" (``outcomes.passing_line``)."""
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
        return int(self.outputs["error"].notna().sum())

    @property
    def judge_usage(self) -> dict[str, int]:
        """Judge cost of this run: verdict calls (one per answered case), how many the cache answered,
        how many failed, and the prompt and completion tokens spent (cache hits spend none)."""
        per_call = self.verdicts.drop_duplicates("case_id")
        cached = per_call["cached"].astype(bool)
        spent = per_call[~cached]
        return dict(
            calls=int(len(per_call)), cached=int(cached.sum()), errors=int(per_call["error"].notna().sum()),
            prompt_tokens=int(spent["prompt_tokens"].fillna(0).sum()),
            completion_tokens=int(spent["completion_tokens"].fillna(0).sum()),
        )

    def failing_cases(self) -> pd.DataFrame:
        """Cases that did not pass: why, the answer beside the gold answer and the cited sources' text.
        Shown in full (wrapped, not cut) in a notebook."""
        failing = self.per_case[~self.per_case["case_passed"]]
        outs = RowsByKey(self.outputs)
        by_key = {(c.id, pid): text for c in self.suite if c.id in set(failing["case_id"])
                  for pid, text in layer1.case_bodies(c, outs[c.id], self.suite.corpus).items()}
        rows = [dict(
            case_id=r["case_id"], why=reasons_text(r["fail_reasons"]),
            answer="(abstained)" if r["abstained"] else r["answer"],
            gold_answer=r["gold_answer"] if r["gold_answer"] is not None else "(must abstain)",
            cited="\n".join(f"[{c['source_id']}] {by_key.get((r['case_id'], c['source_id']), '(not in the fixture)')}"
                            for c in r["citations"]),
        ) for r in failing.to_dict("records")]
        return text_frame(frame(rows, {"case_id": "text", "why": "text", "answer": "text", "gold_answer": "text",
                                       "cited": "text"}), empty="No case fails.")

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
            *self._failing_lines(),
            f"judge calls: {usage['calls']} ({usage['cached']} from cache, {usage['errors']} errors), "
            f"tokens spent: {usage['prompt_tokens']} prompt + {usage['completion_tokens']} completion",
        ]
        lines += [f"note: {n}" for n in [*self.notes, *unknown_ids_note(self.suite, self.outputs)]]
        return "\n".join(lines)

    SHOWN_FAILING = 5

    def _failing_lines(self) -> list[str]:
        """The first failing cases and why, for the terminal (the rest are in the record and the report)."""
        failing = self.per_case.loc[~self.per_case["case_passed"].astype(bool)]
        first = failing.head(self.SHOWN_FAILING)
        whys = [reasons_text(reasons) for reasons in first["fail_reasons"].tolist()]
        lines = [f"  {one_line(cid)}: {one_line(why if len(why) <= 160 else why[:157] + '...')}"
                 for cid, why in zip(first["case_id"].tolist(), whys)]
        if len(failing) > self.SHOWN_FAILING:
            lines.append(f"  ... and {len(failing) - self.SHOWN_FAILING} more, every one in the HTML report (--html "
                         "PATH, or qaeval report RECORD --html PATH) and in .failing_cases()")
        return lines

    def with_labels(self, labels: pd.DataFrame | None) -> RunResult:
        """This run with prediction-powered estimates from human labels on its scoreboard."""
        from qaeval.scoring.ppi import apply_ppi

        if labels is None:
            return self
        board, notes = apply_ppi(self.scoreboard, self.units, self.per_case, labels)
        return replace(self, scoreboard=board, labels=labels, notes=self.notes + notes)


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
        named = [*(case.gold_source_ids if case.from_corpus else ()), *((out or {}).get("retrieved_ids") or ()),
                 *(c["source_id"] for c in (out or {}).get("citations") or ()),
                 *(p["id"] for p in (out or {}).get("passages") or ())]
        for pid in named:
            if pid not in kept and (passage := corpus.get(pid)) is not None:
                kept[pid] = passage
    return kept


def used_sources(suite: Suite, outputs: pd.DataFrame, sources: pd.DataFrame) -> pd.DataFrame:
    """``sources`` (``Suite.sources_frame()``) plus, per case, the passages its output used that its
    sources do not hold (from the system's ``passages``, else the corpus): what the judge grades against."""
    outs = RowsByKey(outputs)
    rows = []
    for case in suite:
        out = outs[case.id] if case.id in outs else None
        if out is None or not (out["passages"] or (suite.corpus is not None and out["retrieved_ids"])):
            continue
        own = {s.id for s in case.sources}
        held: dict[str, tuple[str, str | None, str]] = {}
        if suite.corpus is not None:
            layer1.add_from_corpus(held, out, suite.corpus)
        bodies, titles = layer1.used_passages(held, out)
        rows += [(case.id, pid, titles.get(pid), text, pid in case.gold_source_ids)
                 for pid, text in bodies.items() if pid not in own]
    if not rows:
        return sources
    extra = pd.DataFrame(rows, columns=["case_id", "source_id", "title", "text", "is_gold"], dtype=object)
    extra["is_gold"] = extra["is_gold"].astype(bool)
    return pd.concat([sources, extra], ignore_index=True)


def score_outputs(suite: Suite, outputs: pd.DataFrame, judge: JudgeClient, *, meta: RunMeta | None = None,
                  k: int | None = None, bootstrap_seed: int = 0, custom: Any = None) -> RunResult:
    """Score outputs that were already collected (pure apart from the judge call and the registered
    checks and metrics, run by ``custom``: ``qaeval.judges.custom.make_custom``)."""
    config = judge_config_of(judge)
    meta = meta or RunMeta.now(adapter="(outputs given)", judge=config, isolation="none", k=k or 5, data=suite.root)
    if k is not None:
        meta = replace(meta, k=k)
    _one_output_per_case(suite, outputs)
    # Scoring is shared with a forked copy of this process (qaeval.forked: the same frames, from
    # whichever process gives them; all here when forking is not safe).
    if grades_in_a_copy(judge) and custom is None:
        return _score_in_shares(suite, meta, outputs, judge, bootstrap_seed)
    cases, sources = suite.to_frame(), suite.sources_frame()
    judged = used_sources(suite, outputs, sources)
    # Any other judge is asked here while the copy runs the deterministic checks; the copy first chooses
    # the hardest decoys of every other case, while this process chooses the rest.
    ids = cases["case_id"].tolist()
    with Beside(layer1.checks_and_coverage, cases, outputs, sources, suite.corpus, rows=len(cases),
                first=partial(choose_decoys, outputs, judged, frozenset(ids[1::2]))) as later:
        retrieval = score_retrieval(cases, outputs, k=meta.k)
        decoys = choose_decoys(outputs, judged, frozenset(ids[0::2]))
        decoys.update(later.first_value())
        verdicts = score_with_judge(judge, cases, outputs, judged, decoys)
        trajectory = score_trajectories(cases, outputs)
        checks, coverage = later.result()
    if later.forked:
        layer1.adopt_coverage(coverage)  # the outcomes ask for the coverage the child computed
    return assemble(suite, meta, outputs, checks, retrieval, verdicts, trajectory, bootstrap_seed=bootstrap_seed,
                    runner=custom)


def _one_output_per_case(suite: Suite, outputs: pd.DataFrame) -> None:
    """Outputs to score name every case of the suite once and nothing else (a UsageError says how not)."""
    ids = outputs["case_id"].tolist() if "case_id" in outputs else []
    wanted = [case.id for case in suite]
    if len(ids) == len(wanted) and set(ids) == set(wanted):
        return
    given, known = set(ids), set(wanted)
    found = (("case(s) without an output", [cid for cid in wanted if cid not in given]),
             ("output(s) for cases not in the suite", [cid for cid in dict.fromkeys(ids) if cid not in known]),
             ("case(s) with more than one output", [cid for cid, n in Counter(ids).items() if n > 1]))
    problems = [f"{len(which)} {what} (first: {which[0]!r})" for what, which in found if which]
    raise UsageError("the outputs do not match the suite: " + "; ".join(problems or ["no case_id column"]))


@dataclass(frozen=True)
class _Share:
    """Every per-case frame of some of the cases."""

    checks: pd.DataFrame
    verdicts: pd.DataFrame
    retrieval: pd.DataFrame
    trajectory: pd.DataFrame
    per_case: pd.DataFrame
    units: pd.DataFrame


def _score_share(suite: Suite, judge: JudgeClient, template: frozenset[tuple[str, ...]], k: int,
                 outputs: pd.DataFrame) -> _Share:
    """Score some of the cases (``suite`` and ``outputs`` hold theirs alone) through every layer to their
    outcome: each case's rows depend on that case alone, and on the whole run's prompt ``template``."""
    cases, sources = suite.to_frame(), suite.sources_frame()
    checks = layer1.check_outputs(cases, outputs, sources, suite.corpus, template=template)
    verdicts = score_with_judge(judge, cases, outputs, used_sources(suite, outputs, sources))
    retrieval, trajectory = score_retrieval(cases, outputs, k=k), score_trajectories(cases, outputs)
    per_case, units, _, _ = case_outcomes(suite, outputs, checks, retrieval, verdicts, trajectory)
    return _Share(checks, verdicts, retrieval, trajectory, per_case, units)


SMALLEST_SHARE = 250


def share_spans(cases: int, processes: int = 2) -> list[tuple[int, int]]:
    """Runs of case positions, the largest first: each a quarter of the cases left (for two processes),
    none smaller than a fortieth of all or ``SMALLEST_SHARE`` cases (a share costs a few milliseconds
    of frames), unless that is more than a quarter of all; so the two processes start on large shares
    and end on small ones, and finish together whichever turns out slower."""
    smallest = max(cases // 40, min(SMALLEST_SHARE, cases // 4), 1)
    spans, start = [], 0
    while start < cases:
        size = max(smallest, -(-(cases - start) // (2 * processes)))
        spans.append((start, min(cases, start + size)))
        start += size
    return spans


def _rows_by_share(df: pd.DataFrame, share_of: dict[str, int], count: int) -> list[Any]:
    """The positions of ``df``'s rows of each share's cases, in ``df``'s order."""
    import numpy as np

    shares = np.fromiter((share_of[cid] for cid in df["case_id"].tolist()), dtype=np.int64, count=len(df))
    order = np.argsort(shares, kind="stable")
    bounds = np.searchsorted(shares[order], np.arange(count + 1))
    return [order[bounds[n]:bounds[n + 1]] for n in range(count)]


def _score_in_shares(suite: Suite, meta: RunMeta, outputs: pd.DataFrame, judge: JudgeClient,
                     bootstrap_seed: int) -> RunResult:
    """``score_outputs`` for a pure judge (``grades_in_a_copy``) and no registered checks or metrics: the
    cases are cut into shares (``share_spans``); this process scores the first, a forked copy the
    second, and each then takes the next share left until none is (``forked.Pieces``), so neither
    waits long for the other. Each share makes its own frames of its cases. The shares are put back in
    case order; only the prompt template and the scoreboard are computed from the whole."""
    spans = share_spans(len(suite)) or [(0, 0)]  # an empty suite is one empty share
    ids = [case.id for case in suite]
    share_of = {cid: n for n, (start, stop) in enumerate(spans) for cid in ids[start:stop]}
    output_rows = _rows_by_share(outputs, share_of, len(spans))
    sampled = Suite(tuple(suite[cid] for cid in layer1.template_sample(ids, outputs)), suite.root, suite.corpus)
    template = layer1.template_of(sampled.to_frame(), outputs, sampled.sources_frame(), suite.corpus)

    def score(n: int) -> _Share:
        start, stop = spans[n]
        return _score_share(Suite(suite.cases[start:stop], suite.root, suite.corpus), judge, template, meta.k,
                            outputs.iloc[output_rows[n]])

    def score_taken(pieces: Pieces, first: int) -> dict[int, _Share]:
        done = {first: score(first)} if first < len(spans) else {}
        while (n := pieces.take()) is not None:
            done[n] = score(n)
        return done

    with Pieces(len(spans), first=min(2, len(spans))) as pieces, \
            Beside(score_taken, pieces, 1, rows=len(suite)) as later:
        done = score_taken(pieces, 0)
        done.update(later.result())
    done.update({n: score(n) for n in range(len(spans)) if n not in done})  # what a child that failed had taken
    shares = [done[n] for n in range(len(spans))]
    by_case = {cid: n for n, cid in enumerate(ids)}
    by_output = {cid: n for n, cid in enumerate(outputs["case_id"].tolist())}  # the judge takes outputs in order
    whole = {f.name: in_order(by_output if f.name == "verdicts" else by_case, *(getattr(s, f.name) for s in shares))
             for f in fields(_Share)}
    del shares, done  # copied into the whole: not held through the scoreboard
    return assemble(suite, meta, outputs, whole["checks"], whole["retrieval"], whole["verdicts"], whole["trajectory"],
                    bootstrap_seed=bootstrap_seed, outcomes=(whole["per_case"], whole["units"]))


def in_order(order: dict[str, int], *parts: pd.DataFrame) -> pd.DataFrame:
    """Frames of disjoint cases (rows of a case together, in their order) as one frame whose cases follow
    ``order`` (case id -> place), as if one process had made it."""
    import numpy as np

    kept = [p for p in parts if len(p)] or list(parts[:1])
    whole = pd.concat(kept, ignore_index=True) if len(kept) > 1 else kept[0]
    places = np.fromiter((order[cid] for cid in whole["case_id"].tolist()), dtype=np.int64, count=len(whole))
    return whole.iloc[np.argsort(places, kind="stable")].reset_index(drop=True)


def assemble(suite: Suite, meta: RunMeta, outputs: pd.DataFrame, checks: pd.DataFrame, retrieval: pd.DataFrame,
             verdicts: pd.DataFrame, trajectory: pd.DataFrame, *, bootstrap_seed: int = 0,
             skip_scoreboard: bool = False, custom: pd.DataFrame | None = None, registered: Registered = Registered(),
             runner: Any = None, outcomes: tuple[pd.DataFrame, pd.DataFrame] | None = None) -> RunResult:
    """A RunResult from its layer frames (scoring, or reading a record back, which brings its own
    scoreboard: ``skip_scoreboard``, and its registered outcomes: ``custom``). ``outcomes``: (per_case,
    units) when they were computed already, with no registered check or metric."""
    if outcomes is None:
        per_case, units, custom, registered = case_outcomes(suite, outputs, checks, retrieval, verdicts, trajectory,
                                                            custom, registered, runner)
    else:
        (per_case, units), custom = outcomes, frame([], CUSTOM_SCHEMA)
    run = RunResult(suite=suite, meta=meta, outputs=outputs, checks=checks, retrieval=retrieval, verdicts=verdicts,
                    trajectory=trajectory, per_case=per_case, units=units, scoreboard=pd.DataFrame(),
                    slices=pd.DataFrame(), custom=custom, registered=registered)
    if skip_scoreboard:
        return run
    board, slices = scoreboard_and_slices(units, per_case, seed=bootstrap_seed, metrics=run.metrics)
    return replace(run, scoreboard=board, slices=slices)
