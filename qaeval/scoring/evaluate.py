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

import math
import platform
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

import pandas as pd

from qaeval.data.schema import CITATION_CORRECTNESS
from qaeval.data.cases import GoldenCase, Suite
from qaeval.data.corpus import Passage
from qaeval.errors import TierOneFailed
from qaeval.frames import Rows, RowsByKey, frame, is_missing, text_frame
from qaeval.results import Result
from qaeval.scoring import checks as layer1
from qaeval.scoring.custom import CUSTOM_SCHEMA, Registered, custom_reasons, custom_units, sample_to_plain
from qaeval.scoring.judge import JudgeClient, JudgeConfig, effective_scores, judge_config_of, score_with_judge
from qaeval.scoring.metrics import METRICS, CaseFacts, Metric, format_scoreboard, scoreboard_and_slices, units_frame
from qaeval.scoring.retrieval import score_retrieval
from qaeval.scoring.trajectory import score_trajectories

RETRIEVAL_FIELDS = ("recall_at_k", "precision_at_k", "mrr", "ndcg_at_k")
PER_CASE_SCHEMA = {
    "case_id": "text", "split": "text", "difficulty": "text", "expected_behavior": "text", "adversarial": "text",
    "question": "text", "gold_answer": "text", "answer": "text", "abstained": "bool", "error": "text",
    "output_fingerprint": "text", "retrieved_ids": "object", "citations": "object",
    **{c: "bool" for c in layer1.CHECKS}, "deterministic_passed": "bool",
    **{m: "float" for m in RETRIEVAL_FIELDS},
    "faithfulness": "Int64", "answer_correctness": "Int64", "citation_correctness": "Int64", "judge_error": "text",
    "trajectory_success": "boolean", "case_passed": "bool", "fail_reasons": "object",
}


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


# --------------------------------------------------------------------------- one case, step by step


@dataclass
class LayerIndex:
    checks: dict[str, dict[str, tuple[bool, str]]] = field(default_factory=dict)
    retrieval: dict[str, dict[str, float]] = field(default_factory=dict)
    scores: dict[tuple[str, str], int] = field(default_factory=dict)
    judge_errors: dict[str, str] = field(default_factory=dict)
    supported: dict[tuple[str, str], bool] = field(default_factory=dict)
    trajectory: dict[str, bool] = field(default_factory=dict)
    trajectory_failures: dict[str, list[str]] = field(default_factory=dict)
    custom: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # registered checks and metrics


def index_layers(checks: pd.DataFrame, retrieval: pd.DataFrame, verdicts: pd.DataFrame,
                 trajectory: pd.DataFrame) -> LayerIndex:
    idx = LayerIndex()
    for cid, check, passed, reason in zip(checks["case_id"], checks["check"], checks["passed"], checks["reason"]):
        idx.checks.setdefault(cid, {})[check] = (bool(passed), reason)
    for row in RowsByKey(retrieval):
        idx.retrieval[row["case_id"]] = {m: row[m] for m in RETRIEVAL_FIELDS}
    idx.scores = effective_scores(verdicts)
    for cid, error in zip(verdicts["case_id"], verdicts["error"]):
        if not is_missing(error):
            idx.judge_errors.setdefault(cid, error)
    for cid, axis, target, valid, score in zip(verdicts["case_id"], verdicts["axis"], verdicts["target"],
                                               verdicts["valid"], verdicts["score"]):
        if axis == CITATION_CORRECTNESS:
            idx.supported[(cid, target)] = bool(valid) and not is_missing(score) and int(score) >= 1
    for cid, passed, success, description, detail in zip(trajectory["case_id"], trajectory["passed"],
                                                          trajectory["success"], trajectory["description"],
                                                          trajectory["detail"]):
        idx.trajectory[cid] = bool(success)
        if not passed:
            idx.trajectory_failures.setdefault(cid, []).append(f"{description}: {detail}")
    return idx


def case_facts(case: GoldenCase, out: Mapping[str, Any], idx: LayerIndex, bodies: Mapping[str, str]) -> CaseFacts:
    failed = not is_missing(out["error"])
    answered = not failed and not out["abstained"]
    citations = list(out["citations"]) if answered else []
    retrieved = set(out["retrieved_ids"])
    good = sum(1 for c in citations if c["source_id"] in retrieved and c["source_id"] in bodies
               and idx.supported.get((case.id, c["source_id"]), False))
    covered, sentences, _ = layer1.coverage_counts(out, bodies) if answered else (0, 0, [])
    retr = idx.retrieval.get(case.id)
    return CaseFacts(
        answered=answered, abstained=not failed and bool(out["abstained"]), must_abstain=case.must_abstain,
        deterministic_passed=all(p for p, _ in idx.checks[case.id].values()),
        faithfulness=idx.scores.get((case.id, "faithfulness")),
        answer_correctness=idx.scores.get((case.id, "answer_correctness")),
        citations=len(citations), good_citations=good, sentences=sentences, covered_sentences=covered,
        has_gold_sources=retr is not None, recall_at_k=retr["recall_at_k"] if retr else math.nan,
        mrr=retr["mrr"] if retr else math.nan, multi_step=case.multi_step,
        trajectory_success=case.multi_step and idx.trajectory.get(case.id, False),
    )


