"""``qaeval monitor`` and ``qa.monitor``: score logged traffic without gold. The log is scanned in chunks with
the gold-free checks run on each (``check_log``: any problem stops everything, every problem listed), the
labels read, the judged sample drawn and its rows read again from the log and judged as a run; then the
scoreboard, slices and windows (``qaeval.scoring.monitor_metrics``), the history and the notify hook.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from os import PathLike
from typing import Any

import pandas as pd

from qaeval.core.errors import DatasetError, Problem, UsageError
from qaeval.core.frames import frame
from qaeval.core.params import DEFAULT_K
from qaeval.data.labels import load_labels
from qaeval.data.logs import NONE_GROUP, LogScan, rows_at, scan_logs
from qaeval.scoring.judge import judge_config_of
from qaeval.scoring.monitor import ROW_COLUMNS, check_rows, judge_columns, judge_sample, sample_rows
from qaeval.scoring.monitor_metrics import (
    ABSENT_NOTE,
    ALL,
    METRICS,
    WINDOW_SCHEMA,
    scoreboard,
    slice_frame,
    window_frame,
    window_keys,
)
from qaeval.scoring.ppi import fresh_labels
from qaeval.scoring.result import RunMeta, RunResult
from qaeval.verdicts.drift import notify_alarms
from qaeval.verdicts.monitor import MonitorResult, watch


def check_window(every: str | None) -> None:
    """A time span the windows can be cut by (1D, 1W, 6h, 30min, ...) of at least one unit, or a
    UsageError, before anything is read: a span is tried on two timestamps as the windows will use it."""
    if every is None:
        return
    from pandas.tseries.frequencies import to_offset

    works = "a time span such as 1D, 1W, 6h or 30min"
    try:
        offset = to_offset(every)
        window_keys(pd.Series(["2026-01-01T00:00:00Z", "2026-02-15T12:30:00Z"]), every)
    except (ValueError, TypeError, AttributeError):
        raise UsageError(f"window {every!r} cannot cut the log into windows; give {works}") from None
    if offset.n < 1:
        raise UsageError(f"window {every!r} is empty or negative; give {works}")


def check_log(source: Any, fmt: str | None = None) -> tuple[pd.DataFrame, LogScan]:
    """(one row of check results per log row, the scan) or a DatasetError naming every problem."""
    scan = LogScan(str(source) if isinstance(source, (str, PathLike)) else "<DataFrame>")
    parts = [check_rows(rows, sorted({k for r in rows for k in r.slices})) for rows in scan_logs(source, scan, fmt=fmt)]
    clash = ", ".join(c for c in scan.slice_columns if c in ROW_COLUMNS or c == ALL)
    if clash:
        why = f"column(s) {clash} are names of the monitor's own per-row columns or of its {ALL} slice"
        scan.problems.append(Problem(scan.where, None, f"{why}: rename them in the log"))
    if scan.problems:
        raise DatasetError(scan.problems)
    if not parts:
        raise DatasetError("the log has no rows", file=scan.where)
    rows = pd.concat(parts, ignore_index=True)
    for column in scan.slice_columns:
        rows[column] = rows[column].astype(object).fillna(NONE_GROUP).astype("category")
    return rows, scan


def _windows(rows: pd.DataFrame, every: str | None, by: Sequence[str], notes: list[str]) -> pd.DataFrame:
    if every is None:
        return frame([], WINDOW_SCHEMA)
    keys = window_keys(rows["timestamp"], every)
    missing = int(keys.isna().sum())
    if missing == len(rows):
        raise UsageError("window needs a timestamp column: no row of the log has one")
    if missing:
        notes.append(f"{missing} row(s) have no timestamp: they are in no window")
    early = sorted({k for k in keys.dropna().tolist() if k < "1970"})
    if early:  # a week's window of 1970-01-01 starts on 1969-12-29, which no history may hold
        raise DatasetError(
            f"window {every} puts rows in a window that starts before 1970 ({early[0]}); the history "
            "holds 1970 to 2999: check those timestamps, or choose a window that starts with them"
        )
    return window_frame(rows, keys, by)


def monitor(
    source: Any,
    judge: Any,
    *,
    by: Sequence[str] = (),
    every: str | None = None,
    sample: int | None = None,
    seed: int = 0,
    labels: str | None = None,
    timeseries: str | None = None,
    band_window: int = 10,
    min_rows: int = 30,
    notify: Callable[..., Any] | None = None,
    log_format: str | None = None,
    annotations: str | None = None,
) -> MonitorResult:
    """Score a log (path or DataFrame) with ``judge`` (a JudgeClient); see the module's steps."""
    _check_options(source, every, timeseries, annotations, log_format)
    rows, scan = check_log(source, fmt=log_format)
    _check_by(by, scan)
    label_frame = load_labels(labels, known_cases=set(rows["row_id"])) if labels else None
    rows = sample_rows(rows, sample, seed, by)
    notes = scan.notes() + [ABSENT_NOTE, _sample_note(rows, sample, by)]
    run, meta = _judge_picked(source, judge, rows, scan, log_format, label_frame)
    rows = judge_columns(rows, run)
    usable = fresh_labels(label_frame, run.per_case) if label_frame is not None else None
    if label_frame is not None and usable is not None:
        notes.append(_labels_note(label_frame, usable))
    windows = _windows(rows, every, by, notes)
    result = MonitorResult(
        run=run,
        rows=rows,
        scoreboard=scoreboard(rows, usable),
        slices=slice_frame(rows, by, usable),
        windows=windows,
        by=list(by),
        every=every,
        sample=sample,
        seed=seed,
        source=scan.where,
        notes=notes,
        timeseries=timeseries or "",
    )
    if timeseries:
        _watch(result, windows, timeseries, scan.where, meta, band_window=band_window, min_rows=min_rows, notify=notify)
    if annotations:
        from qaeval.reports.annotations import write_annotations

        result.notes.append(write_annotations(result.rows, annotations, source, log_format))
    return result


