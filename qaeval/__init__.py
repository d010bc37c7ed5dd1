"""qaeval: evaluation for retrieval-augmented QA systems that cite their sources.

Every scorer returns a pandas DataFrame; the result objects (RunResult, GateResult, CalibrationResult,
DriftResult) hold those frames, render themselves in notebooks and raise typed errors on demand.
"""

from qaeval.boundary import CaseView, Citation, SUTOutput, SystemAdapter
from qaeval.cases import GoldenCase, Source, Suite, load_suite
from qaeval.errors import (
    BaselineError, DatasetError, DriftAlarm, GateBlocked, JudgeError, JudgeNotTrusted, QaevalError,
    ReportError, UsageError,
)
from qaeval.evaluation import RunResult, evaluate, score_outputs
from qaeval.judging import JudgeClient, JudgeConfig, JudgeRequest, JudgeResponse, OfflineJudge
from qaeval.runner import run_suite

__version__ = "0.1.0"

__all__ = [
    "BaselineError", "CaseView", "Citation", "DatasetError", "DriftAlarm", "GateBlocked", "GoldenCase",
    "JudgeClient", "JudgeConfig", "JudgeError", "JudgeNotTrusted", "JudgeRequest", "JudgeResponse",
    "OfflineJudge", "QaevalError", "ReportError", "RunResult", "SUTOutput", "Source", "Suite",
    "SystemAdapter", "UsageError", "evaluate", "load_suite", "run_suite", "score_outputs",
]
