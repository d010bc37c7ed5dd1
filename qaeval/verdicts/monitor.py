"""Monitoring logged traffic: the result, and watching its time windows against a history.

``MonitorResult`` holds the rows, scoreboard, slices and windows (``qaeval.scoring.monitor_metrics``) and
``run``, the judged sample as a run. ``watch`` appends one line per time window to a history with the band
rules of ``qaeval.verdicts.drift``; a window with fewer than ``min_rows`` rows is appended marked
``too_few`` and neither compared nor banded; windows the history holds are not appended again.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from qaeval.core.audit import Audit
from qaeval.core.errors import DriftAlarm
from qaeval.core.files import append_line
from qaeval.core.frames import Each, Fields, Valid, clean, frame, frame_rows, rows_of, shape_problems
from qaeval.core.results import Result
from qaeval.data.logs import parse_timestamp
from qaeval.scoring.metrics import SCOREBOARD_SCHEMA, format_number, format_scoreboard
from qaeval.scoring.monitor import ROW_COLUMNS, TRACE_COLUMNS, judge_columns
from qaeval.scoring.monitor_hops import HOP_SCHEMA, RATE_NAME, hop_rates, rate_metrics
from qaeval.scoring.monitor_metrics import (
    ALL,
    METRIC_NAMES,
    METRICS,
    SLICE_SCHEMA,
    WINDOW_SCHEMA,
    metric_values,
    scoreboard,
)
from qaeval.scoring.result import RunResult
from qaeval.verdicts.drift import ALARM, BAND_SCHEMA, DIRECTIONS, MIN_HISTORY, compare, out_of_band
from qaeval.verdicts.history import history_line, read_history

MIN_ROWS = 30
BAND_WINDOW = 10

TIME = Valid("text", lambda t: t is None or parse_timestamp(t)[1] is None, "an ISO 8601 date and time")
NAMES: dict[str, Any] = dict(slice="str", group="str", metric="str")  # what the summary and the report format as text
WINDOWS = Valid(
    rows_of(WINDOW_SCHEMA, window=Valid("str", TIME.test, TIME.what), **NAMES),
    lambda rows: len({(r["window"], r["slice"], r["group"], r["metric"]) for r in rows}) == len(rows),
    "one row per window, slice, group and metric",
)
SECTION = Fields(
    dict(  # the monitor section of a record; each row also has a text value per slice column
        rows=rows_of(ROW_COLUMNS, ("digest", *TRACE_COLUMNS), timestamp=TIME, row_id="str"),
        slice_columns=Each(
            Valid("str", lambda c: c not in ROW_COLUMNS, "a column of its own (not one of the checks')")
        ),
        scoreboard=rows_of(SCOREBOARD_SCHEMA),
        slices=rows_of(SLICE_SCHEMA, **NAMES),
        windows=WINDOWS,
        by=Each("str"),
        every="text",
        sample="Int64",
        seed="int",
        source="str",
        notes=Each("str"),
        timeseries="text",
        timeline=Each(
            Fields(dict(window="str", rows="int", too_few="bool", bands=rows_of(BAND_SCHEMA), alarms=Each("str")))
        ),
        alarms=Each(Fields({**ALARM.fields, "window": "str"})),
    ),
    optional=("every", "sample", "timeseries"),
)


@dataclass(repr=False)
class MonitorResult(Result):
    """Logged traffic scored without gold: every row's checks, a judged sample, and alarms per window.

    ``ok`` (OK) when no window's metric left its band; ``raise_for_status()`` raises ``DriftAlarm``.

    Attributes:
        run: The judged sample, scored as a run.
        rows: One row per logged row: its time, each check's result, whether it passed and why not,
            whether it was sampled for the judge, and the judge's scores when it was.
        scoreboard: The monitor's metrics over every logged row.
        slices: The metrics per slice (the ``by`` columns).
        windows: The metrics per time window.
        by: The columns the traffic is sliced by.
        every: The time window (``1D``), or None for one window.
        sample: How many rows were judged, or None for all.
        seed: The seed the sample was drawn with.
        source: Where the logs came from.
        timeline: One entry per window appended to ``timeseries``.
        alarms: One entry per metric and window that left its band.
        notes: What the result says about itself.
        timeseries: The history file windows are appended to, or ``""``.
    """

    run: RunResult  # the judged sample
    rows: pd.DataFrame
    scoreboard: pd.DataFrame
    slices: pd.DataFrame
    windows: pd.DataFrame
    by: list[str]
    every: str | None = None
    sample: int | None = None
    seed: int = 0
    source: str = ""
    timeline: list[dict[str, Any]] = field(default_factory=list)  # one entry per window appended
    alarms: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    timeseries: str = ""

    kind = "monitor"
    error_type = DriftAlarm
    words = ("OK", "ALARM")

    @property
    def ok(self) -> bool:
        return not self.alarms

    def headline(self) -> pd.DataFrame:
        return self.scoreboard  # over every logged row; the judged sample's run board is not the monitor's

    @property
    def reason(self) -> str:
        if self.alarms:
            return "alarm on " + ", ".join(f"{a['metric']} ({a['window']})" for a in self.alarms)
        judged = int(self.rows["sampled"].sum())
        watched = f"; {len(self.timeline)} window(s) appended to {self.timeseries}" if self.timeseries else ""
        bands = "every window inside its bands" if self.timeseries else "no history to compare with"
        return f"no alarm ({bands}); {self.failing_share()}; {judged} judged{watched}"

    def failing_share(self) -> str:
        """What no alarm does not say (an alarm is a move, not a level).

        Returns:
            ``9 of 120 row(s) (7.5%) fail a check``.
        """
        bad, n = int((~self.rows["passed"].astype(bool)).sum()), len(self.rows)
        return f"{bad} of {n} row(s) ({bad / n:.1%}) fail a check" if n else "no row"

    @property
    def banner_word(self) -> str:
        """The banner's word: "OK" read as "good" while a fifth of the rows failed a check."""
        return "NO ALARM" if self.ok else "ALARM"

    @property
    def slice_columns(self) -> list[str]:
        return [c for c in self.rows.columns if c not in ROW_COLUMNS]

    @property
    def hops(self) -> pd.DataFrame:
        """Per-hop facts of a log read from traces (``qaeval.scoring.monitor_hops``): empty for rows."""
        from qaeval.scoring.monitor_hops import hop_frame

        return hop_frame(self.rows, self.by, self.every)

    def _hop_lines(self) -> list[str]:
        """Each hop over all rows and per slice group; per window over all rows (the report has every
        slice group's windows)."""
        hops = self.hops
        if hops.empty:
            return []
        lines = ["per hop (documents returned, cited by the answers, reached the prompt):"]
        for r in hops[hops["window"].isna() | (hops["slice"] == ALL)].itertuples(index=False):
            where = "" if r.slice == ALL else f"{r.slice}={r.group} "
            when = f"{r.window[:19]} " if isinstance(r.window, str) else ""
            lines.append(
                f"  {when}{where}hop {r.hop} {r.kind}: {r.rows} row(s), {r.documents} document(s), {r.cited} cited, "
                f"{r.prompted} in the prompt (of {r.prompt_rows} row(s) showing it)"
            )
        return lines

    def summary_text(self) -> str:
        lines = [f"MONITOR: {self.verdict}   ({self.reason})", format_scoreboard(self.scoreboard)]
        lines += self._hop_lines()
        for column in self.by:
            lines.append(f"by {column}:")
            part = self.slices[self.slices["slice"] == column]
            for r in part.itertuples(index=False):
                ppi = f"  PPI {format_number(r.ppi_value)} (n_labelled {r.n_labelled})" if r.n_labelled else ""
                lines.append(f"  {r.group:<20} {r.metric:<26} {format_number(r.value):>7}  n={r.n}{ppi}")
        lines += self._window_lines()
        for entry in self.timeline:
            state = "ALARM" if entry["alarms"] else "inside its bands"
            state = "too few rows to compare: no alarm" if entry["too_few"] else state
            lines.append(f"window {entry['window']}: {entry['rows']} row(s), {state}")
        lines += [f"  alarm: {a['message']}" for a in self.alarms]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)

    def _window_lines(self) -> list[str]:
        """Every metric per time window over all rows (the slices' windows are in ``windows`` and the report)."""
        overall = self.windows[self.windows["slice"] == ALL]
        if overall.empty:
            return []
        table = overall.pivot(index="window", columns="metric", values="value")
        table = table[[m for m in METRIC_NAMES if m in table.columns]].apply(lambda column: column.map(format_number))
        rows = overall.groupby("window")["rows"].first()
        table.insert(0, "rows", rows.reindex(table.index))
        judged = overall[overall["metric"] == "faithfulness_rate"].set_index("window")["n"]
        table.insert(1, "judged", judged.reindex(table.index).fillna(0).astype(int))  # a judge metric's n: 0 is NaN
        return [
            f"per {self.every} window (all rows; a judge metric is NaN where no row was judged):",
            table.to_string(),
        ]

    def to_frame(self) -> pd.DataFrame:
        return self.scoreboard

    def record_section(self) -> dict[str, Any]:
        rows = self.rows.copy()
        rows["timestamp"] = [None if pd.isna(t) else pd.Timestamp(t).isoformat() for t in rows["timestamp"]]
        return dict(
            rows=frame_rows(rows),
            slice_columns=self.slice_columns,
            scoreboard=frame_rows(self.scoreboard),
            slices=frame_rows(self.slices),
            windows=frame_rows(self.windows),
            by=self.by,
            every=self.every,
            sample=self.sample,
            seed=self.seed,
            source=self.source,
            timeline=clean(self.timeline),
            alarms=clean(self.alarms),
            notes=self.notes,
            timeseries=self.timeseries,
        )

    @classmethod
    def section_problems(cls, s: Mapping[str, Any], prefix: str = "monitor") -> list[str]:
        """As GateResult.section_problems: ``SECTION``, then each row's slice columns."""
        problems = shape_problems(s, SECTION, prefix)
        if problems:
            return problems
        return shape_problems(s["rows"], Each(Fields({c: "text" for c in s["slice_columns"]})), f"{prefix}.rows")

    @classmethod
    def from_section(cls, run: RunResult, s: Mapping[str, Any]) -> MonitorResult:
        schema = {**ROW_COLUMNS, **{c: "text" for c in s["slice_columns"]}}
        stored = s["rows"]
        if stored and any("digest" not in r for r in stored):  # written before rows kept their digest
            stored = [{"digest": None, **r} for r in stored]
        trace_columns = set(TRACE_COLUMNS)  # absent from records written before rows were read from traces,
        if stored and any(not r.keys() >= trace_columns for r in stored):  # or before they said citations_from
            stored = [{**dict.fromkeys(TRACE_COLUMNS), **r} for r in stored]
        rows = frame(stored, schema)
        rows["timestamp"] = pd.to_datetime(
            [None if t is None else parse_timestamp(t)[0] for t in rows["timestamp"]], utc=True
        )
        return cls(
            run=run,
            rows=rows,
            scoreboard=frame(s["scoreboard"], SCOREBOARD_SCHEMA),
            slices=frame(s["slices"], SLICE_SCHEMA),
            windows=frame(s["windows"], WINDOW_SCHEMA),
            by=list(s["by"]),
            every=s.get("every"),
            sample=s.get("sample"),
            seed=int(s["seed"]),
            source=str(s["source"]),
            timeline=list(s["timeline"]),
            alarms=list(s["alarms"]),
            notes=list(s["notes"]),
            timeseries=str(s.get("timeseries") or ""),
        )

    def audit_section(self, audit: Audit, s: Mapping[str, Any], prefix: str = "monitor") -> None:
        """Check the section against the judged sample: the judged rows are the run's cases with its
        verdicts, each row's pass is its checks', the scoreboard is what the rows give. The rows' checks
        are taken as written: a record keeps the text of judged rows only."""
        rows = self.rows
        judged = rows.loc[rows["sampled"], "row_id"].tolist()
        if not audit.same(f"{prefix}.rows (judged)", sorted(judged), sorted(c.id for c in self.run.suite)):
            return
        again = judge_columns(rows, self.run)
        for axis in ("faithfulness", "citation_correctness"):
            audit.same(f"{prefix}.rows.{axis}", _ints(rows[axis]), _ints(again[axis]), "the judged sample")
        checks = rows[["citation_resolvability", "citation_coverage", "fail_closed"]].all(axis=1) & rows[
            "prompt_grounding"
        ].fillna(True).astype(bool)
        audit.same(f"{prefix}.rows.passed", rows["passed"].tolist(), checks.tolist(), "each row's checks")
        board = scoreboard(rows, self.run.labels)
        for j, (stored, row) in enumerate(zip(s["scoreboard"], board.to_dict("records"))):
            for column in ("metric", "value", "n", "ppi_value", "n_labelled"):
                audit.same(f"{prefix}.scoreboard[{j}].{column}", stored.get(column), row[column], "its rows")
        self._audit_alarms(audit, s, prefix)

    def _audit_alarms(self, audit: Audit, s: Mapping[str, Any], prefix: str) -> None:
        """The alarms follow from the timeline: each band's from its current value (the window's overall
        figure), band and direction; each window's from its bands; the section's from the windows'."""
        overall = self.windows[self.windows["slice"] == ALL]
        figures = {(w, m): v for w, m, v in zip(overall["window"], overall["metric"], overall["value"])}
        rows = dict(zip(overall["window"], overall["rows"]))
        hops = self.hops
        implied = []
        for i, entry in enumerate(s["timeline"]):
            where = f"{prefix}.timeline[{i}]"
            names = [b["metric"] for b in entry["bands"] if RATE_NAME.fullmatch(b["metric"])]
            if names:  # a hop's rates, from the rows' hops
                rates, _ = hop_rates(hops, entry["window"], int(rows.get(entry["window"], 0)), names)
                figures.update({(entry["window"], n): math.nan if v is None else v for n, v in rates.items()})
            for j, band in enumerate(entry["bands"]):
                audit.same(
                    f"{where}.bands[{j}].current",
                    band["current"],
                    figures.get((entry["window"], band["metric"])),
                    "the window's figure",
                )
                audit.same(
                    f"{where}.bands[{j}].alarm", band["alarm"], _band_alarm(band) and not entry["too_few"], "its band"
                )
            alarmed = [b["metric"] for b in entry["bands"] if b["alarm"]]
            audit.same(f"{where}.alarms", entry["alarms"], alarmed, "its bands")
            implied += [[entry["window"], metric] for metric in entry["alarms"]]
        audit.same(f"{prefix}.alarms", [[a["window"], a["metric"]] for a in s["alarms"]], implied, "its timeline")


