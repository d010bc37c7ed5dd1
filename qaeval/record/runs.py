"""Every saved run record under a folder as one table: which command, when, on what commit, with what
verdict and headline metrics, and where its report is.

``runs_table(folder)`` loads every ``*.json`` file under the folder (at any depth) with
``qaeval.record.read.load_run``; a file that does not load is a row too, with only its ``reason`` (and
path) filled in: listed, never skipped.

Columns, in order:

====================  ====================================================================================
``time``              when the command ran (UTC; NaT for a baseline, which leaves its time out)
``kind``              run, gate, calibrate, drift or monitor (a baseline is a run)
``verdict``           GREEN/RED, PASS/BLOCK, TRUSTED/RETUNE JUDGE, OK/ALARM
``commit``            the git commit the command ran on, when it was a git checkout
``adapter``           the system under test
``judge``             the judge: name, model, temperature, seed and rubric
``data_fingerprint``  sha256 of the golden cases it ran on
``<metric>``          each headline metric's value, then ``<metric>_ci_low``, ``<metric>_ci_high``, ``<metric>_n``:
                      the golden metrics, then the monitor's own (a monitor's row holds its scoreboard over
                      every logged row; a metric a record's kind does not compute is empty)
``path``              the record's path
``report``            the HTML report beside it (same name, ``.html``), or None
``reason``            why the record could not be read, or None
====================  ====================================================================================

Rows are in time order (records without a time last), then by path.
"""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import pandas as pd

from qaeval.core.errors import DatasetError, QaevalError
from qaeval.core.files import file_kind
from qaeval.core.results import Result
from qaeval.record.read import load_run
from qaeval.scoring.metrics import METRIC_NAMES
from qaeval.scoring.monitor_metrics import METRIC_NAMES as MONITOR_METRICS

IDENTITY = ("time", "kind", "verdict", "commit", "adapter", "judge", "data_fingerprint")
INTERVAL = ("", "_ci_low", "_ci_high", "_n")
HEADLINE = tuple(dict.fromkeys([*METRIC_NAMES, *MONITOR_METRICS]))  # a run's metrics, then a monitor's own
METRIC_COLUMNS = tuple(m + suffix for m in HEADLINE for suffix in INTERVAL)
COLUMNS = IDENTITY + METRIC_COLUMNS + ("path", "report", "reason")


def record_files(folder: str | Path) -> list[Path]:
    """The candidate records under ``folder``, sorted; a DatasetError (exit 65, as for a missing data folder)
    when there is no such folder."""
    root = Path(folder)
    if not root.is_dir():
        raise DatasetError(
            "no such folder of run records"
            if not root.exists()
            else "not a folder: give the folder the run records were saved in",
            file=str(root),
        )
    return sorted(root.rglob("*.json"))  # every entry: one that is not a readable file is a row saying why


def _not_a_file(path: Path) -> str | None:
    """Why ``path`` is no record file (a dangling symbolic link, a folder, a FIFO, ...), or None when it is a
    regular file; found without opening it (opening a FIFO would wait for a writer)."""
    try:
        info = path.stat()
    except FileNotFoundError:
        return "a symbolic link to nothing" if path.is_symlink() else "gone while listing"
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    if stat.S_ISREG(info.st_mode):
        return None
    return file_kind(info.st_mode)


def _row(result: Result) -> dict[str, Any]:
    run: Any = getattr(result, "run", result)
    meta = run.meta
    row: dict[str, Any] = dict(
        time=meta.created,
        kind=result.kind,
        verdict=result.verdict,
        commit=meta.git_commit,
        adapter=meta.adapter,
        judge=meta.judge.label(),
        data_fingerprint=run.suite.fingerprint,
    )
    board = result.headline().set_index("metric")
    for m in HEADLINE:
        line = board.loc[m] if m in board.index else None
        for suffix, field in zip(INTERVAL, ("value", "ci_low", "ci_high", "n")):
            row[m + suffix] = None if line is None else line[field]
    return row


def read_row(path: Path) -> dict[str, Any]:
    """One record as a row; a record that does not load is a row carrying only its path and the reason."""
    row, reason = {}, _not_a_file(path)
    if reason is not None:
        reason = f"not a record file: {reason}"
    else:
        try:
            row = _row(load_run(path))
        except (QaevalError, OSError, ValueError) as exc:
            row, reason = {}, f"{type(exc).__name__}: {exc}"
    report = path.with_suffix(".html")
    return {**row, "path": str(path), "report": str(report) if report.is_file() else None, "reason": reason}


def runs_table(folder: str | Path) -> pd.DataFrame:
    """One row per record under ``folder`` (see the module's docstring for the columns)."""
    table = pd.DataFrame([read_row(p) for p in record_files(folder)], columns=list(COLUMNS))
    for column in ("kind", "verdict", "commit", "adapter", "judge", "data_fingerprint", "report", "reason"):
        table[column] = table[column].astype(object).where(table[column].notna(), None)
    table["time"] = pd.to_datetime(table["time"], utc=True, errors="coerce", format="ISO8601")
    for m in HEADLINE:
        for suffix in INTERVAL[:3]:
            table[m + suffix] = pd.to_numeric(table[m + suffix], errors="coerce").astype("float64")
        table[m + "_n"] = pd.to_numeric(table[m + "_n"], errors="coerce").astype("Int64")
    return table.sort_values(["time", "path"], na_position="last", kind="stable").reset_index(drop=True)


def metrics_shown(table: pd.DataFrame) -> list[str]:
    """The headline metrics some readable record in ``table`` has a row for (a folder of golden runs shows
    no monitor-only column, and the other way round)."""
    readable = table[table["reason"].isna()]
    return [m for m in HEADLINE if readable[m + "_n"].notna().any()]


def summary_text(table: pd.DataFrame, folder: str | Path) -> str:
    """The table as the command line prints it: a line per record with its headline values, then the
    records that could not be read, each with its reason."""
    if table.empty:
        return f"no run records (*.json) under {folder}"
    readable = table[table["reason"].isna()]
    shown = pd.DataFrame(
        {
            "time": readable["time"].dt.strftime("%Y-%m-%d %H:%M").fillna("-"),
            "kind": readable["kind"],
            "verdict": readable["verdict"],
            "commit": readable["commit"].map(lambda c: (c or "-")[:7]),
            **{m: readable[m].map(lambda v: "NaN" if pd.isna(v) else f"{v:.3f}") for m in metrics_shown(table)},
            "path": readable["path"],
        }
    )
    lines = [f"{len(table)} record(s) under {folder}, {len(table) - len(readable)} could not be read"]
    if len(shown):
        lines.append(shown.to_string(index=False))
    lines += [f"could not read {r['path']}: {r['reason']}" for r in table[table["reason"].notna()].to_dict("records")]
    return "\n".join(lines)