def fail_reasons(case: GoldenCase, out: Mapping[str, Any], facts: CaseFacts, idx: LayerIndex) -> list[str]:
    if not is_missing(out["error"]):
        return [f"adapter error: {out['error']}"]
    reasons = [f"{check}: {reason}" for check, (passed, reason) in idx.checks[case.id].items() if not passed]
    if facts.abstained and not case.must_abstain:
        reasons.append("wrongly abstained")
    if facts.answered and case.id in idx.judge_errors:
        reasons.append(f"judge error: {idx.judge_errors[case.id]}")
    elif facts.answered and facts.faithfulness is not None and facts.faithfulness < 2:
        reasons.append(f"judged unfaithful (score {facts.faithfulness})")
    if case.multi_step and not facts.trajectory_success:
        reasons.append("trajectory failed (" + ", ".join(idx.trajectory_failures.get(case.id, [])) + ")")
    return reasons + custom_reasons(idx.custom.get(case.id, []))


def per_case_row(case: GoldenCase, out: Mapping[str, Any], facts: CaseFacts, idx: LayerIndex,
                 reasons: list[str]) -> dict[str, Any]:
    retr = idx.retrieval.get(case.id) or {}
    return dict(
        case_id=case.id, split=case.split, difficulty=case.difficulty, expected_behavior=case.expected_behavior,
        adversarial=case.adversarial, question=case.question, gold_answer=case.gold_answer, answer=out["answer"],
        abstained=bool(out["abstained"]), error=out["error"], output_fingerprint=out["output_fingerprint"],
        retrieved_ids=out["retrieved_ids"], citations=out["citations"],
        **{check: idx.checks[case.id].get(check, (True, ""))[0] for check in layer1.CHECKS},  # absent: older record
        deterministic_passed=facts.deterministic_passed,
        **{m: retr.get(m, math.nan) for m in RETRIEVAL_FIELDS},
        faithfulness=facts.faithfulness, answer_correctness=facts.answer_correctness,
        citation_correctness=idx.scores.get((case.id, CITATION_CORRECTNESS)),
        judge_error=idx.judge_errors.get(case.id),
        trajectory_success=facts.trajectory_success if case.multi_step else None,
        case_passed=not reasons, fail_reasons=reasons,
        **{r["name"]: r["passed"] for r in idx.custom.get(case.id, []) if r["kind"] == "check"},
    )


