"""qaeval: evaluation for retrieval-augmented QA systems that cite their sources.

The package is laid out along the path data takes:

    qaeval.data        the golden cases: schema and strict loader, importers, labels
    qaeval.system      the boundary: the contract a system meets, the worker pool that calls it, the
                       reference system and the demo saboteur
    qaeval.scoring     the four layers (checks, retrieval, judge, trajectory) and the metrics
    qaeval.judges      judges: the offline mechanical one and an OpenAI-compatible HTTP one
    qaeval.verdicts    gate, calibration, drift and compare
    qaeval.pipeline    runs a task: the system over the suite, then scoring
    qaeval.record      the run record: save, load, reading baselines
    qaeval.reports     what notebooks and HTML reports draw, and rendering them
    qaeval.api         the verbs the CLI and the notebooks share

Every scorer returns a pandas DataFrame; the result objects (RunResult, GateResult, CalibrationResult,
DriftResult, Comparison) hold those frames, render themselves in notebooks, save themselves as run
records and raise typed errors on demand. Names are imported lazily, so a worker process that only
needs the contract does not pay for pandas.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.2.0"

_EXPORTS = {
    "CaseView": "qaeval.system.contract", "Citation": "qaeval.system.contract",
    "SUTOutput": "qaeval.system.contract", "SystemAdapter": "qaeval.system.contract",
    "GoldenCase": "qaeval.data.cases", "Source": "qaeval.data.cases", "Suite": "qaeval.data.cases",
    "load_suite": "qaeval.data.cases", "Corpus": "qaeval.data.corpus", "Passage": "qaeval.data.corpus",
    "BaselineError": "qaeval.errors", "BaselineRefused": "qaeval.errors", "DatasetError": "qaeval.errors",
    "DriftAlarm": "qaeval.errors", "FileAccessError": "qaeval.errors", "GateBlocked": "qaeval.errors",
    "JudgeError": "qaeval.errors", "JudgeNotTrusted": "qaeval.errors", "QaevalError": "qaeval.errors",
    "RecordError": "qaeval.errors", "ReportError": "qaeval.errors", "TierOneFailed": "qaeval.errors",
    "UsageError": "qaeval.errors",
    "RunResult": "qaeval.scoring.evaluate", "evaluate": "qaeval.pipeline",
    "score_outputs": "qaeval.scoring.evaluate",
    "AxisVerdict": "qaeval.scoring.judge", "JudgeClient": "qaeval.scoring.judge",
    "JudgeConfig": "qaeval.scoring.judge", "JudgeRequest": "qaeval.scoring.judge",
    "JudgeResponse": "qaeval.scoring.judge", "JudgeSettings": "qaeval.scoring.judge",
    "OfflineJudge": "qaeval.judges.offline",
    "run_suite": "qaeval.system.pool",
    "load_run": "qaeval.record",
    "check": "qaeval.scoring.custom", "Sample": "qaeval.scoring.custom", "Metric": "qaeval.scoring.metrics",
    "CaseFacts": "qaeval.scoring.metrics",
    "FailReason": "qaeval.scoring.outcomes",
    "score_logs": "qaeval.api", "MonitorResult": "qaeval.verdicts.monitor",
}

__all__ = sorted(_EXPORTS)


_RESULTS = ("qaeval.scoring", "qaeval.pipeline", "qaeval.record")


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'qaeval' has no attribute {name!r}")
    if module.startswith(_RESULTS):  # results save and draw themselves: the verbs wire that up
        importlib.import_module("qaeval.api")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