def _check_options(
    source: Any, every: str | None, timeseries: str | None, annotations: str | None, log_format: str | None
) -> None:
    """The window, the history and the annotations file are usable, before the log is read."""
    check_window(every)
    if timeseries and every is None:
        raise UsageError("timeseries needs window: the history gets one line per time window")
    if annotations:
        from qaeval.reports.annotations import check_annotations_path

        check_annotations_path(annotations, source, log_format)


def _check_by(by: Sequence[str], scan: LogScan) -> None:
    """Each ``by`` column is a slice column of the log."""
    unknown = [c for c in by if c not in scan.slice_columns]
    if unknown:
        raise UsageError(
            f"by {', '.join(unknown)}: not a slice column of the log; its slice columns are: "
            f"{', '.join(scan.slice_columns) or '(none)'}"
        )


def _judge_picked(
    source: Any, judge: Any, rows: pd.DataFrame, scan: LogScan, log_format: str | None, label_frame: pd.DataFrame | None
) -> tuple[RunResult, RunMeta]:
    """(the sampled rows, read again from the log and judged as a run with the labels, its meta)."""
    picked = rows[rows["sampled"]]
    judged = rows_at(
        source,
        dict(zip(picked["line"].tolist(), picked["row_id"].tolist())),
        scan.where,
        log_format,
        scan.trace_index or None,
    )
    meta = RunMeta.now(
        adapter=f"(logged answers: {scan.where})", judge=judge_config_of(judge), k=DEFAULT_K, data=scan.where
    )
    return judge_sample(judged, judge, meta, scan.where).with_labels(label_frame), meta


def _labels_note(label_frame: pd.DataFrame, usable: pd.DataFrame) -> str:
    """How many labels the PPI columns use: on judged rows with their output unchanged, on a monitor axis."""
    axes = sorted({m.label_axis for m in METRICS if m.label_axis is not None})
    used = usable[usable["axis"].isin(axes)]
    unused = sorted(set(usable["axis"]) - set(axes))
    return (
        f"{len(usable)} of {len(label_frame)} label(s) are on judged rows with their output unchanged; "
        f"the PPI columns use the {len(used)} on {', '.join(axes)}"
        + (f" (no monitor metric uses {', '.join(unused)})" if unused else "")
    )


def _watch(
    result: MonitorResult,
    windows: pd.DataFrame,
    timeseries: str,
    source: str,
    meta: RunMeta,
    *,
    band_window: int,
    min_rows: int,
    notify: Callable[..., Any] | None,
) -> None:
    """Add the windows to the history, and the timeline, alarms and their notes (with the hook's) to the result."""
    about = dict(
        source=source, judge=meta.judge.to_dict(), git_commit=meta.git_commit, qaeval_version=meta.qaeval_version
    )
    result.timeline, result.alarms, more = watch(
        windows, timeseries, about=about, band_window=band_window, min_rows=min_rows, hops=result.hops
    )
    result.notes += more + notify_alarms(notify, result.alarms)


def _sample_note(rows: pd.DataFrame, sample: int | None, by: Sequence[str]) -> str:
    answered, judged = int(rows["answered"].sum()), int(rows["sampled"].sum())
    if sample is None or judged == answered:
        return f"the judge graded every answered row ({judged})"
    strata = f", stratified by {', '.join(by)}; each judged row weighted by its stratum's share" if by else ""
    return f"the judge graded a uniform random {judged} of {answered} answered row(s){strata}"
