"""Layer 2: retrieval metrics per case against the gold source ids.

``score_retrieval(cases, outputs, k=DEFAULT_K)`` returns one row per case with gold sources:

==============  ===============================================================================
case_id         readable case id
k               the cut-off
n_gold          number of gold sources
n_retrieved     length of the system's ranking
recall_at_k     |gold in the top k| / |gold|
precision_at_k  |gold in the top k| / k, as trec_eval's P@k: a ranking shorter than k is not
                rewarded for it (one gold among two retrieved scores 0.2 at k = 5, not 0.5)
mrr             1 / rank of the first gold source in the whole ranking, 0 when none is retrieved
ndcg_at_k       binary relevance: DCG@k = sum over ranks i <= k of rel_i / log2(i + 1), divided by
                the ideal DCG@k of min(|gold|, k) relevant passages at the top
==============  ===============================================================================

Definitions as trec_eval and ir-measures state them (``P@k``, ``R@k``, ``RR``, ``nDCG@k`` with binary
relevance). Cases without gold sources (typically must-abstain cases) have no row: there is nothing to recall.
An adapter error counts as an empty ranking. A source listed twice counts once, at its first rank (the
boundary already refuses such output as malformed), so no figure can leave [0, 1].
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from qaeval.core.frames import frame
from qaeval.core.params import DEFAULT_K

RETRIEVAL_SCHEMA = {
    "case_id": "text",
    "k": "int",
    "n_gold": "int",
    "n_retrieved": "int",
    "recall_at_k": "float",
    "precision_at_k": "float",
    "mrr": "float",
    "ndcg_at_k": "float",
}


def case_retrieval(gold: list[str], ranking: list[str], k: int) -> dict[str, float]:
    """The four retrieval figures for one ranking."""
    gold_set = set(gold)
    ranking = list(dict.fromkeys(ranking))
    top = ranking[:k]
    hits = [1.0 if r in gold_set else 0.0 for r in top]
    recall = sum(hits) / len(gold_set) if gold_set else math.nan
    precision = sum(hits) / k
    mrr = next((1.0 / rank for rank, r in enumerate(ranking, start=1) if r in gold_set), 0.0)
    dcg = sum(h / math.log2(i + 2) for i, h in enumerate(hits))
    ideal = sum(1.0 / math.log2(i + 2) for i in range(min(len(gold_set), k)))
    ndcg = dcg / ideal if ideal else math.nan
    return dict(recall_at_k=recall, precision_at_k=precision, mrr=mrr, ndcg_at_k=ndcg)


def score_retrieval(cases: pd.DataFrame, outputs: pd.DataFrame, *, k: int = DEFAULT_K) -> pd.DataFrame:
    if k < 1:
        raise ValueError("k must be at least 1")
    rankings = dict(zip(outputs["case_id"].tolist(), outputs["retrieved_ids"].tolist()))
    rows = []
    for case_id, gold in zip(cases["case_id"].tolist(), cases["gold_source_ids"].tolist()):
        if not gold:
            continue
        ranking = list(rankings.get(case_id) or [])
        figures = case_retrieval(list(gold), ranking, k)
        rows.append(dict(case_id=case_id, k=k, n_gold=len(gold), n_retrieved=len(ranking), **figures))
    return frame(rows, RETRIEVAL_SCHEMA)


def unknown_ids_note(suite: Any, outputs: pd.DataFrame, *, known_below: float = 0.5) -> list[str]:
    """A note when fewer than ``known_below`` of the ids a run retrieved are ids the corpus or the case's
    sources hold: retrieval compares ids with the gold source ids, so a system that names passages its own
    way reads recall and MRR 0 however well it retrieves. Empty when the ids are known (or none were
    retrieved)."""
    corpus = suite.corpus
    retrieved = dict(zip(outputs["case_id"].tolist(), outputs["retrieved_ids"].tolist()))
    total = known = 0
    for case in suite:
        own = {s.id for s in case.sources}
        for rid in dict.fromkeys(retrieved.get(case.id) or ()):
            total += 1
            known += rid in own or (corpus is not None and rid in corpus)
    if not total or known >= known_below * total:
        return []
    where = "the corpus or the cases' sources" if corpus is not None else "the cases' sources"
    return [
        f"{total - known} of the {total} retrieved ids ({(total - known) / total:.0%}) are not ids of {where}: "
        "retrieval compares retrieved ids with the gold source ids, so recall and MRR read 0 for them; "
        f"return the ids {where} use in retrieved_ids"
    ]