def _band_alarm(band: Mapping[str, Any]) -> bool:
    """Whether a stored band's current value is out of it in the direction its words say it alarms on."""
    way = next((w for w, words in DIRECTIONS.items() if words == band["direction"]), "both")
    return out_of_band(band["current"], band["low"], band["high"], way)


def _ints(values: pd.Series) -> list[int | None]:
    return [None if pd.isna(v) else int(v) for v in values]


# --------------------------------------------------------------------------- the time series


def _line(
    window: str, part: pd.DataFrame, rows: int, about: Mapping[str, Any], hops: pd.DataFrame, known: set[str]
) -> dict[str, Any]:
    """A window's history line: the monitor's metrics over its rows and, from traces, each hop's rates (also
    for the hops ``known`` from earlier lines) and counts."""
    values, counts = metric_values(part)
    line = dict(kind="monitor", window=window, time=window, rows=rows, metrics=values, n=counts, alarms=[], **about)
    rates, over = hop_rates(hops, window, rows, known)
    if rates:
        values.update(rates)
        counts.update(over)
        mine = hops[(hops["window"] == window) & (hops["slice"] == ALL)]
        line["hops"] = mine.drop(columns=["window", "slice", "group"]).to_dict("records")
    return clean(line)


def watch(
    windows: pd.DataFrame,
    timeseries: str | Path,
    *,
    about: Mapping[str, Any],
    band_window: int = BAND_WINDOW,
    min_rows: int = MIN_ROWS,
    hops: pd.DataFrame | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str]]:
    """(timeline, alarms, notes) of appending each window's overall figures to ``timeseries``: the metrics,
    and each hop's rates and counts (``hops``: ``MonitorResult.hops``). A window that had too few rows is
    compared and appended again once it has enough. A window's band is made of the windows before it in
    time, whatever order the history holds them in; a hop's band, of the lines that hold its rates."""
    hops = frame([], HOP_SCHEMA) if hops is None else hops
    history, notes = read_history(timeseries)
    earlier = [h for h in history if h.get("kind") == "monitor"]
    if len(earlier) < len(history):
        notes.append(
            f"{len(history) - len(earlier)} line(s) of {timeseries} are not monitor windows: left out of the bands"
        )
    usable = sorted(
        (h for h in earlier if not h.get("too_few") and isinstance(h.get("window"), str)), key=lambda h: h["window"]
    )
    complete = {h["window"] for h in usable}
    overall = windows[windows["slice"] == ALL]
    timeline, alarms, lines = [], [], []
    for window, part in overall.groupby("window", sort=True):
        rows = int(part["rows"].iloc[0])
        if window in complete:
            notes.append(f"window {window} is in the history already: not appended again")
            continue
        known = {name for h in usable if h["window"] < window for name in h["metrics"] if RATE_NAME.fullmatch(name)}
        line = _line(window, part, rows, about, hops, known)
        entry: dict[str, Any] = dict(window=window, rows=rows, too_few=rows < min_rows, bands=[], alarms=[])
        if entry["too_few"]:
            line["too_few"] = True  # the timeline says so: fewer than min_rows, not compared, no alarm
        else:
            before = [h for h in usable if h["window"] < window]
            measured = (*METRICS, *rate_metrics(line["metrics"]))
            bands, found, more = compare(
                before, line, window=band_window, min_history=MIN_HISTORY, unit="windows", metrics=measured
            )
            found = [{**a, "window": window, "message": f"{window}: {a['message']}"} for a in found]
            line["alarms"] = [a["metric"] for a in found]
            entry.update(bands=frame_rows(bands), alarms=[a["metric"] for a in found])
            notes += [f"window {window}: {m}" for m in more]
            alarms += found
            usable.append(line)
            complete.add(window)
        timeline.append(entry)
        lines.append(line)
    checked = [history_line(line, timeseries) for line in lines]  # every line checked before the first is appended
    for text in checked:
        append_line(timeseries, text)
    return timeline, alarms, notes


__all__ = ["MonitorResult", "watch", "METRIC_NAMES"]