def case_outcomes(suite: Suite, outputs: pd.DataFrame, checks: pd.DataFrame, retrieval: pd.DataFrame,
                  verdicts: pd.DataFrame, trajectory: pd.DataFrame, custom: pd.DataFrame | None = None,
                  registered: Registered = Registered(), runner: Any = None,
                  ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, Registered]:
    """(per_case, units, custom, registered): one row per case joining every layer, its share of every
    metric, and the outcomes of the registered checks and metrics (``custom``, as stored, or run now by
    ``runner``: ``qaeval.judges.custom``) with what ran.

    per_case columns: the case's labels (case_id, split, difficulty, expected_behavior, adversarial,
    question, gold_answer); the output (answer, abstained, error, output_fingerprint, retrieved_ids,
    citations); one bool column per deterministic check and ``deterministic_passed``; recall_at_k,
    precision_at_k, mrr, ndcg_at_k (NaN without gold sources); faithfulness, answer_correctness,
    citation_correctness (the effective judge score 0/1/2, <NA> when the case was not judged);
    judge_error; trajectory_success (<NA> for single-hop); case_passed and fail_reasons (a list); then
    one bool column per registered check.
    """
    idx = index_layers(checks, retrieval, verdicts, trajectory)
    outs = RowsByKey(outputs)
    facts, samples = [], []
    for case in suite:
        out = outs[case.id]
        bodies = layer1.case_bodies(case, out, suite.corpus)
        facts.append(case_facts(case, out, idx, bodies))
        if runner is not None:
            samples.append((case.id, sample_to_plain(case, out, bodies, facts[-1])))
    if runner is not None:
        custom, registered = frame(runner.score(samples), CUSTOM_SCHEMA), runner.registered
    custom = custom if custom is not None else frame([], CUSTOM_SCHEMA)
    for row in custom.to_dict("records"):
        idx.custom.setdefault(row["case_id"], []).append(row)
    rows = Rows({**PER_CASE_SCHEMA, **{c.name: "bool" for c in registered.checks}})
    for case, f in zip(suite, facts):
        out = outs[case.id]
        rows.add(**per_case_row(case, out, f, idx, fail_reasons(case, out, f, idx)))
    ids = [c.id for c in suite]
    return rows.frame(), units_frame(ids, facts, custom_units(idx.custom, registered, ids)), custom, registered


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
        passed = int(self.per_case["case_passed"].sum())
        head = f"{passed}/{len(self.per_case)} cases pass"
        bad = self.tier_one_failures
        if bad:
            return f"tier 1 fails on {len(bad)} case(s): {', '.join(bad[:6])}{' ...' if len(bad) > 6 else ''}; {head}"
        kinds = "deterministic and tier-1" if self.registered.checks else "deterministic"
        return f"every {kinds} check green, no adapter error; {head}"

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
            case_id=r["case_id"], why="; ".join(r["fail_reasons"]),
            answer="(abstained)" if r["abstained"] else r["answer"],
            gold_answer=r["gold_answer"] if r["gold_answer"] is not None else "(must abstain)",
            cited="\n".join(f"[{c['source_id']}] {by_key.get((r['case_id'], c['source_id']), '(not in the fixture)')}"
                            for c in r["citations"]),
        ) for r in failing.to_dict("records")]
        return text_frame(frame(rows, {"case_id": "text", "why": "text", "answer": "text", "gold_answer": "text",
                                       "cited": "text"}))

    def summary_text(self) -> str:
        usage = self.judge_usage
        passed = int(self.per_case["case_passed"].sum())
        lines = [f"qaeval run: {len(self.suite)} cases from {self.suite.root}  adapter={self.adapter}"]
        if not self.meta.boundary_enforced:
            lines.append("WARNING: isolation none: the boundary was NOT enforced (the adapter ran inside the harness)")
        lines += [
            f"judge: {self.judge_config.label()}",
            "",
            format_scoreboard(self.scoreboard),
            "",
            f"TIER 1: {self.verdict}   cases passing: {passed}/{len(self.per_case)}   "
            f"adapter errors: {self.adapter_errors}",
            f"judge calls: {usage['calls']} ({usage['cached']} from cache, {usage['errors']} errors), "
            f"tokens spent: {usage['prompt_tokens']} prompt + {usage['completion_tokens']} completion",
        ]
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)

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
    cases, sources = suite.to_frame(), suite.sources_frame()
    checks = layer1.check_outputs(cases, outputs, sources, suite.corpus)
    retrieval = score_retrieval(cases, outputs, k=meta.k)
    verdicts = score_with_judge(judge, cases, outputs, used_sources(suite, outputs, sources))
    trajectory = score_trajectories(cases, outputs)
    return assemble(suite, meta, outputs, checks, retrieval, verdicts, trajectory, bootstrap_seed=bootstrap_seed,
                    runner=custom)


def assemble(suite: Suite, meta: RunMeta, outputs: pd.DataFrame, checks: pd.DataFrame, retrieval: pd.DataFrame,
             verdicts: pd.DataFrame, trajectory: pd.DataFrame, *, bootstrap_seed: int = 0,
             skip_scoreboard: bool = False, custom: pd.DataFrame | None = None, registered: Registered = Registered(),
             runner: Any = None) -> RunResult:
    """A RunResult from its layer frames (scoring, or reading a record back, which brings its own
    scoreboard: ``skip_scoreboard``, and its registered outcomes: ``custom``)."""
    per_case, units, custom, registered = case_outcomes(suite, outputs, checks, retrieval, verdicts, trajectory,
                                                        custom, registered, runner)
    run = RunResult(suite=suite, meta=meta, outputs=outputs, checks=checks, retrieval=retrieval, verdicts=verdicts,
                    trajectory=trajectory, per_case=per_case, units=units, scoreboard=pd.DataFrame(),
                    slices=pd.DataFrame(), custom=custom, registered=registered)
    if skip_scoreboard:
        return run
    board, slices = scoreboard_and_slices(units, per_case, seed=bootstrap_seed, metrics=run.metrics)
    return replace(run, scoreboard=board, slices=slices)
