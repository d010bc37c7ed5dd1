"""The edge that runs everything: adapter over the suite, then every scoring layer, then the scoreboard.

``evaluate(suite, adapter, judge)`` returns a ``RunResult`` holding one DataFrame per layer, the
per-case wide frame that joins them, the scoreboard and the per-slice frame.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from qaeval import checks as layer1
from qaeval.cases import Suite, snippet_bodies
from qaeval.judging import JudgeClient, JudgeConfig, effective_scores, score_with_judge
from qaeval.metrics import METRIC_NAMES, bootstrap_weights, format_scoreboard, scoreboard, slices
from qaeval.retrieval import score_retrieval
from qaeval.runner import DEFAULT_TIMEOUT, run_suite
from qaeval.trajectory import score_trajectories


def case_outcomes(cases: pd.DataFrame, outputs: pd.DataFrame, sources: pd.DataFrame,
                  checks: pd.DataFrame, retrieval: pd.DataFrame, verdicts: pd.DataFrame,
                  trajectory: pd.DataFrame) -> pd.DataFrame:
    """Join every layer into one row per case.

    Columns: the case's labels (case_id, split, difficulty, expected_behavior, adversarial, question,
    gold_answer); the output (answer, abstained, error, retrieved_ids, citations); one bool column per
    deterministic check and ``deterministic_passed``; recall_at_k, precision_at_k, mrr, ndcg_at_k
    (NaN without gold sources); faithfulness, answer_correctness, citation_correctness (the effective
    judge score 0/1/2, <NA> when the case was not judged); judge_error; trajectory_success (<NA> for
    single-hop); case_passed and fail_reasons (what the gate compares case by case); and for every
    scoreboard metric ``<metric>__num`` and ``<metric>__den``, this case's share of it.

    A case passes when it has no adapter error, passes every deterministic check, is not wrongly
    abstained, was judged faithful (full credit, valid quote) when it answered, and, when multi-step,
    reached its end state through every checkpoint.
    """
    bodies = snippet_bodies(sources)
    check_passed: dict[tuple[str, str], bool] = {}
    check_failures: dict[str, list[str]] = {}
    for r in checks.itertuples(index=False):
        check_passed[(r.case_id, r.check)] = bool(r.passed)
        if not r.passed:
            check_failures.setdefault(r.case_id, []).append(f"{r.check}: {r.reason}")
    retr = {r["case_id"]: r for r in retrieval.to_dict("records")}
    eff = effective_scores(verdicts)
    eff_scores = {(r.case_id, r.axis): int(r.score) for r in eff.itertuples(index=False)}
    judge_errors = verdicts[verdicts["error"].notna()].groupby("case_id")["error"].first().to_dict()
    cite_rows = verdicts[verdicts["axis"] == "citation_correctness"]
    cite_supported = {(r.case_id, r.target): bool(r.valid and r.score is not pd.NA and r.score >= 1)
                      for r in cite_rows.itertuples(index=False)}
    traj = trajectory.groupby("case_id")["success"].first().to_dict() if not trajectory.empty else {}
    traj_fail: dict[str, list[str]] = {}
    for r in trajectory[~trajectory["passed"]].itertuples(index=False):
        traj_fail.setdefault(r.case_id, []).append(f"{r.description}: {r.detail}")
    outs = {o["case_id"]: o for o in outputs.to_dict("records")}

    rows = []
    for case in cases.itertuples(index=False):
        cid = case.id
        out = outs[cid]
        error = out["error"]
        answered = not error and not out["abstained"]
        abstained = bool(out["abstained"]) and not error
        det = {c: check_passed[(cid, c)] for c in layer1.CHECKS}
        det_passed = all(det.values())

        faith, correct, cite = (eff_scores.get((cid, a), pd.NA)
                                for a in ("faithfulness", "answer_correctness", "citation_correctness"))
        has_gold = cid in retr
        retrieved = set(out["retrieved_ids"])
        n_cites = len(out["citations"]) if answered else 0
        good_cites = sum(
            1 for c in out["citations"]
            if answered and c["snippet_id"] in retrieved and c["snippet_id"] in bodies.get(cid, {})
            and cite_supported.get((cid, c["snippet_id"]), False)
        )
        covered, sentences, _ = layer1.coverage_counts(out, bodies.get(cid, {})) if answered else (0, 0, [])
        multi = case.difficulty in ("multi-hop", "aggregation")
        success = traj.get(cid) if multi else None

        reasons = []
        if error:
            reasons.append(f"adapter error: {error}")
        else:
            reasons += check_failures.get(cid, [])
            if abstained and not case.must_abstain:
                reasons.append("wrongly abstained")
            if answered and cid in judge_errors:
                reasons.append(f"judge error: {judge_errors[cid]}")
            elif answered and faith is not pd.NA and faith < 2:
                reasons.append(f"judged unfaithful (score {faith})")
            if multi and not success:
                reasons.append("trajectory failed (" + ", ".join(traj_fail.get(cid, [])) + ")")

        row: dict[str, Any] = dict(
            case_id=cid, split=case.split, difficulty=case.difficulty,
            expected_behavior=case.expected_behavior, adversarial=case.adversarial,
            question=case.question, gold_answer=case.gold_answer, answer=out["answer"],
            abstained=bool(out["abstained"]), error=error, output_fingerprint=out["output_fingerprint"], retrieved_ids=out["retrieved_ids"],
            citations=out["citations"], **det, deterministic_passed=det_passed,
            **{m: retr[cid][m] if has_gold else np.nan
               for m in ("recall_at_k", "precision_at_k", "mrr", "ndcg_at_k")},
            faithfulness=faith, answer_correctness=correct, citation_correctness=cite,
            judge_error=judge_errors.get(cid), trajectory_success=pd.NA if success is None else bool(success),
            case_passed=not reasons, fail_reasons="; ".join(reasons),
        )
        answerable = not case.must_abstain
        units = {
            "deterministic_pass_rate": (det_passed, 1),
            "faithfulness_rate": (answered and faith is not pd.NA and faith == 2, answered),
            "answer_correctness": (answered and correct is not pd.NA and correct == 2, answerable),
            "citation_precision": (good_cites, n_cites),
            "citation_coverage": (covered, sentences),
            "abstention_recall": (abstained, case.must_abstain),
            "over_refusal_rate": (abstained, answerable),
            "retrieval_recall_at_k": (row["recall_at_k"] if has_gold else 0.0, has_gold),
            "rerank_mrr": (row["mrr"] if has_gold else 0.0, has_gold),
            "multi_step_task_success": (bool(success), multi),
        }
        for name in METRIC_NAMES:
            num, den = units[name]
            row[f"{name}__num"] = float(num) if den else 0.0
            row[f"{name}__den"] = float(den)
        rows.append(row)
    frame = pd.DataFrame(rows)
    frame["gold_answer"] = pd.Series([r["gold_answer"] for r in rows], dtype=object, index=frame.index)
    for col in ("faithfulness", "answer_correctness", "citation_correctness"):
        frame[col] = frame[col].astype("Int64")
    frame["trajectory_success"] = frame["trajectory_success"].astype("boolean")
    return frame


@dataclass
class RunResult:
    """Everything one evaluation produced. Every attribute that is a table is a DataFrame."""

    suite: Suite
    adapter: str
    judge_config: JudgeConfig
    k: int
    outputs: pd.DataFrame
    checks: pd.DataFrame
    retrieval: pd.DataFrame
    verdicts: pd.DataFrame
    trajectory: pd.DataFrame
    per_case: pd.DataFrame
    scoreboard: pd.DataFrame
    slices: pd.DataFrame
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def cases(self) -> pd.DataFrame:
        return self.suite.to_frame()

    @property
    def dataset_fingerprint(self) -> str:
        return self.suite.fingerprint

    def metric(self, name: str) -> float:
        return float(self.scoreboard.set_index("metric").at[name, "value"])

    @property
    def judge_usage(self) -> dict[str, int]:
        """Judge cost of this run: verdict calls (one per answered case), how many the cache answered,
        how many failed, and the prompt and completion tokens spent (cache hits spend none)."""
        per_call = self.verdicts.drop_duplicates("case_id")
        cached = per_call["cached"].fillna(False).astype(bool)
        spent = per_call[~cached]
        return dict(
            calls=int(len(per_call)),
            cached=int(cached.sum()),
            errors=int(per_call["error"].notna().sum()),
            prompt_tokens=int(pd.to_numeric(spent["prompt_tokens"]).fillna(0).sum()),
            completion_tokens=int(pd.to_numeric(spent["completion_tokens"]).fillna(0).sum()),
        )

    def failing_cases(self) -> pd.DataFrame:
        """Cases that did not pass, with why, the answer beside the gold answer and the cited snippet."""
        failing = self.per_case[~self.per_case["case_passed"]]
        sources = self.suite.sources_frame().set_index(["case_id", "source_id"])["text"]

        def cited_text(row: pd.Series) -> str:
            parts = []
            for c in row["citations"]:
                key = (row["case_id"], c["snippet_id"])
                parts.append(f"[{c['snippet_id']}] " + (sources.get(key, "(not in the fixture)")))
            return "\n".join(parts)

        return pd.DataFrame({
            "case_id": failing["case_id"],
            "why": failing["fail_reasons"],
            "answer": failing.apply(lambda r: "(abstained)" if r["abstained"] else r["answer"], axis=1),
            "gold_answer": failing["gold_answer"].fillna("(must abstain)"),
            "cited": failing.apply(cited_text, axis=1) if len(failing) else pd.Series(dtype=str),
        }).reset_index(drop=True)

    def summary_text(self) -> str:
        usage = self.judge_usage
        passed = int(self.per_case["case_passed"].sum())
        lines = [
            f"qaeval run: {len(self.suite)} cases from {self.suite.root}  adapter={self.adapter}",
            f"judge: {self.judge_config.label()}",
            "",
            format_scoreboard(self.scoreboard),
            "",
            f"cases passing: {passed}/{len(self.per_case)}   adapter errors: {int(self.outputs['error'].notna().sum())}",
            f"judge calls: {usage['calls']} ({usage['cached']} from cache, {usage['errors']} errors), "
            f"tokens spent: {usage['prompt_tokens']} prompt + {usage['completion_tokens']} completion",
        ]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary_text()

    def _repr_html_(self) -> str:
        from qaeval.reports import scoreboard_html

        head = html.escape(f"{len(self.suite)} cases · adapter {self.adapter} · judge {self.judge_config.label()}")
        return f"<div><p><b>qaeval run</b> — {head}</p>{scoreboard_html(self.scoreboard)}</div>"


def evaluate(suite: Suite, adapter: Any, judge: JudgeClient, *, k: int = 5, adapter_name: str = "",
             timeout: float | None = DEFAULT_TIMEOUT, show_progress: bool | None = None,
             bootstrap_seed: int = 0) -> RunResult:
    """Run the adapter over the suite and score every layer."""
    cases = suite.to_frame()
    sources = suite.sources_frame()
    outputs = run_suite(suite, adapter, timeout=timeout, show_progress=show_progress)
    return score_outputs(suite, outputs, judge, k=k, adapter_name=adapter_name or type(adapter).__name__,
                         cases=cases, sources=sources, bootstrap_seed=bootstrap_seed)


def score_outputs(suite: Suite, outputs: pd.DataFrame, judge: JudgeClient, *, k: int = 5,
                  adapter_name: str = "", cases: pd.DataFrame | None = None,
                  sources: pd.DataFrame | None = None, bootstrap_seed: int = 0) -> RunResult:
    """Score outputs that were already collected (pure apart from the judge call)."""
    cases = suite.to_frame() if cases is None else cases
    sources = suite.sources_frame() if sources is None else sources
    checks = layer1.check_outputs(cases, outputs, sources)
    retrieval = score_retrieval(cases, outputs, k=k)
    verdicts = score_with_judge(judge, cases, outputs, sources)
    trajectory = score_trajectories(cases, outputs)
    per_case = case_outcomes(cases, outputs, sources, checks, retrieval, verdicts, trajectory)
    weights = bootstrap_weights(len(per_case), seed=bootstrap_seed)
    return RunResult(
        suite=suite, adapter=adapter_name, judge_config=judge.config, k=k, outputs=outputs,
        checks=checks, retrieval=retrieval, verdicts=verdicts, trajectory=trajectory, per_case=per_case,
        scoreboard=scoreboard(per_case, weights), slices=slices(per_case, weights),
    )
