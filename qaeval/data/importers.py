"""Public datasets into qaeval's formats: golden cases from QA data, labelled sets from human-labelled data.

``import_file(FORMAT, IN, OUT_DIR)`` streams the input (ijson for JSON, line by line for JSONL and CSV)
after the checks every import makes in bounded memory (UTF-8, nesting at most ``MAX_DEPTH``: exit 65).
Every record is imported or refused with a reason (the mapping rules: ``qaeval.data.formats``), and the
written file is loaded back as strictly as any before the import reports success. ``--corpus`` pools
every paragraph of the file into ``DIR/corpus.jsonl`` (``qaeval.data.pooling``) and writes corpus cases;
``--limit N`` keeps the first N records (with ``--seed``: a uniform reservoir sample of N).
"""

from __future__ import annotations

import os
import random
import re
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from qaeval.core.errors import DatasetError, UsageError, describe
from qaeval.core.jsonfile import write_jsonl
from qaeval.data.corpus import CORPUS_FILE
from qaeval.data.formats import (
    Refused,
    ares_rows,
    expertqa_rows,
    hotpotqa_case,
    hotpotqa_passages,
    musique_case,
    musique_passages,
    ragas_case,
    refusing,
    squad2_cases,
    squad2_passages,
    wice_rows,
)
from qaeval.data.pooling import PassagePool, corpus_case
from qaeval.data.streams import check_utf8, csv_rows, first_char, json_items, records

CASE_FORMATS = ("squad2", "hotpotqa", "musique", "ragas")
LABELLED_FORMATS = ("wice", "expertqa", "ares")
FORMATS = CASE_FORMATS + LABELLED_FORMATS


@dataclass
class ImportReport:
    format: str
    source: str
    out: str = ""
    read: int = 0
    imported: int = 0
    left_by_limit: int = 0
    refused: Counter[str] = field(default_factory=Counter)
    examples: dict[str, str] = field(default_factory=dict)
    corpus: str = ""  # with --corpus: the corpus written, its passages and the paragraphs merged into them
    pooled: int = 0
    merged: int = 0

    def refuse(self, reason: str, where: str) -> None:
        self.refused[reason] += 1
        self.examples.setdefault(reason, where)

    def summary_text(self) -> str:
        lines = [f"imported {self.imported} of {self.read} {self.format} record(s) from {self.source} into {self.out}"]
        if self.left_by_limit:
            lines.append(f"  {self.left_by_limit} left out by --limit")
        for reason, n in self.refused.most_common():
            lines.append(f"  refused {n}: {reason} (first: {self.examples[reason]})")
        accounted = self.imported + self.left_by_limit + sum(self.refused.values())
        lines.append(f"  every record accounted for: {accounted} = {self.read}")
        if self.corpus:
            lines.append(
                f"pooled {self.pooled} passage(s) from every record of the file into {self.corpus} "
                f"({self.merged} duplicate paragraph(s) merged)"
            )
        return "\n".join(lines)


# --------------------------------------------------------------------------- the import


# A record of a shape the mapping rules did not foresee (a file is the user's, so hostile until proven
# otherwise) is refused with what went wrong, never a crash of the whole import.
UNFORESEEN = (TypeError, AttributeError, KeyError, IndexError, ValueError)


def _unforeseen(exc: BaseException) -> Refused:
    return Refused(f"a record of a shape qaeval cannot read ({describe(exc)})")


def _guarded(where: str, build: Callable[[], Any]) -> tuple[str, Any]:
    """(where, the case ``build`` made, or why the record is refused)."""
    try:
        return refusing(where, build)
    except UNFORESEEN as exc:
        return where, _unforeseen(exc)


def _one_case(build: Callable[[Any, str, str], dict[str, Any]]) -> Callable[..., Iterator[tuple[str, Any]]]:
    def cases(where: str, record: Any, prefix: str, split: str) -> Iterator[tuple[str, Any]]:
        yield _guarded(where, partial(build, record, prefix, split))

    return cases


# format: (its records' place in a JSON file, the cases of one record, the passages of one record)
POOLED = {
    "squad2": ("data.item", squad2_cases, squad2_passages),
    "hotpotqa": ("item", _one_case(hotpotqa_case), hotpotqa_passages),
    "musique": ("item", _one_case(musique_case), musique_passages),
}


# What a file of each format looks like, said when a file does not (another format's file, most often).
SHAPES = {
    "squad2": "a SQuAD 2.0 file is one JSON object with a 'data' list of articles",
    "hotpotqa": "a hotpotqa file is a JSON array of records, or one record per line (JSON Lines)",
    "musique": "a musique file is a JSON array of records, or one record per line (JSON Lines)",
}


def _pooled(fmt: str, path: Path, prefix: str, split: str, pool: PassagePool | None) -> Iterator[tuple[str, Any]]:
    """Cases of a format with paragraphs, read once: with a pool, every paragraph of every record (kept,
    refused or left by --limit) is pooled first, and each case names its passages by corpus id."""
    array_prefix, cases_of, passages_of = POOLED[fmt]
    if fmt == "squad2" and (first := first_char(path)) != "{":
        raise DatasetError(
            f"not SQuAD 2.0 data: {SHAPES[fmt]}, and this file starts with {first or 'nothing'!r}", file=str(path)
        )
    reader = (
        json_items(path, array_prefix)
        if fmt == "squad2"
        else records(path, array_prefix=array_prefix, expects=SHAPES[fmt])
    )
    read = 0
    for where, record in reader:
        read += 1
        try:
            passages = list(passages_of(record)) if pool is not None else []
            found = list(cases_of(where, record, prefix, split))
        except UNFORESEEN as exc:  # the record's cases and passages are all refused, with the reason
            yield where, _unforeseen(exc)
            continue
        if pool is not None:
            for title, text in passages:
                pool.add(title, text)
        for here, item in found:
            yield here, item if pool is None or isinstance(item, Refused) else corpus_case(item, pool)
    if not read:
        raise DatasetError(f"no {fmt} records in this file: {SHAPES[fmt]}", file=str(path))


