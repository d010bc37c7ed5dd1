"""Layer 1: deterministic trust checks. No model, cheap enough for every commit.

``check_outputs`` returns one row per (case, check): ``case_id, check, passed, reason``. The checks read
the passages the system used: its own ``passages``' text by id, else the frozen text (the case's
sources, else the suite's corpus). An adapter error fails every check of its case, with the error.

grounding_isolation
    A model's recorded prompt exists and carries the question, the body of a retrieved source (when
    any) and of every cited one; the gold answer appears in it only inside retrieved passages. Text is
    compared folded (``qaeval.core.text.normalize``). The leak detector cuts out the question, each
    retrieved passage (with its id and title where they head it) and the trial's prompt *template*
    (four-word runs more than half its first ``TEMPLATE_SAMPLE`` prompts share once their own question
    and sources are cut, learnt from three prompts or more), then looks for the gold answer,
    word-bounded: a paraphrased leak gets through, a very common word can trip it.
citation_resolvability
    Every citation names a passage the system retrieved and whose text is known.
citation_coverage
    Every load-bearing answer sentence carries a resolvable citation whose claim covers it
    (``qaeval.scoring.coverage``).
fail_closed_abstention
    A must-abstain case is abstained on; with nothing retrieved, no model call and no answer.
passage_fidelity
    Text the system returns for an id the corpus or the case's sources hold matches it (``fidelity_text``):
    a stale production index shows here. Ids unknown to both are the system's own and pass.
"""

from __future__ import annotations

import hashlib
import sys
import unicodedata
from collections import Counter
from collections.abc import Container, Iterator, Mapping, Sequence
from functools import lru_cache
from typing import Any, Literal, get_args

import pandas as pd

from qaeval.core.frames import Rows, RowsByKey, is_missing
from qaeval.core.text import normalize, normalize_once, search_pieces
from qaeval.scoring.coverage import check_citation_coverage

CheckName = Literal[
    "grounding_isolation", "citation_resolvability", "citation_coverage", "fail_closed_abstention", "passage_fidelity"
]
CHECKS: tuple[CheckName, ...] = get_args(CheckName)
CHECK_SCHEMA = {"case_id": "text", "check": "text", "passed": "bool", "reason": "text"}
TEMPLATE_NGRAM = 4
TEMPLATE_MIN_PROMPTS = 3


def column_rows(df: pd.DataFrame, *names: str) -> Iterator[tuple[Any, ...]]:
    """The rows of some of a frame's columns as tuples of plain Python values."""
    return zip(*(df[name].tolist() for name in names))


def _contains(haystack: str, needle: str) -> bool:
    """Word-bounded containment of normalised (folded) text."""
    return bool(needle) and f" {needle} " in f" {haystack} "


# A trial's prompt template is learnt from its first prompted outputs in its order (``trial_order``), this many:
# the one step of scoring that reads more than one case (``qaeval.scoring.lane`` waits for them).
TEMPLATE_SAMPLE = 32


def learn_template(remainders: Sequence[str]) -> frozenset[tuple[str, ...]]:
    """Word 4-grams shared by more than half of the prompts' remainders (``prompt_remainder``), learnt
    from at least three prompts: the prompt template, not a leak."""
    if len(remainders) < TEMPLATE_MIN_PROMPTS:
        return frozenset()
    counts: Counter[tuple[str, ...]] = Counter()
    for text in remainders:
        words = text.split()
        counts.update(
            {
                tuple(words[i : i + TEMPLATE_NGRAM])
                for i in range(len(words) - TEMPLATE_NGRAM + 1)
                if "|" not in words[i : i + TEMPLATE_NGRAM]
            }
        )
    return frozenset(gram for gram, n in counts.items() if n * 2 > len(remainders))


def _strip_template(text: str, template: frozenset[tuple[str, ...]]) -> str:
    if not template:
        return text
    if len(text) <= _SHORT_REMAINDER:  # most prompts leave the template alone, the same for every case
        return _stripped_short(text, template)
    return _stripped(text, template)


def _stripped(text: str, template: frozenset[tuple[str, ...]]) -> str:
    words = text.split()
    keep = [True] * len(words)
    grams = zip(*(words[k:] for k in range(TEMPLATE_NGRAM)))  # each word's 4-gram, as tuples, in C
    for i in [i for i, gram in enumerate(grams) if gram in template]:
        keep[i : i + TEMPLATE_NGRAM] = [False] * TEMPLATE_NGRAM
    return " " + " ".join(w if k else "|" for w, k in zip(words, keep)) + " "


