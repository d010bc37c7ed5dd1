"""Drift: re-run the frozen split, append a record to a time series, alarm when a metric leaves its band.

The series is JSONL, append-only, one record per run: time, metrics, n per metric, adapter, judge
config, dataset fingerprint, git commit (when the working directory is a git checkout) and qaeval's
version. Appends take an exclusive lock and write the whole line in one call, so two writers at once
never interleave; if the file ends in a torn line (a writer killed mid-line), the next append starts
on a fresh line and readers skip the fragment, saying so.

The band for each metric is the trailing window's mean plus or minus max(3 standard deviations,
``min_width``), over the earlier runs that did not alarm on that metric (each record lists its alarms),
so a sustained drop keeps alarming instead of widening its own band; start a new series to accept a
change. Higher-is-better metrics alarm only on a drop below the band; over_refusal_rate alarms on
leaving it in either direction. With fewer than ``min_history`` earlier records there is no band
and no alarm, and the result says so.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd

from qaeval.errors import DriftAlarm
from qaeval.metrics import BY_NAME, METRIC_NAMES

DEFAULT_WINDOW = 10
MIN_HISTORY = 3
MIN_WIDTH = 0.02
TWO_SIDED = {"over_refusal_rate"}

try:  # POSIX advisory locks; elsewhere appends are still single write() calls
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]


def git_commit(cwd: str | Path | None = None) -> str | None:
    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else None


def make_record(run: Any, *, now: datetime | None = None) -> dict[str, Any]:
    from qaeval import __version__

    board = run.scoreboard.set_index("metric")
    value = lambda m: None if math.isnan(board.at[m, "value"]) else round(float(board.at[m, "value"]), 6)  # noqa: E731
    return dict(
        time=(now or datetime.now(timezone.utc)).isoformat(timespec="seconds"),
        metrics={m: value(m) for m in METRIC_NAMES},
        n={m: int(board.at[m, "n"]) for m in METRIC_NAMES},
        cases=len(run.suite), adapter=run.adapter, judge=run.judge_config.to_dict(),
        dataset_fingerprint=run.dataset_fingerprint, git_commit=git_commit(), qaeval_version=__version__,
    )


def append_record(path: str | Path, record: dict[str, Any]) -> None:
    """Append one record as one line, under an exclusive lock, isolating any torn last line."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = (json.dumps(record, sort_keys=True, ensure_ascii=False) + "\n").encode()
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            line = b"\n" + line
        os.write(fd, line)
    finally:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def read_history(path: str | Path) -> tuple[list[dict[str, Any]], list[str]]:
    """(records, notes). Unparseable lines (torn writes) are skipped and each is named in the notes."""
    path = Path(path)
    if not path.exists():
        return [], [f"no history at {path} yet; it starts with this run"]
    records, notes = [], []
    text = path.read_bytes().decode("utf-8", errors="replace")
    lines = text.split("\n")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            if not isinstance(record, dict) or not isinstance(record.get("metrics"), dict):
                raise ValueError
        except ValueError:
            torn = "torn last line" if number == len(lines) or not any(lines[number:]) else "unreadable line"
            notes.append(f"skipped {torn} {number} of {path}")
            continue
        records.append(record)
    return records, notes


@dataclass
class DriftResult:
    record: dict[str, Any]
    history: pd.DataFrame  # one row per (run, metric): run, time, metric, value, current (bool)
    bands: pd.DataFrame
    alarms: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)
    window: int = DEFAULT_WINDOW

    @property
    def alarmed(self) -> bool:
        return bool(self.alarms)

    @property
    def verdict(self) -> str:
        return "ALARM" if self.alarms else "OK"

    def raise_for_status(self) -> None:
        if self.alarms:
            raise DriftAlarm("drift alarm on " + ", ".join(a["metric"] for a in self.alarms), self)

    def to_frame(self) -> pd.DataFrame:
        return self.bands

    def summary_text(self) -> str:
        lines = [f"DRIFT: {self.verdict}   ({len(self.history['run'].unique()) if len(self.history) else 0} runs in the series, window {self.window})"]
        f = lambda v: "NaN" if v is None or v != v else f"{v:.3f}"  # noqa: E731
        for r in self.bands.itertuples(index=False):
            band = "no band" if r.low != r.low else f"[{f(r.low)}, {f(r.high)}]"
            mark = "  <- ALARM" if r.alarm else ""
            lines.append(f"  {r.metric:<26} {f(r.current):>7}  band {band:<16} over {r.window_n} runs{mark}")
        for a in self.alarms:
            lines.append(f"  alarm: {a['message']}")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary_text()

    def _repr_html_(self) -> str:
        from qaeval.reports import banner_html

        return banner_html(self.verdict, "; ".join(a["message"] for a in self.alarms) or "every metric inside its band") + \
            self.bands.to_html(index=False, escape=True, na_rep="NaN", float_format=lambda v: f"{v:.3f}")


