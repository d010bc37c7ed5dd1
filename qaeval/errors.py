"""The exception tree. Every error qaeval raises on purpose descends from QaevalError.

    QaevalError
    ├── UsageError(ValueError)          bad flag, a module:factory that does not resolve   exit 64
    ├── DatasetError(ValueError)        bad cases, labels, baseline or history file        exit 65
    │   └── BaselineError               missing or corrupt baseline
    ├── GateBlocked                     the gate said BLOCK (carries .result)               exit 1
    ├── JudgeNotTrusted                 calibration refused the judge (carries .result)    exit 2
    ├── DriftAlarm                      a metric left its band (carries .result)           exit 3
    ├── JudgeError(RuntimeError)        a judge could not produce a verdict
    └── ReportError(RuntimeError)       a notebook could not be rendered

`exit_code_for` is the one place that maps them to process exit codes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class QaevalError(Exception):
    """Root of every error qaeval raises deliberately."""

    exit_code = 1


class UsageError(QaevalError, ValueError):
    """The caller asked for something that cannot work: a bad option or plugin name."""

    exit_code = 64


@dataclass(frozen=True)
class Problem:
    """One problem found while loading a file: where it is and what is wrong."""

    file: str
    line: int | None
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        return f"{where}: {self.message}"


class DatasetError(QaevalError, ValueError):
    """Input data (cases, labels, a baseline, a history file) is malformed.

    `problems` lists every problem found, each with file and line, so one load reports them all.
    """

    exit_code = 65

    def __init__(self, problems: list[Problem] | str, *, file: str = "<input>") -> None:
        if isinstance(problems, str):
            problems = [Problem(file, None, problems)]
        self.problems = list(problems)
        head = f"{len(self.problems)} problem(s) in the input data"
        super().__init__(head + ":\n" + "\n".join(f"  {p}" for p in self.problems))


class BaselineError(DatasetError):
    """The baseline is missing or unreadable: a hard failure, never a skipped tier."""


class _ResultError(QaevalError):
    def __init__(self, message: str, result: Any) -> None:
        super().__init__(message)
        self.result = result


class GateBlocked(_ResultError):
    """The regression gate blocked. `result` is the GateResult with every failed tier."""

    exit_code = 1


class JudgeNotTrusted(_ResultError):
    """The judge disagrees with human labels on at least one axis. `result` is the CalibrationResult."""

    exit_code = 2


class DriftAlarm(_ResultError):
    """At least one metric left its band. `result` is the DriftResult."""

    exit_code = 3


class JudgeError(QaevalError, RuntimeError):
    """A judge could not produce a verdict (network, parsing, refusal)."""


class ReportError(QaevalError, RuntimeError):
    """A notebook could not be executed or rendered for a reason other than its own verdict."""

    exit_code = 70


def exit_code_for(error: BaseException) -> int:
    """The process exit code for an error; anything unexpected is 70 (internal software error)."""
    if isinstance(error, QaevalError):
        return error.exit_code
    return 70
