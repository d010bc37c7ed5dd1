"""The run record: everything one command knew, in one versioned file a reviewer can read as a diff.

Format ``qaeval-record``, version 3: a JSON object with sorted keys, one case per line.

==============  ==========================================================================================
format, version ``"qaeval-record"``, ``3`` (versions 1 and 2, before qaeval 0.4, are not read: run the
                command again)
kind            ``run``, ``gate``, ``calibrate``, ``drift`` or ``monitor``: which report draws it
baseline        true when written by ``qaeval baseline``: prompts are kept as their sha256 only and the
                fields that change from run to run on an unchanged system (time, commit, latency, logs,
                cache hits) are left out, so re-baselining an unchanged system gives an empty diff
meta            how the run was made: adapter, judge config, isolation, concurrency, executor, k,
                timeout, data folder, time, git commit, qaeval and Python versions
green           tier 1 held (every deterministic check green, no adapter error)
allowed_failing a baseline kept although it was not green (``--allow-failing``)
scoreboard      one object per metric (value, ci_low, ci_high, n, direction, over, PPI columns)
slices          one object per slice, group and metric
labels          the human labels behind the PPI columns, or null
notes           what the run wanted a reader to know
cases           one line per case: ``case`` (the golden case as loaded), ``fingerprint``, ``output``
                (answer, citations, retrieved_ids, abstained, model_was_called, prompt_to_model or
                prompt_sha256, computed_aggregate, error, latency_s, logs, output_fingerprint), ``checks``
                ([check, passed, reason] each), ``retrieval``, ``verdicts`` (each with its quote and
                rationale), ``trajectory``, and what they add up to: ``passed``, ``fail_reasons`` (each
                ``{code, message}``, plus ``name`` for a registered check or metric), ``units`` ({metric: [numerator, denominator]});
                with several trials (``meta.trials`` K > 1), those layers are the first trial's and
                ``trials`` lists the other K - 1, each with the same keys from ``output`` to ``units``
                (and ``custom``); a run of one trial has no ``trials`` key and no meta.trials
gate            (kind gate) the verdict: tiers, metric movements, regressed and new cases, the
                baseline's answers for the cases that matter
calibration     (kind calibrate) label pairs, agreement per axis with intervals, confusion matrices
drift           (kind drift) the history line appended, the series, bands and alarms
monitor         (kind monitor) every logged row's checks (``rows``, one row a line, so that ``qaeval propose``
                can stream them), the scoreboard, slices, windows and alarms; ``cases`` are the judged rows
==============  ==========================================================================================

Missing numbers are ``null``. ``write_record`` writes atomically. Every reader goes through
``qaeval.record.read.run_from_record``, and so through the record's check against itself
(``qaeval.record.check``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qaeval.core.errors import RecordError
from qaeval.core.files import write_atomic
from qaeval.core.frames import clean, frame_rows
from qaeval.core.jsonfile import dumps_canonical
from qaeval.core.results import Result
from qaeval.data.cases import GoldenCase
from qaeval.data.corpus import Passage
from qaeval.record.shape import TRIAL_LAYERS
from qaeval.scoring.evaluate import corpus_excerpt
from qaeval.scoring.index import CaseIndex, CaseRows
from qaeval.scoring.result import RunResult
from qaeval.system.contract import OUTPUT_SCHEMA
from qaeval.verdicts.calibration import CalibrationResult
from qaeval.verdicts.drift import DriftResult
from qaeval.verdicts.gate import GateResult
from qaeval.verdicts.monitor import MonitorResult

FORMAT = "qaeval-record"
VERSION = 3  # 2: fail reasons carry a code (qaeval 0.3); 3: every trial of a case (qaeval 0.4)
TRIAL_KEYS = (*TRIAL_LAYERS, "custom")  # what a case line holds for each trial after its first
LEGACY_BASELINE = "qaeval-baseline/1"  # qaeval 0.1's format, refused by name
VOLATILE_META = ("created", "git_commit", "python")


@dataclass(frozen=True)
class Kind:
    """One kind of record: the result class it holds and the key of the section that class adds."""

    name: str
    result: Any  # the Result subclass (its section_problems and from_section are classmethods)
    section: str | None


KINDS: dict[str, Kind] = {
    k.name: k
    for k in (
        Kind("run", RunResult, None),
        Kind("gate", GateResult, "gate"),
        Kind("calibrate", CalibrationResult, "calibration"),
        Kind("drift", DriftResult, "drift"),
        Kind("monitor", MonitorResult, "monitor"),
    )
}


def _case_line(case: GoldenCase, rows: CaseRows, *, baseline: bool, metrics: list[str], custom: bool) -> dict[str, Any]:
    output = {k: rows.output[k] for k in OUTPUT_SCHEMA if k != "case_id"}
    if baseline:
        prompt = output.pop("prompt_to_model")
        output["prompt_sha256"] = None if prompt is None else hashlib.sha256(prompt.encode()).hexdigest()
        for key in ("latency_s", "logs"):
            output.pop(key)
    verdicts = [
        {k: v for k, v in row.items() if k != "case_id" and not (baseline and k == "cached")} for row in rows.verdicts
    ]
    return clean(
        dict(
            case_id=case.id,
            case=case.to_raw(),
            fingerprint=case.fingerprint,
            output=output,
            checks=[[r["check"], r["passed"], r["reason"]] for r in rows.checks],
            retrieval={k: v for k, v in rows.retrieval.items() if k != "case_id"}
            if rows.retrieval is not None
            else None,
            verdicts=verdicts,
            trajectory=[{k: v for k, v in row.items() if k != "case_id"} for row in rows.trajectory],
            passed=rows.outcome["case_passed"],
            fail_reasons=[r.to_dict() for r in rows.outcome["fail_reasons"]],
            units={m: [rows.units[f"{m}__num"], rows.units[f"{m}__den"]] for m in metrics},
        )
        | ({"custom": [[r["name"], r["passed"], r["reason"]] for r in rows.custom]} if custom else {})
    )


def run_record(run: RunResult, *, baseline: bool = False, allowed_failing: bool = False) -> dict[str, Any]:
    """The record of a run (kind ``run``)."""
    meta = {**run.meta.__dict__, "judge": run.meta.judge.to_dict()}
    left_out = [
        *(VOLATILE_META if baseline else ()),
        *(("trials", "pass_k") if run.trials == 1 else ()),  # a run of one trial is recorded as before trials
        *(("adaptive",) if not run.meta.adaptive else ()),
        *(("adaptive_baseline",) if run.meta.adaptive_baseline is None else ()),
    ]
    for key in left_out:
        meta.pop(key, None)
    corpus = _corpus_section(run)
    names = [m.name for m in run.runs[0].metrics]  # the per-case units of each trial
    indexes = [CaseIndex(r) for r in run.runs]

    def line(case: GoldenCase) -> dict[str, Any]:
        first, *more = (
            _case_line(case, index[case.id], baseline=baseline, metrics=names, custom=bool(run.registered))
            for index in indexes
            if case.id in index
        )
        return first | ({"trials": [{k: v for k, v in m.items() if k in TRIAL_KEYS} for m in more]} if more else {})

    return (
        dict(
            format=FORMAT,
            version=VERSION,
            kind="run",
            baseline=baseline,
            meta=clean(meta),
            green=run.ok,
            allowed_failing=allowed_failing,
            scoreboard=frame_rows(run.scoreboard),
            slices=frame_rows(run.slices),
            labels=frame_rows(run.labels) if run.labels is not None else None,
            notes=list(run.notes),
            cases=[line(case) for case in run.suite.cases],
        )
        | ({"corpus": corpus} if corpus is not None else {})
        | ({"custom": run.registered.to_plain()} if run.registered else {})
    )


def _corpus_section(run: RunResult) -> dict[str, Any] | None:
    """What a record keeps of a run's corpus: its fingerprint and size, and the passages the run touched
    (every corpus case's gold passages, every corpus passage an output named), not the whole corpus."""
    corpus = run.suite.corpus
    if corpus is None:
        return None
    passages = corpus_excerpt(run.suite, run.outputs).values()
    return clean(
        dict(
            fingerprint=corpus.fingerprint,
            size=len(corpus),
            passages=[{"id": p.id, "text": p.text, "title": p.title} for p in passages],
        )
    )


class StoredCorpus(dict):  # type: ignore[type-arg]  # a dict of passages by id; typed by its users
    """The passages a record kept, standing in for the corpus its run was made on (id -> Passage)."""

    def __init__(self, section: Mapping[str, Any], where: str) -> None:
        if not (
            isinstance(section, dict)
            and isinstance(section.get("fingerprint"), str)
            and isinstance(section.get("size"), int)
            and isinstance(section.get("passages"), list)
        ):
            raise RecordError("record is malformed: corpus needs fingerprint, size and passages", file=where)
        try:
            super().__init__((p["id"], Passage(p["id"], p["text"], p.get("title"))) for p in section["passages"])
        except (KeyError, TypeError) as exc:
            raise RecordError(f"record is malformed: a corpus passage ({exc})", file=where) from None
        self.fingerprint, self.size = section["fingerprint"], section["size"]


def to_record(result: Result, *, baseline: bool = False, allowed_failing: bool = False) -> dict[str, Any]:
    """The record of any result: its run, plus the section its kind adds."""
    kind = KINDS.get(result.kind)
    if kind is None or not isinstance(result, kind.result):
        raise TypeError(f"{type(result).__name__} cannot be saved as a run record")
    held: Any = result  # the kind's result class, checked above
    if kind.section is None:
        return run_record(held, baseline=baseline, allowed_failing=allowed_failing)
    record = run_record(held.run, baseline=baseline, allowed_failing=allowed_failing)
    record["kind"] = kind.name
    record[kind.section] = clean(held.record_section())
    return record


ORDER = (
    "format",
    "version",
    "kind",
    "baseline",
    "green",
    "allowed_failing",
    "meta",
    "notes",
    "labels",
    "scoreboard",
    "slices",
    "gate",
    "calibration",
    "drift",
    "corpus",
    "custom",
    "cases",
)


ROWS_LINE = '  "rows": ['  # how a monitor record's row list opens: one row a line follows (qaeval.proposals.traffic)


def dumps_record(record: dict[str, Any]) -> str:
    """A fixed order of sections (what a reviewer reads first comes first, the cases last), keys sorted
    within them, and each case (and each scoreboard and slice row, and each of a monitor's rows) on one
    line, so that a reader can stream a record's rows without parsing the whole file."""
    keys = [k for k in ORDER if k in record] + sorted(k for k in record if k not in ORDER)
    lists: dict[str, tuple[list[Any], str]] = {
        key: (record[key], " ") for key in ("cases", "scoreboard", "slices") if key in record
    }
    ordered = {k: f"@@{k}@@" if k in lists else record[k] for k in keys}
    monitor = record.get("monitor")
    if isinstance(monitor, dict) and isinstance(monitor.get("rows"), list):
        ordered["monitor"] = {**monitor, "rows": "@@monitor.rows@@"}
        lists["monitor.rows"] = (monitor["rows"], "  ")
    text = json.dumps(ordered, indent=1, ensure_ascii=False, allow_nan=False)
    for key, (items, indent) in lists.items():
        block = (
            "[]"
            if not items
            else "[\n" + ",\n".join(indent + " " + dumps_canonical(item) for item in items) + "\n" + indent + "]"
        )
        text = text.replace(json.dumps(f"@@{key}@@"), block, 1)
    return text + "\n"


def write_record(result: Result, path: str | Path, *, baseline: bool = False, allowed_failing: bool = False) -> Path:
    """Write ``result`` as a run record at ``path`` (atomically)."""
    return write_atomic(path, dumps_record(to_record(result, baseline=baseline, allowed_failing=allowed_failing)))
