"""What the verbs do with saved records and the golden folder: load a record as its result, compare two
runs, export retrieval for trec_eval, label sheets out and labels in, and cases added to the golden set.
``qaeval.api`` re-exports each of them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from qaeval.commands.export import TrecExport, write_trec
from qaeval.core.errors import RecordError, UsageError
from qaeval.core.files import refuse_overwrite, write_atomic
from qaeval.core.jsonfile import write_jsonl
from qaeval.core.results import Result
from qaeval.data.labels import LABELS_HEADER
from qaeval.data.schema import AXES
from qaeval.record.read import load_run
from qaeval.scoring.result import RunResult
from qaeval.verdicts.compare import Comparison
from qaeval.verdicts.compare import compare as _compare
from qaeval.verdicts.monitor import MonitorResult
from qaeval.verdicts.sheets import export_sheet, import_sheet


def compare(before: str | Path | Result, after: str | Path | Result) -> Comparison:
    """Two runs (records or results) side by side.

    Args:
        before: The earlier run: a record's path or a result that holds a run.
        after: The later run, likewise.

    Returns:
        The comparison: metric deltas with their noise, and case-level changes.
    """

    (b, b_label), (a, a_label) = _run_to_compare(before), _run_to_compare(after)
    return _compare(b, a, before_label=b_label, after_label=a_label)


def export_trec(record: str | Path | Result, out: str | Path) -> TrecExport:
    """Write a run's retrieval as ``out/run.trec`` and ``out/qrels.trec`` for trec_eval, ir-measures and ranx.

    Args:
        record: A run over golden cases: a record's path or a result that holds one.
        out: The folder to write the two files into.

    Returns:
        What was written (paths and counts).
    """
    run_ = _golden_run(record, "it has no gold passages to write qrels from: export trec takes a run over golden cases")
    return write_trec(run_, out, where=str(record) if isinstance(record, (str, Path)) else "<run>")


def _run_to_compare(x: str | Path | Result) -> tuple[RunResult, str]:
    """A run to compare and its label: its record's path, else its adapter. A record or result of another
    kind (a gate, calibration, drift or monitor) is refused: its verdict is not a run."""
    if isinstance(x, (str, Path)):
        result = load_run(x)
        if result.kind != "run":
            raise RecordError(
                f"a {result.kind} record, not a run's: compare takes the records of two runs "
                "(qaeval run --save FILE, qaeval baseline --out FILE)",
                file=str(x),
            )
        return as_run(result), str(x)
    if isinstance(x, Result) and x.kind != "run":
        raise UsageError(f"a {x.kind} result, not a run's: compare takes two runs (a verdict's run is its .run)")
    run_ = as_run(x)
    return run_, run_.meta.adapter


def _golden_run(record: str | Path | Result, why: str) -> RunResult:
    """The run over golden cases a record or result holds; a monitor's (a judged sample of logged traffic)
    is a UsageError saying ``why`` it does not serve."""
    result = load_run(record) if isinstance(record, (str, Path)) else record
    if isinstance(result, MonitorResult):
        name = record if isinstance(record, (str, Path)) else "a monitor result"
        raise UsageError(f"{name} is a monitor record of logged traffic; {why}")
    return as_run(result)


def label_export(
    record: str | Path | RunResult, out: str | Path, *, sample: int | None = None, seed: int = 0
) -> tuple[Path, int]:
    """Write an annotation sheet (CSV) for a run's answered cases: one row per case and axis, with the
    question, the answer, each cited passage's text, the gold answer where the axis needs it, and empty
    ``score`` and ``reason`` columns.

    Args:
        record: The run: a record's path or a result that holds one.
        out: Where to write the sheet.
        sample: Put only this many answered cases in the sheet, drawn at random (default: all).
        seed: The seed of that draw.

    Returns:
        (The sheet's path, how many cases it holds.)
    """
    if sample is not None and (isinstance(sample, bool) or not isinstance(sample, int) or sample < 1):
        raise UsageError(f"sample must be a whole number >= 1, got {sample!r}")
    result = load_run(record) if isinstance(record, (str, Path)) else record
    run_ = as_run(result)
    refuse_overwrite([("out", out, "sheet")], [("record", record)], data=run_.meta.data)
    axes = ("faithfulness", "citation_correctness") if isinstance(result, MonitorResult) else AXES  # no gold in logs
    text, n = export_sheet(run_, sample=sample, seed=seed, axes=axes)
    return write_atomic(out, text), n


def label_import(sheet: str | Path, record: str | Path | RunResult, out: str | Path) -> tuple[Path, int, int]:
    """Check a filled sheet against the run it is for and write keyed labels (JSONL).

    Args:
        sheet: The filled sheet (CSV) ``label_export`` wrote.
        record: The run it is for: a record's path or a result that holds one.
        out: Where to write the labels.

    Returns:
        (The labels' path, labels written, rows left blank.)

    Raises:
        DatasetError: A bad score, an unknown case or axis, or a stale fingerprint, each with its
            line (exit 65).
    """
    run_ = as_run(record)
    refuse_overwrite([("out", out, "labels")], [("sheet", sheet), ("record", record)], data=run_.meta.data)
    labels, blank = import_sheet(sheet, run_)
    return write_jsonl(out, [LABELS_HEADER, *labels]), len(labels), blank


def as_run(record: str | Path | Result) -> RunResult:
    """The run inside a record path or a result (a gate, calibration or drift result holds one).

    Args:
        record: A record's path or a result.

    Returns:
        The run it holds.

    Raises:
        UsageError: It holds no run (exit 64).
    """
    result = load_run(record) if isinstance(record, (str, Path)) else record
    run_ = result if isinstance(result, RunResult) else getattr(result, "run", None)
    if not isinstance(run_, RunResult):
        raise UsageError(f"{record!r} holds no run")
    return run_


def import_cases(
    format: str,
    source: str | Path,
    out: str | Path,
    *,
    limit: int | None = None,
    seed: int | None = None,
    split: str = "frozen",
    prefix: str | None = None,
    labelled: bool = False,
    corpus: bool = False,
) -> Any:
    """Convert a public dataset into golden cases (or, for wice/expertqa/ares, a labelled set).

    Args:
        format: The dataset's format (``squad2``, ``hotpotqa``, ``musique``, ``wice``, ...).
        source: The dataset file.
        out: The case file (JSONL) to write.
        limit: Import at most this many records.
        seed: The seed of the draw when ``limit`` is given.
        split: The cases' split (default ``frozen``).
        prefix: The prefix of the cases' ids.
        labelled: Write a labelled set (wice, expertqa, ares only).
        corpus: Pool every paragraph of the file into ``OUT/corpus.jsonl`` and write cases without
            sources (squad2, hotpotqa, musique).

    Returns:
        The import report: what was imported, what was refused and why.
    """
    from qaeval.data.importers import LABELLED_FORMATS, import_file

    if labelled and format not in LABELLED_FORMATS:
        raise UsageError(f"--labelled is for {', '.join(LABELLED_FORMATS)}; {format} holds QA cases")
    return import_file(format, source, out, limit=limit, seed=seed, split=split, prefix=prefix, corpus=corpus)


def add_case(data: str | Path, miss: Any = None, *, interactive: bool = False) -> tuple[str, Path]:
    """Append one production miss to the living split.

    Args:
        data: The folder of golden cases.
        miss: A miss file's path, or a dict in the golden case's field names.
        interactive: Ask for the fields at the terminal instead.

    Returns:
        (The new case's id, the file it went to.)
    """
    from qaeval.data.misses import add_case as _add

    if miss is None and not interactive:
        raise UsageError("add-case needs --from MISS.json (or --interactive)")
    return _add(data, miss if miss is not None else {}, ask=input if interactive else None)
