"""qaeval: evaluation for retrieval-augmented QA systems that cite their sources.

The package is laid out along the path data takes (``tests/test_layers.py`` holds it to that order):

    qaeval.core        errors, files, text, parameters, the result shape, a record's self-audit, DataFrames
    qaeval.data        the golden cases: schema and strict loader, importers, labels, logs, corpus
    qaeval.system      how the system is called: the contract, the worker pool, the reference system
    qaeval.worker      the adapter's worker process, and the process plumbing all user code runs behind
    qaeval.scoring     the four layers (checks, retrieval, judge, trajectory), trials and the metrics
    qaeval.judges      judges: the offline mechanical one, an OpenAI-compatible HTTP one, the generator
    qaeval.host        the process custom judges, generators, checks and hooks run in, and its clients
    qaeval.verdicts    gate, calibration, drift, compare and monitor
    qaeval.proposals   proposed cases from traffic and documents, and accepting them
    qaeval.record      the run record: save, load, check, the runs table
    qaeval.reports     what notebooks and HTML reports draw, and rendering them
    qaeval.commands    what the verbs do: run a suite, score logs, MLflow, export
    qaeval.api         the verbs the CLI and the notebooks share (qaeval.cli, qaeval.notebook)
    qaeval.lowlevel    what the verbs are built from: run_suite, score_outputs, evaluate, the settings

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
    "CaseView": "qaeval.system.contract",
    "Citation": "qaeval.system.contract",
    "SUTOutput": "qaeval.system.contract",
    "SystemAdapter": "qaeval.system.contract",
    "GoldenCase": "qaeval.data.cases",
    "Source": "qaeval.data.cases",
    "Suite": "qaeval.data.cases",
    "load_suite": "qaeval.data.cases",
    "Corpus": "qaeval.data.corpus",
    "Passage": "qaeval.data.corpus",
    "BaselineError": "qaeval.core.errors",
    "BaselineRefused": "qaeval.core.errors",
    "DatasetError": "qaeval.core.errors",
    "DriftAlarm": "qaeval.core.errors",
    "FileAccessError": "qaeval.core.errors",
    "GateBlocked": "qaeval.core.errors",
    "JudgeError": "qaeval.core.errors",
    "JudgeNotTrusted": "qaeval.core.errors",
    "QaevalError": "qaeval.core.errors",
    "RecordError": "qaeval.core.errors",
    "ReportError": "qaeval.core.errors",
    "TierOneFailed": "qaeval.core.errors",
    "UsageError": "qaeval.core.errors",
    "RunResult": "qaeval.scoring.evaluate",
    "AxisVerdict": "qaeval.scoring.judge",
    "JudgeConfig": "qaeval.scoring.judge",
    "JudgeRequest": "qaeval.scoring.judge",
    "JudgeResponse": "qaeval.scoring.judge",
    "load_run": "qaeval.record.read",
    "check": "qaeval.scoring.custom",
    "Sample": "qaeval.scoring.custom",
    "Metric": "qaeval.scoring.metrics",
    "CaseFacts": "qaeval.scoring.metrics",
    "FailReason": "qaeval.scoring.outcomes",
    "run": "qaeval.api",
    "baseline": "qaeval.api",
    "gate": "qaeval.api",
    "calibrate": "qaeval.api",
    "drift": "qaeval.api",
    "monitor": "qaeval.api",
    "score": "qaeval.api",
    "compare": "qaeval.api",
    "MonitorResult": "qaeval.verdicts.monitor",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'qaeval' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