# Remainders of at most this many characters are memoised with their result: 256 of them, 4 MB at worst.
_SHORT_REMAINDER = 2000
_stripped_short = lru_cache(maxsize=256)(_stripped)


def prompt_remainder(
    case: Any,
    out: Mapping[str, Any],
    bodies: Mapping[str, str],
    titles: Mapping[str, str | None] | None = None,
    normal_prompt: str | None = None,
) -> str | None:
    """The normalised prompt with its question and every retrieved passage cut out (None when no prompt
    was recorded): where a leaked gold answer would have to be. A title is cut only where it heads its
    passage's body; an id anywhere. ``normal_prompt``: the prompt already normalised, when the caller has it."""
    prompt = out["prompt_to_model"]
    if not out["model_was_called"] or is_missing(prompt):
        return None
    normal = normal_prompt if normal_prompt is not None else normalize_once(prompt)
    return search_pieces(normal, _isolation_pieces(case, out, bodies, titles))[0]


def _isolation_pieces(
    case: Any, out: Mapping[str, Any], bodies: Mapping[str, str], titles: Mapping[str, str | None] | None
) -> list[str]:
    """What ``prompt_remainder`` cuts, normalised: the question, and each retrieved passage's body, id,
    and body headed by its id and title."""
    pieces = [normalize(case.question)]
    for r in out["retrieved_ids"]:
        if r not in bodies:
            continue
        body, rid, title = normalize(bodies[r]), normalize(r), normalize((titles or {}).get(r) or "")
        heads = [f"{title} {body}", f"{rid} {title} {body}", f"{title} {rid} {body}"] if title else []
        pieces += [*heads, f"{rid} {body}", body, rid]
    return pieces


def check_grounding_isolation(
    case: Any,
    out: Mapping[str, Any],
    bodies: Mapping[str, str],
    template: frozenset[tuple[str, ...]] = frozenset(),
    remainder: str | None = None,
    titles: Mapping[str, str | None] | None = None,
) -> tuple[bool, str]:
    """Every way the prompt breaks isolation, not just the first (a leak is named even when the prompt
    also lacks a cited source). The prompt is searched once for all of it (``search_pieces``)."""
    if not out["model_was_called"]:
        return True, "no model call"
    prompt = out["prompt_to_model"]
    if is_missing(prompt) or not str(prompt).strip():
        return False, "a model was called but no prompt was recorded, so isolation cannot be verified"
    question = normalize(case.question)
    retrieved = [normalize(bodies[r]) for r in out["retrieved_ids"] if r in bodies]
    cited = [(c["source_id"], normalize(bodies[c["source_id"]])) for c in out["citations"] if c["source_id"] in bodies]
    leak_pieces = _isolation_pieces(case, out, bodies, titles) if case.gold_answer and remainder is None else []
    rest, found = search_pieces(
        normalize_once(prompt), leak_pieces, [question, *retrieved, *(body for _, body in cited)]
    )
    problems = []
    if question not in found:
        problems.append("the prompt does not carry the question")
    if retrieved and not any(body in found for body in retrieved):
        problems.append("the prompt carries none of the retrieved sources' text (ids alone ground nothing)")
    missing = [sid for sid, body in cited if body not in found]
    if missing and retrieved:
        problems.append(
            f"cited source(s) {', '.join(dict.fromkeys(missing))} not in the prompt: the model never saw them"
        )
    if case.gold_answer:
        rest = remainder if remainder is not None else rest
        if _contains(_strip_template(rest, template), normalize(case.gold_answer)):
            problems.insert(0, f"gold answer {case.gold_answer!r} appears in the prompt outside the retrieved sources")
    if problems:
        return False, "; ".join(problems)
    return True, "prompt carries the question and its sources; no gold answer outside them"


_INVISIBLE = dict.fromkeys(map(ord, "\u00ad\u200b\u200c\u200d\u2060\ufeff"))


def fidelity_text(text: str) -> str:
    """Text as passage fidelity compares it: canonical equivalence (NFC), invisible characters dropped,
    runs of whitespace as one space, no edges. Not NFKC, which would take "10⁶" for "106": what can
    change a passage's meaning is a difference."""
    return " ".join(unicodedata.normalize("NFC", text).translate(_INVISIBLE).split())


