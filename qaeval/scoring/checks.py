"""Layer 1: deterministic trust checks. No model, cheap enough for every commit.

``check_outputs(cases, outputs, sources)`` returns one row per (case, check) with columns
``case_id, check, passed, reason``. The four checks:

grounding_isolation
    When a model was called, its recorded prompt must exist and carry the question; when something was
    retrieved, the prompt must carry the body of at least one retrieved source and of every cited
    source (a model cannot ground a claim in text it never saw); and the gold answer may appear in it
    only inside retrieved source bodies. Containment is tested on folded text: Unicode NFKC, invisible
    format characters (category Cf) removed, case, accents, punctuation and runs of whitespace ignored.
    The leak detector removes from the prompt the question, every retrieved source (its body, id and
    title) and the
    prompt's *template* (text it shares with most other prompts of the run: any run of four words that
    more than half of the run's prompts still contain once their own question and sources are cut out,
    learnt only when the run has at least three prompts),
    then looks for the gold answer, word-bounded, in what is left. It is a leak detector for the oracle
    string and exactly that: a paraphrased leak gets through, and a gold answer that is a very common
    word can trip it.
citation_resolvability
    Every citation names a source the system retrieved (and that exists in the case's fixture).
citation_coverage
    Every load-bearing answer sentence carries a resolvable citation whose claim covers it. Answers are
    split with ``qaeval.text.split_sentences``. A sentence is load-bearing when it has at least two
    content words (so "In short:" is not). A claim covers a sentence when, normalised, either contains
    the other, or at least 60% of the sentence's content words occur in the claim.
fail_closed_abstention
    A must-abstain case is abstained on; a case with nothing retrieved calls no model and gives no
    answer.

An adapter error fails every check of its case, with the error as the reason.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, Literal, get_args

import pandas as pd

from qaeval.data.cases import source_bodies
from qaeval.frames import Rows, RowsByKey, is_missing
from qaeval.text import content_terms, normalize, split_sentences

CheckName = Literal["grounding_isolation", "citation_resolvability", "citation_coverage", "fail_closed_abstention"]
CHECKS: tuple[CheckName, ...] = get_args(CheckName)
CHECK_SCHEMA = {"case_id": "text", "check": "text", "passed": "bool", "reason": "text"}
COVERAGE_OVERLAP = 0.6
TEMPLATE_NGRAM = 4
TEMPLATE_MIN_PROMPTS = 3


def _contains(haystack: str, needle: str) -> bool:
    """Word-bounded containment of normalised (folded) text."""
    return bool(needle) and f" {needle} " in f" {haystack} "


def _remove(text: str, pieces: Sequence[str]) -> str:
    """``text`` (normalised) with every occurrence of every normalised piece cut out, longest first; each
    cut leaves a separator, so words on either side never join into a match."""
    out = f" {text} "
    for piece in sorted({p for p in pieces if p}, key=len, reverse=True):
        needle = f" {piece} "
        while needle in out:  # again: one cut can expose an adjacent repeat ("x y x y")
            out = out.replace(needle, " | ")
    return out


TEMPLATE_SAMPLE = 500


def learn_template(remainders: Sequence[str]) -> frozenset[tuple[str, ...]]:
    """Word 4-grams shared by more than half of the prompts' remainders (what is left of each prompt
    once its question and sources are cut out), learnt from at least three prompts (a run passes at
    most ``TEMPLATE_SAMPLE`` of them, evenly spaced): the prompt template, not a leak."""
    if len(remainders) < TEMPLATE_MIN_PROMPTS:
        return frozenset()
    sample = remainders
    counts: Counter[tuple[str, ...]] = Counter()
    for text in sample:
        words = text.split()
        counts.update({tuple(words[i:i + TEMPLATE_NGRAM]) for i in range(len(words) - TEMPLATE_NGRAM + 1)
                       if "|" not in words[i:i + TEMPLATE_NGRAM]})
    return frozenset(gram for gram, n in counts.items() if n * 2 > len(sample))


def _strip_template(text: str, template: frozenset[tuple[str, ...]]) -> str:
    if not template:
        return text
    words = text.split()
    keep = [True] * len(words)
    for i in range(len(words) - TEMPLATE_NGRAM + 1):
        if tuple(words[i:i + TEMPLATE_NGRAM]) in template:
            for j in range(i, i + TEMPLATE_NGRAM):
                keep[j] = False
    return " " + " ".join(w if k else "|" for w, k in zip(words, keep)) + " "


def prompt_remainder(case: Any, out: Mapping[str, Any], bodies: Mapping[str, str],
                     titles: Mapping[str, str | None] | None = None) -> str | None:
    """The normalised prompt with its question and every retrieved source (body, id and title) cut out
    (None when no prompt was recorded): where a leaked gold answer would have to be. A passage's id and
    title are retrieved context too: "[the-exies] The Exies were ..." leaks nothing."""
    prompt = out["prompt_to_model"]
    if not out["model_was_called"] or is_missing(prompt):
        return None
    retrieved = [r for r in out["retrieved_ids"] if r in bodies]
    labels = [normalize(r) for r in retrieved] + [normalize(t) for t in ((titles or {}).get(r) for r in retrieved) if t]
    return _remove(normalize(prompt), [normalize(case.question), *(normalize(bodies[r]) for r in retrieved), *labels])


def check_grounding_isolation(case: Any, out: Mapping[str, Any], bodies: Mapping[str, str],
                              template: frozenset[tuple[str, ...]] = frozenset(),
                              remainder: str | None = None, titles: Mapping[str, str | None] | None = None) -> tuple[bool, str]:
    """Every way the prompt breaks isolation, not just the first (a leak is named even when the prompt
    also lacks a cited source)."""
    if not out["model_was_called"]:
        return True, "no model call"
    prompt = out["prompt_to_model"]
    if is_missing(prompt) or not str(prompt).strip():
        return False, "a model was called but no prompt was recorded, so isolation cannot be verified"
    text = normalize(prompt)
    problems = []
    if not _contains(text, normalize(case.question)):
        problems.append("the prompt does not carry the question")
    retrieved = [r for r in out["retrieved_ids"] if r in bodies]
    if retrieved and not any(_contains(text, normalize(bodies[r])) for r in retrieved):
        problems.append("the prompt carries none of the retrieved sources' text (ids alone ground nothing)")
    missing = [c["source_id"] for c in out["citations"]
               if c["source_id"] in bodies and not _contains(text, normalize(bodies[c["source_id"]]))]
    if missing and retrieved:
        problems.append(f"cited source(s) {', '.join(dict.fromkeys(missing))} not in the prompt: the model never saw them")
    if case.gold_answer:
        rest = remainder if remainder is not None else prompt_remainder(case, out, bodies, titles) or ""
        if _contains(_strip_template(rest, template), normalize(case.gold_answer)):
            problems.insert(0, f"gold answer {case.gold_answer!r} appears in the prompt outside the retrieved sources")
    if problems:
        return False, "; ".join(problems)
    return True, "prompt carries the question and its sources; no gold answer outside them"


def _resolvable(out: Mapping[str, Any], bodies: Mapping[str, str]) -> list[dict[str, str]]:
    retrieved = set(out["retrieved_ids"])
    return [c for c in out["citations"] if c["source_id"] in retrieved and c["source_id"] in bodies]


def check_citation_resolvability(out: Mapping[str, Any], bodies: Mapping[str, str]) -> tuple[bool, str]:
    retrieved = set(out["retrieved_ids"])
    bad = []
    for c in out["citations"]:
        if c["source_id"] not in bodies:
            bad.append(f"{c['source_id']} (not in the fixture)")
        elif c["source_id"] not in retrieved:
            bad.append(f"{c['source_id']} (never retrieved)")
    if bad:
        return False, "unresolvable citation: " + ", ".join(dict.fromkeys(bad))
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


def coverage_counts(out: Mapping[str, Any], bodies: Mapping[str, str]) -> tuple[int, int, list[str]]:
    """(covered, load-bearing, uncovered sentences) for an answered output."""
    claims = [c["claim"] for c in _resolvable(out, bodies)]
    sentences = [s for s in split_sentences(out["answer"]) if is_load_bearing(s)]
    uncovered = [s for s in sentences if not any(claim_covers(cl, s) for cl in claims)]
    return len(sentences) - len(uncovered), len(sentences), uncovered


def check_citation_coverage(out: Mapping[str, Any], bodies: Mapping[str, str]) -> tuple[bool, str]:
    if out["abstained"]:
        return True, "abstained: nothing to cover"
    covered, total, uncovered = coverage_counts(out, bodies)
    if total == 0:
        return False, "the answer has no load-bearing sentence"
    if uncovered:
        return False, f"{len(uncovered)} of {total} sentence(s) uncited, first: {uncovered[0][:80]!r}"
    return True, f"{covered} of {total} sentence(s) cited"


def check_fail_closed(case: Any, out: Mapping[str, Any]) -> tuple[bool, str]:
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
    bodies_by_case = source_bodies(sources)
    titles_by_case: dict[str, dict[str, str | None]] = {}
    for cid, sid, title in zip(sources["case_id"].tolist(), sources["source_id"].tolist(), sources["title"].tolist()):
        if isinstance(title, str):
            titles_by_case.setdefault(cid, {})[sid] = title
    outs = RowsByKey(outputs)
    prompted = [case for case in cases.itertuples(index=False)
                if case.case_id in outs and is_missing(outs[case.case_id]["error"]) and outs[case.case_id]["model_was_called"]]
    sample = prompted[:: max(1, len(prompted) // TEMPLATE_SAMPLE)]  # the template is learnt from a bounded sample
    template = learn_template([r for r in (prompt_remainder(c, outs[c.case_id], bodies_by_case.get(c.case_id, {}),
                                                            titles_by_case.get(c.case_id)) for c in sample) if r is not None])
    rows = Rows(CHECK_SCHEMA)
    for case in cases.itertuples(index=False):
        out = outs[case.case_id]
        if not is_missing(out["error"]):
            reason = f"adapter error: {out['error']}"
            for check in CHECKS:
                rows.add(case_id=case.case_id, check=check, passed=False, reason=reason)
            continue
        bodies = bodies_by_case.get(case.case_id, {})
        results = (
            check_grounding_isolation(case, out, bodies, template, titles=titles_by_case.get(case.case_id)),
            check_citation_resolvability(out, bodies),
            check_citation_coverage(out, bodies),
            check_fail_closed(case, out),
        )
        for check, (ok, why) in zip(CHECKS, results):
            rows.add(case_id=case.case_id, check=check, passed=ok, reason=sys.intern(why) if len(why) < 120 else why)
    return rows.frame()