def _produce(fmt: str, path: Path, prefix: str, split: str, pool: PassagePool | None) -> Iterator[tuple[str, Any]]:
    if fmt in POOLED:
        yield from _pooled(fmt, path, prefix, split, pool)
    elif fmt == "ragas":
        rows = csv_rows(path) if path.suffix.lower() == ".csv" else records(path)
        for n, (where, record) in enumerate(rows, start=1):
            yield _guarded(where, partial(ragas_case, record, prefix, split, n))
    else:
        yield from {"wice": wice_rows, "expertqa": expertqa_rows, "ares": ares_rows}[fmt](path, prefix)


def _checked_prefix(fmt: str, limit: int | None, split: str, prefix: str | None, corpus: bool) -> str:
    if fmt not in FORMATS:
        raise UsageError(f"unknown format {fmt!r}; formats: {', '.join(FORMATS)}")
    if corpus and fmt not in POOLED:
        raise UsageError(
            f"--corpus is for {', '.join(POOLED)} (a passage pool read from the whole file); "
            f"{fmt} rows carry their own passages"
        )
    if limit is not None and limit < 1:
        raise UsageError(f"--limit must be at least 1, got {limit}")
    if split not in ("frozen", "living"):
        raise UsageError(f"--split must be frozen or living, got {split!r}")
    prefix = prefix or fmt
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", prefix):
        raise UsageError(f"--prefix must be letters, digits, '-', '_' or '.', got {prefix!r}")
    return prefix


def _collect(
    report: ImportReport, items: Iterator[tuple[str, Any]], limit: int | None, seed: int | None
) -> list[dict[str, Any]]:
    """The records kept: all, the first ``limit``, or (with a seed) a uniform sample of ``limit``."""
    kept: list[dict[str, Any]] = []
    rng = random.Random(seed) if seed is not None else None
    accepted = 0
    seen_ids: set[str] = set()
    for where, item in items:
        report.read += 1
        if isinstance(item, Refused):
            report.refuse(str(item), where)
            continue
        if item["id"] in seen_ids:
            report.refuse("an id that appeared earlier in the file", where)
            continue
        seen_ids.add(item["id"])
        accepted += 1
        if limit is None or len(kept) < limit:
            kept.append(item)
        elif rng is not None:  # reservoir sampling: every accepted record equally likely, memory bounded by limit
            j = rng.randrange(accepted)
            if j < limit:
                kept[j] = item
            report.left_by_limit += 1
        else:
            report.left_by_limit += 1
    report.imported = len(kept)
    return kept


def _check_written(out: Path, labelled: bool) -> None:
    """Read the written file back as strictly as any, with whatever else the folder holds: case ids must be
    unique across its files, and a corpus case's gold and checkpoint passages must be in its corpus."""
    if labelled:
        from qaeval.data.labels import read_labelled_set

        read_labelled_set(out)
        return
    from qaeval.data.cases import load_suite

    corpus = load_suite(out.parent).corpus
    if corpus is not None:
        corpus.close()


def import_file(
    fmt: str,
    source: str | Path,
    out_dir: str | Path,
    *,
    limit: int | None = None,
    seed: int | None = None,
    split: str = "frozen",
    prefix: str | None = None,
    corpus: bool = False,
) -> ImportReport:
    """Convert ``source`` (a public dataset in ``fmt``) into ``out_dir/<prefix>.jsonl``: golden cases, or a
    labelled set for the labelled formats. With ``corpus``, every paragraph of the file is pooled into
    ``out_dir/corpus.jsonl`` and the cases name their gold passages by corpus id. Refuses to overwrite an
    existing file."""
    prefix = _checked_prefix(fmt, limit, split, prefix, corpus)
    path = Path(source)
    labelled = fmt in LABELLED_FORMATS
    out = Path(out_dir) / f"{prefix}{'-labelled' if labelled else ''}.jsonl"
    for taken in (out, Path(out_dir) / CORPUS_FILE) if corpus else (out,):
        if os.path.lexists(taken):
            raise UsageError(
                f"{taken} exists; choose another --out{'' if corpus else ' or --prefix'} "
                "(an import never overwrites data)"
            )
    report = ImportReport(fmt, str(path), str(out))
    check_utf8(path)
    with PassagePool(out_dir) if corpus else nullcontext() as pool:
        kept = _collect(report, _produce(fmt, path, prefix, split, pool), limit, seed)
        if not kept:
            raise DatasetError(f"nothing imported: {report.summary_text()}", file=str(path))
        if pool is not None:
            report.corpus, report.pooled, report.merged = str(pool.publish()), pool.pooled, pool.merged
    try:
        write_jsonl(out, kept)
        _check_written(out, labelled)
    except BaseException:
        for written in (out, Path(report.corpus)) if corpus else (out,):
            written.unlink(missing_ok=True)
        raise
    return report