def check_passage_fidelity(
    out: Mapping[str, Any], frozen: Mapping[str, tuple[str, str | None, str]]
) -> tuple[bool, str]:
    """``frozen``: {id: (text, title, where)} for ids the corpus or the case's sources hold."""
    differ = []
    for p in out["passages"]:
        known = frozen.get(p["id"])
        if known is not None and fidelity_text(p["text"]) != fidelity_text(known[0]):
            differ.append(
                f"the system's passage {p['id']!r} differs from the {known[2]}: {first_difference(p['text'], known[0])}"
            )
    if differ:
        return False, "; ".join(differ)
    own = sum(1 for p in out["passages"] if p["id"] not in frozen)
    return True, f"{len(out['passages']) - own} passage(s) match their frozen text, {own} of the system's own"


def first_difference(given: str, frozen: str, width: int = 30) -> str:
    a, b = fidelity_text(given), fidelity_text(frozen)
    i = next((n for n, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    start = max(0, i - 10)
    return f"system {a[start : i + width]!r} vs frozen {b[start : i + width]!r}"


def check_citation_resolvability(out: Mapping[str, Any], bodies: Mapping[str, str]) -> tuple[bool, str]:
    retrieved = set(out["retrieved_ids"])
    bad = []
    for c in out["citations"]:
        if c["source_id"] not in bodies:
            bad.append(f"{c['source_id']} (no passage has this id: not the output's own, the corpus's or the case's)")
        elif c["source_id"] not in retrieved:
            bad.append(f"{c['source_id']} (never retrieved)")
    if bad:
        return False, "unresolvable citation: " + ", ".join(dict.fromkeys(bad))
    return True, f"{len(out['citations'])} citation(s) resolve"


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


Frozen = dict[str, dict[str, tuple[str, "str | None", str]]]  # {case: {id: (text, title, where)}}


def frozen_passages(
    sources: pd.DataFrame, outputs: pd.DataFrame, corpus: Any = None, only: Container[str] | None = None
) -> Frozen:
    """Per case, the frozen text of every id it holds or its output names: the case's sources, then the
    corpus's. ``only``: the cases wanted (else every case)."""
    frozen: Frozen = {}
    for cid, sid, title, text in column_rows(sources, "case_id", "source_id", "title", "text"):
        if only is None or cid in only:
            frozen.setdefault(cid, {})[sid] = (text, title if isinstance(title, str) else None, "case's frozen sources")
    if corpus is None:
        return frozen
    for cid, retrieved, citations, passages in column_rows(
        outputs, "case_id", "retrieved_ids", "citations", "passages"
    ):
        if only is not None and cid not in only:
            continue
        add_from_corpus(
            frozen.setdefault(cid, {}), dict(retrieved_ids=retrieved, citations=citations, passages=passages), corpus
        )
    return frozen


def add_from_corpus(held: dict[str, tuple[str, str | None, str]], out: Mapping[str, Any], corpus: Any) -> None:
    """Add to ``held`` the corpus passage of every id the output names that ``held`` lacks."""
    named = [*out["retrieved_ids"], *(c["source_id"] for c in out["citations"]), *(p["id"] for p in out["passages"])]
    for pid in named:
        if pid not in held and (p := corpus.get(pid)) is not None:
            held[pid] = (p.text, p.title, "frozen corpus")


def case_bodies(case: Any, out: Mapping[str, Any], corpus: Any = None) -> dict[str, str]:
    """{id: text} of the passages one case's output used (see ``used_passages``)."""
    held = {s.id: (s.text, s.title, "case's frozen sources") for s in case.sources}
    if corpus is not None:
        add_from_corpus(held, out, corpus)
    return used_passages(held, out)[0]


def used_passages(
    frozen: Mapping[str, tuple[str, str | None, str]], out: Mapping[str, Any]
) -> tuple[dict[str, str], dict[str, str | None]]:
    """(bodies, titles) of what the system used: its own passages' text, else the frozen text by id."""
    bodies = {pid: text for pid, (text, _, _) in frozen.items()}
    titles = {pid: title for pid, (_, title, _) in frozen.items()}
    for p in out["passages"]:
        bodies[p["id"]] = p["text"]
        titles[p["id"]] = p["title"] if p["title"] is not None else titles.get(p["id"])
    return bodies, titles


def trial_order(case_ids: Sequence[str], trial: int) -> list[int]:
    """The order in which a trial asks for its cases (indices into ``case_ids``): the suite's for trial 0;
    for a later one, the cases sorted by a digest of the trial and their id, a different order each
    trial, so a system that sees a question again cannot tell which trial it is in from where it comes.
    A subset of the cases keeps the whole set's order (each case's place depends on its id alone)."""
    if trial == 0:
        return list(range(len(case_ids)))
    keys = [hashlib.sha256(f"{trial}\0{cid}".encode("utf-8", "surrogatepass")).digest() for cid in case_ids]
    return sorted(range(len(case_ids)), key=keys.__getitem__)


def template_sample(case_ids: Sequence[str], outputs: pd.DataFrame, trial: int = 0) -> list[str]:
    """The cases whose prompts a trial's template is learnt from: the first ``TEMPLATE_SAMPLE`` of those
    with a prompt (no adapter error, a model called), in the order the trial asks for them."""
    prompted = {
        cid for cid, e, m in column_rows(outputs, "case_id", "error", "model_was_called") if is_missing(e) and bool(m)
    }
    ordered = [case_ids[i] for i in trial_order(case_ids, trial)]
    return [cid for cid in ordered if cid in prompted][:TEMPLATE_SAMPLE]


def prompt_template(
    cases: pd.DataFrame, outputs: pd.DataFrame, sources: pd.DataFrame, corpus: Any = None, trial: int = 0
) -> frozenset[tuple[str, ...]]:
    """Trial ``trial``'s prompt template: ``learn_template`` over ``template_sample``'s prompts. The frames
    are the whole trial's, as ``check_outputs`` takes them."""
    sample = frozenset(template_sample(cases["case_id"].tolist(), outputs, trial))
    chosen = cases[cases["case_id"].isin(sample)]
    by_id = RowsByKey(outputs)
    frozen = frozen_passages(sources, outputs, corpus, frozenset(chosen["case_id"].tolist()))
    remainders = (
        prompt_remainder(c, by_id[c.case_id], *used_passages(frozen.get(c.case_id, {}), by_id[c.case_id]))
        for c in chosen.itertuples(index=False)
    )
    return learn_template([r for r in remainders if r is not None])


def check_outputs(
    cases: pd.DataFrame,
    outputs: pd.DataFrame,
    sources: pd.DataFrame,
    corpus: Any = None,
    template: frozenset[tuple[str, ...]] | None = None,
    trial: int = 0,
) -> pd.DataFrame:
    """Run the five deterministic checks.

    ``cases`` is ``Suite.to_frame()``, ``outputs`` the runner's frame, ``sources`` is
    ``Suite.sources_frame()``, ``corpus`` the suite's ``Corpus`` (or None), ``template`` the trial's
    prompt template when these are some of its cases (default: ``prompt_template`` of these frames, the
    whole of trial ``trial``). Returns one row per (case, check): case_id, check, passed (bool), reason (str).
    """
    if template is None:
        template = prompt_template(cases, outputs, sources, corpus, trial)
    by_id = RowsByKey(outputs)
    frozen = frozen_passages(sources, outputs, corpus)
    rows = Rows(CHECK_SCHEMA)
    for case in cases.itertuples(index=False):
        out = by_id[case.case_id]
        if not is_missing(out["error"]):
            reason = f"adapter error: {out['error']}"
            for check in CHECKS:
                rows.add(case_id=case.case_id, check=check, passed=False, reason=reason)
            continue
        held = frozen.get(case.case_id, {})
        bodies, titles = used_passages(held, out)
        results = (
            check_grounding_isolation(case, out, bodies, template, titles=titles),
            check_citation_resolvability(out, bodies),
            check_citation_coverage(out, bodies),
            check_fail_closed(case, out),
            check_passage_fidelity(out, held),
        )
        for check, (ok, why) in zip(CHECKS, results):
            rows.add(case_id=case.case_id, check=check, passed=ok, reason=sys.intern(why) if len(why) < 120 else why)
    return rows.frame()


def passages_beyond(case: Any, out: Mapping[str, Any], corpus: Any) -> dict[str, tuple[str | None, str]]:
    """{id: (title, text)} of the passages an output used that its case's sources do not hold: its own
    ``passages``, else the corpus's, by id."""
    if not (out["passages"] or (corpus is not None and out["retrieved_ids"])):
        return {}
    own = {s.id for s in case.sources}
    held: dict[str, tuple[str, str | None, str]] = {}
    if corpus is not None:
        add_from_corpus(held, out, corpus)
    bodies, titles = used_passages(held, out)
    return {pid: (titles.get(pid), text) for pid, text in bodies.items() if pid not in own}


def judged_fixture(case: Any, out: Mapping[str, Any], corpus: Any) -> dict[str, str]:
    """{id: text} the judge weighs one output's citations against: ``used_sources``'s rows of its case."""
    return {
        **{s.id: s.text for s in case.sources},
        **{pid: text for pid, (_, text) in passages_beyond(case, out, corpus).items()},
    }
