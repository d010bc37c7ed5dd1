"""Drift: re-run the frozen split, compare each metric with its band, then append the run to a series.

The series is JSONL, one line per run (``summary_dict``), appended with ``qaeval.core.files.append_line``
and read strictly (``qaeval.verdicts.history``: bad data stops before anything is appended). A metric's
band is the trailing window's mean plus or minus max(3 sd, ``min_width``) over the earlier runs that did
not alarm on it, so a sustained drop keeps alarming; ``Metric.drift`` says which way it alarms; fewer
than ``min_history`` earlier runs give no band. The notify hook is user code, called in its own process
with the alarms (dicts: ``metric``, ``current``, ``low``, ``high``, ``mean``, ``message``) after the
append; whatever it does is noted and the verdict stands (docs/guides/drift-monitor.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from qaeval.core.audit import Audit
from qaeval.core.errors import DriftAlarm
from qaeval.core.files import append_line
from qaeval.core.frames import Each, Fields, Maybe, Valid, clean, frame, frame_rows, rows_of, shape_problems
from qaeval.core.results import Result
from qaeval.scoring.metrics import METRIC_NAMES, METRICS, format_number
from qaeval.scoring.result import RunResult
from qaeval.verdicts.history import history_line, read_history, time_problem
from qaeval.worker.plugins import contained

DEFAULT_WINDOW = 10
MIN_HISTORY = 3
MIN_WIDTH = 0.02

HISTORY_SCHEMA = {
    "run": "int",
    "time": "text",
    "commit": "text",
    "metric": "text",
    "value": "float",
    "current": "bool",
    "alarmed": "bool",
}
BAND_SCHEMA = {
    "metric": "text",
    "current": "float",
    "mean": "float",
    "low": "float",
    "high": "float",
    "window_n": "int",
    "direction": "text",
    "alarm": "bool",
}

ALARM = Fields(dict(metric="str", current="float", low="float", high="float", mean="float", message="str"))


SECTION = Fields(
    dict(  # the drift section of a record: the line appended, the series as charted, bands, alarms
        line="dict",
        history=rows_of(
            HISTORY_SCHEMA, time=Valid("text", lambda t: time_problem(t) is None, "an ISO 8601 date and time")
        ),
        bands=rows_of(BAND_SCHEMA),
        alarms=Each(ALARM),
        notes=Maybe(Each("str")),
        window="int",
        timeseries="text",
        min_history="int",
    ),
    optional=("notes", "timeseries", "min_history"),
)


DIRECTIONS = {"drop": "alarms on a drop", "rise": "alarms on a rise", "both": "alarms both ways"}  # a band's words


def out_of_band(current: float | None, low: float | None, high: float | None, way: str) -> bool:
    """Whether ``current`` is out of [low, high] in the direction ``way`` ("drop", "rise", "both") alarms on;
    a missing value is never out."""
    if current is None or low is None or high is None or any(math.isnan(v) for v in (current, low, high)):
        return False
    return (current < low and way in ("drop", "both")) or (current > high and way in ("rise", "both"))


def compare(
    history: list[dict[str, Any]],
    record: dict[str, Any],
    *,
    window: int = DEFAULT_WINDOW,
    min_history: int = MIN_HISTORY,
    min_width: float = MIN_WIDTH,
    metrics: Sequence[Any] = METRICS,
    unit: str = "runs",
) -> tuple[pd.DataFrame, list[dict[str, Any]], list[str]]:
    """Bands over the trailing window of ``history`` and the alarms ``record`` raises, for each of
    ``metrics``: anything with a ``name`` and a ``drift`` rule ("drop", "rise" or "both"), a run's
    ``Metric`` objects (registered ones too; earlier runs without one give it a shorter band) or the
    monitor's. ``unit`` names what the history holds in messages ("runs", a monitor's "windows"). Pure."""
    trailing = history[-window:] if window > 0 else []
    rows, alarms, notes = [], [], []
    for metric in metrics:
        name, way = metric.name, metric.drift
        # A run that alarmed on this metric does not widen its band: a sustained drop keeps alarming.
        values = [r["metrics"].get(name) for r in trailing if name not in (r.get("alarms") or [])]
        values = [float(v) for v in values if v is not None]
        current = record["metrics"].get(name)
        current = math.nan if current is None else float(current)
        low = high = mean = math.nan
        alarm = False
        if len(values) >= min_history:
            mean = sum(values) / len(values)
            std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
            half = max(3 * std, min_width)
            low, high = max(0.0, mean - half), min(1.0, mean + half)  # every metric is a rate
            alarm = out_of_band(current, low, high, way)
        if alarm:
            moved = "dropped below" if current < low else "rose above"
            message = (
                f"{name} {moved} its band: {current:.3f} vs [{low:.3f}, {high:.3f}] "
                f"(mean of {len(values)} {unit} {mean:.3f})"
            )
            alarms.append(dict(zip(ALARM.fields, (name, current, low, high, mean, message))))
        band = (name, current, mean, low, high, len(values), DIRECTIONS[way], alarm)
        rows.append(dict(zip(BAND_SCHEMA, band)))
    if len(trailing) < min_history:
        notes.append(f"history too short to alarm: {len(trailing)} earlier {unit}, {min_history} needed")
    return frame(rows, BAND_SCHEMA), alarms, notes


@dataclass(repr=False)
class DriftResult(Result):
    """A run's metrics against the history of earlier runs: a band per metric, an alarm when one leaves it.

    ``ok`` (OK) when every metric is inside its band; ``raise_for_status()`` raises ``DriftAlarm``.

    Attributes:
        run: The current run.
        record: What this run appends to the history file.
        history: One row per (run, metric): run, time, commit, metric, value, current, alarmed.
        bands: One row per metric: current value, the band's mean, low and high, the window's n,
            the direction that alarms, and whether it did.
        alarms: One entry per metric that left its band (metric, current, low, high, mean, message).
        notes: What the result says about itself (a history too short to alarm, ...).
        window: How many earlier runs a band is drawn from.
        timeseries: The history file.
        min_history: The fewest earlier runs before a metric can alarm.
    """

    run: RunResult
    record: dict[str, Any]
    history: pd.DataFrame  # one row per (run, metric): run, time, commit, metric, value, current
    bands: pd.DataFrame
    alarms: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)
    window: int = DEFAULT_WINDOW
    timeseries: str = ""
    min_history: int = MIN_HISTORY

    kind = "drift"
    error_type = DriftAlarm
    words = ("OK", "ALARM")

    @property
    def ok(self) -> bool:
        return not self.alarms

    @property
    def reason(self) -> str:
        if self.alarms:
            return "alarm on " + ", ".join(a["metric"] for a in self.alarms)
        return "every metric inside its band"

    @property
    def runs(self) -> int:
        return int(self.history["run"].nunique()) if len(self.history) else 0

    def summary_text(self) -> str:
        lines = [f"DRIFT: {self.verdict}   ({self.runs} runs in the series, window {self.window})"]
        f = format_number
        for r in self.bands.itertuples(index=False):
            band = "no band" if r.low != r.low else f"[{f(r.low)}, {f(r.high)}]"
            mark = "  <- ALARM" if r.alarm else ""
            lines.append(f"  {r.metric:<26} {f(r.current):>7}  band {band:<16} over {r.window_n} runs{mark}")
        for a in self.alarms:
            lines.append(f"  alarm: {a['message']}")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)

    def to_frame(self) -> pd.DataFrame:
        return self.bands

    def record_section(self) -> dict[str, Any]:
        return dict(
            line=self.record,
            history=frame_rows(self.history),
            bands=frame_rows(self.bands),
            alarms=clean(self.alarms),
            notes=self.notes,
            window=self.window,
            timeseries=self.timeseries,
            min_history=self.min_history,
        )

    @classmethod
    def section_problems(cls, s: Mapping[str, Any], prefix: str = "drift") -> list[str]:
        return shape_problems(s, SECTION, prefix)  # see GateResult.section_problems

    @classmethod
    def from_section(cls, run: RunResult, s: Mapping[str, Any]) -> DriftResult:
        return cls(
            run=run,
            record=dict(s["line"]),
            history=frame(s["history"], HISTORY_SCHEMA),
            bands=frame(s["bands"], BAND_SCHEMA),
            alarms=[dict(a) for a in s["alarms"]],
            notes=list(s.get("notes") or []),
            window=int(s["window"]),
            timeseries=str(s.get("timeseries") or ""),
            min_history=int(s.get("min_history", MIN_HISTORY)),
        )

    def audit_section(self, audit: Audit, s: Mapping[str, Any], prefix: str = "drift") -> None:
        """Decide the drift again: the appended line from the run's scoreboard, then the bands and alarms
        from the earlier runs the record's history holds (their values and which metrics each alarmed
        on), with the record's window and minimum history. Whether that history is the series file it
        names is not checked."""
        if self.window < 1 or self.min_history < 1:
            audit.problem(f"{prefix} window {self.window} / min_history {self.min_history} is out of range")
            return
        line = summary_dict(self.run)
        for key in ("metrics", "n", "cases", "dataset_fingerprint"):
            audit.same(f"{prefix}.line.{key}", self.record.get(key), line[key])
        hist = self.history
        runs = hist["run"].drop_duplicates().tolist()
        current = hist.loc[hist["current"], "run"].drop_duplicates().tolist()
        if (
            runs != list(range(len(runs)))
            or current != runs[-1:]
            or not all(len(group) == len(self.run.metrics) for _, group in hist.groupby("run"))
        ):
            audit.problem(f"{prefix}.history is not one row per metric for runs 0, 1, ..., the last one current")
            return
        earlier = [
            dict(
                metrics=dict(zip(g["metric"], (None if v != v else v for v in g["value"]))),
                alarms=g.loc[g["alarmed"], "metric"].tolist(),
            )
            for _, g in hist[~hist["current"]].groupby("run")
        ]
        now = hist[hist["current"]]
        audit.same(
            f"{prefix}.history (current run)",
            dict(zip(now["metric"], (None if v != v else v for v in now["value"]))),
            line["metrics"],
        )
        bands, alarms, _ = compare(
            earlier, line, window=self.window, min_history=self.min_history, metrics=self.run.metrics
        )
        audit.same(
            f"{prefix}.history (current run's alarms)",
            now.loc[now["alarmed"], "metric"].tolist(),
            [a["metric"] for a in alarms],
        )
        audit.same(f"{prefix}.line.alarms", self.record.get("alarms"), [a["metric"] for a in alarms])
        if not audit.same(f"{prefix}.bands metrics", [b.get("metric") for b in s["bands"]], bands["metric"].tolist()):
            return
        for j, (stored, row) in enumerate(zip(s["bands"], bands.to_dict("records"))):
            for column in ("current", "mean", "low", "high", "window_n", "alarm"):
                audit.same(f"{prefix}.bands[{j}].{column} ({row['metric']})", stored.get(column), row[column])
        keys = ("metric", "current", "low", "high", "mean")
        audit.same(
            f"{prefix}.alarms", [[a.get(k) for k in keys] for a in s["alarms"]], [[a[k] for k in keys] for a in alarms]
        )


def summary_dict(run: RunResult) -> dict[str, Any]:
    """The short form of a run: its metrics, their n and how it was made (a drift history line)."""
    board = run.scoreboard.set_index("metric")
    names = [m.name for m in run.metrics]
    return dict(
        metrics={m: clean(float(board.at[m, "value"])) for m in names},
        n={m: int(board.at[m, "n"]) for m in names},
        cases=len(run.suite),
        trials=run.trials,
        adapter=run.meta.adapter,
        isolation=run.meta.isolation,
        judge=run.meta.judge.to_dict(),
        dataset_fingerprint=run.dataset_fingerprint,
        git_commit=run.meta.git_commit,
        time=run.meta.created,
        qaeval_version=run.meta.qaeval_version,
    )


def notify_alarms(notify: Callable[[list[dict[str, Any]]], Any] | None, alarms: list[dict[str, Any]]) -> list[str]:
    """Tell the hook about the alarms, if any; the notes on how that went (the alarm stands whatever it does)."""
    if not alarms or notify is None:
        return []
    notes = []
    ok, why = contained(notify, [dict(a) for a in alarms], what="the notify hook")
    if not ok:
        notes.append(f"{why}; the alarm stands")
    output = getattr(notify, "output", "")  # what a hook run in its own process printed
    if isinstance(output, str) and output:
        notes.append(f"the notify hook printed: {output}")
    return notes


def history_frame(
    history: list[dict[str, Any]], record: dict[str, Any], names: Sequence[str] = METRIC_NAMES
) -> pd.DataFrame:
    rows = []
    for i, r in enumerate([*history, record]):
        run, alarmed = (i, r.get("time"), r.get("git_commit")), r.get("alarms") or []
        for m in names:
            v = r["metrics"].get(m)
            value = math.nan if v is None else float(v)
            rows.append(dict(zip(HISTORY_SCHEMA, (*run, m, value, i == len(history), m in alarmed))))
    return frame(rows, HISTORY_SCHEMA)


def drift(
    run: RunResult,
    timeseries: str | Path,
    *,
    window: int = DEFAULT_WINDOW,
    min_history: int = MIN_HISTORY,
    notify: Callable[[list[dict[str, Any]]], Any] | None = None,
) -> DriftResult:
    """Compare ``run`` with the series' trailing window, append its line, then tell ``notify`` about
    any alarms. Everything that can fail on bad data fails before the append."""
    history, notes = read_history(timeseries)
    record = summary_dict(run)
    bands, alarms, more = compare(history, record, window=window, min_history=min_history, metrics=run.metrics)
    record["alarms"] = [a["metric"] for a in alarms]
    notes += more
    if history and history[-1].get("dataset_fingerprint") != record["dataset_fingerprint"]:
        notes.append("the frozen split's fingerprint differs from the previous run's: the series mixes datasets")
    if history and history[-1].get("trials", 1) != record["trials"]:
        notes.append(
            f"{record['trials']} trial(s) per case, the previous run {history[-1].get('trials', 1)}: "
            "the series mixes trial counts (a metric is a mean over trials either way)"
        )
    if not run.meta.boundary_enforced:
        notes.append("isolation none: the boundary was not enforced in this run")
    line = history_line(record, timeseries)
    frame_ = history_frame(history, record, [m.name for m in run.metrics])
    append_line(timeseries, line)
    notes += notify_alarms(notify, alarms)
    return DriftResult(
        run=run,
        record=clean(record),
        history=frame_,
        bands=bands,
        alarms=alarms,
        notes=notes,
        window=window,
        timeseries=str(timeseries),
        min_history=min_history,
    )
