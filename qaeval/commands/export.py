"""A run's retrieval as TREC files (``write_trec``), so trec_eval, ir-measures and ranx read what qaeval
measured (docs/guides/records.md). ``run.trec``: ``qid Q0 docid rank score runtag``, each case's ranking
with a passage listed twice counted once, at its first rank, as in qaeval's figures; score ``1/rank``
(strictly decreasing, so no reader reorders ties). ``qrels.trec``: ``qid 0 docid 1``, each gold source id
(qaeval's relevance is binary). TREC files split on whitespace, so an id that is empty or holds whitespace
is refused (DatasetError, exit 65) rather than escaped into another passage's; existing files are never
replaced (UsageError, exit 64).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

from qaeval.core.errors import DatasetError, UsageError
from qaeval.core.files import write_atomic
from qaeval.scoring.result import RunResult

RUN_FILE = "run.trec"
QRELS_FILE = "qrels.trec"


@dataclass(frozen=True)
class TrecExport:
    """What ``write_trec`` wrote."""

    run_path: Path
    qrels_path: Path
    k: int
    run_queries: int  # cases with a non-empty ranking
    run_lines: int
    qrels_queries: int  # cases with gold sources
    qrels_lines: int
    without_gold: int  # cases with no qrels lines
    retrieved_nothing: int  # cases with gold sources and no run lines

    def summary_text(self) -> str:
        folder = self.run_path.parent
        lines = [
            f"wrote {self.run_path}: {self.run_queries} queries, {self.run_lines} lines",
            f"wrote {self.qrels_path}: {self.qrels_queries} queries, {self.qrels_lines} lines",
            f"k = {self.k} in this record; the same figures from trec_eval:",
            f"  trec_eval -c -m P.{self.k} -m recall.{self.k} -m recip_rank -m ndcg_cut.{self.k} "
            f"{folder / QRELS_FILE} {folder / RUN_FILE}",
        ]
        if self.without_gold:
            lines.append(
                f"{self.without_gold} case(s) without gold sources have no qrels lines: trec_eval leaves "
                "them out, as qaeval's retrieval figures do"
            )
        if self.retrieved_nothing:
            lines.append(
                f"{self.retrieved_nothing} case(s) with gold sources retrieved nothing: they have qrels lines "
                "and no run lines, and count 0 (pass -c to trec_eval, as above)"
            )
        return "\n".join(lines)


def runtag(adapter: str) -> str:
    """The adapter's name as a TREC run tag: no whitespace, never empty."""
    return "_".join(adapter.split()) or "qaeval"


def _writable_id(value: object, case_id: str, what: str, where: str) -> str:
    text = str(value)
    if text.split() != [text]:
        raise DatasetError(
            f"case {case_id!r}: {what} {text!r} is empty or holds whitespace, which a TREC file "
            "cannot hold (its fields are split on whitespace); rename it to export",
            file=where,
        )
    return text


def trec_texts(run: RunResult, *, where: str = "<run>") -> tuple[str, str, TrecExport]:
    """The run file's and the qrels file's text, and the counts (paths not yet set)."""
    rankings = dict(zip(run.outputs["case_id"].tolist(), run.outputs["retrieved_ids"].tolist()))
    tag = runtag(run.meta.adapter)
    run_lines: list[str] = []
    qrels_lines: list[str] = []
    run_queries = qrels_queries = nothing = 0
    for case in run.suite:
        qid = _writable_id(case.id, case.id, "the case id", where)
        ranking = list(dict.fromkeys(rankings.get(case.id) or []))
        for rank, docid in enumerate(ranking, start=1):
            docid = _writable_id(docid, case.id, "retrieved passage id", where)
            run_lines.append(f"{qid} Q0 {docid} {rank} {1.0 / rank!r} {tag}")
        for docid in case.gold_source_ids:
            qrels_lines.append(f"{qid} 0 {_writable_id(docid, case.id, 'gold source id', where)} 1")
        run_queries += bool(ranking)
        qrels_queries += bool(case.gold_source_ids)
        nothing += bool(case.gold_source_ids) and not ranking
    counts = TrecExport(
        Path(RUN_FILE),
        Path(QRELS_FILE),
        run.meta.k,
        run_queries,
        len(run_lines),
        qrels_queries,
        len(qrels_lines),
        len(run.suite) - qrels_queries,
        nothing,
    )
    return "".join(line + "\n" for line in run_lines), "".join(line + "\n" for line in qrels_lines), counts


def write_trec(run: RunResult, out: str | Path, *, where: str = "<run>") -> TrecExport:
    """Write ``out/run.trec`` and ``out/qrels.trec`` for ``run`` (``where`` names its record in errors).
    Refuses (UsageError) when either file exists or ``out`` is not a folder; nothing is written then."""
    folder = Path(out)
    if os.path.lexists(folder) and not folder.is_dir():
        raise UsageError(f"--out {folder} is not a folder: give a folder for {RUN_FILE} and {QRELS_FILE}")
    taken = [str(folder / name) for name in (RUN_FILE, QRELS_FILE) if os.path.lexists(folder / name)]
    if taken:
        them = "them" if len(taken) > 1 else "it"
        raise UsageError(f"refusing to overwrite {' and '.join(taken)}: remove {them} or choose another --out folder")
    run_text, qrels_text, counts = trec_texts(run, where=where)  # a bad id stops here, before any file is written
    run_path = write_atomic(folder / RUN_FILE, run_text)
    qrels_path = write_atomic(folder / QRELS_FILE, qrels_text)
    return replace(counts, run_path=run_path, qrels_path=qrels_path)