def compare(history: list[dict[str, Any]], record: dict[str, Any], *, window: int = DEFAULT_WINDOW,
            min_history: int = MIN_HISTORY, min_width: float = MIN_WIDTH) -> tuple[pd.DataFrame, list[dict[str, Any]], list[str]]:
    """Bands over the trailing window of ``history`` and the alarms ``record`` raises. Pure."""
    trailing = history[-window:] if window > 0 else []
    rows, alarms, notes = [], [], []
    for name in METRIC_NAMES:
        # A run that alarmed on this metric does not widen its band: a sustained drop keeps alarming.
        values = [r["metrics"].get(name) for r in trailing if name not in (r.get("alarms") or [])]
        values = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]
        current = record["metrics"].get(name)
        current = math.nan if current is None else float(current)
        low = high = mean = math.nan
        alarm = False
        if len(values) >= min_history:
            mean = sum(values) / len(values)
            std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
            half = max(3 * std, min_width)
            low, high = max(0.0, mean - half), min(1.0, mean + half)  # every metric is a rate
            if not math.isnan(current):
                two_sided = name in TWO_SIDED or not BY_NAME[name].higher_is_better
                alarm = current < low or (two_sided and current > high)
        if alarm:
            way = "dropped below" if current < low else "rose above"
            alarms.append(dict(metric=name, current=current, low=low, high=high, mean=mean,
                               message=f"{name} {way} its band: {current:.3f} vs [{low:.3f}, {high:.3f}] "
                                       f"(mean of {len(values)} runs {mean:.3f})"))
        rows.append(dict(metric=name, current=current, mean=mean, low=low, high=high, window_n=len(values),
                         direction="both" if name in TWO_SIDED else BY_NAME[name].direction, alarm=alarm))
    if len(trailing) < min_history:
        notes.append(f"history too short to alarm: {len(trailing)} earlier run(s), {min_history} needed")
    return pd.DataFrame(rows), alarms, notes


def drift(run: Any, timeseries: str | Path, *, window: int = DEFAULT_WINDOW, min_history: int = MIN_HISTORY,
          notify: Callable[[list[dict[str, Any]]], Any] | None = None, now: datetime | None = None) -> DriftResult:
    """Compare ``run`` with the series' trailing window, then append its record. Calls ``notify``
    with the alarms when there are any; a hook that fails is noted, not fatal."""
    history, notes = read_history(timeseries)
    record = make_record(run, now=now)
    bands, alarms, more = compare(history, record, window=window, min_history=min_history)
    record["alarms"] = [a["metric"] for a in alarms]
    notes += more
    if history and history[-1].get("dataset_fingerprint") != record["dataset_fingerprint"]:
        notes.append("the frozen split's fingerprint differs from the previous run's: the series mixes datasets")
    append_record(timeseries, record)
    rows = []
    for i, r in enumerate([*history, record]):
        for m in METRIC_NAMES:
            v = r["metrics"].get(m)
            rows.append(dict(run=i, time=r.get("time"), metric=m, value=math.nan if v is None else float(v),
                             current=i == len(history)))
    if alarms and notify is not None:
        try:
            notify(alarms)
        except Exception as exc:  # noqa: BLE001
            notes.append(f"notify hook raised {type(exc).__name__}: {exc}")
    return DriftResult(record, pd.DataFrame(rows), bands, alarms, notes, window)
