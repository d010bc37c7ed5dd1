"""Layer 1: deterministic trust checks. No model, cheap enough for every commit.

``check_outputs(cases, outputs)`` returns one row per (case, check) with columns
``case_id, check, passed, reason``. The four checks:

grounding_isolation
    When a model was called, its recorded prompt must exist and carry the question, and the gold
    answer may appear in it only inside the bodies of retrieved snippets. The detector removes the
    question and every retrieved snippet body from the prompt, then looks for the normalised gold
    answer (word-bounded) in what is left. It is a leak detector for the oracle string and exactly that:
    it cannot see a paraphrased leak, and a gold answer that is a very common word can trip it.
citation_resolvability
    Every citation names a snippet the system retrieved (and that exists in the case's fixture).
citation_coverage
    Every load-bearing answer sentence carries a resolvable citation whose claim covers it. Answers
    are split with ``qaeval.text.split_sentences``. A sentence is load-bearing when it has at least two
    content words (so "In short:" is not). A claim covers a sentence when, normalised, either contains
    the other, or at least 60% of the sentence's content words occur in the claim.
fail_closed_abstention
    A must-abstain case is abstained on; a case with nothing retrieved calls no model and gives no
    answer.

An adapter error fails every check of its case, with the error as the reason.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from qaeval.cases import snippet_bodies
from qaeval.text import content_terms, normalize, split_sentences

CHECKS = ("grounding_isolation", "citation_resolvability", "citation_coverage", "fail_closed_abstention")
CHECK_COLUMNS = ["case_id", "check", "passed", "reason"]
COVERAGE_OVERLAP = 0.6


def _strip(text: str, pieces: list[str]) -> str:
    out = normalize(text)
    for piece in sorted((normalize(p) for p in pieces), key=len, reverse=True):
        if piece:
            out = out.replace(piece, " ")
    return f" {' '.join(out.split())} "


def check_grounding_isolation(case: Any, out: dict[str, Any], bodies: dict[str, str]) -> tuple[bool, str]:
    if not out["model_was_called"]:
        return True, "no model call"
    prompt = out["prompt_to_model"]
    if not prompt:
        return False, "a model was called but no prompt was recorded, so isolation cannot be verified"
    if normalize(case.question) not in normalize(prompt):
        return False, "the prompt does not carry the question"
    if case.gold_answer:
        retrieved_bodies = [bodies[r] for r in out["retrieved_ids"] if r in bodies]
        rest = _strip(prompt, [case.question, *retrieved_bodies])
        gold = normalize(case.gold_answer)
        if gold and f" {gold} " in rest:
            return False, f"gold answer {case.gold_answer!r} appears in the prompt outside the retrieved snippets"
    return True, "prompt carries the question; no gold answer outside retrieved context"


def _resolvable(out: dict[str, Any], bodies: dict[str, str]) -> list[dict[str, str]]:
    retrieved = set(out["retrieved_ids"])
    return [c for c in out["citations"] if c["snippet_id"] in retrieved and c["snippet_id"] in bodies]


def check_citation_resolvability(out: dict[str, Any], bodies: dict[str, str]) -> tuple[bool, str]:
    retrieved = set(out["retrieved_ids"])
    bad = []
    for c in out["citations"]:
        if c["snippet_id"] not in bodies:
            bad.append(f"{c['snippet_id']} (not in the fixture)")
        elif c["snippet_id"] not in retrieved:
            bad.append(f"{c['snippet_id']} (never retrieved)")
    if bad:
        return False, "unresolvable citation: " + ", ".join(bad)
    return True, f"{len(out['citations'])} citation(s) resolve"


def is_load_bearing(sentence: str) -> bool:
    return len(content_terms(sentence)) >= 2


def claim_covers(claim: str, sentence: str) -> bool:
    c, s = normalize(claim), normalize(sentence)
    if not c or not s:
        return False
    if c in s or s in c:
        return True
    s_terms = set(content_terms(sentence))
    return bool(s_terms) and len(s_terms & set(content_terms(claim))) / len(s_terms) >= COVERAGE_OVERLAP


def coverage_counts(out: dict[str, Any], bodies: dict[str, str]) -> tuple[int, int, list[str]]:
    """(covered, load-bearing, uncovered sentences) for an answered output."""
    claims = [c["claim"] for c in _resolvable(out, bodies)]
    sentences = [s for s in split_sentences(out["answer"]) if is_load_bearing(s)]
    uncovered = [s for s in sentences if not any(claim_covers(cl, s) for cl in claims)]
    return len(sentences) - len(uncovered), len(sentences), uncovered


def check_citation_coverage(out: dict[str, Any], bodies: dict[str, str]) -> tuple[bool, str]:
    if out["abstained"]:
        return True, "abstained: nothing to cover"
    covered, total, uncovered = coverage_counts(out, bodies)
    if total == 0:
        return False, "the answer has no load-bearing sentence"
    if uncovered:
        return False, f"{len(uncovered)} of {total} sentence(s) uncited, first: {uncovered[0][:80]!r}"
    return True, f"{covered} of {total} sentence(s) cited"


def check_fail_closed(case: Any, out: dict[str, Any]) -> tuple[bool, str]:
    problems = []
    if case.must_abstain and not out["abstained"]:
        problems.append("must abstain but answered")
    if not out["retrieved_ids"]:
        if out["model_was_called"]:
            problems.append("called the model with nothing retrieved")
        if not out["abstained"]:
            problems.append("answered with nothing retrieved")
    if problems:
        return False, "; ".join(problems)
    return True, "abstained as required" if case.must_abstain else "ok"


def check_outputs(cases: pd.DataFrame, outputs: pd.DataFrame, sources: pd.DataFrame) -> pd.DataFrame:
    """Run the four deterministic checks.

    ``cases`` is ``Suite.to_frame()``, ``outputs`` the runner's frame, ``sources`` is
    ``Suite.sources_frame()``. Returns one row per (case, check): case_id, check, passed (bool),
    reason (str).
    """
    bodies_by_case = snippet_bodies(sources)
    outs = {row["case_id"]: row for row in outputs.to_dict("records")}
    rows = []
    for case in cases.itertuples(index=False):
        out = outs[case.id]
        if out["error"]:
            reason = f"adapter error: {out['error']}"
            rows.extend((case.id, check, False, reason) for check in CHECKS)
            continue
        bodies = bodies_by_case.get(case.id, {})
        results = (
            check_grounding_isolation(case, out, bodies),
            check_citation_resolvability(out, bodies),
            check_citation_coverage(out, bodies),
            check_fail_closed(case, out),
        )
        rows.extend((case.id, check, ok, why) for check, (ok, why) in zip(CHECKS, results))
    return pd.DataFrame(rows, columns=CHECK_COLUMNS)
